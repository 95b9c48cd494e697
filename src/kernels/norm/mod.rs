//! f32 normalisations over the last `n` elements of each row: LayerNormalization, RMSNorm
//! (SimplifiedLayerNormalization) and their Skip forms (residual add fused in front).
//!
//! Per row, as ORT's CPU EP does it: `v = x (+ skip) (+ bias)`; `mean = sum(v) / n` (summed in
//! f64, rounded once); `d = sqrt(sum(v^2) / n + eps)` (simplified) or
//! `sqrt(sum((v - mean)^2) / n + eps)` (a second pass: no `inf - inf` for large rows); then
//! `y = v / d * scale` (simplified) or `y = (v - mean) / d * scale (+ beta)`, accumulated in f32
//! (ORT sums serially; rcpu sums in SIMD lanes, which is at least as accurate). The SIMD variants
//! multiply by `1 / d` instead of dividing each element (within an ulp of ORT, much cheaper). Optional outputs:
//! per-row `mean`, per-row `inv_std = 1 / d`, and the pre-norm sum `v`.
//!
//! Rows are split over lanes when `rows * n` reaches [`PAR_MIN_ELEMS`].

mod scalar;
#[cfg(target_arch = "x86_64")]
mod x86;

use parking_lot::Mutex;
use std::sync::LazyLock;

use crate::kernels::isa::Isa;
use crate::runtime::par::{Dispatch, Par};

/// Rows are split over lanes when `rows * n` reaches this. Measured with `cargo run --release
/// --example glue_split_timing` (2 lanes, serial and split arms alternating, a 2-vCPU Xeon under
/// ~50% foreign load): serial/split was 0.97 at 14336 elements, 0.98 and 1.43 at 28672 (two runs),
/// 1.73 at 57344; below ~14K a split costs 0.1-0.5 us more than the work, so a decode step's norms
/// (one row of 896) stay on the calling lane.
pub const PAR_MIN_ELEMS: usize = 1 << 15;
const CHUNK_ELEMS: usize = 1 << 14;

/// Which normalisation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NormParams {
    /// RMSNorm (no mean subtraction, no beta) when true.
    pub simplified: bool,
    pub epsilon: f32,
}

/// Inputs. `x` is `rows * n`; `skip` is `k * n` for some `k` dividing `rows` (row `r` uses skip
/// row `r % k`); `bias`, `scale`, `beta` are `n` long.
#[derive(Clone, Copy)]
pub struct NormInputs<'a> {
    pub x: &'a [f32],
    pub skip: Option<&'a [f32]>,
    pub bias: Option<&'a [f32]>,
    pub scale: &'a [f32],
    pub beta: Option<&'a [f32]>,
}

/// Outputs: `y` (`rows * n`), optional per-row `mean` / `inv_std` (`rows`), optional `sum`
/// (`rows * n`, the value that was normalised: `x + skip + bias`).
pub struct NormOutputs<'a> {
    pub y: &'a mut [f32],
    pub mean: Option<&'a mut [f32]>,
    pub inv_std: Option<&'a mut [f32]>,
    pub sum: Option<&'a mut [f32]>,
}

/// One row's inputs.
#[derive(Clone, Copy)]
pub(crate) struct Row<'a> {
    pub x: &'a [f32],
    pub skip: Option<&'a [f32]>,
    pub bias: Option<&'a [f32]>,
    pub scale: &'a [f32],
    pub beta: Option<&'a [f32]>,
}

/// The mean of a row as ORT takes it: the sum in f64 (exact for the row lengths of models, no
/// overflow for values near f32::MAX), rounded to f32 once.
pub(crate) fn row_mean(vals: &[f32]) -> f32 {
    // Eight independent partial sums: vectorisable, and still f64 throughout.
    let mut acc = [0.0f64; 8];
    let mut chunks = vals.chunks_exact(8);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f64::from(v);
        }
    }
    let tail: f64 = chunks.remainder().iter().map(|&v| f64::from(v)).sum();
    let wide = acc.iter().sum::<f64>() + tail;
    (wide / vals.len().max(1) as f64) as f32
}

/// Normalises one row into `y` (and `sum`); returns `(mean, inv_std)`.
type RowFn = fn(NormParams, Row<'_>, &mut [f32], Option<&mut [f32]>) -> (f32, f32);

struct Kernels {
    row: RowFn,
    name: &'static str,
}

const SCALAR: Kernels = Kernels {
    row: scalar::row,
    name: "scalar",
};
#[cfg(target_arch = "x86_64")]
const AVX2: Kernels = Kernels {
    row: x86::row_avx2,
    name: "avx2",
};
#[cfg(target_arch = "x86_64")]
const AVX512: Kernels = Kernels {
    row: x86::row_avx512,
    name: "avx512",
};

/// This family's kernel tables, one per ISA level.
static TABLES: crate::kernels::isa::IsaTables<Kernels> = crate::isa_tables!(SCALAR, AVX2, AVX512);

static DISPATCH: LazyLock<&'static Kernels> = LazyLock::new(|| TABLES.active());

/// Normalises every `n`-element row of `inp.x`. Returns the variant that ran.
pub fn norm_f32(
    p: NormParams,
    n: usize,
    inp: NormInputs<'_>,
    out: NormOutputs<'_>,
    par: &dyn Par,
) -> Result<&'static str, String> {
    run(*DISPATCH, p, n, inp, out, par)
}

/// [`norm_f32`] forced onto one ISA variant (tests). `Err` when the CPU lacks it.
pub fn norm_f32_with(
    isa: Isa,
    p: NormParams,
    n: usize,
    inp: NormInputs<'_>,
    out: NormOutputs<'_>,
    par: &dyn Par,
) -> Result<&'static str, String> {
    let k = TABLES.for_isa(isa)?;
    run(k, p, n, inp, out, par)
}

fn check(n: usize, inp: &NormInputs<'_>, out: &NormOutputs<'_>) -> Result<usize, String> {
    if n == 0 {
        return Err("normalised size is 0".into());
    }
    if !inp.x.len().is_multiple_of(n) {
        return Err(format!(
            "input of {} elements is not rows of {n}",
            inp.x.len()
        ));
    }
    let rows = inp.x.len() / n;
    let need = |what: &str, got: usize, want: usize| {
        if got == want {
            Ok(())
        } else {
            Err(format!("{what} has {got} elements, expected {want}"))
        }
    };
    need("scale", inp.scale.len(), n)?;
    if let Some(b) = inp.bias {
        need("bias", b.len(), n)?;
    }
    if let Some(b) = inp.beta {
        need("beta", b.len(), n)?;
    }
    if let Some(s) = inp.skip {
        let ok = !s.is_empty() && s.len().is_multiple_of(n) && rows.is_multiple_of(s.len() / n);
        if !(ok || rows == 0 && s.is_empty()) {
            return Err(format!(
                "skip of {} elements does not broadcast to {rows} rows of {n}",
                s.len()
            ));
        }
    }
    need("output", out.y.len(), rows * n)?;
    if let Some(m) = &out.mean {
        need("mean", m.len(), rows)?;
    }
    if let Some(m) = &out.inv_std {
        need("inv_std", m.len(), rows)?;
    }
    if let Some(m) = &out.sum {
        need("sum output", m.len(), rows * n)?;
    }
    Ok(rows)
}

/// One lane's share: consecutive rows starting at `first`.
struct Piece<'a> {
    first: usize,
    y: &'a mut [f32],
    mean: Option<&'a mut [f32]>,
    inv_std: Option<&'a mut [f32]>,
    sum: Option<&'a mut [f32]>,
}

fn split(s: Option<&mut [f32]>, len: usize) -> Vec<Option<&mut [f32]>> {
    match s {
        Some(s) => s.chunks_mut(len).map(Some).collect(),
        None => Vec::new(),
    }
}

fn run(
    k: &'static Kernels,
    p: NormParams,
    n: usize,
    inp: NormInputs<'_>,
    out: NormOutputs<'_>,
    par: &dyn Par,
) -> Result<&'static str, String> {
    let rows = check(n, &inp, &out)?;
    if rows == 0 {
        return Ok(k.name);
    }
    let skip_rows = inp.skip.map(|s| s.len() / n).unwrap_or(1);
    let do_piece = |pc: &mut Piece<'_>| {
        let count = pc.y.len() / n;
        for r in 0..count {
            let g = pc.first + r;
            let row = Row {
                x: &inp.x[g * n..(g + 1) * n],
                skip: inp.skip.map(|s| {
                    let sr = g % skip_rows;
                    &s[sr * n..(sr + 1) * n]
                }),
                bias: inp.bias,
                scale: inp.scale,
                beta: inp.beta,
            };
            let sum = pc.sum.as_deref_mut().map(|s| &mut s[r * n..(r + 1) * n]);
            let (m, inv) = (k.row)(p, row, &mut pc.y[r * n..(r + 1) * n], sum);
            if let Some(o) = pc.mean.as_deref_mut() {
                o[r] = m;
            }
            if let Some(o) = pc.inv_std.as_deref_mut() {
                o[r] = inv;
            }
        }
    };
    let per = if rows * n < PAR_MIN_ELEMS || rows < 2 || par.lanes() < 2 {
        rows
    } else {
        (CHUNK_ELEMS / n).max(1)
    };
    let mut means = split(out.mean, per).into_iter();
    let mut invs = split(out.inv_std, per).into_iter();
    let mut sums = split(out.sum, per * n).into_iter();
    let pieces: Vec<Mutex<Piece<'_>>> = out
        .y
        .chunks_mut(per * n)
        .enumerate()
        .map(|(i, y)| {
            Mutex::new(Piece {
                first: i * per,
                y,
                mean: means.next().flatten(),
                inv_std: invs.next().flatten(),
                sum: sums.next().flatten(),
            })
        })
        .collect();
    if pieces.len() == 1 {
        do_piece(&mut pieces[0].lock());
    } else {
        par.chunks(Dispatch::Task, pieces.len(), &|i| {
            do_piece(&mut pieces[i].lock())
        });
    }
    Ok(k.name)
}
