//! A lane placement probe read beside each round's memory read (`rcpu-bench llm`): how long one
//! cache line takes to go from the arms' first CPU to their second and back, right now.
//!
//! Why: on the development host (a 2 vCPU Zen 4 VM) the round's plain two-thread read is bimodal,
//! ~31-37 GB/s most of the time and 40-64 GB/s in windows minutes apart, while a one-thread read
//! stays at ~25-28 GB/s in both. Over 160 rounds of `rcpu-bench llm` with this probe, the 34 whose
//! round trip was 382-439 ns read 46.8-63.1 GB/s and the others (88-126 ns, or ~50) 27.4-38.6:
//! the fast windows are exactly those in which the round trip is ~4x longer. The hypervisor then
//! runs the two vCPUs apart (each with its own path to memory, so two threads read more), and
//! every line one lane writes and the other reads crosses between them at ~4x the usual latency.
//! A decode step synchronises its lanes 121 times a Qwen2-0.5B token (every GEMV or GEMV pair
//! and every attention call) and hands each GEMV's activations and output across, so in such a
//! round the lanes pay more per token for the same bytes while the read they are measured against
//! grew. The report places each arm's window by this probe, taken right before and right after
//! the window and at the read that follows the round ([`Placement`]): near or far when all three
//! agree, mixed (left out of both) when the vCPUs moved in between, so each figure is read against
//! its own placement. (Sometimes the two vCPUs share one core instead: a round trip of
//! ~50 ns, and the compute probe slower.)

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Instant;

use super::os::pin;
use super::quant::median;

/// Round trips per pass: ~0.5-2 ms on the development host.
const TRIPS: u64 = 4000;

/// Passes per probe (the median is kept).
const PASSES: usize = 3;

/// A probe that has not finished after this long stops and reads NaN.
const GIVE_UP_AFTER: std::time::Duration = std::time::Duration::from_millis(200);

/// What the timing side posts instead of a trip number when it gives up.
const GAVE_UP: u64 = u64::MAX;

/// A round counts as "far" when its round trip exceeds this many nanoseconds. On the development
/// host the round trip takes three values: ~45-55 ns (the two vCPUs on one core's two hardware
/// threads; the compute probe then runs ~1.3x slower), ~90-130 ns (two cores that share a cache)
/// and ~380-530 ns (apart). A factor over the run's fastest cannot tell the last two apart when
/// the fastest was the first, so the line is absolute, between the two: on x86 servers a round
/// trip between cores of one die is commonly under 200 ns, between dies or sockets above 300.
pub const FAR_NS: f64 = 250.0;

/// One atomic on a cache line pair of its own, so the two directions do not share a line.
#[repr(align(128))]
#[derive(Default)]
struct Line(AtomicU64);

/// Nanoseconds a cache line takes from `cpus[0]` to `cpus[1]` and back (median of a few passes
/// of [`TRIPS`] round trips, one thread pinned to each CPU); NaN with fewer than two CPUs or when
/// a thread cannot be pinned.
pub fn round_trip_ns(cpus: &[usize]) -> f64 {
    let (Some(&a), Some(&b)) = (cpus.first(), cpus.get(1)) else {
        return f64::NAN;
    };
    let (ping, pong) = (Line::default(), Line::default());
    let (ping, pong) = (&ping, &pong);
    let gate = Barrier::new(2);
    let failed = AtomicBool::new(false);
    // Each side pins itself, says whether it could, and both go on only if both could.
    let ready = |cpu: usize| {
        if pin(&[cpu]).is_err() {
            failed.store(true, Ordering::Relaxed);
        }
        // The barrier orders the flag's store before both loads.
        gate.wait();
        !failed.load(Ordering::Relaxed)
    };
    let ready = &ready;
    // Both sides on threads of their own: pinning the bench's own thread would change where the
    // rest of the run goes.
    std::thread::scope(|s| {
        let echo = s.spawn(move || {
            if !ready(b) {
                return false;
            }
            for i in 1..=TRIPS * PASSES as u64 {
                // Acquire / Release: each side sees the other's latest step before answering;
                // the ordering is what makes the line travel once per direction.
                loop {
                    match ping.0.load(Ordering::Acquire) {
                        p if p == i => break,
                        GAVE_UP => return false,
                        _ => std::hint::spin_loop(),
                    }
                }
                pong.0.store(i, Ordering::Release);
            }
            true
        });
        let timer = s.spawn(move || {
            if !ready(a) {
                return None;
            }
            let mut passes = Vec::with_capacity(PASSES);
            let mut i = 0u64;
            let start = Instant::now();
            for _ in 0..PASSES {
                let t = Instant::now();
                for _ in 0..TRIPS {
                    // Two threads that cannot both run (one CPU given twice, a host that
                    // deschedules one) would take seconds: give up instead.
                    if i.is_multiple_of(256) && start.elapsed() > GIVE_UP_AFTER {
                        ping.0.store(GAVE_UP, Ordering::Release);
                        return None;
                    }
                    i += 1;
                    ping.0.store(i, Ordering::Release);
                    while pong.0.load(Ordering::Acquire) != i {
                        std::hint::spin_loop();
                    }
                }
                passes.push(t.elapsed().as_secs_f64() * 1e9 / TRIPS as f64);
            }
            Some(median(&passes))
        });
        let timed = timer.join().ok().flatten();
        match (timed, echo.join()) {
            (Some(ns), Ok(true)) => ns,
            _ => f64::NAN,
        }
    })
}

/// Where the arms' CPUs sat over a timed window, from round trips taken around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Every round trip at most [`FAR_NS`] (or none measurable: one CPU).
    Near,
    /// Every round trip over [`FAR_NS`].
    Far,
    /// Some over, some not: the hypervisor moved the vCPUs during the window (it does, within
    /// seconds), so the window is neither; the report leaves it out of both columns.
    Mixed,
}

impl Placement {
    /// The placement of a window from the round trips taken around it (before it, after it, and
    /// at the read it is measured against), in ns. Non-finite figures count as not far (no
    /// evidence), so a one-CPU run is near.
    pub fn of(rts: &[f64], far_ns: f64) -> Placement {
        let far = |r: f64| r.is_finite() && r > far_ns;
        if rts.iter().all(|&r| far(r)) && !rts.is_empty() {
            Placement::Far
        } else if rts.iter().all(|&r| !far(r)) {
            Placement::Near
        } else {
            Placement::Mixed
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Placement::Near => "near",
            Placement::Far => "far",
            Placement::Mixed => "mixed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_trip_is_positive_and_finite_on_two_cpus() {
        let cpus = super::super::os::affinity().unwrap();
        if cpus.len() < 2 {
            assert!(round_trip_ns(&cpus).is_nan());
            return;
        }
        let ns = round_trip_ns(&cpus[..2]);
        assert!(ns.is_finite() && ns > 0.0, "{ns}");
        assert!(round_trip_ns(&cpus[..1]).is_nan());
    }

    #[test]
    fn a_window_is_near_or_far_only_when_every_round_trip_agrees() {
        use Placement::*;
        assert_eq!(Placement::of(&[110.0, 95.0, 249.0], 250.0), Near);
        assert_eq!(Placement::of(&[480.0, 410.0, 251.0], 250.0), Far);
        // Moved between the round trips: neither.
        assert_eq!(Placement::of(&[110.0, 480.0, 100.0], 250.0), Mixed);
        assert_eq!(Placement::of(&[480.0, 410.0, 100.0], 250.0), Mixed);
        // No evidence (one CPU): near; no evidence beside a far figure: mixed.
        assert_eq!(Placement::of(&[f64::NAN, f64::NAN], 250.0), Near);
        assert_eq!(Placement::of(&[f64::NAN, 480.0], 250.0), Mixed);
        assert_eq!(Placement::of(&[f64::INFINITY], 250.0), Near);
        assert_eq!(Placement::of(&[], 250.0), Near);
    }
}
