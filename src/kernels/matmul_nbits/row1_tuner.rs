//! The one-row (M = 1, decode) L1 prefetch distance of the tile kernels, chosen by timing the
//! process's own decode calls.
//!
//! # Why no fixed distance
//!
//! Whether a tile streaming one row should prefetch its weights ahead in software depends on
//! the memory the host gives it at the moment, and the answer flips by tens of percent. On the
//! Zen 4 VM of issue 17 (`examples/matmul_nbits_stream --sweep 896 4864 LANES 40 200 4 1
//! --pf=0/0,3072/0,read`, p50 per call):
//! - one lane a plain read at ~30 GB/s: no prefetch 70 us, 3072 bytes ahead 79 (the
//!   hardware prefetcher alone kept up with the records layout; two lanes: every distance within
//!   1.5%), so decode ran without one once the layout was records;
//! - later, the same host serving one lane ~15 GB/s and two ~27 (longer memory latency, the
//!   CPUs ~20% slower on a fixed arithmetic loop): two lanes 130-157 us without, 90-109 at 3072
//!   bytes (1.4x); one lane 254 / 178 us. At model level (Qwen2-0.5B decode past 64, 16 rounds,
//!   the same build with 3072 bytes forced by a temporary switch as the other arm) every round
//!   was faster with the prefetch, median 0.905 of the time.
//!
//! (docs/journal/measurements-2026-12.md: the records layout, and the decode prefetch distance
//! measured where it runs.)
//!
//! A user's machine may be either. So the distance is measured where it runs.
//!
//! # How
//!
//! A [`Tuner`] counts the decode calls of the process. After the first [`WARMUP_CALLS`] come
//! trials of [`TRIAL_CALLS`] calls, each starting [`PERIOD_CALLS`] after the one before, or
//! [`CONFIRM_CALLS`] after the end of one that changed the distance (a switch is confirmed soon:
//! a trial can meet a passing state of the host). A trial call runs with one of the
//! [`CANDIDATES`] and is timed on the calling thread around its dispatch (two clock reads), its
//! time kept with its weight shape and candidate (a shape: its weight bytes; up to [`SHAPES`] of
//! them a trial). The trial's last call compares the candidates shape by shape (the ratio of
//! their median times per call, each shape weighted by its share of the trial's bytes) and keeps
//! the incumbent unless the other is faster by more than [`SWITCH_MARGIN`] (noise must not make
//! it flap). Outside trials a call only increments the counter.
//!
//! Which candidate a trial call gets is a bit of a hash of its index: no stride of a model's
//! calls lines up with it (alternating by the index's parity would give every weight of a model
//! with an even number of calls a token one candidate only; the Thue-Morse sequence, which
//! alternates almost call by call, is biased along multiples of 3), and the host's drift, which
//! moves over seconds, falls on both candidates alike. Comparing shape by shape keeps a trial
//! that met the long lm_head call three times with one candidate and once with the other from
//! favouring that one for the lm_head's own rate per byte.
//!
//! At ~121 calls a token (Qwen2-0.5B) a trial is ~4 tokens in every ~68: when the candidates
//! differ by 10% it costs ~0.3% of the time. The distance changes no result (a prefetch is
//! never a load, `tests/serial/matmul_nbits_prefetch.rs`), so a wrong or late choice, or two
//! sessions' calls interleaving in one trial, costs only speed until the next trial.
//!
//! # Memory ordering
//!
//! The counter is Relaxed: only its values matter (each call gets its own index). So is the next
//! trial's start: a call that reads the old start after a trial's last call has moved it sees
//! itself outside a trial, or inside one a call early or late, which changes a sample, not a
//! result. The distance is Relaxed too: a tile reads it at each group, and a call that reads
//! the previous value for some groups streams the same bytes with another prefetch. A trial's timings sit
//! under a mutex that only trial calls take, once each, after their dispatch (microseconds), with
//! the record of the finished trials that the statistics read (`Tuner::report`).

use crate::os::cache::CachePadded;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

/// The distances (bytes ahead of the chunk being loaded) a trial compares: none, and the
/// distance the VNNI tile uses over several rows.
pub const CANDIDATES: [usize; 2] = [0, super::prefetch::DEFAULT_VNNI_PREFETCH_BYTES];
/// The candidate in use before the first trial has decided (the warm-up included), and the
/// incumbent of the first comparison: the prefetch (it lost at most ~12% where it lost, and
/// gained 40% where it won).
pub const FIRST_CHOICE: usize = 1;
/// Decode calls before the first trial: a session's first calls meet cold pages and caches
/// (a first draft's trial over them measured the prefetch 24% slower and chose wrong, where
/// every later trial measured it 4-18% faster; a first trial after 1024 calls still chose wrong
/// once, which [`CONFIRM_CALLS`] now corrects within ~16 Qwen tokens).
pub const WARMUP_CALLS: u64 = 1024;
/// Decode calls from the start of one trial to the start of the next.
pub const PERIOD_CALLS: u64 = 8192;
/// Decode calls from the end of a trial that changed the distance to the start of the next.
pub const CONFIRM_CALLS: u64 = 1024;
/// Decode calls a trial times (about half with each candidate).
pub const TRIAL_CALLS: u64 = 512;
/// Weight shapes (distinct call byte counts) a trial keeps apart; calls of further shapes are
/// not timed.
pub const SHAPES: usize = 16;
/// Calls per shape and candidate a trial keeps the times of.
pub const SAMPLES: usize = 64;
/// How much faster the other candidate must be over a trial to replace the incumbent.
pub const SWITCH_MARGIN: f64 = 0.02;

/// The choice and the trial in progress (see the module documentation).
pub struct Tuner {
    /// Written by every decode call's calling thread: on lines of its own, away from `current`,
    /// which every lane's tiles read (a write to a line they share would cost each call a
    /// line moving between the lanes).
    calls: CachePadded<AtomicU64>,
    /// The call index at which the next trial starts (written by a trial's last call, or by the
    /// first call a period past a trial whose last call never ended).
    start: AtomicU64,
    /// Index into [`CANDIDATES`] of the distance the tiles use now: a trial call's candidate
    /// during a trial, else `decided`.
    current: CachePadded<AtomicUsize>,
    /// Index into [`CANDIDATES`] of the last trial's choice (the incumbent of the next).
    decided: AtomicUsize,
    /// The trial in progress and what the finished ones found ([`Tuner::report`]).
    trial: Mutex<Trials>,
}

/// The trial in progress and the record of the finished ones (one lock: a trial's last call
/// writes the record as it ends the trial).
struct Trials {
    current: Trial,
    history: History,
}

/// The finished trials of a tuner, for [`Tuner::report`].
#[derive(Clone, Copy, Debug)]
struct History {
    trials: u64,
    switches: u64,
    /// The last trial's candidate-1 time over candidate-0 time (`None`: no trial timed both).
    last_ratio: Option<f64>,
}

/// What a tuner has decided so far, for the statistics (`RcpuEp_StatsJson`, "kernels"): the
/// one-row distance the last trial chose (the one in use outside trials; before any trial,
/// [`FIRST_CHOICE`]'s), the decode calls counted, the trials finished, how many of them changed
/// the distance, and the last one's time with the prefetch over the time without (below 1: the
/// prefetch was faster).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TunerReport {
    pub distance_bytes: usize,
    pub decode_calls: u64,
    pub trials: u64,
    pub switches: u64,
    pub last_ratio: Option<f64>,
}

/// One trial's timings: per weight shape, per candidate, the times of its first calls.
#[derive(Clone, Copy, Debug)]
struct Trial {
    shapes: [Shape; SHAPES],
}

/// A weight shape's timings in a trial (`bytes == 0`: an unused slot): per candidate, the
/// nanoseconds of up to [`SAMPLES`] calls (saturated at `u32::MAX`, ~4 s) and how many.
#[derive(Clone, Copy, Debug)]
struct Shape {
    bytes: u64,
    ns: [[u32; SAMPLES]; 2],
    calls: [usize; 2],
}

impl Shape {
    const EMPTY: Shape = Shape {
        bytes: 0,
        ns: [[0; SAMPLES]; 2],
        calls: [0; 2],
    };

    /// The median time of candidate `arm`'s calls (`None`: none timed).
    fn median(&self, arm: usize) -> Option<f64> {
        let n = self.calls[arm].min(SAMPLES);
        let mut v = *self.ns.get(arm)?;
        let v = v.get_mut(..n).filter(|v| !v.is_empty())?;
        v.sort_unstable();
        Some(f64::from(v[n / 2]))
    }
}

impl Trial {
    const EMPTY: Trial = Trial {
        shapes: [Shape::EMPTY; SHAPES],
    };

    /// Adds a call of `bytes` weight bytes that took `ns` with candidate `arm` (dropped when the
    /// trial already holds [`SHAPES`] other shapes, or [`SAMPLES`] calls of this one with it).
    fn add(&mut self, bytes: u64, arm: usize, ns: u64) {
        if bytes == 0 || arm > 1 {
            return;
        }
        let slot = self
            .shapes
            .iter()
            .position(|s| s.bytes == bytes || s.bytes == 0);
        if let Some(s) = slot.and_then(|i| self.shapes.get_mut(i)) {
            s.bytes = bytes;
            if let Some(x) = s.ns[arm].get_mut(s.calls[arm]) {
                *x = u32::try_from(ns).unwrap_or(u32::MAX);
                s.calls[arm] += 1;
            }
        }
    }

    /// Candidate 1's time over candidate 0's: per shape timed with both, the ratio of their
    /// median times per call (a preempted call does not move it), weighted by the shape's bytes
    /// over the trial; `None` when no shape was timed with both.
    fn ratio(&self) -> Option<f64> {
        let (mut sum, mut weight) = (0.0, 0.0);
        for s in &self.shapes {
            let (Some(m0), Some(m1)) = (s.median(0), s.median(1)) else {
                continue;
            };
            if m0 <= 0.0 {
                continue;
            }
            let w = s.bytes as f64 * (s.calls[0] + s.calls[1]) as f64;
            sum += w * m1 / m0;
            weight += w;
        }
        (weight > 0.0).then(|| sum / weight)
    }
}

/// A timed trial call: its candidate, its start, its weight bytes, whether it closes the trial.
#[must_use = "a trial call must be ended (Tuner::end)"]
pub struct TrialCall {
    arm: usize,
    /// The call index its trial started at.
    start: u64,
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
    /// A tuner that has counted no call ([`FIRST_CHOICE`] in use).
    pub const fn new() -> Tuner {
        Tuner {
            calls: CachePadded(AtomicU64::new(0)),
            start: AtomicU64::new(WARMUP_CALLS),
            current: CachePadded(AtomicUsize::new(FIRST_CHOICE)),
            decided: AtomicUsize::new(FIRST_CHOICE),
            trial: Mutex::new(Trials {
                current: Trial::EMPTY,
                history: History {
                    trials: 0,
                    switches: 0,
                    last_ratio: None,
                },
            }),
        }
    }

    /// The one-row L1 distance in use now.
    pub fn distance(&self) -> usize {
        CANDIDATES[self.current.0.load(Ordering::Relaxed) % CANDIDATES.len()]
    }

    /// Decode calls counted so far.
    pub fn calls(&self) -> u64 {
        self.calls.0.load(Ordering::Relaxed)
    }

    /// The distance the last trial chose (before any trial: [`FIRST_CHOICE`]'s).
    pub fn decided_distance(&self) -> usize {
        CANDIDATES[self.decided.load(Ordering::Relaxed) % CANDIDATES.len()]
    }

    /// What the tuner has decided so far ([`TunerReport`]).
    pub fn report(&self) -> TunerReport {
        let h = self.trial.lock().history;
        TunerReport {
            distance_bytes: self.decided_distance(),
            decode_calls: self.calls(),
            trials: h.trials,
            switches: h.switches,
            last_ratio: h.last_ratio,
        }
    }

    /// Called as a decode call of `bytes` weight bytes is about to dispatch: `Some` when it is
    /// a trial call (its candidate is then in use until the next call changes it; hand it to
    /// [`Tuner::end`] once the dispatch has returned).
    pub fn begin(&self, bytes: usize) -> Option<TrialCall> {
        let c = self.calls.0.fetch_add(1, Ordering::Relaxed);
        let start = self.start.load(Ordering::Relaxed);
        let phase = c.checked_sub(start)?;
        if phase >= TRIAL_CALLS {
            if phase >= PERIOD_CALLS {
                // The trial's last call never ended (its dispatch panicked): start afresh.
                let _ = self.start.compare_exchange(
                    start,
                    c.saturating_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
            return None;
        }
        let arm = arm_of(c);
        self.current.0.store(arm, Ordering::Relaxed);
        Some(TrialCall {
            arm,
            t0: Instant::now(),
            bytes: u64::try_from(bytes).unwrap_or(u64::MAX),
            last: phase + 1 == TRIAL_CALLS,
            start,
        })
    }

    /// Ends a trial call now (its time: since [`Tuner::begin`]).
    pub fn end(&self, call: TrialCall) {
        let ns = u64::try_from(call.t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.end_after(call, ns);
    }

    /// Ends a trial call that took `ns` nanoseconds: adds it to its shape's sums; the trial's
    /// last call decides and puts the choice in use.
    fn end_after(&self, call: TrialCall, ns: u64) {
        let mut guard = self.trial.lock();
        let Trials {
            current: t,
            history,
        } = &mut *guard;
        t.add(call.bytes, call.arm, ns);
        if call.last {
            let before = self.decided.load(Ordering::Relaxed);
            let choice = decide(t, before);
            history.trials += 1;
            history.switches += u64::from(choice != before);
            history.last_ratio = t.ratio();
            self.decided.store(choice, Ordering::Relaxed);
            self.current.0.store(choice, Ordering::Relaxed);
            let next = if choice == before {
                PERIOD_CALLS
            } else {
                TRIAL_CALLS.saturating_add(CONFIRM_CALLS)
            };
            self.start
                .store(call.start.saturating_add(next), Ordering::Relaxed);
            *t = Trial::EMPTY;
        }
    }
}

/// The candidate of trial call `c`: the low bit of the SplitMix64 finaliser of `c` (see the
/// module documentation).
fn arm_of(c: u64) -> usize {
    let mut z = c.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) & 1) as usize
}

/// The candidate a finished trial keeps: the other one only when it was faster than
/// `incumbent` by more than [`SWITCH_MARGIN`] ([`Trial::ratio`]); else `incumbent`.
fn decide(t: &Trial, incumbent: usize) -> usize {
    let inc = incumbent % 2;
    let Some(r) = t.ratio() else {
        return inc;
    };
    // r: candidate 1's time over candidate 0's.
    let other_faster = if inc == 0 {
        r < 1.0 - SWITCH_MARGIN
    } else {
        1.0 / r < 1.0 - SWITCH_MARGIN
    };
    if other_faster {
        1 - inc
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

    /// A fresh tuner past its warm-up (whose calls are never trial calls).
    fn warmed() -> Tuner {
        let t = Tuner::new();
        for _ in 0..WARMUP_CALLS {
            assert!(t.begin(1 << 20).is_none(), "a warm-up call was timed");
            assert_eq!(t.distance(), CANDIDATES[FIRST_CHOICE]);
        }
        t
    }

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
        let t = warmed();
        assert_eq!(t.distance(), CANDIDATES[FIRST_CHOICE]);
        // The other candidate 10% faster: it takes over.
        let other = 1 - FIRST_CHOICE;
        let mut rates = [1.0; 2];
        rates[other] = 0.9;
        assert_eq!(trial(&t, rates), CANDIDATES[other]);
        assert_eq!(t.decided_distance(), CANDIDATES[other]);
        // A switch is confirmed soon: outside the trial calls are not timed and the choice
        // stays, for CONFIRM_CALLS calls.
        for _ in 0..CONFIRM_CALLS {
            assert!(t.begin(1 << 20).is_none());
            assert_eq!(t.distance(), CANDIDATES[other]);
        }
        // The confirming trial: the first choice 1% faster, inside the margin: the incumbent
        // stays, and the next trial is a whole period after this one's start.
        let mut rates = [1.0; 2];
        rates[FIRST_CHOICE] = 0.99;
        assert_eq!(trial(&t, rates), CANDIDATES[other]);
        for _ in TRIAL_CALLS..PERIOD_CALLS {
            assert!(t.begin(1 << 20).is_none());
        }
        // And 5% faster: it comes back.
        rates[FIRST_CHOICE] = 0.95;
        assert_eq!(trial(&t, rates), CANDIDATES[FIRST_CHOICE]);
        // The report: three trials, two of them switches, the last one's ratio (candidate 1
        // over candidate 0) as timed.
        let r = t.report();
        assert_eq!(r.distance_bytes, CANDIDATES[FIRST_CHOICE]);
        assert_eq!((r.trials, r.switches), (3, 2));
        let want = rates[1] / rates[0];
        assert!(
            r.last_ratio.is_some_and(|x| (x - want).abs() < 1e-3),
            "{:?} against {want}",
            r.last_ratio
        );
        assert_eq!(r.decode_calls, t.calls());
    }

    /// The candidate a trial call of index `c` gets, read off a fresh tuner.
    fn arms(n: u64) -> Vec<usize> {
        let t = warmed();
        (0..n)
            .map(|_| {
                let call = t.begin(4096).expect("a trial call");
                let arm = call.arm;
                t.end(call);
                arm
            })
            .collect()
    }

    #[test]
    fn every_weight_shape_meets_both_candidates() {
        let all = arms(TRIAL_CALLS);
        let ones = all.iter().filter(|&&a| a == 1).count();
        assert!(
            (200..=312).contains(&ones),
            "{ones} of {TRIAL_CALLS} on candidate 1"
        );
        // Decoders of 1-28 layers (four weight shapes a layer, then one or two head calls, so
        // tokens of odd and of even length), the trial starting anywhere in a token: every
        // layer shape is timed with both candidates, roughly half and half (alternating by the
        // index's parity, a token of even length gives each layer shape one candidate only).
        for layers in [1usize, 2, 3, 6, 12, 24, 28] {
            for heads in [1, 2] {
                let stride = 4 * layers + heads;
                for start in [0, 1, stride / 2] {
                    for s in 0..4 {
                        let seen: Vec<usize> = (0..all.len())
                            .filter(|&c| {
                                let p = (c + start) % stride;
                                p < 4 * layers && p % 4 == s
                            })
                            .map(|c| all[c])
                            .collect();
                        let ones = seen.iter().filter(|&&a| a == 1).count();
                        assert!(
                            4 * ones >= seen.len() && 4 * ones <= 3 * seen.len(),
                            "{layers} layers, {heads} heads, start {start}: shape {s} met \
                             candidate 1 in {ones} of {} calls",
                            seen.len()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn shapes_are_compared_one_by_one() {
        // A long call met three times with candidate 0 and once with 1, equally fast with
        // both, and a short call ten times each, 10% faster with candidate 1: pooled per byte,
        // candidate 0 would look faster (its long calls stream at a better rate per byte).
        let mut t = Trial::EMPTY;
        let (long, short) = (1u64 << 20, 100u64 << 10);
        for arm in [0, 0, 0, 1] {
            t.add(long, arm, long / 2);
        }
        for _ in 0..10 {
            t.add(short, 0, short);
            t.add(short, 1, short * 9 / 10);
        }
        let r = t.ratio().expect("both candidates timed");
        assert!(r < 1.0 - SWITCH_MARGIN, "ratio {r}");
        assert_eq!(decide(&t, 0), 1);
        assert_eq!(decide(&t, 1), 1);
    }

    #[test]
    fn trials_resume_when_a_last_call_never_ends() {
        let t = warmed();
        for _ in 0..TRIAL_CALLS - 1 {
            let call = t.begin(1 << 20).expect("a trial call");
            t.end_after(call, 1000);
        }
        // The last call's dispatch panicked: it is never ended, nothing is decided.
        drop(t.begin(1 << 20).expect("the last trial call"));
        let untimed = (0..2 * PERIOD_CALLS)
            .take_while(|_| t.begin(1 << 20).is_none())
            .count() as u64;
        assert!(
            (PERIOD_CALLS - TRIAL_CALLS..=PERIOD_CALLS).contains(&untimed),
            "trials resumed after {untimed} calls"
        );
    }

    #[test]
    fn a_preempted_call_does_not_decide() {
        // Candidate 1 10% faster on every call but one, which lost 2 ms (the lane preempted).
        let mut t = Trial::EMPTY;
        for i in 0..20 {
            t.add(1 << 16, 0, 20_000);
            t.add(1 << 16, 1, if i == 3 { 2_000_000 } else { 18_000 });
        }
        assert_eq!(decide(&t, 0), 1);
    }

    #[test]
    fn an_untimed_candidate_never_wins() {
        let mut t = Trial::EMPTY;
        t.add(1000, 0, 100);
        t.add(2000, 1, 1);
        assert_eq!(t.ratio(), None);
        assert_eq!(decide(&t, 0), 0);
        assert_eq!(decide(&t, 1), 1);
    }

    #[test]
    fn a_trial_holds_a_bounded_number_of_shapes() {
        let mut t = Trial::EMPTY;
        for b in 1..=(SHAPES as u64 + 5) {
            t.add(b, 0, 10);
            t.add(b, 1, 5);
        }
        assert!(t
            .shapes
            .iter()
            .all(|s| s.bytes != 0 && s.bytes <= SHAPES as u64));
        assert_eq!(t.ratio(), Some(0.5));
    }
}
