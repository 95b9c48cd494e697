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

/// A shape (`usize` or `i64` dims): derefs to a slice; equal when the slices are.
#[derive(Clone)]
pub struct Dims<T: Copy + Default = usize> {
    len: usize,
    inline: [T; INLINE],
    /// Used only when `len > INLINE` (an empty `Vec` does not allocate).
    heap: Vec<T>,
}

impl<T: Copy + Default> Dims<T> {
    /// `rank` dims, all `T::default()` (zero).
    pub fn zeros(rank: usize) -> Dims<T> {
        Dims {
            len: rank,
            inline: [T::default(); INLINE],
            heap: if rank > INLINE {
                vec![T::default(); rank]
            } else {
                Vec::new()
            },
        }
    }

    pub fn from_slice(s: &[T]) -> Dims<T> {
        let mut d = Dims::zeros(s.len());
        d.copy_from_slice(s);
        d
    }

    /// Dims from fallible per-dimension conversions; the first error is returned.
    pub fn try_from_iter<E>(
        rank: usize,
        it: impl IntoIterator<Item = Result<T, E>>,
    ) -> Result<Dims<T>, E> {
        let mut d = Dims::zeros(rank);
        for (o, v) in d.iter_mut().zip(it) {
            *o = v?;
        }
        Ok(d)
    }
}

impl<T: Copy + Default> Deref for Dims<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        if self.len > INLINE {
            &self.heap
        } else {
            &self.inline[..self.len]
        }
    }
}

impl<T: Copy + Default> DerefMut for Dims<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        if self.len > INLINE {
            &mut self.heap
        } else {
            &mut self.inline[..self.len]
        }
    }
}

impl<T: Copy + Default + PartialEq> PartialEq for Dims<T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: Copy + Default + Eq> Eq for Dims<T> {}

impl<T: Copy + Default + fmt::Debug> fmt::Debug for Dims<T> {
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
            let mut z: Dims<i64> = Dims::zeros(rank);
            z.iter_mut().enumerate().for_each(|(i, x)| *x = i as i64);
            assert_eq!(z.iter().sum::<i64>(), (0..rank as i64).sum::<i64>());
        }
        let e: Result<Dims<i64>, &str> = Dims::try_from_iter(3, [Ok(1), Err("bad"), Ok(2)]);
        assert_eq!(e.unwrap_err(), "bad");
        assert_eq!(Dims::from_slice(&[2usize, 3]), Dims::from_slice(&[2, 3]));
        assert_ne!(Dims::from_slice(&[2usize, 3]), Dims::from_slice(&[2, 3, 1]));
    }
}
