//! The parallel-execution interface kernels are written against.
//!
//! Kernels never see threads: they describe their work as `n` independent chunks and hand a
//! closure to one of the two dispatches. `Serial` runs everything on the caller (tests, tiny
//! work); the pinned worker lanes (`runtime::lanes`) implement the same trait.

/// A way to run `n` independent chunks of work, possibly in parallel.
///
/// Both methods call `f(i)` exactly once for every `i` in `0..n` (in any order, on any lane,
/// possibly concurrently) and return only after every call has returned. A panic in `f` is
/// propagated to the caller after all lanes are quiescent.
pub trait Par: Sync {
    /// Number of lanes (the calling thread included) work may be spread over.
    fn lanes(&self) -> usize;

    /// Decode dispatch: SPMD broadcast for small, latency-critical work (M=1 GEMV). Chunks are
    /// handed out dynamically (atomic counter) so one slow lane cannot hold the barrier.
    fn decode_chunks(&self, n: usize, f: &(dyn Fn(usize) + Sync));

    /// Task dispatch: fork-join parallel-for for larger work (prefill GEMM, elementwise).
    /// A dispatch issued from inside a running chunk runs inline on that lane.
    fn task_chunks(&self, n: usize, f: &(dyn Fn(usize) + Sync));
}

/// Runs every chunk on the calling thread, in order.
#[derive(Debug, Default, Clone, Copy)]
pub struct Serial;

impl Par for Serial {
    fn lanes(&self) -> usize {
        1
    }
    fn decode_chunks(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        (0..n).for_each(f)
    }
    fn task_chunks(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        (0..n).for_each(f)
    }
}
