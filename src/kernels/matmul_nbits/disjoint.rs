//! Writing disjoint regions of one output slice from chunks that run concurrently.

use std::marker::PhantomData;

/// A raw view of the output slice that chunk closures (`Fn + Sync`) can write through.
/// Soundness rests on every concurrent writer touching a disjoint index range.
pub(crate) struct DisjointOut<'a> {
    ptr: *mut f32,
    len: usize,
    _borrow: PhantomData<&'a mut [f32]>,
}

// SAFETY: the view is only a pointer into a `&'a mut [f32]` held exclusively for 'a; writes go
// through `write`, whose contract requires concurrent callers to use disjoint ranges.
unsafe impl Sync for DisjointOut<'_> {}
// SAFETY: as above.
unsafe impl Send for DisjointOut<'_> {}

impl<'a> DisjointOut<'a> {
    pub(crate) fn new(out: &'a mut [f32]) -> Self {
        DisjointOut {
            ptr: out.as_mut_ptr(),
            len: out.len(),
            _borrow: PhantomData,
        }
    }

    /// Copies `vals` to `start..start + vals.len()`.
    ///
    /// # Safety
    /// No other thread may read or write any index in that range during the call.
    pub(crate) unsafe fn write(&self, start: usize, vals: &[f32]) {
        assert!(
            start + vals.len() <= self.len,
            "DisjointOut: write out of bounds"
        );
        // SAFETY: in bounds (asserted); the range is exclusively ours per this fn's contract.
        unsafe { std::ptr::copy_nonoverlapping(vals.as_ptr(), self.ptr.add(start), vals.len()) };
    }
}
