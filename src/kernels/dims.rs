//! [`Dims`]: a tensor shape held inline up to [`INLINE`] dimensions (every shape of the models
//! rcpu runs), on the heap beyond, for the shapes a kernel computes per call (a broadcast output,
//! per-row statistics). The per-call path of a small node (a decode-shaped Mul, norm or
//! activation: well under a microsecond of arithmetic) used `Vec` shapes, four to eight `malloc` /
//! `free` pairs per call, measured by `perf` as ~15% of a chain of 4864-float Muls (issue 17,
//! `rcpu-bench compare --gen glue:op=mul,...`); input and output shapes are now borrowed from ORT
//! (`abi::tensor`), computed ones live here.

use std::fmt;
use std::ops::{Deref, DerefMut};

/// Dimensions kept without a heap allocation.
pub const INLINE: usize = 8;

/// A shape: derefs to a slice; equal when the slices are.
#[derive(Clone)]
pub struct Dims {
    len: usize,
    inline: [usize; INLINE],
    /// Used only when `len > INLINE` (an empty `Vec` does not allocate).
    heap: Vec<usize>,
}

impl Dims {
    /// `rank` dims, all zero.
    pub fn zeros(rank: usize) -> Dims {
        Dims {
            len: rank,
            inline: [0; INLINE],
            heap: if rank > INLINE {
                vec![0; rank]
            } else {
                Vec::new()
            },
        }
    }

    pub fn from_slice(s: &[usize]) -> Dims {
        let mut d = Dims::zeros(s.len());
        d.copy_from_slice(s);
        d
    }
}

impl Deref for Dims {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        if self.len > INLINE {
            &self.heap
        } else {
            &self.inline[..self.len]
        }
    }
}

impl DerefMut for Dims {
    fn deref_mut(&mut self) -> &mut [usize] {
        if self.len > INLINE {
            &mut self.heap
        } else {
            &mut self.inline[..self.len]
        }
    }
}

impl PartialEq for Dims {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Dims {}

impl fmt::Debug for Dims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_heap_shapes_read_back() {
        for rank in [0, 1, INLINE, INLINE + 1, 20] {
            let v: Vec<usize> = (1..=rank).collect();
            let d = Dims::from_slice(&v);
            assert_eq!(&*d, &v[..], "rank {rank}");
            assert_eq!(d.len(), rank);
            let mut z = Dims::zeros(rank);
            z.iter_mut().enumerate().for_each(|(i, x)| *x = i);
            assert_eq!(z.iter().sum::<usize>(), (0..rank).sum::<usize>());
        }
        assert_eq!(Dims::from_slice(&[2usize, 3]), Dims::from_slice(&[2, 3]));
        assert_ne!(Dims::from_slice(&[2usize, 3]), Dims::from_slice(&[2, 3, 1]));
    }
}
