//! f32 binary elementwise ops (Add, Sub, Mul, Div) with numpy multidirectional broadcasting.
//!
//! Paths, cheapest first: same shape (one contiguous loop), a scalar operand on either side,
//! row broadcast (one operand is a suffix vector repeated over the other), and the general N-d
//! walk over coalesced dims whose inner loop is one of the three contiguous kernels. Each path
//! runs the process's ISA variant (scalar / AVX2 / AVX-512) from a table picked once. Every
//! variant computes exactly `a op b` per element (no FMA, no reciprocal approximation), so the
//! results are bit-identical across variants and to ORT's CPU EP.
//!
//! Outputs of at least [`PAR_MIN_ELEMS`] elements are split into contiguous chunks of the output
//! and dispatched with `Par::chunks` (`Dispatch::Task`).

mod route;
mod scalar;
#[cfg(target_arch = "x86_64")]
mod x86;

use crate::kernels::isa::Isa;
use crate::kernels::shape::{broadcast_dims, broadcast_strides, checked_numel, coalesce};
use crate::runtime::par::{Dispatch, Par};
use parking_lot::Mutex;
use std::sync::LazyLock;

pub use route::{BinaryPath, BinaryRoute};

/// The four binary arithmetic ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
}

/// Outputs at least this large are split into chunks for `Par::chunks` (`Dispatch::Task`). Measured
/// with `cargo run --release --example glue_split_timing` (2 lanes, serial and split arms
/// alternating, a 2-vCPU Xeon under ~50% foreign load): same-shape Mul serial/split was 0.89 at
/// 8192, 0.92-1.03 at 16384, 0.96-0.97 at 32768, 0.99 and 1.61 at 65536 (two runs), 1.87 at 131072;
/// a decode step's Muls (896 and 4864 elements) stay on the calling lane.
pub const PAR_MIN_ELEMS: usize = 1 << 16;
/// Target chunk size (elements of the output) when splitting.
const CHUNK_ELEMS: usize = 1 << 15;

type VvFn = fn(BinaryOp, &[f32], &[f32], &mut [f32]);
type SvFn = fn(BinaryOp, f32, &[f32], &mut [f32]);
type VsFn = fn(BinaryOp, &[f32], f32, &mut [f32]);

/// One ISA variant: the three contiguous loops.
struct Kernels {
    /// The level this table needs.
    isa: Isa,
    vv: VvFn,
    sv: SvFn,
    vs: VsFn,
}

const SCALAR: Kernels = Kernels {
    isa: Isa::Scalar,
    vv: scalar::vv,
    sv: scalar::sv,
    vs: scalar::vs,
};

#[cfg(target_arch = "x86_64")]
const AVX2: Kernels = Kernels {
    isa: Isa::Avx2,
    vv: x86::vv_avx2,
    sv: x86::sv_avx2,
    vs: x86::vs_avx2,
};

#[cfg(target_arch = "x86_64")]
const AVX512: Kernels = Kernels {
    isa: Isa::Avx512,
    vv: x86::vv_avx512,
    sv: x86::sv_avx512,
    vs: x86::vs_avx512,
};

/// This family's kernel tables, one per ISA level.
static TABLES: crate::kernels::isa::IsaTables<Kernels> = crate::isa_tables!(SCALAR, AVX2, AVX512);

/// The process's table, picked once from `Isa::get()`.
static DISPATCH: LazyLock<&'static Kernels> = LazyLock::new(|| TABLES.active());

/// `out = a op b` with numpy broadcasting; `out` must hold the broadcast shape's element count.
/// Returns the route that ran (ledger text e.g. `avx512-same-shape`, `scalar-broadcast`).
pub fn binary_f32(
    op: BinaryOp,
    a: &[f32],
    a_shape: &[usize],
    b: &[f32],
    b_shape: &[usize],
    out: &mut [f32],
    par: &dyn Par,
) -> Result<BinaryRoute, String> {
    run(*DISPATCH, op, a, a_shape, b, b_shape, out, par)
}

/// [`binary_f32`] forced onto one ISA variant (tests, diagnostics). `Err` when the CPU lacks it.
#[allow(clippy::too_many_arguments)]
pub fn binary_f32_with(
    isa: Isa,
    op: BinaryOp,
    a: &[f32],
    a_shape: &[usize],
    b: &[f32],
    b_shape: &[usize],
    out: &mut [f32],
    par: &dyn Par,
) -> Result<BinaryRoute, String> {
    let k = TABLES.for_isa(isa)?;
    run(k, op, a, a_shape, b, b_shape, out, par)
}

#[allow(clippy::too_many_arguments)]
fn run(
    k: &'static Kernels,
    op: BinaryOp,
    a: &[f32],
    a_shape: &[usize],
    b: &[f32],
    b_shape: &[usize],
    out: &mut [f32],
    par: &dyn Par,
) -> Result<BinaryRoute, String> {
    let route = |path| BinaryRoute { isa: k.isa, path };
    let out_shape = broadcast_dims(a_shape, b_shape)?;
    let na = checked_numel("input a", a_shape)?;
    let nb = checked_numel("input b", b_shape)?;
    let n = checked_numel("the output", &out_shape)?;
    if a.len() != na || b.len() != nb || out.len() != n {
        return Err(format!(
            "binary {op:?}: buffer lengths a={} b={} out={} do not match shapes {a_shape:?} \
             ({na}), {b_shape:?} ({nb}) -> {out_shape:?} ({n})",
            a.len(),
            b.len(),
            out.len()
        ));
    }
    if n == 0 {
        return Ok(route(BinaryPath::Empty));
    }
    // Same shape up to leading 1s: equal element counts mean nothing is broadcast.
    if na == n && nb == n {
        chunked(par, out, CHUNK_ELEMS, |start, o| {
            (k.vv)(op, &a[start..], &b[start..], o)
        });
        return Ok(route(BinaryPath::SameShape));
    }
    if na == 1 {
        let s = a[0];
        chunked(par, out, CHUNK_ELEMS, |start, o| {
            (k.sv)(op, s, &b[start..], o)
        });
        return Ok(route(BinaryPath::ScalarLhs));
    }
    if nb == 1 {
        let s = b[0];
        chunked(par, out, CHUNK_ELEMS, |start, o| {
            (k.vs)(op, &a[start..], s, o)
        });
        return Ok(route(BinaryPath::ScalarRhs));
    }
    // Row broadcast: the smaller operand is a suffix of the output shape, repeated.
    if na == n && is_suffix(b_shape, &out_shape) {
        let rows = row_chunk(nb);
        chunked(par, out, rows, |start, o| {
            for (r, orow) in o.chunks_mut(nb).enumerate() {
                let at = start + r * nb;
                (k.vv)(op, &a[at..at + nb], b, orow);
            }
        });
        return Ok(route(BinaryPath::RowBroadcast));
    }
    if nb == n && is_suffix(a_shape, &out_shape) {
        let rows = row_chunk(na);
        chunked(par, out, rows, |start, o| {
            for (r, orow) in o.chunks_mut(na).enumerate() {
                let at = start + r * na;
                (k.vv)(op, a, &b[at..at + na], orow);
            }
        });
        return Ok(route(BinaryPath::RowBroadcast));
    }
    general(k, op, a, a_shape, b, b_shape, &out_shape, out, par);
    Ok(route(BinaryPath::Broadcast))
}

/// `small` (leading 1s ignored) equals the trailing dims of `out`.
fn is_suffix(small: &[usize], out: &[usize]) -> bool {
    let s: Vec<usize> = small.iter().copied().skip_while(|&d| d == 1).collect();
    s.len() <= out.len() && out[out.len() - s.len()..] == s[..]
}

/// A chunk length that is a whole number of rows of `row` elements, about `CHUNK_ELEMS` long.
fn row_chunk(row: usize) -> usize {
    row * (CHUNK_ELEMS / row).max(1)
}

/// Runs `f(start, chunk)` over `out` split into `chunk`-element pieces; serially in one call when
/// `out` is below [`PAR_MIN_ELEMS`], otherwise through `Par::chunks` (`Dispatch::Task`).
fn chunked(par: &dyn Par, out: &mut [f32], chunk: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    if out.len() < PAR_MIN_ELEMS {
        f(0, out);
        return;
    }
    // Each chunk is a disjoint `&mut` piece behind its own (uncontended) lock, so any lane can
    // take chunk `i` without unsafe code.
    let parts: Vec<Mutex<&mut [f32]>> = out.chunks_mut(chunk).map(Mutex::new).collect();
    par.chunks(Dispatch::Task, parts.len(), &|i| {
        let mut piece = parts[i].lock();
        f(i * chunk, &mut piece)
    });
}

/// General N-d broadcast: coalesce dims, then walk the outer index space row by row with the
/// innermost dim handled by a contiguous kernel (inner strides are always 0 or 1).
#[allow(clippy::too_many_arguments)]
fn general(
    k: &Kernels,
    op: BinaryOp,
    a: &[f32],
    a_shape: &[usize],
    b: &[f32],
    b_shape: &[usize],
    out_shape: &[usize],
    out: &mut [f32],
    par: &dyn Par,
) {
    let sa = broadcast_strides(a_shape, out_shape);
    let sb = broadcast_strides(b_shape, out_shape);
    let (dims, st) = coalesce(out_shape, &[sa, sb]);
    let (sa, sb) = (&st[0], &st[1]);
    let r = dims.len() - 1;
    let inner = dims[r];
    let (ia, ib) = (sa[r], sb[r]);
    let outer = &dims[..r];
    let rows = row_chunk(inner);
    chunked(par, out, rows, |start, o| {
        // Multi-index of the first row of this chunk.
        let mut idx = vec![0usize; outer.len()];
        let mut row = start / inner;
        for d in (0..outer.len()).rev() {
            idx[d] = row % outer[d];
            row /= outer[d];
        }
        for orow in o.chunks_mut(inner) {
            let oa: usize = idx.iter().zip(sa).map(|(i, s)| i * s).sum();
            let ob: usize = idx.iter().zip(sb).map(|(i, s)| i * s).sum();
            match (ia, ib) {
                (1, 1) => (k.vv)(op, &a[oa..oa + inner], &b[ob..ob + inner], orow),
                (0, 1) => (k.sv)(op, a[oa], &b[ob..ob + inner], orow),
                (1, 0) => (k.vs)(op, &a[oa..oa + inner], b[ob], orow),
                _ => {
                    // Unreachable for contiguous inputs; kept as a correct strided fallback.
                    for (j, x) in orow.iter_mut().enumerate() {
                        let mut t = [0.0f32];
                        (k.vv)(op, &[a[oa + j * ia]], &[b[ob + j * ib]], &mut t);
                        *x = t[0];
                    }
                }
            }
            for d in (0..outer.len()).rev() {
                idx[d] += 1;
                if idx[d] < outer[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
    });
}
