//! Anonymous memory mappings advised for transparent huge pages, and disjoint typed pieces of
//! them: the unsafe half of the packed-weight arena (`crate::memory::weight_arena`, all safe).
//!
//! A [`Mapping`] is `mmap(MAP_PRIVATE | MAP_ANONYMOUS)` memory whose start and length are
//! multiples of 2 MiB, advised `MADV_HUGEPAGE` before anything touches it, so every page of it can
//! be a huge page where THP is `madvise` or `always`. It hands out [`MappedBuf`]s by bumping an
//! offset that only grows: pieces never overlap and are never reused, so each piece is the sole
//! owner of its bytes. A piece holds an `Arc` of its mapping; the mapping is unmapped when the
//! last piece (and whoever else holds the `Arc`) drops. The kernel fills fresh anonymous pages
//! with zeros, so a new piece reads as zeros. No `MAP_NORESERVE`: under strict overcommit a
//! mapping that cannot be backed is refused by `mmap` (a decline), not at a later page fault.

use std::io;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

/// Huge-page size (x86-64 and aarch64 with 4 KiB base pages).
pub const HUGE_PAGE: usize = 2 << 20;

/// Element types a [`MappedBuf`] may hold: plain numbers for which every bit pattern (zero in
/// particular) is a valid value and whose alignment divides 64.
///
/// # Safety
/// Implement only for types where any initialised bytes form a valid value, with no padding,
/// no drop glue and an alignment of at most 64.
pub unsafe trait Plain: Copy + Send + Sync + 'static {}
// SAFETY: primitive numbers: every bit pattern is valid, no padding, alignment <= 8.
unsafe impl Plain for u8 {}
// SAFETY: as above.
unsafe impl Plain for i8 {}
// SAFETY: as above.
unsafe impl Plain for u16 {}
// SAFETY: as above.
unsafe impl Plain for i16 {}
// SAFETY: as above.
unsafe impl Plain for u32 {}
// SAFETY: as above.
unsafe impl Plain for i32 {}
// SAFETY: as above.
unsafe impl Plain for f32 {}
// SAFETY: as above.
unsafe impl Plain for u64 {}
// SAFETY: as above.
unsafe impl Plain for f64 {}

/// A 2 MiB-aligned anonymous mapping advised for huge pages; see the module doc.
#[derive(Debug)]
pub struct Mapping {
    base: NonNull<u8>,
    len: usize,
    /// Bytes handed out so far (the bump offset; only grows).
    used: AtomicUsize,
    /// Bytes of pieces still alive (alignment padding included).
    live: AtomicUsize,
    /// Whether `madvise(MADV_HUGEPAGE)` succeeded.
    advised: bool,
}

// SAFETY: `Mapping` owns its memory; its own methods only read `base`/`len` and update atomics.
// The bytes are reached only through `MappedBuf`s, each the unique owner of a disjoint range.
unsafe impl Send for Mapping {}
// SAFETY: see `Send`: shared use is limited to the atomics and disjoint pieces.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// A fresh mapping of at least `len` bytes (rounded up to a multiple of 2 MiB, never 0),
    /// starting on a 2 MiB boundary, advised for huge pages. Fails (never aborts) when the size
    /// overflows or the kernel refuses the mapping.
    pub fn new(len: usize) -> io::Result<Mapping> {
        let too_big = || io::Error::new(io::ErrorKind::OutOfMemory, "mapping size overflows");
        let len = len
            .max(1)
            .checked_next_multiple_of(HUGE_PAGE)
            .ok_or_else(too_big)?;
        let span = len.checked_add(HUGE_PAGE).ok_or_else(too_big)?;
        if span > isize::MAX as usize {
            return Err(too_big());
        }
        // SAFETY: a fresh private anonymous mapping at an address of the kernel's choosing; no
        // existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let start = p as usize;
        let base = start.next_multiple_of(HUGE_PAGE);
        let (head, tail) = (base - start, span - (base - start) - len);
        // Trim the unaligned head and the tail so exactly [base, base + len) stays mapped.
        if head > 0 {
            // SAFETY: [start, base) is the page-aligned head of the mapping made above, not
            // referenced by anything.
            unsafe { libc::munmap(start as *mut libc::c_void, head) };
        }
        if tail > 0 {
            // SAFETY: [base + len, start + span) is the page-aligned tail of that mapping,
            // not referenced by anything.
            unsafe { libc::munmap((base + len) as *mut libc::c_void, tail) };
        }
        // SAFETY: [base, base + len) is mapped, 2 MiB aligned and untouched; MADV_HUGEPAGE
        // only changes how later faults are served, never the contents.
        let advised =
            unsafe { libc::madvise(base as *mut libc::c_void, len, libc::MADV_HUGEPAGE) } == 0;
        Ok(Mapping {
            base: NonNull::new(base as *mut u8).ok_or_else(too_big)?,
            len,
            used: AtomicUsize::new(0),
            live: AtomicUsize::new(0),
            advised,
        })
    }

    /// Bytes mapped (a multiple of 2 MiB).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true (a mapping is at least 2 MiB); for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes handed out so far (the bump offset).
    pub fn used(&self) -> usize {
        self.used.load(Relaxed)
    }

    /// Bytes of pieces still alive.
    pub fn live(&self) -> usize {
        self.live.load(Relaxed)
    }

    /// Bytes the process can have touched: `used` rounded up to whole huge pages (never more
    /// than `len`). Pages past it were never written, so they hold no memory.
    pub fn touched_bound(&self) -> usize {
        self.used().next_multiple_of(HUGE_PAGE).min(self.len)
    }

    /// Whether the huge-page advice was taken (false where THP is off).
    pub fn advised(&self) -> bool {
        self.advised
    }

    /// Start address (for diagnostics, e.g. finding the mapping in /proc/self/smaps).
    pub fn addr(&self) -> usize {
        self.base.as_ptr() as usize
    }

    /// Reserves `bytes` at the next multiple of `align` (a power of two), padded to a multiple
    /// of `align`; `None` when they do not fit. Returns the offset and the bytes taken (`bytes`
    /// plus the padding before and after).
    fn bump(&self, bytes: usize, align: usize) -> Option<(usize, usize)> {
        let mut taken = 0;
        let r = self.used.fetch_update(Relaxed, Relaxed, |u| {
            let off = u.checked_next_multiple_of(align)?;
            // The piece's end is padded to `align` too: with one alignment throughout, every
            // piece starts where the previous one ended and takes a size that depends only on
            // its own length.
            let end = off.checked_add(bytes.checked_next_multiple_of(align)?)?;
            taken = end - u;
            (end <= self.len).then_some(end)
        });
        let prev = r.ok()?;
        self.live.fetch_add(taken, Relaxed);
        Some((prev.next_multiple_of(align), taken))
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: [base, base + len) is exactly what `new` left mapped; every piece holds an
        // `Arc` of this mapping, so none is alive when it drops.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// `len` elements of `T` inside a [`Mapping`], owned exclusively; keeps the mapping alive.
#[derive(Debug)]
pub struct MappedBuf<T: Plain> {
    map: Arc<Mapping>,
    off: usize,
    len: usize,
    /// Bytes this piece took from the mapping (alignment padding included).
    taken: usize,
    _t: PhantomData<T>,
}

impl<T: Plain> MappedBuf<T> {
    /// `len` zeroed elements carved from `map` at a multiple of `align` bytes (a power of two,
    /// at least `T`'s alignment); `None` when they do not fit (or the size overflows).
    pub fn claim(map: &Arc<Mapping>, len: usize, align: usize) -> Option<MappedBuf<T>> {
        let align = align.max(std::mem::align_of::<T>());
        if !align.is_power_of_two() || align > HUGE_PAGE {
            return None;
        }
        let bytes = len.checked_mul(std::mem::size_of::<T>())?;
        let (off, taken) = map.bump(bytes, align)?;
        Some(MappedBuf {
            map: Arc::clone(map),
            off,
            len,
            taken,
            _t: PhantomData,
        })
    }

    pub fn as_slice(&self) -> &[T] {
        // SAFETY: [off, off + len * size_of T) lies inside the mapping (checked by `bump`),
        // is aligned for T (`align` >= align_of T, base 2 MiB aligned), was zero-filled by the
        // kernel (valid for any `Plain`), and no other piece covers it; the `Arc` keeps it mapped.
        unsafe {
            std::slice::from_raw_parts(self.map.base.as_ptr().add(self.off).cast::<T>(), self.len)
        }
    }

    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as in `as_slice`; `&mut self` makes this the only reference to the range,
        // which no other piece overlaps.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.map.base.as_ptr().add(self.off).cast::<T>(),
                self.len,
            )
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes this piece took from its mapping (padding to its alignment included).
    pub fn taken_bytes(&self) -> usize {
        self.taken
    }

    /// The mapping this piece lives in.
    pub fn mapping(&self) -> &Arc<Mapping> {
        &self.map
    }
}

impl<T: Plain> Drop for MappedBuf<T> {
    fn drop(&mut self) {
        self.map.live.fetch_sub(self.taken, Relaxed);
    }
}

impl<T: Plain> std::ops::Deref for MappedBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T: Plain> std::ops::DerefMut for MappedBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.as_mut_slice()
    }
}
