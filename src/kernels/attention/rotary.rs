//! Rotary position embedding of a whole tensor (`com.microsoft.RotaryEmbedding`), f32.
//!
//! Input and output are `[B, S, N * H]` (token-major) or `[B, N, S, H]` (head-major). Each head
//! row of `H` elements at (batch b, position s) is rotated with cache row `p = position(b, s)`
//! of `cos`/`sin` (`[max_pos, rot / 2]`): rotate-half pairs `(i, i + rot/2)` or interleaved pairs
//! `(2i, 2i + 1)` over the first `rot` elements, `out = x1 * cos - x2 * sin`,
//! `x2 * cos + x1 * sin`; elements from `rot` on are copied unchanged.

use crate::kernels::isa::Isa;
use crate::runtime::par::Par;

/// Rows of at least this many elements in total are split over lanes.
pub const PAR_MIN_ELEMS: usize = 1 << 14;

/// Where each token's cache row comes from.
#[derive(Clone, Copy, Debug)]
pub enum Positions<'a> {
    /// Position `base + s` for every batch (ORT's one-element `position_ids`).
    Offset(i64),
    /// One position per token, `[B, S]`.
    PerToken(&'a [i64]),
}

/// Shape and options of one rotary call.
#[derive(Clone, Copy, Debug)]
pub struct RotaryShape {
    pub batch: usize,
    pub seq: usize,
    pub heads: usize,
    pub head: usize,
    /// Rotated elements per head row (even, `<= head`); the cache rows hold `rot / 2`.
    pub rot: usize,
    /// `[B, N, S, H]` when true, `[B, S, N * H]` otherwise.
    pub head_major: bool,
    pub interleaved: bool,
}

/// The cache row of token `(b, s)`, checked against the `rows` the caches hold.
pub(crate) fn position(
    pos: Positions<'_>,
    b: usize,
    s: usize,
    seq: usize,
    rows: usize,
) -> Result<usize, String> {
    let p = match pos {
        Positions::Offset(base) => base.checked_add(s as i64),
        Positions::PerToken(ids) => ids.get(b * seq + s).copied(),
    };
    match p {
        Some(p) if p >= 0 && (p as u64) < rows as u64 => Ok(p as usize),
        _ => Err(format!(
            "position {p:?} of batch {b} token {s} is outside the cos/sin cache ({rows} rows)"
        )),
    }
}

/// The tensors of one rotary call: positions, caches `[max_pos, rot / 2]` and the input.
#[derive(Clone, Copy, Debug)]
pub struct RotaryInputs<'a> {
    pub pos: Positions<'a>,
    pub cos: &'a [f32],
    pub sin: &'a [f32],
    pub x: &'a [f32],
}

/// Rotary embedding of `x` into `out` (same shape). Returns the variant that ran.
pub fn rotary_f32(
    sh: &RotaryShape,
    inp: &RotaryInputs<'_>,
    out: &mut [f32],
    par: &dyn Par,
) -> Result<&'static str, String> {
    run(None, sh, inp, out, par)
}

/// [`rotary_f32`] forced onto one ISA variant (tests). `Err` when the CPU lacks it.
pub fn rotary_f32_with(
    isa: Isa,
    sh: &RotaryShape,
    inp: &RotaryInputs<'_>,
    out: &mut [f32],
    par: &dyn Par,
) -> Result<&'static str, String> {
    run(Some(isa), sh, inp, out, par)
}

fn run(
    isa: Option<Isa>,
    sh: &RotaryShape,
    inp: &RotaryInputs<'_>,
    out: &mut [f32],
    par: &dyn Par,
) -> Result<&'static str, String> {
    let RotaryInputs { pos, cos, sin, x } = *inp;
    let k = super::kernels(isa)?;
    let RotaryShape {
        batch,
        seq,
        heads,
        head,
        rot,
        ..
    } = *sh;
    if rot == 0 || rot % 2 != 0 || rot > head {
        return Err(format!(
            "rotary dimension {rot} must be even, positive and <= head size {head}"
        ));
    }
    let half = rot / 2;
    if cos.len() != sin.len() || !cos.len().is_multiple_of(half) {
        return Err(format!(
            "cos/sin caches ({} and {} elements) are not [max_pos, {half}]",
            cos.len(),
            sin.len()
        ));
    }
    let rows = cos.len() / half;
    let n = [batch, seq, heads, head]
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or("rotary: shape overflows")?;
    if x.len() != n || out.len() != n {
        return Err(format!(
            "rotary: buffers x={} out={} do not match {n} elements",
            x.len(),
            out.len()
        ));
    }
    if let Positions::PerToken(ids) = pos {
        if ids.len() != batch * seq {
            return Err(format!(
                "position_ids has {} elements, expected {}",
                ids.len(),
                batch * seq
            ));
        }
    }
    // Check every position before writing anything.
    for b in 0..batch {
        for s in 0..seq {
            position(pos, b, s, seq, rows)?;
        }
    }
    let f = |first: usize, o: &mut [f32]| {
        for (i, orow) in o.chunks_exact_mut(head).enumerate() {
            let r = first + i;
            let (b, s) = if sh.head_major {
                (r / (heads * seq), r % seq)
            } else {
                (r / (seq * heads), (r / heads) % seq)
            };
            // Checked above.
            let p = position(pos, b, s, seq, rows).unwrap_or(0);
            let c = &cos[p * half..(p + 1) * half];
            let sn = &sin[p * half..(p + 1) * half];
            (k.rope)(&x[r * head..(r + 1) * head], c, sn, sh.interleaved, orow);
        }
    };
    super::over_rows(out, head, n >= PAR_MIN_ELEMS, false, par, &f);
    Ok(k.name)
}
