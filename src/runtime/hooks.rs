//! Test-only stall points: a test can run code (typically: block until it says go) at chosen
//! points of the caller's dispatch and of a worker's idle/park cycle, so that "the caller was
//! descheduled right after publishing" or "the worker was preempted between its spin and its
//! park" become cases the tests construct on purpose instead of waiting for a loaded machine
//! to produce them.
//!
//! # Cost
//!
//! Without the cargo feature `test-hooks` (the plugin users build: `cargo build --release -p
//! rcpu-ep`), `Hooks` is an empty struct whose `at` is an empty inline function: nothing is
//! compiled in. The library's own tests enable the feature through a self dev-dependency; a
//! build that unifies features with them (`cargo test --workspace`) gets one `Acquire` load of
//! a per-pool flag per stall point (plain load on x86), on paths that already cost a
//! publish, a futex, a `sched_yield` or `sched_setaffinity`; the call itself is out of line.
//! Every point is passed at most once per dispatch or per idle phase, next to a `yield_now`,
//! or once per idle-prefetch step (16 prefetch instructions).

/// Where a lane can be stalled. Worker points carry the worker's lane index (1..lanes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// The caller found itself on a worker's CPU, before it reads its affinity mask.
    CallerCollided,
    /// The caller published the job and has not claimed a chunk yet.
    CallerPublished,
    /// The caller is out of chunks and waits for a straggler (first wait iteration).
    CallerWaits,
    /// The caller, waiting for a straggler, has just yielded.
    CallerYielded,
    /// A worker saw a new epoch and has not borrowed the job yet.
    WorkerWoken(usize),
    /// A worker's spin phase ended without a job; it has not announced itself a sleeper yet.
    WorkerSpinEnded(usize),
    /// A worker announced itself a sleeper and found no job on its re-check; it has not taken
    /// the park mutex yet.
    WorkerParking(usize),
    /// A spinning worker has just taken one idle-read step (see `park`, "Idle reads").
    WorkerReadAhead(usize),
    /// A worker leaves its loop (the pool shuts down); the thread ends right after.
    WorkerExits(usize),
}

#[cfg(feature = "test-hooks")]
pub use enabled::Hook;
#[cfg(feature = "test-hooks")]
pub(crate) use enabled::Hooks;

#[cfg(feature = "test-hooks")]
mod enabled {
    use super::Point;
    use parking_lot::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// What a test runs at every stall point of one pool.
    pub type Hook = Arc<dyn Fn(Point) + Send + Sync>;

    /// The stall hook of one pool.
    #[derive(Default)]
    pub(crate) struct Hooks {
        armed: AtomicBool,
        hook: Mutex<Option<Hook>>,
    }

    impl Hooks {
        #[inline]
        pub(crate) fn at(&self, p: Point) {
            // Acquire: pairs with the Release in `set`, so the hook is visible once armed.
            if self.armed.load(Ordering::Acquire) {
                self.call(p);
            }
        }

        #[cold]
        #[inline(never)]
        fn call(&self, p: Point) {
            // Cloned out of the mutex: a hook may block, and other lanes call it concurrently.
            let h = self.hook.lock().clone();
            if let Some(h) = h {
                h(p);
            }
        }

        pub(crate) fn set(&self, hook: Option<Hook>) {
            let armed = hook.is_some();
            *self.hook.lock() = hook;
            self.armed.store(armed, Ordering::Release);
        }
    }
}

#[cfg(not(feature = "test-hooks"))]
/// Without `test-hooks`: nothing.
#[derive(Default)]
pub(crate) struct Hooks(());

#[cfg(not(feature = "test-hooks"))]
impl Hooks {
    #[inline(always)]
    pub(crate) fn at(&self, _p: Point) {}
}
