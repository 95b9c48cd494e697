//! AVX2 / AVX-512 kernels over an int8 KV cache (`super::gqa_quant`): the scores of a query
//! (the key scales and the softmax scale folded into it) against rows of int8 codes, and
//! probabilities times rows of int8 codes into f32 sums. The codes widen to f32 lanes
//! (`vpmovsxbd`, `vcvtdq2ps`) and meet the f32 side in one FMA each, so the cache is read as
//! bytes and never dequantized into memory.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use crate::kernels::simd::{isa_entry, Avx2, Avx512, Simd};

/// [`Simd`] lanes that load int8 codes (bytes read as `i8`) widened to f32.
trait I8Lanes: Simd {
    /// Bytes `[i, i + W)` of `s` as f32 lanes (panics when out of bounds).
    fn load_i8(self, s: &[u8], i: usize) -> Self::V;
}

impl I8Lanes for Avx2 {
    #[inline(always)]
    fn load_i8(self, s: &[u8], i: usize) -> __m256 {
        let p = s[i..i + 8].as_ptr();
        // SAFETY: `self` is an `Avx2` token, which exists only on CPUs with AVX2 (the widening
        // and the conversion); the load reads the 8 bytes of the bounds-checked slice above.
        unsafe { _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(p.cast()))) }
    }
}

impl I8Lanes for Avx512 {
    #[inline(always)]
    fn load_i8(self, s: &[u8], i: usize) -> __m512 {
        let p = s[i..i + 16].as_ptr();
        // SAFETY: `self` is an `Avx512` token, which exists only on CPUs with AVX-512F; the
        // load reads the 16 bytes of the bounds-checked slice above.
        unsafe { _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.cast()))) }
    }
}

/// `dot(q, codes)` over `q.len()` elements: two accumulators along the whole vectors, the
/// elements after them one by one.
#[inline(always)]
fn dot_i8<S: I8Lanes>(s: S, q: &[f32], c: &[u8]) -> f32 {
    let n = q.len().min(c.len());
    let w = S::W;
    let body = n - n % w;
    let (mut a0, mut a1) = (s.splat(0.0), s.splat(0.0));
    let mut i = 0;
    while i + 2 * w <= body {
        a0 = s.fma(s.load(q, i), s.load_i8(c, i), a0);
        a1 = s.fma(s.load(q, i + w), s.load_i8(c, i + w), a1);
        i += 2 * w;
    }
    if i < body {
        a0 = s.fma(s.load(q, i), s.load_i8(c, i), a0);
    }
    let mut t = s.reduce_add(s.add(a0, a1));
    for j in body..n {
        t += q[j] * f32::from(c[j] as i8);
    }
    t
}

/// `out[j] = dot(q, codes[j])` for the first `out.len()` rows of `q.len()` codes.
#[inline(always)]
fn scores_i8_generic<S: I8Lanes>(s: S, q: &[f32], codes: &[u8], out: &mut [f32]) {
    let d = q.len();
    if d == 0 {
        out.fill(0.0);
        return;
    }
    for (o, row) in out.iter_mut().zip(codes.chunks_exact(d)) {
        *o = dot_i8(s, q, row);
    }
}

/// `out[c] += sum_r p[r] * codes[r * out.len() + c]`: four vectors of columns at a time held in
/// registers along all the rows, then single vectors, then the columns after them one by one.
#[inline(always)]
fn rows_i8_generic<S: I8Lanes>(s: S, p: &[f32], codes: &[u8], out: &mut [f32]) {
    let (ld, w) = (out.len(), S::W);
    if ld == 0 {
        return;
    }
    let rows = p.len().min(codes.len() / ld);
    let body = ld - ld % w;
    let mut c0 = 0;
    while c0 + 4 * w <= body {
        let mut acc = [s.splat(0.0); 4];
        for (t, a) in acc.iter_mut().enumerate() {
            *a = s.load(out, c0 + t * w);
        }
        for (r, &x) in p[..rows].iter().enumerate() {
            let (px, row) = (s.splat(x), &codes[r * ld..(r + 1) * ld]);
            for (t, a) in acc.iter_mut().enumerate() {
                *a = s.fma(px, s.load_i8(row, c0 + t * w), *a);
            }
        }
        for (t, a) in acc.iter().enumerate() {
            s.store(out, c0 + t * w, *a);
        }
        c0 += 4 * w;
    }
    while c0 < body {
        let mut a = s.load(out, c0);
        for (r, &x) in p[..rows].iter().enumerate() {
            a = s.fma(s.splat(x), s.load_i8(&codes[r * ld..(r + 1) * ld], c0), a);
        }
        s.store(out, c0, a);
        c0 += w;
    }
    for c in body..ld {
        let mut a = out[c];
        for (r, &x) in p[..rows].iter().enumerate() {
            a += x * f32::from(codes[r * ld + c] as i8);
        }
        out[c] = a;
    }
}

isa_entry!(scores_i8_avx2, Avx2, "avx2,fma", scores_i8_generic,
    (q: &[f32], codes: &[u8], out: &mut [f32]));
isa_entry!(scores_i8_avx512, Avx512, "avx512f,avx512dq,avx2,fma", scores_i8_generic,
    (q: &[f32], codes: &[u8], out: &mut [f32]));
isa_entry!(rows_i8_avx2, Avx2, "avx2,fma", rows_i8_generic,
    (p: &[f32], codes: &[u8], out: &mut [f32]));
isa_entry!(rows_i8_avx512, Avx512, "avx512f,avx512dq,avx2,fma", rows_i8_generic,
    (p: &[f32], codes: &[u8], out: &mut [f32]));
