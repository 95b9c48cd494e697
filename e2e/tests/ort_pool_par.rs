//! `RCPU_PAR=ort` (issue 17): rcpu's chunks run on ORT's intra-op pool through
//! `KernelContext_ParallelFor` instead of rcpu's lanes. The outputs must be the lanes' outputs,
//! bit for bit (the chunks are the same, only who runs them changes), and the chunks must really
//! run on ORT's pool threads: on a model whose nodes are all rcpu's, ORT's pool threads burn CPU
//! only when they run rcpu's chunks.
//!
//! Its own test binary: it sets `RCPU_PAR` in the process environment between sessions (rcpu
//! reads it when a session creates its EP).

use std::collections::HashSet;

use rcpu_e2e::bench::conditions::threads;
use rcpu_e2e::bench::gen::Spec;
use rcpu_e2e::{ort_with_rcpu, rand_f32, SessionSpec, Tensor};

/// Outputs of `runs` runs' last, and the CPU seconds the session's own non-rcpu threads (ORT's
/// intra-op pool, 3 threads: the caller and 2 workers) used during the runs.
fn run(spec: &str, par_ort: bool, runs: usize) -> (Vec<f32>, f64) {
    let s = Spec::parse(spec).unwrap();
    let model = s.generate().bytes;
    let before: HashSet<u32> = threads().into_iter().map(|t| t.0).collect();
    if par_ort {
        std::env::set_var("RCPU_PAR", "ort");
    } else {
        std::env::remove_var("RCPU_PAR");
    }
    let mut ss = SessionSpec::rcpu(&[("threads", "2")]);
    ss.intra_op_threads = Some(3);
    let session = ort_with_rcpu().session(&model, &ss).unwrap();
    std::env::remove_var("RCPU_PAR");
    let pool = |ts: &[(u32, String, f64)]| -> f64 {
        ts.iter()
            .filter(|t| !before.contains(&t.0) && !t.1.starts_with("rcpu-w"))
            .map(|t| t.2)
            .sum()
    };
    let x = Tensor::f32(&[s.m as i64, s.k as i64], rand_f32(s.m * s.k, 11));
    let cpu0 = pool(&threads());
    let mut y = Vec::new();
    for _ in 0..runs {
        y = session.run(std::slice::from_ref(&x)).unwrap()[0]
            .as_f32()
            .to_vec();
    }
    let cpu = pool(&threads()) - cpu0;
    (y, cpu)
}

#[test]
fn chunks_on_orts_pool_give_the_lanes_outputs() {
    for spec in [
        "nbits:k=2048,n=2048,layers=2,block=32,acc=4,m=1",
        "nbits:k=512,n=1024,layers=1,block=32,acc=0,m=16",
        "matmul:k=256,n=512,layers=2,m=64",
        "mixed:k=512,n=512,layers=2,block=32,acc=4,m=1",
    ] {
        let (lanes, _) = run(spec, false, 3);
        let (ort, _) = run(spec, true, 3);
        assert_eq!(lanes.len(), ort.len(), "{spec}");
        let same = lanes
            .iter()
            .zip(&ort)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{spec}: ORT's pool gave other outputs than the lanes");
    }
    // All-rcpu model: ORT's pool threads work only when they run rcpu's chunks (beyond what
    // they spin after a run, the lanes arm's figure). 600 runs: 0.11-0.12 s of pool CPU with
    // RCPU_PAR=ort, 0-0.022 s without, measured (200 runs once gave 0.048 s, under the 0.05 s
    // bound below).
    let spec = "nbits:k=4096,n=4096,layers=2,block=32,acc=4,m=1";
    let (_, lanes_cpu) = run(spec, false, 600);
    let (_, ort_cpu) = run(spec, true, 600);
    eprintln!("CPU of ORT's pool threads over 600 runs: lanes {lanes_cpu:.4} s, RCPU_PAR=ort {ort_cpu:.4} s");
    assert!(
        ort_cpu > 0.05 && ort_cpu > 2.0 * lanes_cpu,
        "ORT's pool threads did no work with RCPU_PAR=ort ({ort_cpu} s; {lanes_cpu} s without)"
    );
}
