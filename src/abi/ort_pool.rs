//! rcpu's chunks on ORT's own intra-op pool, through `OrtApi::KernelContext_ParallelFor`: one
//! more [`Par`] (issue 17, "mixed partitions": when ORT's CPU EP runs heavy nodes of the same
//! session, its pool and rcpu's lanes take turns on the same cores; this lets rcpu's nodes use
//! ORT's pool instead of fighting it).
//!
//! ORT's pool is reachable only through the `OrtKernelContext` of a running `Compute`, so the
//! kernel shell publishes that context in a thread-local for the duration of the call
//! ([`ComputeScope`]); [`OrtPoolPar::chunks`] dispatches on it, and runs the chunks on the calling
//! thread where there is none (outside `Compute`, e.g. prepacking, or a dispatch from inside a
//! chunk, which ORT's pool would run inline anyway).

use std::any::Any;
use std::cell::Cell;
use std::ffi::c_void;
use std::panic::resume_unwind;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::api::api;
use super::ep_types::OrtKernelContext;
use super::status::{check, guard_payload};
use crate::runtime::par::{Dispatch, Par};

thread_local! {
    /// The context of the `Compute` call running on this thread (NULL: none).
    static CURRENT: Cell<*const OrtKernelContext> = const { Cell::new(std::ptr::null()) };
}

/// Publishes `ctx` as this thread's running `Compute` context until dropped (then restores the
/// previous one).
pub(crate) struct ComputeScope {
    prev: *const OrtKernelContext,
}

impl ComputeScope {
    /// # Safety
    /// `ctx` must stay the live context of the running `Compute` call for as long as the scope
    /// lives (the scope must be dropped before `Compute` returns).
    pub(crate) unsafe fn enter(ctx: *const OrtKernelContext) -> ComputeScope {
        ComputeScope {
            prev: CURRENT.with(|c| c.replace(ctx)),
        }
    }
}

impl Drop for ComputeScope {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.prev));
    }
}

/// Runs chunks on ORT's intra-op pool of the session whose `Compute` is running on the
/// dispatching thread. `lanes` is what kernels split their work for (the size of ORT's pool is
/// not readable through the API; ORT's default is one thread per physical core, as rcpu's).
#[derive(Debug)]
pub struct OrtPoolPar {
    lanes: usize,
}

impl OrtPoolPar {
    pub fn new(lanes: usize) -> OrtPoolPar {
        OrtPoolPar {
            lanes: lanes.max(1),
        }
    }
}

/// What the trampoline needs: the chunk closure, the first panic, how many chunks ran.
struct Job<'a> {
    f: &'a (dyn Fn(usize) + Sync),
    panicked: Mutex<Option<Box<dyn Any + Send>>>,
    started: AtomicUsize,
}

/// Called by ORT's pool threads (and the dispatching thread) once per index.
///
/// # Safety
/// `data` is the `Job` [`OrtPoolPar::chunks`] passed, alive until `KernelContext_ParallelFor`
/// returns (it does so only after every call of this function has returned).
unsafe extern "C" fn run_chunk(data: *mut c_void, i: usize) {
    // SAFETY: per the contract, a live Job, only read (shared) here.
    let job = unsafe { &*(data as *const Job<'_>) };
    job.started.fetch_add(1, Ordering::Relaxed);
    // No panic may unwind into ORT's pool: keep the first, re-raise it on the dispatcher.
    // A chunk that dispatches again runs that dispatch inline: no context on this thread.
    let scope_free = CURRENT.with(|c| c.replace(std::ptr::null()));
    let r = guard_payload(|| (job.f)(i));
    CURRENT.with(|c| c.set(scope_free));
    if let Err(p) = r {
        let mut slot = job.panicked.lock().unwrap_or_else(|e| e.into_inner());
        slot.get_or_insert(p);
    }
}

impl Par for OrtPoolPar {
    fn lanes(&self) -> usize {
        self.lanes
    }

    fn chunks(&self, _kind: Dispatch, n: usize, f: &(dyn Fn(usize) + Sync)) {
        let ctx = CURRENT.with(Cell::get);
        if ctx.is_null() || n <= 1 {
            (0..n).for_each(f);
            return;
        }
        crate::runtime::par::note_lanes_used(self.lanes.min(n));
        let job = Job {
            f,
            panicked: Mutex::new(None),
            started: AtomicUsize::new(0),
        };
        let data = &job as *const Job<'_> as *mut c_void;
        // SAFETY: ctx is the live context of the running Compute (ComputeScope's contract);
        // run_chunk's contract holds: ORT's parallel-for returns after every index ran.
        let status = unsafe {
            check((api().ort.KernelContext_ParallelFor)(
                ctx as *const _,
                run_chunk,
                n,
                0,
                data,
            ))
        };
        if let Some(p) = job.panicked.into_inner().unwrap_or_else(|e| e.into_inner()) {
            resume_unwind(p);
        }
        if let Err(e) = status {
            // Refused before running anything: run here. Otherwise which chunks ran is
            // unknown, and the kernel's output cannot be trusted: fail the node (the kernel
            // shell's guard turns the panic into a status naming it).
            assert!(
                job.started.load(Ordering::Relaxed) == 0,
                "ORT's parallel-for failed part-way: {}",
                e.msg
            );
            (0..n).for_each(f);
        }
    }
}
