//! What a fused partition holds through real ORT: the buffers of its intermediate values are
//! kept between runs only as far as the process-wide scratch budget allows (a long input's
//! buffers are freed after its run; a short run's are kept and reused, so a steady run allocates
//! nothing), with the same answers either way; its constant copies are counted in the stats
//! while the session lives, and a MatMulNBits node's constant scales, zero points and bias are
//! not among them (the kernel holds them itself, packed or copied).

use rcpu_e2e::compare::{max_scaled_err, rel_l2};
use rcpu_e2e::onnx::{dtype, Attr, Dim, GraphBuilder};
use rcpu_e2e::stats::PluginStats;
use rcpu_e2e::{ort_with_rcpu, rand_f32, Data, SessionSpec, Tensor};

const W: usize = 64;

/// `y = Sigmoid(x * Sigmoid(x)) * c`: two inner values (`s`, `t`, `u`) the fused node's frame
/// holds, and one constant (`c`) rcpu copies.
fn model() -> Vec<u8> {
    let c: Vec<f32> = (0..W).map(|i| 0.5 + i as f32 / 64.0).collect();
    let mut g = GraphBuilder::new("fused_memory", 17);
    g.input("x", dtype::FLOAT, &[Dim::Sym("m"), Dim::Fixed(W as i64)])
        .initializer_f32("c", &[W as i64], &c)
        .node("Sigmoid", "", "sig0", &["x"], &["s"], &[])
        .node("Mul", "", "mul0", &["x", "s"], &["t"], &[])
        .node("Sigmoid", "", "sig1", &["t"], &["u"], &[])
        .node("Mul", "", "mul1", &["u", "c"], &["y"], &[])
        .output("y", dtype::FLOAT);
    g.build()
}

/// The tests of this file read process-wide figures and set process-wide budgets: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn field(stats: &PluginStats, group: &str, key: &str) -> u64 {
    stats.json().unwrap()["memory"][group][key]
        .as_u64()
        .unwrap_or_else(|| panic!("memory.{group}.{key} missing"))
}

fn input(m: usize, seed: u64) -> Tensor {
    Tensor::f32(&[m as i64, W as i64], rand_f32(m * W, seed))
}

/// Largest |a - b| over 1e-5 |b| (+ 1e-8): at most 1 means within 1e-5 relative.
fn max_rel(a: &[f32], b: &[f32]) -> f32 {
    max_scaled_err(a, b, 1e-5, 1e-8)
}

/// Guarantees (from the plugin's stats, no timing): with a 1 MiB scratch budget a 4 MiB
/// intermediate is not kept past its run (what the frame keeps stays within the budget), a
/// small run keeps its buffers and a repeat allocates nothing, the answers match ORT's CPU EP
/// (within 1e-5 relative: rcpu's own Sigmoid) and do not depend on what was kept, and the
/// constant copy is counted while its session lives.
#[test]
fn fused_values_are_kept_within_the_scratch_budget() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ort = ort_with_rcpu();
    let stats = PluginStats::open().unwrap();
    let consts0 = field(&stats, "fused_constants", "live_bytes");
    let cpu = ort.session(&model(), &SessionSpec::ort(Some(1))).unwrap();
    let s = ort
        .session(
            &model(),
            &SessionSpec::rcpu(&[("threads", "1"), ("scratch_cache_mb", "1")]),
        )
        .unwrap();
    assert!(
        field(&stats, "fused_constants", "live_bytes") >= consts0 + (W * 4) as u64,
        "the session's copy of 'c' is counted"
    );

    // Long: 16384 rows, 4 MiB per intermediate.
    let long = input(16384, 3);
    let released0 = field(&stats, "fused_values", "released_bytes");
    let y_long = s.run(std::slice::from_ref(&long)).unwrap();
    let released = field(&stats, "fused_values", "released_bytes") - released0;
    let kept = field(&stats, "fused_values", "kept_bytes");
    assert!(
        released >= 4 << 20,
        "a 4 MiB intermediate must not be kept under a 1 MiB budget (released {released})"
    );
    assert!(kept <= 1 << 20, "kept {kept} bytes past a 1 MiB budget");
    let want = cpu.run(std::slice::from_ref(&long)).unwrap();
    let e = max_rel(y_long[0].as_f32(), want[0].as_f32());
    assert!(
        e <= 1.0,
        "long run vs ORT: error {e} in units of 1e-5 relative"
    );

    // Short: 8 rows (2 KiB intermediates) are kept; a repeat allocates nothing.
    let short = input(8, 4);
    let y1 = s.run(std::slice::from_ref(&short)).unwrap();
    assert!(
        field(&stats, "fused_values", "kept_bytes") > 0,
        "a short run's buffers are kept"
    );
    let fresh = field(&stats, "fused_values", "fresh_allocations");
    let y2 = s.run(std::slice::from_ref(&short)).unwrap();
    assert_eq!(
        field(&stats, "fused_values", "fresh_allocations"),
        fresh,
        "a steady run must reuse the kept buffers"
    );
    assert_eq!(y1, y2, "the answer must not depend on reused buffers");
    let want = cpu.run(std::slice::from_ref(&short)).unwrap();
    let e = max_rel(y1[0].as_f32(), want[0].as_f32());
    assert!(
        e <= 1.0,
        "short run vs ORT: error {e} in units of 1e-5 relative"
    );

    // The long input again, after its buffers were freed: the same answer.
    let y_again = s.run(std::slice::from_ref(&long)).unwrap();
    assert_eq!(y_again, y_long);

    drop(s);
    assert_eq!(
        field(&stats, "fused_constants", "live_bytes"),
        consts0,
        "the constant copy goes with its session"
    );
    assert_eq!(
        field(&stats, "fused_values", "kept_bytes"),
        0,
        "a dropped session keeps no value buffers"
    );
}

const K: usize = 200; // not a multiple of the block
const N: usize = 40;
const BLOCK: usize = 32;

/// A 4-bit, block-`BLOCK`, accuracy-level-0 MatMulNBits node's attributes for `k` x `n`.
fn nbits_attrs(k: usize, n: usize) -> [(&'static str, Attr); 5] {
    [
        ("K", Attr::Int(k as i64)),
        ("N", Attr::Int(n as i64)),
        ("bits", Attr::Int(4)),
        ("block_size", Attr::Int(BLOCK as i64)),
        ("accuracy_level", Attr::Int(0)),
    ]
}

/// `y = Sigmoid(MatMulNBits(a, b, scales, zp) + bias)`, 4-bit, block 32, accuracy level 0 (so
/// the fused node computes in f32, as ORT does).
fn nbits_model() -> Vec<u8> {
    let kb = K.div_ceil(BLOCK);
    let byte = |x: &f32| ((x + 1.0) * 127.9) as u8;
    let codes: Vec<u8> = rand_f32(N * kb * BLOCK / 2, 21).iter().map(byte).collect();
    let scales: Vec<f32> = rand_f32(N * kb, 22)
        .iter()
        .map(|x| 0.01 + x.abs() * 0.05)
        .collect();
    let zp: Vec<u8> = rand_f32(N * kb.div_ceil(2), 23).iter().map(byte).collect();
    let mut g = GraphBuilder::new("nbits_fused", 17);
    g.input("a", dtype::FLOAT, &[Dim::Sym("m"), Dim::Fixed(K as i64)])
        .initializer_u8("b", &[N as i64, kb as i64, (BLOCK / 2) as i64], &codes)
        .initializer_f32("scales", &[(N * kb) as i64], &scales)
        .initializer_u8("zp", &[(N * kb.div_ceil(2)) as i64], &zp)
        .initializer_f32("bias", &[N as i64], &rand_f32(N, 24))
        .node(
            "MatMulNBits",
            "com.microsoft",
            "mmnb",
            &["a", "b", "scales", "zp", "", "bias"],
            &["h"],
            &nbits_attrs(K, N),
        )
        .node("Sigmoid", "", "sig", &["h"], &["y"], &[])
        .output("y", dtype::FLOAT);
    g.build()
}

/// Guarantees (from the plugin's stats): a fused MatMulNBits keeps no frame copy of its
/// constant scales, zero points or bias, whether its weight packed (default budget) or not (a
/// zero weight budget: the kernel computes from its own copies and ORT's codes); both answers
/// match ORT's CPU EP (1e-5 relative) and each other.
#[test]
fn a_fused_matmulnbits_keeps_no_copy_of_its_scales() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ort = ort_with_rcpu();
    let stats = PluginStats::open().unwrap();
    let model = nbits_model();
    let a = Tensor::f32(&[3, K as i64], rand_f32(3 * K, 25));
    let want = ort
        .session(&model, &SessionSpec::ort(Some(1)))
        .unwrap()
        .run(std::slice::from_ref(&a))
        .unwrap();
    let mut answers = Vec::new();
    for budget in [None, Some("0")] {
        let before = field(&stats, "fused_constants", "live_bytes");
        let mut opts = vec![("threads", "1")];
        if let Some(b) = budget {
            opts.push(("weight_cache_mb", b));
        }
        let s = ort.session(&model, &SessionSpec::rcpu(&opts)).unwrap();
        let held = field(&stats, "fused_constants", "live_bytes") - before;
        // Unpacked, the kernel reads ORT's codes per run, so the plan keeps B (64-byte aligned:
        // up to 63 bytes of padding); nothing else either way.
        let codes = (N * K.div_ceil(BLOCK) * BLOCK / 2) as u64;
        let allowed = if budget.is_some() {
            codes..codes + 64
        } else {
            0..1
        };
        assert!(
            allowed.contains(&held),
            "weight budget {budget:?}: the fused plan copied {held} bytes of constants, \
             expected {allowed:?} (the MatMulNBits kernel holds its scales, zero points and \
             bias itself)"
        );
        let y = s.run(std::slice::from_ref(&a)).unwrap();
        let e = max_rel(y[0].as_f32(), want[0].as_f32());
        assert!(
            e <= 1.0,
            "weight budget {budget:?} vs ORT: error {e} in units of 1e-5 relative"
        );
        answers.push(y);
    }
    assert_eq!(answers[0], answers[1], "packed and unpacked paths differ");
    // Later sessions in this process get the default weight budget back.
    drop(
        ort.session(&model, &SessionSpec::rcpu(&[("weight_cache_mb", "4096")]))
            .unwrap(),
    );
}

const VOCAB: usize = 70; // not a multiple of a column group
const HID: usize = 96; // three blocks of 32

/// A tied embedding as the model builder makes it: `GatherBlockQuantized(emb_codes, ids,
/// scales)` feeding `MatMulNBits(h, lm_codes, scales)`, with `emb_codes` `[VOCAB, HID * bits /
/// 8]` and `lm_codes` `[VOCAB, blocks, BLOCK * bits / 8]` two initializers of the same bytes
/// (ORT's folding of the builder's Reshape), the scales one initializer read by both; `bits` 4,
/// or 8 (the builder's `k_quant_mixed` / `k_quant_last` tie the embedding to an 8-bit lm_head).
/// `flip` changes one byte of `emb_codes`, so the tables differ.
fn tied_model(flip: bool, bits: usize) -> Vec<u8> {
    let kb = HID / BLOCK;
    let row = HID * bits / 8;
    let byte = |x: &f32| ((x + 1.0) * 127.9) as u8;
    let codes: Vec<u8> = rand_f32(VOCAB * row, 31).iter().map(byte).collect();
    let mut emb = codes.clone();
    if flip {
        emb[row * 5 + 3] ^= 0x10;
    }
    let scales: Vec<f32> = rand_f32(VOCAB * kb, 32)
        .iter()
        .map(|x| 0.01 + x.abs() * 0.05)
        .collect();
    let mut g = GraphBuilder::new("tied", 17);
    g.input("ids", dtype::INT64, &[Dim::Fixed(1), Dim::Sym("s")])
        .initializer_u8("emb_codes", &[VOCAB as i64, row as i64], &emb)
        .initializer_u8(
            "lm_codes",
            &[VOCAB as i64, kb as i64, (BLOCK * bits / 8) as i64],
            &codes,
        )
        .initializer_f32("scales", &[VOCAB as i64, kb as i64], &scales)
        .node(
            "GatherBlockQuantized",
            "com.microsoft",
            "embed",
            &["emb_codes", "ids", "scales"],
            &["h"],
            &[
                ("bits", Attr::Int(bits as i64)),
                ("block_size", Attr::Int(BLOCK as i64)),
                ("gather_axis", Attr::Int(0)),
                ("quantize_axis", Attr::Int(1)),
            ],
        )
        .node(
            "MatMulNBits",
            "com.microsoft",
            "lm_head",
            &["h", "lm_codes", "scales"],
            &["logits"],
            &{
                let mut a = nbits_attrs(HID, VOCAB);
                a[2].1 = Attr::Int(bits as i64);
                a
            },
        )
        .output("h", dtype::FLOAT)
        .output("logits", dtype::FLOAT);
    g.build()
}

fn ledger_variant(stats: &PluginStats, op: &str) -> Vec<String> {
    let j = stats.json().unwrap();
    j["ledger"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["op"] == op)
        .map(|r| r["variant"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// Guarantees: in a fused partition, a GatherBlockQuantized whose table is the very codes of a
/// packed MatMulNBits weight reads them from that weight (ledger variant `scalar-tied`), so the
/// plan keeps only the shared scales (no copy of the codes); its rows are bit for bit ORT's,
/// including zeros for out-of-range ids and negative ids, and the logits match ORT's (relative
/// L2 1e-4, accuracy level 0). A table that differs in one byte is not shared (its codes are copied) and still
/// gives ORT's rows. 4-bit codes, and 8-bit ones (kept whole in the packed groups).
#[test]
fn a_tied_embedding_reads_the_packed_lm_head() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ort = ort_with_rcpu();
    let stats = PluginStats::open().unwrap();
    let ids = Tensor {
        shape: vec![1, 6],
        data: Data::I64(vec![0, 5, 69, -1, 70, -71]),
    };
    let scales_bytes = (VOCAB * HID / BLOCK * 4) as u64;
    for (flip, bits) in [(false, 4), (true, 4), (false, 8), (true, 8)] {
        let codes_bytes = (VOCAB * HID * bits / 8) as u64;
        let model = tied_model(flip, bits);
        let want = ort
            .session(&model, &SessionSpec::ort(Some(1)))
            .unwrap()
            .run(std::slice::from_ref(&ids))
            .unwrap();
        let before = field(&stats, "fused_constants", "live_bytes");
        let s = ort
            .session(&model, &SessionSpec::rcpu(&[("threads", "1")]))
            .unwrap();
        let held = field(&stats, "fused_constants", "live_bytes") - before;
        stats.reset().unwrap();
        let got = s.run(std::slice::from_ref(&ids)).unwrap();
        assert_eq!(
            got[0], want[0],
            "flip {flip} bits {bits}: the gathered rows must be ORT's"
        );
        let e = rel_l2(got[1].as_f32(), want[1].as_f32());
        assert!(
            e <= 1e-4,
            "flip {flip} bits {bits}: logits vs ORT rel L2 {e}"
        );
        let variants = ledger_variant(&stats, "GatherBlockQuantized");
        let (kept, variant) = if flip {
            (scales_bytes + codes_bytes, "scalar")
        } else {
            (scales_bytes, "scalar-tied")
        };
        assert_eq!(variants, [variant], "flip {flip} bits {bits}");
        // Each copy is 64-byte aligned: up to 63 bytes of padding per copy.
        assert!(
            (kept..kept + 128).contains(&held),
            "flip {flip} bits {bits}: the plan holds {held} bytes of constants, expected {kept} \
             (+ padding)"
        );
    }
}
