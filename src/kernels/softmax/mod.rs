//! f32 Softmax along one axis (ONNX Softmax-13 semantics), viewed as `[outer, dim, inner]`.
//!
//! Last axis (`inner == 1`): per row `m = max(x)`, `e = exp(x - m)`, `y = e * (1 / sum(e))`, the
//! same steps and final reciprocal-multiply as ORT's CPU EP (MLAS). Any NaN or +inf in a row makes
//! the whole row NaN (as ORT: `x - m` is NaN there and poisons the sum); a row of only -inf is NaN.
//! Other axes (`inner > 1`) take a strided scalar path (the same math per element).
//!
//! Row blocks of at least [`PAR_MIN_ELEMS`] elements in total are split over lanes.

mod route;
mod scalar;
#[cfg(target_arch = "x86_64")]
mod x86;

use parking_lot::Mutex;
use std::sync::LazyLock;

use crate::kernels::isa::Isa;
use crate::runtime::par::{Dispatch, Par};

pub use route::{SoftmaxPath, SoftmaxRoute};

pub const PAR_MIN_ELEMS: usize = 1 << 15;
const CHUNK_ELEMS: usize = 1 << 14;

/// Softmax of consecutive contiguous rows of `n` elements into `out` (one call per chunk).
pub(crate) type RowFn = fn(&[f32], &mut [f32], usize);

struct Kernels {
    /// The level this table needs.
    isa: Isa,
    row: RowFn,
}

const SCALAR: Kernels = Kernels {
    isa: Isa::Scalar,
    row: scalar::row,
};
#[cfg(target_arch = "x86_64")]
const AVX2: Kernels = Kernels {
    isa: Isa::Avx2,
    row: x86::row_avx2,
};
#[cfg(target_arch = "x86_64")]
const AVX512: Kernels = Kernels {
    isa: Isa::Avx512,
    row: x86::row_avx512,
};

/// This family's kernel tables, one per ISA level.
static TABLES: crate::kernels::isa::IsaTables<Kernels> = crate::isa_tables!(SCALAR, AVX2, AVX512);

static DISPATCH: LazyLock<&'static Kernels> = LazyLock::new(|| TABLES.active());

/// Softmax of `x` viewed as `[outer, dim, inner]` along `dim`. Returns the route that ran.
pub fn softmax_f32(
    x: &[f32],
    outer: usize,
    dim: usize,
    inner: usize,
    out: &mut [f32],
    par: &dyn Par,
) -> Result<SoftmaxRoute, String> {
    run(*DISPATCH, x, outer, dim, inner, out, par)
}

/// [`softmax_f32`] forced onto one ISA variant (tests). `Err` when the CPU lacks it.
pub fn softmax_f32_with(
    isa: Isa,
    x: &[f32],
    outer: usize,
    dim: usize,
    inner: usize,
    out: &mut [f32],
    par: &dyn Par,
) -> Result<SoftmaxRoute, String> {
    let k = TABLES.for_isa(isa)?;
    run(k, x, outer, dim, inner, out, par)
}

/// The contiguous-row softmax of `isa` (`row(x, out, n)`: rows of `n` from `x` into `out`), for
/// kernels that fuse softmax into their own loop (attention). `Err` when the CPU lacks `isa`.
pub(crate) fn row_kernel(isa: Isa) -> Result<RowFn, String> {
    Ok(TABLES.for_isa(isa)?.row)
}

fn run(
    k: &'static Kernels,
    x: &[f32],
    outer: usize,
    dim: usize,
    inner: usize,
    out: &mut [f32],
    par: &dyn Par,
) -> Result<SoftmaxRoute, String> {
    let n = outer
        .checked_mul(dim)
        .and_then(|v| v.checked_mul(inner))
        .ok_or("softmax: shape overflows")?;
    if x.len() != n || out.len() != n {
        return Err(format!(
            "softmax: buffers x={} out={} do not match [{outer}, {dim}, {inner}]",
            x.len(),
            out.len()
        ));
    }
    let route = SoftmaxRoute {
        isa: k.isa,
        path: if inner == 1 {
            SoftmaxPath::LastAxis
        } else {
            SoftmaxPath::Strided
        },
    };
    if n == 0 {
        return Ok(route);
    }
    // One "block" = one outer index: `dim * inner` contiguous elements.
    let block = dim * inner;
    let per_chunk = (CHUNK_ELEMS / block).max(1);
    let f = |start_block: usize, o: &mut [f32]| {
        let at = start_block * block;
        if inner == 1 {
            (k.row)(&x[at..at + o.len()], o, dim);
            return;
        }
        for (b, ob) in o.chunks_mut(block).enumerate() {
            let at = at + b * block;
            scalar::strided(&x[at..at + block], dim, inner, ob);
        }
    };
    if n < PAR_MIN_ELEMS || outer < 2 || par.lanes() < 2 {
        f(0, out);
    } else {
        let parts: Vec<Mutex<&mut [f32]>> =
            out.chunks_mut(per_chunk * block).map(Mutex::new).collect();
        par.chunks(Dispatch::Task, parts.len(), &|i| {
            let mut piece = parts[i].lock();
            f(i * per_chunk, &mut piece)
        });
    }
    Ok(route)
}
