//! AVX2 (F16C) and AVX-512 f32 <-> f16 conversions of the 16-element blocks (see `scalar.rs`
//! for the NaN rule of blocks and tails): `vcvtps2ph` with round-to-nearest-even in the
//! immediate (MXCSR not consulted) and `vcvtph2ps`, the instructions ORT's CPU EP uses for its
//! blocks, so every bit matches. Leftovers below a vector use the scalar block rule.
//!
//! The table entries are `simd_entry!`s: each runs its kernel only under its level's token
//! (`kernels/simd.rs`; AVX2 level: AVX2 + FMA + F16C; AVX-512 level: F/BW/DQ/VL on top).

#![cfg(target_arch = "x86_64")]
#![allow(clippy::incompatible_msrv)]

use std::arch::x86_64::*;

use super::scalar;
use super::F16Bits;
use crate::kernels::simd::{simd_entry, Avx2, Avx512};

/// Immediate: round to nearest even, from the immediate (bit 2 clear: MXCSR not used).
const RNE: i32 = _MM_FROUND_TO_NEAREST_INT;

#[target_feature(enable = "avx2,fma,f16c")]
fn to_f16_256(x: &[f32], out: &mut [F16Bits]) {
    let n = out.len().min(x.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: lanes [i, i + 8) are in bounds of both slices; F16Bits is a transparent u16.
        unsafe {
            let v = _mm256_loadu_ps(x.as_ptr().add(i));
            let h = _mm256_cvtps_ph::<RNE>(v);
            _mm_storeu_si128(out.as_mut_ptr().add(i) as *mut __m128i, h);
        }
        i += 8;
    }
    scalar::to_f16_block(&x[i..n], &mut out[i..n]);
}

#[target_feature(enable = "avx2,fma,f16c")]
fn to_f32_256(x: &[F16Bits], out: &mut [f32]) {
    let n = out.len().min(x.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: lanes [i, i + 8) are in bounds of both slices; F16Bits is a transparent u16.
        unsafe {
            let h = _mm_loadu_si128(x.as_ptr().add(i) as *const __m128i);
            _mm256_storeu_ps(out.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        }
        i += 8;
    }
    scalar::to_f32_block(&x[i..n], &mut out[i..n]);
}

#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")]
fn to_f16_512(x: &[f32], out: &mut [F16Bits]) {
    let n = out.len().min(x.len());
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: lanes [i, i + 16) are in bounds of both slices; F16Bits is a transparent u16.
        unsafe {
            let v = _mm512_loadu_ps(x.as_ptr().add(i));
            let h = _mm512_cvtps_ph::<RNE>(v);
            _mm256_storeu_si256(out.as_mut_ptr().add(i) as *mut __m256i, h);
        }
        i += 16;
    }
    to_f16_256(&x[i..n], &mut out[i..n]);
}

#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")]
fn to_f32_512(x: &[F16Bits], out: &mut [f32]) {
    let n = out.len().min(x.len());
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: lanes [i, i + 16) are in bounds of both slices; F16Bits is a transparent u16.
        unsafe {
            let h = _mm256_loadu_si256(x.as_ptr().add(i) as *const __m256i);
            _mm512_storeu_ps(out.as_mut_ptr().add(i), _mm512_cvtph_ps(h));
        }
        i += 16;
    }
    to_f32_256(&x[i..n], &mut out[i..n]);
}

// Table entries: each takes its level's token from the caller's Level and runs the kernel under
// it. The AVX2 kernels enable "avx2,fma,f16c" (the AVX2 level); the AVX-512 ones the AVX-512
// level's features.
simd_entry!(pub(super) fn to_f16_avx2(x: &[f32], out: &mut [F16Bits]) = Avx2 => to_f16_256);
simd_entry!(pub(super) fn to_f32_avx2(x: &[F16Bits], out: &mut [f32]) = Avx2 => to_f32_256);
simd_entry!(pub(super) fn to_f16_avx512(x: &[f32], out: &mut [F16Bits]) = Avx512 => to_f16_512);
simd_entry!(pub(super) fn to_f32_avx512(x: &[F16Bits], out: &mut [f32]) = Avx512 => to_f32_512);
