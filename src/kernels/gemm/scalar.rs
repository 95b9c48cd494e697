//! Portable reference micro-kernel (same packed layouts and blocking as the SIMD ones) and the
//! GEMV primitives.

use crate::kernels::simd::plain_entry;

/// Register tile of the scalar kernel.
pub(super) const MR: usize = 8;
pub(super) const NR: usize = 8;

/// `tile[r * NR + c] = sum_kk a[kk * MR + r] * b[kk * NR + c]` over `kc` packed steps.
pub(super) fn ukernel(kc: usize, a: &[f32], b: &[f32], tile: &mut [f32]) {
    let (a, b) = (&a[..kc * MR], &b[..kc * NR]);
    let mut acc = [[0.0f32; NR]; MR];
    for (ak, bk) in a.chunks_exact(MR).zip(b.chunks_exact(NR)) {
        for r in 0..MR {
            let av = ak[r];
            for c in 0..NR {
                acc[r][c] += av * bk[c];
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        tile[r * NR..(r + 1) * NR].copy_from_slice(row);
    }
}

/// `sum x[i] * y[i]`.
pub(super) fn dot(x: &[f32], y: &[f32]) -> f32 {
    x.iter().zip(y).map(|(a, b)| a * b).sum()
}

/// `y[i] += s * x[i]`.
pub(super) fn axpy(s: f32, x: &[f32], y: &mut [f32]) {
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi += s * xi;
    }
}

/// Panel GEMV over one `NR`-wide panel, for `c < w`:
/// `y[c] = (s0 + s1) + (s2 + s3)` with `s_u = sum_{p = u mod 4} x[p * incx] * b[p * ld + c]`,
/// each `s_u` accumulated in increasing `p`. Every ISA variant keeps this split (four
/// interleaved partial sums, so the SIMD ones have independent FMA chains); `y[w..]` untouched.
pub(super) fn panel_gemv(
    k: usize,
    x: &[f32],
    incx: usize,
    b: &[f32],
    ld: usize,
    w: usize,
    y: &mut [f32],
) {
    assert!(w <= NR && y.len() >= w);
    let mut acc = [[0.0f32; NR]; 4];
    for p in 0..k {
        let (xv, row) = (x[p * incx], &b[p * ld..][..w]);
        for (a, &bv) in acc[p % 4].iter_mut().zip(row) {
            *a += xv * bv;
        }
    }
    for (c, yc) in y[..w].iter_mut().enumerate() {
        *yc = (acc[0][c] + acc[1][c]) + (acc[2][c] + acc[3][c]);
    }
}

// The table's entries: the uniform signature of the SIMD ones (`kernels/simd.rs`).
plain_entry!(pub(super) fn ukernel_entry(kc: usize, a: &[f32], b: &[f32], tile: &mut [f32]) => ukernel);
plain_entry!(pub(super) fn dot_entry(x: &[f32], y: &[f32]) -> f32 => dot);
plain_entry!(pub(super) fn axpy_entry(s: f32, x: &[f32], y: &mut [f32]) => axpy);
plain_entry!(pub(super) fn panel_gemv_entry(
    k: usize, x: &[f32], incx: usize, b: &[f32], ld: usize, w: usize, y: &mut [f32],
) => panel_gemv);
