//! Grouped-query attention over a BNSH KV cache (`com.microsoft.GroupQueryAttention`), f32,
//! with ORT's CPU semantics:
//!
//! - query `[B, S, N * H]`, key/value `[B, S, Nkv * H]`, or one packed `[B, S, (N + 2 Nkv) * H]`;
//!   query head `h` reads kv head `h / (N / Nkv)`;
//! - per batch the total length is `t = seqlens_k[b] + 1`; on the first prompt the new tokens sit
//!   at cache rows `0..S`, otherwise at `t - S .. t` after `t - S` past rows;
//! - `present` (`[B, Nkv, present_len, H]`) = the past rows, then the new (rotated) keys/values,
//!   zeros after them; when present shares the past buffer only the new rows are written;
//! - query `s` attends causally to cache rows `0 ..= past + s`, but never beyond the `t` valid
//!   rows (right-padded rows of a first prompt attend to all `t`), `softmax(scale * q.k)` times V;
//! - with rotary, query and new key rows are rotated at position `s` (first prompt) or
//!   `past + s` (cache rows of `cos`/`sin`), see [`super::rotary`].
//!
//! Execution: phase 1 writes present (one (batch, kv head) block per unit); phase 2 attends. A
//! decode step over a short cache fuses both ([`super::gqa_decode`]). A prefill (`seq > 1`)
//! transposes each (batch, kv head) key block once to `[H, max_len]`, then runs one unit per
//! (batch, position, kv head): the group's `N / Nkv` query rows are rotated, their scores taken
//! together along the transposed keys (each key vector loaded once for the whole group), each
//! row softmaxed, and the probabilities times V taken together (each value vector loaded once
//! for the group), straight into the group's contiguous output rows. Every output element gets
//! the same FMA sequence as on the per-query-head path ([`Prefill::PerRow`]), so the two are
//! bit-identical. Inside a lane's run of units it goes kv head by kv head (one head's keys and
//! values stay cached), and the runs are claimed latest positions first (the causal cost grows
//! along the positions).

use crate::kernels::fp_env::FlushSubnormals;
use crate::kernels::isa::Isa;
use crate::kernels::softmax;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::memory::scratch::try_with_scratch_f32;
use crate::memory::try_vec;
use crate::runtime::par::Par;

use super::gqa_decode::Decode;
use super::rotary::{position, Positions};
use super::Kernels;

/// Attention work (multiply-adds) from which a call is split over lanes.
pub const PAR_MIN_WORK: usize = 1 << 15;

/// Most past rows a decode step takes the fused path ([`super::gqa_decode`]) with when its
/// units do not cover the lanes (see [`decode_fused`]). Inside the Qwen2-0.5B decode (2 lanes,
/// `rcpu-bench llm --mode decode --past P`, old build as the null arm) the fused path measured
/// 4% faster per token at past 64, 2.4% at 256, 2% slower at 512 and 1% slower at 1024 (an
/// earlier build, on an Intel host).
pub const DECODE_FUSED_MAX_PAST: usize = 256;

/// Whether a decode step (one new row per batch) with `past` rows at most takes the fused path:
/// over a short cache always, except a single unit worth splitting (the general path splits its
/// query heads over the lanes); over a longer one when its (batch, kv head) units cover the
/// lanes, so no lane idles. On the Zen 4 host (2 lanes, 2 units; per-round medians of the
/// old/new time per token, arms interleaved; docs/journal/measurements-2026-12.md, decode over
/// a long cache) the fused path at past 1024 was 3.1% faster than
/// the general one, 24% in a run at plentiful bandwidth, and with its present copy streamed
/// ([`super::STREAM_COPY_MIN_BYTES`]) 9% (Qwen2-0.5B shapes) and 9.1% (Llama-3.2-1B, 8 units):
/// each lane reads its unit's keys and values once, into its own cache, where the general path
/// writes present first and then has every query head read its kv head's rows from it.
pub fn decode_fused(past: usize, units: usize, parallel: bool, lanes: usize) -> bool {
    if past <= DECODE_FUSED_MAX_PAST {
        units >= 2 || !parallel || lanes < 2
    } else {
        units >= lanes || !parallel
    }
}

/// Shape of one call.
#[derive(Clone, Copy, Debug)]
pub struct GqaShape {
    pub batch: usize,
    pub seq: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head: usize,
    /// Rows of the past buffers (0 without past).
    pub past_len: usize,
    /// Rows of the present buffers.
    pub present_len: usize,
    /// ORT's "first prompt": `S == total_sequence_length`; new rows start at 0.
    pub first_prompt: bool,
    pub scale: f32,
    /// `local_window_size`: a query attends to at most this many keys, the latest of its causal
    /// ones, its own among them (0: no window).
    pub window: usize,
    /// `softcap`: each scaled score `x` becomes `softcap * tanh(x / softcap)` before the softmax
    /// (0: none).
    pub softcap: f32,
    /// A sink logit per query head joins each softmax, its probability dropped (`head_sink`,
    /// [`GqaInputs::sinks`]; 0 for every head with `smooth_softmax = 1` and no `head_sink`).
    pub smooth: bool,
}

impl GqaShape {
    /// The first key row a query with `len` causal keys attends to: `len - window` once the
    /// window is shorter than `len` (ORT: the window covers `local_window_size` keys).
    fn window_start(&self, len: usize) -> usize {
        if self.window > 0 && len > self.window {
            len - self.window
        } else {
            0
        }
    }

    /// The key rows a query at causal length `causal` (its position + 1) of a batch with `total`
    /// valid rows attends to. Causal, never past `total`, from the window's first row on. A row
    /// past `total` (right padding of a first prompt) has its window placed as ORT 1.31 places
    /// it: from its own position without a softcap (ORT's flash path; a window wholly past the
    /// valid rows is empty and the row's output zero), from the last valid row with one (its
    /// plain path; a sink takes that path too). Every other row has `causal <= total`, where the
    /// two agree.
    pub fn key_range(&self, causal: usize, total: usize) -> std::ops::Range<usize> {
        let end = causal.min(total);
        let from = if self.softcap > 0.0 || self.smooth {
            end
        } else {
            causal
        };
        self.window_start(from).min(end)..end
    }

    /// The softcap step on one row of scaled scores (nothing without one).
    pub(super) fn cap_scores(&self, scores: &mut [f32]) {
        let cap = self.softcap;
        if cap > 0.0 {
            scores.iter_mut().for_each(|x| *x = cap * (*x / cap).tanh());
        }
    }
}

/// The `do_rotary` step: caches `[max_pos, rot / 2]` and the pair layout.
#[derive(Clone, Copy, Debug)]
pub struct GqaRotary<'a> {
    pub cos: &'a [f32],
    pub sin: &'a [f32],
    pub rot: usize,
    pub interleaved: bool,
}

/// Inputs of one call.
#[derive(Clone, Copy, Debug)]
pub struct GqaInputs<'a> {
    pub q: &'a [f32],
    /// Separate key and value; `None`: packed into `q`.
    pub kv: Option<(&'a [f32], &'a [f32])>,
    /// Past key and value (`[B, Nkv, past_len, H]`); `None` without past or when present shares it.
    pub past: Option<(&'a [f32], &'a [f32])>,
    pub seqlens_k: &'a [i32],
    pub rotary: Option<GqaRotary<'a>>,
    /// The rotary position of each batch's first new token (`None`: its past length, 0 on a
    /// first prompt). A windowed cache (`super::gqa_window`) keeps rows at cache-relative
    /// places while the rotary step takes absolute positions.
    pub rope_at: Option<&'a [usize]>,
    /// With [`GqaShape::smooth`]: each query head's sink logit (`None`: 0 for every head).
    pub sinks: Option<&'a [f32]>,
}

/// The softmax of `sc`'s rows of `n` into `pr`: the row kernel, or, with sinks (one per row, see
/// [`GqaShape::smooth`]), `exp(x - m) / (sum exp(x - m) + exp(sink - m))` with `m` the largest of
/// the row and its sink (ORT's smooth softmax; the sink's own probability is dropped).
pub(super) fn softmax_rows(
    row: softmax::RowFn,
    sinks: Option<&[f32]>,
    sc: &[f32],
    pr: &mut [f32],
    n: usize,
) {
    if n == 0 {
        return;
    }
    let Some(sinks) = sinks else {
        row(sc, pr, n);
        return;
    };
    for ((s, p), &sink) in sc.chunks_exact(n).zip(pr.chunks_exact_mut(n)).zip(sinks) {
        let m = s.iter().fold(sink, |m, &x| m.max(x));
        let mut z = (sink - m).exp();
        for (p, &x) in p.iter_mut().zip(s) {
            *p = (x - m).exp();
            z += *p;
        }
        let r = 1.0 / z;
        p.iter_mut().for_each(|p| *p *= r);
    }
}

/// Outputs of one call.
pub struct GqaOutputs<'a> {
    pub out: &'a mut [f32],
    pub present_k: &'a mut [f32],
    pub present_v: &'a mut [f32],
    /// Present is the past buffer (it already holds the past rows).
    pub shared: bool,
}

/// Runs one GroupQueryAttention call. Returns the variant that ran.
pub fn gqa_f32(
    sh: &GqaShape,
    inp: &GqaInputs<'_>,
    o: GqaOutputs<'_>,
    par: &dyn Par,
) -> Result<&'static str, String> {
    gqa_f32_prefill(None, Prefill::Grouped, sh, inp, o, par)
}

/// [`gqa_f32`] forced onto one ISA variant (tests). `Err` when the CPU lacks it.
pub fn gqa_f32_with(
    isa: Isa,
    sh: &GqaShape,
    inp: &GqaInputs<'_>,
    o: GqaOutputs<'_>,
    par: &dyn Par,
) -> Result<&'static str, String> {
    gqa_f32_prefill(Some(isa), Prefill::Grouped, sh, inp, o, par)
}

/// How a call with several query rows (prefill, `seq > 1`) splits the attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prefill {
    /// One unit per (batch, position, kv head): the group's query heads share every key and
    /// value vector load (the default).
    Grouped,
    /// One unit per (batch, position, query head): the earlier path, kept as the reference the
    /// grouped one is bit-identical to (tests, timing).
    PerRow,
}

/// The sink logits of a call ([`GqaShape::smooth`]).
pub(super) enum Sinks<'a> {
    /// No sink joins the softmax.
    None,
    /// The `head_sink` input's, one per query head.
    Input(&'a [f32]),
    /// `smooth_softmax = 1` without `head_sink`: 0 for every query head.
    Zeros(Vec<f32>),
}

impl Sinks<'_> {
    /// One logit per query head, or `None` when no sink joins the softmax.
    pub(super) fn logits(&self) -> Option<&[f32]> {
        match self {
            Sinks::None => None,
            Sinks::Input(s) => Some(s),
            Sinks::Zeros(z) => Some(z),
        }
    }
}

/// `num_heads / kv_num_heads`, after checking that both and the head size are positive and the
/// first a multiple of the second.
pub(super) fn group_size(sh: &GqaShape) -> Result<usize, String> {
    let (heads, kv_heads) = (sh.heads, sh.kv_heads);
    if heads == 0 || kv_heads == 0 || !heads.is_multiple_of(kv_heads) || sh.head == 0 {
        return Err(format!(
            "num_heads {heads} must be a positive multiple of kv_num_heads {kv_heads}"
        ));
    }
    Ok(heads / kv_heads)
}

/// The sink logits with `smooth`: the input's (one per query head, checked), or zeros.
pub(super) fn sink_logits<'a>(
    sh: &GqaShape,
    sinks: Option<&'a [f32]>,
) -> Result<Sinks<'a>, String> {
    let heads = sh.heads;
    Ok(match (sh.smooth, sinks) {
        (false, _) => Sinks::None,
        (true, Some(s)) if s.len() == heads => Sinks::Input(s),
        (true, Some(s)) => {
            return Err(format!(
                "head_sink has {} elements, expected num_heads {heads}",
                s.len()
            ))
        }
        (true, None) => Sinks::Zeros(try_vec(heads, 0.0f32)?),
    })
}

/// The rotary step of a call (caches and half the rotary dimension), after checking the caches
/// against the head size and every new token's position against the caches' rows.
pub(super) fn rotary_plan<'a>(
    sh: &GqaShape,
    inp: &GqaInputs<'a>,
    past: &[(usize, usize)],
) -> Result<Option<(GqaRotary<'a>, usize)>, String> {
    let (batch, seq, head) = (sh.batch, sh.seq, sh.head);
    Ok(match inp.rotary {
        Some(r) => {
            if r.rot == 0
                || r.rot % 2 != 0
                || r.rot > head
                || r.cos.len() != r.sin.len()
                || r.cos.len() % (r.rot / 2) != 0
            {
                return Err(format!(
                    "cos/sin caches do not fit rotary dimension {} and head size {head}",
                    r.rot
                ));
            }
            let rows = r.cos.len() / (r.rot / 2);
            if inp.rope_at.is_some_and(|r| r.len() != batch) {
                return Err(format!("rotary positions for {batch} batches expected"));
            }
            for (b, &(p, _)) in past.iter().enumerate() {
                let base = inp.rope_at.map_or(p, |r| r[b]);
                let base = i64::try_from(base).map_err(|_| format!("rotary position {base}"))?;
                for s in 0..seq {
                    position(Positions::Offset(base), b, s, seq, rows)?;
                }
            }
            Some((r, r.rot / 2))
        }
        None => None,
    })
}

/// Past rows and total valid length per batch, after checking `seqlens_k` against the shape and
/// buffers.
pub(super) fn past_rows(
    sh: &GqaShape,
    seqlens_k: &[i32],
    shared: bool,
) -> Result<Vec<(usize, usize)>, String> {
    if seqlens_k.len() != sh.batch {
        return Err(format!(
            "seqlens_k has {} elements, expected batch size {}",
            seqlens_k.len(),
            sh.batch
        ));
    }
    let mut past = Vec::new();
    past.try_reserve_exact(sh.batch)
        .map_err(|_| format!("cannot allocate {} batch entries", sh.batch))?;
    for (b, &sk) in seqlens_k.iter().enumerate() {
        let t = sk as i64 + 1;
        if t < 1 || t > sh.present_len as i64 {
            return Err(format!(
                "seqlens_k[{b}] = {sk}: total length {t} is outside 1..={} (present length)",
                sh.present_len
            ));
        }
        let p = if sh.first_prompt {
            0
        } else {
            let p = t - sh.seq as i64;
            if p < 0 {
                return Err(format!(
                    "seqlens_k[{b}] = {sk}: total length {t} is shorter than sequence_length {}",
                    sh.seq
                ));
            }
            p as usize
        };
        if !shared && p > sh.past_len {
            return Err(format!(
                "seqlens_k[{b}] = {sk} needs {p} past rows, past_key/past_value hold {}",
                sh.past_len
            ));
        }
        past.push((p, t as usize));
    }
    Ok(past)
}

/// The lengths of a call's buffers (elements of each slice), checked by [`check_lens`].
pub(super) struct BufferLens {
    pub q: usize,
    pub kv: Option<(usize, usize)>,
    pub out: usize,
    pub present: (usize, usize),
    pub past: Option<(usize, usize)>,
}

/// What [`check_lens`] derived: the call's tokens, output elements and cache elements (a
/// present buffer's length).
pub(super) struct Sizes {
    pub tokens: usize,
    pub out_elems: usize,
    pub cache: usize,
}

/// The error of a size that overflows `usize`.
pub(super) fn size_overflow(sh: &GqaShape) -> String {
    format!(
        "GQA sizes overflow (batch {}, seq {}, present {})",
        sh.batch, sh.seq, sh.present_len
    )
}

/// The product of `xs`, `None` on overflow.
pub(super) fn checked_product(xs: &[usize]) -> Option<usize> {
    xs.iter().try_fold(1usize, |a, &x| a.checked_mul(x))
}

/// Checks every buffer's length against the shape with checked arithmetic; `row` is one cache
/// row's length in the cache's elements (`head` for float32 and int8 caches, `head / 2` bytes for
/// 4-bit ones). The error names the buffer and both lengths.
pub(super) fn check_lens(sh: &GqaShape, row: usize, l: &BufferLens) -> Result<Sizes, String> {
    let GqaShape {
        batch,
        seq,
        heads,
        kv_heads,
        head,
        past_len,
        present_len,
        ..
    } = *sh;
    let q_stride = if l.kv.is_some() {
        heads
    } else {
        heads + 2 * kv_heads
    };
    let overflow = || size_overflow(sh);
    let mul = checked_product;
    let tokens = mul(&[batch, seq]).ok_or_else(overflow)?;
    let q_elems = mul(&[tokens, q_stride, head]).ok_or_else(overflow)?;
    let kv_elems = mul(&[tokens, kv_heads, head]).ok_or_else(overflow)?;
    let out_elems = mul(&[tokens, heads, head]).ok_or_else(overflow)?;
    let cache = mul(&[batch, kv_heads, present_len, row]).ok_or_else(overflow)?;
    let past_elems = mul(&[batch, kv_heads, past_len, row]).ok_or_else(overflow)?;
    let need = |what: &str, got: usize, want: usize| {
        if got == want {
            Ok(())
        } else {
            Err(format!("{what} has {got} elements, expected {want}"))
        }
    };
    need("query", l.q, q_elems)?;
    if let Some((kk, vv)) = l.kv {
        need("key", kk, kv_elems)?;
        need("value", vv, kv_elems)?;
    }
    need("output", l.out, out_elems)?;
    need("present_key", l.present.0, cache)?;
    need("present_value", l.present.1, cache)?;
    if let Some((pk, pv)) = l.past {
        need("past_key", pk, past_elems)?;
        need("past_value", pv, past_elems)?;
    }
    Ok(Sizes {
        tokens,
        out_elems,
        cache,
    })
}

/// [`gqa_f32`] with the prefill path chosen, on one ISA variant (`None`: the process's level).
/// Both paths give bit-identical results; decode calls (`seq == 1`) ignore `prefill`.
pub fn gqa_f32_prefill(
    isa: Option<Isa>,
    prefill: Prefill,
    sh: &GqaShape,
    inp: &GqaInputs<'_>,
    o: GqaOutputs<'_>,
    par: &dyn Par,
) -> Result<&'static str, String> {
    let k = super::kernels(isa)?;
    let softmax_row = softmax::row_kernel(k.isa)?;
    let GqaShape {
        batch,
        seq,
        heads,
        kv_heads,
        head,
        past_len,
        present_len,
        ..
    } = *sh;
    let group = group_size(sh)?;
    let lens = BufferLens {
        q: inp.q.len(),
        kv: inp.kv.map(|(k, v)| (k.len(), v.len())),
        out: o.out.len(),
        present: (o.present_k.len(), o.present_v.len()),
        past: inp.past.map(|(k, v)| (k.len(), v.len())),
    };
    let Sizes {
        tokens,
        out_elems,
        cache,
    } = check_lens(sh, head, &lens)?;
    let overflow = || size_overflow(sh);
    let mul = checked_product;
    let past = past_rows(sh, inp.seqlens_k, o.shared)?;
    let sinks = sink_logits(sh, inp.sinks)?;
    let sinks = sinks.logits();
    let rot = rotary_plan(sh, inp, &past)?;
    if tokens == 0 || heads == 0 {
        return Ok(k.name);
    }
    let rows = Rows::new(inp, k, rot, sh);
    let (new_row, rope_at) = (
        |which, b, s, n| rows.new_row(which, b, s, n),
        |x: &[f32], p, out: &mut [f32]| rows.rope(x, p, out),
    );
    let max_len = past.iter().map(|&(p, _)| p).max().unwrap_or(0) + seq;
    let units = batch * kv_heads;
    let parallel = out_elems.saturating_mul(max_len) >= PAR_MIN_WORK;
    if seq == 1 && decode_fused(max_len - 1, units, parallel, par.lanes()) {
        let d = Decode {
            k,
            softmax_row,
            sh,
            rows: &rows,
            past_kv: if o.shared { None } else { inp.past },
            past: &past,
            shared: o.shared,
            sinks,
        };
        d.run(o.out, o.present_k, o.present_v, parallel, par)?;
        return Ok(k.name);
    }
    let unit = present_len * head;
    let copy_work = 2 * cache >= super::rotary::PAR_MIN_ELEMS * 4;
    // Phase 1: present = past rows, new rows (keys rotated), zeros; one (b, kv head) per row.
    for (which, dst_all) in [(0usize, &mut *o.present_k), (1, &mut *o.present_v)] {
        let fill = |first: usize, dst: &mut [f32]| {
            for (i, d) in dst.chunks_exact_mut(unit).enumerate() {
                let (b, n) = ((first + i) / kv_heads, (first + i) % kv_heads);
                let p = past[b].0;
                if !o.shared {
                    if let Some(src) = inp.past.map(|(pk, pv)| if which == 0 { pk } else { pv }) {
                        let at = (b * kv_heads + n) * past_len * head;
                        d[..p * head].copy_from_slice(&src[at..at + p * head]);
                    }
                    d[(p + seq) * head..].fill(0.0);
                }
                for s in 0..seq {
                    let row = &mut d[(p + s) * head..(p + s + 1) * head];
                    if which == 0 {
                        rope_at(new_row(0, b, s, n), rows.rope_pos(b, p, s), row);
                    } else {
                        row.copy_from_slice(new_row(1, b, s, n));
                    }
                }
            }
        };
        super::over_rows(dst_all, unit, copy_work, seq == 1, par, &fill);
    }
    let (pk, pv) = (&*o.present_k, &*o.present_v);
    // Phase 2: one (b, s, query head) per output row of `head` elements. With several query
    // rows (prefill) each lane first transposes its batch's keys (`[Nkv, H, max_len]`) so the
    // scores run along the keys; a decode row takes one dot product per key row. The grouped
    // prefill takes one (b, s, kv head) per unit instead: its `group` query heads are contiguous
    // in the output, attend to the same keys with the same causal length, and go through the
    // scores, the softmax and P x V together (`rows_group`).
    let transposed = seq > 1;
    let grouped = transposed && prefill == Prefill::Grouped;
    let g_rows = if grouped { group } else { 1 };
    // The per-row path transposes its batch's keys in every lane's scratch (per run of rows);
    // the grouped one transposes every (b, kv head) once, over the lanes, into one buffer.
    let kt_len = if transposed && !grouped {
        mul(&[kv_heads, head, max_len]).ok_or_else(overflow)?
    } else {
        0
    };
    let kt_row = mul(&[head, max_len]).ok_or_else(overflow)?;
    let mut kt_all = Vec::new();
    if grouped {
        let len = mul(&[batch, kv_heads, kt_row]).ok_or_else(overflow)?;
        kt_all
            .try_reserve_exact(len)
            .map_err(|_| format!("cannot allocate {len} floats of transposed keys"))?;
        kt_all.resize(len, 0.0);
        let tr = |first: usize, dst: &mut [f32]| {
            for (i, t) in dst.chunks_exact_mut(kt_row).enumerate() {
                let u = first + i;
                let rows = past[u / kv_heads].0 + seq;
                transpose_keys(&pk[u * unit..(u + 1) * unit], unit, rows, head, max_len, t);
            }
        };
        let parallel = len >= super::rotary::PAR_MIN_ELEMS * 4;
        super::over_rows(&mut kt_all, kt_row, parallel, false, par, &tr);
    }
    let kt_all = &kt_all[..];
    // At most one batch's present keys plus the query rows and two score rows per query head of
    // a unit: bounded by buffers that exist already.
    let q_buf = mul(&[g_rows, head]).ok_or_else(overflow)?;
    let s_buf = mul(&[g_rows, max_len]).ok_or_else(overflow)?;
    let scratch = s_buf
        .checked_mul(2)
        .and_then(|x| x.checked_add(q_buf))
        .and_then(|x| x.checked_add(kt_len))
        .ok_or_else(overflow)?;
    let no_scratch = AtomicBool::new(false);
    let transpose_for = |b: usize, kt: &mut [f32]| {
        transpose_keys(
            &pk[b * kv_heads * unit..(b + 1) * kv_heads * unit],
            unit,
            past[b].0 + seq,
            head,
            max_len,
            kt,
        )
    };
    let attend = |first: usize, dst: &mut [f32]| {
        // A peaky softmax underflows into subnormals, each read costing an assist on Intel.
        let _ftz = FlushSubnormals::new();
        let done = try_with_scratch_f32(scratch, |buf| {
            let (qr, rest) = buf.split_at_mut(q_buf);
            let (scores, rest) = rest.split_at_mut(s_buf);
            let (probs, kt) = rest.split_at_mut(s_buf);
            if grouped {
                // Kv head by kv head through the run, so one head's keys and values stay in the
                // cache for all of the run's positions (the units are independent).
                for n0 in 0..kv_heads {
                    let units = dst.chunks_exact_mut(q_buf).enumerate();
                    for (i, orows) in units.filter(|(i, _)| (first + i) % kv_heads == n0) {
                        let u = first + i;
                        let (b, s, n) = (u / (seq * kv_heads), (u / kv_heads) % seq, u % kv_heads);
                        let (p, total) = past[b];
                        let at = rows.rope_pos(b, p, s);
                        for (gi, qg) in qr.chunks_exact_mut(head).enumerate() {
                            rope_at(rows.q_row(b, s, n * group + gi), at, qg);
                        }
                        // As below (`GqaShape::key_range`).
                        let std::ops::Range {
                            start: st,
                            end: len,
                        } = sh.key_range(p + s + 1, total);
                        let keys = len - st;
                        let base = (b * kv_heads + n) * unit;
                        let kt_n =
                            &kt_all[(b * kv_heads + n) * kt_row..(b * kv_heads + n + 1) * kt_row];
                        let (sc, pr) = (&mut scores[..group * keys], &mut probs[..group * keys]);
                        (k.rows_group)(group, qr, &kt_n[st..], max_len, sh.scale, sc);
                        sh.cap_scores(sc);
                        let sk = sinks.map(|s| &s[n * group..(n + 1) * group]);
                        softmax_rows(softmax_row, sk, sc, pr, keys);
                        let vs = &pv[base + st * head..base + len * head];
                        (k.rows_group)(group, pr, vs, head, 1.0, orows);
                    }
                }
                return;
            }
            let mut kt_batch = None;
            for (i, orow) in dst.chunks_exact_mut(head).enumerate() {
                let u = first + i;
                let (b, s, h) = (u / (seq * heads), (u / heads) % seq, u % heads);
                let n = h / group;
                let (p, total) = past[b];
                rope_at(rows.q_row(b, s, h), rows.rope_pos(b, p, s), qr);
                // Causal, never past the batch's valid length (a right-padded row of a first
                // prompt attends to the valid keys, as ORT does), from the window's first key on
                // (`GqaShape::key_range`).
                let std::ops::Range {
                    start: st,
                    end: len,
                } = sh.key_range(p + s + 1, total);
                let keys = len - st;
                let base = (b * kv_heads + n) * unit;
                let sc = &mut scores[..keys];
                if transposed {
                    if kt_batch != Some(b) {
                        transpose_for(b, kt);
                        kt_batch = Some(b);
                    }
                    let kt_n = &kt[n * head * max_len..(n + 1) * head * max_len];
                    (k.rows)(qr, &kt_n[st..], max_len, sh.scale, sc);
                } else {
                    (k.scores)(qr, &pk[base + st * head..base + len * head], sh.scale, sc);
                }
                sh.cap_scores(sc);
                let sk = sinks.map(|s| &s[h..h + 1]);
                softmax_rows(softmax_row, sk, sc, &mut probs[..keys], keys);
                let vs = &pv[base + st * head..base + len * head];
                (k.rows)(&probs[..keys], vs, head, 1.0, orow);
            }
        });
        if done.is_none() {
            no_scratch.store(true, Ordering::Relaxed);
        }
    };
    let work = out_elems.saturating_mul(max_len);
    // The grouped prefill's units grow in cost along the positions (causal): split finer and
    // start from the heavy end.
    let split = if grouped {
        super::Split::Growing
    } else {
        super::Split::Even
    };
    let parallel = work >= PAR_MIN_WORK;
    super::over_rows_split(o.out, q_buf, parallel, seq == 1, split, par, &attend);
    if no_scratch.load(Ordering::Relaxed) {
        return Err(format!(
            "cannot allocate {scratch} floats of attention scratch"
        ));
    }
    Ok(k.name)
}

/// Where one call's query and new key / value rows are, and the rotary step applied to them.
pub(super) struct Rows<'a> {
    inp: &'a GqaInputs<'a>,
    k: &'static Kernels,
    rot: Option<(GqaRotary<'a>, usize)>,
    seq: usize,
    heads: usize,
    kv_heads: usize,
    head: usize,
    /// Heads per token in the query buffer (with K and V when packed).
    q_stride: usize,
}

impl<'a> Rows<'a> {
    /// The rows of a call with inputs `inp`, `heads` query and `kv_heads` KV heads of `head`
    /// elements, `seq` new tokens, rotated with `rot` ([`rotary_plan`]).
    pub(super) fn new(
        inp: &'a GqaInputs<'a>,
        k: &'static Kernels,
        rot: Option<(GqaRotary<'a>, usize)>,
        sh: &GqaShape,
    ) -> Self {
        Rows {
            inp,
            k,
            rot,
            seq: sh.seq,
            heads: sh.heads,
            kv_heads: sh.kv_heads,
            head: sh.head,
            q_stride: if inp.kv.is_some() {
                sh.heads
            } else {
                sh.heads + 2 * sh.kv_heads
            },
        }
    }

    /// The new key (`which` 0) or value (1) row of token `(b, s)`, kv head `n`.
    pub(super) fn new_row(&self, which: usize, b: usize, s: usize, n: usize) -> &'a [f32] {
        let (src, stride, off) = match self.inp.kv {
            Some((kk, vv)) => (if which == 0 { kk } else { vv }, self.kv_heads, 0),
            None => (
                self.inp.q,
                self.q_stride,
                self.heads + which * self.kv_heads,
            ),
        };
        let at = ((b * self.seq + s) * stride + off + n) * self.head;
        &src[at..at + self.head]
    }

    /// The query row of token `(b, s)`, head `h`.
    pub(super) fn q_row(&self, b: usize, s: usize, h: usize) -> &'a [f32] {
        let at = ((b * self.seq + s) * self.q_stride + h) * self.head;
        &self.inp.q[at..at + self.head]
    }

    /// The rotary position of token `s` of batch `b` with `p` past rows.
    pub(super) fn rope_pos(&self, b: usize, p: usize, s: usize) -> usize {
        self.inp.rope_at.map_or(p, |r| r[b]) + s
    }

    /// `x` rotated at position `p` into `out` (copied when the call has no rotary step).
    pub(super) fn rope(&self, x: &[f32], p: usize, out: &mut [f32]) {
        match self.rot {
            Some((r, half)) => (self.k.rope)(
                x,
                &r.cos[p * half..(p + 1) * half],
                &r.sin[p * half..(p + 1) * half],
                r.interleaved,
                out,
            ),
            None => out.copy_from_slice(x),
        }
    }
}

/// Keys of one batch (`[Nkv, present_len, H]`, `per_head` = `present_len * H`, the first `rows`
/// rows valid) into `kt` as `[Nkv, H, ld]`.
fn transpose_keys(
    keys: &[f32],
    per_head: usize,
    rows: usize,
    head: usize,
    ld: usize,
    kt: &mut [f32],
) {
    for (kn, tn) in keys
        .chunks_exact(per_head)
        .zip(kt.chunks_exact_mut(head * ld))
    {
        for (j, row) in kn.chunks_exact(head).take(rows).enumerate() {
            for (i, &x) in row.iter().enumerate() {
                tn[i * ld + j] = x;
            }
        }
    }
}
