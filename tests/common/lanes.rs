//! Helpers of the lanes tests (`tests/runtime/`, `tests/serial/runtime_shutdown.rs`): waits for
//! conditions the code guarantees will come true (bounded only by a hang guard, never asserted as
//! a duration), and lane identity.
#![allow(dead_code)]

use rcpu::runtime::Lanes;
use std::time::{Duration, Instant};

/// How long a wait for something the runtime guarantees may take before the test calls it a
/// hang. Never reached by correct code, whatever the load: it only turns a lost wake-up or a
/// deadlock into a failure instead of a stuck test.
pub(crate) const HANG_GUARD: Duration = Duration::from_secs(20);

/// Waits (sleeping 50 us between checks) until `cond()` holds; panics naming `what` after
/// [`HANG_GUARD`].
pub(crate) fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(
            t.elapsed() < HANG_GUARD,
            "hang guard: {what} did not happen within {HANG_GUARD:?}"
        );
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// Workers of `pool` that are parked right now: `parks` counts entries into the park, `wakes`
/// the exits from it (every park ends in exactly one wake), so the difference is exact when
/// nothing is moving (saturating: the two counters are read one after the other).
pub(crate) fn parked(pool: &Lanes) -> u64 {
    let k = pool.counters();
    k.parks.saturating_sub(k.wakes)
}

/// Waits until every worker of `pool` is parked with nothing pending: first a job all lanes
/// must join (so every worker has seen the latest epoch and closed its previous idle phase),
/// then until `parks - wakes` is the worker count (each has parked again since).
pub(crate) fn wait_all_parked(pool: &Lanes) {
    all_lanes_join(pool);
    let workers = pool.lanes() as u64 - 1;
    wait_until("every worker parked", || parked(pool) == workers);
}

/// Whether the calling thread is one of the pool's workers.
pub(crate) fn on_worker() -> bool {
    std::thread::current()
        .name()
        .is_some_and(|n| n.starts_with("rcpu-w"))
}

/// One stall of one lane at a stall point: the hook calls [`Stall::hold`], which (once armed)
/// blocks that lane until the test calls [`Stall::release`]. A hold that outlives the hang
/// guard gives up (so a runtime that waits for the stalled lane fails instead of hanging) and
/// records it, for [`Stall::assert_not_given_up`].
#[derive(Default)]
pub(crate) struct Stall {
    armed: std::sync::atomic::AtomicBool,
    reached: std::sync::atomic::AtomicBool,
    released: std::sync::atomic::AtomicBool,
    gave_up: std::sync::atomic::AtomicBool,
}

impl Stall {
    /// Makes the next `hold` block.
    pub(crate) fn arm(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        self.reached.store(false, SeqCst);
        self.released.store(false, SeqCst);
        self.armed.store(true, SeqCst);
    }

    /// Called from the hook: blocks if armed (once), until released.
    pub(crate) fn hold(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        if !self.armed.swap(false, SeqCst) {
            return;
        }
        self.reached.store(true, SeqCst);
        let t = Instant::now();
        while !self.released.load(SeqCst) {
            if t.elapsed() >= HANG_GUARD {
                self.gave_up.store(true, SeqCst);
                return;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Waits until the armed lane is held.
    pub(crate) fn wait_reached(&self) {
        wait_until("the stalled lane reaches its stall point", || {
            self.reached.load(std::sync::atomic::Ordering::SeqCst)
        });
    }

    pub(crate) fn release(&self) {
        self.released
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub(crate) fn assert_not_given_up(&self) {
        assert!(
            !self.gave_up.load(std::sync::atomic::Ordering::SeqCst),
            "a stalled lane was waited for: the runtime blocked on it until the hang guard"
        );
    }
}

/// A dispatch of one chunk per lane whose chunks each wait until every lane has started one:
/// it completes only if every worker joins the job (a worker that missed the job shows up as
/// the hang guard's panic). A lane inside a chunk claims no other, so each lane runs one.
pub(crate) fn all_lanes_join(pool: &Lanes) {
    use rcpu::runtime::{Dispatch, Par};
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let lanes = pool.lanes();
    let started = AtomicUsize::new(0);
    pool.chunks(Dispatch::Decode, lanes, &|_| {
        started.fetch_add(1, SeqCst);
        wait_until("every worker joins the job", || {
            started.load(SeqCst) == lanes
        });
    });
}
