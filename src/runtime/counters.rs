//! Per-pool event counters: relaxed atomics, bumped at most once per dispatch or idle phase
//! (hot loops count in locals and add their totals when the loop ends), so they never bounce a
//! cache line inside a spin loop.
//!
//! Each lane bumps a block of its own ([`LaneCounters`], a cache-line pair: lane 0 for the
//! threads that dispatch, lane `w + 1` for worker `w`); a snapshot sums the blocks. With one
//! block for the whole pool, each dispatch moved its lines between the lanes: the caller bumped
//! `decode_dispatches`, every worker its spin counters as it picked the job up (before its first
//! chunk), the caller its straggler counters after the barrier, each an atomic read-modify-write
//! of a line another lane wrote last. With many workers these all hit one line at the same
//! moment. On two lanes (the development VM) the split measured neutral at model level
//! (Qwen2-0.5B decode, old / new per round: 1.001 over 97 rounds with the vCPUs near each other,
//! 0.993 over 23 with them apart), so it is kept for its reason, not for a measured gain.

use crate::os::cache::CachePadded;
use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($( $(#[$doc:meta])* $name:ident ),* $(,)?) => {
        /// A snapshot of one pool's counters (monotonic since the pool was created or its counters were last reset).
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
        pub struct PoolCounters {
            $( $(#[$doc])* pub $name: u64, )*
        }

        /// The live counters one lane bumps (kept on cache lines of their own by [`Counters`]).
        #[derive(Debug, Default)]
        pub(crate) struct LaneCounters {
            $( pub(crate) $name: AtomicU64, )*
        }

        impl LaneCounters {
            /// Adds this lane's counts to `into`.
            fn add_to(&self, into: &mut PoolCounters) {
                // Relaxed: counters are statistics; no other memory is published through them.
                $( into.$name = into.$name.saturating_add(self.$name.load(Ordering::Relaxed)); )*
            }

            /// Zeroes this lane's counters.
            fn reset(&self) {
                $( self.$name.store(0, Ordering::Relaxed); )*
            }
        }
    };
}

counters! {
    /// Decode dispatches (`Par::chunks(Dispatch::Decode, n, _)` with n > 0), inline ones included.
    decode_dispatches,
    /// Task dispatches (`Par::chunks(Dispatch::Task, n, _)` with n > 0), inline ones included.
    task_dispatches,
    /// Times a worker went to sleep on the pool's condition variable.
    parks,
    /// Times a parked worker was woken because a job (or shutdown) was published.
    wakes,
    /// Times an idle worker found a new job while spinning, without parking.
    spin_hits,
    /// Idle spin-loop iterations of the workers (each one `spin_loop` hint).
    spin_iters,
    /// `yield_now` calls made by spinning workers (every `WORKER_YIELD_EVERY` iterations).
    spin_yields,
    /// Dispatches whose caller finished its chunks and had to wait for a worker.
    straggler_waits,
    /// Wait iterations of callers waiting for stragglers.
    straggler_spins,
    /// `yield_now` calls made by callers waiting for stragglers.
    straggler_yields,
    /// Dispatches run serially on the calling lane because they were issued from inside a
    /// running chunk (nested dispatch).
    inline_fallbacks,
    /// Multi-lane dispatches whose calling thread was running on a CPU a worker is pinned to
    /// (the two lanes would share one CPU).
    caller_collisions,
    /// Of those, dispatches for which the caller was moved to the lane-0 CPU (its affinity
    /// mask is restored when the dispatch returns).
    caller_moves,
    /// Dispatches that found the pool busy with another thread's dispatch and waited for it.
    contended_dispatches,
    /// Bytes idle workers read ahead into their caches (`Lanes::idle_read`) while spinning
    /// (before they read with loads: bytes they issued prefetches for; the name stays for the
    /// stats' readers).
    idle_prefetch_bytes,
    /// Times a spinning worker left part of its idle-prefetch range for a new job.
    idle_prefetch_cut,
}

/// The live counters of one pool: one [`LaneCounters`] per lane, each on cache lines no other
/// lane writes.
#[derive(Debug)]
pub(crate) struct Counters {
    lanes: Box<[CachePadded<LaneCounters>]>,
}

impl Counters {
    /// Counters for a pool of `lanes` lanes (at least one block).
    pub(crate) fn new(lanes: usize) -> Counters {
        Counters {
            lanes: (0..lanes.max(1)).map(|_| CachePadded::default()).collect(),
        }
    }

    /// The block lane `lane` bumps (0: the dispatching threads; `w + 1`: worker `w`). A lane
    /// past the pool's count (never passed) shares the last block: a statistic, never a fault.
    pub(crate) fn lane(&self, lane: usize) -> &LaneCounters {
        &self.lanes[lane.min(self.lanes.len() - 1)].0
    }

    /// The sum over the lanes.
    pub(crate) fn snapshot(&self) -> PoolCounters {
        let mut out = PoolCounters::default();
        for l in self.lanes.iter() {
            l.0.add_to(&mut out);
        }
        out
    }

    /// Zeroes every counter (`RcpuEp_ResetStats`). Relaxed: a concurrent dispatch may land its
    /// increment before or after the reset; either is a valid reading.
    pub(crate) fn reset(&self) {
        for l in self.lanes.iter() {
            l.0.reset();
        }
    }

    /// Adds `v` to counter `c` (relaxed; see `snapshot`).
    pub(crate) fn add(c: &AtomicU64, v: u64) {
        if v != 0 {
            c.fetch_add(v, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_lane_bumps_its_own_cache_lines_and_a_snapshot_sums_them() {
        let c = Counters::new(3);
        // No two lanes' blocks share a 128-byte line pair (the adjacent-line prefetcher moves
        // lines in pairs): each block is aligned to it and fills it.
        assert_eq!(std::mem::align_of::<CachePadded<LaneCounters>>(), 128);
        let addr = |l: usize| c.lane(l) as *const LaneCounters as usize;
        for l in 0..3 {
            assert_eq!(addr(l) % 128, 0);
        }
        assert!(addr(1) - addr(0) >= 128 && addr(2) - addr(1) >= 128);
        Counters::add(&c.lane(0).decode_dispatches, 2);
        Counters::add(&c.lane(1).spin_hits, 1);
        Counters::add(&c.lane(2).spin_hits, 4);
        Counters::add(&c.lane(2).decode_dispatches, 1);
        // A lane past the count shares the last block rather than faulting.
        Counters::add(&c.lane(9).parks, 1);
        let s = c.snapshot();
        assert_eq!((s.decode_dispatches, s.spin_hits, s.parks), (3, 5, 1));
        c.reset();
        assert_eq!(c.snapshot(), PoolCounters::default());
    }
}
