//! Large `AlignedBuf`s (packed weights) are backed by transparent huge pages where the kernel
//! offers them (`/sys/kernel/mm/transparent_hugepage/enabled` is `madvise` or `always`).

use rcpu::memory::{AlignedBuf, HUGE_PAGE_MIN_BYTES};

use crate::smaps::{smaps_block, thp_mode};

/// `AnonHugePages` (kB) of the mapping in /proc/self/smaps that contains `addr`.
fn anon_huge_kb(addr: usize) -> u64 {
    let b = smaps_block(addr);
    let v = b.lines().find_map(|l| l.strip_prefix("AnonHugePages:"));
    let v = v.unwrap_or_else(|| panic!("no AnonHugePages in\n{b}"));
    v.trim().trim_end_matches("kB").trim().parse().unwrap()
}

#[test]
fn large_buffers_get_huge_pages() {
    match thp_mode().as_deref() {
        Some("madvise") | Some("always") => {}
        other => {
            eprintln!("skipped: transparent huge pages are {other:?} here");
            return;
        }
    }
    let len = 16 << 20;
    assert!(len >= HUGE_PAGE_MIN_BYTES);
    let mut buf = AlignedBuf::<u8>::zeroed(len);
    for (i, b) in buf.as_mut_slice().iter_mut().enumerate() {
        *b = i as u8;
    }
    let mid = buf.as_slice().as_ptr() as usize + len / 2;
    let huge = anon_huge_kb(mid);
    // 16 MiB always contains at least six whole aligned 2 MiB ranges; ask for one huge page
    // only, since the kernel may fail to find free 2 MiB frames on a fragmented machine.
    assert!(
        huge >= 2048,
        "only {huge} kB of the 16 MiB buffer is in huge pages"
    );
    assert_eq!(buf.as_slice()[12345], 12345u32 as u8);
}
