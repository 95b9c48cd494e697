//! AVX2 / AVX-512 attention kernels over the shared [`Simd`] lanes: scaled QK scores (one dot
//! product per key row), probabilities times V rows (`out += p_j * v_j`) and the rotate-half
//! rotary row. The interleaved
//! rotary form needs lane shuffles for a cheap op and uses the scalar row.

#![cfg(target_arch = "x86_64")]

use crate::kernels::activation::simd::{isa_entry, Avx2, Avx512, Simd};

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

#[inline(always)]
fn pv_generic<S: Simd>(s: S, p: &[f32], v: &[f32], out: &mut [f32]) {
    out.fill(0.0);
    for (&pj, vr) in p.iter().zip(v.chunks_exact(out.len())) {
        axpy_generic(s, pj, vr, out);
    }
}

#[inline(always)]
fn axpy_generic<S: Simd>(s: S, a: f32, x: &[f32], y: &mut [f32]) {
    let n = x.len().min(y.len());
    let w = S::W;
    let body = n - n % w;
    let va = s.splat(a);
    let mut i = 0;
    while i < body {
        s.store(y, i, s.fma(va, s.load(x, i), s.load(y, i)));
        i += w;
    }
    if body < n {
        let t = n - body;
        let v = s.fma(
            va,
            s.load_part(x, body, t, 0.0),
            s.load_part(y, body, t, 0.0),
        );
        s.store_part(y, body, t, v);
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
isa_entry!(pv_avx2, Avx2, "avx2,fma", pv_generic, (p: &[f32], v: &[f32], out: &mut [f32]));
isa_entry!(pv_avx512, Avx512, "avx512f,avx512dq,avx2,fma", pv_generic,
    (p: &[f32], v: &[f32], out: &mut [f32]));
isa_entry!(rope_avx2, Avx2, "avx2,fma", rope_generic,
    (x: &[f32], cos: &[f32], sin: &[f32], interleaved: bool, out: &mut [f32]));
isa_entry!(rope_avx512, Avx512, "avx512f,avx512dq,avx2,fma", rope_generic,
    (x: &[f32], cos: &[f32], sin: &[f32], interleaved: bool, out: &mut [f32]));
