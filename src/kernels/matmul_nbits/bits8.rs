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
//!
//! Memory: packing splits one half at a time ([`split_half`]); without packed halves (the
//! weight cache declined, or B fed at run time) [`matmul_bits8_unpacked`] splits a run of
//! columns at a time, so neither ever holds a second copy of the whole weight.

use super::dispatch::Kernels;
use super::driver::{self, Source};
use super::pack::{PackedNBits, NR};
use super::params::{NBitsParams, NBitsWeight};
use super::reference::hostile_scales;
use super::route::{Bits8Route, NBitsRoute};
use super::MR;
use crate::memory::scratch::{scratch_error, try_with_scratch_f32};
use crate::runtime::par::Par;

/// One 4-bit half of an 8-bit weight, in ORT's 4-bit layout ([`split_half`]). The low half's
/// scales are the original ones, borrowed.
pub struct HalfWeight<'a> {
    p: NBitsParams,
    b: Vec<u8>,
    scales: std::borrow::Cow<'a, [f32]>,
    /// `None` only for the high half of a weight without zero points (the 4-bit default 8 is
    /// 128's high nibble).
    zp: Option<Vec<u8>>,
}

impl HalfWeight<'_> {
    /// The half as a 4-bit weight.
    pub fn weight(&self) -> NBitsWeight<'_> {
        NBitsWeight {
            b: &self.b,
            scales: &self.scales,
            zero_points: self.zp.as_deref(),
            p: &self.p,
        }
    }
}

/// An 8-bit weight's two halves ([`split`]).
pub struct SplitBits8<'a> {
    hi: HalfWeight<'a>,
    lo: HalfWeight<'a>,
}

impl SplitBits8<'_> {
    /// The high half: codes `q >> 4`, scales `16 s`, zero points `zp >> 4`.
    pub fn hi(&self) -> NBitsWeight<'_> {
        self.hi.weight()
    }

    /// The low half: codes `q & 15`, scales `s`, zero points `zp & 15`.
    pub fn lo(&self) -> NBitsWeight<'_> {
        self.lo.weight()
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

/// One half of an 8-bit weight (`w.p.bits == 8`, sizes checked): the high half (`high`: codes
/// `q >> 4`, scales `16 s`, zero points `zp >> 4`) or the low one (`q & 15`, `s`, `zp & 15`;
/// explicit zeros without zero points). See the module documentation. `Err` when the scales are
/// hostile (`16 s` could overflow; the caller computes those literally), the weight is not
/// 8-bit, or a buffer cannot be allocated. Only one half's buffers are made: a caller that
/// packs them one at a time holds one half's worth at a time.
pub fn split_half<'a>(w: &NBitsWeight<'a>, high: bool) -> Result<HalfWeight<'a>, String> {
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
    let hp = NBitsParams {
        bits: 4,
        has_zero_points: p.has_zero_points || !high,
        ..*p
    };
    // Block sizes are even: two consecutive codes always share one byte of a 4-bit blob.
    let mut b = try_filled(w.b.len() / 2, 0u8, "codes")?;
    for (q, d) in w.b.chunks_exact(2).zip(&mut b) {
        *d = if high {
            (q[0] >> 4) | (q[1] & 0xF0)
        } else {
            (q[0] & 0x0F) | (q[1] << 4)
        };
    }
    let scales = if high {
        let mut v = try_filled(w.scales.len(), 0f32, "scales")?;
        for (d, &s) in v.iter_mut().zip(w.scales) {
            // A power of two: exact (not hostile, so finite).
            *d = 16.0 * s;
        }
        std::borrow::Cow::Owned(v)
    } else {
        std::borrow::Cow::Borrowed(w.scales)
    };
    let zp = match w.zero_points {
        Some(z) => Some(zero_point_nibbles(z, p, &hp, high)?),
        None if high => None,
        None => Some(try_filled(
            p.n.saturating_mul(hp.zp_row_bytes()),
            0u8,
            "zero points",
        )?),
    };
    Ok(HalfWeight {
        p: hp,
        b,
        scales,
        zp,
    })
}

/// Both halves of an 8-bit weight ([`split_half`]).
pub fn split<'a>(w: &NBitsWeight<'a>) -> Result<SplitBits8<'a>, String> {
    Ok(SplitBits8 {
        hi: split_half(w, true)?,
        lo: split_half(w, false)?,
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
/// taken in blocks of about this many outputs, but at least [`SUM_MIN_ROWS`].
const SUM_SCRATCH_FLOATS: usize = 1 << 20;

/// The fewest rows a block of the separate calls takes: a wide weight (an lm_head over a
/// 152k vocabulary: 39 MB of scratch at 64 rows) is then not streamed once per few rows, and
/// on AMX hosts, where every call from 32 rows takes this path (the AMX GEMM has no pair
/// path), each block is still the AMX GEMM's. A multiple of `MR` and of the AMX row tile.
const SUM_MIN_ROWS: usize = 64;

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
    // Whole row blocks of the tile kernels (`MR`), as one call over all rows would group them.
    let rows = (SUM_SCRATCH_FLOATS / p.n.max(1) / MR * MR).max(SUM_MIN_ROWS);
    let mut route = None;
    for r0 in (0..m).step_by(rows) {
        let mr = rows.min(m - r0);
        let a_r = &a[r0 * p.k..(r0 + mr) * p.k];
        let o = &mut out[r0 * p.n..(r0 + mr) * p.n];
        // The ledger names the first block's route (the call's, unless M is split).
        let r = driver::run_fast(kernels, a_r, mr, hi, None, o, par)?;
        route.get_or_insert(r);
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
    Ok(route.unwrap_or_else(|| kernels.route(p.accuracy_level, m)))
}

/// Panics unless `a` holds `m` rows of K and `out` `m` rows of N (the callers' contract).
fn assert_call_shape(a: &[f32], m: usize, out: &[f32], p: &NBitsParams) {
    assert!(
        Some(a.len()) == m.checked_mul(p.k) && Some(out.len()) == m.checked_mul(p.n),
        "MatMulNBits 8-bit: A has {} elements (M={m} x K={}), output {} (N={})",
        a.len(),
        p.k,
        out.len(),
        p.n
    );
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
    assert_call_shape(a, m, out, &p);
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

/// Bytes of an 8-bit weight's codes [`matmul_bits8_unpacked`] splits at a time.
const UNPACKED_CHUNK_BYTES: usize = 1 << 20;

/// Y = A W (+ bias) straight from an 8-bit weight in ORT's layout (`w.p.bits == 8`), with the
/// process's kernels: the path when no packed halves are cached. The weight is split a run of
/// columns at a time (about [`UNPACKED_CHUNK_BYTES`] of codes, whole column groups; B's columns
/// are contiguous in ORT's layout), so the call holds a few MiB beyond its output whatever the
/// weight's size; each run is the two halves' separate calls, whose values are the packed pair
/// call's bit for bit. `Err` when the weight cannot be split (hostile scales, sizes) or a buffer
/// cannot be allocated.
pub fn matmul_bits8_unpacked(
    a: &[f32],
    m: usize,
    w: &NBitsWeight<'_>,
    bias: Option<&[f32]>,
    out: &mut [f32],
    par: &dyn Par,
) -> Result<Bits8Route, String> {
    matmul_bits8_unpacked_with(Kernels::active(), a, m, w, bias, out, par)
}

/// [`matmul_bits8_unpacked`] with an explicit kernel set.
pub fn matmul_bits8_unpacked_with(
    kernels: &Kernels,
    a: &[f32],
    m: usize,
    w: &NBitsWeight<'_>,
    bias: Option<&[f32]>,
    out: &mut [f32],
    par: &dyn Par,
) -> Result<Bits8Route, String> {
    let p = *w.p;
    w.check_sizes(bias.map(<[f32]>::len))?;
    assert_call_shape(a, m, out, &p);
    let (kb, col_bytes, zrow) = (
        p.k_blocks(),
        p.k_blocks() * p.blob_bytes(),
        p.zp_row_bytes(),
    );
    let cols = (UNPACKED_CHUNK_BYTES / col_bytes.max(1) / NR * NR).max(NR);
    let mut route = Bits8Route(kernels.route(p.accuracy_level, m));
    let mut tmp: Vec<f32> = Vec::new();
    for c0 in (0..p.n).step_by(cols) {
        let nc = cols.min(p.n - c0);
        let pc = NBitsParams { n: nc, ..p };
        let sub = NBitsWeight {
            b: &w.b[c0 * col_bytes..(c0 + nc) * col_bytes],
            scales: &w.scales[c0 * kb..(c0 + nc) * kb],
            zero_points: w.zero_points.map(|z| &z[c0 * zrow..(c0 + nc) * zrow]),
            p: &pc,
        };
        let halves = split(&sub)?;
        let len = m * nc;
        if tmp.len() < len {
            tmp.try_reserve_exact(len - tmp.len()).map_err(|_| {
                format!("MatMulNBits: cannot allocate {len} outputs (out of memory)")
            })?;
            tmp.resize(len, 0.0);
        }
        let y = &mut tmp[..len];
        let hb = bias.map(|b| &b[c0..c0 + nc]);
        let two = Halves::Unpacked(halves.hi(), halves.lo());
        route = matmul_bits8_with(kernels, a, m, two, hb, y, par)?;
        for (r, row) in y.chunks_exact(nc.max(1)).enumerate() {
            out[r * p.n + c0..r * p.n + c0 + nc].copy_from_slice(row);
        }
    }
    Ok(route)
}
