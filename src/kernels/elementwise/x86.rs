//! AVX2 and AVX-512 loops for the binary ops. Only IEEE-exact single instructions are used
//! (`add/sub/mul/div_ps`, no FMA, no `rcp`), so every lane equals the scalar `a op b`.
//!
//! The safe wrappers here are only reachable through the dispatch tables in `mod.rs`, which are
//! built for an ISA only after `Isa::detect_hardware()` confirmed the CPU supports it.

#![cfg(target_arch = "x86_64")]
// AVX-512 intrinsics are stable from Rust 1.89 (safe `#[target_feature]` fns from 1.86); the
// workspace `rust-version` (1.85) predates them and needs raising to 1.89 for these kernels.
#![allow(clippy::incompatible_msrv)]

use super::BinaryOp;
use std::arch::x86_64::*;

const ADD: u8 = 0;
const SUB: u8 = 1;
const MUL: u8 = 2;
const DIV: u8 = 3;

macro_rules! dispatch_op {
    ($op:expr, $f:ident, $($arg:expr),*) => {
        match $op {
            BinaryOp::Add => $f::<ADD>($($arg),*),
            BinaryOp::Sub => $f::<SUB>($($arg),*),
            BinaryOp::Mul => $f::<MUL>($($arg),*),
            BinaryOp::Div => $f::<DIV>($($arg),*),
        }
    };
}

#[inline(always)]
fn op1<const OP: u8>(x: f32, y: f32) -> f32 {
    match OP {
        ADD => x + y,
        SUB => x - y,
        MUL => x * y,
        _ => x / y,
    }
}

// ---------------------------------------------------------------- AVX-512

#[inline]
#[target_feature(enable = "avx512f")]
fn op512<const OP: u8>(x: __m512, y: __m512) -> __m512 {
    match OP {
        ADD => _mm512_add_ps(x, y),
        SUB => _mm512_sub_ps(x, y),
        MUL => _mm512_mul_ps(x, y),
        _ => _mm512_div_ps(x, y),
    }
}

/// Loads lanes `[i, i + 16)` of `s`, or the `rem < 16` valid ones (zeros elsewhere).
#[inline]
#[target_feature(enable = "avx512f")]
fn load512(s: &[f32], i: usize, rem: usize) -> __m512 {
    debug_assert!(i + rem.min(16) <= s.len());
    if rem >= 16 {
        // SAFETY: callers guarantee i + 16 <= s.len(), so all 16 lanes are in bounds.
        unsafe { _mm512_loadu_ps(s.as_ptr().add(i)) }
    } else {
        let m: __mmask16 = (1u16 << rem) - 1;
        // SAFETY: masked-off lanes are not accessed (no fault); lanes < rem are in bounds.
        unsafe { _mm512_maskz_loadu_ps(m, s.as_ptr().add(i)) }
    }
}

#[inline]
#[target_feature(enable = "avx512f")]
fn store512(s: &mut [f32], i: usize, rem: usize, v: __m512) {
    debug_assert!(i + rem.min(16) <= s.len());
    if rem >= 16 {
        // SAFETY: callers guarantee i + 16 <= s.len().
        unsafe { _mm512_storeu_ps(s.as_mut_ptr().add(i), v) }
    } else {
        let m: __mmask16 = (1u16 << rem) - 1;
        // SAFETY: only the rem in-bounds lanes are written.
        unsafe { _mm512_mask_storeu_ps(s.as_mut_ptr().add(i), m, v) }
    }
}

#[target_feature(enable = "avx512f")]
fn vv512<const OP: u8>(a: &[f32], b: &[f32], out: &mut [f32]) {
    let n = out.len();
    assert!(a.len() >= n && b.len() >= n);
    let mut i = 0;
    while i + 32 <= n {
        let r0 = op512::<OP>(load512(a, i, 16), load512(b, i, 16));
        let r1 = op512::<OP>(load512(a, i + 16, 16), load512(b, i + 16, 16));
        store512(out, i, 16, r0);
        store512(out, i + 16, 16, r1);
        i += 32;
    }
    while i < n {
        let rem = n - i;
        store512(
            out,
            i,
            rem,
            op512::<OP>(load512(a, i, rem), load512(b, i, rem)),
        );
        i += 16;
    }
}

#[target_feature(enable = "avx512f")]
fn sv512<const OP: u8>(s: f32, b: &[f32], out: &mut [f32]) {
    let n = out.len();
    assert!(b.len() >= n);
    let sv = _mm512_set1_ps(s);
    let mut i = 0;
    while i < n {
        let rem = n - i;
        store512(out, i, rem, op512::<OP>(sv, load512(b, i, rem)));
        i += 16;
    }
}

#[target_feature(enable = "avx512f")]
fn vs512<const OP: u8>(a: &[f32], s: f32, out: &mut [f32]) {
    let n = out.len();
    assert!(a.len() >= n);
    let sv = _mm512_set1_ps(s);
    let mut i = 0;
    while i < n {
        let rem = n - i;
        store512(out, i, rem, op512::<OP>(load512(a, i, rem), sv));
        i += 16;
    }
}

pub(super) fn vv_avx512(op: BinaryOp, a: &[f32], b: &[f32], out: &mut [f32]) {
    // SAFETY: only called from the AVX-512 table, built after AVX-512F was detected.
    unsafe { dispatch_op!(op, vv512, a, b, out) }
}
pub(super) fn sv_avx512(op: BinaryOp, s: f32, b: &[f32], out: &mut [f32]) {
    // SAFETY: only called from the AVX-512 table, built after AVX-512F was detected.
    unsafe { dispatch_op!(op, sv512, s, b, out) }
}
pub(super) fn vs_avx512(op: BinaryOp, a: &[f32], s: f32, out: &mut [f32]) {
    // SAFETY: only called from the AVX-512 table, built after AVX-512F was detected.
    unsafe { dispatch_op!(op, vs512, a, s, out) }
}

// ---------------------------------------------------------------- AVX2

#[inline]
#[target_feature(enable = "avx2")]
fn op256<const OP: u8>(x: __m256, y: __m256) -> __m256 {
    match OP {
        ADD => _mm256_add_ps(x, y),
        SUB => _mm256_sub_ps(x, y),
        MUL => _mm256_mul_ps(x, y),
        _ => _mm256_div_ps(x, y),
    }
}

#[target_feature(enable = "avx2")]
fn vv256<const OP: u8>(a: &[f32], b: &[f32], out: &mut [f32]) {
    let n = out.len();
    assert!(a.len() >= n && b.len() >= n);
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n <= len of a, b and out.
        unsafe {
            let r = op256::<OP>(
                _mm256_loadu_ps(a.as_ptr().add(i)),
                _mm256_loadu_ps(b.as_ptr().add(i)),
            );
            _mm256_storeu_ps(out.as_mut_ptr().add(i), r);
        }
        i += 8;
    }
    for j in i..n {
        out[j] = op1::<OP>(a[j], b[j]);
    }
}

#[target_feature(enable = "avx2")]
fn sv256<const OP: u8>(s: f32, b: &[f32], out: &mut [f32]) {
    let n = out.len();
    assert!(b.len() >= n);
    let sv = _mm256_set1_ps(s);
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n <= len of b and out.
        unsafe {
            let r = op256::<OP>(sv, _mm256_loadu_ps(b.as_ptr().add(i)));
            _mm256_storeu_ps(out.as_mut_ptr().add(i), r);
        }
        i += 8;
    }
    for j in i..n {
        out[j] = op1::<OP>(s, b[j]);
    }
}

#[target_feature(enable = "avx2")]
fn vs256<const OP: u8>(a: &[f32], s: f32, out: &mut [f32]) {
    let n = out.len();
    assert!(a.len() >= n);
    let sv = _mm256_set1_ps(s);
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n <= len of a and out.
        unsafe {
            let r = op256::<OP>(_mm256_loadu_ps(a.as_ptr().add(i)), sv);
            _mm256_storeu_ps(out.as_mut_ptr().add(i), r);
        }
        i += 8;
    }
    for j in i..n {
        out[j] = op1::<OP>(a[j], s);
    }
}

pub(super) fn vv_avx2(op: BinaryOp, a: &[f32], b: &[f32], out: &mut [f32]) {
    // SAFETY: only called from the AVX2 table, built after AVX2 was detected.
    unsafe { dispatch_op!(op, vv256, a, b, out) }
}
pub(super) fn sv_avx2(op: BinaryOp, s: f32, b: &[f32], out: &mut [f32]) {
    // SAFETY: only called from the AVX2 table, built after AVX2 was detected.
    unsafe { dispatch_op!(op, sv256, s, b, out) }
}
pub(super) fn vs_avx2(op: BinaryOp, a: &[f32], s: f32, out: &mut [f32]) {
    // SAFETY: only called from the AVX2 table, built after AVX2 was detected.
    unsafe { dispatch_op!(op, vs256, a, s, out) }
}
