//! The pinned worker lanes: the calling thread plus `threads - 1` pinned workers, and the one
//! dispatch kernels use (`Par::chunks`).
//!
//! # One engine
//!
//! A dispatch publishes one job to every worker and lets all lanes (the caller included)
//! claim chunk indices from one atomic counter until it is exhausted. The caller then waits
//! until every worker that joined the job has left it (the barrier). The `Dispatch` kind
//! (decode: small latency-critical chunks; task: prefill-sized chunks) only picks the counter
//! the dispatch is counted under.
//!
//! The job (a closure borrowing the caller's stack, including the kernel's non-`'static`
//! `f`) is lent to the workers through `lend::FnLender`, which does not return before no
//! worker can touch it any more; that is what makes the borrow sound without `'static`.
//!
//! # Shortcuts
//!
//! `n == 0` returns at once; `n == 1` or a one-lane pool runs on the caller without waking
//! anybody (and without marking the caller as inside a chunk, so a single chunk may itself
//! dispatch onto the pool).
//!
//! # Nested and concurrent dispatch
//!
//! - A dispatch issued from inside a running chunk (any pool; detected with a thread-local
//!   flag that is set on workers and on a caller while it runs chunks) runs serially on that
//!   lane and counts an `inline_fallbacks`. The outer job already occupies every lane, so
//!   this loses nothing and cannot deadlock.
//! - Dispatches from several threads at once (several sessions sharing one pool) are
//!   serialised by a dispatch mutex. A dispatcher that finds the pool busy *waits* for it
//!   (counted as `contended_dispatches`) rather than running serially: the other dispatch is
//!   short (one op), and afterwards this one gets every lane, which beats one lane.
//!
//! # Caller placement
//!
//! Lane 0 is the application's thread, which rcpu never pins: it runs wherever the OS puts it.
//! When it wakes up on a CPU a worker is pinned to (the OS tends to wake a thread on the CPU it
//! last ran on, and a parked worker leaves its CPU idle), the caller and that worker share one
//! CPU for the whole dispatch and the job takes about twice as long; the OS's load balancer
//! fixes it only milliseconds later. So a multi-lane dispatch first asks `sched_getcpu`; if the
//! caller sits on a worker's CPU (`caller_collisions`), it moves itself to the CPU planned for
//! lane 0 (if its own mask allows that CPU) for the dispatch and puts its original affinity
//! mask back when the dispatch returns (`caller_moves`; also on unwind). The thread then simply
//! stays where it is until the OS moves it again. A dispatch that finds no collision pays one
//! `sched_getcpu` (a read of the rseq area with current glibc).
//!
//! # Panics
//!
//! A panic inside `f` is caught on whichever lane ran the chunk (remaining chunks still run),
//! and the first payload is re-raised on the caller after the barrier. The pool stays usable.

use super::affinity::{pin_current, Affinity};
use super::counters::{Counters, PoolCounters};
use super::hooks::{Hooks, Point};
use super::lend::FnLender;
use super::par::{Dispatch, Par};
use super::park::{Signal, StragglerWait, Wake};
use super::topology::Topology;
use super::warm::{Cursor, IdleHint};
use crate::os;
use parking_lot::Mutex;
use std::any::Any;
use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

/// Default spin time before an idle worker parks, in microseconds.
///
/// Chosen with `examples/runtime_blocktime.rs` (2 lanes, a job of 2 x 5 us chunks, the caller
/// busy for a "gap" between dispatches; 2 shared vCPUs under load average 7-10, so only the
/// shape of the result counts). Parking at once (0) cost 5-30 us of p50 dispatch latency at
/// every gap of 20 us and more (the futex wake-up), and more worker CPU than spinning at
/// short gaps. 50 us was already too short for a 500 us gap (p50 18 us vs 10.5 us); 200 us and
/// 1000 us both hid the wake-up there, but 1000 us cost ~1.7x the worker CPU of 200 us per
/// dispatch at a 3 ms gap (160 vs 94 us). 200 us covers the host-side gaps between the ops
/// of one decode step (tens of us) and parks the workers in the gap between tokens, where a
/// spin would be pure waste; the spin after the last op of a token is bounded by 200 us of
/// CPU per worker.
pub const DEFAULT_BLOCKTIME_US: u64 = 200;

/// Configuration of one pool. Sessions with equal configurations share one pool.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct PoolConfig {
    /// Lanes, the calling thread included; 0 means [`default_threads`].
    pub threads: usize,
    pub affinity: Affinity,
    /// How long an idle worker spins before parking; 0 parks immediately.
    pub blocktime_us: u64,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            threads: 0,
            affinity: Affinity::Physical,
            blocktime_us: DEFAULT_BLOCKTIME_US,
        }
    }
}

impl PoolConfig {
    /// The same configuration with `threads == 0` replaced by [`default_threads`].
    pub fn resolved(&self) -> PoolConfig {
        let mut c = self.clone();
        if c.threads == 0 {
            c.threads = default_threads();
        }
        c
    }
}

/// Default lane count: the number of physical cores in the process affinity mask.
pub fn default_threads() -> usize {
    super::topology::physical_cores()
}

thread_local! {
    /// True on worker threads, and on a caller while it runs chunks of a dispatch.
    static IN_CHUNK: Cell<bool> = const { Cell::new(false) };
}

/// Sets `IN_CHUNK` for a scope, restoring the previous value (also on unwind).
struct InChunk(bool);

impl InChunk {
    fn enter() -> Self {
        InChunk(IN_CHUNK.with(|c| c.replace(true)))
    }
}

impl Drop for InChunk {
    fn drop(&mut self) {
        IN_CHUNK.with(|c| c.set(self.0));
    }
}

/// What the workers share with the pool handle.
struct Shared {
    signal: Signal,
    lender: FnLender,
    counters: Counters,
    blocktime: Duration,
    /// Test-only stall points (empty without the `test-hooks` feature).
    hooks: Hooks,
}

/// One pool of lanes. Obtain it with [`super::pool_for`]; dropping the last handle stops and
/// joins the workers.
pub struct Lanes {
    cfg: PoolConfig,
    shared: Arc<Shared>,
    cpus: Vec<Option<usize>>,
    /// The CPU planned for lane 0 (the caller): where a caller found on a worker's CPU moves.
    caller_cpu: Option<usize>,
    tids: Vec<i32>,
    workers: Vec<JoinHandle<()>>,
    dispatch: Mutex<()>,
}

impl Lanes {
    /// Starts `cfg.threads - 1` workers (`rcpu-w0`, ...) pinned per `cfg.affinity`. Pinning or
    /// spawn failures are logged (`log`: pinning at INFO, spawn at WARN); the pool then runs
    /// unpinned or with fewer lanes.
    pub(crate) fn start(cfg: &PoolConfig) -> Lanes {
        let cfg = cfg.resolved();
        let threads = cfg.threads.max(1);
        let plan = cfg.affinity.plan(threads, &Topology::detect());
        let shared = Arc::new(Shared {
            signal: Signal::default(),
            lender: FnLender::new(),
            counters: Counters::new(threads),
            blocktime: Duration::from_micros(cfg.blocktime_us),
            hooks: Hooks::default(),
        });
        let (tx, rx) = mpsc::channel();
        let mut workers = Vec::new();
        for w in 0..threads - 1 {
            let (sh, tx, cpu) = (shared.clone(), tx.clone(), plan[w + 1]);
            let spawned = std::thread::Builder::new()
                .name(format!("rcpu-w{w}"))
                .spawn(move || {
                    let pinned = pin_current(cpu);
                    let _ = tx.send((w, os::gettid(), pinned.map(|_| cpu)));
                    drop(tx);
                    worker_main(&sh, w + 1);
                });
            match spawned {
                Ok(h) => workers.push(h),
                Err(e) => {
                    log::warn!("could not start worker rcpu-w{w}: {e}; running with fewer lanes");
                    break;
                }
            }
        }
        drop(tx);
        let mut cpus = vec![None; workers.len() + 1];
        let mut tids = vec![0; workers.len()];
        for (w, tid, pinned) in rx.iter().take(workers.len()) {
            tids[w] = tid;
            cpus[w + 1] = pinned.unwrap_or_else(|e| {
                log::info!("{e}; lane {} runs unpinned", w + 1);
                None
            });
        }
        Lanes {
            cfg,
            shared,
            cpus,
            caller_cpu: plan[0],
            tids,
            workers,
            dispatch: Mutex::new(()),
        }
    }

    /// Zeroes this pool's counters.
    pub fn reset_counters(&self) {
        self.shared.counters.reset()
    }

    /// Lanes, the calling thread included.
    pub fn lanes(&self) -> usize {
        self.workers.len() + 1
    }

    /// The CPU each lane is pinned to (`None`: not pinned; lane 0, the caller, is never pinned).
    pub fn cpus(&self) -> &[Option<usize>] {
        &self.cpus
    }

    /// Kernel thread ids of the workers (for per-thread CPU accounting from /proc).
    pub fn worker_tids(&self) -> &[i32] {
        &self.tids
    }

    /// The (resolved) configuration this pool was started with.
    pub fn config(&self) -> &PoolConfig {
        &self.cfg
    }

    /// A snapshot of this pool's counters.
    pub fn counters(&self) -> PoolCounters {
        self.shared.counters.snapshot()
    }

    /// Test-only (feature `test-hooks`): runs `hook` at every stall point of this pool (see
    /// [`super::hooks::Point`]), replacing the previous hook; `None` removes it. A hook that
    /// blocks stalls that lane right there.
    #[cfg(feature = "test-hooks")]
    pub fn set_stall_hook(&self, hook: Option<super::hooks::Hook>) {
        self.shared.hooks.set(hook)
    }

    /// Asks the idle workers to read `hint` into their caches while they spin (see "Idle
    /// reads" in `park`); `None` cancels the current hint. A hint only costs memory traffic: it
    /// never delays a dispatch by more than one read step, and it holds its bytes' owners
    /// weakly (a range whose owner is gone is skipped). Nothing with a one-lane pool.
    pub fn idle_read(&self, hint: Option<IdleHint>) {
        if self.workers.is_empty() {
            return;
        }
        self.shared.signal.hint(hint);
    }

    fn dispatch(&self, kind: Dispatch, n: usize, f: &(dyn Fn(usize) + Sync)) {
        if n == 0 {
            return;
        }
        // Lane 0's block: the dispatching threads' own (see `counters`).
        let c = self.shared.counters.lane(0);
        Counters::add(
            match kind {
                Dispatch::Decode => &c.decode_dispatches,
                Dispatch::Task => &c.task_dispatches,
            },
            1,
        );
        if n == 1 || self.workers.is_empty() {
            (0..n).for_each(f);
            return;
        }
        if IN_CHUNK.with(Cell::get) {
            Counters::add(&c.inline_fallbacks, 1);
            (0..n).for_each(f);
            return;
        }
        let _pool = match self.dispatch.try_lock() {
            Some(g) => g,
            None => {
                Counters::add(&c.contended_dispatches, 1);
                self.dispatch.lock()
            }
        };
        let _placed = self.place_caller();
        super::par::note_lanes_used((self.workers.len() + 1).min(n));
        let next = AtomicUsize::new(0);
        let panicked: Mutex<Option<Box<dyn Any + Send>>> = Mutex::new(None);
        let job = |_lane: usize| loop {
            // Relaxed: only uniqueness of indices matters; chunk results are published by the
            // lender's SeqCst release at the barrier.
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                break;
            }
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(i))) {
                panicked.lock().get_or_insert(p);
            }
        };
        let mut wait = StragglerWait::default();
        self.shared.lender.lend(
            &job,
            || {
                self.shared.signal.publish();
                self.shared.hooks.at(Point::CallerPublished);
                let _in = InChunk::enter();
                job(0);
            },
            &mut |i| wait.step(i, &self.shared.hooks),
        );
        wait.record(c);
        if let Some(p) = panicked.into_inner() {
            resume_unwind(p);
        }
    }
}

impl Lanes {
    /// Moves the caller off a worker's CPU for one dispatch (see "Caller placement"); the guard
    /// puts the caller's affinity mask back when dropped.
    fn place_caller(&self) -> CallerMove {
        let c = self.shared.counters.lane(0);
        let (Some(home), Some(cur)) = (self.caller_cpu, os::current_cpu()) else {
            return CallerMove(None);
        };
        if cur == home || !self.cpus[1..].contains(&Some(cur)) {
            return CallerMove(None);
        }
        Counters::add(&c.caller_collisions, 1);
        self.shared.hooks.at(Point::CallerCollided);
        let Ok(saved) = os::SavedAffinity::save() else {
            return CallerMove(None);
        };
        if !saved.contains(home) || os::pin_current_thread(home).is_err() {
            return CallerMove(None);
        }
        Counters::add(&c.caller_moves, 1);
        CallerMove(Some(saved))
    }
}

/// The caller's saved affinity mask while it is moved for a dispatch; restores it on drop.
struct CallerMove(Option<os::SavedAffinity>);

impl Drop for CallerMove {
    fn drop(&mut self) {
        if let Some(saved) = &self.0 {
            // Best effort: the mask was readable a moment ago, so putting it back can only
            // fail if the application changed the process's CPUs meanwhile; the thread then
            // keeps running on lane 0's CPU, which is still inside its mask.
            let _ = saved.restore();
        }
    }
}

fn worker_main(sh: &Shared, lane: usize) {
    IN_CHUNK.with(|c| c.set(true));
    let counters = sh.counters.lane(lane);
    let mut seen = 0;
    let mut cur = Cursor::default();
    loop {
        match sh
            .signal
            .wait(seen, sh.blocktime, counters, &sh.hooks, lane, &mut cur)
        {
            Wake::Exit => {
                sh.hooks.at(Point::WorkerExits(lane));
                return;
            }
            Wake::Job(e) => {
                seen = e;
                sh.hooks.at(Point::WorkerWoken(lane));
                sh.lender.borrow(|job| job(lane));
            }
        }
    }
}

impl std::fmt::Debug for Lanes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lanes")
            .field("config", &self.cfg)
            .field("cpus", &self.cpus)
            .field("worker_tids", &self.tids)
            .field("counters", &self.counters())
            .finish()
    }
}

impl Par for Lanes {
    fn lanes(&self) -> usize {
        Lanes::lanes(self)
    }
    fn idle_read(&self, hint: Option<IdleHint>) {
        Lanes::idle_read(self, hint)
    }
    fn chunks(&self, kind: Dispatch, n: usize, f: &(dyn Fn(usize) + Sync)) {
        self.dispatch(kind, n, f)
    }
}

impl Drop for Lanes {
    fn drop(&mut self) {
        self.shared.signal.shutdown();
        let me = std::thread::current().id();
        for h in self.workers.drain(..) {
            // A worker dropping the last handle from inside a chunk cannot join itself; it
            // exits on its own once the chunk returns (it sees the shutdown epoch).
            if h.thread().id() != me {
                let _ = h.join();
            }
        }
    }
}
