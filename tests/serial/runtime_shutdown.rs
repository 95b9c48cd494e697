//! Dropping the last handle of a pool joins its workers (one test: threads are per process).
//!
//! Two observations, each of a guarantee: the `WorkerExits` stall point tells, without any
//! wait, that every worker left its loop before `drop` returned (that is what joining means);
//! `/proc/self/task` tells that the threads are gone, but the kernel wakes a joiner a moment
//! before it removes the exiting thread's entry, so counts after a drop are waited for (under a
//! hang guard) instead of read once. Counts after a start are exact: `Lanes::start` returns
//! only after every worker has named itself and reported in.

use crate::lanes_common;
use crate::proc;
use lanes_common::wait_until;

use rcpu::runtime::hooks::Point;
use rcpu::runtime::{pool_for, pool_stats, Affinity, Dispatch, Lanes, Par, PoolConfig};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn rcpu_threads() -> usize {
    proc::live_threads()
        .iter()
        .filter(|(_, n)| n.starts_with("rcpu-w"))
        .count()
}

fn settles_at(n: usize, what: &str) {
    wait_until(&format!("{what}: {n} rcpu-w threads"), || {
        rcpu_threads() == n
    });
}

/// Counts the workers of `pool` that passed `WorkerExits`.
fn count_exits(pool: &Lanes) -> Arc<AtomicUsize> {
    let exits = Arc::new(AtomicUsize::new(0));
    let e = exits.clone();
    pool.set_stall_hook(Some(Arc::new(move |p| {
        if matches!(p, Point::WorkerExits(_)) {
            e.fetch_add(1, Ordering::SeqCst);
        }
    })));
    exits
}

/// Guarantee: the registry shares one pool per configuration and never keeps it alive; the last
/// handle's drop stops and joins the workers before it returns.
/// Seen failing: with `Drop for Lanes` dropping the handles instead of joining them (exits 0
/// right after the drop).
#[test]
fn last_handle_drop_joins_workers() {
    let _serial = crate::serial();
    let cfg = PoolConfig {
        threads: 4,
        affinity: Affinity::Physical,
        blocktime_us: 5_000,
    };
    let a = pool_for(&cfg);
    let b = pool_for(&cfg);
    let hits = AtomicUsize::new(0);
    a.chunks(Dispatch::Decode, 100, &|_| {
        hits.fetch_add(1, Ordering::Relaxed);
    });
    assert_eq!(hits.load(Ordering::Relaxed), 100);
    assert_eq!(rcpu_threads(), 3);
    let exits_ab = count_exits(&a);
    drop(a);
    assert_eq!(
        exits_ab.load(Ordering::SeqCst),
        0,
        "one handle left: the pool lives"
    );
    assert_eq!(rcpu_threads(), 3, "one handle left: the pool lives");
    assert_eq!(pool_stats().as_array().unwrap().len(), 1);
    // A second pool (workers parked at once).
    let c = pool_for(&PoolConfig {
        blocktime_us: 0,
        ..cfg.clone()
    });
    c.chunks(Dispatch::Task, 10, &|_| {});
    assert_eq!(rcpu_threads(), 6);
    let exits_c = count_exits(&c);
    drop(b);
    assert_eq!(
        exits_ab.load(Ordering::SeqCst),
        3,
        "drop joined the workers"
    );
    settles_at(3, "the first pool's threads are gone");
    drop(c);
    assert_eq!(exits_c.load(Ordering::SeqCst), 3, "drop joined the workers");
    settles_at(0, "the second pool's threads are gone");
    assert_eq!(pool_stats().as_array().unwrap().len(), 0);
    // The registry starts a fresh pool afterwards.
    let d = pool_for(&cfg);
    assert_eq!(rcpu_threads(), 3);
    drop(d);
    settles_at(0, "the fresh pool's threads are gone");
}
