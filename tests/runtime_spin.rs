//! Waiting loops yield on an interval, never on every iteration. Bounds come from the measured
//! iteration counters, not from the interval constants.

use rcpu::runtime::{pool_for, Affinity, Par, PoolConfig};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn cfg(threads: usize, blocktime_us: u64) -> PoolConfig {
    PoolConfig {
        threads,
        affinity: Affinity::Physical,
        blocktime_us,
    }
}

fn on_worker() -> bool {
    std::thread::current()
        .name()
        .is_some_and(|n| n.starts_with("rcpu-w"))
}

#[test]
fn caller_waiting_for_straggler_yields_rarely() {
    let pool = pool_for(&cfg(2, 50_000));
    let k0 = pool.counters();
    // The caller's chunks wait (bounded) until a worker has joined; the worker's first chunk
    // then sleeps 5 ms, so the caller finishes first and waits for that straggler.
    for _ in 0..10 {
        let joined = AtomicBool::new(false);
        pool.decode_chunks(16, &|_| {
            if on_worker() {
                if !joined.swap(true, Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(5));
                }
            } else {
                let t0 = Instant::now();
                while !joined.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_millis(500) {
                    std::thread::yield_now();
                }
            }
        });
        let k = pool.counters();
        if k.straggler_spins - k0.straggler_spins > 100_000 {
            break;
        }
    }
    let k = pool.counters();
    let (waits, spins, yields) = (
        k.straggler_waits - k0.straggler_waits,
        k.straggler_spins - k0.straggler_spins,
        k.straggler_yields - k0.straggler_yields,
    );
    assert!(waits > 0 && spins > 0, "the caller waited: {k:?}");
    assert!(yields > 0, "a 5 ms wait does yield at some point: {k:?}");
    assert!(
        yields * 8 <= spins,
        "straggler yields {yields} vs wait iterations {spins}: yielding too often"
    );
}

#[test]
fn spinning_worker_yields_rarely() {
    let pool = pool_for(&cfg(2, 20_000));
    let k0 = pool.counters();
    pool.task_chunks(4, &|_| {});
    // The worker spins for 20 ms, then parks.
    std::thread::sleep(Duration::from_millis(60));
    let k = pool.counters();
    let (iters, yields) = (k.spin_iters - k0.spin_iters, k.spin_yields - k0.spin_yields);
    assert!(iters > 0, "the worker spun: {k:?}");
    assert!(k.parks > k0.parks, "and then parked: {k:?}");
    assert!(
        yields * 8 <= iters,
        "spin yields {yields} vs spin iterations {iters}: yielding too often"
    );
}
