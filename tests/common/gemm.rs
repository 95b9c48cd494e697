//! The operands and the f64 reference of the f32 GEMM tests (`tests/kernels/f32_sgemm.rs`,
//! `f32_weights.rs`), included with `#[path] mod`; needs `rng` at the crate root.
#![allow(dead_code)]

use crate::rng::Rng;

/// Value of C's padding columns (between n and ldc): a call must leave them untouched.
pub(crate) const PAD: f32 = 12345.5;

/// One call `C = alpha op(A) op(B) + beta C0` (row major, with leading dimensions) and its
/// drawn operands.
pub(crate) struct GemmCase {
    pub ta: bool,
    pub tb: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub alpha: f32,
    pub beta: f32,
    pub lda: usize,
    pub ldb: usize,
    pub ldc: usize,
    pub a: Vec<f32>,
    pub b: Vec<f32>,
    /// C before the call: NaN where beta is 0 (must not be read), drawn otherwise; the padding
    /// columns hold [`PAD`].
    pub c0: Vec<f32>,
}

impl GemmCase {
    /// Draws A, B and C0 from `rng` (in that order, uniform in [-1, 1)) for `[ta, tb]`,
    /// `[m, n, k]`, `[alpha, beta]` and the leading dimensions `[lda, ldb, ldc]`.
    pub(crate) fn draw(
        rng: &mut Rng,
        [ta, tb]: [bool; 2],
        [m, n, k]: [usize; 3],
        [alpha, beta]: [f32; 2],
        [lda, ldb, ldc]: [usize; 3],
    ) -> GemmCase {
        let a = rng.vec_f32(if ta { k } else { m } * lda, -1.0, 1.0);
        let b = rng.vec_f32(if tb { n } else { k } * ldb, -1.0, 1.0);
        let mut c0 = if beta == 0.0 {
            vec![f32::NAN; m * ldc]
        } else {
            rng.vec_f32(m * ldc, -1.0, 1.0)
        };
        for i in 0..m {
            c0[i * ldc + n..(i + 1) * ldc].fill(PAD);
        }
        GemmCase {
            ta,
            tb,
            m,
            n,
            k,
            alpha,
            beta,
            lda,
            ldb,
            ldc,
            a,
            b,
            c0,
        }
    }

    /// Checks `got` (C after the call) against naive f64 sums, `|got - ref| <= 1e-5 (|alpha|
    /// sum_p |op(A)_ip op(B)_pj| + |beta C0_ij|)`, and the padding columns still [`PAD`]. `ctx`
    /// names the case in a failure.
    pub(crate) fn check(&self, got: &[f32], ctx: &str) {
        let GemmCase {
            ta,
            tb,
            m,
            n,
            k,
            alpha,
            beta,
            lda,
            ldb,
            ldc,
            ..
        } = *self;
        let (a, b, c0) = (&self.a, &self.b, &self.c0);
        let av = |i: usize, p: usize| if ta { a[p * lda + i] } else { a[i * lda + p] } as f64;
        let bv = |p: usize, j: usize| if tb { b[j * ldb + p] } else { b[p * ldb + j] } as f64;
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut mag) = (0.0f64, 0.0f64);
                for p in 0..k {
                    s += av(i, p) * bv(p, j);
                    mag += (av(i, p) * bv(p, j)).abs();
                }
                let old = c0[i * ldc + j] as f64;
                let (want, scale) = if beta == 0.0 {
                    (alpha as f64 * s, alpha.abs() as f64 * mag)
                } else {
                    (
                        alpha as f64 * s + beta as f64 * old,
                        alpha.abs() as f64 * mag + (beta as f64 * old).abs(),
                    )
                };
                let v = got[i * ldc + j] as f64;
                assert!(
                    (v - want).abs() <= 1e-5 * scale + 1e-30,
                    "{ctx}: C[{i},{j}] = {v}, want {want}"
                );
            }
            assert!(
                got[i * ldc + n..(i + 1) * ldc].iter().all(|&v| v == PAD),
                "{ctx}: C padding written"
            );
        }
    }
}
