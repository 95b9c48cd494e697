//! Cache hints over an address range (a decode call's lanes prefetching the prepared
//! activations another lane wrote; a caller prefetching the first lines of its own segment of
//! the next decode call's weights, `kernels::matmul_nbits::decode_first_segment`; an attention
//! unit hinting the pages of its key and value rows and, into L2, its next block of key rows,
//! `kernels::attention::gqa_decode`). A
//! prefetch is a CPU instruction, not a system call, but like the OS calls it is a safe wrapper
//! over one unsafe block that names nothing of rcpu. (The idle lanes read ahead with loads, not
//! prefetches: `runtime::warm`.)
//! Also [`CachePadded`], the layout that keeps a value written by one thread off the lines
//! others write.

/// `T` alone on a 128-byte pair of cache lines (aligned to it, and padded to a multiple of it):
/// a value one thread writes shares no line with what other threads write. A pair, not one
/// 64-byte line, because the adjacent-line prefetcher moves lines in pairs.
#[repr(align(128))]
#[derive(Debug, Default)]
pub struct CachePadded<T>(pub T);

/// Hints every cache line of the address range `[addr, addr + len)` into the L1 cache
/// (`prefetcht0`; nothing off x86_64): for a small range a lane is about to read (a decode
/// call's prepared activations, which another lane has just written; the head of the next
/// call's weight segment). The addresses are never dereferenced: a prefetch never faults.
pub fn prefetch_l1(addr: usize, len: usize) {
    prefetch_every::<false>(addr, len, 64)
}

/// Hints every cache line of the address range `[addr, addr + len)` into the L2 cache
/// (`prefetcht1`; nothing off x86_64): for rows a lane reads a little later, while it computes
/// on what it has (an attention unit's next block of key rows, `kernels::attention::gqa_decode`),
/// so they arrive without displacing the L1 working set. The addresses are never dereferenced: a
/// prefetch never faults.
pub fn prefetch_l2(addr: usize, len: usize) {
    prefetch_every::<true>(addr, len, 64)
}

/// Bytes of the smallest page: the step of [`prefetch_pages`].
pub const PAGE_BYTES: usize = 4096;

/// Hints the first line of every 4 KiB page the address range `[addr, addr + len)` touches
/// (`prefetcht0`; nothing off x86_64): for a range a lane is about to read row by row whose
/// pages are likely missing from the TLB, so their translations are looked up together instead
/// of one page at a time as the reads reach each page (the hardware prefetcher stops at page
/// boundaries; GroupQueryAttention's past key and value rows, `kernels::attention::gqa_decode`).
/// The addresses are never dereferenced: a prefetch never faults.
pub fn prefetch_pages(addr: usize, len: usize) {
    prefetch_every::<false>(addr, len, PAGE_BYTES)
}

/// One `prefetcht0` (`prefetcht1` when `L2`) every `step` bytes (a power of two), from the step
/// holding `addr` to `addr + len`.
#[inline]
fn prefetch_every<const L2: bool>(addr: usize, len: usize, step: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        #[inline]
        #[target_feature(enable = "sse")]
        fn hints<const L2: bool>(addr: usize, len: usize, step: usize) {
            let end = addr.saturating_add(len);
            let mut at = addr & !(step - 1);
            while at < end {
                if L2 {
                    _mm_prefetch::<_MM_HINT_T1>(at as *const i8);
                } else {
                    _mm_prefetch::<_MM_HINT_T0>(at as *const i8);
                }
                let Some(next) = at.checked_add(step) else {
                    break;
                };
                at = next;
            }
        }
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
        // SAFETY: SSE is part of the x86_64 baseline, so the feature `hints` enables is present
        // on every CPU this code runs on; `hints` only issues prefetch hints, which neither
        // dereference nor fault on any address.
        unsafe { hints::<L2>(addr, len, step) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (addr, len, step);
}

#[cfg(test)]
mod tests {
    use super::{prefetch_l1, prefetch_pages};

    /// The hint never dereferences its addresses: a range at address 0, one running into the
    /// top of the address space (whose line walk must end there, not wrap around) and one over a
    /// buffer freed just before all pass without a fault (a hint written as a load would crash
    /// this test).
    #[test]
    fn hints_never_fault() {
        let freed = {
            let v = vec![1u8; 1 << 20];
            v.as_ptr() as usize
        };
        for (addr, len) in [
            (0, 4096),
            (usize::MAX - 100, 1000),
            (freed, 1 << 20),
            (64, 0),
        ] {
            prefetch_l1(addr, len);
            prefetch_pages(addr, len);
        }
    }
}
