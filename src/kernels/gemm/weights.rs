//! `C = alpha * op(A) * op(B) + beta * C` with a constant B (a MatMul/Gemm weight).
//!
//! The weight comes either prepacked ([`Weight::Packed`], packed once through the weight
//! cache) or as the original tensor ([`Weight::Unpacked`], when the cache declined). Both take
//! the same route and give bit-identical results: M = 1 runs the panel GEMV (`panel_gemv.rs`)
//! over the packed panels or the original columns; M > 1 runs the blocked driver, which reads
//! the packed panels or packs them per task exactly as `sgemm` does. Unlike `sgemm`, N = 1
//! has no special path here (a weight with N = 1 is not worth packing; callers keep it on
//! `sgemm`).

use super::driver::{self, BSrc, Geometry};
use super::panel_gemv::{self, PanelSrc};
use super::{check, GemmKernels, Op, PackedB, DISPATCH, TABLES};
use crate::kernels::isa::Isa;
use crate::runtime::par::Par;

/// A constant B operand.
#[derive(Clone, Copy)]
pub enum Weight<'a> {
    /// Packed by [`pack_weight`] / [`pack_weight_with`] (carries its shape and kernel table).
    Packed(&'a PackedB),
    /// The original row-major B: `k x n` with leading dimension `ldb`, or `n x k` when `trans`.
    Unpacked {
        b: &'a [f32],
        ldb: usize,
        trans: bool,
    },
}

/// Width of the B panels of the process's kernels (a packed weight's layout parameter).
pub fn weight_panel_width() -> usize {
    DISPATCH.nr
}

/// Packs `op(B)` (`k x n`; B stored `n x k` with leading dimension `ldb` when `trans_b`) for
/// the process's kernels. Panics when `b` is too small for its shape.
pub fn pack_weight(trans_b: bool, k: usize, n: usize, b: &[f32], ldb: usize) -> PackedB {
    try_pack_weight(trans_b, k, n, b, ldb).expect("sgemm pack: out of memory")
}

/// [`pack_weight`], or `None` when the packed copy cannot be allocated (the caller then
/// computes from `b` itself).
pub fn try_pack_weight(
    trans_b: bool,
    k: usize,
    n: usize,
    b: &[f32],
    ldb: usize,
) -> Option<PackedB> {
    pack(*DISPATCH, trans_b, k, n, b, ldb)
}

/// [`pack_weight`] for one ISA variant (tests, diagnostics). `Err` when the CPU lacks it.
pub fn pack_weight_with(
    isa: Isa,
    trans_b: bool,
    k: usize,
    n: usize,
    b: &[f32],
    ldb: usize,
) -> Result<PackedB, String> {
    pack(TABLES.for_isa(isa)?, trans_b, k, n, b, ldb).ok_or_else(|| "out of memory".into())
}

fn pack(
    kern: &'static GemmKernels,
    trans: bool,
    k: usize,
    n: usize,
    data: &[f32],
    ld: usize,
) -> Option<PackedB> {
    let (br, bc) = if trans { (n, k) } else { (k, n) };
    check("B", data, br, bc, ld);
    PackedB::new(kern, Op { data, ld, trans }, k, n)
}

/// `C = alpha * op(A) * op(B) + beta * C` with a constant B, on the process's kernels (a packed
/// weight runs on the table it was packed for). `op(A)` is `m x k`, C `m x n` with row stride
/// `ldc`; `beta == 0` ignores C's old contents. Panics when a buffer is too small or a packed
/// weight's shape is not `k x n`. Returns the variant that ran (e.g.
/// `"avx512-gemv-m1-prepacked"`, `"avx512-gemm-8x32-unpacked"`), or `Err` when a scratch buffer
/// cannot be allocated.
#[allow(clippy::too_many_arguments)]
pub fn sgemm_weight(
    trans_a: bool,
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    a: &[f32],
    lda: usize,
    w: Weight<'_>,
    beta: f32,
    c: &mut [f32],
    ldc: usize,
    par: &dyn Par,
) -> Result<&'static str, String> {
    let kern = match w {
        Weight::Packed(p) => p.kern,
        Weight::Unpacked { .. } => *DISPATCH,
    };
    run(kern, trans_a, m, n, k, alpha, a, lda, w, beta, c, ldc, par)
}

/// [`sgemm_weight`] forced onto one ISA variant. `Err` when the CPU lacks it or a packed
/// weight was packed for another variant.
#[allow(clippy::too_many_arguments)]
pub fn sgemm_weight_with(
    isa: Isa,
    trans_a: bool,
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    a: &[f32],
    lda: usize,
    w: Weight<'_>,
    beta: f32,
    c: &mut [f32],
    ldc: usize,
    par: &dyn Par,
) -> Result<&'static str, String> {
    let kern = TABLES.for_isa(isa)?;
    if let Weight::Packed(p) = w {
        if !std::ptr::eq(p.kern, kern) {
            return Err(format!(
                "weight was packed for another ISA than {}",
                isa.name()
            ));
        }
    }
    run(kern, trans_a, m, n, k, alpha, a, lda, w, beta, c, ldc, par)
}

#[allow(clippy::too_many_arguments)]
fn run(
    kern: &'static GemmKernels,
    trans_a: bool,
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    a: &[f32],
    lda: usize,
    w: Weight<'_>,
    beta: f32,
    c: &mut [f32],
    ldc: usize,
    par: &dyn Par,
) -> Result<&'static str, String> {
    let (ar, ac) = if trans_a { (k, m) } else { (m, k) };
    check("A", a, ar, ac, lda);
    check("C", c, m, n, ldc);
    let (bsrc, psrc, packed) = match w {
        Weight::Packed(p) => {
            assert!(
                p.k() == k && p.n() == n,
                "sgemm_weight: packed weight is {}x{}, the call needs {k}x{n}",
                p.k(),
                p.n()
            );
            (BSrc::Packed(p), PanelSrc::Packed(p), true)
        }
        Weight::Unpacked { b, ldb, trans } => {
            let (br, bc) = if trans { (n, k) } else { (k, n) };
            check("B", b, br, bc, ldb);
            let op = Op {
                data: b,
                ld: ldb,
                trans,
            };
            (BSrc::Strided(op), PanelSrc::Strided(op), false)
        }
    };
    let name = |i: usize| kern.wnames[i + if packed { 0 } else { 2 }];
    if m == 0 || n == 0 {
        return Ok(kern.names[3]);
    }
    let ao = Op {
        data: a,
        ld: lda,
        trans: trans_a,
    };
    if k == 0 {
        driver::gemm(
            kern,
            ao,
            bsrc,
            Geometry { m, n, k },
            alpha,
            beta,
            c,
            ldc,
            par,
        )?;
        return Ok(kern.names[4]);
    }
    if m == 1 {
        // x = op(A)'s only row: contiguous, or one column of a transposed A (stride lda).
        let incx = if trans_a { lda } else { 1 };
        panel_gemv::gemv(kern, k, n, a, incx, psrc, alpha, beta, &mut c[..n], par)?;
        return Ok(name(1));
    }
    driver::gemm(
        kern,
        ao,
        bsrc,
        Geometry { m, n, k },
        alpha,
        beta,
        c,
        ldc,
        par,
    )?;
    Ok(name(0))
}
