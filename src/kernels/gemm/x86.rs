//! AVX2+FMA and AVX-512F GEMM micro-kernels (one, generic over `Simd`) and GEMV primitives.
//!
//! The table entries are `simd_entry!`s: each runs its kernel only under its level's token
//! (`kernels/simd.rs`; "avx512f" and "avx2,fma" are features of the AVX-512 and AVX2 levels).

#![cfg(target_arch = "x86_64")]
// AVX-512 intrinsics are stable from Rust 1.89 (safe `#[target_feature]` fns from 1.86); the
// workspace `rust-version` (1.85) predates them and needs raising to 1.89 for these kernels.
#![allow(clippy::incompatible_msrv)]

use std::arch::x86_64::*;

use crate::kernels::simd::{simd_entry, Avx2, Avx512, Simd};

// ---------------------------------------------------------------- the micro-kernel

/// The `MR x 2W` micro-kernel, written once over [`Simd`] (AVX-512: 8 x 32, AVX2: 6 x 16):
/// `tile[r][c] = sum over kk < kc of a[kk * MR + r] * b[kk * 2W + c]`, one fused multiply-add
/// per step in k order, the accumulators in registers.
#[inline(always)]
fn ukernel<S: Simd, const MR: usize>(s: S, kc: usize, a: &[f32], b: &[f32], tile: &mut [f32]) {
    let (w, nr) = (S::W, 2 * S::W);
    assert!(a.len() >= kc * MR && b.len() >= kc * nr && tile.len() >= MR * nr);
    let mut acc = [[s.splat(0.0); 2]; MR];
    for (ak, bk) in a.chunks_exact(MR).zip(b.chunks_exact(nr)).take(kc) {
        let (b0, b1) = (s.load(bk, 0), s.load(bk, w));
        for (row, &ar) in acc.iter_mut().zip(ak) {
            let av = s.splat(ar);
            row[0] = s.fma(av, b0, row[0]);
            row[1] = s.fma(av, b1, row[1]);
        }
    }
    for (row, t) in acc.iter().zip(tile.chunks_exact_mut(nr)) {
        s.store(t, 0, row[0]);
        s.store(t, w, row[1]);
    }
}

// ---------------------------------------------------------------- AVX-512: 8 x 32 tile

pub(super) const MR512: usize = 8;
pub(super) const NR512: usize = 32;

#[target_feature(enable = "avx512f")]
fn dot512(x: &[f32], y: &[f32]) -> f32 {
    let n = x.len().min(y.len());
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut i = 0;
    while i + 64 <= n {
        for (u, s) in acc.iter_mut().enumerate() {
            // SAFETY: i + 16*u + 16 <= i + 64 <= n.
            unsafe {
                let xv = _mm512_loadu_ps(x.as_ptr().add(i + 16 * u));
                let yv = _mm512_loadu_ps(y.as_ptr().add(i + 16 * u));
                *s = _mm512_fmadd_ps(xv, yv, *s);
            }
        }
        i += 64;
    }
    while i < n {
        let rem = n - i;
        let m: __mmask16 = if rem >= 16 { 0xffff } else { (1u16 << rem) - 1 };
        // SAFETY: only lanes < min(rem, 16) are read, all in bounds; masked lanes do not fault.
        unsafe {
            let xv = _mm512_maskz_loadu_ps(m, x.as_ptr().add(i));
            let yv = _mm512_maskz_loadu_ps(m, y.as_ptr().add(i));
            acc[0] = _mm512_fmadd_ps(xv, yv, acc[0]);
        }
        i += 16;
    }
    let s = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
    _mm512_reduce_add_ps(s)
}

#[target_feature(enable = "avx512f")]
fn axpy512(s: f32, x: &[f32], y: &mut [f32]) {
    let n = x.len().min(y.len());
    let sv = _mm512_set1_ps(s);
    let mut i = 0;
    while i < n {
        let rem = n - i;
        let m: __mmask16 = if rem >= 16 { 0xffff } else { (1u16 << rem) - 1 };
        // SAFETY: only lanes < min(rem, 16) are read or written, all in bounds.
        unsafe {
            let xv = _mm512_maskz_loadu_ps(m, x.as_ptr().add(i));
            let yv = _mm512_maskz_loadu_ps(m, y.as_ptr().add(i));
            _mm512_mask_storeu_ps(y.as_mut_ptr().add(i), m, _mm512_fmadd_ps(sv, xv, yv));
        }
        i += 16;
    }
}

#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
fn ukernel512(s: Avx512, kc: usize, a: &[f32], b: &[f32], tile: &mut [f32]) {
    ukernel::<Avx512, MR512>(s, kc, a, b, tile)
}

simd_entry!(pub(super) fn ukernel_avx512(
    kc: usize, a: &[f32], b: &[f32], tile: &mut [f32],
) = Avx512 => token ukernel512);
simd_entry!(pub(super) fn dot_avx512(x: &[f32], y: &[f32]) -> f32 = Avx512 => dot512);
simd_entry!(pub(super) fn axpy_avx512(s: f32, x: &[f32], y: &mut [f32]) = Avx512 => axpy512);

// ---------------------------------------------------------------- AVX2: 6 x 16 tile

pub(super) const MR256: usize = 6;
pub(super) const NR256: usize = 16;

#[target_feature(enable = "avx2,fma")]
fn dot256(x: &[f32], y: &[f32]) -> f32 {
    let n = x.len().min(y.len());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (u, s) in acc.iter_mut().enumerate() {
            // SAFETY: i + 8*u + 8 <= i + 32 <= n.
            unsafe {
                let xv = _mm256_loadu_ps(x.as_ptr().add(i + 8 * u));
                let yv = _mm256_loadu_ps(y.as_ptr().add(i + 8 * u));
                *s = _mm256_fmadd_ps(xv, yv, *s);
            }
        }
        i += 32;
    }
    let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut lanes = [0.0f32; 8];
    // SAFETY: lanes has 8 f32s.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), s) };
    let mut total: f32 = lanes.iter().sum();
    for j in i..n {
        total += x[j] * y[j];
    }
    total
}

#[target_feature(enable = "avx2,fma")]
fn axpy256(s: f32, x: &[f32], y: &mut [f32]) {
    let n = x.len().min(y.len());
    let sv = _mm256_set1_ps(s);
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n <= len of x and y.
        unsafe {
            let xv = _mm256_loadu_ps(x.as_ptr().add(i));
            let yv = _mm256_loadu_ps(y.as_ptr().add(i));
            _mm256_storeu_ps(y.as_mut_ptr().add(i), _mm256_fmadd_ps(sv, xv, yv));
        }
        i += 8;
    }
    for j in i..n {
        y[j] += s * x[j];
    }
}

#[target_feature(enable = "avx2,fma")]
fn ukernel256(s: Avx2, kc: usize, a: &[f32], b: &[f32], tile: &mut [f32]) {
    ukernel::<Avx2, MR256>(s, kc, a, b, tile)
}

simd_entry!(pub(super) fn ukernel_avx2(
    kc: usize, a: &[f32], b: &[f32], tile: &mut [f32],
) = Avx2 => token ukernel256);
simd_entry!(pub(super) fn dot_avx2(x: &[f32], y: &[f32]) -> f32 = Avx2 => dot256);
simd_entry!(pub(super) fn axpy_avx2(s: f32, x: &[f32], y: &mut [f32]) = Avx2 => axpy256);
