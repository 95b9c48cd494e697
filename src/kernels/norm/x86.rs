//! AVX2 / AVX-512 row normalisation over the shared [`Simd`] lanes.

#![cfg(target_arch = "x86_64")]

use super::{NormParams, Row};
use crate::kernels::simd::{isa_entry, Avx2, Avx512, Simd};

/// `x (+ skip) (+ bias)` for lanes `[i, i + len)` (`len < W`: a zero-padded tail).
#[inline(always)]
fn value<S: Simd>(s: S, r: &Row<'_>, i: usize, len: usize) -> S::V {
    let ld = |src: &[f32]| {
        if len == S::W {
            s.load(src, i)
        } else {
            s.load_part(src, i, len, 0.0)
        }
    };
    let mut v = ld(r.x);
    if let Some(k) = r.skip {
        v = s.add(v, ld(k));
    }
    if let Some(b) = r.bias {
        v = s.add(v, ld(b));
    }
    v
}

#[inline(always)]
fn put<S: Simd>(s: S, dst: &mut [f32], i: usize, len: usize, v: S::V) {
    if len == S::W {
        s.store(dst, i, v)
    } else {
        s.store_part(dst, i, len, v)
    }
}

#[inline(always)]
fn row_generic<S: Simd>(
    s: S,
    p: NormParams,
    r: Row<'_>,
    y: &mut [f32],
    mut sum_out: Option<&mut [f32]>,
) -> (f32, f32) {
    let n = r.x.len();
    assert!(y.len() == n && r.scale.len() == n);
    let fused = r.skip.is_some() || r.bias.is_some();
    let w = S::W;
    let (mut acc_s, mut acc_q) = (s.splat(0.0), s.splat(0.0));
    let mut i = 0;
    while i < n {
        let len = w.min(n - i);
        let v = value(s, &r, i, len);
        if fused {
            // Keep the sum in y for the later passes.
            put(s, y, i, len, v);
        }
        if let Some(o) = sum_out.as_deref_mut() {
            put(s, o, i, len, v);
        }
        acc_s = s.add(acc_s, v);
        if p.simplified {
            acc_q = s.fma(v, v, acc_q);
        }
        i += w;
    }
    let nf = n as f32;
    let vals: &[f32] = if fused { y } else { r.x };
    // RMSNorm reports no mean: the lanes' f32 sum is enough there.
    let mean = if p.simplified {
        s.reduce_add(acc_s) / nf
    } else {
        super::row_mean(vals)
    };
    if !p.simplified {
        // Second pass: the variance around the mean (ORT: mean first, then variance; a sum of
        // squares minus the squared mean overflows to inf - inf for rows of large values).
        let vmean = s.splat(mean);
        let mut i = 0;
        while i < n {
            let len = w.min(n - i);
            let v = if len == w {
                s.load(vals, i)
            } else {
                s.load_part(vals, i, len, mean)
            };
            let c = s.sub(v, vmean);
            acc_q = s.fma(c, c, acc_q);
            i += w;
        }
    }
    let d = (s.reduce_add(acc_q) / nf + p.epsilon).sqrt();
    // Multiply by 1/d (one division per row; ORT divides per element: within 1 ulp of it).
    let (vinv, vmean) = (s.splat(1.0 / d), s.splat(mean));
    // Last pass: reads the kept sum from `y` (fused) or `x`, writes `y` block by block.
    let mut i = 0;
    while i < n {
        let len = w.min(n - i);
        let ld = |a: &[f32]| {
            if len == w {
                s.load(a, i)
            } else {
                s.load_part(a, i, len, 0.0)
            }
        };
        let v = if fused { ld(y) } else { ld(r.x) };
        let t = if p.simplified {
            s.mul(s.mul(v, vinv), ld(r.scale))
        } else {
            let t = s.mul(s.mul(s.sub(v, vmean), vinv), ld(r.scale));
            match r.beta {
                Some(b) => s.add(t, ld(b)),
                None => t,
            }
        };
        put(s, y, i, len, t);
        i += w;
    }
    (mean, 1.0 / d)
}

isa_entry!(row_avx2, Avx2, "avx2,fma", row_generic,
    (p: NormParams, r: Row<'_>, y: &mut [f32], sum_out: Option<&mut [f32]>) -> (f32, f32));
isa_entry!(row_avx512, Avx512, "avx512f,avx512dq,avx2,fma", row_generic,
    (p: NormParams, r: Row<'_>, y: &mut [f32], sum_out: Option<&mut [f32]>) -> (f32, f32));
