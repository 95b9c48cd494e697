//! `C = alpha * op(A) * op(B) + beta * C` with a constant B (a MatMul/Gemm weight).
//!
//! The weight comes either prepacked ([`Weight::Packed`], packed once through the weight
//! cache) or as the original tensor ([`Weight::Unpacked`], when the cache declined). Both take
//! the same route and give bit-identical results: M = 1 runs the panel GEMV (`panel_gemv.rs`)
//! over the packed panels or the original columns; M > 1 runs the blocked driver, which reads
//! the packed panels or packs them per task exactly as `Sgemm::run` does. Unlike `Sgemm::run`,
//! N = 1 has no special path here (a weight with N = 1 is not worth packing; callers keep it on
//! `Sgemm::run`).

use super::driver::{self, BSrc};
use super::panel_gemv::{self, PanelSrc};
use super::{check, BForm, GemmKernels, GemmPath, GemmRoute, Op, PackedB, Sgemm, DISPATCH, TABLES};
use crate::kernels::isa::Isa;

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

impl Sgemm<'_> {
    /// Runs the call against a constant B on the process's kernels (a packed weight runs on
    /// the table it was packed for). Panics when a buffer is too small or a packed weight's
    /// shape is not `k x n`. Returns the route that ran (e.g. `avx512-gemv-m1-prepacked`,
    /// `avx512-gemm-8x32-unpacked` in the ledger), or `Err` when a scratch buffer cannot be
    /// allocated.
    pub fn run_weight(&self, w: Weight<'_>, c: &mut [f32]) -> Result<GemmRoute, String> {
        let kern = match w {
            Weight::Packed(p) => p.kern,
            Weight::Unpacked { .. } => *DISPATCH,
        };
        run(kern, self, w, c)
    }

    /// [`Sgemm::run_weight`] forced onto one ISA variant. `Err` when the CPU lacks it or a
    /// packed weight was packed for another variant.
    pub fn run_weight_with(
        &self,
        isa: Isa,
        w: Weight<'_>,
        c: &mut [f32],
    ) -> Result<GemmRoute, String> {
        let kern = TABLES.for_isa(isa)?;
        if let Weight::Packed(p) = w {
            if !std::ptr::eq(p.kern, kern) {
                return Err(format!(
                    "weight was packed for another ISA than {}",
                    isa.name()
                ));
            }
        }
        run(kern, self, w, c)
    }
}

fn run(
    kern: &'static GemmKernels,
    call: &Sgemm<'_>,
    w: Weight<'_>,
    c: &mut [f32],
) -> Result<GemmRoute, String> {
    let (m, n, k) = (call.m, call.n, call.k);
    call.check_a();
    call.check_c(c);
    let (bsrc, psrc, form) = match w {
        Weight::Packed(p) => {
            assert!(
                p.k() == k && p.n() == n,
                "sgemm_weight: packed weight is {}x{}, the call needs {k}x{n}",
                p.k(),
                p.n()
            );
            (BSrc::Packed(p), PanelSrc::Packed(p), BForm::Prepacked)
        }
        Weight::Unpacked { b, ldb, trans } => {
            let (br, bc) = if trans { (n, k) } else { (k, n) };
            check("B", b, br, bc, ldb);
            let op = Op {
                data: b,
                ld: ldb,
                trans,
            };
            (BSrc::Strided(op), PanelSrc::Strided(op), BForm::Unpacked)
        }
    };
    if m == 0 || n == 0 {
        return Ok(kern.route(GemmPath::Empty));
    }
    let lv = kern.level()?;
    if k == 0 {
        driver::gemm(kern, lv, call, bsrc, c)?;
        return Ok(kern.route(GemmPath::K0Scale));
    }
    if m == 1 {
        panel_gemv::gemv(kern, lv, call, psrc, &mut c[..n])?;
        return Ok(kern.route(GemmPath::WeightGemvM1(form)));
    }
    driver::gemm(kern, lv, call, bsrc, c)?;
    Ok(kern.route(GemmPath::WeightGemm(form)))
}
