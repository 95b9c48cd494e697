//! Memory mappings: anonymous ones advised for transparent huge pages, and disjoint typed pieces
//! of them (the unsafe half of the packed-weight arena, `crate::memory::weight_arena`, all safe);
//! and read-only mappings of whole files ([`FileMap`]) with typed views into them
//! ([`FileSlice`]), for packed weights a context file holds.
//!
//! A [`Mapping`] is `mmap(MAP_PRIVATE | MAP_ANONYMOUS)` memory whose start and length are
//! multiples of 2 MiB, advised `MADV_HUGEPAGE` before anything touches it, so every page of it can
//! be a huge page where THP is `madvise` or `always`. It hands out [`MappedBuf`]s by bumping an
//! offset that only grows: pieces never overlap and are never reused, so each piece is the sole
//! owner of its bytes. A piece holds an `Arc` of its mapping; the mapping is unmapped when the
//! last piece (and whoever else holds the `Arc`) drops. The kernel fills fresh anonymous pages
//! with zeros, so a new piece reads as zeros. No `MAP_NORESERVE`: under strict overcommit a
//! mapping that cannot be backed is refused by `mmap` (a decline), not at a later page fault.
//!
//! A [`FileMap`] is `mmap(PROT_READ, MAP_PRIVATE)` of a whole file: pages that can never be
//! written cost no commit charge, and the kernel may drop them under memory pressure and read
//! them again from the file, so what a mapped weight holds is page cache, not process memory.
//! The file must not be truncated or rewritten while it is mapped (a context file is written
//! once, before any session maps it): a page past a truncated end faults with `SIGBUS`, and a
//! rewrite would change bytes a kernel already validated.

use std::io;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

/// Huge-page size (x86-64 and aarch64 with 4 KiB base pages).
pub const HUGE_PAGE: usize = 2 << 20;

/// Element types a [`MappedBuf`] or a [`FileSlice`] may hold: plain numbers for which every bit pattern (zero in
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

/// The bytes of `v` (a packed weight's panels or sums, written to a context file as they are).
pub fn plain_bytes<T: Plain>(v: &[T]) -> &[u8] {
    // SAFETY: a `Plain` type has no padding and every byte of an initialized value is an
    // initialized `u8`; `u8` has alignment 1, and the byte slice covers exactly the memory of
    // `v`, borrowed for the same lifetime.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

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

/// The size of a base page (what `madvise` ranges are aligned to); 4096 if `sysconf` fails.
fn page_size() -> usize {
    // SAFETY: `sysconf` reads a system constant; no memory is passed or touched.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p)
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096)
}

/// How the kernel should expect a range of a [`FileMap`] to be read ([`FileMap::advise`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// `MADV_WILLNEED`: read the pages in ahead of use.
    WillNeed,
    /// `MADV_SEQUENTIAL`: read front to back (aggressive read-ahead, pages freed behind).
    Sequential,
    /// `MADV_RANDOM`: no read-ahead.
    Random,
    /// `MADV_HUGEPAGE`: back the range with huge pages where the kernel can do that for a file
    /// (`CONFIG_READ_ONLY_THP_FOR_FS`); refused elsewhere, harmlessly.
    HugePage,
}

impl Advice {
    fn flag(self) -> libc::c_int {
        match self {
            Advice::WillNeed => libc::MADV_WILLNEED,
            Advice::Sequential => libc::MADV_SEQUENTIAL,
            Advice::Random => libc::MADV_RANDOM,
            Advice::HugePage => libc::MADV_HUGEPAGE,
        }
    }
}

/// A whole file mapped read-only (`PROT_READ`, `MAP_PRIVATE`); see the module doc. Unmapped on
/// drop. The bytes are reached only as `&[u8]` ([`FileMap::bytes`], [`FileSlice`]): no write
/// permission, no mutable access.
#[derive(Debug)]
pub struct FileMap {
    base: NonNull<u8>,
    len: usize,
    /// The file's device and inode when it was opened.
    id: (u64, u64),
}

// SAFETY: the mapping is read-only and owned by this value; sharing it across threads only
// shares reads of memory no one writes.
unsafe impl Send for FileMap {}
// SAFETY: as above: every access is a read.
unsafe impl Sync for FileMap {}

impl FileMap {
    /// Maps all of `path` read-only. An empty file is an error (there is nothing to map, and
    /// `mmap` refuses a length of 0), as is a file larger than the address space.
    pub fn open(path: &std::path::Path) -> io::Result<FileMap> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        let file = std::fs::File::open(path)?;
        let meta = file.metadata()?;
        let (len, id) = (meta.len(), (meta.dev(), meta.ino()));
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("cannot map {}: the file is empty", path.display()),
            ));
        }
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= isize::MAX as usize)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "cannot map {}: {len} bytes exceed the address space",
                        path.display()
                    ),
                )
            })?;
        // SAFETY: a fresh read-only private mapping of an open file descriptor at an address of
        // the kernel's choosing; no existing memory is affected. The mapping keeps its own
        // reference to the file, so closing `file` afterwards is fine.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("cannot map {}: {e}", path.display()),
            ));
        }
        let base = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap returned a null mapping"))?;
        Ok(FileMap { base, len, id })
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: [base, base + len) is mapped readable for as long as `self` lives (unmapped
        // only in `Drop`); nothing in this process writes it (no write permission), and the
        // file is not modified while mapped (the module's contract). Any byte is a valid u8.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.len) }
    }

    /// Bytes mapped (the file's length when it was opened; never 0).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true (an empty file is not mapped); for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Start address (diagnostics, e.g. finding the mapping in /proc/self/smaps).
    pub fn addr(&self) -> usize {
        self.base.as_ptr() as usize
    }

    /// The mapped file's (device, inode): which file this is, whatever path reached it. Two maps
    /// with one identity map the same file (an inode stays allocated while a mapping of it
    /// lives, so it cannot name another file meanwhile).
    pub fn file_id(&self) -> (u64, u64) {
        self.id
    }

    /// Advises the kernel how `len` bytes from `offset` will be read (best effort: the range is
    /// clamped to the file and widened to whole pages). Returns whether the kernel took the
    /// advice (`MADV_HUGEPAGE` is refused where file-backed huge pages are not built in).
    pub fn advise(&self, offset: usize, len: usize, how: Advice) -> bool {
        if offset >= self.len || len == 0 {
            return true;
        }
        let page = page_size();
        let start = offset / page * page;
        // The kernel maps whole pages, so the last page is mapped through its end.
        let end = offset
            .saturating_add(len)
            .min(self.len)
            .next_multiple_of(page);
        // SAFETY: [base + start, base + end) lies inside this mapping (whole pages, the last one
        // mapped through its end) and is page aligned; advice changes how pages are read in or
        // backed, never their contents or the validity of the range.
        let rc = unsafe {
            libc::madvise(
                self.base.as_ptr().add(start).cast(),
                end - start,
                how.flag(),
            )
        };
        rc == 0
    }
}

impl Drop for FileMap {
    fn drop(&mut self) {
        // SAFETY: [base, base + len) is exactly what `open` mapped; every `FileSlice` holds an
        // `Arc` of this map and every `bytes()` borrow ends before it drops.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// Alignment [`FileSlice::new`] requires of an offset: a cache line, as the weight arena's
/// pieces (`crate::memory::ARENA_ALIGN`), so a kernel reading 64 bytes at a time never straddles
/// two lines and sees the same alignment whichever holds its weight.
pub const FILE_SLICE_ALIGN: usize = 64;

/// `len` elements of `T` at a byte offset of a [`FileMap`], read-only; keeps the map alive.
#[derive(Debug, Clone)]
pub struct FileSlice<T: Plain> {
    map: Arc<FileMap>,
    off: usize,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: Plain> FileSlice<T> {
    /// `len` elements of `T` from byte `offset` of `map`; `None` when `offset` is not a multiple
    /// of [`FILE_SLICE_ALIGN`] (and of `T`'s alignment), or the range does not lie inside the file
    /// (checked arithmetic: no size wraps around).
    pub fn new(map: &Arc<FileMap>, offset: usize, len: usize) -> Option<FileSlice<T>> {
        if !offset.is_multiple_of(FILE_SLICE_ALIGN)
            || !offset.is_multiple_of(std::mem::align_of::<T>())
        {
            return None;
        }
        let end = len
            .checked_mul(std::mem::size_of::<T>())
            .and_then(|bytes| offset.checked_add(bytes))?;
        if end > map.len() {
            return None;
        }
        Some(FileSlice {
            map: Arc::clone(map),
            off: offset,
            len,
            _t: PhantomData,
        })
    }

    pub fn as_slice(&self) -> &[T] {
        // SAFETY: [off, off + len * size_of T) lies inside the mapping (checked by `new`), which
        // is mapped readable while the `Arc` lives; the base is page aligned and `off` a multiple
        // of T's alignment, so the pointer is aligned; any bytes are a valid `T` (`Plain`); the
        // memory is never written (read-only mapping, file not modified while mapped).
        unsafe {
            std::slice::from_raw_parts(self.map.base.as_ptr().add(self.off).cast::<T>(), self.len)
        }
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Byte offset in the file.
    pub fn offset(&self) -> usize {
        self.off
    }

    /// The map this slice lies in.
    pub fn map(&self) -> &Arc<FileMap> {
        &self.map
    }
}

impl<T: Plain> std::ops::Deref for FileSlice<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file under the temp dir, removed on drop.
    struct TempFile(std::path::PathBuf);

    impl TempFile {
        fn with(name: &str, bytes: &[u8]) -> TempFile {
            let path =
                std::env::temp_dir().join(format!("rcpu-filemap-{name}-{}", std::process::id()));
            std::fs::write(&path, bytes).unwrap();
            TempFile(path)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn maps_a_file_read_only_and_slices_it() {
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let f = TempFile::with("slices", &bytes);
        let map = Arc::new(FileMap::open(&f.0).unwrap());
        assert_eq!(map.len(), bytes.len());
        assert_eq!(map.bytes(), &bytes[..]);
        assert_eq!(map.addr() % page_size(), 0);
        let again = FileMap::open(&f.0).unwrap();
        assert_eq!(again.file_id(), map.file_id(), "one file, one identity");
        assert_ne!(again.addr(), map.addr());
        for how in [Advice::WillNeed, Advice::Sequential, Advice::Random] {
            assert!(map.advise(100, 5000, how), "{how:?}");
        }
        // Past the end and empty ranges are clamped, never an error.
        assert!(map.advise(usize::MAX, usize::MAX, Advice::WillNeed));
        let _ = map.advise(0, map.len(), Advice::HugePage);
        let s = FileSlice::<u8>::new(&map, 128, 1000).unwrap();
        assert_eq!(&s[..], &bytes[128..1128]);
        assert_eq!(s.offset(), 128);
        let w = FileSlice::<u32>::new(&map, 64, 10).unwrap();
        assert_eq!(w[1], u32::from_le_bytes(bytes[68..72].try_into().unwrap()));
        // The slice keeps the map alive after the last other holder drops it.
        drop(map);
        assert_eq!(&s[..4], &bytes[128..132]);
    }

    #[test]
    fn slices_out_of_range_or_misaligned_are_refused() {
        let f = TempFile::with("refused", &[1u8; 4096 + 100]);
        let map = Arc::new(FileMap::open(&f.0).unwrap());
        let len = map.len();
        assert!(FileSlice::<u8>::new(&map, 4096, 100).is_some());
        assert!(
            FileSlice::<u8>::new(&map, 4096, 101).is_none(),
            "one past the end"
        );
        assert!(
            FileSlice::<u8>::new(&map, 32, 10).is_none(),
            "not 64-aligned"
        );
        assert!(
            FileSlice::<u8>::new(&map, 8192, 0).is_none(),
            "offset past the end"
        );
        assert!(
            FileSlice::<u32>::new(&map, 4096, 26).is_none(),
            "104 bytes > 100"
        );
        assert!(
            FileSlice::<u64>::new(&map, 0, usize::MAX / 4).is_none(),
            "size overflows"
        );
        assert!(
            FileSlice::<u8>::new(&map, usize::MAX / 64 * 64, 2).is_none(),
            "end overflows"
        );
        assert!(FileSlice::<u8>::new(&map, 0, len).is_some());
    }

    #[test]
    fn an_empty_or_missing_file_is_an_error() {
        let f = TempFile::with("empty", &[]);
        let e = FileMap::open(&f.0).unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");
        let missing = std::env::temp_dir().join("rcpu-filemap-surely-missing-file");
        assert!(FileMap::open(&missing).is_err());
    }
}
