//! rcpu-bench's model generator against real ORT: the MatMulNBits layout it writes (packing, low
//! nibble first, scales, zero points) is what ORT computes with, checked against a reference
//! dequantization; and the bench binary end to end on a small model.

use rcpu_e2e::bench::gen::Spec;
use rcpu_e2e::bench::model::ModelInfo;
use rcpu_e2e::compare::rel_l2;
use rcpu_e2e::onnx::ModelProto;
use rcpu_e2e::{Data, Ort, SessionSpec, Tensor};

use prost::Message;

/// Held by every test here that runs rcpu sessions in this process: one of them counts rcpu's
/// ledger calls across its runs, which another test's rcpu runs would add to.
static RCPU_IN_PROCESS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// y = x W^T from the generated initializers, dequantized here by the documented layout.
fn reference(model: &[u8], x: &[f32], k: usize, n: usize, block: usize) -> Vec<f32> {
    let g = ModelProto::decode(model).unwrap().graph.unwrap();
    let get = |name: &str| {
        g.initializer
            .iter()
            .find(|t| t.name == name)
            .unwrap()
            .raw_data
            .clone()
    };
    let (b, s, zp) = (
        get("B0"),
        get("scales0"),
        g.initializer
            .iter()
            .find(|t| t.name == "zp0")
            .map(|t| t.raw_data.clone()),
    );
    let scales: Vec<f32> = s
        .chunks(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let kb = k.div_ceil(block);
    (0..n)
        .map(|row| {
            (0..k)
                .map(|kk| {
                    let (blk, off) = (kk / block, kk % block);
                    let byte = b[(row * kb + blk) * block / 2 + off / 2];
                    let q = if off % 2 == 0 { byte & 15 } else { byte >> 4 } as f32;
                    let z = match &zp {
                        Some(z) => {
                            let zb = z[row * kb.div_ceil(2) + blk / 2];
                            (if blk % 2 == 0 { zb & 15 } else { zb >> 4 }) as f32
                        }
                        None => 8.0,
                    };
                    x[kk] * (q - z) * scales[row * kb + blk]
                })
                .sum()
        })
        .collect()
}

#[test]
fn generated_matmulnbits_runs_on_ort_and_matches_reference_dequantization() {
    let ort = Ort::get();
    for spec in [
        "nbits:k=96,n=40,layers=1,block=32,acc=0",
        "nbits:k=64,n=24,layers=1,block=16,acc=0,sym",
    ] {
        let s = Spec::parse(spec).unwrap();
        let g = s.generate();
        let info = ModelInfo::parse(&g.bytes).unwrap();
        assert_eq!(info.ops, vec!["MatMulNBits".to_string()]);
        let sess = ort
            .session(&g.bytes, &SessionSpec::ort(Some(1)))
            .unwrap_or_else(|e| panic!("{spec}: {e}"));
        let x = rcpu_e2e::rand_f32(s.k, 5);
        let y = sess
            .run(&[Tensor::f32(&[1, s.k as i64], x.clone())])
            .unwrap();
        assert_eq!(y[0].shape, vec![1, s.n as i64]);
        let block = if spec.contains("block=16") { 16 } else { 32 };
        let err = rel_l2(y[0].as_f32(), &reference(&g.bytes, &x, s.k, s.n, block));
        assert!(
            err < 1e-5,
            "{spec}: ORT disagrees with the generator's layout, rel L2 {err}"
        );
    }
}

#[test]
fn generated_chains_with_k_ne_n_f32_matmul_and_glue_run_on_ort() {
    let ort = Ort::get();
    for spec in [
        "nbits:k=64,n=96,layers=3,block=32,acc=4",
        "matmul:k=32,n=48,layers=2,m=3",
        "glue:op=mix,n=64,layers=3,m=2",
        "glue:op=skipnorm,n=48,layers=5",
        "glue:op=mul,n=40,layers=7",
        "glue:op=sigmoid,n=33,layers=4",
    ] {
        let s = Spec::parse(spec).unwrap();
        let sess = ort
            .session(&s.generate().bytes, &SessionSpec::ort(Some(1)))
            .unwrap_or_else(|e| panic!("{spec}: {e}"));
        let y = sess
            .run(&[Tensor::f32(
                &[s.m as i64, s.k as i64],
                rcpu_e2e::rand_f32(s.m * s.k, 1),
            )])
            .unwrap();
        let out = if s.layers % 2 == 1 { s.n } else { s.k };
        assert_eq!(y[0].shape, vec![s.m as i64, out as i64], "{spec}");
        let v = y[0].as_f32();
        let rms = (v.iter().map(|x| x * x).sum::<f32>() / v.len() as f32).sqrt();
        assert!(
            rms.is_finite() && rms > 1e-2 && rms < 1e2,
            "{spec}: activations drift across layers (rms {rms})"
        );
    }
}

#[test]
fn bench_binary_compares_a_small_model_and_says_what_did_not_run() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rcpu-bench"))
        .args([
            "compare",
            "--gen",
            "nbits:k=64,n=64,layers=2,block=32,acc=4",
            "--rounds",
            "6",
            "--iters",
            "3",
        ])
        .args(["--warmup", "1", "--threads", "1"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("parity: rcpu vs ORT"), "{text}");
    assert!(text.contains("null_b_over_a"), "{text}");
    assert!(
        text.contains("process model: each arm runs in its own worker process"),
        "{text}"
    );
    // Whether rcpu claims MatMulNBits or not, the route line must say one or the other.
    assert!(
        text.contains("MatMulNBits: variant=") || text.contains("MatMulNBits: route did not run"),
        "{text}"
    );
    assert!(
        text.contains("HEADLINE") || text.contains("steady state NOT REACHED"),
        "{text}"
    );
}

#[test]
fn bench_binary_gap_sweep_writes_a_plot_and_bad_flags_exit_2() {
    let svg = std::env::temp_dir().join(format!("rcpu-bench-test-{}.svg", std::process::id()));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rcpu-bench"))
        .args([
            "gap",
            "--gen",
            "nbits:k=64,n=64,layers=1,block=32,acc=4",
            "--sweep",
            "0,200",
            "--tokens",
            "5",
        ])
        .args(["--threads", "1", "--svg", svg.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("cpu ms/tok") && text.contains("VmHWM"),
        "{text}"
    );
    let plot = std::fs::read_to_string(&svg).unwrap();
    let _ = std::fs::remove_file(&svg);
    assert!(
        plot.starts_with("<svg") && plot.matches("<polyline").count() == 4,
        "two panels x two arms: {plot}"
    );

    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_rcpu-bench"))
        .args(["compare", "--bogus"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unexpected argument '--bogus'"));
}

#[test]
fn generated_qlinear_chains_feed_8bit_inputs_and_spread_outputs() {
    let ort = Ort::get();
    for spec in [
        "qlinear:k=64,n=48,layers=2,m=3",
        "qlinear:k=64,n=48,m=2,a=u8,b=u8,percol",
        "qlinear:k=40,n=24,m=5,a=i8,b=i8",
    ] {
        let s = Spec::parse(spec).unwrap();
        let g = s.generate();
        let info = ModelInfo::parse(&g.bytes).unwrap();
        assert_eq!(info.ops, vec!["QLinearMatMul".to_string()], "{spec}");
        let feeds = info.inputs_for(s.m, 1).unwrap();
        assert!(
            matches!(feeds[0].data, rcpu_e2e::Data::U8(_) | rcpu_e2e::Data::I8(_)),
            "{spec}: the input must be fed as 8-bit"
        );
        let sess = ort
            .session(&g.bytes, &SessionSpec::ort(Some(1)))
            .unwrap_or_else(|e| panic!("{spec}: {e}"));
        let y = sess.run(&feeds).unwrap();
        let out = if s.layers % 2 == 1 { s.n } else { s.k };
        assert_eq!(y[0].shape, vec![s.m as i64, out as i64], "{spec}");
        let ints = rcpu_e2e::bench::model::OutputParts::of(&y).ints;
        let distinct: std::collections::BTreeSet<i64> = ints.iter().copied().collect();
        assert!(
            distinct.len() > ints.len().min(40) / 2,
            "{spec}: outputs collapse to {} distinct values",
            distinct.len()
        );
    }
}

#[test]
fn bench_binary_compares_a_qlinear_model_exactly() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rcpu-bench"))
        .args(["compare", "--gen", "qlinear:k=64,n=80,m=3,percol"])
        .args([
            "--rounds",
            "4",
            "--iters",
            "3",
            "--warmup",
            "1",
            "--threads",
            "1",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("parity (integer outputs, 240 elements): rcpu vs ORT max |diff| = 0"),
        "{text}"
    );
    assert!(text.contains("QLinearMatMul: variant="), "{text}");
}

/// A two-layer Qwen-shaped LLM (vocab 1000, acc 0, 64 positions) as `llm_model::write` writes
/// it: the model's bytes and its genai_config.json (`tag` names the scratch directory).
fn small_llm(tag: &str) -> (Vec<u8>, serde_json::Value) {
    use rcpu_e2e::bench::gen::Kind;
    let s = Spec::parse("llm:preset=qwen2-0.5b,layers=2,vocab=1000,acc=0,ctx=64").unwrap();
    let Kind::Llm(l) = &s.kind else {
        panic!("not an llm spec")
    };
    let dir = std::env::temp_dir().join(format!("rcpu-llm-{tag}-{}", std::process::id()));
    let m = rcpu_e2e::bench::llm_model::write(l, &dir, "model.onnx").unwrap();
    let bytes = std::fs::read(&m.path).unwrap();
    let cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("genai_config.json")).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (bytes, cfg)
}

/// A tiny genai-shaped LLM (Qwen2-0.5B layer shapes, 2 layers, vocab 1000, acc 0): ORT runs it,
/// rcpu's logits match ORT's (prefill, then a decode step fed the prefill's presents), and every
/// MatMulNBits, GroupQueryAttention, norm and GatherBlockQuantized (the tied embedding) node ran
/// on rcpu (the ledger counts each call); no f32 embedding table is stored.
#[test]
fn generated_llm_matches_ort_and_runs_its_heavy_nodes_on_rcpu() {
    use rcpu_e2e::bench::llm_model::{step_feeds, Kv};
    let _one = RCPU_IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    let (bytes, cfg) = small_llm("test");
    assert_eq!(cfg["model"]["decoder"]["num_hidden_layers"], 2);
    assert_eq!(cfg["model"]["vocab_size"], 1000);
    let info = ModelInfo::parse(&bytes).unwrap();
    let inits = ModelProto::decode(bytes.as_slice())
        .unwrap()
        .graph
        .unwrap()
        .initializer;
    assert!(
        info.ops.iter().any(|o| o == "GatherBlockQuantized")
            && !inits.iter().any(|t| t.name == "embed_tokens"),
        "tied embedding must be GatherBlockQuantized, with no table: {:?}",
        info.ops
    );
    let ort = rcpu_e2e::ort_with_rcpu();
    let theirs = ort.session(&bytes, &SessionSpec::ort(Some(1))).unwrap();
    let ours = ort
        .session(&bytes, &SessionSpec::rcpu(&[("threads", "2")]))
        .unwrap();
    let stats = rcpu_e2e::stats::PluginStats::open().unwrap();
    let ops = [
        "MatMulNBits",
        "GroupQueryAttention",
        "SimplifiedLayerNormalization",
        "SkipSimplifiedLayerNormalization",
        "GatherBlockQuantized",
    ];
    let before: Vec<u64> = ops.iter().map(|op| stats.calls(op).unwrap()).collect();
    let pair_calls = || -> u64 {
        stats.json().unwrap()["ledger"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["op"] == "MatMulNBits")
            .filter(|r| r["variant"].as_str().unwrap().ends_with("-pair"))
            .map(|r| r["calls"].as_u64().unwrap())
            .sum()
    };
    let pairs_before = pair_calls();
    // The (Sigmoid, Mul) calls the ledger books inside pair steps.
    let in_pair = || -> (u64, u64) {
        let json = stats.json().unwrap();
        let rows = json["ledger"].as_array().unwrap();
        let of = |op: &str| -> u64 {
            rows.iter()
                .filter(|r| r["op"] == op && r["variant"] == "in-swiglu-pair")
                .map(|r| r["calls"].as_u64().unwrap())
                .sum()
        };
        (of("Sigmoid"), of("Mul"))
    };
    let in_pair_before = in_pair();
    let prefill = step_feeds(&info, 5, 0, 1000, 3, Kv::Copy).unwrap();
    let (a, r) = (ours.run(&prefill).unwrap(), theirs.run(&prefill).unwrap());
    assert_eq!(r[0].shape, vec![1, 5, 1000]);
    assert_eq!(r[1].shape, vec![1, 2, 5, 64]);
    let err = rel_l2(a[0].as_f32(), r[0].as_f32());
    assert!(err <= 1e-4, "prefill logits: rel L2 {err}");
    // Decode: one token after the reference presents.
    let mut step = step_feeds(&info, 1, 5, 1000, 4, Kv::Copy).unwrap();
    for (f, p) in step.iter_mut().skip(2).zip(r.iter().skip(1)) {
        *f = p.clone();
    }
    let (a, r) = (ours.run(&step).unwrap(), theirs.run(&step).unwrap());
    assert_eq!(r[0].shape, vec![1, 1, 1000]);
    let err = rel_l2(a[0].as_f32(), r[0].as_f32());
    assert!(err <= 1e-4, "decode logits: rel L2 {err}");
    // Per run: 5 MatMulNBits per layer + lm_head, one GQA per layer, one SimplifiedLN (layer 0),
    // a SkipSimplifiedLN after attention in each layer, before layer 1 and the final norm, and
    // the tied embedding's GatherBlockQuantized (over the lm_head's int4 weight) once.
    let want = [2 * (5 * 2 + 1), 2 * 2, 2, 2 * 4, 2];
    for ((op, b), w) in ops.iter().zip(before).zip(want) {
        let ran = stats.calls(op).unwrap() - b;
        assert_eq!(ran, w, "{op} ran {ran} times on rcpu, want {w}");
    }
    // Both runs took each layer's SwiGLU MLP as one pair step: its gate and up MatMulNBits
    // count as pair calls (2 of the 5 per layer), and its Sigmoid and Muls ran inside it.
    let in_pair_now = in_pair();
    assert_eq!(
        (
            in_pair_now.0 - in_pair_before.0,
            in_pair_now.1 - in_pair_before.1
        ),
        (2 * 2, 2 * 2 * 2),
        "the Sigmoid and Muls run inside the pair steps: {}",
        stats.json().unwrap()["ledger"]
    );
    let pairs = pair_calls() - pairs_before;
    assert_eq!(
        pairs,
        2 * 2 * 2,
        "pair calls: {}",
        stats.json().unwrap()["ledger"]
    );
    // Every other op of the graph ran on rcpu too, but the int64 shape arithmetic of the mask
    // subgraph and the embedding's constant Reshape (ORT folds it into an initializer); the
    // Sigmoid and Muls of each layer as the pair step's (route `in-swiglu-pair`).
    let skip = ["ReduceSum", "Sub", "Cast", "Shape", "Gather", "Reshape"];
    for op in info.ops.iter().filter(|o| !skip.contains(&o.as_str())) {
        assert!(stats.calls(op).unwrap() > 0, "{op} never ran on rcpu");
    }
}

/// The KV cache as onnxruntime-genai hands it over with `past_present_share_buffer: true` (what
/// its builder writes for GroupQueryAttention models, and what the generated genai_config.json
/// says): one buffer per layer's keys and values, the past input and the pre-allocated present
/// output at once. A prefill and three decode steps, on ORT and on rcpu, each both ways: the
/// shared buffers end up holding exactly the rows the copied presents hold (so the step wrote
/// them in place), the logits of every step match the copy run's (the attention read the same
/// past) and ORT's within 1e-4 (accuracy_level 0).
#[test]
fn shared_kv_cache_matches_copied_presents_on_ort_and_rcpu() {
    use rcpu_e2e::bench::llm_model::{session_alias, step_feeds, Kv};
    let _one = RCPU_IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    let (bytes, cfg) = small_llm("kv");
    assert_eq!(cfg["search"]["past_present_share_buffer"], true);
    let info = ModelInfo::parse(&bytes).unwrap();
    let ort = rcpu_e2e::ort_with_rcpu();
    let (cap, prompt, steps, head, kv_heads) = (64usize, 5usize, 3usize, 64usize, 2usize);
    let mut logits: Vec<Vec<Vec<f32>>> = vec![];
    for spec in [
        SessionSpec::ort(Some(1)),
        SessionSpec::rcpu(&[("threads", "2")]),
    ] {
        let sess = ort.session(&bytes, &spec).unwrap();
        let alias = session_alias(&sess, Kv::Shared { capacity: cap });
        assert_eq!(alias.iter().flatten().count(), 4, "{alias:?}");
        // Copied: each step's presents become the next step's past.
        let mut feeds = step_feeds(&info, prompt, 0, 1000, 3, Kv::Copy).unwrap();
        // Shared: the same buffers every step.
        let mut shared =
            step_feeds(&info, prompt, 0, 1000, 3, Kv::Shared { capacity: cap }).unwrap();
        let mut per_step = vec![];
        for step in 0..=steps {
            let total = prompt + step;
            let copied = sess.run(&feeds).unwrap();
            let outs = sess.run_aliased(&mut shared, &alias).unwrap();
            assert!(outs[1..].iter().all(Option::is_none));
            let (a, b) = (outs[0].as_ref().unwrap().as_f32(), copied[0].as_f32());
            let err = rel_l2(a, b);
            assert!(
                err <= 1e-6,
                "step {step}: shared against copied logits, rel L2 {err}"
            );
            // Every cache's first `total` rows per head: the copied present's rows.
            for (buf, present) in shared[2..].iter().zip(&copied[1..]) {
                let (buf, present) = (buf.as_f32(), present.as_f32());
                for h in 0..kv_heads {
                    let rows = h * total * head..(h + 1) * total * head;
                    let at = h * cap * head;
                    assert_eq!(
                        &buf[at..at + total * head],
                        &present[rows],
                        "step {step}, kv head {h}: the shared buffer lacks the present rows"
                    );
                }
            }
            per_step.push(b.to_vec());
            // The next token: a fixed id (the greedy one is not what this checks).
            let next = |len: usize| {
                vec![
                    Tensor {
                        shape: vec![1, 1],
                        data: Data::I64(vec![7 + step as i64]),
                    },
                    Tensor {
                        shape: vec![1, len as i64],
                        data: Data::I64(vec![1; len]),
                    },
                ]
            };
            let mut f = next(total + 1);
            f.extend(copied.into_iter().skip(1));
            feeds = f;
            let mut g = next(total + 1);
            g.extend(shared.drain(2..));
            shared = g;
        }
        logits.push(per_step);
    }
    for (step, (r, a)) in logits[0].iter().zip(&logits[1]).enumerate() {
        let err = rel_l2(a, r);
        assert!(err <= 1e-4, "step {step}: rcpu against ORT, rel L2 {err}");
    }
}

/// `rcpu-bench llm` on a Qwen-shaped model at accuracy level 0 with 64 positions, caching its
/// models under `cache`, with `args` (separated by spaces) after the spec.
fn llm_bench(cache: &std::path::Path, args: &str) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_rcpu-bench"))
        .env("RCPU_BENCH_MODELS", cache)
        .args(["llm", "--gen", "llm:preset=qwen2-0.5b,acc=0,ctx=64"])
        .args(args.split_whitespace())
        .output()
        .unwrap()
}

/// `rcpu-bench llm` end to end on a one-layer model: every case gets parity (which passes), a headline with its
/// null band, the bandwidth fraction, rcpu's counters and a profile naming rcpu's nodes; the model
/// lands in the cache with its genai_config.json.
#[test]
fn bench_binary_runs_llm_decode_generate_and_prefill() {
    let cache = std::env::temp_dir().join(format!("rcpu-llm-cache-{}", std::process::id()));
    let out = llm_bench(
        &cache,
        "--layers 1 --vocab 500 --past 4 --tokens 3 --prompt 5 --rounds 2 --iters 2 --warmup 1 \
         --profile-iters 1 --threads 1",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let cfgs: Vec<bool> = std::fs::read_dir(&cache)
        .map(|d| {
            d.flatten()
                .map(|e| e.path().join("genai_config.json").exists())
                .collect()
        })
        .unwrap_or_default();
    let _ = std::fs::remove_dir_all(&cache);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        cfgs == [true],
        "one cached model with its genai_config.json: {cfgs:?}"
    );
    for case in ["decode past=4", "generate prompt=4 tokens=3", "prefill 5"] {
        assert!(text.contains(&format!("HEADLINE {case}")), "{case}: {text}");
    }
    assert_eq!(text.matches("parity: logits rel L2").count(), 3, "{text}");
    // Each arm's logits travel as a file of f32 (the worker's `floats_file`): a misread file
    // fails parity. Seen failing with the bytes read big-endian.
    assert!(
        text.lines()
            .filter(|l| l.starts_with("parity: logits rel L2"))
            .all(|l| l.ends_with(" OK")),
        "{text}"
    );
    assert!(text.contains("parity: greedy ids"), "{text}");
    assert!(
        text.contains("null band") && text.contains("of read bw"),
        "{text}"
    );
    assert!(text.contains("decode_dispatches="), "{text}");
    // The lane probe ran after every round: a finite round trip on two CPUs, NaN on one.
    let rts: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("lane round trip after each round"))
        .collect();
    assert_eq!(rts.len(), 3, "{text}");
    // The arms' CPUs as the header gives them ("cpus=[0, 1]"): two or more, a finite figure.
    let two_cpus = text
        .split_once("cpus=[")
        .and_then(|(_, rest)| rest.split_once(']'))
        .is_some_and(|(list, _)| list.contains(','));
    assert!(rts.iter().all(|l| l.contains("NaN") != two_cpus), "{rts:?}");
    assert!(
        text.lines().any(|l| l.contains("GroupQueryAttention")
            && l.contains("Rcpu")
            && l.contains("us/run")),
        "profile must show rcpu's GQA: {text}"
    );
    // compare feeds ramps, not an LLM's inputs: it refuses llm specs before generating anything.
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_rcpu-bench"))
        .args(["compare", "--gen", "llm:preset=qwen2-0.5b"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("rcpu-bench llm --gen"));
    // A case longer than the rotary caches is refused before any model is generated.
    let long = std::process::Command::new(env!("CARGO_BIN_EXE_rcpu-bench"))
        .args([
            "llm",
            "--gen",
            "llm:preset=qwen2-0.5b,ctx=64",
            "--past",
            "100",
        ])
        .output()
        .unwrap();
    assert_eq!(long.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&long.stderr).contains("ctx=64"));
}

/// `rcpu-bench llm --kv shared` end to end on a one-layer model: decode and generate run with the
/// shared KV cache (every worker reports the capacity it ran, and the bench refuses a mismatch),
/// parity passes, and the header and the cases say so.
#[test]
fn bench_binary_runs_llm_with_the_shared_kv_cache() {
    let cache = std::env::temp_dir().join(format!("rcpu-llm-kv-cache-{}", std::process::id()));
    let out = llm_bench(
        &cache,
        "--layers 1 --vocab 500 --past 4 --tokens 3 --mode decode,generate --kv shared --rounds 1 \
         --iters 2 --warmup 1 --profile-iters 0 --threads 1",
    );
    let _ = std::fs::remove_dir_all(&cache);
    assert_shared_kv_run(&out);
}

/// A `--mode decode,generate --past 4 --tokens 3 --kv shared` run of a 64-position model
/// succeeded, each case with the shared cache, a headline, and logits parity that passed.
fn assert_shared_kv_run(out: &std::process::Output) {
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("kv=shared"), "{text}");
    for case in ["decode past=4", "generate prompt=4 tokens=3"] {
        assert!(
            text.lines().any(|l| l.starts_with(&format!("== {case}"))
                && l.ends_with(" kv=shared (64 positions) ==")),
            "{case}: {text}"
        );
        assert!(text.contains(&format!("HEADLINE {case}")), "{case}: {text}");
    }
    let parity: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("parity: logits rel L2"))
        .collect();
    assert!(
        parity.len() == 2 && parity.iter().all(|l| l.ends_with(" OK")),
        "{text}"
    );
}

/// `rcpu-bench llm DIR` on an onnxruntime-genai folder in the model builder's form: the weights
/// in a side file (external data), the past inputs' KV heads and head size symbolic (the builder
/// leaves the head size so; genai_config.json gives both). Decode and generate with the shared KV
/// cache pass parity, and the bytes a token reads, counted from the graph, are the generator's
/// own count for the same model. A model file, or a folder with --layers, is refused.
#[test]
fn bench_binary_runs_llm_on_a_genai_folder_in_the_builders_form() {
    use rcpu_e2e::bench::gen_llm::Llm;
    use rcpu_e2e::onnx::{DimValue, StringStringEntryProto, EXTERNAL};
    let l = Llm::parse("s", "preset=qwen2-0.5b,layers=1,vocab=500,acc=0,ctx=64").unwrap();
    let dir = std::env::temp_dir().join(format!("rcpu-llm-folder-{}", std::process::id()));
    let written = rcpu_e2e::bench::llm_model::write(&l, &dir, "model.onnx").unwrap();
    let mut model = ModelProto::decode(std::fs::read(&written.path).unwrap().as_slice()).unwrap();
    let g = model.graph.as_mut().unwrap();
    let mut side = vec![];
    for t in g
        .initializer
        .iter_mut()
        .filter(|t| t.raw_data.len() >= 1024)
    {
        let entry = |key: &str, value: String| StringStringEntryProto {
            key: key.into(),
            value,
        };
        t.external_data = vec![
            entry("location", "model.onnx.data".into()),
            entry("offset", side.len().to_string()),
            entry("length", t.raw_data.len().to_string()),
        ];
        t.data_location = EXTERNAL;
        side.append(&mut t.raw_data);
    }
    let mut symbolic = 0;
    for i in g.input.iter_mut() {
        if !i.name.starts_with("past_key_values.") {
            continue;
        }
        let shape = i.r#type.as_mut().unwrap().tensor_type.as_mut().unwrap();
        let dims = &mut shape.shape.as_mut().unwrap().dim;
        for (d, name) in [(1, "num_kv_heads"), (3, "head_size")] {
            dims[d].value = Some(DimValue::DimParam(name.into()));
            symbolic += 1;
        }
    }
    assert_eq!(symbolic, 4);
    let small = model.encode_to_vec();
    assert!(small.len() < side.len() / 10, "the weights moved out");
    std::fs::write(dir.join("model.onnx"), small).unwrap();
    std::fs::write(dir.join("model.onnx.data"), side).unwrap();
    let json = dir.join("out.json");
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_rcpu-bench"))
            .arg("llm")
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&[
        dir.to_str().unwrap(),
        "--mode",
        "decode,generate",
        "--kv",
        "shared",
        "--past",
        "4",
        "--tokens",
        "3",
        "--rounds",
        "1",
        "--iters",
        "2",
        "--warmup",
        "1",
        "--profile-iters",
        "0",
        "--threads",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let doc: Option<serde_json::Value> = std::fs::read(&json)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let refused = [
        run(&[&written.path, "--mode", "decode"]),
        run(&[dir.to_str().unwrap(), "--layers", "2"]),
    ];
    let _ = std::fs::remove_dir_all(&dir);
    assert_shared_kv_run(&out);
    assert!(text.contains("genai folder"), "{text}");
    assert_eq!(
        doc.unwrap()["weight_bytes_per_token"].as_u64(),
        Some(written.weight_bytes)
    );
    for r in &refused {
        assert_eq!(r.status.code(), Some(2), "{r:?}");
        assert!(
            String::from_utf8_lossy(&r.stderr).contains("folder"),
            "{r:?}"
        );
    }
}

/// Tag names of an SVG document in order, checking that every element is closed in order (a
/// minimal well-formedness parse); returns the names of the opened elements.
fn svg_elements(doc: &str) -> Result<Vec<String>, String> {
    let (mut stack, mut seen) = (vec![], vec![]);
    let mut rest = doc;
    while let Some(open) = rest.find('<') {
        let close = rest[open..].find('>').ok_or("unterminated tag")? + open;
        let tag = &rest[open + 1..close];
        if let Some(name) = tag.strip_prefix('/') {
            match stack.pop() {
                Some(top) if top == name.trim() => {}
                other => return Err(format!("</{name}> closes {other:?}")),
            }
        } else {
            let name = tag
                .split_whitespace()
                .next()
                .unwrap_or("")
                .trim_end_matches('/');
            seen.push(name.to_string());
            if !tag.ends_with('/') {
                stack.push(name.to_string());
            }
        }
        rest = &rest[close + 1..];
    }
    if !stack.is_empty() {
        return Err(format!("unclosed {stack:?}"));
    }
    Ok(seen)
}

/// `rcpu-bench demo` on a tiny generated LLM (2 layers, vocab 1000): parity, the per-arm table,
/// the HEADLINE line with its null band and the steady verdict beside it, rcpu's ledger naming
/// the tied embedding's GatherBlockQuantized, and a well-formed SVG with one line per arm and one
/// point per decode step. No timing assertions.
#[test]
fn bench_binary_demo_prints_table_headline_and_writes_the_plot() {
    let tmp = std::env::temp_dir().join(format!("rcpu-demo-test-{}", std::process::id()));
    let svg = tmp.join("plot").join("latency.svg");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rcpu-bench"))
        .env("RCPU_BENCH_MODELS", tmp.join("models"))
        .args(["demo", "--layers", "2", "--vocab", "1000", "--prompt", "8"])
        .args(["--tokens", "4", "--rounds", "2", "--threads", "1"])
        .args(["--svg", svg.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let plot = std::fs::read_to_string(&svg);
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("vocab=1000 tied emb=q4"), "{text}");
    assert!(text.contains("parity: last position's logits"), "{text}");
    assert!(text.contains("parity: greedy ids"), "{text}");
    for col in ["prefill tok/s", "decode tok/s", "cpu ms/tok", "peak RSS MB"] {
        assert!(text.contains(col), "table lacks '{col}': {text}");
    }
    for arm in ["ort ", "rcpu ", "null "] {
        let row = text
            .lines()
            .find(|l| l.starts_with(arm) && !l.contains("pre/dec"));
        let cells = row
            .map(|r| r.split_whitespace().skip(1).count())
            .unwrap_or(0);
        assert_eq!(cells, 6, "row for {arm}: {row:?}\n{text}");
    }
    let headline = text
        .lines()
        .find(|l| l.starts_with("HEADLINE decode: ORT/rcpu = "))
        .unwrap_or_else(|| panic!("no headline: {text}"));
    assert!(
        headline.contains("(null band [") && headline.contains("steady state"),
        "{headline}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("rcpu ran") && l.contains("GatherBlockQuantized")),
        "{text}"
    );
    let plot = plot.expect("the SVG was written where --svg said");
    let elems = svg_elements(&plot).unwrap_or_else(|e| panic!("malformed SVG ({e}): {plot}"));
    assert_eq!(elems.first().map(String::as_str), Some("svg"), "{plot}");
    let lines: Vec<&str> = plot.split("<polyline").skip(1).collect();
    assert_eq!(lines.len(), 3, "one line per arm: {plot}");
    for l in lines {
        let pts = l
            .split("points='")
            .nth(1)
            .and_then(|p| p.split('\'').next());
        let n = pts.map(|p| {
            p.split_whitespace()
                .filter(|xy| {
                    xy.split(',')
                        .all(|v| v.parse::<f64>().is_ok_and(f64::is_finite))
                })
                .count()
        });
        assert_eq!(n, Some(4), "one point per decode step: {l}");
    }
}
