//! Shared helpers of the timing examples (`#[path = "common/timing.rs"] mod timing;`).
//!
//! Every example measures; none asserts a time. Figures on a shared, loaded machine are only
//! comparable within one run, so the examples print ratios between arms measured in the same
//! minute next to the absolute numbers.
#![allow(dead_code)]

use rcpu::os::current_thread_cpu_time;
use std::time::Instant;

/// Which clock a sample is taken with.
#[derive(Clone, Copy)]
pub(crate) enum Clock {
    /// Wall time (what a caller waits for; includes time slices lost to other processes).
    Wall,
    /// This thread's CPU time (a loaded machine's lost time slices do not count; its cache and
    /// memory contention still does). Only meaningful for single-threaded work.
    ThreadCpu,
}

impl Clock {
    fn now(self) -> f64 {
        match self {
            Clock::Wall => {
                use std::sync::OnceLock;
                static T0: OnceLock<Instant> = OnceLock::new();
                T0.get_or_init(Instant::now).elapsed().as_secs_f64()
            }
            Clock::ThreadCpu => current_thread_cpu_time().as_secs_f64(),
        }
    }
}

/// Seconds per call of `f`: one warm-up call, then `repeats` samples of `iters` calls each,
/// sorted ascending (index 0 is the best, the middle one the median). What `f` returns is kept
/// opaque to the optimizer.
pub(crate) fn samples<R>(
    repeats: usize,
    iters: usize,
    clock: Clock,
    mut f: impl FnMut() -> R,
) -> Vec<f64> {
    std::hint::black_box(f());
    let iters = iters.max(1);
    let mut t: Vec<f64> = (0..repeats.max(1))
        .map(|_| {
            let t0 = clock.now();
            for _ in 0..iters {
                std::hint::black_box(f());
            }
            (clock.now() - t0) / iters as f64
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t
}

/// Best wall seconds of `iters` single calls: on a shared machine the minimum is the least
/// disturbed.
pub(crate) fn best_secs<R>(iters: usize, f: impl FnMut() -> R) -> f64 {
    samples(iters, 1, Clock::Wall, f)[0]
}

/// The middle element of a sorted, non-empty slice.
pub(crate) fn median(sorted: &[f64]) -> f64 {
    sorted[sorted.len() / 2]
}
