//! One f32 GEMM call as a value: [`Sgemm`] holds everything but B and C (shapes, A and its
//! layout, alpha, beta, C's row stride, the `Par`), and its methods run it against a strided B
//! ([`Sgemm::run`]) or a constant one ([`Sgemm::run_weight`]).

use super::Op;
use crate::runtime::par::{Par, Serial};

/// `C = alpha * op(A) * op(B) + beta * C`, row-major, without B and C: `op(A)` is `m x k`,
/// `op(B)` `k x n`, C `m x n` with row stride `ldc`. `beta == 0` ignores C's old contents (NaN
/// included). Build it with [`Sgemm::new`] and the setters, or as a struct literal.
#[derive(Clone, Copy)]
pub struct Sgemm<'a> {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// A as stored: `m x k` with leading dimension `a.ld`, or `k x m` when `a.trans`.
    pub a: Op<'a>,
    pub alpha: f32,
    pub beta: f32,
    pub ldc: usize,
    pub par: &'a dyn Par,
}

impl<'a> Sgemm<'a> {
    /// `C = A * op(B)` for a dense `m x k` A (leading dimension `k`) into a dense C (row stride
    /// `n`), alpha 1, beta 0, on the calling thread ([`Serial`]).
    pub fn new(m: usize, n: usize, k: usize, a: &'a [f32]) -> Self {
        Sgemm {
            m,
            n,
            k,
            a: Op {
                data: a,
                ld: k,
                trans: false,
            },
            alpha: 1.0,
            beta: 0.0,
            ldc: n,
            par: &Serial,
        }
    }

    /// A's leading dimension and whether it is stored transposed (`k x m`).
    pub fn lda(mut self, ld: usize, trans: bool) -> Self {
        self.a.ld = ld;
        self.a.trans = trans;
        self
    }

    pub fn alpha(mut self, alpha: f32) -> Self {
        self.alpha = alpha;
        self
    }

    pub fn beta(mut self, beta: f32) -> Self {
        self.beta = beta;
        self
    }

    /// C's row stride.
    pub fn ldc(mut self, ldc: usize) -> Self {
        self.ldc = ldc;
        self
    }

    pub fn par(mut self, par: &'a dyn Par) -> Self {
        self.par = par;
        self
    }

    /// The same call with A replaced (a batch's slice of the same layout).
    pub(super) fn with_a(mut self, data: &'a [f32]) -> Self {
        self.a.data = data;
        self
    }

    /// Panics unless A holds its shape.
    pub(super) fn check_a(&self) {
        let (m, k) = (self.m, self.k);
        let (ar, ac) = if self.a.trans { (k, m) } else { (m, k) };
        super::check("A", self.a.data, ar, ac, self.a.ld);
    }

    /// Panics unless `c` holds C's shape.
    pub(super) fn check_c(&self, c: &[f32]) {
        super::check("C", c, self.m, self.n, self.ldc);
    }
}
