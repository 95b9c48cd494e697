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

/// A copy of `src`, or an error when the memory cannot be had (never aborts).
pub fn try_copy<T: Clone>(src: &[T]) -> Result<Vec<T>, AllocError> {
    let mut v = Vec::new();
    v.try_reserve_exact(src.len()).map_err(|_| AllocError {
        elems: src.len(),
        elem_bytes: std::mem::size_of::<T>(),
    })?;
    v.extend_from_slice(src);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::{try_copy, try_vec};

    #[test]
    fn copies_and_fills_or_answers_out_of_memory() {
        assert_eq!(
            try_copy(&[1.5f32, -2.0, 0.0]).unwrap(),
            vec![1.5, -2.0, 0.0]
        );
        assert_eq!(try_vec(3, 7u8).unwrap(), vec![7, 7, 7]);
        let e = try_vec(usize::MAX / 2, 0u64).unwrap_err();
        assert_eq!((e.elems, e.elem_bytes), (usize::MAX / 2, 8));
    }
}
