//! Grouped-query attention over a quantized KV cache (`com.microsoft.GroupQueryAttention` with
//! `k_quant_type` = `v_quant_type` = `PER_TENSOR` or `PER_CHANNEL` and `kv_cache_bit_width` 8 or
//! 4), with ORT 1.31's CPU semantics (probed on the wheel; `e2e/python/gqa_quant_models.py`):
//!
//! - past / present are `[B, Nkv, L, H]` int8 codes (8 bits), or `[B, Nkv, L, H / 2]` bytes of
//!   two 4-bit codes (element `2i` in the low nibble, `2i + 1` in the high one, each stored as
//!   `code + 8`); a code's value is `code * scale`, the scale one for the tensor (`k_scale` /
//!   `v_scale` of one element) or one per channel (`Nkv * H` elements, channel `n * H + c`);
//! - the new keys (rotated) and values are quantized as `clamp(round_half_even(x * inv), lo,
//!   hi)` in f32 with `inv = 1 / scale`, or 1 where the scale is +-0; a NaN product becomes `hi`
//!   (127, or 7 at 4 bits; `lo` is -128 or -8); the rows of present after the new ones are zero
//!   bytes, as in ORT;
//! - the attention is the f32 one ([`super::gqa`]: causal, `seqlens_k`, window, softcap, sinks)
//!   over the dequantized cache, the new rows included as quantized.
//!
//! The cache is never dequantized whole: the softmax scale and the key scales are folded into
//! each query row (`q[c] * scale * k_scale[c]`), and each block of [`BLOCK_ROWS`] rows of codes
//! (4-bit rows unpacked to int8 first) is widened to f32 once for the whole group in the unit's
//! L1 scratch; the float32 kernels then take the scores of every query head of the group over it
//! (`Kernels::scores`) and the probabilities times the value rows (`Kernels::rows_group`), and the
//! value scales multiply each output element. (Kernels over the int8 codes themselves widened the
//! codes again for every query head of the group: measured the same or 3% slower a token at past
//! 4096 on the Qwen2-0.5B shape, `rcpu-bench llm --gen llm:preset=qwen2-0.5b,ctx=8192,kvq=int8c
//! --mode decode --past 4096 --null-plugin`.)
//!
//! Execution: phase 1 writes present (one (batch, kv head) block per unit: past codes copied,
//! new rows quantized, zeros after them; with a shared buffer only the new rows); phase 2 runs
//! one unit per (batch, position, kv head), the group's query heads together over each block of
//! key and value codes.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::kernels::fp_env::FlushSubnormals;
use crate::kernels::isa::Isa;
use crate::kernels::softmax;
use crate::memory::scratch::{try_with_scratch_f32, try_with_scratch_u8};
use crate::memory::try_vec;
use crate::runtime::par::Par;

use super::gqa::{
    check_lens, checked_product, group_size, past_rows, rotary_plan, sink_logits, size_overflow,
    softmax_rows, BufferLens, GqaInputs, GqaShape, Rows, Sizes,
};

/// Key / value rows unpacked (4 bits) and scored at a time.
pub const BLOCK_ROWS: usize = 64;

/// How the cache is quantized: the bit width (8: int8 codes, 4: two codes a byte), the scale
/// granularity and the scale tensors' elements.
#[derive(Clone, Copy, Debug)]
pub struct KvQuant<'a> {
    pub bits: u32,
    /// `PER_CHANNEL` (`Nkv * H` scales), otherwise `PER_TENSOR` (one).
    pub per_channel: bool,
    pub k_scale: &'a [f32],
    pub v_scale: &'a [f32],
}

impl KvQuant<'_> {
    /// Code range `(lo, hi)`.
    fn range(&self) -> (f32, f32) {
        if self.bits == 4 {
            (-8.0, 7.0)
        } else {
            (-128.0, 127.0)
        }
    }
}

/// Outputs of one call over a quantized cache.
pub struct QuantOutputs<'a> {
    pub out: &'a mut [f32],
    /// Present codes (bytes; int8 codes or pairs of 4-bit codes).
    pub present_k: &'a mut [u8],
    pub present_v: &'a mut [u8],
    /// Present is the past buffer (it already holds the past rows).
    pub shared: bool,
}

/// ORT's multiplier for quantizing with `scale`: `1 / scale`, or 1 for a scale of +-0.
pub fn inverse_scale(scale: f32) -> f32 {
    if scale == 0.0 {
        1.0
    } else {
        1.0 / scale
    }
}

/// One code of `x` with multiplier `inv` in `[lo, hi]` (ORT's rounding: half to even; NaN: `hi`).
#[inline]
pub fn quantize(x: f32, inv: f32, lo: f32, hi: f32) -> i32 {
    let v = (x * inv).round_ties_even();
    if v.is_nan() {
        hi as i32
    } else {
        v.clamp(lo, hi) as i32
    }
}

/// Writes the codes of row `x` (multipliers `inv`, one per element) into `dst` (`x.len()` bytes
/// at 8 bits, half that at 4).
fn quantize_row(x: &[f32], inv: &[f32], q: &KvQuant<'_>, dst: &mut [u8]) {
    let (lo, hi) = q.range();
    if q.bits == 4 {
        for ((d, xs), is) in dst
            .iter_mut()
            .zip(x.chunks_exact(2))
            .zip(inv.chunks_exact(2))
        {
            let a = quantize(xs[0], is[0], lo, hi) + 8;
            let b = quantize(xs[1], is[1], lo, hi) + 8;
            *d = (a | (b << 4)) as u8;
        }
    } else {
        for ((d, &x), &i) in dst.iter_mut().zip(x).zip(inv) {
            *d = quantize(x, i, lo, hi) as i8 as u8;
        }
    }
}

/// 4-bit rows (`src`, two codes a byte) into int8 codes (`dst`, twice the bytes).
fn unpack4(src: &[u8], dst: &mut [u8]) {
    for (d, &b) in dst.chunks_exact_mut(2).zip(src) {
        d[0] = ((b & 15) as i8 - 8) as u8;
        d[1] = ((b >> 4) as i8 - 8) as u8;
    }
}

/// The kernel variant's ledger name.
fn variant(isa: Isa, bits: u32) -> &'static str {
    match (isa, bits) {
        (Isa::Scalar, 4) => "scalar-kv4",
        (Isa::Scalar, _) => "scalar-kv8",
        (Isa::Avx2, 4) => "avx2-kv4",
        (Isa::Avx2, _) => "avx2-kv8",
        (_, 4) => "avx512-kv4",
        (_, _) => "avx512-kv8",
    }
}

/// A scale tensor expanded to one scale per channel (`Nkv * H`), after checking its length.
fn per_channel(
    what: &str,
    scales: &[f32],
    q: &KvQuant<'_>,
    kv_heads: usize,
    head: usize,
) -> Result<Vec<f32>, String> {
    let n = kv_heads
        .checked_mul(head)
        .ok_or_else(|| format!("kv_num_heads {kv_heads} * head size {head} overflows"))?;
    let want = if q.per_channel { n } else { 1 };
    if scales.len() != want {
        return Err(format!(
            "{what} has {} elements, expected {want} ({})",
            scales.len(),
            if q.per_channel {
                "PER_CHANNEL: kv_num_heads * head_size"
            } else {
                "PER_TENSOR"
            }
        ));
    }
    // ORT's output over non-finite scales depends on how its softmax treats the NaN scores they
    // make (some rows zero, some NaN): not reproduced, refused.
    if let Some((i, v)) = scales.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(format!(
            "{what}[{i}] = {v}: the scales of a quantized KV cache must be finite"
        ));
    }
    if q.per_channel {
        Ok(crate::memory::try_copy(scales)?)
    } else {
        Ok(try_vec(n, scales[0])?)
    }
}

/// Runs one GroupQueryAttention call over a quantized KV cache on one ISA variant (`None`: the
/// process's level). `inp.past` is unused: the past codes are `past` (`None` without past or
/// when present shares it). Returns the variant that ran.
pub fn gqa_quant(
    isa: Option<Isa>,
    sh: &GqaShape,
    q: &KvQuant<'_>,
    inp: &GqaInputs<'_>,
    past: Option<(&[u8], &[u8])>,
    o: QuantOutputs<'_>,
    par: &dyn Par,
) -> Result<&'static str, String> {
    let k = super::kernels(isa)?;
    let softmax_row = softmax::row_kernel(k.isa)?;
    let GqaShape {
        seq,
        kv_heads,
        head,
        past_len,
        present_len,
        ..
    } = *sh;
    let group = group_size(sh)?;
    let row_bytes = match q.bits {
        8 => head,
        4 if head.is_multiple_of(2) => head / 2,
        4 => {
            return Err(format!(
                "head size {head} is odd: a 4-bit KV cache packs pairs"
            ))
        }
        b => return Err(format!("kv_cache_bit_width {b} is not 4 or 8")),
    };
    let lens = BufferLens {
        q: inp.q.len(),
        kv: inp.kv.map(|(k, v)| (k.len(), v.len())),
        out: o.out.len(),
        present: (o.present_k.len(), o.present_v.len()),
        past: past.map(|(k, v)| (k.len(), v.len())),
    };
    let Sizes {
        tokens,
        out_elems,
        cache,
    } = check_lens(sh, row_bytes, &lens)?;
    let overflow = || size_overflow(sh);
    let mul = checked_product;
    let ks = per_channel("k_scale", q.k_scale, q, kv_heads, head)?;
    let vs = per_channel("v_scale", q.v_scale, q, kv_heads, head)?;
    let past_r = past_rows(sh, inp.seqlens_k, o.shared)?;
    let sinks = sink_logits(sh, inp.sinks)?;
    let sinks = sinks.logits();
    let rot = rotary_plan(sh, inp, &past_r)?;
    if tokens == 0 {
        return Ok(variant(k.isa, q.bits));
    }
    // The multipliers of the new rows' codes, and the query fold (softmax scale times the key
    // scale). Made here, on the calling thread, outside any flush-to-zero region: a subnormal
    // scale is not zero for ORT (its inverse overflows to infinity).
    let inv_k: Vec<f32> = ks.iter().map(|&s| inverse_scale(s)).collect();
    let inv_v: Vec<f32> = vs.iter().map(|&s| inverse_scale(s)).collect();
    let fold: Vec<f32> = ks.iter().map(|&s| sh.scale * s).collect();
    let rows = Rows::new(inp, k, rot, sh);
    let unit = mul(&[present_len, row_bytes]).ok_or_else(overflow)?;
    let no_scratch = AtomicBool::new(false);
    // Phase 1: present = past codes, the new rows quantized (keys rotated first), zero bytes.
    let copy_work = 2 * cache >= super::rotary::PAR_MIN_ELEMS * 16;
    for (which, dst_all) in [(0usize, &mut *o.present_k), (1, &mut *o.present_v)] {
        let inv = if which == 0 { &inv_k } else { &inv_v };
        let fill = |first: usize, dst: &mut [u8]| {
            let done = try_with_scratch_f32(head, |x| {
                for (i, d) in dst.chunks_exact_mut(unit).enumerate() {
                    let (b, n) = ((first + i) / kv_heads, (first + i) % kv_heads);
                    let p = past_r[b].0;
                    if !o.shared {
                        if let Some(src) = past.map(|(pk, pv)| if which == 0 { pk } else { pv }) {
                            let at = (b * kv_heads + n) * past_len * row_bytes;
                            d[..p * row_bytes].copy_from_slice(&src[at..at + p * row_bytes]);
                        }
                        d[(p + seq) * row_bytes..].fill(0);
                    }
                    let inv_n = &inv[n * head..(n + 1) * head];
                    for s in 0..seq {
                        let row = &mut d[(p + s) * row_bytes..(p + s + 1) * row_bytes];
                        let src = rows.new_row(which, b, s, n);
                        let src = if which == 0 {
                            rows.rope(src, rows.rope_pos(b, p, s), x);
                            &x[..]
                        } else {
                            src
                        };
                        quantize_row(src, inv_n, q, row);
                    }
                }
            });
            if done.is_none() {
                no_scratch.store(true, Ordering::Relaxed);
            }
        };
        super::over_rows(dst_all, unit, copy_work, seq == 1, par, &fill);
    }
    let (pk, pv) = (&*o.present_k, &*o.present_v);
    let max_len = past_r.iter().map(|&(p, _)| p).max().unwrap_or(0) + seq;
    let g_head = group * head;
    let s_buf = mul(&[group, max_len]).ok_or_else(overflow)?;
    // Query rows, scores and probabilities, then a block of codes widened to f32, the group's
    // probabilities over it, and the group's output rows over it.
    let block_f = mul(&[BLOCK_ROWS, head]).ok_or_else(overflow)?;
    let coef_f = mul(&[BLOCK_ROWS, group]).ok_or_else(overflow)?;
    let scratch = s_buf
        .checked_mul(2)
        .and_then(|x| x.checked_add(g_head.checked_mul(2)?))
        .and_then(|x| x.checked_add(block_f))
        .and_then(|x| x.checked_add(coef_f))
        .ok_or_else(overflow)?;
    let unpacked = if q.bits == 4 {
        mul(&[BLOCK_ROWS, head]).ok_or_else(overflow)?
    } else {
        0
    };
    // Phase 2: one unit per (batch, position, kv head), its group's output rows contiguous.
    let attend = |first: usize, dst: &mut [f32]| {
        // A peaky softmax underflows into subnormals, each read costing an assist on Intel.
        let _ftz = FlushSubnormals::new();
        let done = try_with_scratch_f32(scratch, |buf| {
            try_with_scratch_u8(unpacked, |ub| {
                let (qr, rest) = buf.split_at_mut(g_head);
                let (scores, rest) = rest.split_at_mut(s_buf);
                let (probs, rest) = rest.split_at_mut(s_buf);
                let (fb, rest) = rest.split_at_mut(block_f);
                let (coef, part) = rest.split_at_mut(coef_f);
                for (i, orows) in dst.chunks_exact_mut(g_head).enumerate() {
                    let u = first + i;
                    let (b, s, n) = (u / (seq * kv_heads), (u / kv_heads) % seq, u % kv_heads);
                    let (p, total) = past_r[b];
                    let at = rows.rope_pos(b, p, s);
                    let fold_n = &fold[n * head..(n + 1) * head];
                    for (gi, qg) in qr.chunks_exact_mut(head).enumerate() {
                        rows.rope(rows.q_row(b, s, n * group + gi), at, qg);
                        qg.iter_mut().zip(fold_n).for_each(|(x, &f)| *x *= f);
                    }
                    let std::ops::Range {
                        start: st,
                        end: len,
                    } = sh.key_range(p + s + 1, total);
                    let keys = len - st;
                    let base = (b * kv_heads + n) * unit;
                    let kc = &pk[base + st * row_bytes..base + len * row_bytes];
                    let vc = &pv[base + st * row_bytes..base + len * row_bytes];
                    let (sc, pr) = (&mut scores[..group * keys], &mut probs[..group * keys]);
                    // Each block of codes is widened to f32 once for the whole group, then the
                    // float32 kernels run over it (the int8 kernels converted the codes again for
                    // every query head of the group).
                    for j0 in (0..keys).step_by(BLOCK_ROWS) {
                        let j1 = (j0 + BLOCK_ROWS).min(keys);
                        let fbk = widen(codes(q.bits, kc, j0, j1, row_bytes, head, ub), fb);
                        for (gi, qg) in qr.chunks_exact(head).enumerate() {
                            (k.scores)(qg, fbk, 1.0, &mut sc[gi * keys + j0..gi * keys + j1]);
                        }
                    }
                    sh.cap_scores(sc);
                    let sk = sinks.map(|s| &s[n * group..(n + 1) * group]);
                    softmax_rows(softmax_row, sk, sc, pr, keys);
                    orows.fill(0.0);
                    for j0 in (0..keys).step_by(BLOCK_ROWS) {
                        let j1 = (j0 + BLOCK_ROWS).min(keys);
                        let fbk = widen(codes(q.bits, vc, j0, j1, row_bytes, head, ub), fb);
                        let nb = j1 - j0;
                        let cf = &mut coef[..group * nb];
                        for (gi, c) in cf.chunks_exact_mut(nb).enumerate() {
                            c.copy_from_slice(&pr[gi * keys + j0..gi * keys + j1]);
                        }
                        let part = &mut part[..g_head];
                        (k.rows_group)(group, cf, fbk, head, 1.0, part);
                        orows.iter_mut().zip(&*part).for_each(|(o, &x)| *o += x);
                    }
                    let vs_n = &vs[n * head..(n + 1) * head];
                    for og in orows.chunks_exact_mut(head) {
                        og.iter_mut().zip(vs_n).for_each(|(x, &v)| *x *= v);
                    }
                }
            })
        });
        if done.flatten().is_none() {
            no_scratch.store(true, Ordering::Relaxed);
        }
    };
    let work = out_elems.saturating_mul(max_len);
    let split = if seq > 1 {
        super::Split::Growing
    } else {
        super::Split::Even
    };
    let parallel = work >= super::gqa::PAR_MIN_WORK;
    if !no_scratch.load(Ordering::Relaxed) {
        super::over_rows_split(o.out, g_head, parallel, seq == 1, split, par, &attend);
    }
    if no_scratch.load(Ordering::Relaxed) {
        return Err(format!(
            "cannot allocate {scratch} floats and {unpacked} bytes of attention scratch"
        ));
    }
    Ok(variant(k.isa, q.bits))
}

/// `codes` (bytes read as `i8`) as f32 in the first `codes.len()` elements of `out`.
fn widen<'a>(codes: &[u8], out: &'a mut [f32]) -> &'a [f32] {
    let out = &mut out[..codes.len()];
    out.iter_mut()
        .zip(codes)
        .for_each(|(o, &c)| *o = f32::from(c as i8));
    out
}

/// The int8 codes of rows `j0..j1` of `src` (rows of `row_bytes`): the bytes themselves at 8
/// bits, unpacked into `ub` at 4.
fn codes<'a>(
    bits: u32,
    src: &'a [u8],
    j0: usize,
    j1: usize,
    row_bytes: usize,
    head: usize,
    ub: &'a mut [u8],
) -> &'a [u8] {
    let rows = &src[j0 * row_bytes..j1 * row_bytes];
    if bits == 4 {
        let out = &mut ub[..(j1 - j0) * head];
        unpack4(rows, out);
        out
    } else {
        rows
    }
}
