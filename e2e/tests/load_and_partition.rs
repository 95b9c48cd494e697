//! The plugin loads in stock ORT through the C API, lists one device, creates sessions with
//! options, claims what it implements (mixed partition), and reports bad input cleanly.

use rcpu_e2e::compare::max_scaled_err;
use rcpu_e2e::onnx::{dtype::FLOAT, Attr, Dim, GraphBuilder};
use rcpu_e2e::stats::PluginStats;
use rcpu_e2e::{ort_with_rcpu, rand_f32, SessionSpec, Tensor, EP_NAME};

fn mixed_model() -> Vec<u8> {
    let mut g = GraphBuilder::new("mixed", 17);
    g.input("x", FLOAT, &[Dim::Sym("m"), Dim::Fixed(8)])
        .input("b", FLOAT, &[Dim::Fixed(8)])
        .initializer_f32("w", &[8, 5], &rand_f32(40, 7))
        .initializer_f32("w2", &[5, 3], &rand_f32(15, 8))
        .initializer_f32("c", &[3], &rand_f32(3, 9))
        .node("Add", "", "add0", &["x", "b"], &["t0"], &[])
        .node("Abs", "", "abs0", &["t0"], &["t1"], &[])
        .node("MatMul", "", "mm0", &["t1", "w"], &["t2"], &[])
        .node("Softsign", "", "ss0", &["t2"], &["t3"], &[])
        .node(
            "Gemm",
            "",
            "gemm0",
            &["t3", "w2", "c"],
            &["y"],
            &[("alpha", Attr::Float(0.5))],
        )
        .output("y", FLOAT);
    g.build()
}

#[test]
fn one_device_listed_with_vendor() {
    let ort = ort_with_rcpu();
    let devs: Vec<_> = ort
        .devices()
        .unwrap()
        .into_iter()
        .filter(|(n, _, _)| n == EP_NAME)
        .collect();
    assert_eq!(devs.len(), 1, "exactly one rcpu device: {devs:?}");
    assert_eq!(devs[0].1, "rcpu");
}

/// The ledger is process-wide and the tests of this file run in parallel: tests that run ops
/// hold this lock so ledger deltas count only their own calls.
static LEDGER: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn mixed_partition_runs_and_matches_ort() {
    let _ledger = LEDGER.lock().unwrap_or_else(|e| e.into_inner());
    let ort = ort_with_rcpu();
    let model = mixed_model();
    let stats = PluginStats::open().unwrap();
    let ours = ort
        .session(&model, &SessionSpec::rcpu(&[("threads", "2")]))
        .unwrap();
    let theirs = ort.session(&model, &SessionSpec::ort(Some(1))).unwrap();
    let before: Vec<u64> = ["Add", "MatMul", "Gemm"]
        .iter()
        .map(|op| stats.calls(op).unwrap())
        .collect();
    for m in [1i64, 3, 17] {
        let x = Tensor::f32(&[m, 8], rand_f32(m as usize * 8, m as u64));
        let b = Tensor::f32(&[8], rand_f32(8, 99));
        let a = ours.run(&[x.clone(), b.clone()]).unwrap();
        let r = theirs.run(&[x, b]).unwrap();
        assert_eq!(a[0].shape, r[0].shape);
        let err = max_scaled_err(a[0].as_f32(), r[0].as_f32(), 1e-5, 1e-6);
        assert!(err <= 1.0, "m={m}: scaled error {err}");
    }
    // The claimed ops really ran on rcpu (the ledger counts each call); Abs and Softsign are not
    // rcpu ops, so the partition is mixed.
    for (op, b) in ["Add", "MatMul", "Gemm"].iter().zip(before) {
        assert_eq!(
            stats.calls(op).unwrap() - b,
            3,
            "{op} should have run 3 times on rcpu"
        );
    }
    // The bench's timed runs release the outputs unread: the run still happens, bad feeds still
    // fail.
    let before = stats.calls("MatMul").unwrap();
    let x = Tensor::f32(&[2, 8], rand_f32(16, 5));
    let b = Tensor::f32(&[8], rand_f32(8, 6));
    ours.run_discard(&[x.clone(), b]).unwrap();
    assert_eq!(stats.calls("MatMul").unwrap() - before, 1);
    assert!(
        ours.run_discard(&[x]).is_err(),
        "one input of two must be refused"
    );
    assert_eq!(stats.calls("Softsign").unwrap(), 0);
}

#[test]
fn bad_provider_options_fail_session_creation_naming_the_key() {
    let ort = ort_with_rcpu();
    let model = mixed_model();
    for (k, v) in [
        ("bogus", "1"),
        ("threads", "abc"),
        ("affinity", "banana"),
        ("blocktime_us", "-3"),
    ] {
        let err = match ort.session(&model, &SessionSpec::rcpu(&[(k, v)])) {
            Ok(_) => panic!("{k}={v} must fail session creation"),
            Err(e) => e,
        };
        assert!(
            err.contains(&format!("'{k}'")),
            "error for {k}={v} does not name the key: {err}"
        );
    }
}

#[test]
fn runtime_shape_error_names_the_node() {
    let _ledger = LEDGER.lock().unwrap_or_else(|e| e.into_inner());
    let ort = ort_with_rcpu();
    let mut g = GraphBuilder::new("bad", 17);
    g.input("a", FLOAT, &[Dim::Sym("m"), Dim::Sym("k1")])
        .input("b", FLOAT, &[Dim::Sym("k2"), Dim::Sym("n")])
        .node("MatMul", "", "the_matmul", &["a", "b"], &["y"], &[])
        .output("y", FLOAT);
    let s = ort.session(&g.build(), &SessionSpec::rcpu(&[])).unwrap();
    let err = s
        .run(&[
            Tensor::f32(&[2, 3], vec![0.0; 6]),
            Tensor::f32(&[4, 5], vec![0.0; 20]),
        ])
        .expect_err("K mismatch must be an error");
    assert!(
        err.contains("the_matmul"),
        "error does not name the node: {err}"
    );
    // The session still works after the error.
    let ok = s
        .run(&[
            Tensor::f32(&[2, 3], vec![1.0; 6]),
            Tensor::f32(&[3, 1], vec![1.0; 3]),
        ])
        .unwrap();
    assert_eq!(ok[0].as_f32(), &[3.0, 3.0]);
}

#[test]
fn stats_json_has_every_section() {
    let _ = ort_with_rcpu();
    let j = PluginStats::open().unwrap().json().unwrap();
    for key in ["version", "isa", "ledger", "pools", "memory"] {
        assert!(j.get(key).is_some(), "stats JSON lacks '{key}': {j}");
    }
}
