//! f32 GEMM: `C = alpha * op(A) * op(B) + beta * C` on row-major matrices, and numpy-style
//! batched MatMul on top of it.
//!
//! Variants (picked once per process from `Isa::get()`): AVX-512F 8x32 FMA micro-kernel,
//! AVX2+FMA 6x16, and a portable 8x8 scalar kernel, all behind the same blocked driver
//! (`driver.rs`: packed B panels `KC x NR`, packed A panels `KC x MR`). m == 1 and n == 1 take a
//! GEMV path that streams the matrix once. Big products are split into a grid of C tiles run
//! with `Par::chunks` (`Dispatch::Task`); GEMV splits its output with `Par::chunks` (`Dispatch::Decode`).
//!
//! Constant B (weights, `weights.rs`): prepacked once into the micro-kernel's panel layout
//! ([`PackedB`], `packed.rs`), so the driver skips B packing; M = 1 runs a panel GEMV
//! (`panel_gemv.rs`, kernels `panel_x86.rs` / `scalar.rs`). The unpacked form of the same call
//! takes the same route over the original B and gives bit-identical results.

mod driver;
mod driver_packed;
mod gemv;
mod packed;
mod panel_gemv;
#[cfg(target_arch = "x86_64")]
mod panel_x86;
mod scalar;
mod tiles;
mod weights;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use packed::PackedB;
pub use weights::{
    pack_weight, pack_weight_with, sgemm_weight, sgemm_weight_with, try_pack_weight,
    weight_panel_width, Weight,
};

use crate::kernels::isa::Isa;
use crate::kernels::shape::matmul_shapes;
use crate::runtime::par::{Dispatch, Par, Serial};
use driver::{BSrc, Geometry};
use gemv::Form;
use std::sync::LazyLock;

use crate::memory::scratch::{scratch_error, try_with_scratch_f32};
use parking_lot::Mutex;

type UkernelFn = fn(usize, &[f32], &[f32], &mut [f32]);
type DotFn = fn(&[f32], &[f32]) -> f32;
type AxpyFn = fn(f32, &[f32], &mut [f32]);
/// `(k, x, incx, panel, ld, w, y)`: see `scalar::panel_gemv` for the contract.
type PanelGemvFn = fn(usize, &[f32], usize, &[f32], usize, usize, &mut [f32]);

/// One ISA variant of the GEMM family.
pub(crate) struct GemmKernels {
    mr: usize,
    nr: usize,
    ukernel: UkernelFn,
    dot: DotFn,
    axpy: AxpyFn,
    panel_gemv: PanelGemvFn,
    /// blocked gemm, gemv m == 1, gemv n == 1, empty output, k == 0 (C = beta * C).
    names: [&'static str; 5],
    /// Constant-B routes: gemm and gemv m == 1 from a prepacked B, then from the unpacked B.
    wnames: [&'static str; 4],
}

const SCALAR: GemmKernels = GemmKernels {
    mr: scalar::MR,
    nr: scalar::NR,
    ukernel: scalar::ukernel,
    dot: scalar::dot,
    axpy: scalar::axpy,
    panel_gemv: scalar::panel_gemv,
    wnames: [
        "scalar-gemm-8x8-prepacked",
        "scalar-gemv-m1-prepacked",
        "scalar-gemm-8x8-unpacked",
        "scalar-gemv-m1-unpacked",
    ],
    names: [
        "scalar-gemm-8x8",
        "scalar-gemv-m1",
        "scalar-gemv-n1",
        "scalar-empty",
        "scalar-k0-scale",
    ],
};

#[cfg(target_arch = "x86_64")]
const AVX2: GemmKernels = GemmKernels {
    mr: x86::MR256,
    nr: x86::NR256,
    ukernel: x86::ukernel_avx2,
    dot: x86::dot_avx2,
    axpy: x86::axpy_avx2,
    panel_gemv: panel_x86::panel_gemv_avx2,
    wnames: [
        "avx2-gemm-6x16-prepacked",
        "avx2-gemv-m1-prepacked",
        "avx2-gemm-6x16-unpacked",
        "avx2-gemv-m1-unpacked",
    ],
    names: [
        "avx2-gemm-6x16",
        "avx2-gemv-m1",
        "avx2-gemv-n1",
        "avx2-empty",
        "avx2-k0-scale",
    ],
};

#[cfg(target_arch = "x86_64")]
const AVX512: GemmKernels = GemmKernels {
    mr: x86::MR512,
    nr: x86::NR512,
    ukernel: x86::ukernel_avx512,
    dot: x86::dot_avx512,
    axpy: x86::axpy_avx512,
    panel_gemv: panel_x86::panel_gemv_avx512,
    wnames: [
        "avx512-gemm-8x32-prepacked",
        "avx512-gemv-m1-prepacked",
        "avx512-gemm-8x32-unpacked",
        "avx512-gemv-m1-unpacked",
    ],
    names: [
        "avx512-gemm-8x32",
        "avx512-gemv-m1",
        "avx512-gemv-n1",
        "avx512-empty",
        "avx512-k0-scale",
    ],
};

/// This family's kernel tables, one per ISA level.
pub(super) static TABLES: crate::kernels::isa::IsaTables<GemmKernels> =
    crate::isa_tables!(SCALAR, AVX2, AVX512);

/// The process's table, picked once from `Isa::get()`.
pub(super) static DISPATCH: LazyLock<&'static GemmKernels> = LazyLock::new(|| TABLES.active());

/// A matrix operand: row-major storage with leading dimension `ld`, possibly transposed.
#[derive(Clone, Copy)]
pub(crate) struct Op<'a> {
    data: &'a [f32],
    ld: usize,
    trans: bool,
}

/// `C = alpha * op(A) * op(B) + beta * C`, row-major; `op(A)` is `m x k`, `op(B)` is `k x n`,
/// C is `m x n` with row stride `ldc`. `beta == 0` ignores C's old contents (NaN included).
/// Panics when a buffer is too small for its shape and leading dimension. Returns the variant
/// that ran (e.g. `"avx512-gemm-8x32"`, `"avx512-gemv-m1"`), or `Err` when a scratch buffer
/// cannot be allocated.
#[allow(clippy::too_many_arguments)]
pub fn sgemm(
    trans_a: bool,
    trans_b: bool,
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
    par: &dyn Par,
) -> Result<&'static str, String> {
    run(
        *DISPATCH, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, par,
    )
}

/// [`sgemm`] forced onto one ISA variant (tests, diagnostics). `Err` when the CPU lacks it.
#[allow(clippy::too_many_arguments)]
pub fn sgemm_with(
    isa: Isa,
    trans_a: bool,
    trans_b: bool,
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
    par: &dyn Par,
) -> Result<&'static str, String> {
    let kern = TABLES.for_isa(isa)?;
    run(
        kern, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, par,
    )
}

/// Panics unless `data` holds a `rows x cols` row-major matrix with leading dimension `ld`.
pub(super) fn check(what: &str, data: &[f32], rows: usize, cols: usize, ld: usize) {
    if rows == 0 || cols == 0 {
        return;
    }
    assert!(ld >= cols, "sgemm: {what} leading dimension {ld} < {cols}");
    let need = (rows - 1) * ld + cols;
    assert!(
        data.len() >= need,
        "sgemm: {what} holds {} elements, {rows}x{cols} (ld {ld}) needs {need}",
        data.len()
    );
}

#[allow(clippy::too_many_arguments)]
fn run(
    kern: &'static GemmKernels,
    trans_a: bool,
    trans_b: bool,
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
    par: &dyn Par,
) -> Result<&'static str, String> {
    // Stored shapes: A is m x k (k x m when transposed), B is k x n (n x k when transposed).
    let (ar, ac) = if trans_a { (k, m) } else { (m, k) };
    let (br, bc) = if trans_b { (n, k) } else { (k, n) };
    check("A", a, ar, ac, lda);
    check("B", b, br, bc, ldb);
    check("C", c, m, n, ldc);
    if m == 0 || n == 0 {
        return Ok(kern.names[3]);
    }
    let (ao, bo) = (
        Op {
            data: a,
            ld: lda,
            trans: trans_a,
        },
        Op {
            data: b,
            ld: ldb,
            trans: trans_b,
        },
    );
    if k == 0 {
        driver::gemm(
            kern,
            ao,
            BSrc::Strided(bo),
            Geometry { m, n, k },
            alpha,
            beta,
            c,
            ldc,
            par,
        )?;
        return Ok(kern.names[4]);
    }
    // GEMV: x and y live in the lane's parked scratch (no allocation per call once warm).
    if m == 1 {
        return try_with_scratch_f32(k + n, |buf| {
            let (x, y) = buf.split_at_mut(k);
            if trans_a {
                gemv::gather_into(ao, 0, lda, x);
            } else {
                x.copy_from_slice(&a[..k]);
            }
            let form = if trans_b {
                Form::Dot { m: b, ld: ldb }
            } else {
                Form::Axpy { m: b, ld: ldb }
            };
            gemv::gemv(kern, form, x, y, par);
            write_vec(y, c, 1, alpha, beta);
            kern.names[1]
        })
        .ok_or_else(|| scratch_error((k + n) * 4));
    }
    if n == 1 {
        return try_with_scratch_f32(k + m, |buf| {
            let (x, y) = buf.split_at_mut(k);
            if trans_b {
                x.copy_from_slice(&b[..k]);
            } else {
                gemv::gather_into(bo, 0, ldb, x);
            }
            let form = if trans_a {
                Form::Axpy { m: a, ld: lda }
            } else {
                Form::Dot { m: a, ld: lda }
            };
            gemv::gemv(kern, form, x, y, par);
            write_vec(y, c, ldc, alpha, beta);
            kern.names[2]
        })
        .ok_or_else(|| scratch_error((k + m) * 4));
    }
    driver::gemm(
        kern,
        ao,
        BSrc::Strided(bo),
        Geometry { m, n, k },
        alpha,
        beta,
        c,
        ldc,
        par,
    )?;
    Ok(kern.names[0])
}

/// `c[j * stride] = alpha * y[j] + beta * c[j * stride]` (beta == 0: old value ignored).
pub(super) fn write_vec(y: &[f32], c: &mut [f32], stride: usize, alpha: f32, beta: f32) {
    for (j, &v) in y.iter().enumerate() {
        let cj = &mut c[j * stride];
        *cj = if beta == 0.0 {
            alpha * v
        } else {
            alpha * v + beta * *cj
        };
    }
}

/// numpy.matmul of contiguous row-major tensors: `out = a @ b` with 1-D promotion and batch
/// broadcasting (see [`matmul_shapes`]). Returns the variant of the underlying sgemm.
pub fn matmul_f32(
    a: &[f32],
    a_shape: &[usize],
    b: &[f32],
    b_shape: &[usize],
    out: &mut [f32],
    par: &dyn Par,
) -> Result<&'static str, String> {
    let kern = *DISPATCH;
    let p = matmul_shapes(a_shape, b_shape)?;
    let (na, nb, no) = (p.a_len, p.b_len, p.out_len);
    if a.len() != na || b.len() != nb || out.len() != no {
        return Err(format!(
            "matmul: buffer lengths a={} b={} out={} do not match shapes {a_shape:?}, {b_shape:?} -> {:?}",
            a.len(),
            b.len(),
            out.len(),
            p.out_shape
        ));
    }
    let (m, n, k) = (p.m, p.n, p.k);
    if no == 0 {
        return Ok(kern.names[3]);
    }
    let o_mat = m * n;
    // Shared B and A batches laid out back to back: one product with batch * m rows.
    if p.batch == 1 || (p.b_shared() && p.a_dense()) {
        let bo = p.offsets(0).1;
        let rows = p.batch * m;
        return run(
            kern,
            false,
            false,
            rows,
            n,
            k,
            1.0,
            a,
            k,
            &b[bo..],
            n,
            0.0,
            out,
            n,
            par,
        );
    }
    let work = m.saturating_mul(n).saturating_mul(k.max(1));
    if work < driver::PAR_MIN_WORK && work.saturating_mul(p.batch) >= driver::PAR_MIN_WORK {
        // Many small products: one per chunk, each serial.
        let mut parts: Vec<Mutex<&mut [f32]>> = Vec::new();
        parts.try_reserve_exact(p.batch).map_err(|_| {
            scratch_error(
                p.batch
                    .saturating_mul(std::mem::size_of::<Mutex<&mut [f32]>>()),
            )
        })?;
        parts.extend(out.chunks_mut(o_mat).map(Mutex::new));
        let name = Mutex::new(Ok(kern.names[0]));
        par.chunks(Dispatch::Task, p.batch, &|i| {
            let mut o = parts[i].lock();
            let (ao, bo) = p.offsets(i);
            let v = run(
                kern,
                false,
                false,
                m,
                n,
                k,
                1.0,
                &a[ao..],
                k,
                &b[bo..],
                n,
                0.0,
                &mut o,
                n,
                &Serial,
            );
            let mut slot = name.lock();
            if slot.is_ok() {
                *slot = v;
            }
        });
        return name.into_inner();
    }
    let mut name = kern.names[0];
    for (i, o) in out.chunks_mut(o_mat).enumerate() {
        let (ao, bo) = p.offsets(i);
        name = run(
            kern,
            false,
            false,
            m,
            n,
            k,
            1.0,
            &a[ao..],
            k,
            &b[bo..],
            n,
            0.0,
            o,
            n,
            par,
        )?;
    }
    Ok(name)
}
