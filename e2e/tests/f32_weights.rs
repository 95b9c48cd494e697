//! Constant f32 weights through real ORT: MatMul and Gemm (transB 0 and 1) prepack B once
//! through the governed weight cache (one pack per weight at session creation, none on later
//! runs; the ledger shows the prepacked routes), and a zero weight budget declines packing
//! (is_packed=false) while the outputs stay bit-identical. ORT's CPU EP is the reference
//! (tolerance as in test_parity_f32.py: 1e-4 relative + 1e-5 of the summed magnitudes).

use rcpu_e2e::onnx::{dtype, Attr, Dim, GraphBuilder};
use rcpu_e2e::stats::PluginStats;
use rcpu_e2e::{ort_with_rcpu, rand_f32, SessionSpec, Tensor};

const K: usize = 67; // not a multiple of any SIMD width
const N: usize = 45;

/// y1 = a @ w1 (MatMul), y2 = Gemm(a, w2^T, c; alpha 0.5, beta 2), y3 = Gemm(a, w3), three
/// different weights.
fn model() -> Vec<u8> {
    let mut g = GraphBuilder::new("f32w", 13);
    g.input("a", dtype::FLOAT, &[Dim::Sym("m"), Dim::Fixed(K as i64)])
        .initializer_f32("w1", &[K as i64, N as i64], &rand_f32(K * N, 1))
        .initializer_f32("w2", &[N as i64, K as i64], &rand_f32(K * N, 2))
        .initializer_f32("c2", &[N as i64], &rand_f32(N, 3))
        .initializer_f32("w3", &[K as i64, N as i64], &rand_f32(K * N, 4))
        .node("MatMul", "", "mm", &["a", "w1"], &["y1"], &[])
        .node(
            "Gemm",
            "",
            "gemm_t",
            &["a", "w2", "c2"],
            &["y2"],
            &[
                ("transB", Attr::Int(1)),
                ("alpha", Attr::Float(0.5)),
                ("beta", Attr::Float(2.0)),
            ],
        )
        .node("Gemm", "", "gemm_n", &["a", "w3"], &["y3"], &[])
        .output("y1", dtype::FLOAT)
        .output("y2", dtype::FLOAT)
        .output("y3", dtype::FLOAT);
    g.build()
}

fn cache(stats: &PluginStats, field: &str) -> u64 {
    stats.json().unwrap()["memory"]["weight_cache"][field]
        .as_u64()
        .unwrap_or_else(|| panic!("weight_cache.{field}"))
}

/// Ledger variants recorded for `op` (with calls > 0).
fn variants(stats: &PluginStats, op: &str) -> Vec<String> {
    let j = stats.json().unwrap();
    j["ledger"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["op"] == op && r["calls"].as_u64().unwrap_or(0) > 0)
        .map(|r| r["variant"].as_str().unwrap().to_string())
        .collect()
}

fn assert_routes(stats: &PluginStats, form: &str) {
    for op in ["MatMul", "Gemm"] {
        let v = variants(stats, op);
        for class in ["gemv-m1", "gemm"] {
            let want = format!("{class}-");
            assert!(
                v.iter()
                    .any(|s| s.contains(&want) && s.ends_with(form) && !s.contains("gemv-n1")),
                "{op}: no {class} {form} route in {v:?}"
            );
        }
        assert!(
            v.iter().all(|s| s.ends_with(form)),
            "{op}: a route other than {form} ran: {v:?}"
        );
    }
}

fn inputs() -> Vec<Tensor> {
    [1usize, 5]
        .iter()
        .map(|&m| Tensor::f32(&[m as i64, K as i64], rand_f32(m * K, 10 + m as u64)))
        .collect()
}

#[test]
fn weights_prepack_once_and_a_zero_budget_is_identical() {
    let ort = ort_with_rcpu();
    let stats = PluginStats::open().unwrap();
    let model = model();
    let reference = ort.session(&model, &SessionSpec::ort(Some(1))).unwrap();

    let packs0 = cache(&stats, "packs");
    let s1 = ort
        .session(&model, &SessionSpec::rcpu(&[("threads", "2")]))
        .unwrap();
    assert_eq!(
        cache(&stats, "packs"),
        packs0 + 3,
        "one pack per weight at session creation"
    );
    stats.reset().unwrap();
    let mut packed_out = vec![];
    for a in inputs() {
        for _ in 0..2 {
            let got = s1.run(std::slice::from_ref(&a)).unwrap();
            let want = reference.run(std::slice::from_ref(&a)).unwrap();
            for (g, w) in got.iter().zip(&want) {
                for (x, y) in g.as_f32().iter().zip(w.as_f32()) {
                    assert!(
                        (x - y).abs() <= 1e-4 * y.abs() + 1e-5 * 8.0 * K as f32,
                        "rcpu {x} vs ORT {y}"
                    );
                }
            }
            packed_out.push(got);
        }
    }
    assert_eq!(
        cache(&stats, "packs"),
        packs0 + 3,
        "runs must not pack again"
    );
    assert_routes(&stats, "prepacked");
    drop(s1);

    // Budget 0 (process-wide) with no packed copy left to share: every weight is declined and
    // computed from ORT's tensor through the same route.
    let declines0 = cache(&stats, "declines");
    let s0 = ort
        .session(&model, &SessionSpec::rcpu(&[("weight_cache_mb", "0")]))
        .unwrap();
    assert_eq!(
        cache(&stats, "declines"),
        declines0 + 3,
        "zero budget declines"
    );
    stats.reset().unwrap();
    let mut unpacked_out = vec![];
    for a in inputs() {
        for _ in 0..2 {
            unpacked_out.push(s0.run(std::slice::from_ref(&a)).unwrap());
        }
    }
    assert_routes(&stats, "unpacked");
    assert_eq!(
        packed_out, unpacked_out,
        "the unpacked path differs from the packed path"
    );
}
