//! Fallible allocation for buffers whose size comes from a model, a feed or an option.
//!
//! `vec![x; n]` and `Vec::with_capacity(n)` abort the whole process when the allocator fails
//! (an address-space limit, a huge count), and rcpu runs inside other people's processes. Large
//! buffers go through [`try_vec`] (or [`super::AlignedBuf::try_zeroed`]) instead, and a failure
//! becomes a decline (slower path) or an error naming the node.

use std::fmt;

/// An allocation of `elems` elements of `elem_bytes` bytes each could not be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocError {
    pub elems: usize,
    pub elem_bytes: usize,
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.elems.checked_mul(self.elem_bytes) {
            Some(b) => write!(f, "out of memory allocating {b} bytes"),
            None => write!(
                f,
                "out of memory allocating {} elements of {} bytes",
                self.elems, self.elem_bytes
            ),
        }
    }
}

impl std::error::Error for AllocError {}

impl From<AllocError> for String {
    fn from(e: AllocError) -> String {
        e.to_string()
    }
}

/// `len` copies of `value`, or an error when the memory cannot be had (never aborts).
pub fn try_vec<T: Clone>(len: usize, value: T) -> Result<Vec<T>, AllocError> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| AllocError {
        elems: len,
        elem_bytes: std::mem::size_of::<T>(),
    })?;
    v.resize(len, value);
    Ok(v)
}
