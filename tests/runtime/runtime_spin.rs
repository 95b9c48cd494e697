//! Waiting loops yield on an interval, never on every iteration. The yield counts are checked
//! against the exact schedule the code follows (from the iteration counters), and the waits are
//! constructed with stall points instead of hoping a sleep outlasts a preemption.

use crate::lanes_common;
use lanes_common::{on_worker, parked, wait_all_parked, wait_until};

use rcpu::runtime::hooks::Point;
use rcpu::runtime::park::{CALLER_SPINS_BEFORE_YIELD, CALLER_YIELD_EVERY, WORKER_YIELD_EVERY};
use rcpu::runtime::{pool_for, Affinity, Dispatch, Par, PoolConfig};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

fn cfg(threads: usize, blocktime_us: u64) -> PoolConfig {
    PoolConfig {
        threads,
        affinity: Affinity::Physical,
        blocktime_us,
    }
}

/// Yields of a caller wait of `spins` iterations: one at every iteration index `i >=
/// CALLER_SPINS_BEFORE_YIELD` that is a multiple of `CALLER_YIELD_EVERY`.
fn caller_yields(spins: u64) -> u64 {
    (0..spins)
        .filter(|i| *i >= CALLER_SPINS_BEFORE_YIELD && i % CALLER_YIELD_EVERY == 0)
        .count() as u64
}

/// Guarantee: a caller that runs out of chunks while a worker is still in one waits for it
/// (`straggler_waits` + 1), spins `CALLER_SPINS_BEFORE_YIELD` iterations before its first
/// yield and then yields exactly once every `CALLER_YIELD_EVERY` iterations.
/// Staged: the worker's chunk stays until the caller has yielded 3 times (stall point
/// `CallerYielded`); the caller's chunk waits until the worker has joined.
/// Seen failing: with `StragglerWait::step` yielding on every iteration past the first 1024
/// (yield count differs from the schedule).
#[test]
fn caller_waiting_for_straggler_yields_rarely() {
    let pool = pool_for(&cfg(2, 50_000));
    let caller_yields_seen = Arc::new(AtomicU64::new(0));
    let y = caller_yields_seen.clone();
    pool.set_stall_hook(Some(Arc::new(move |p| {
        if p == Point::CallerYielded {
            y.fetch_add(1, Ordering::SeqCst);
        }
    })));
    for round in 0..5 {
        let k0 = pool.counters();
        let y0 = caller_yields_seen.load(Ordering::SeqCst);
        let joined = AtomicBool::new(false);
        pool.chunks(Dispatch::Decode, 2, &|_| {
            if on_worker() {
                joined.store(true, Ordering::SeqCst);
                wait_until("the caller yields while waiting for this chunk", || {
                    caller_yields_seen.load(Ordering::SeqCst) >= y0 + 3
                });
            } else {
                wait_until("a worker joins", || joined.load(Ordering::SeqCst));
            }
        });
        let k = pool.counters();
        let (waits, spins, yields) = (
            k.straggler_waits - k0.straggler_waits,
            k.straggler_spins - k0.straggler_spins,
            k.straggler_yields - k0.straggler_yields,
        );
        assert_eq!(waits, 1, "round {round}: the caller waited once: {k:?}");
        assert!(
            spins > CALLER_SPINS_BEFORE_YIELD + 2 * CALLER_YIELD_EVERY,
            "round {round}: {spins}"
        );
        assert_eq!(
            yields,
            caller_yields(spins),
            "round {round}: straggler yields {yields} vs wait iterations {spins}"
        );
        assert!(yields * 8 <= spins, "round {round}: yielding too often");
    }
    pool.set_stall_hook(None);
}

/// Guarantee: one idle phase spins (at least one clock check's worth of iterations), yields
/// exactly once every `WORKER_YIELD_EVERY` iterations, and then parks. The phase is isolated:
/// the worker is parked (counters) before the job, and the counters are read once it has parked
/// again, so they hold exactly one spin phase.
/// Seen failing: with `spin` yielding on every iteration (yields = iters) and with the spin
/// phase never giving up (hang guard: the worker never parks again).
#[test]
fn spinning_worker_yields_rarely() {
    let pool = pool_for(&cfg(2, 20_000));
    wait_all_parked(&pool);
    let k0 = pool.counters();
    // Wakes the worker (a park ends, no spin phase); after the job it spins 20 ms, then parks.
    pool.chunks(Dispatch::Task, 4, &|_| {});
    wait_until("the worker parks again", || {
        let k = pool.counters();
        k.parks > k0.parks && parked(&pool) == 1
    });
    let k = pool.counters();
    let (iters, yields) = (k.spin_iters - k0.spin_iters, k.spin_yields - k0.spin_yields);
    assert_eq!(k.parks - k0.parks, 1, "{k:?}");
    assert_eq!(k.spin_hits, k0.spin_hits, "no job while it spun: {k:?}");
    assert!(iters > 0, "the worker spun: {k:?}");
    assert_eq!(
        yields,
        iters / WORKER_YIELD_EVERY,
        "spin yields {yields} vs spin iterations {iters}"
    );
    assert!(yields * 8 <= iters, "yielding too often");
}
