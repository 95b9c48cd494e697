//! The one-row (M = 1, decode) L1 prefetch distance of the tile kernels, chosen by timing the
//! process's own decode calls.
//!
//! # Why no fixed distance
//!
//! Whether a tile streaming one row should prefetch its weights ahead in software depends on
//! the memory the host gives it at the moment, and the answer flips by tens of percent. On the
//! Zen 4 VM of issue 17 (`examples/matmul_nbits_stream --sweep 896 4864 LANES 40 200 4 1
//! --pf=0/0,3072/0,read`, p50 per call):
//! - stop 32, one lane a plain read at ~30 GB/s: no prefetch 70 us, 3072 bytes ahead 79 (the
//!   hardware prefetcher alone kept up with the records layout; two lanes: every distance within
//!   1.5%), so decode ran without one from then on;
//! - stop 40, the same host serving one lane ~15 GB/s and two ~27 (longer memory latency, the
//!   CPUs ~20% slower on a fixed arithmetic loop): two lanes 130-157 us without, 90-109 at 3072
//!   bytes (1.4x); one lane 254 / 178 us. At model level (Qwen2-0.5B decode past 64, 16 rounds,
//!   the same build with 3072 bytes forced by a temporary switch as the other arm) every round
//!   was faster with the prefetch, median 0.905 of the time.
//!
//! A user's machine may be either. So the distance is measured where it runs.
//!
//! # How
//!
//! A [`Tuner`] counts the decode calls of the process. The first [`TRIAL_CALLS`] of every
//! [`PERIOD_CALLS`] are a trial: they alternate call by call between the [`CANDIDATES`] (so the
//! host's drift, which moves over seconds, falls on both alike, and every weight shape of a
//! token meets both over consecutive tokens), and each trial call is timed on the calling
//! thread around its dispatch (two clock reads) and added to its candidate's nanoseconds and
//! weight bytes. The trial's last call compares the candidates' nanoseconds per byte and keeps
//! the incumbent unless the other is faster by more than [`SWITCH_MARGIN`] (noise must not make
//! it flap). Outside trials a call only increments the counter and reads the distance.
//!
//! At ~121 calls a token (Qwen2-0.5B) a trial is ~4 tokens in every ~68: when the candidates
//! differ by 10% it costs ~0.3% of the time. The distance changes no result (a prefetch is
//! never a load, `tests/serial/matmul_nbits_prefetch.rs`), so a wrong or late choice, or two
//! sessions' calls interleaving in one trial, costs only speed until the next trial.
//!
//! # Memory ordering
//!
//! The counter is Relaxed: only its values matter (each call gets its own index). The
//! distance is Relaxed too: a tile reads it at each group, and a call that reads the previous
//! value for some groups streams the same bytes with another prefetch. The trial's sums sit
//! under a mutex that only trial calls take (twice a trial call's dispatch of several
//! microseconds at least).

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

/// The distances (bytes ahead of the chunk being loaded) a trial compares: none, and the
/// distance the VNNI tile uses over several rows.
pub const CANDIDATES: [usize; 2] = [0, super::prefetch::DEFAULT_VNNI_PREFETCH_BYTES];
/// The candidate in use before the first trial has decided, and the incumbent of the first
/// comparison: the prefetch (it lost at most ~12% where it lost, and gained 40% where it won).
pub const FIRST_CHOICE: usize = 1;
/// Decode calls from the start of one trial to the start of the next.
pub const PERIOD_CALLS: u64 = 8192;
/// Decode calls a trial times (half per candidate).
pub const TRIAL_CALLS: u64 = 512;
/// How much faster per byte the other candidate must be over a trial to replace the incumbent.
pub const SWITCH_MARGIN: f64 = 0.02;

/// The choice and the trial in progress (see the module documentation).
pub struct Tuner {
    calls: AtomicU64,
    /// Index into [`CANDIDATES`] of the distance the tiles use now: a trial call's candidate
    /// during a trial, else `decided`.
    current: AtomicUsize,
    /// Index into [`CANDIDATES`] of the last trial's choice (the incumbent of the next).
    decided: AtomicUsize,
    trial: Mutex<Trial>,
}

/// Per candidate, the nanoseconds and weight bytes of its timed calls in this trial.
#[derive(Default, Clone, Copy, Debug)]
struct Trial {
    ns: [u64; 2],
    bytes: [u64; 2],
}

/// A timed trial call: its candidate, its start, its weight bytes, whether it closes the trial.
#[must_use = "a trial call must be ended (Tuner::end)"]
pub struct TrialCall {
    arm: usize,
    t0: Instant,
    bytes: u64,
    last: bool,
}

impl Default for Tuner {
    fn default() -> Self {
        Tuner::new()
    }
}

impl Tuner {
    pub const fn new() -> Tuner {
        Tuner {
            calls: AtomicU64::new(0),
            current: AtomicUsize::new(FIRST_CHOICE),
            decided: AtomicUsize::new(FIRST_CHOICE),
            trial: Mutex::new(Trial {
                ns: [0; 2],
                bytes: [0; 2],
            }),
        }
    }

    /// The one-row L1 distance in use now.
    pub fn distance(&self) -> usize {
        CANDIDATES[self.current.load(Ordering::Relaxed) % CANDIDATES.len()]
    }

    /// Decode calls counted so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// The distance the last trial chose (before any trial: [`FIRST_CHOICE`]'s).
    pub fn decided_distance(&self) -> usize {
        CANDIDATES[self.decided.load(Ordering::Relaxed) % CANDIDATES.len()]
    }

    /// Called as a decode call of `bytes` weight bytes is about to dispatch: `Some` when it is
    /// a trial call (its candidate is then in use until the next call changes it; hand it to
    /// [`Tuner::end`] once the dispatch has returned).
    pub fn begin(&self, bytes: usize) -> Option<TrialCall> {
        let c = self.calls.fetch_add(1, Ordering::Relaxed);
        let phase = c % PERIOD_CALLS;
        if phase >= TRIAL_CALLS {
            return None;
        }
        let arm = (c % 2) as usize;
        self.current.store(arm, Ordering::Relaxed);
        Some(TrialCall {
            arm,
            t0: Instant::now(),
            bytes: u64::try_from(bytes).unwrap_or(u64::MAX),
            last: phase + 1 == TRIAL_CALLS,
        })
    }

    /// Ends a trial call now (its time: since [`Tuner::begin`]).
    pub fn end(&self, call: TrialCall) {
        let ns = u64::try_from(call.t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.end_after(call, ns);
    }

    /// Ends a trial call that took `ns` nanoseconds: adds it to its candidate's sums; the
    /// trial's last call decides and puts the choice in use.
    fn end_after(&self, call: TrialCall, ns: u64) {
        let mut t = self.trial.lock();
        t.ns[call.arm] = t.ns[call.arm].saturating_add(ns);
        t.bytes[call.arm] = t.bytes[call.arm].saturating_add(call.bytes);
        if call.last {
            let choice = decide(&t, self.decided.load(Ordering::Relaxed));
            self.decided.store(choice, Ordering::Relaxed);
            self.current.store(choice, Ordering::Relaxed);
            *t = Trial::default();
        }
    }
}

/// The candidate a finished trial keeps: the other one only when both were timed and the other
/// took fewer nanoseconds per byte by more than [`SWITCH_MARGIN`]; else `incumbent`.
fn decide(t: &Trial, incumbent: usize) -> usize {
    let inc = incumbent % 2;
    let other = 1 - inc;
    if t.bytes[inc] == 0 || t.bytes[other] == 0 {
        return inc;
    }
    let per_byte = |a: usize| t.ns[a] as f64 / t.bytes[a] as f64;
    if per_byte(other) < per_byte(inc) * (1.0 - SWITCH_MARGIN) {
        other
    } else {
        inc
    }
}

/// The process's tuner: what the decode calls consult (`driver`) and the tiles read
/// (`prefetch`).
pub static TUNER: Tuner = Tuner::new();

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs one whole trial on `t`, timing candidate `c`'s calls at `ns_per_byte[c]` (1 MB a
    /// call), and returns the distance in use after it.
    fn trial(t: &Tuner, ns_per_byte: [f64; 2]) -> usize {
        for _ in 0..TRIAL_CALLS {
            let call = t.begin(1 << 20).expect("a trial call");
            assert_eq!(t.distance(), CANDIDATES[call.arm]);
            let ns = (ns_per_byte[call.arm] * (1 << 20) as f64) as u64;
            t.end_after(call, ns);
        }
        t.distance()
    }

    #[test]
    fn a_trial_keeps_the_faster_distance_and_the_incumbent_within_the_margin() {
        let t = Tuner::new();
        assert_eq!(t.distance(), CANDIDATES[FIRST_CHOICE]);
        // The other candidate 10% faster: it takes over.
        let other = 1 - FIRST_CHOICE;
        let mut rates = [1.0; 2];
        rates[other] = 0.9;
        assert_eq!(trial(&t, rates), CANDIDATES[other]);
        assert_eq!(t.decided_distance(), CANDIDATES[other]);
        // Outside the trial, calls are not timed and the choice stays.
        for _ in TRIAL_CALLS..PERIOD_CALLS {
            assert!(t.begin(1 << 20).is_none());
            assert_eq!(t.distance(), CANDIDATES[other]);
        }
        // Next period: the first choice 1% faster, inside the margin: the incumbent stays.
        let mut rates = [1.0; 2];
        rates[FIRST_CHOICE] = 0.99;
        assert_eq!(trial(&t, rates), CANDIDATES[other]);
        for _ in TRIAL_CALLS..PERIOD_CALLS {
            assert!(t.begin(1 << 20).is_none());
        }
        // And 5% faster: it comes back.
        rates[FIRST_CHOICE] = 0.95;
        assert_eq!(trial(&t, rates), CANDIDATES[FIRST_CHOICE]);
    }

    #[test]
    fn a_trial_alternates_the_candidates_call_by_call() {
        let t = Tuner::new();
        let arms: Vec<usize> = (0..8)
            .map(|_| {
                let call = t.begin(4096).expect("a trial call");
                let arm = call.arm;
                t.end(call);
                arm
            })
            .collect();
        assert_eq!(arms, [0, 1, 0, 1, 0, 1, 0, 1]);
    }

    #[test]
    fn an_untimed_candidate_never_wins() {
        let t = Trial {
            ns: [100, 0],
            bytes: [1000, 0],
        };
        assert_eq!(decide(&t, 0), 0);
        assert_eq!(decide(&t, 1), 1);
    }
}
