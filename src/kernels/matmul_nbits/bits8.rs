//! 8-bit MatMulNBits (`bits = 8`) as two 4-bit weights over the same A.
//!
//! An 8-bit code and its zero point split into nibbles, `q = 16 h + l` and `zp = 16 zh + zl`
//! (every nibble in 0..=15), so each dequantised weight is
//!
//! ```text
//! (q - zp) s = (h - zh) (16 s) + (l - zl) s
//! ```
//!
//! the sum of two 4-bit weights in ORT's own layout ([`split`]): the high nibbles with scales
//! `16 s`, the low ones with scales `s`. Both run through the 4-bit machinery (the packed
//! layout, the tile kernels, the lanes), so an 8-bit node gets everything a 4-bit one has:
//!
//! * at accuracy level 4 A is quantised per block to int8 once, and each half's integer block
//!   dot products are exact; `16 sa s H + sa s L` is the 8-bit dot product `sa s (q - zp)` up to
//!   the f32 rounding of the two terms (ORT 1.31 quantises A for 8-bit weights as for 4-bit
//!   ones: probed, its answers are the per-block int8 reference to ~3e-7 relative L2);
//! * at levels 0 / 1 each half is an f32 product and the two are added;
//! * a token still reads about one byte per weight (half a byte per code in each half), plus
//!   two scales per block where ORT's layout has one.
//!
//! A node without zero points implies 128 = 16 * 8 + 0: the high half gets the 4-bit default
//! (8, no zero-point input) and the low half explicit zeros.
//!
//! [`matmul_bits8`] runs both halves as one pair call (`driver::run_pair`, the epilogue
//! `hi + lo`: one dispatch, A prepared once, neither product written), then adds the bias.
//! Rows the pair path declines (the AMX GEMM's row counts, values of A that are not finite or
//! large enough to overflow) take two separate 4-bit calls added the same way, whose answers
//! are the pair's bit for bit. Over either, `driver::fix_rows` gives the rows with NaN,
//! infinities or an overflow ORT's answers, exactly as for a 4-bit weight: an infinite `a[k]`
//! times a weight of the sum has the sign of `q - zp` and is NaN exactly where `q == zp`, since
//! `|16 (h - zh)| > |l - zl|` whenever `h != zh`.
//!
//! Scales large enough that `(q - zp) s` overflows f32 (`reference::hostile_scales`) are never
//! split: the node computes those by the definition taken literally.

use super::dispatch::Kernels;
use super::driver::{self, Source};
use super::pack::PackedNBits;
use super::params::{NBitsParams, NBitsWeight};
use super::reference::hostile_scales;
use super::route::{Bits8Route, NBitsRoute};
use super::MR;
use crate::memory::scratch::{scratch_error, try_with_scratch_f32};
use crate::runtime::par::Par;

/// An 8-bit weight split into its two 4-bit halves, each in ORT's 4-bit layout ([`split`]).
/// The low half's scales are the original ones, borrowed.
pub struct SplitBits8<'a> {
    hi_p: NBitsParams,
    lo_p: NBitsParams,
    hi_b: Vec<u8>,
    lo_b: Vec<u8>,
    hi_scales: Vec<f32>,
    lo_scales: &'a [f32],
    /// The high nibbles of the zero points (`None`: none given, the 4-bit default 8 is 128's).
    hi_zp: Option<Vec<u8>>,
    lo_zp: Vec<u8>,
}

impl SplitBits8<'_> {
    /// The high half: codes `q >> 4`, scales `16 s`, zero points `zp >> 4`.
    pub fn hi(&self) -> NBitsWeight<'_> {
        NBitsWeight {
            b: &self.hi_b,
            scales: &self.hi_scales,
            zero_points: self.hi_zp.as_deref(),
            p: &self.hi_p,
        }
    }

    /// The low half: codes `q & 15`, scales `s`, zero points `zp & 15`.
    pub fn lo(&self) -> NBitsWeight<'_> {
        NBitsWeight {
            b: &self.lo_b,
            scales: self.lo_scales,
            zero_points: Some(&self.lo_zp),
            p: &self.lo_p,
        }
    }
}

/// A vector of `len` copies of `v`, or an error naming `what` when it cannot be allocated.
fn try_filled<T: Clone>(len: usize, v: T, what: &str) -> Result<Vec<T>, String> {
    let mut out = Vec::new();
    out.try_reserve_exact(len).map_err(|_| {
        format!(
            "MatMulNBits: cannot allocate {len} elements for the 8-bit weight's {what} (out of \
             memory)"
        )
    })?;
    out.resize(len, v);
    Ok(out)
}

/// Nibble `i` (0: low) of each 8-bit zero point packed two per byte, per column, as the 4-bit
/// layout holds zero points (`ceil(k_blocks / 2)` bytes a column).
fn zero_point_nibbles(
    zp: &[u8],
    p8: &NBitsParams,
    p4: &NBitsParams,
    high: bool,
) -> Result<Vec<u8>, String> {
    let (kb, row4) = (p8.k_blocks(), p4.zp_row_bytes());
    let mut out = try_filled(p8.n.saturating_mul(row4), 0u8, "zero points")?;
    let nib = |z: u8| if high { z >> 4 } else { z & 0x0F };
    for (src, dst) in zp.chunks_exact(kb).zip(out.chunks_exact_mut(row4)) {
        for (j, d) in dst.iter_mut().enumerate() {
            let lo = nib(src[2 * j]);
            let hi = src.get(2 * j + 1).map_or(0, |&z| nib(z));
            *d = lo | (hi << 4);
        }
    }
    Ok(out)
}

/// Splits an 8-bit weight (`w.p.bits == 8`, sizes checked) into its two 4-bit halves (see the
/// module documentation). `Err` when the scales are hostile (`16 s` could overflow; the caller
/// computes those literally), the weight is not 8-bit, or a buffer cannot be allocated.
pub fn split<'a>(w: &NBitsWeight<'a>) -> Result<SplitBits8<'a>, String> {
    let p = w.p;
    if p.bits != 8 {
        return Err(format!(
            "MatMulNBits: split of an 8-bit weight given bits={}",
            p.bits
        ));
    }
    w.check_sizes(None)?;
    if hostile_scales(w.scales, p) {
        return Err("MatMulNBits: scales too large to split an 8-bit weight".into());
    }
    let half = |has_zero_points| NBitsParams {
        bits: 4,
        has_zero_points,
        ..*p
    };
    let (hi_p, lo_p) = (half(p.has_zero_points), half(true));
    // Block sizes are even: two consecutive codes always share one byte of a 4-bit blob.
    let len = w.b.len() / 2;
    let mut hi_b = try_filled(len, 0u8, "high codes")?;
    let mut lo_b = try_filled(len, 0u8, "low codes")?;
    for ((q, h), l) in w.b.chunks_exact(2).zip(&mut hi_b).zip(&mut lo_b) {
        *h = (q[0] >> 4) | (q[1] & 0xF0);
        *l = (q[0] & 0x0F) | (q[1] << 4);
    }
    let mut hi_scales = try_filled(w.scales.len(), 0f32, "scales")?;
    for (d, &s) in hi_scales.iter_mut().zip(w.scales) {
        // A power of two: exact (not hostile, so finite).
        *d = 16.0 * s;
    }
    let (hi_zp, lo_zp) = match w.zero_points {
        Some(z) => (
            Some(zero_point_nibbles(z, p, &hi_p, true)?),
            zero_point_nibbles(z, p, &lo_p, false)?,
        ),
        None => (
            None,
            try_filled(p.n.saturating_mul(lo_p.zp_row_bytes()), 0u8, "zero points")?,
        ),
    };
    Ok(SplitBits8 {
        hi_p,
        lo_p,
        hi_b,
        lo_b,
        hi_scales,
        lo_scales: w.scales,
        hi_zp,
        lo_zp,
    })
}

/// The two halves an 8-bit call reads: both packed (the pair path), or both in ORT's layout
/// (packing declined).
#[derive(Clone, Copy)]
pub enum Halves<'a> {
    Packed(&'a PackedNBits, &'a PackedNBits),
    Unpacked(NBitsWeight<'a>, NBitsWeight<'a>),
}

impl<'a> Halves<'a> {
    fn sources(self) -> (Source<'a>, Source<'a>) {
        match self {
            Halves::Packed(h, l) => (Source::Packed(h), Source::Packed(l)),
            Halves::Unpacked(h, l) => (Source::Unpacked(h), Source::Unpacked(l)),
        }
    }
}

/// Floats of the second product the separate calls hold at a time ([`fast_sum`]): rows are
/// taken in blocks of about this many outputs (at least [`MR`] rows).
const SUM_SCRATCH_FLOATS: usize = 1 << 20;

/// `out[i] = hi[i] + lo[i]`: the pair call's epilogue, and the separate calls' sum.
fn add(hi: &[f32], lo: &[f32], out: &mut [f32]) {
    for ((o, &h), &l) in out.iter_mut().zip(hi).zip(lo) {
        *o = h + l;
    }
}

fn add_bias(out: &mut [f32], bias: Option<&[f32]>) {
    if let Some(b) = bias {
        for row in out.chunks_exact_mut(b.len().max(1)) {
            for (o, &v) in row.iter_mut().zip(b) {
                *o += v;
            }
        }
    }
}

/// The fast path over `m` rows: `hi + lo` (the pair call, else two separate calls summed a
/// block of rows at a time), then the bias. The same values whichever ran.
#[allow(clippy::too_many_arguments)]
fn fast_sum(
    kernels: &Kernels,
    a: &[f32],
    m: usize,
    halves: Halves<'_>,
    bias: Option<&[f32]>,
    out: &mut [f32],
    par: &dyn Par,
) -> Result<NBitsRoute, String> {
    let (hi, lo) = halves.sources();
    let p = hi.params();
    if m == 0 {
        return Ok(kernels.route(p.accuracy_level, 0));
    }
    if let Halves::Packed(h, l) = halves {
        if let Some(route) = driver::run_pair(kernels, a, m, h, l, &add, out, par)? {
            add_bias(&mut out[..m * p.n], bias);
            return Ok(route);
        }
    }
    let rows = (SUM_SCRATCH_FLOATS / p.n.max(1)).max(MR);
    let mut route = kernels.route(p.accuracy_level, m);
    for r0 in (0..m).step_by(rows) {
        let mr = rows.min(m - r0);
        let a_r = &a[r0 * p.k..(r0 + mr) * p.k];
        let o = &mut out[r0 * p.n..(r0 + mr) * p.n];
        route = driver::run_fast(kernels, a_r, mr, hi, None, o, par)?;
        let len = mr * p.n;
        try_with_scratch_f32(len, |t| -> Result<(), String> {
            driver::run_fast(kernels, a_r, mr, lo, None, t, par)?;
            for (o, &t) in o.iter_mut().zip(t.iter()) {
                // `add` as the pair's epilogue computes it.
                *o += t;
            }
            Ok(())
        })
        .ok_or_else(|| scratch_error(len.saturating_mul(4)))??;
        add_bias(o, bias);
    }
    Ok(route)
}

/// Y = A W (+ bias) for an 8-bit weight given as its two halves ([`split`]), with the
/// process's kernels (see the module documentation); `Err` when the halves do not belong
/// together or a scratch buffer cannot be allocated. `a` holds `m` rows of K, `out` `m` rows
/// of N.
pub fn matmul_bits8(
    a: &[f32],
    m: usize,
    halves: Halves<'_>,
    bias: Option<&[f32]>,
    out: &mut [f32],
    par: &dyn Par,
) -> Result<Bits8Route, String> {
    matmul_bits8_with(Kernels::active(), a, m, halves, bias, out, par)
}

/// [`matmul_bits8`] with an explicit kernel set.
pub fn matmul_bits8_with(
    kernels: &Kernels,
    a: &[f32],
    m: usize,
    halves: Halves<'_>,
    bias: Option<&[f32]>,
    out: &mut [f32],
    par: &dyn Par,
) -> Result<Bits8Route, String> {
    let (hi, lo) = halves.sources();
    let (p, q) = (hi.params(), lo.params());
    if (p.k, p.n, p.block_size, p.accuracy_level, p.bits, q.bits)
        != (q.k, q.n, q.block_size, q.accuracy_level, 4, 4)
    {
        return Err(format!(
            "MatMulNBits: the halves of an 8-bit weight differ (K={} N={} block {} level {} \
             against K={} N={} block {} level {})",
            p.k, p.n, p.block_size, p.accuracy_level, q.k, q.n, q.block_size, q.accuracy_level
        ));
    }
    assert!(
        Some(a.len()) == m.checked_mul(p.k) && Some(out.len()) == m.checked_mul(p.n),
        "MatMulNBits 8-bit: A has {} elements (M={m} x K={}), output {} (N={})",
        a.len(),
        p.k,
        out.len(),
        p.n
    );
    if let Some(b) = bias {
        assert_eq!(
            b.len(),
            p.n,
            "MatMulNBits 8-bit: bias has {} values",
            b.len()
        );
    }
    let scale_max = match (hi.scale_max(), lo.scale_max()) {
        (Some(x), Some(y)) => Some(x.max(y)),
        _ => None,
    };
    let fast = |rows: &[f32], mm: usize, with_bias: bool, o: &mut [f32]| {
        fast_sum(
            kernels,
            rows,
            mm,
            halves,
            bias.filter(|_| with_bias),
            o,
            par,
        )
    };
    driver::fix_rows(kernels, a, m, &p, scale_max, bias, out, &fast).map(Bits8Route)
}
