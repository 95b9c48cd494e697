//! The rcpu worker threads (`rcpu-w*`) of this process, as `/proc/self/task` lists them.
//!
//! A worker that was just joined can still be listed for a moment: the kernel wakes the joining
//! thread (`CLONE_CHILD_CLEARTID`) before it removes the exiting thread from `/proc`, and on a
//! busy machine the exiting thread may be preempted in between. A count taken right after a
//! pool stopped is therefore waited for ([`settled_rcpu_workers`]): a count that is too high
//! only because of that drops on its own; a wrong one never settles and fails at the hang guard.

use std::time::{Duration, Instant};

/// How long a wait for something the plugin guarantees may take before it counts as a hang.
pub const HANG_GUARD: Duration = Duration::from_secs(20);

/// (tid, name) of every live `rcpu-w*` thread of this process.
pub fn rcpu_workers() -> Vec<(i32, String)> {
    crate::proc::live_threads()
        .into_iter()
        .filter(|(_, n)| n.starts_with("rcpu-w"))
        .collect()
}

/// Waits (under [`HANG_GUARD`]) until exactly `n` `rcpu-w*` threads are listed; returns them.
pub fn settled_rcpu_workers(n: usize, what: &str) -> Vec<(i32, String)> {
    let mut seen = Vec::new();
    wait_until(&format!("{what}: {n} rcpu-w threads"), || {
        seen = rcpu_workers();
        seen.len() == n
    });
    seen
}

/// Waits (sleeping 100 us between checks) until `cond()` holds; panics naming `what` after
/// [`HANG_GUARD`], with the threads listed at that point.
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(
            t.elapsed() < HANG_GUARD,
            "hang guard: {what} did not happen within {HANG_GUARD:?} (rcpu threads: {:?})",
            rcpu_workers()
        );
        std::thread::sleep(Duration::from_micros(100));
    }
}
