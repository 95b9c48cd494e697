//! Matrix-vector paths for m == 1 and n == 1: bandwidth-bound, so no packing; the matrix is
//! streamed once, either as rows that each give one output (dot form) or as rows that each
//! update the whole output (axpy form).

use super::{GemmKernels, Op};
use crate::kernels::simd::Level;
use crate::runtime::par::{Dispatch, Par};
use parking_lot::Mutex;

/// Outputs per decode chunk for the axpy form (a few KiB of accumulators stay in L1).
const AXPY_CHUNK: usize = 512;
/// Outputs per decode chunk for the dot form.
const DOT_CHUNK: usize = 64;
/// Below this many multiply-adds the GEMV runs on the caller alone.
pub(super) const PAR_MIN_WORK: usize = 1 << 16;

/// How the matrix operand is laid out relative to the output vector.
pub(super) enum Form<'a> {
    /// `y[j] = dot(m[j*ld .. j*ld + k], x)`.
    Dot { m: &'a [f32], ld: usize },
    /// `y[j] = sum_p x[p] * m[p*ld + j]`.
    Axpy { m: &'a [f32], ld: usize },
}

/// Computes `y = M x` (length `len`, reduction `k`) for a gathered contiguous `x`.
pub(super) fn gemv(
    kern: &GemmKernels,
    lv: Level,
    form: Form<'_>,
    x: &[f32],
    y: &mut [f32],
    par: &dyn Par,
) {
    let k = x.len();
    let len = y.len();
    y.fill(0.0);
    let chunk = match form {
        Form::Dot { .. } => DOT_CHUNK,
        Form::Axpy { .. } => AXPY_CHUNK,
    };
    let run = |j0: usize, ys: &mut [f32]| match form {
        Form::Dot { m, ld } => {
            for (j, yj) in ys.iter_mut().enumerate() {
                let at = (j0 + j) * ld;
                *yj = (kern.dot)(lv, &m[at..at + k], x);
            }
        }
        Form::Axpy { m, ld } => {
            let w = ys.len();
            for (p, &xp) in x.iter().enumerate() {
                let at = p * ld + j0;
                (kern.axpy)(lv, xp, &m[at..at + w], ys);
            }
        }
    };
    if len * k < PAR_MIN_WORK || par.lanes() <= 1 || len <= chunk {
        run(0, y);
    } else {
        // Disjoint pieces of y behind uncontended locks: any lane may take any piece.
        let parts: Vec<Mutex<&mut [f32]>> = y.chunks_mut(chunk).map(Mutex::new).collect();
        par.chunks(Dispatch::Decode, parts.len(), &|i| {
            run(i * chunk, &mut parts[i].lock())
        });
    }
}

/// Gathers `out.len()` elements of a vector with stride `stride` starting at `off`.
pub(super) fn gather_into(v: Op<'_>, off: usize, stride: usize, out: &mut [f32]) {
    for (p, o) in out.iter_mut().enumerate() {
        *o = v.data[off + p * stride];
    }
}
