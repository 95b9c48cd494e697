//! Portable reference micro-kernel (same packed layouts and blocking as the SIMD ones) and the
//! GEMV primitives.

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
