//! AVX2 / AVX-512 attention kernels over the shared [`Simd`] lanes: scaled QK scores (one dot
//! product per key row), weighted sums of matrix rows (scores along transposed keys, and
//! probabilities times V rows) and the rotate-half rotary row. The interleaved rotary form needs lane shuffles
//! for a cheap op and uses the scalar row.

#![cfg(target_arch = "x86_64")]

use crate::kernels::simd::{isa_entry, Avx2, Avx512, Simd};

#[inline(always)]
fn dot_generic<S: Simd>(s: S, a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let w = S::W;
    let body = n - n % w;
    let (mut acc0, mut acc1) = (s.splat(0.0), s.splat(0.0));
    let mut i = 0;
    while i + 2 * w <= body {
        acc0 = s.fma(s.load(a, i), s.load(b, i), acc0);
        acc1 = s.fma(s.load(a, i + w), s.load(b, i + w), acc1);
        i += 2 * w;
    }
    if i < body {
        acc0 = s.fma(s.load(a, i), s.load(b, i), acc0);
    }
    if body < n {
        let t = n - body;
        acc1 = s.fma(
            s.load_part(a, body, t, 0.0),
            s.load_part(b, body, t, 0.0),
            acc1,
        );
    }
    s.reduce_add(s.add(acc0, acc1))
}

#[inline(always)]
fn scores_generic<S: Simd>(s: S, q: &[f32], k: &[f32], scale: f32, out: &mut [f32]) {
    for (o, kr) in out.iter_mut().zip(k.chunks_exact(q.len())) {
        *o = scale * dot_generic(s, q, kr);
    }
}

/// `out[c] = scale * sum_r coef[r] * m[r * ld + c]` for `c < out.len()`, four vectors of `out`
/// held in registers: the scores from transposed keys (`coef` = query, `m` = K^T) and the
/// probabilities times V (`coef` = probabilities, `m` = V, scale 1).
#[inline(always)]
fn rows_generic<S: Simd>(s: S, coef: &[f32], m: &[f32], ld: usize, scale: f32, out: &mut [f32]) {
    let (n, w) = (out.len(), S::W);
    let sc = s.splat(scale);
    let mut c = 0;
    while c + 4 * w <= n {
        let z = s.splat(0.0);
        let (mut a0, mut a1, mut a2, mut a3) = (z, z, z, z);
        for (r, &x) in coef.iter().enumerate() {
            let (xv, at) = (s.splat(x), r * ld + c);
            a0 = s.fma(xv, s.load(m, at), a0);
            a1 = s.fma(xv, s.load(m, at + w), a1);
            a2 = s.fma(xv, s.load(m, at + 2 * w), a2);
            a3 = s.fma(xv, s.load(m, at + 3 * w), a3);
        }
        for (t, a) in [a0, a1, a2, a3].into_iter().enumerate() {
            s.store(out, c + t * w, s.mul(a, sc));
        }
        c += 4 * w;
    }
    while c < n {
        let t = w.min(n - c);
        let mut a = s.splat(0.0);
        for (r, &x) in coef.iter().enumerate() {
            a = s.fma(s.splat(x), s.load_part(m, r * ld + c, t, 0.0), a);
        }
        s.store_part(out, c, t, s.mul(a, sc));
        c += t;
    }
}

#[inline(always)]
fn rope_generic<S: Simd>(
    s: S,
    x: &[f32],
    cos: &[f32],
    sin: &[f32],
    interleaved: bool,
    out: &mut [f32],
) {
    if interleaved {
        return super::scalar::rope_row(x, cos, sin, true, out);
    }
    let half = cos.len();
    let w = S::W;
    let body = half - half % w;
    let mut i = 0;
    // out[i] = x1 c - x2 s; out[i + half] = x2 c + x1 s (as two products and one rounding each).
    while i < body {
        let (c, sn) = (s.load(cos, i), s.load(sin, i));
        let (x1, x2) = (s.load(x, i), s.load(x, i + half));
        s.store(out, i, s.sub(s.mul(x1, c), s.mul(x2, sn)));
        s.store(out, i + half, s.add(s.mul(x2, c), s.mul(x1, sn)));
        i += w;
    }
    for i in body..half {
        let (x1, x2) = (x[i], x[i + half]);
        out[i] = x1 * cos[i] - x2 * sin[i];
        out[i + half] = x2 * cos[i] + x1 * sin[i];
    }
    out[2 * half..].copy_from_slice(&x[2 * half..]);
}

isa_entry!(scores_avx2, Avx2, "avx2,fma", scores_generic,
    (q: &[f32], k: &[f32], scale: f32, out: &mut [f32]));
isa_entry!(scores_avx512, Avx512, "avx512f,avx512dq,avx2,fma", scores_generic,
    (q: &[f32], k: &[f32], scale: f32, out: &mut [f32]));
isa_entry!(rope_avx2, Avx2, "avx2,fma", rope_generic,
    (x: &[f32], cos: &[f32], sin: &[f32], interleaved: bool, out: &mut [f32]));
isa_entry!(rope_avx512, Avx512, "avx512f,avx512dq,avx2,fma", rope_generic,
    (x: &[f32], cos: &[f32], sin: &[f32], interleaved: bool, out: &mut [f32]));
isa_entry!(rows_avx2, Avx2, "avx2,fma", rows_generic,
    (coef: &[f32], m: &[f32], ld: usize, scale: f32, out: &mut [f32]));
isa_entry!(rows_avx512, Avx512, "avx512f,avx512dq,avx2,fma", rows_generic,
    (coef: &[f32], m: &[f32], ld: usize, scale: f32, out: &mut [f32]));
