//! Sessions with the same options share one set of worker lanes: three sessions with
//! threads=2 start exactly one worker thread (the calling thread is the other lane), and once
//! idle that worker parks and uses (almost) no CPU. When the sessions go, the worker is joined.

use std::time::Duration;

use rcpu::abi::os::live_threads;
use rcpu_e2e::onnx::{dtype::FLOAT, Dim, GraphBuilder};
use rcpu_e2e::{ort_with_rcpu, rand_f32, SessionSpec, Tensor};

/// CPU time a thread has run, in ns resolution (/proc/self/task/TID/schedstat, first field).
fn thread_cpu_time(tid: i32) -> Duration {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).expect("schedstat");
    Duration::from_nanos(
        s.split_whitespace()
            .next()
            .and_then(|x| x.parse().ok())
            .expect("runtime ns"),
    )
}

/// (tid, name) of every live thread of this process whose name starts with `rcpu-`.
fn rcpu_threads() -> Vec<(i32, String)> {
    live_threads()
        .into_iter()
        .filter(|(_, n)| n.starts_with("rcpu-"))
        .collect()
}

#[test]
fn three_sessions_one_worker_that_parks_when_idle() {
    let ort = ort_with_rcpu();
    let mut g = GraphBuilder::new("mm", 17);
    g.input("a", FLOAT, &[Dim::Sym("m"), Dim::Fixed(256)])
        .initializer_f32("w", &[256, 512], &rand_f32(256 * 512, 3))
        .node("MatMul", "", "mm", &["a", "w"], &["y"], &[])
        .output("y", FLOAT);
    let model = g.build();
    assert!(
        rcpu_threads().is_empty(),
        "no rcpu thread before the first session"
    );
    let spec = SessionSpec::rcpu(&[("threads", "2"), ("blocktime_us", "200")]);
    let sessions: Vec<_> = (0..3)
        .map(|_| ort.session(&model, &spec).unwrap())
        .collect();
    let a = Tensor::f32(&[64, 256], rand_f32(64 * 256, 4));
    for s in &sessions {
        for _ in 0..5 {
            s.run(std::slice::from_ref(&a)).unwrap();
        }
    }
    let threads = rcpu_threads();
    assert_eq!(
        threads.len(),
        1,
        "threads=2 means the caller plus one worker, shared: {threads:?}"
    );
    assert_eq!(threads[0].1, "rcpu-w0");

    // Idle: after the blocktime the worker parks; over 500 ms it must stay (nearly) at zero CPU.
    std::thread::sleep(Duration::from_millis(20));
    let tid = threads[0].0;
    let before = thread_cpu_time(tid);
    std::thread::sleep(Duration::from_millis(500));
    let used = thread_cpu_time(tid) - before;
    println!(
        "idle worker CPU over 500 ms: {:.3} ms",
        used.as_secs_f64() * 1e3
    );
    assert!(
        used < Duration::from_millis(5),
        "idle worker used {used:?} of CPU in 500 ms"
    );

    drop(sessions);
    assert!(
        rcpu_threads().is_empty(),
        "the worker is joined with the last session"
    );
}
