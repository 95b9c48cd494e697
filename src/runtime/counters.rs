//! Per-pool event counters: relaxed atomics, bumped at most once per dispatch or idle phase
//! (hot loops count in locals and add their totals when the loop ends), so they cost nothing
//! measurable and never bounce a cache line inside a spin loop.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($( $(#[$doc:meta])* $name:ident ),* $(,)?) => {
        /// A snapshot of one pool's counters (monotonic since the pool was created or its counters were last reset).
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
        pub struct PoolCounters {
            $( $(#[$doc])* pub $name: u64, )*
        }

        /// The live counters of one pool.
        #[derive(Debug, Default)]
        pub(crate) struct Counters {
            $( pub(crate) $name: AtomicU64, )*
        }

        impl Counters {
            pub(crate) fn snapshot(&self) -> PoolCounters {
                // Relaxed: counters are statistics; no other memory is published through them.
                PoolCounters { $( $name: self.$name.load(Ordering::Relaxed), )* }
            }

            /// Zeroes every counter (`RcpuEp_ResetStats`). Relaxed: a concurrent dispatch may
            /// land its increment before or after the reset; either is a valid reading.
            pub(crate) fn reset(&self) {
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
    /// Bytes idle workers hinted into their caches (`Lanes::idle_prefetch`) while spinning.
    idle_prefetch_bytes,
    /// Times a spinning worker left part of its idle-prefetch range for a new job.
    idle_prefetch_cut,
}

impl Counters {
    /// Adds `v` to counter `c` (relaxed; see `snapshot`).
    pub(crate) fn add(c: &AtomicU64, v: u64) {
        if v != 0 {
            c.fetch_add(v, Ordering::Relaxed);
        }
    }
}
