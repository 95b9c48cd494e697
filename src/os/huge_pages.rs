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

/// Asks the kernel to reclaim the whole 4 KiB pages inside `buf` now (`madvise(MADV_PAGEOUT)`,
/// Linux 5.4 on): pages read from a file are dropped (a later read faults them in again from the
/// file), other pages go to swap where there is swap and stay otherwise. Never changes what the
/// memory holds, so it is safe on memory another owner still reads. rcpu calls it on the model's
/// initializers once it has packed them: ORT maps external data from the file, and the pages
/// packing read would otherwise stay resident beside the packed copy until ORT releases them at
/// the end of session creation. Fails harmlessly (the error is returned) on older kernels.
pub fn advise_page_out(buf: &[u8]) -> io::Result<()> {
    const PAGE: usize = 4096;
    let start = (buf.as_ptr() as usize).next_multiple_of(PAGE);
    let end = (buf.as_ptr() as usize + buf.len()) / PAGE * PAGE;
    if end <= start {
        return Ok(());
    }
    // SAFETY: [start, end) is page aligned and lies inside `buf`, mapped memory of this process;
    // MADV_PAGEOUT only moves pages out of memory, never changing the contents or the validity
    // of the range (unlike MADV_DONTNEED, which would zero anonymous pages).
    let rc = unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_PAGEOUT) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
