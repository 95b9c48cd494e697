//! com.microsoft.QMoE (opset 1) as an ORT kernel: the mixture-of-experts block of the model
//! builder's gpt-oss, Phi-3.5-MoE and Qwen-MoE models. Claimed for float32 activations, integer
//! experts (`quant_type` "int") of 4 or 8 bits with block-wise float32 or float16 scales
//! (float16 ones widened exactly at creation; the model builder writes float32 for an f32 model,
//! float16 for an f16 one) (`block_size` a power of two in 16..=256 dividing both the hidden and the expert width), optional uint8 zero
//! points, optional fc1 / fc2 biases, optional `router_weights`, SwiGLU interleaved in fc1
//! (`swiglu_fusion` 1) or SiLU / GELU / ReLU / identity (`swiglu_fusion` 0), accuracy levels 0,
//! 1 (f32 products) and 4 (int8 activations). Every expert tensor must be a constant
//! initializer. Declined, with the reason: f16 / bf16 activations, bf16 scales, row-wise scales (no
//! `block_size`), fc3 (ORT's CPU kernel does not implement it either), the FP4 / FP8 quant types,
//! per-projection bit widths that differ, MLAS-prepacked weights, global and activation scales.
//!
//! Each expert's fc1 (`[2I or I, H]`) and fc2 (`[H, I]`) is a MatMulNBits weight in ORT's own
//! layout; they pack at creation, one weight-cache entry per expert and projection, so a
//! session whose budget cannot hold every expert keeps the ones it could pack and computes
//! the others from ORT's tensors (which it then keeps). The routing, the activation and the
//! sum over experts are `kernels::moe`.

use std::sync::Arc;

use crate::abi::graph::Node;
use crate::abi::kernel_context::KernelContext;
use crate::abi::kernel_info::KernelInfo;
use crate::abi::status::{Error, Result};
use crate::abi::tensor::{ElemType, F16Bits, Tensor};
use crate::ep::op::{types, Decline, KernelEnv, OpDef, OpKernel};
use crate::kernels::cast::f16_to_f32_buf;
use crate::kernels::matmul_nbits::reference::hostile_scales;
use crate::kernels::matmul_nbits::{NBitsParams, NBitsWeight, PackedNBits};
use crate::kernels::moe::{self, Expert, ExpertMatrix, MoeActivation, MoeShape};
use crate::kernels::shape::checked_numel;
use crate::memory::CachedWeight;
use crate::runtime::par::{take_lanes_used, Serial};
use crate::telemetry::ledger;

use super::claim::{input, input_type, only_attrs, require_elem, require_output_elem, F32};
use super::matmul_nbits::{copy_const, pack_cached};

const OP: &str = "QMoE";
const U8: ElemType = ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8;
const F16: ElemType = ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;

const IN_X: usize = 0;
const IN_ROUTER: usize = 1;
const IN_FC1: usize = 2;
const IN_FC1_SCALES: usize = 3;
const IN_FC1_BIAS: usize = 4;
const IN_FC2: usize = 5;
const IN_FC2_SCALES: usize = 6;
const IN_FC2_BIAS: usize = 7;
const IN_FC1_ZP: usize = 11;
const IN_FC2_ZP: usize = 12;
const IN_ROUTER_WEIGHTS: usize = 14;
/// fc3 (weights, scales, bias, zero points), then the FP4 / FP8 global and activation scales.
const UNSUPPORTED_INPUTS: [(usize, &str); 10] = [
    (8, "fc3_experts_weights"),
    (9, "fc3_scales"),
    (10, "fc3_experts_bias"),
    (13, "fc3_zero_points"),
    (15, "fc1_global_scale"),
    (16, "fc2_global_scale"),
    (17, "fc1_act_scale"),
    (18, "fc2_act_scale"),
    (19, "fc1_act_block_scale"),
    (20, "fc2_act_block_scale"),
];

const ATTRS: [&str; 16] = [
    "k",
    "activation_type",
    "activation_alpha",
    "activation_beta",
    "swiglu_limit",
    "swiglu_fusion",
    "normalize_routing_weights",
    "use_sparse_mixer",
    "expert_weight_bits",
    "fc1_expert_weight_bits",
    "fc2_expert_weight_bits",
    "fc3_expert_weight_bits",
    "block_size",
    "accuracy_level",
    "quant_type",
    "weights_prepacked",
];

/// A node's attributes, read through `get_i` / `get_f` / `get_s` (a graph node at claim time,
/// the kernel info at creation), checked.
struct Attrs {
    top_k: usize,
    act: MoeActivation,
    normalize: bool,
    bits: usize,
    block: usize,
    /// 0 (f32 products) or 4 (int8 activations): ORT treats every other level as 0.
    accuracy: usize,
}

fn read_attrs(
    get_i: impl Fn(&str) -> Option<i64>,
    get_f: impl Fn(&str) -> Option<f32>,
    get_s: impl Fn(&str) -> Option<String>,
) -> std::result::Result<Attrs, String> {
    if let Some(q) = get_s("quant_type").filter(|q| q != "int") {
        return Err(format!("quant_type '{q}' is not implemented (int)"));
    }
    if let Some(v) = get_i("weights_prepacked").filter(|&v| v > 0) {
        return Err(format!(
            "weights_prepacked={v} (another EP's packed layout) is not implemented"
        ));
    }
    let bits = get_i("expert_weight_bits").unwrap_or(4);
    if bits != 4 && bits != 8 {
        return Err(format!(
            "expert_weight_bits={bits} is not implemented (4 and 8)"
        ));
    }
    for name in [
        "fc1_expert_weight_bits",
        "fc2_expert_weight_bits",
        "fc3_expert_weight_bits",
    ] {
        if let Some(v) = get_i(name).filter(|&v| v != bits) {
            return Err(format!(
                "{name}={v} differs from expert_weight_bits={bits} (mixed widths are not implemented)"
            ));
        }
    }
    let block = match get_i("block_size") {
        None | Some(0) => {
            return Err("row-wise scales (no block_size) are not implemented".into());
        }
        Some(b) if b > 0 && (b as u64).is_power_of_two() && (16..=256).contains(&b) => b as usize,
        Some(b) => {
            return Err(format!(
                "block_size={b} is not implemented (a power of two in 16..=256)"
            ))
        }
    };
    let k = get_i("k").unwrap_or(1);
    let top_k = usize::try_from(k)
        .ok()
        .filter(|&k| k >= 1)
        .ok_or_else(|| format!("k={k} must be at least 1"))?;
    let name = get_s("activation_type").unwrap_or_else(|| "relu".into());
    let act = MoeActivation::from_name(
        &name,
        get_f("activation_alpha").unwrap_or(1.0),
        get_f("activation_beta").unwrap_or(0.0),
        get_f("swiglu_limit").unwrap_or(f32::INFINITY),
    )
    .ok_or_else(|| format!("activation_type '{name}' is not implemented"))?;
    let fusion = get_i("swiglu_fusion").unwrap_or(0);
    match (act, fusion) {
        (MoeActivation::SwiGlu { .. }, 1) => {}
        (MoeActivation::SwiGlu { .. }, f) => {
            return Err(format!(
                "swiglu_fusion={f} with swiglu is not implemented (1: interleaved, as ORT's CPU EP)"
            ))
        }
        (_, 0) => {}
        (_, f) => {
            return Err(format!(
                "swiglu_fusion={f} with activation '{name}' is not implemented"
            ))
        }
    }
    // ORT's CPU kernel requires k = 2 with the sparse mixer and otherwise routes as without it.
    if get_i("use_sparse_mixer").unwrap_or(0) == 1 && top_k != 2 {
        return Err(format!(
            "use_sparse_mixer=1 with k={top_k} (ORT requires k=2)"
        ));
    }
    Ok(Attrs {
        top_k,
        act,
        normalize: get_i("normalize_routing_weights").unwrap_or(0) == 1,
        bits: bits as usize,
        block,
        accuracy: if get_i("accuracy_level") == Some(4) {
            4
        } else {
            0
        },
    })
}

/// The node's sizes from its expert weights' shapes: fc1 `[E, fc1_cols, H * bits / 8]`, fc2
/// `[E, H, I * bits / 8]`; checked against each other, the activation and the block size.
fn shape_from(fc1: &[usize], fc2: &[usize], a: &Attrs) -> std::result::Result<MoeShape, String> {
    let (&[e1, n1, kb1], &[e2, n2, kb2]) = (fc1, fc2) else {
        return Err(format!(
            "expert weights must be 3-D, got fc1 {fc1:?} and fc2 {fc2:?}"
        ));
    };
    let per_byte = 8 / a.bits;
    let hidden = kb1
        .checked_mul(per_byte)
        .ok_or("fc1's row length overflows")?;
    let inter = kb2
        .checked_mul(per_byte)
        .ok_or("fc2's row length overflows")?;
    let shape = MoeShape {
        experts: e1,
        hidden,
        inter,
        top_k: a.top_k,
    };
    shape.validate()?;
    let want_n1 = a.act.fc1_cols(inter).ok_or("fc1's width overflows")?;
    if e2 != e1 || n2 != hidden || n1 != want_n1 {
        return Err(format!(
            "expert weights fc1 {fc1:?} and fc2 {fc2:?} do not agree: expected fc1 [E, {want_n1}, H*bits/8] \
             and fc2 [E, H={hidden}, I*bits/8]"
        ));
    }
    if !hidden.is_multiple_of(a.block) || !inter.is_multiple_of(a.block) {
        return Err(format!(
            "hidden size {hidden} and expert size {inter} must be multiples of block_size {}",
            a.block
        ));
    }
    Ok(shape)
}

/// The MatMulNBits params of one expert's fc1 and fc2.
fn projection_params(
    s: &MoeShape,
    a: &Attrs,
    zp: [bool; 2],
) -> std::result::Result<[NBitsParams; 2], String> {
    let f1 = a.act.fc1_cols(s.inter).ok_or("fc1's width overflows")?;
    let p1 = NBitsParams::new(s.hidden, f1, a.block, a.accuracy, zp[0]).with_bits(a.bits);
    let p2 = NBitsParams::new(s.inter, s.hidden, a.block, a.accuracy, zp[1]).with_bits(a.bits);
    p1.validate()?;
    p2.validate()?;
    Ok([p1, p2])
}

/// The element counts of one projection's inputs for all `e` experts: codes, scales, zero
/// points, bias.
fn projection_lens(p: &NBitsParams, e: usize) -> Option<[usize; 4]> {
    let [b, s, z] = p.implied_lens()?;
    Some([
        b.checked_mul(e)?,
        s.checked_mul(e)?,
        z.checked_mul(e)?,
        p.n.checked_mul(e)?,
    ])
}

fn claim(node: &Node<'_>) -> std::result::Result<(), Decline> {
    only_attrs(node, &ATTRS)?;
    let a = read_attrs(
        |n| node.attr_i64(n),
        |n| node.attr_f32(n),
        |n| node.attr_string(n),
    )?;
    require_elem(node, IN_X, F32)?;
    require_elem(node, IN_ROUTER, F32)?;
    require_output_elem(node, F32)?;
    for (i, name) in UNSUPPORTED_INPUTS {
        if input(node, i)?.is_some() {
            return Err(format!("input {name} is not implemented"));
        }
    }
    let zp = [
        input(node, IN_FC1_ZP)?.is_some(),
        input(node, IN_FC2_ZP)?.is_some(),
    ];
    let mut constants = vec![
        (IN_FC1, U8),
        (IN_FC1_SCALES, scales_elem(node, IN_FC1_SCALES)?),
        (IN_FC2, U8),
        (IN_FC2_SCALES, scales_elem(node, IN_FC2_SCALES)?),
    ];
    for (there, i, elem) in [
        (zp[0], IN_FC1_ZP, U8),
        (zp[1], IN_FC2_ZP, U8),
        (input(node, IN_FC1_BIAS)?.is_some(), IN_FC1_BIAS, F32),
        (input(node, IN_FC2_BIAS)?.is_some(), IN_FC2_BIAS, F32),
    ] {
        if there {
            constants.push((i, elem));
        }
    }
    let mut dims = Vec::new();
    for (i, elem) in constants {
        let t = require_elem(node, i, elem)?;
        let v = input(node, i)?.ok_or_else(|| format!("input {i} is missing"))?;
        if !v.is_constant_initializer() {
            return Err(format!(
                "input {i} is not a constant initializer (expert tensors fed at run time are not implemented)"
            ));
        }
        dims.push(t.static_dims());
    }
    if input(node, IN_ROUTER_WEIGHTS)?.is_some() {
        require_elem(node, IN_ROUTER_WEIGHTS, F32)?;
    }
    // The weights' shapes (initializers: known) define every size; the other tensors must match.
    let (Some(fc1), Some(fc2)) = (&dims[0], &dims[2]) else {
        return Err("the expert weights' shapes are not known".into());
    };
    let shape = shape_from(fc1, fc2, &a)?;
    let [p1, p2] = projection_params(&shape, &a, zp)?;
    let (l1, l2) = (
        projection_lens(&p1, shape.experts).ok_or("fc1's sizes overflow")?,
        projection_lens(&p2, shape.experts).ok_or("fc2's sizes overflow")?,
    );
    let check = |i: usize, want: usize, what: &str| -> std::result::Result<(), Decline> {
        if let Some(t) = input_type(node, i)? {
            if let Some(d) = t.static_dims() {
                let n = checked_numel(what, &d)?;
                if n != want {
                    return Err(format!(
                        "{what} has shape {d:?} ({n} values), expected {want}"
                    ));
                }
            }
        }
        Ok(())
    };
    check(IN_FC1_SCALES, l1[1], "fc1_scales")?;
    check(IN_FC2_SCALES, l2[1], "fc2_scales")?;
    if zp[0] {
        check(IN_FC1_ZP, l1[2], "fc1_zero_points")?;
    }
    if zp[1] {
        check(IN_FC2_ZP, l2[2], "fc2_zero_points")?;
    }
    check(IN_FC1_BIAS, l1[3], "fc1_experts_bias")?;
    check(IN_FC2_BIAS, l2[3], "fc2_experts_bias")?;
    if let Some(x) = input_type(node, IN_X)? {
        if let Some(&last) = x.dims.last() {
            if last >= 0 && last as usize != shape.hidden {
                return Err(format!(
                    "input has last dimension {last}, the experts' hidden size is {}",
                    shape.hidden
                ));
            }
        }
    }
    if let Some(r) = input_type(node, IN_ROUTER)? {
        if let Some(&last) = r.dims.last() {
            if last >= 0 && last as usize != shape.experts {
                return Err(format!(
                    "router_probs has {last} experts, the weights {}",
                    shape.experts
                ));
            }
        }
    }
    Ok(())
}

/// The element type of scales input `i`: float32, or float16 (what the model builder writes for f16 models;
/// widened to f32 exactly at creation).
fn scales_elem(node: &Node<'_>, i: usize) -> std::result::Result<ElemType, Decline> {
    let t = input_type(node, i)?.ok_or_else(|| format!("input {i} (scales) is missing"))?;
    if t.elem == F32 || t.elem == F16 {
        Ok(t.elem)
    } else {
        Err(format!(
            "input {i} (scales) is {}, rcpu implements float32 and float16",
            crate::abi::tensor::elem_name(t.elem)
        ))
    }
}

/// Scales input `t` (float32 or float16) as f32 values: borrowed, or widened into a fallible copy.
fn scales_f32<'a>(t: &Tensor<'a>, which: &str) -> Result<std::borrow::Cow<'a, [f32]>> {
    if t.elem() == F16 {
        let h = t.data::<F16Bits>()?;
        let mut v = crate::memory::try_vec(h.len(), 0f32).map_err(|e| {
            Error::fail(format!(
                "cannot widen {which}'s f16 scales ({} values): {e}",
                h.len()
            ))
        })?;
        f16_to_f32_buf(h, &mut v, &Serial).map_err(Error::fail)?;
        Ok(std::borrow::Cow::Owned(v))
    } else {
        Ok(std::borrow::Cow::Borrowed(t.data::<f32>()?))
    }
}

/// One projection (fc1 or fc2) of every expert.
struct Projection {
    /// One expert's params.
    p: NBitsParams,
    /// Input indices of the codes, scales and zero points.
    inputs: [usize; 3],
    /// Per expert: its packed weight (`None`: the cache declined it, or its scales are hostile).
    packed: Vec<Option<Arc<CachedWeight<PackedNBits>>>>,
    /// Per expert: scales no model has (see `hostile_scales`), computed literally.
    hostile: Vec<bool>,
    /// The biases of all experts, `[E, N]`, copied at creation.
    bias: Option<Vec<f32>>,
    /// The scales of all experts as f32, kept only when some expert did not pack (its unpacked
    /// path reads them; ORT's own may be float16).
    scales: Option<Vec<f32>>,
}

impl Projection {
    fn all_packed(&self) -> bool {
        self.packed.iter().all(Option::is_some)
    }

    /// Packs every expert from the constant inputs (`info`), through the weight cache.
    fn create(
        info: &KernelInfo<'_>,
        p: NBitsParams,
        experts: usize,
        inputs: [usize; 3],
        bias_input: usize,
        which: &str,
    ) -> Result<Projection> {
        let lens = projection_lens(&p, experts)
            .ok_or_else(|| Error::invalid_argument(format!("{which}'s sizes overflow")))?;
        let constant = |i: usize| -> Result<Tensor<'_>> {
            info.constant_input(i)?.ok_or_else(|| {
                Error::invalid_argument(format!(
                    "input {i} of {which} is not a constant initializer"
                ))
            })
        };
        let sized = |t: &Tensor<'_>, want: usize, what: &str| -> Result<()> {
            if t.len() != want {
                return Err(Error::invalid_argument(format!(
                    "{which} {what} has shape {:?} ({} values), expected {want}",
                    t.shape(),
                    t.len()
                )));
            }
            Ok(())
        };
        let codes_t = constant(inputs[0])?;
        sized(&codes_t, lens[0], "weights")?;
        let scales_t = constant(inputs[1])?;
        sized(&scales_t, lens[1], "scales")?;
        let zp_t = if p.has_zero_points {
            let t = constant(inputs[2])?;
            sized(&t, lens[2], "zero points")?;
            Some(t)
        } else {
            None
        };
        let bias = match info.input_count()? > bias_input {
            true => match info.input_type(bias_input) {
                Ok(Some(_)) => {
                    sized(&constant(bias_input)?, lens[3], "bias")?;
                    copy_const::<f32>(info, bias_input)?
                }
                _ => None,
            },
            false => None,
        };
        let codes = codes_t.data::<u8>()?;
        let scales = scales_f32(&scales_t, which)?;
        let zps = match &zp_t {
            Some(t) => Some(t.data::<u8>()?),
            None => None,
        };
        let [cb, sc, zb] = p
            .implied_lens()
            .ok_or_else(|| Error::invalid_argument(format!("{which}'s sizes overflow")))?;
        let mut packed = Vec::new();
        packed
            .try_reserve_exact(experts)
            .map_err(|e| Error::fail(format!("{which}: {e}")))?;
        let mut hostile = crate::memory::try_vec(experts, false)
            .map_err(|e| Error::fail(format!("{which}: {e}")))?;
        for e in 0..experts {
            let b = &codes[e * cb..(e + 1) * cb];
            let s = &scales[e * sc..(e + 1) * sc];
            let z = zps.map(|z| &z[e * zb..(e + 1) * zb]);
            hostile[e] = hostile_scales(s, &p);
            packed.push(if hostile[e] {
                None
            } else {
                pack_cached(b, s, z, &p)
            });
        }
        let scales = match packed.iter().all(Option::is_some) {
            true => None,
            false => Some(match scales {
                std::borrow::Cow::Owned(v) => v,
                std::borrow::Cow::Borrowed(b) => crate::memory::try_copy(b).map_err(|e| {
                    Error::fail(format!(
                        "cannot copy {which}'s scales ({} values): {e}",
                        b.len()
                    ))
                })?,
            }),
        };
        Ok(Projection {
            p,
            inputs,
            packed,
            hostile,
            bias,
            scales,
        })
    }

    /// Expert `e`'s matrix: packed, or read from ORT's tensors (`ort`: present whenever some
    /// expert did not pack).
    fn matrix<'a>(&'a self, e: usize, ort: Option<&OrtExperts<'a>>) -> ExpertMatrix<'a> {
        if let Some(w) = &self.packed[e] {
            return ExpertMatrix::Packed(w);
        }
        let Some(t) = ort else {
            unreachable!("an unpacked expert without its tensors");
        };
        let [cb, sc, zb] = self.p.implied_lens().expect("checked at creation");
        let w = NBitsWeight {
            b: &t.codes[e * cb..(e + 1) * cb],
            scales: &t.scales[e * sc..(e + 1) * sc],
            zero_points: self
                .p
                .has_zero_points
                .then(|| &t.zero_points[e * zb..(e + 1) * zb]),
            p: &self.p,
        };
        if self.hostile[e] {
            ExpertMatrix::Literal(w)
        } else {
            ExpertMatrix::Unpacked(w)
        }
    }

    /// ORT's tensors of this projection for one call, when some expert did not pack (`None`
    /// when all did: ORT may have freed them).
    fn ort_tensors<'a>(
        &'a self,
        ctx: &KernelContext<'a>,
        experts: usize,
    ) -> Result<Option<OrtExperts<'a>>> {
        if self.all_packed() {
            return Ok(None);
        }
        let codes = ctx.required_input(self.inputs[0])?.data::<u8>()?;
        let scales = self.scales.as_deref().unwrap_or(&[]);
        let zero_points = match self.p.has_zero_points {
            true => ctx.required_input(self.inputs[2])?.data::<u8>()?,
            false => &[],
        };
        let lens = projection_lens(&self.p, experts).expect("checked at creation");
        let zp_len = if self.p.has_zero_points { lens[2] } else { 0 };
        if codes.len() != lens[0] || scales.len() != lens[1] || zero_points.len() != zp_len {
            return Err(Error::invalid_argument(
                "an expert tensor changed size after creation",
            ));
        }
        Ok(Some(OrtExperts {
            codes,
            scales,
            zero_points,
        }))
    }

    fn bias(&self, e: usize) -> Option<&[f32]> {
        self.bias
            .as_deref()
            .map(|b| &b[e * self.p.n..(e + 1) * self.p.n])
    }
}

/// One projection's tensors as ORT holds them (all experts, ORT's layout).
struct OrtExperts<'a> {
    codes: &'a [u8],
    scales: &'a [f32],
    /// Empty without zero points.
    zero_points: &'a [u8],
}

struct QMoe {
    shape: MoeShape,
    act: MoeActivation,
    normalize: bool,
    fc1: Projection,
    fc2: Projection,
    env: Arc<KernelEnv>,
}

fn create(info: &KernelInfo<'_>, env: &Arc<KernelEnv>) -> Result<Box<dyn OpKernel>> {
    let a = read_attrs(
        |n| info.attr_i64(n),
        |n| info.attr_f32(n),
        |n| info.attr_string(n),
    )
    .map_err(|e| info.error(OP, e))?;
    let n_inputs = info.input_count()?;
    let present = |i: usize| n_inputs > i && matches!(info.input_type(i), Ok(Some(_)));
    let dims = |i: usize| -> Result<Vec<usize>> {
        let t = info
            .constant_input(i)?
            .ok_or_else(|| info.error(OP, format!("input {i} is not a constant initializer")))?;
        Ok(t.shape().to_vec())
    };
    let shape = shape_from(&dims(IN_FC1)?, &dims(IN_FC2)?, &a).map_err(|e| info.error(OP, e))?;
    let zp = [present(IN_FC1_ZP), present(IN_FC2_ZP)];
    let [p1, p2] = projection_params(&shape, &a, zp).map_err(|e| info.error(OP, e))?;
    // float16 scales pack as f16 wherever f16 holds them exactly: fewer bytes
    // for decode to stream, the same results.
    let half = |i: usize| matches!(info.input_type(i), Ok(Some(t)) if t.elem == F16);
    let (p1, p2) = (
        p1.with_acc4_f16_scales(env.acc4_f16_scales)
            .with_f16_source_scales(half(IN_FC1_SCALES)),
        p2.with_acc4_f16_scales(env.acc4_f16_scales)
            .with_f16_source_scales(half(IN_FC2_SCALES)),
    );
    let fc1 = Projection::create(
        info,
        p1,
        shape.experts,
        [IN_FC1, IN_FC1_SCALES, IN_FC1_ZP],
        IN_FC1_BIAS,
        "fc1",
    )
    .map_err(|e| info.error(OP, e.msg))?;
    let fc2 = Projection::create(
        info,
        p2,
        shape.experts,
        [IN_FC2, IN_FC2_SCALES, IN_FC2_ZP],
        IN_FC2_BIAS,
        "fc2",
    )
    .map_err(|e| info.error(OP, e.msg))?;
    Ok(Box::new(QMoe {
        shape,
        act: a.act,
        normalize: a.normalize,
        fc1,
        fc2,
        env: env.clone(),
    }))
}

impl OpKernel for QMoe {
    fn prepack(&mut self, input_index: usize, _tensor: &Tensor<'_>) -> Result<bool> {
        // Every expert tensor was read at creation: the packed weights and the bias copies are
        // all `compute` reads, unless some expert did not pack (then ORT keeps that projection's
        // codes, scales and zero points).
        Ok(match input_index {
            // The scales are packed, or copied as f32 for the experts that did not pack.
            IN_FC1_SCALES | IN_FC2_SCALES => true,
            IN_FC1 | IN_FC1_ZP => self.fc1.all_packed(),
            IN_FC2 | IN_FC2_ZP => self.fc2.all_packed(),
            IN_FC1_BIAS => self.fc1.bias.is_some(),
            IN_FC2_BIAS => self.fc2.bias.is_some(),
            _ => false,
        })
    }

    fn compute(&self, ctx: &KernelContext<'_>) -> Result<()> {
        let s = &self.shape;
        let x = ctx.required_input(IN_X)?;
        let xs = x.shape();
        if !(2..=3).contains(&xs.len()) || xs[xs.len() - 1] != s.hidden {
            return Err(Error::invalid_argument(format!(
                "input has shape {xs:?}, expected [tokens, {h}] or [batch, sequence, {h}]",
                h = s.hidden
            )));
        }
        let tokens =
            checked_numel("input", &xs[..xs.len() - 1]).map_err(Error::invalid_argument)?;
        let router = ctx.required_input(IN_ROUTER)?;
        if router.shape() != [tokens, s.experts] {
            return Err(Error::invalid_argument(format!(
                "router_probs has shape {:?}, expected [{tokens}, {}]",
                router.shape(),
                s.experts
            )));
        }
        let rw_t = ctx.input(IN_ROUTER_WEIGHTS)?;
        if let Some(t) = &rw_t {
            if t.shape() != [tokens, s.experts] {
                return Err(Error::invalid_argument(format!(
                    "router_weights has shape {:?}, expected [{tokens}, {}]",
                    t.shape(),
                    s.experts
                )));
            }
        }
        let out = ctx.output(0, xs)?.into_data::<f32>()?;
        let x = x.data::<f32>()?;
        let rw = match &rw_t {
            Some(t) => Some(t.data::<f32>()?),
            None => None,
        };
        let routes = moe::route_tokens(
            router.data::<f32>()?,
            rw,
            tokens,
            s.experts,
            s.top_k,
            self.normalize,
        )
        .map_err(Error::invalid_argument)?;
        let (t1, t2) = (
            self.fc1.ort_tensors(ctx, s.experts)?,
            self.fc2.ort_tensors(ctx, s.experts)?,
        );
        let expert = |e: usize| Expert {
            fc1: self.fc1.matrix(e, t1.as_ref()),
            fc1_bias: self.fc1.bias(e),
            fc2: self.fc2.matrix(e, t2.as_ref()),
            fc2_bias: self.fc2.bias(e),
        };
        let par = &*self.env.par;
        let route =
            moe::run(x, tokens, s, &self.act, &routes, &expert, out, par).map_err(Error::fail)?;
        ledger::record(OP, route.text(), take_lanes_used());
        Ok(())
    }
}

pub const QMOE: OpDef = OpDef {
    op: OP,
    domain: "com.microsoft",
    since: 1,
    until: 1,
    types: &[("T", types::F32), ("T1", types::U8), ("T2", types::F32_F16)],
    claim,
    create,
};
