//! The governed weight cache through real ORT: sessions of the same MatMulNBits model share one
//! packed copy (content key), and a zero budget declines packing (is_packed=false) while the
//! outputs stay byte-identical to the cached path. The packed copy lives in the huge-page weight
//! arena, whose region goes with the last session holding a weight in it.

use rcpu_e2e::onnx::{dtype, Attr, Dim, GraphBuilder};
use rcpu_e2e::stats::PluginStats;
use rcpu_e2e::{ort_with_rcpu, rand_f32, SessionSpec, Tensor};

const K: usize = 200; // not a multiple of the block
const N: usize = 40;
const BLOCK: usize = 32;

fn nbits_model(seed: u64) -> Vec<u8> {
    let kb = K.div_ceil(BLOCK);
    let codes: Vec<u8> = rand_f32(N * kb * BLOCK / 2, seed)
        .iter()
        .map(|x| ((x + 1.0) * 127.9) as u8)
        .collect();
    let scales: Vec<f32> = rand_f32(N * kb, seed + 1)
        .iter()
        .map(|x| 0.01 + x.abs() * 0.05)
        .collect();
    let zp: Vec<u8> = rand_f32(N * kb.div_ceil(2), seed + 2)
        .iter()
        .map(|x| ((x + 1.0) * 127.9) as u8)
        .collect();
    let mut g = GraphBuilder::new("nbits", 17);
    g.input("a", dtype::FLOAT, &[Dim::Sym("m"), Dim::Fixed(K as i64)])
        .initializer_u8("b", &[N as i64, kb as i64, (BLOCK / 2) as i64], &codes)
        .initializer_f32("scales", &[(N * kb) as i64], &scales)
        .initializer_u8("zp", &[(N * kb.div_ceil(2)) as i64], &zp)
        .node(
            "MatMulNBits",
            "com.microsoft",
            "mmnb",
            &["a", "b", "scales", "zp"],
            &["y"],
            &[
                ("K", Attr::Int(K as i64)),
                ("N", Attr::Int(N as i64)),
                ("bits", Attr::Int(4)),
                ("block_size", Attr::Int(BLOCK as i64)),
                ("accuracy_level", Attr::Int(4)),
            ],
        )
        .output("y", dtype::FLOAT);
    g.build()
}

/// (live regions, live bytes) of the plugin's huge-page weight arena.
fn arena(stats: &PluginStats) -> (u64, u64) {
    let j = stats.json().unwrap();
    let a = &j["memory"]["weight_arena"];
    (
        a["regions"].as_u64().expect("weight_arena.regions"),
        a["live_bytes"].as_u64().expect("weight_arena.live_bytes"),
    )
}

fn entries(stats: &PluginStats) -> u64 {
    stats.json().unwrap()["memory"]["weight_cache"]["entries"]
        .as_u64()
        .expect("weight_cache.entries")
}

/// (entries, live bytes) of the governed weight cache.
fn cache(stats: &PluginStats) -> (u64, u64) {
    let j = stats.json().unwrap();
    let c = &j["memory"]["weight_cache"];
    (
        c["entries"].as_u64().expect("weight_cache.entries"),
        c["live_bytes"].as_u64().expect("weight_cache.live_bytes"),
    )
}

/// The tests of this file count the process-wide cache's entries: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Guarantees (entry counts from the plugin's stats, no timing): two sessions of one model hold
/// one packed copy, a different weight is another entry, an entry goes with its last session,
/// lane count and a zero budget (unpacked path, declines counted) do not change the output.
#[test]
fn sessions_share_packed_weights_and_a_zero_budget_is_identical() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ort = ort_with_rcpu();
    let stats = PluginStats::open().unwrap();
    let model = nbits_model(11);
    let a = Tensor::f32(&[3, K as i64], rand_f32(3 * K, 5));

    let base = entries(&stats);
    let arena_base = arena(&stats);
    let s1 = ort
        .session(&model, &SessionSpec::rcpu(&[("threads", "2")]))
        .unwrap();
    let s2 = ort
        .session(&model, &SessionSpec::rcpu(&[("threads", "1")]))
        .unwrap();
    assert_eq!(
        entries(&stats),
        base + 1,
        "two sessions of one model hold one packed copy"
    );
    let (regions, live) = arena(&stats);
    assert!(
        regions >= 1 && live > arena_base.1,
        "the packed copy lives in the huge-page arena: {:?}",
        (regions, live)
    );
    let other = ort
        .session(&nbits_model(12), &SessionSpec::rcpu(&[]))
        .unwrap();
    assert_eq!(
        entries(&stats),
        base + 2,
        "a different weight is a different entry"
    );
    drop(other);
    assert_eq!(
        entries(&stats),
        base + 1,
        "the entry goes with its last session"
    );

    let y1 = s1.run(std::slice::from_ref(&a)).unwrap();
    let y2 = s2.run(std::slice::from_ref(&a)).unwrap();
    assert_eq!(y1, y2, "lane count must not change results");

    drop((s1, s2));
    assert_eq!(
        entries(&stats),
        base,
        "every packed copy released with its sessions"
    );
    assert_eq!(
        arena(&stats),
        arena_base,
        "the arena region is unmapped with the last weight in it"
    );

    // Budget 0 (process-wide): with no packed copy left to share, this session's kernel is
    // refused one and computes from ORT's original weight; the result must be byte-identical.
    let s0 = ort
        .session(&model, &SessionSpec::rcpu(&[("weight_cache_mb", "0")]))
        .unwrap();
    let declines = stats.json().unwrap()["memory"]["weight_cache"]["declines"]
        .as_u64()
        .unwrap();
    assert!(declines >= 1, "the zero budget must decline: {declines}");
    assert_eq!(entries(&stats), base, "nothing cached under a zero budget");
    let y0 = s0.run(std::slice::from_ref(&a)).unwrap();
    assert_eq!(y0, y1, "unpacked path differs from the packed path");
}

/// Provider option `acc4_scales` (accuracy level 4 packs f16 or f32 scales) is part of the cache
/// key: sessions of one model asking differently each hold their own packed copy, in their own
/// format (the f32 copy is larger by 2 bytes per scale), and compute with it, whichever session
/// packed first; sessions asking alike share one copy.
#[test]
fn acc4_scales_sessions_never_share_a_pack() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ort = ort_with_rcpu();
    let stats = PluginStats::open().unwrap();
    // The scales (0.01..0.06, random f32) are f16 normals but not f16-exact: the default packs
    // them as f16, and the two formats give different outputs.
    let model = nbits_model(21);
    let a = Tensor::f32(&[2, K as i64], rand_f32(2 * K, 9));
    // The budget is process-wide: set it, whatever an earlier test left.
    let spec = |scales: &str| {
        SessionSpec::rcpu(&[
            ("threads", "1"),
            ("weight_cache_mb", "256"),
            ("acc4_scales", scales),
        ])
    };
    let scale_count = (N * K.div_ceil(BLOCK)) as u64;

    let (base, base_bytes) = cache(&stats);
    let s16 = ort.session(&model, &spec("f16")).unwrap();
    let (e, bytes16) = cache(&stats);
    assert_eq!(e, base + 1, "the f16 session packs its weight");
    let s32 = ort.session(&model, &spec("f32")).unwrap();
    let (e, bytes_both) = cache(&stats);
    assert_eq!(
        e,
        base + 2,
        "an acc4_scales=f32 session must not share the f16 pack"
    );
    let (d16, d32) = (bytes16 - base_bytes, bytes_both - bytes16);
    assert!(
        d32 >= d16 + 2 * scale_count,
        "the f32 pack holds 4-byte scales: {d32} bytes vs the f16 pack's {d16}"
    );
    let also32 = ort.session(&model, &spec("f32")).unwrap();
    assert_eq!(cache(&stats).0, base + 2, "f32 sessions share one pack");
    let y16 = s16.run(std::slice::from_ref(&a)).unwrap();
    let y32 = s32.run(std::slice::from_ref(&a)).unwrap();
    assert_ne!(y16, y32, "f16 and f32 scales must give different outputs");
    assert_eq!(also32.run(std::slice::from_ref(&a)).unwrap(), y32);
    drop((s16, s32, also32));
    assert_eq!(
        cache(&stats).0,
        base,
        "every pack released with its sessions"
    );

    // The other order: the f32 session packs first, the f16 one must still get f16 scales.
    let t32 = ort.session(&model, &spec("f32")).unwrap();
    let t16 = ort.session(&model, &spec("f16")).unwrap();
    assert_eq!(cache(&stats).0, base + 2, "f16 must not share the f32 pack");
    assert_eq!(t32.run(std::slice::from_ref(&a)).unwrap(), y32);
    assert_eq!(t16.run(std::slice::from_ref(&a)).unwrap(), y16);
}
