//! Helpers of the lanes tests (`tests/runtime_*.rs`): waits for conditions the code guarantees
//! will come true (bounded only by a hang guard, never asserted as a duration), and lane identity.
#![allow(dead_code)]

use rcpu::runtime::Lanes;
use std::time::{Duration, Instant};

/// How long a wait for something the runtime guarantees may take before the test calls it a
/// hang. Never reached by correct code, whatever the load: it only turns a lost wake-up or a
/// deadlock into a failure instead of a stuck test.
pub const HANG_GUARD: Duration = Duration::from_secs(20);

/// Waits (sleeping 50 us between checks) until `cond()` holds; panics naming `what` after
/// [`HANG_GUARD`].
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
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
pub fn parked(pool: &Lanes) -> u64 {
    let k = pool.counters();
    k.parks.saturating_sub(k.wakes)
}

/// Waits until every worker of `pool` is parked.
pub fn wait_all_parked(pool: &Lanes) {
    let workers = pool.lanes() as u64 - 1;
    wait_until("every worker parked", || parked(pool) == workers);
}

/// Whether the calling thread is one of the pool's workers.
pub fn on_worker() -> bool {
    std::thread::current()
        .name()
        .is_some_and(|n| n.starts_with("rcpu-w"))
}
