//! How idle workers wait for the next job: spin, yield on an interval, then park.
//!
//! # The protocol
//!
//! State (all in [`Signal`]): `epoch`, a job generation counter bumped once per published
//! job (and once at shutdown); `sleepers`, the number of workers that are about to park or
//! parked; `shutdown`; and a mutex + condition variable used only for parking.
//!
//! Every worker remembers the last epoch it acted on (`seen`). After each job it:
//! 1. **spins**: loads `epoch` (Acquire) each iteration; a value other than `seen` means a
//!    new job (a *spin hit*). Each iteration issues `std::hint::spin_loop()`; every
//!    [`WORKER_YIELD_EVERY`] iterations (never on every one) it calls `yield_now` so a
//!    co-scheduled thread can run, and every [`CLOCK_CHECK_EVERY`] iterations it reads the
//!    clock; when `blocktime_us` has elapsed (immediately when it is 0) it stops spinning;
//! 2. **announces** itself: `sleepers += 1` (SeqCst), then re-loads `epoch` (SeqCst). If the
//!    epoch moved it withdraws (`sleepers -= 1`) and takes the job;
//! 3. **parks**: takes the mutex, re-checks `epoch`/`shutdown` under it, and waits on the
//!    condvar until the epoch moves (loop, so spurious wake-ups are harmless); then
//!    `sleepers -= 1` and it takes the job.
//!
//! A publisher (the dispatching thread, or `Lanes::drop` for shutdown) bumps `epoch`
//! (SeqCst) and *then* loads `sleepers` (SeqCst); if it is non-zero it locks and unlocks the
//! mutex and calls `notify_all`. Zero sleepers means no syscall and no lock at all: the
//! common case while workers spin between the ops of one token.
//!
//! # Why no wake-up is lost
//!
//! Worker: `A1 sleepers += 1; A2 load epoch`. Publisher: `B1 epoch += 1; B2 load sleepers`.
//! All four are SeqCst, so they are totally ordered. If A2 misses B1 (A2 before B1), then A1
//! precedes B2, so B2 sees the worker and the publisher notifies. The notification cannot
//! slip in between the worker's check and its wait: the worker checks `epoch` while holding
//! the mutex and `Condvar::wait` releases it atomically, and the publisher takes that same
//! mutex (after B1) before notifying. Either the publisher's lock comes first, and then the
//! worker's check under the mutex happens after B1 and sees the new epoch; or the worker is
//! already waiting when the publisher gets the mutex, and the notification reaches it.
//! If A2 sees B1, the worker never parks. (Not all publishers need to notify: when B2 reads
//! 0, every worker's A2 comes later than B1 in the order and sees the new epoch.)
//!
//! `sleepers -= 1` after waking is Relaxed: a stale non-zero value only costs a publisher
//! one needless lock/notify, never a lost wake-up. `shutdown` is stored (SeqCst) before the
//! shutdown epoch bump, so a worker that sees that epoch (Acquire) also sees `shutdown`.
//!
//! # Idle reads
//!
//! While it spins, a worker may also warm its cache for the next job: the pool's owner posts a
//! *hint* ([`IdleHint`]: a byte range inside bytes an owner holds, at most
//! [`HINT_MAX_BYTES`](super::warm::HINT_MAX_BYTES); `Lanes::idle_read`) into the pool's hint
//! slot (the hint is stored under a mutex, then a generation bumped, Release; `runtime::warm`).
//! Every spin iteration, after it has looked at `epoch`, the worker loads the generation
//! (Acquire); a new value makes it take the hint (under the mutex) and start at its beginning.
//! As long as some of it is left, the iteration reads the next
//! [`STEP_BYTES`](super::warm::STEP_BYTES) of it (one load per cache line) instead of issuing
//! the `spin_loop` hint. So:
//!
//! - a job is never delayed by more than one step: the epoch is checked before every step
//!   exactly as before (a step is 16 loads, a fraction of a microsecond even when every line
//!   comes from memory), and a worker that sees a new epoch leaves the rest of the hint (it
//!   resumes it after the job if no newer hint arrived; a posted empty hint cancels it);
//! - the hint needs no ordering with the job: it only names bytes to read, and a worker reads the
//!   range only while it holds the range's owner (a hint holds its owner weakly; the worker
//!   upgrades the reference for the range it reads, so an owner outlives its last other user
//!   by at most the rest of that range, or until the next hint or the worker parks), and a range
//!   whose owner is gone is skipped; the reads change nothing but the caches;
//! - a worker that parks drops what is left of its hint (by then it is stale).
//!
//! Loads, not prefetch instructions: see `runtime::warm` for what was measured.
//!
//! The job itself is not in [`Signal`]: the publisher lends it through `lend::FnLender`
//! *before* bumping the epoch, so a worker that sees the bump finds the job (or, if it
//! arrives late, an empty lender, which simply means the job is already done).

use super::counters::{Counters, LaneCounters};
use super::hooks::{Hooks, Point};
use super::warm::{Cursor, HintSlot, IdleHint};
use crate::os::cache::CachePadded;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A spinning worker yields once every this many spin iterations.
pub const WORKER_YIELD_EVERY: u64 = 256;
/// A spinning worker reads the clock once every this many iterations.
pub const CLOCK_CHECK_EVERY: u64 = 64;
/// A caller waiting for a straggler spins this many iterations before it starts yielding...
pub const CALLER_SPINS_BEFORE_YIELD: u64 = 1024;
/// ...and then yields once every this many iterations.
pub const CALLER_YIELD_EVERY: u64 = 64;

/// What a waiting worker was woken for.
pub(crate) enum Wake {
    /// A new epoch (a job may be lent; it may also be over already).
    Job(u64),
    /// The pool is shutting down.
    Exit,
}

/// The publish/park rendezvous of one pool (see the module documentation).
#[derive(Default)]
pub(crate) struct Signal {
    // Each on cache lines of its own: the hot `epoch` away from the other fields and the mutex.
    epoch: CachePadded<AtomicU64>,
    sleepers: CachePadded<AtomicUsize>,
    hint: CachePadded<HintSlot>,
    shutdown: AtomicBool,
    lock: Mutex<()>,
    cv: Condvar,
}

impl Signal {
    /// Announces a new job and wakes parked workers if there are any.
    pub(crate) fn publish(&self) {
        // B1, SeqCst: ordered against the workers' A2 loads (see module docs); also a release
        // of the job lent just before.
        self.epoch.0.fetch_add(1, Ordering::SeqCst);
        // B2, SeqCst: must not be reordered before B1.
        if self.sleepers.0.load(Ordering::SeqCst) != 0 {
            self.wake_all();
        }
    }

    fn wake_all(&self) {
        // Empty critical section: serialises with a worker between its check and its wait.
        drop(self.lock.lock());
        self.cv.notify_all();
    }

    /// Tells every worker to exit, waking the parked ones.
    pub(crate) fn shutdown(&self) {
        // SeqCst store before the epoch bump: a worker that sees the bump sees the flag.
        self.shutdown.store(true, Ordering::SeqCst);
        self.epoch.0.fetch_add(1, Ordering::SeqCst);
        // Unconditional: shutdown is rare, so no need for the sleeper-count shortcut.
        self.wake_all();
    }

    /// Posts an idle-read hint (`None` cancels the current one); see the module docs.
    pub(crate) fn hint(&self, hint: Option<IdleHint>) {
        self.hint.0.post(hint);
    }

    fn moved(&self, seen: u64, order: Ordering) -> Option<Wake> {
        let e = self.epoch.0.load(order);
        if e == seen {
            None
        } else if self.shutdown.load(Ordering::Acquire) {
            // Acquire pairs with the SeqCst store in `shutdown` (ordered before the bump).
            Some(Wake::Exit)
        } else {
            Some(Wake::Job(e))
        }
    }

    /// Waits (spin, then park) until the epoch differs from `seen`; `lane` is the worker's
    /// lane (for the stall hooks).
    /// `cur` is the worker's progress through its idle-read hint, kept across jobs.
    pub(crate) fn wait(
        &self,
        seen: u64,
        blocktime: Duration,
        c: &LaneCounters,
        hooks: &Hooks,
        lane: usize,
        cur: &mut Cursor,
    ) -> Wake {
        if let Some(w) = self.spin(seen, blocktime, c, hooks, lane, cur) {
            return w;
        }
        // Whatever is left of the hint is stale by the time this worker wakes again.
        cur.drop_rest();
        hooks.at(Point::WorkerSpinEnded(lane));
        // A1, SeqCst: announce before the re-check (A2).
        self.sleepers.0.fetch_add(1, Ordering::SeqCst);
        // A2, SeqCst.
        if let Some(w) = self.moved(seen, Ordering::SeqCst) {
            // Relaxed: a stale count only causes a needless notify.
            self.sleepers.0.fetch_sub(1, Ordering::Relaxed);
            Counters::add(&c.spin_hits, 1);
            return w;
        }
        Counters::add(&c.parks, 1);
        hooks.at(Point::WorkerParking(lane));
        let mut g = self.lock.lock();
        let w = loop {
            // Under the mutex, so a publisher's notify cannot fall between this and `wait`.
            if let Some(w) = self.moved(seen, Ordering::SeqCst) {
                break w;
            }
            self.cv.wait(&mut g);
        };
        drop(g);
        // Relaxed: see module docs.
        self.sleepers.0.fetch_sub(1, Ordering::Relaxed);
        Counters::add(&c.wakes, 1);
        w
    }

    /// The spin phase: `Some` if the epoch moved within `blocktime`.
    fn spin(
        &self,
        seen: u64,
        blocktime: Duration,
        c: &LaneCounters,
        hooks: &Hooks,
        lane: usize,
        cur: &mut Cursor,
    ) -> Option<Wake> {
        if blocktime.is_zero() {
            return None;
        }
        let start = Instant::now();
        let (mut iters, mut yields, mut hinted) = (0u64, 0u64, 0usize);
        let found = loop {
            // Acquire: pairs with the publisher's bump, making the lent job visible.
            if let Some(w) = self.moved(seen, Ordering::Acquire) {
                break Some(w);
            }
            // At most one read step between two looks at the epoch (module docs).
            match cur.step(&self.hint.0) {
                0 => std::hint::spin_loop(),
                n => {
                    hinted += n;
                    hooks.at(Point::WorkerReadAhead(lane));
                }
            }
            iters += 1;
            if iters % WORKER_YIELD_EVERY == 0 {
                std::thread::yield_now();
                yields += 1;
            }
            if iters % CLOCK_CHECK_EVERY == 0 && start.elapsed() >= blocktime {
                break None;
            }
        };
        Counters::add(&c.spin_iters, iters);
        Counters::add(&c.spin_yields, yields);
        Counters::add(&c.idle_prefetch_bytes, hinted as u64);
        if found.is_some() {
            Counters::add(&c.spin_hits, 1);
            if cur.pending() {
                Counters::add(&c.idle_prefetch_cut, 1);
            }
        }
        found
    }
}

/// The caller's wait for stragglers, one call per wait iteration: spin, and after
/// [`CALLER_SPINS_BEFORE_YIELD`] iterations also yield every [`CALLER_YIELD_EVERY`].
#[derive(Default)]
pub(crate) struct StragglerWait {
    pub(crate) spins: u64,
    pub(crate) yields: u64,
}

impl StragglerWait {
    pub(crate) fn step(&mut self, i: u64, hooks: &Hooks) {
        if i == 0 {
            hooks.at(Point::CallerWaits);
        }
        self.spins += 1;
        std::hint::spin_loop();
        if i >= CALLER_SPINS_BEFORE_YIELD && i.is_multiple_of(CALLER_YIELD_EVERY) {
            std::thread::yield_now();
            self.yields += 1;
            hooks.at(Point::CallerYielded);
        }
    }

    pub(crate) fn record(&self, c: &LaneCounters) {
        if self.spins > 0 {
            Counters::add(&c.straggler_waits, 1);
            Counters::add(&c.straggler_spins, self.spins);
            Counters::add(&c.straggler_yields, self.yields);
        }
    }
}
