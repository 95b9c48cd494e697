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

mod call;
mod driver;
mod driver_packed;
mod gemv;
mod packed;
mod panel_gemv;
#[cfg(target_arch = "x86_64")]
mod panel_x86;
mod route;
mod scalar;
mod tiles;
mod weights;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use call::Sgemm;
pub use driver::PanelSource;
pub use packed::PackedB;
pub use route::{BForm, GemmPath, GemmRoute};
pub use weights::{pack_weight, pack_weight_with, try_pack_weight, weight_panel_width, Weight};

use crate::kernels::isa::Isa;
use crate::kernels::shape::matmul_shapes;
use crate::kernels::simd::Level;
use crate::runtime::par::{Dispatch, Par, Serial};
use driver::BSrc;
use gemv::Form;
use std::sync::LazyLock;

use crate::memory::scratch::{scratch_error, try_with_scratch_f32};
use parking_lot::Mutex;

// Every entry takes the level its caller minted for the call ([`Level`], `kernels/simd.rs`).
type UkernelFn = fn(Level, usize, &[f32], &[f32], &mut [f32]);
type DotFn = fn(Level, &[f32], &[f32]) -> f32;
type AxpyFn = fn(Level, f32, &[f32], &mut [f32]);
/// `(level, k, x, incx, panel, ld, w, y)`: see `scalar::panel_gemv` for the contract.
type PanelGemvFn = fn(Level, usize, &[f32], usize, &[f32], usize, usize, &mut [f32]);

/// One ISA variant of the GEMM family.
pub(crate) struct GemmKernels {
    /// The level the table runs at (the ISA of every route it takes).
    isa: Isa,
    mr: usize,
    nr: usize,
    ukernel: UkernelFn,
    dot: DotFn,
    axpy: AxpyFn,
    panel_gemv: PanelGemvFn,
}

impl GemmKernels {
    /// The proof this table's level may run, minted once per call and handed to its entries.
    fn level(&self) -> Result<Level, String> {
        Level::require(self.isa)
    }

    fn route(&self, path: GemmPath) -> GemmRoute {
        GemmRoute {
            isa: self.isa,
            path,
        }
    }
}

const SCALAR: GemmKernels = GemmKernels {
    isa: Isa::Scalar,
    mr: scalar::MR,
    nr: scalar::NR,
    ukernel: scalar::ukernel_entry,
    dot: scalar::dot_entry,
    axpy: scalar::axpy_entry,
    panel_gemv: scalar::panel_gemv_entry,
};

#[cfg(target_arch = "x86_64")]
const AVX2: GemmKernels = GemmKernels {
    isa: Isa::Avx2,
    mr: x86::MR256,
    nr: x86::NR256,
    ukernel: x86::ukernel_avx2,
    dot: x86::dot_avx2,
    axpy: x86::axpy_avx2,
    panel_gemv: panel_x86::panel_gemv_avx2,
};

#[cfg(target_arch = "x86_64")]
const AVX512: GemmKernels = GemmKernels {
    isa: Isa::Avx512,
    mr: x86::MR512,
    nr: x86::NR512,
    ukernel: x86::ukernel_avx512,
    dot: x86::dot_avx512,
    axpy: x86::axpy_avx512,
    panel_gemv: panel_x86::panel_gemv_avx512,
};

/// This family's kernel tables, one per ISA level.
pub(super) static TABLES: crate::kernels::isa::IsaTables<GemmKernels> =
    crate::isa_tables!(SCALAR, AVX2, AVX512);

/// The process's table, picked once from `Isa::get()`.
pub(super) static DISPATCH: LazyLock<&'static GemmKernels> = LazyLock::new(|| TABLES.active());

/// A matrix operand: row-major storage with leading dimension `ld`, stored transposed when
/// `trans` (then `data` holds the operand's transpose).
#[derive(Clone, Copy)]
pub struct Op<'a> {
    pub data: &'a [f32],
    pub ld: usize,
    pub trans: bool,
}

impl Sgemm<'_> {
    /// Runs the call against a strided B on the process's kernels: `C = alpha * op(A) * op(B)
    /// + beta * C`. Panics when a buffer is too small for its shape and leading dimension.
    /// Returns the route that ran (e.g. `avx512-gemm-8x32`, `avx512-gemv-m1` in the ledger), or
    /// `Err` when a scratch buffer cannot be allocated.
    pub fn run(&self, b: Op<'_>, c: &mut [f32]) -> Result<GemmRoute, String> {
        run(*DISPATCH, self, b, c)
    }

    /// [`Sgemm::run`] forced onto one ISA variant (tests, diagnostics). `Err` when the CPU
    /// lacks it.
    pub fn run_with(&self, isa: Isa, b: Op<'_>, c: &mut [f32]) -> Result<GemmRoute, String> {
        run(TABLES.for_isa(isa)?, self, b, c)
    }
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

fn run(
    kern: &'static GemmKernels,
    call: &Sgemm<'_>,
    b: Op<'_>,
    c: &mut [f32],
) -> Result<GemmRoute, String> {
    let (m, n, k) = (call.m, call.n, call.k);
    let (alpha, beta, a) = (call.alpha, call.beta, call.a);
    // Stored shape of B: k x n (n x k when transposed).
    let (br, bc) = if b.trans { (n, k) } else { (k, n) };
    call.check_a();
    check("B", b.data, br, bc, b.ld);
    call.check_c(c);
    if m == 0 || n == 0 {
        return Ok(kern.route(GemmPath::Empty));
    }
    let lv = kern.level()?;
    if k == 0 {
        driver::gemm(kern, lv, call, BSrc::Strided(b), c)?;
        return Ok(kern.route(GemmPath::K0Scale));
    }
    // GEMV: x and y live in the lane's parked scratch (no allocation per call once warm).
    if m == 1 {
        return try_with_scratch_f32(k + n, |buf| {
            let (x, y) = buf.split_at_mut(k);
            if a.trans {
                gemv::gather_into(a, 0, a.ld, x);
            } else {
                x.copy_from_slice(&a.data[..k]);
            }
            let form = if b.trans {
                Form::Dot {
                    m: b.data,
                    ld: b.ld,
                }
            } else {
                Form::Axpy {
                    m: b.data,
                    ld: b.ld,
                }
            };
            gemv::gemv(kern, lv, form, x, y, call.par);
            write_vec(y, c, 1, alpha, beta);
            kern.route(GemmPath::GemvM1)
        })
        .ok_or_else(|| scratch_error((k + n) * 4));
    }
    if n == 1 {
        return try_with_scratch_f32(k + m, |buf| {
            let (x, y) = buf.split_at_mut(k);
            if b.trans {
                x.copy_from_slice(&b.data[..k]);
            } else {
                gemv::gather_into(b, 0, b.ld, x);
            }
            let form = if a.trans {
                Form::Axpy {
                    m: a.data,
                    ld: a.ld,
                }
            } else {
                Form::Dot {
                    m: a.data,
                    ld: a.ld,
                }
            };
            gemv::gemv(kern, lv, form, x, y, call.par);
            write_vec(y, c, call.ldc, alpha, beta);
            kern.route(GemmPath::GemvN1)
        })
        .ok_or_else(|| scratch_error((k + m) * 4));
    }
    driver::gemm(kern, lv, call, BSrc::Strided(b), c)?;
    Ok(kern.route(GemmPath::Gemm))
}

/// `C = alpha * A * B + beta * C` for a B whose panels `src` writes ([`PanelSource`]), on the
/// blocked driver of `isa`'s table (the highest f32 level at or below it: the VNNI level runs
/// the AVX-512 kernels). `call.a` must not be transposed. `Err` when the CPU lacks the level or
/// a scratch buffer cannot be allocated. Every output element sees the same `KC` slicing and
/// micro-kernel whatever the lanes and the tile grid, so the split never changes an answer.
pub fn gemm_panels(
    isa: Isa,
    call: &Sgemm<'_>,
    src: &dyn PanelSource,
    c: &mut [f32],
) -> Result<(), String> {
    let kern = TABLES.for_isa(isa)?;
    assert!(!call.a.trans, "gemm_panels: A must be stored row-major");
    call.check_a();
    call.check_c(c);
    if call.m == 0 || call.n == 0 {
        return Ok(());
    }
    driver::gemm(kern, kern.level()?, call, BSrc::Panels(src), c)
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
/// broadcasting (see [`matmul_shapes`]). Returns the route of the underlying products.
pub fn matmul_f32(
    a: &[f32],
    a_shape: &[usize],
    b: &[f32],
    b_shape: &[usize],
    out: &mut [f32],
    par: &dyn Par,
) -> Result<GemmRoute, String> {
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
        return Ok(kern.route(GemmPath::Empty));
    }
    let o_mat = m * n;
    let b_at = |off: usize| Op {
        data: &b[off..],
        ld: n,
        trans: false,
    };
    // Shared B and A batches laid out back to back: one product with batch * m rows.
    if p.batch == 1 || (p.b_shared() && p.a_dense()) {
        let call = Sgemm::new(p.batch * m, n, k, a).par(par);
        return run(kern, &call, b_at(p.offsets(0).1), out);
    }
    let one = Sgemm::new(m, n, k, a);
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
        let route = Mutex::new(Ok(kern.route(GemmPath::Gemm)));
        par.chunks(Dispatch::Task, p.batch, &|i| {
            let mut o = parts[i].lock();
            let (ao, bo) = p.offsets(i);
            let v = run(kern, &one.with_a(&a[ao..]).par(&Serial), b_at(bo), &mut o);
            let mut slot = route.lock();
            if slot.is_ok() {
                *slot = v;
            }
        });
        return route.into_inner();
    }
    let mut route = kern.route(GemmPath::Gemm);
    let one = one.par(par);
    for (i, o) in out.chunks_mut(o_mat).enumerate() {
        let (ao, bo) = p.offsets(i);
        route = run(kern, &one.with_a(&a[ao..]), b_at(bo), o)?;
    }
    Ok(route)
}
