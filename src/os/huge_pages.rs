//! Memory advice: asking the kernel for transparent huge pages on memory rcpu owns (`madvise`).
//! The 2 MiB-aligned mappings of the weight arena, advised the same way, are in `super::mapped`.

use std::io;

/// Asks the kernel to back `buf` with transparent huge pages (`madvise(MADV_HUGEPAGE)` on the
/// whole 4 KiB pages inside it). Advisory: the contents are unchanged; memory first touched after
/// the call is faulted in 2 MiB pages where a 2 MiB-aligned range lies inside the mapping and
/// THP is `madvise` or `always`. Fails harmlessly (the error is returned) where THP is off.
pub fn advise_huge_pages<T>(buf: &[T]) -> io::Result<()> {
    const PAGE: usize = 4096;
    let start = (buf.as_ptr() as usize).next_multiple_of(PAGE);
    let end = (buf.as_ptr() as usize + std::mem::size_of_val(buf)) / PAGE * PAGE;
    if end <= start {
        return Ok(());
    }
    // SAFETY: [start, end) is page aligned and lies inside `buf`, memory this process owns;
    // MADV_HUGEPAGE only changes how future faults are served, never the contents or the
    // validity of the range.
    let rc = unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
