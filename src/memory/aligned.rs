//! `AlignedBuf<T>`: a fixed-length buffer whose first element is 64-byte (cache-line) aligned, for packed
//! weights. No `unsafe`: a `Vec<T>` over-allocated by one cache line, and the slice starts at the first
//! 64-byte boundary inside it (the offset is computed from the address, which is safe to read). The Vec is
//! never resized, so the offset stays valid.

//!
//! Buffers of [`HUGE_PAGE_MIN_BYTES`] or more are advised for transparent huge pages before they
//! are first written (`os::advise_huge_pages`): a packed weight streamed every token then
//! costs one TLB entry per 2 MiB instead of per 4 KiB, which matters once weights come from DRAM.

use super::try_alloc::AllocError;

const ALIGN: usize = 64;

/// Size from which a buffer asks for transparent huge pages (two huge pages: smaller buffers
/// would rarely contain a whole aligned 2 MiB range).
pub const HUGE_PAGE_MIN_BYTES: usize = 4 << 20;

/// A 64-byte aligned, fixed-length buffer of `T` (a primitive whose size equals its alignment and divides 64:
/// u8, i8, u16, i16, f32, i32, u32, f64, i64, u64).
#[derive(Debug)]
pub struct AlignedBuf<T: Copy + Default = u8> {
    storage: Vec<T>,
    offset: usize,
    len: usize,
}

impl<T: Copy + Default> AlignedBuf<T> {
    const ELEM: usize = std::mem::size_of::<T>();

    /// `len` elements of `T::default()` (zero for numbers). Aborts when the memory cannot be
    /// had: only for small buffers; anything sized by a model goes through [`Self::try_zeroed`].
    pub fn zeroed(len: usize) -> Self {
        match Self::try_zeroed(len) {
            Ok(b) => b,
            Err(e) => panic!("AlignedBuf::zeroed: {e}"),
        }
    }

    /// `len` elements of `T::default()`, or an error when the memory cannot be had (an
    /// address-space limit, a size beyond `isize::MAX`): never aborts the process.
    pub fn try_zeroed(len: usize) -> Result<Self, AllocError> {
        assert!(
            Self::ELEM > 0
                && Self::ELEM <= ALIGN
                && ALIGN.is_multiple_of(Self::ELEM)
                && std::mem::align_of::<T>() == Self::ELEM,
            "AlignedBuf: element size must equal its alignment and divide 64"
        );
        let pad = ALIGN / Self::ELEM - 1;
        let err = AllocError {
            elems: len,
            elem_bytes: Self::ELEM,
        };
        let total = len.checked_add(pad).ok_or(err)?;
        let mut storage: Vec<T> = Vec::new();
        storage.try_reserve_exact(total).map_err(|_| err)?;
        if total * Self::ELEM >= HUGE_PAGE_MIN_BYTES {
            // Advisory only, and before the first write below: where THP is off the buffer
            // simply keeps 4 KiB pages.
            let _ = crate::os::advise_huge_pages(storage.spare_capacity_mut());
        }
        storage.resize(total, T::default());
        let misalign = storage.as_ptr() as usize % ALIGN;
        let offset = ((ALIGN - misalign) % ALIGN) / Self::ELEM;
        debug_assert!(offset <= pad);
        Ok(AlignedBuf {
            storage,
            offset,
            len,
        })
    }

    /// A 64-byte aligned copy of `src`. Aborts when the memory cannot be had, as
    /// [`Self::zeroed`]: anything sized by a model goes through [`Self::try_from_slice`].
    pub fn from_slice(src: &[T]) -> Self {
        match Self::try_from_slice(src) {
            Ok(b) => b,
            Err(e) => panic!("AlignedBuf::from_slice: {e}"),
        }
    }

    /// A 64-byte aligned copy of `src`, or an error when the memory cannot be had.
    pub fn try_from_slice(src: &[T]) -> Result<Self, AllocError> {
        let mut b = Self::try_zeroed(src.len())?;
        b.as_mut_slice().copy_from_slice(src);
        Ok(b)
    }

    pub fn as_slice(&self) -> &[T] {
        &self.storage[self.offset..self.offset + self.len]
    }

    pub fn as_mut_slice(&mut self) -> &mut [T] {
        &mut self.storage[self.offset..self.offset + self.len]
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes this buffer really holds on the heap (padding included): what a grant should settle to.
    pub fn held_bytes(&self) -> usize {
        self.storage.capacity() * Self::ELEM
    }
}

impl<T: Copy + Default> Clone for AlignedBuf<T> {
    fn clone(&self) -> Self {
        Self::from_slice(self.as_slice()) // re-aligns for the new allocation
    }
}

impl<T: Copy + Default> std::ops::Deref for AlignedBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T: Copy + Default> std::ops::DerefMut for AlignedBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.as_mut_slice()
    }
}
