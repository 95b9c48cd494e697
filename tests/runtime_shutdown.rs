//! Dropping the last handle of a pool joins its workers (one test: threads are per process).

use rcpu::runtime::{pool_for, pool_stats, Affinity, Par, PoolConfig};
use std::sync::atomic::{AtomicUsize, Ordering};

fn rcpu_threads() -> usize {
    rcpu::abi::os::live_threads()
        .iter()
        .filter(|(_, n)| n.starts_with("rcpu-w"))
        .count()
}

#[test]
fn last_handle_drop_joins_workers() {
    let cfg = PoolConfig {
        threads: 4,
        affinity: Affinity::Physical,
        blocktime_us: 5_000,
    };
    let a = pool_for(&cfg);
    let b = pool_for(&cfg);
    let hits = AtomicUsize::new(0);
    a.decode_chunks(100, &|_| {
        hits.fetch_add(1, Ordering::Relaxed);
    });
    assert_eq!(hits.load(Ordering::Relaxed), 100);
    assert_eq!(rcpu_threads(), 3);
    drop(a);
    assert_eq!(rcpu_threads(), 3, "one handle left: the pool lives");
    assert_eq!(pool_stats().as_array().unwrap().len(), 1);
    // Workers are spinning (blocktime 5 ms) right now; a second pool parks at once.
    let c = pool_for(&PoolConfig {
        blocktime_us: 0,
        ..cfg.clone()
    });
    c.task_chunks(10, &|_| {});
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(rcpu_threads(), 6);
    drop(b);
    // No sleep: `drop` must have joined the workers before returning.
    assert_eq!(rcpu_threads(), 3);
    drop(c);
    assert_eq!(rcpu_threads(), 0);
    assert_eq!(pool_stats().as_array().unwrap().len(), 0);
    // The registry starts a fresh pool afterwards.
    let d = pool_for(&cfg);
    assert_eq!(rcpu_threads(), 3);
    drop(d);
    assert_eq!(rcpu_threads(), 0);
}
