//! TEMPORARY stand-in.
use crate::runtime::Par;
#[allow(clippy::too_many_arguments)]
pub fn sgemm(
    ta: bool,
    tb: bool,
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    a: &[f32],
    lda: usize,
    b: &[f32],
    ldb: usize,
    beta: f32,
    c: &mut [f32],
    ldc: usize,
    _p: &dyn Par,
) -> &'static str {
    for i in 0..m {
        for j in 0..n {
            let mut s = 0f32;
            for p in 0..k {
                let x = if ta { a[p * lda + i] } else { a[i * lda + p] };
                let y = if tb { b[j * ldb + p] } else { b[p * ldb + j] };
                s += x * y;
            }
            let old = if beta == 0.0 {
                0.0
            } else {
                beta * c[i * ldc + j]
            };
            c[i * ldc + j] = alpha * s + old;
        }
    }
    "stub"
}
pub fn matmul_f32(
    a: &[f32],
    sa: &[usize],
    b: &[f32],
    sb: &[usize],
    out: &mut [f32],
    p: &dyn Par,
) -> Result<&'static str, String> {
    Ok(sgemm(
        false, false, sa[0], sb[1], sa[1], 1.0, a, sa[1], b, sb[1], 0.0, out, sb[1], p,
    ))
}
