//! Single instructions the intrinsics cannot express: an FMA whose f32 multiplier is broadcast
//! from memory by the instruction itself (`{1to16}`).
//!
//! When one A value meets several weight vectors, the compiler hoists its broadcast into a
//! separate `vbroadcastss zmm, m32`, which on Zen 4 takes a vector ALU slot; the embedded form is
//! only a load micro-op. On the fp32 MatMulNBits M=1 kernel (K=4096, N=256, L2-resident, one
//! thread) that was 37.1 us with hoisted broadcasts, 29.7 us with embedded ones.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::__m512;

/// `acc + w * broadcast(*p)` as one `vfmadd231ps zmm, zmm, m32{1to16}`.
///
/// # Safety
/// The CPU must support AVX-512F and `p` must be valid for reading one f32.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn fma_bcast(acc: __m512, w: __m512, p: *const f32) -> __m512 {
    let mut acc = acc;
    // SAFETY: reads the 4 bytes at `p` (the caller's contract), writes only `acc`.
    unsafe {
        std::arch::asm!(
            "vfmadd231ps {acc}, {w}, dword ptr [{p}]{{1to16}}",
            acc = inout(zmm_reg) acc,
            w = in(zmm_reg) w,
            p = in(reg) p,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    acc
}
