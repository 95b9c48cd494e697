//! Writing disjoint regions of one output slice from chunks that run concurrently (shared by the
//! MatMulNBits and QGemm drivers).

use std::marker::PhantomData;

/// A raw view of the output slice that chunk closures (`Fn + Sync`) can write through.
/// Soundness rests on every concurrent writer touching a disjoint index range.
pub(crate) struct DisjointOut<'a, T: Copy = f32> {
    ptr: *mut T,
    len: usize,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: the view is only a pointer into a `&'a mut [T]` held exclusively for 'a; writes go
// through `write`, whose contract requires concurrent callers to use disjoint ranges.
unsafe impl<T: Copy + Send> Sync for DisjointOut<'_, T> {}
// SAFETY: as above.
unsafe impl<T: Copy + Send> Send for DisjointOut<'_, T> {}

impl<'a, T: Copy> DisjointOut<'a, T> {
    pub(crate) fn new(out: &'a mut [T]) -> Self {
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
    pub(crate) unsafe fn write(&self, start: usize, vals: &[T]) {
        assert!(
            start + vals.len() <= self.len,
            "DisjointOut: write out of bounds"
        );
        // SAFETY: in bounds (asserted); the range is exclusively ours per this fn's contract.
        unsafe { std::ptr::copy_nonoverlapping(vals.as_ptr(), self.ptr.add(start), vals.len()) };
    }
}
