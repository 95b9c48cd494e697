//! Idle workers park and cost no CPU; parked workers are woken for every job, also when the
//! job is published while a worker is between its spin phase and its sleep (the two windows
//! of the wake-up protocol in runtime/park.rs, reached on purpose through the stall points).
//!
//! No test waits a fixed time for a worker to park: they wait (under a hang guard) for the
//! `parks`/`wakes` counters to say so, which the code updates on every park and every wake.

use crate::lanes_common;
use crate::proc;
use lanes_common::{all_lanes_join, wait_all_parked, wait_until, Stall};
use proc::thread_cpu_time;

use rcpu::runtime::hooks::Point;
use rcpu::runtime::{pool_for, Affinity, Dispatch, Lanes, Par, PoolConfig};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// Guarantee: once every worker is parked (counters) and no job is published, no worker runs:
/// over 200 ms no park/wake/spin counter moves, and the workers' CPU time grows only by the
/// few instructions between counting the park and sleeping (bound: 20 ms; a spinning worker
/// shows up in `spin_iters` anyway).
/// Seen failing: with the spin phase never ending (never parked: hang guard), and with a 100 ms
/// busy wait between counting the park and sleeping (blocktime 0 pool: 50.9 ms of CPU; the
/// bound catches such a worker only when it gets that much CPU of a loaded machine in the window).
fn check_idle(pool: &Lanes) {
    pool.chunks(Dispatch::Decode, 64, &|_| std::hint::black_box(()));
    pool.chunks(Dispatch::Task, 64, &|_| std::hint::black_box(()));
    wait_all_parked(pool);
    let k0 = pool.counters();
    let before = workers_cpu(pool);
    std::thread::sleep(Duration::from_millis(200));
    let grown = workers_cpu(pool) - before;
    let k = pool.counters();
    assert_eq!(
        (k.parks, k.wakes, k.spin_hits, k.spin_iters),
        (k0.parks, k0.wakes, k0.spin_hits, k0.spin_iters),
        "a parked worker ran while no job was published"
    );
    assert!(
        grown < Duration::from_millis(20),
        "parked workers used {grown:?} of CPU in 200 ms ({k:?})"
    );
}

/// Guarantee (in addition to `check_idle`): blocktime 0 never spins.
#[test]
fn blocktime_zero_parks_at_once() {
    let pool = pool_for(&cfg(3, 0));
    check_idle(&pool);
    assert_eq!(pool.counters().spin_iters, 0, "blocktime 0 never spins");
}

/// Guarantee (`check_idle`, with a spin phase): an idle worker spins at most one phase of
/// `blocktime_us` and then parks (waited for by counters, never by a fixed sleep), and a parked
/// worker does not run while no job is published.
/// Seen failing: as `check_idle` (spin phase never ending: hang guard).
#[test]
fn workers_park_after_blocktime() {
    let pool = pool_for(&cfg(2, 2_000));
    check_idle(&pool);
}

/// Guarantee: a job published while the worker is parked wakes it (exactly one wake per job)
/// and the worker joins the job. Each round waits until the worker is parked first.
/// Seen failing: with `publish` never calling `wake_all` (hang guard in `all_lanes_join`).
#[test]
fn parked_workers_are_woken_for_every_job() {
    for blocktime_us in [0, 30] {
        let pool = pool_for(&cfg(2, blocktime_us));
        for round in 0..50 {
            wait_all_parked(&pool);
            let w0 = pool.counters().wakes;
            all_lanes_join(&pool);
            let w = pool.counters().wakes;
            assert_eq!(w - w0, 1, "blocktime {blocktime_us} round {round}");
        }
    }
}

/// Points reached by worker 1 of a pool, in order.
fn record(pool: &Lanes, stall_at: Point, stall: &Arc<Stall>) -> Arc<Mutex<Vec<Point>>> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let (l, s) = (log.clone(), stall.clone());
    pool.set_stall_hook(Some(Arc::new(move |p| {
        if matches!(
            p,
            Point::WorkerWoken(1) | Point::WorkerSpinEnded(1) | Point::WorkerParking(1)
        ) {
            l.lock().unwrap().push(p);
        }
        if p == stall_at {
            s.hold();
        }
    })));
    log
}

/// Stalls the worker at `at`, publishes a job while it is held (the caller runs every chunk
/// itself), releases it, and returns the points the worker passed after the release, up to its
/// next `WorkerWoken`. The pool must then still run a job on both lanes.
fn publish_while_held(pool: &Lanes, at: Point) -> Vec<Point> {
    let stall = Arc::new(Stall::default());
    let log = record(pool, at, &stall);
    wait_all_parked(pool);
    stall.arm();
    // Wakes the worker; after the job it goes idle again and reaches `at`.
    pool.chunks(Dispatch::Decode, 4, &|_| {});
    stall.wait_reached();
    let ran_on_caller = std::sync::atomic::AtomicUsize::new(0);
    pool.chunks(Dispatch::Decode, 4, &|_| {
        if !lanes_common::on_worker() {
            ran_on_caller.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    assert_eq!(ran_on_caller.into_inner(), 4, "the held worker ran a chunk");
    let mark = log.lock().unwrap().len();
    stall.release();
    wait_until(
        "the held worker picks up the job published meanwhile",
        || log.lock().unwrap()[mark..].contains(&Point::WorkerWoken(1)),
    );
    stall.assert_not_given_up();
    pool.set_stall_hook(None);
    all_lanes_join(pool);
    let l = log.lock().unwrap();
    let after = &l[mark..];
    let end = after
        .iter()
        .position(|&p| p == Point::WorkerWoken(1))
        .unwrap();
    after[..=end].to_vec()
}

/// Window 1: the worker's spin phase ended without a job, and it is preempted before it
/// announces itself a sleeper (A1); the publisher sees no sleeper and notifies nobody.
/// Guarantee: the worker's re-check (A2) sees the new epoch and it does not park at all.
/// Seen failing: with the A2 re-check removed (the worker parks: `WorkerParking` in the log).
#[test]
fn job_published_between_spin_and_park_is_not_lost() {
    for blocktime_us in [0, 40] {
        // Affinity off: a pool of its own (`parked_workers_are_woken_for_every_job` uses
        // threads 2, blocktime 0, physical).
        let pool = pool_for(&PoolConfig {
            affinity: Affinity::Off,
            ..cfg(2, blocktime_us)
        });
        let after = publish_while_held(&pool, Point::WorkerSpinEnded(1));
        assert_eq!(
            after,
            vec![Point::WorkerWoken(1)],
            "blocktime {blocktime_us}: the worker parked although the epoch had moved"
        );
    }
}

/// Window 2: the worker announced itself a sleeper and found no job (A1, A2), and is preempted
/// before it takes the park mutex; the publisher sees the sleeper and notifies before the
/// worker waits. Guarantee: the worker's re-check under the mutex sees the new epoch, so it
/// does not sleep through the notification and picks up the job without another publish.
/// Seen failing: with the park loop calling `cv.wait` before its first re-check (hang guard:
/// the worker sleeps through the job).
#[test]
fn job_published_while_a_worker_is_parking_is_not_lost() {
    let pool = pool_for(&cfg(2, 41));
    let after = publish_while_held(&pool, Point::WorkerParking(1));
    assert_eq!(after, vec![Point::WorkerWoken(1)]);
}
