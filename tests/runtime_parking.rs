//! Idle workers park and cost (next to) no CPU; parked workers are woken for every job.

use rcpu::abi::os::thread_cpu_time;
use rcpu::runtime::{pool_for, Affinity, Lanes, Par, PoolConfig};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn cfg(threads: usize, blocktime_us: u64) -> PoolConfig {
    PoolConfig {
        threads,
        affinity: Affinity::Physical,
        blocktime_us,
    }
}

fn workers_cpu(pool: &Lanes) -> Duration {
    pool.worker_tids()
        .iter()
        .map(|&t| thread_cpu_time(t).expect("per-thread CPU time from /proc"))
        .sum()
}

/// Parks happen, and an idle window of 200 ms costs the workers almost no CPU.
fn check_idle(pool: &Lanes, settle: Duration) {
    pool.decode_chunks(64, &|_| std::hint::black_box(()));
    pool.task_chunks(64, &|_| std::hint::black_box(()));
    std::thread::sleep(settle);
    let k = pool.counters();
    assert!(k.parks > 0, "workers parked: {k:?}");
    let before = workers_cpu(pool);
    std::thread::sleep(Duration::from_millis(200));
    let grown = workers_cpu(pool) - before;
    // A spinning worker would burn ~200 ms per thread here; a parked one burns nothing. The
    // bound is generous (scheduler accounting granularity, a stray wake-up).
    assert!(
        grown < Duration::from_millis(20),
        "idle workers used {grown:?} of CPU in 200 ms ({k:?})"
    );
}

#[test]
fn blocktime_zero_parks_at_once() {
    let pool = pool_for(&cfg(3, 0));
    check_idle(&pool, Duration::from_millis(20));
    let k = pool.counters();
    assert_eq!(k.spin_iters, 0, "blocktime 0 never spins");
}

#[test]
fn workers_park_after_blocktime() {
    let pool = pool_for(&cfg(2, 2_000));
    check_idle(&pool, Duration::from_millis(60));
}

/// With two chunks that each wait (bounded) for the other to start, the dispatch only
/// completes promptly if a worker joins: a lost wake-up shows up as a timeout.
#[test]
fn parked_workers_are_woken_for_every_job() {
    for blocktime_us in [0, 30] {
        let pool = pool_for(&cfg(2, blocktime_us));
        let mut timeouts = 0;
        for _ in 0..200 {
            let started = [AtomicBool::new(false), AtomicBool::new(false)];
            let timed_out = AtomicBool::new(false);
            pool.decode_chunks(2, &|i| {
                started[i].store(true, Ordering::SeqCst);
                let t0 = Instant::now();
                while !started[1 - i].load(Ordering::SeqCst) {
                    if t0.elapsed() > Duration::from_secs(2) {
                        timed_out.store(true, Ordering::SeqCst);
                        return;
                    }
                    std::thread::yield_now();
                }
            });
            if timed_out.load(Ordering::SeqCst) {
                timeouts += 1;
                break;
            }
            // Let the worker go idle (and park) between jobs.
            std::thread::sleep(Duration::from_micros(300));
        }
        assert_eq!(
            timeouts, 0,
            "blocktime {blocktime_us}: a worker missed a job"
        );
        let k = pool.counters();
        assert!(k.wakes > 0, "blocktime {blocktime_us}: {k:?}");
    }
}
