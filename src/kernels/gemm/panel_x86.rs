//! AVX-512F and AVX2+FMA panel GEMV kernels (the M = 1 path over B panels): same contract and
//! the same four interleaved partial sums as `scalar::panel_gemv`, with FMA.
//!
//! One panel row (`NR` floats: two vectors) per reduction step, four steps per iteration into
//! four accumulator pairs, so eight independent FMA chains hide the FMA latency and the loop is
//! bound by how fast B streams in. The AVX-512 kernel's FMAs broadcast x from memory themselves
//! (`x86_asm::fma_bcast`; K=N=2048 packed, best of 500: one thread 224 -> 216 us, two lanes
//! 99 -> 96.5 us). Rows may be `ld` apart (a strided, unpacked B) and narrower
//! than `NR` (the last panel): the loads are masked, so a lane never reads past column `w`.
//! No software prefetch: a packed panel is one contiguous stream the hardware prefetcher
//! follows; prefetching 16 rows ahead made the K=N=2048 GEMV about 2x slower (measured with a
//! single-thread microbenchmark, alternating builds, on the shared 2-vCPU VM).
//!
//! The table entries are `simd_entry!`s: each runs its kernel only under its level's token
//! (`kernels/simd.rs`).

#![cfg(target_arch = "x86_64")]
#![allow(clippy::incompatible_msrv)]

use std::arch::x86_64::*;

use super::x86::{NR256, NR512};
use crate::kernels::simd::{simd_entry, Avx2, Avx512};
use crate::kernels::x86_asm::fma_bcast;

/// Panics unless the panel and vectors hold what a `k`-step, `w`-wide call reads and writes
/// (`NR`: the kernel's panel width).
fn check<const NR: usize>(
    k: usize,
    x: &[f32],
    incx: usize,
    b: &[f32],
    ld: usize,
    w: usize,
    y: &[f32],
) {
    let nr = NR;
    assert!(w <= nr && y.len() >= w, "panel gemv: width {w} > {nr}");
    if k > 0 && w > 0 {
        assert!(x.len() > (k - 1) * incx, "panel gemv: x too short");
        assert!(b.len() >= (k - 1) * ld + w, "panel gemv: panel too short");
    }
}

#[target_feature(enable = "avx512f")]
fn panel512(k: usize, x: &[f32], incx: usize, b: &[f32], ld: usize, w: usize, y: &mut [f32]) {
    check::<NR512>(k, x, incx, b, ld, w, y);
    if w == 0 {
        return;
    }
    let lanes = |n: usize| -> __mmask16 { ((1u32 << n.min(16)) - 1) as __mmask16 };
    let (m0, m1) = (lanes(w), lanes(w.saturating_sub(16)));
    let mut acc = [[_mm512_setzero_ps(); 2]; 4];
    let (pb, px) = (b.as_ptr(), x.as_ptr());
    // Every call below passes p < k.
    // SAFETY: step p reads x[p * incx] and b[p * ld + c] for c < w only (masked lanes are not
    // accessed and cannot fault), all in bounds by `check` since p < k; AVX-512 is this fn's
    // contract.
    let step = |p: usize, a: &mut [__m512; 2]| unsafe {
        let row = pb.add(p * ld);
        let xp = px.add(p * incx);
        a[0] = fma_bcast(a[0], _mm512_maskz_loadu_ps(m0, row), xp);
        a[1] = fma_bcast(a[1], _mm512_maskz_loadu_ps(m1, row.wrapping_add(16)), xp);
    };
    let mut p = 0;
    while p + 4 <= k {
        for (u, a) in acc.iter_mut().enumerate() {
            step(p + u, a);
        }
        p += 4;
    }
    while p < k {
        step(p, &mut acc[p % 4]);
        p += 1;
    }
    let sum = |h: usize| {
        let lo = _mm512_add_ps(acc[0][h], acc[1][h]);
        _mm512_add_ps(lo, _mm512_add_ps(acc[2][h], acc[3][h]))
    };
    let (s0, s1) = (sum(0), sum(1));
    // SAFETY: lanes < w <= y.len() are written; masked lanes are not accessed.
    unsafe {
        _mm512_mask_storeu_ps(y.as_mut_ptr(), m0, s0);
        _mm512_mask_storeu_ps(y.as_mut_ptr().wrapping_add(16), m1, s1);
    }
}

#[target_feature(enable = "avx2,fma")]
fn panel256(k: usize, x: &[f32], incx: usize, b: &[f32], ld: usize, w: usize, y: &mut [f32]) {
    check::<NR256>(k, x, incx, b, ld, w, y);
    if w == 0 {
        return;
    }
    let iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let lanes = |n: usize| _mm256_cmpgt_epi32(_mm256_set1_epi32(n.min(8) as i32), iota);
    let (m0, m1) = (lanes(w), lanes(w.saturating_sub(8)));
    let mut acc = [[_mm256_setzero_ps(); 2]; 4];
    let (pb, px) = (b.as_ptr(), x.as_ptr());
    // Every call below passes p < k.
    // SAFETY: as in `panel512` (reads in bounds by `check` since p < k); maskload does not
    // access masked lanes; AVX2+FMA is this fn's contract.
    let step = |p: usize, a: &mut [__m256; 2]| unsafe {
        let row = pb.add(p * ld);
        let xv = _mm256_set1_ps(*px.add(p * incx));
        a[0] = _mm256_fmadd_ps(xv, _mm256_maskload_ps(row, m0), a[0]);
        a[1] = _mm256_fmadd_ps(xv, _mm256_maskload_ps(row.wrapping_add(8), m1), a[1]);
    };
    let mut p = 0;
    while p + 4 <= k {
        for (u, a) in acc.iter_mut().enumerate() {
            step(p + u, a);
        }
        p += 4;
    }
    while p < k {
        step(p, &mut acc[p % 4]);
        p += 1;
    }
    let sum = |h: usize| {
        let lo = _mm256_add_ps(acc[0][h], acc[1][h]);
        _mm256_add_ps(lo, _mm256_add_ps(acc[2][h], acc[3][h]))
    };
    let (s0, s1) = (sum(0), sum(1));
    // SAFETY: lanes < w <= y.len() are written; maskstore does not access masked lanes.
    unsafe {
        _mm256_maskstore_ps(y.as_mut_ptr(), m0, s0);
        _mm256_maskstore_ps(y.as_mut_ptr().wrapping_add(8), m1, s1);
    }
}

// Table entries: each takes its level's token from the caller's Level and runs the kernel under
// it ("avx512f" and "avx2,fma" are features of the AVX-512 and AVX2 levels).
simd_entry!(pub(super) fn panel_gemv_avx512(
    k: usize, x: &[f32], incx: usize, b: &[f32], ld: usize, w: usize, y: &mut [f32],
) = Avx512 => panel512);
simd_entry!(pub(super) fn panel_gemv_avx2(
    k: usize, x: &[f32], incx: usize, b: &[f32], ld: usize, w: usize, y: &mut [f32],
) = Avx2 => panel256);
