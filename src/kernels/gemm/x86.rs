//! AVX2+FMA and AVX-512F GEMM micro-kernels and GEMV primitives.
//!
//! The safe wrappers here are only reachable through the dispatch tables in `mod.rs`, which are
//! built for an ISA only after `Isa::detect_hardware()` confirmed the CPU supports it.

#![cfg(target_arch = "x86_64")]
// AVX-512 intrinsics are stable from Rust 1.89 (safe `#[target_feature]` fns from 1.86); the
// workspace `rust-version` (1.85) predates them and needs raising to 1.89 for these kernels.
#![allow(clippy::incompatible_msrv)]

use std::arch::x86_64::*;

// ---------------------------------------------------------------- AVX-512: 8 x 32 tile

pub(super) const MR512: usize = 8;
pub(super) const NR512: usize = 32;

#[target_feature(enable = "avx512f")]
fn ukernel512(kc: usize, a: &[f32], b: &[f32], tile: &mut [f32]) {
    assert!(a.len() >= kc * MR512 && b.len() >= kc * NR512 && tile.len() >= MR512 * NR512);
    let mut acc = [[_mm512_setzero_ps(); 2]; MR512];
    let (mut pa, mut pb) = (a.as_ptr(), b.as_ptr());
    for _ in 0..kc {
        // SAFETY: iteration kk reads a[kk*8..kk*8+8] and b[kk*32..kk*32+32], in bounds by the
        // assert above (kk < kc).
        unsafe {
            let b0 = _mm512_loadu_ps(pb);
            let b1 = _mm512_loadu_ps(pb.add(16));
            for (r, row) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*pa.add(r));
                row[0] = _mm512_fmadd_ps(av, b0, row[0]);
                row[1] = _mm512_fmadd_ps(av, b1, row[1]);
            }
            pa = pa.add(MR512);
            pb = pb.add(NR512);
        }
    }
    for (r, row) in acc.iter().enumerate() {
        // SAFETY: r*32 + 32 <= 256 <= tile.len().
        unsafe {
            _mm512_storeu_ps(tile.as_mut_ptr().add(r * NR512), row[0]);
            _mm512_storeu_ps(tile.as_mut_ptr().add(r * NR512 + 16), row[1]);
        }
    }
}

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

pub(super) fn ukernel_avx512(kc: usize, a: &[f32], b: &[f32], tile: &mut [f32]) {
    // SAFETY: only called through the AVX-512 table, built after AVX-512F was detected.
    unsafe { ukernel512(kc, a, b, tile) }
}
pub(super) fn dot_avx512(x: &[f32], y: &[f32]) -> f32 {
    // SAFETY: only called through the AVX-512 table, built after AVX-512F was detected.
    unsafe { dot512(x, y) }
}
pub(super) fn axpy_avx512(s: f32, x: &[f32], y: &mut [f32]) {
    // SAFETY: only called through the AVX-512 table, built after AVX-512F was detected.
    unsafe { axpy512(s, x, y) }
}

// ---------------------------------------------------------------- AVX2: 6 x 16 tile

pub(super) const MR256: usize = 6;
pub(super) const NR256: usize = 16;

#[target_feature(enable = "avx2,fma")]
fn ukernel256(kc: usize, a: &[f32], b: &[f32], tile: &mut [f32]) {
    assert!(a.len() >= kc * MR256 && b.len() >= kc * NR256 && tile.len() >= MR256 * NR256);
    let mut acc = [[_mm256_setzero_ps(); 2]; MR256];
    let (mut pa, mut pb) = (a.as_ptr(), b.as_ptr());
    for _ in 0..kc {
        // SAFETY: iteration kk reads a[kk*6..kk*6+6] and b[kk*16..kk*16+16], in bounds by the
        // assert above (kk < kc).
        unsafe {
            let b0 = _mm256_loadu_ps(pb);
            let b1 = _mm256_loadu_ps(pb.add(8));
            for (r, row) in acc.iter_mut().enumerate() {
                let av = _mm256_set1_ps(*pa.add(r));
                row[0] = _mm256_fmadd_ps(av, b0, row[0]);
                row[1] = _mm256_fmadd_ps(av, b1, row[1]);
            }
            pa = pa.add(MR256);
            pb = pb.add(NR256);
        }
    }
    for (r, row) in acc.iter().enumerate() {
        // SAFETY: r*16 + 16 <= 96 <= tile.len().
        unsafe {
            _mm256_storeu_ps(tile.as_mut_ptr().add(r * NR256), row[0]);
            _mm256_storeu_ps(tile.as_mut_ptr().add(r * NR256 + 8), row[1]);
        }
    }
}

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

pub(super) fn ukernel_avx2(kc: usize, a: &[f32], b: &[f32], tile: &mut [f32]) {
    // SAFETY: only called through the AVX2 table, built after AVX2+FMA were detected.
    unsafe { ukernel256(kc, a, b, tile) }
}
pub(super) fn dot_avx2(x: &[f32], y: &[f32]) -> f32 {
    // SAFETY: only called through the AVX2 table, built after AVX2+FMA were detected.
    unsafe { dot256(x, y) }
}
pub(super) fn axpy_avx2(s: f32, x: &[f32], y: &mut [f32]) {
    // SAFETY: only called through the AVX2 table, built after AVX2+FMA were detected.
    unsafe { axpy256(s, x, y) }
}
