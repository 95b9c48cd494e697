//! com.microsoft.GroupQueryAttention (opset 1) over float32, ORT's CPU semantics (see
//! `kernels::attention::gqa`): separate query/key/value or packed QKV, past_key/past_value in
//! BNSH or none, present outputs (also sharing the past buffers), `do_rotary` with
//! `cos_cache`/`sin_cache` (rotate-half or interleaved), `scale` (0: `1/sqrt(head)`).
//!
//! `local_window_size` > 0 (a query attends to that many of its latest causal keys, its own
//! among them) and `softcap` > 0 (scaled scores `x` become `softcap * tanh(x / softcap)` inside
//! the window, before the softmax), as ORT 1.31's CPU kernel does.
//!
//! `sliding_window_cache` = 1 with a window: the past / present buffers are a windowed cache of
//! the latest positions, compacted as the window moves (`kernels::attention::gqa_window`).
//! `head_sink` (gpt-oss's attention sinks) and `smooth_softmax` = 1: a sink logit per query head
//! (0 without `head_sink`) joins each softmax, its own probability dropped.
//!
//! A quantized KV cache (`kernels::attention::gqa_quant`): `k_quant_type` = `v_quant_type` =
//! `PER_TENSOR` or `PER_CHANNEL` with `kv_cache_bit_width` 8 (int8 past/present) or 4 (uint8
//! past/present `[B, Nkv, L, H / 2]`, two codes a byte), `k_scale` / `v_scale` (float32, one
//! element or `kv_num_heads * head_size`): new rows quantized bit-identically to ORT, the attention
//! read from the codes. Everything above (rotary, packed QKV, shared buffers, windows, softcap,
//! sinks) works with it, except `sliding_window_cache`. A non-finite scale is an error naming
//! the node.
//!
//! Stays on ORT: `local_window_size` 0 or below -1, a negative `softcap`, `qk_output`, `causal` = 0,
//! `sliding_window_cache` without a window or with a quantized cache, the quantized forms ORT's CPU
//! EP fails (different K and V quant types, a bit width other than 4 / 8, or one without
//! quantization, an int8 cache at 4 bits or uint8 at 8), float16 and bfloat16 GQA (float16
//! caches included), the inputs `position_ids`, `attention_bias`, `q_norm_weight`/`k_norm_weight`.

use std::sync::Arc;

use crate::abi::graph::Node;
use crate::abi::kernel_context::KernelContext;
use crate::abi::kernel_info::KernelInfo;
use crate::abi::status::{Error, Result};
use crate::abi::tensor::{ElemType, Tensor};
use crate::ep::op::{types, Decline, KernelEnv, OpDef, OpKernel};
use crate::kernels::attention::gqa::{gqa_f32, GqaInputs, GqaOutputs, GqaRotary, GqaShape};
use crate::kernels::attention::gqa_plan::{plan, plan_windowed, GqaDims};
use crate::kernels::attention::gqa_quant::{gqa_quant, KvQuant, QuantOutputs};
use crate::kernels::attention::gqa_window::gqa_f32_windowed;
use crate::runtime::par::take_lanes_used;
use crate::telemetry::ledger;

use super::claim::{input, only_attrs, require_elem, F32};
use super::glue_common::output_wired;

const OP: &str = "GroupQueryAttention";
const I32: ElemType = ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32;
const I8: ElemType = ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8;
const U8: ElemType = ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8;
/// Past / present: f32, or the codes of a quantized cache (int8 at 8 bits, uint8 at 4).
const CACHE_TYPES: &[ElemType] = &[
    ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,
    ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8,
    ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8,
];

struct Gqa {
    heads: usize,
    kv_heads: usize,
    scale: f32,
    /// `local_window_size` (0: none).
    window: usize,
    /// `softcap` (0: none).
    softcap: f32,
    /// `sliding_window_cache` = 1: the past / present buffers are a windowed cache.
    windowed: bool,
    /// `smooth_softmax` = 1: a sink logit of 0 joins every softmax (`head_sink` gives its own).
    smooth: bool,
    rotary: Option<bool>,
    /// A quantized KV cache (`k_quant_type` = `v_quant_type` other than NONE).
    quant: Option<Quant>,
    env: Arc<KernelEnv>,
}

/// A quantized KV cache: `kv_cache_bit_width` (8: int8 codes; 4: uint8 bytes of two codes) and
/// whether the scales are per channel (`PER_CHANNEL`) or one for the tensor (`PER_TENSOR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Quant {
    bits: u32,
    per_channel: bool,
}

/// A 4-bit cache's shape with its rows counted in codes (two a byte), for the shape checks.
fn codes_shape(s: &[usize]) -> Vec<usize> {
    let mut v = s.to_vec();
    if let Some(last) = v.last_mut() {
        *last = last.saturating_mul(2);
    }
    v
}

fn bad(msg: impl Into<String>) -> Error {
    Error::invalid_argument(msg)
}

impl OpKernel for Gqa {
    fn compute(&self, ctx: &KernelContext<'_>) -> Result<()> {
        let (nh, nkv) = (self.heads, self.kv_heads);
        let q = ctx.required_input(0)?;
        let (key, value) = (ctx.input(1)?, ctx.input(2)?);
        let (past_k, past_v) = (ctx.input(3)?, ctx.input(4)?);
        let seqlens = ctx.required_input(5)?;
        let total = ctx.required_input(6)?;
        let caches = match self.rotary {
            Some(_) => Some((ctx.required_input(7)?, ctx.required_input(8)?)),
            None => None,
        };
        // A 4-bit cache's rows hold two codes a byte: planned as rows of head-size codes.
        let four_bit = self.quant.is_some_and(|q| q.bits == 4);
        let (past_codes_k, past_codes_v);
        let dims = GqaDims {
            query: q.shape(),
            kv: match (&key, &value) {
                (Some(k), Some(v)) => Some((k.shape(), v.shape())),
                (None, None) => None,
                _ => return Err(bad("key and value must be both present or both absent")),
            },
            past: match (&past_k, &past_v) {
                (Some(k), Some(v)) if four_bit => {
                    (past_codes_k, past_codes_v) = (codes_shape(k.shape()), codes_shape(v.shape()));
                    Some((&past_codes_k[..], &past_codes_v[..]))
                }
                (Some(k), Some(v)) => Some((k.shape(), v.shape())),
                (None, None) => None,
                _ => {
                    return Err(bad(
                        "past_key and past_value must be both present or both absent",
                    ))
                }
            },
            total: total.data::<i32>()?,
            rotary: caches.as_ref().map(|(c, s)| (c.shape(), s.shape())),
        };
        let pl = if self.windowed {
            plan_windowed(nh, nkv, self.window, &dims)
        } else {
            plan(nh, nkv, &dims)
        }
        .map_err(|e| {
            if four_bit {
                bad(format!(
                    "{e} (a 4-bit cache's last dimension is head_size / 2, two codes a byte)"
                ))
            } else {
                bad(e)
            }
        })?;
        let (batch, seq, head, past_len, present_len) =
            (pl.batch, pl.seq, pl.head, pl.past_len, pl.present_len);
        let first_prompt = pl.first_prompt;
        let rotary = match (self.rotary, &caches, pl.rot) {
            (Some(interleaved), Some((cos, sin)), Some(rot)) => Some(GqaRotary {
                cos: cos.data()?,
                sin: sin.data()?,
                rot,
                interleaved,
            }),
            _ => None,
        };
        let out = ctx
            .output(0, &[batch, seq, nh * head])?
            .into_data::<f32>()?;
        let row = if four_bit { head / 2 } else { head };
        let pshape = [batch, nkv, present_len, row];
        let (pk_out, pv_out) = (ctx.output(1, &pshape)?, ctx.output(2, &pshape)?);
        let same = |p: &Option<Tensor<'_>>, a: usize| {
            p.as_ref().is_some_and(|t| t.data_addr() == a && a != 0)
        };
        let (k_shared, v_shared) = (
            same(&past_k, pk_out.data_addr()),
            same(&past_v, pv_out.data_addr()),
        );
        if k_shared != v_shared {
            return Err(bad(
                "present_key and present_value must both share the past buffers or neither",
            ));
        }
        // A shared past buffer is never read through an input slice: present holds its rows.
        let past = match (&past_k, &past_v) {
            (Some(pk), Some(pv)) if !k_shared && self.quant.is_none() => {
                Some((pk.data()?, pv.data()?))
            }
            _ => None,
        };
        let past_codes = match (&past_k, &past_v) {
            (Some(pk), Some(pv)) if !k_shared && self.quant.is_some() => {
                Some((pk.bytes()?, pv.bytes()?))
            }
            _ => None,
        };
        // head_sink (input 11): one sink logit per query head.
        let sink_in = ctx.input(11)?;
        let sinks = match &sink_in {
            Some(t) if t.shape() == [nh] => Some(t.data::<f32>()?),
            Some(t) => {
                return Err(bad(format!(
                    "head_sink has shape {:?}, expected [{nh}] (num_heads)",
                    t.shape()
                )))
            }
            None => None,
        };
        let sh = GqaShape {
            batch,
            seq,
            heads: nh,
            kv_heads: nkv,
            head,
            past_len,
            present_len,
            first_prompt,
            scale: if self.scale == 0.0 {
                1.0 / (head as f32).sqrt()
            } else {
                self.scale
            },
            window: self.window,
            softcap: self.softcap,
            smooth: self.smooth || sinks.is_some(),
        };
        let kv = match (&key, &value) {
            (Some(k), Some(v)) => Some((k.data()?, v.data()?)),
            _ => None,
        };
        let inputs = GqaInputs {
            q: q.data()?,
            kv,
            past,
            seqlens_k: seqlens.data()?,
            rotary,
            rope_at: None,
            sinks,
        };
        let par = &*self.env.par;
        if let Some(qz) = self.quant {
            let (ks, vs) = (ctx.required_input(12)?, ctx.required_input(13)?);
            let kvq = KvQuant {
                bits: qz.bits,
                per_channel: qz.per_channel,
                k_scale: ks.data()?,
                v_scale: vs.data()?,
            };
            let outs = QuantOutputs {
                out,
                present_k: pk_out.into_bytes()?,
                present_v: pv_out.into_bytes()?,
                shared: k_shared,
            };
            let variant =
                gqa_quant(None, &sh, &kvq, &inputs, past_codes, outs, par).map_err(bad)?;
            ledger::record(OP, variant, take_lanes_used());
            return Ok(());
        }
        let outs = GqaOutputs {
            out,
            present_k: pk_out.into_data()?,
            present_v: pv_out.into_data()?,
            shared: k_shared,
        };
        let variant = if self.windowed {
            gqa_f32_windowed(None, &sh, &inputs, outs, par)
        } else {
            gqa_f32(&sh, &inputs, outs, par)
        }
        .map_err(bad)?;
        ledger::record(OP, variant, take_lanes_used());
        Ok(())
    }
}

/// Whether input `i` is wired (present with a non-empty name).
fn wired(node: &Node<'_>, i: usize) -> std::result::Result<bool, Decline> {
    Ok(match input(node, i)? {
        None => false,
        Some(v) => !v.name().map_err(|e| e.msg)?.is_empty(),
    })
}

fn claim(node: &Node<'_>) -> std::result::Result<(), Decline> {
    only_attrs(
        node,
        &[
            "num_heads",
            "kv_num_heads",
            "scale",
            "softcap",
            "local_window_size",
            "do_rotary",
            "rotary_interleaved",
            "smooth_softmax",
            "qk_output",
            "k_quant_type",
            "v_quant_type",
            "kv_cache_bit_width",
            "causal",
            "sliding_window_cache",
            "qk_norm_epsilon",
        ],
    )?;
    let quant = kv_quant(
        node.attr_string("k_quant_type"),
        node.attr_string("v_quant_type"),
        node.attr_i64("kv_cache_bit_width"),
    )?;
    let nh = node.attr_i64("num_heads").unwrap_or(0);
    let nkv = node.attr_i64("kv_num_heads").unwrap_or(0);
    if nh <= 0 || nkv <= 0 || nh % nkv != 0 {
        return Err(format!(
            "num_heads {nh} is not a positive multiple of kv_num_heads {nkv}"
        ));
    }
    // qk_norm_epsilon only matters with q_norm_weight / k_norm_weight (inputs 14, 15: declined).
    let window = node.attr_i64("local_window_size").unwrap_or(-1);
    if window != -1 && !(1..=i64::from(i32::MAX)).contains(&window) {
        return Err(format!(
            "local_window_size {window} is not implemented (-1 or 1..=2^31-1)"
        ));
    }
    match node.attr_i64("sliding_window_cache").unwrap_or(0) {
        0 => {}
        1 if quant.is_some() => {
            return Err(
                "sliding_window_cache = 1 with a quantized KV cache is not implemented".into(),
            )
        }
        1 if window > 0 => {}
        1 => return Err("sliding_window_cache = 1 without local_window_size > 0".into()),
        v => return Err(format!("sliding_window_cache {v} is not implemented")),
    }
    let defaults = [("qk_output", 0), ("causal", 1)];
    for (a, want) in defaults {
        if node.attr_i64(a).unwrap_or(want) != want {
            return Err(format!("{a} other than {want} is not implemented"));
        }
    }
    // The schema default -1 and 0 both mean plain softmax (ORT: smooth only when 1).
    if !matches!(node.attr_i64("smooth_softmax").unwrap_or(0), -1..=1) {
        return Err("smooth_softmax other than -1, 0 or 1 is not implemented".into());
    }
    let cap = node.attr_f32("softcap").unwrap_or(0.0);
    if !(cap.is_finite() && cap >= 0.0) {
        return Err(format!("softcap {cap} is not implemented (finite, >= 0)"));
    }
    let rotary = node.attr_i64("do_rotary").unwrap_or(0);
    if !matches!(rotary, 0 | 1)
        || !matches!(node.attr_i64("rotary_interleaved").unwrap_or(0), 0 | 1)
    {
        return Err("do_rotary / rotary_interleaved must be 0 or 1".into());
    }
    require_elem(node, 0, F32)?;
    let w: Vec<bool> = (0..16)
        .map(|i| wired(node, i))
        .collect::<std::result::Result<_, _>>()?;
    if w[1] != w[2] || w[3] != w[4] || w[7] != w[8] {
        return Err("key/value, past_key/past_value and cos/sin must be wired in pairs".into());
    }
    for i in [1, 2] {
        if w[i] {
            require_elem(node, i, F32)?;
        }
    }
    let cache = match quant {
        None => F32,
        Some(q) if q.bits == 8 => I8,
        Some(_) => U8,
    };
    for i in [3, 4] {
        if w[i] {
            require_elem(node, i, cache)?;
        }
    }
    if quant.is_some() {
        if !(w[12] && w[13]) {
            return Err("a quantized KV cache without k_scale and v_scale".into());
        }
        require_elem(node, 12, F32)?;
        require_elem(node, 13, F32)?;
    }
    require_elem(node, 5, I32)?;
    require_elem(node, 6, I32)?;
    if w[7] != (rotary == 1) {
        return Err("cos_cache/sin_cache are wired exactly when do_rotary = 1 here".into());
    }
    if w[7] {
        require_elem(node, 7, F32)?;
        require_elem(node, 8, F32)?;
    }
    if w[11] {
        require_elem(node, 11, F32)?;
    }
    let scales = |i: usize| quant.is_some() && (i == 12 || i == 13);
    if let Some(i) = (9..16).find(|&i| w[i] && i != 11 && !scales(i)) {
        return Err(format!(
            "input {i} (position_ids / attention_bias / KV scales without quantization / q-k \
             norms) is not implemented"
        ));
    }
    for o in 0..3 {
        if !output_wired(node, o)? {
            return Err(format!("output {o} is not wired"));
        }
    }
    if output_wired(node, 3)? {
        return Err("output_qk is not implemented".into());
    }
    let outs = node.outputs().map_err(|e| e.msg)?;
    for (o, want) in [(0, F32), (1, cache), (2, cache)] {
        let t = outs.get(o).copied().flatten();
        if let Some(t) = t
            .map(|v| v.tensor_type())
            .transpose()
            .map_err(|e| e.msg)?
            .flatten()
        {
            if t.elem != want {
                return Err(format!("output {o}'s element type is not the cache's"));
            }
        }
    }
    Ok(())
}

/// The KV cache quantization of `k_quant_type` / `v_quant_type` / `kv_cache_bit_width` (`None`:
/// an f32 cache), or why rcpu declines it. ORT 1.31's CPU EP computes both types equal, either
/// `PER_TENSOR` or `PER_CHANNEL`, with bit width 8 (an int8 cache) or 4 (uint8, two codes a
/// byte); it fails every other quantized pairing (different types, another bit width, a bit
/// width without quantization), so those stay on ORT, which reports them.
fn kv_quant(
    k: Option<String>,
    v: Option<String>,
    bits: Option<i64>,
) -> std::result::Result<Option<Quant>, Decline> {
    let none = |t: &Option<String>| t.as_deref().is_none_or(|t| t.eq_ignore_ascii_case("NONE"));
    if none(&k) && none(&v) {
        return match bits.unwrap_or(0) {
            0 => Ok(None),
            b => Err(format!(
                "kv_cache_bit_width {b} without KV quantization (ORT fails it)"
            )),
        };
    }
    let per_channel = match (k.as_deref(), v.as_deref()) {
        (Some("PER_TENSOR"), Some("PER_TENSOR")) => false,
        (Some("PER_CHANNEL"), Some("PER_CHANNEL")) => true,
        (k, v) => {
            return Err(format!(
                "k_quant_type {k:?} with v_quant_type {v:?} is not implemented (ORT's CPU EP \
                 takes both PER_TENSOR or both PER_CHANNEL)"
            ))
        }
    };
    match bits {
        Some(8) => Ok(Some(Quant {
            bits: 8,
            per_channel,
        })),
        Some(4) => Ok(Some(Quant {
            bits: 4,
            per_channel,
        })),
        b => Err(format!(
            "kv_cache_bit_width {} with a quantized KV cache is not implemented (4 or 8)",
            b.unwrap_or(0)
        )),
    }
}

fn create(info: &KernelInfo<'_>, env: &Arc<KernelEnv>) -> Result<Box<dyn OpKernel>> {
    let heads = usize::try_from(info.attr_i64("num_heads").unwrap_or(0)).unwrap_or(0);
    let kv_heads = usize::try_from(info.attr_i64("kv_num_heads").unwrap_or(0)).unwrap_or(0);
    if heads == 0 || kv_heads == 0 || heads % kv_heads != 0 {
        return Err(bad(format!(
            "num_heads {heads} is not a positive multiple of kv_num_heads {kv_heads}"
        )));
    }
    Ok(Box::new(Gqa {
        heads,
        kv_heads,
        scale: info.attr_f32("scale").unwrap_or(0.0),
        // The claim took -1 or 1..=i32::MAX, and a finite softcap >= 0.
        window: usize::try_from(info.attr_i64("local_window_size").unwrap_or(-1)).unwrap_or(0),
        softcap: info.attr_f32("softcap").unwrap_or(0.0),
        windowed: info.attr_i64("sliding_window_cache").unwrap_or(0) == 1,
        smooth: info.attr_i64("smooth_softmax").unwrap_or(0) == 1,
        rotary: (info.attr_i64("do_rotary").unwrap_or(0) == 1)
            .then(|| info.attr_i64("rotary_interleaved").unwrap_or(0) == 1),
        quant: kv_quant(
            info.attr_string("k_quant_type"),
            info.attr_string("v_quant_type"),
            info.attr_i64("kv_cache_bit_width"),
        )
        .map_err(bad)?,
        env: env.clone(),
    }))
}

pub const GROUP_QUERY_ATTENTION: OpDef = OpDef {
    op: OP,
    domain: "com.microsoft",
    since: 1,
    until: 1,
    types: &[
        ("T", types::F32),
        ("T_CACHE", CACHE_TYPES),
        ("T_KV_SCALE", types::F32),
        ("M", types::I32),
    ],
    claim,
    create,
};
