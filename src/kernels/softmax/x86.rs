//! AVX2 / AVX-512 softmax rows over the shared [`Simd`] lanes.

#![cfg(target_arch = "x86_64")]

use crate::kernels::simd::{isa_entry, Avx2, Avx512, Simd};

#[inline(always)]
fn rows_generic<S: Simd>(s: S, x: &[f32], out: &mut [f32], n: usize) {
    for (xr, or) in x.chunks(n).zip(out.chunks_mut(n)) {
        row_generic(s, xr, or);
    }
}

#[inline(always)]
fn row_generic<S: Simd>(s: S, x: &[f32], out: &mut [f32]) {
    let n = x.len();
    assert_eq!(out.len(), n);
    let w = S::W;
    let tail = n % w;
    let body = n - tail;
    // Four independent maxima: one chain of `vmaxps` would wait on its own latency every vector.
    // (`max(v, acc)` returns `acc` when `v` is NaN, so a NaN never enters an accumulator.)
    let ninf = s.splat(f32::NEG_INFINITY);
    let (mut m0, mut m1, mut m2, mut m3) = (ninf, ninf, ninf, ninf);
    let mut i = 0;
    while i + 4 * w <= body {
        m0 = s.max(s.load(x, i), m0);
        m1 = s.max(s.load(x, i + w), m1);
        m2 = s.max(s.load(x, i + 2 * w), m2);
        m3 = s.max(s.load(x, i + 3 * w), m3);
        i += 4 * w;
    }
    while i < body {
        m0 = s.max(s.load(x, i), m0);
        i += w;
    }
    let mut vm = s.max(s.max(m0, m1), s.max(m2, m3));
    if tail > 0 {
        vm = s.max(s.load_part(x, body, tail, f32::NEG_INFINITY), vm);
    }
    let m = s.splat(s.reduce_max(vm));
    let mut acc = s.splat(0.0);
    i = 0;
    while i < body {
        let e = s.exp_neg(s.sub(s.load(x, i), m));
        s.store(out, i, e);
        acc = s.add(acc, e);
        i += w;
    }
    if tail > 0 {
        // Padding lanes are -inf: exp gives 0 and adds nothing (unless the row is NaN anyway).
        let e = s.exp_neg(s.sub(s.load_part(x, body, tail, f32::NEG_INFINITY), m));
        s.store_part(out, body, tail, e);
        acc = s.add(acc, e);
    }
    let r = s.splat(1.0 / s.reduce_add(acc));
    i = 0;
    while i < body {
        s.store(out, i, s.mul(s.load(out, i), r));
        i += w;
    }
    if tail > 0 {
        let v = s.mul(s.load_part(out, body, tail, 0.0), r);
        s.store_part(out, body, tail, v);
    }
}

isa_entry!(row_avx2, Avx2, "avx2,fma", rows_generic, (x: &[f32], out: &mut [f32], n: usize));
isa_entry!(row_avx512, Avx512, "avx512f,avx512dq,avx2,fma", rows_generic,
    (x: &[f32], out: &mut [f32], n: usize));
