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
//!
//! A node whose every expert packed also goes to and comes from a context file
//! (`export_packed`, `import_packed`; `ep::context`): the file holds each expert's packed
//! weight in place of the codes, scales and zero points (the biases stay raw constants: they
//! are copied at creation). Loaded from such a file, `create` finds those constants absent and
//! builds projections awaiting the import, which adopts every expert as a view of the mapped
//! file; the kernel is then in the state `create` leaves after packing every expert.

use std::sync::Arc;

use crate::abi::graph::Node;
use crate::abi::kernel_context::KernelContext;
use crate::abi::kernel_info::KernelInfo;
use crate::abi::status::{Error, Result};
use crate::abi::tensor::{ElemType, F16Bits, Tensor};
use crate::ep::op::{types, Decline, KernelEnv, OpDef, OpKernel, PackedExport, PackedImport};
use crate::kernels::cast::f16_to_f32_buf;
use crate::kernels::matmul_nbits::reference::hostile_scales;
use crate::kernels::matmul_nbits::{NBitsParams, NBitsWeight, PackedNBits};
use crate::kernels::moe::{self, Expert, ExpertMatrix, MoeActivation, MoeRoute, MoeShape, Routes};
use crate::kernels::shape::checked_numel;
use crate::memory::CachedWeight;
use crate::os::mapped::FileSlice;
use crate::runtime::par::{take_lanes_used, Serial};
use crate::telemetry::ledger;

use super::adopt;
use super::claim::{input, input_type, only_attrs, require_elem, require_output_elem, F32};
use super::matmul_nbits::{copy_const, import_nbits, nbits_file_bytes, pack_cached};

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
    /// "fc1" or "fc2", for messages.
    which: &'static str,
    /// One expert's params.
    p: NBitsParams,
    /// Input indices of the codes, scales and zero points.
    inputs: [usize; 3],
    /// Per expert: its packed weight (`None`: the cache declined it, or its scales are hostile,
    /// or an import is awaited).
    packed: Vec<Option<Arc<CachedWeight<PackedNBits>>>>,
    /// Per expert: scales no model has (see `hostile_scales`), computed literally.
    hostile: Vec<bool>,
    /// The biases of all experts, `[E, N]`, copied at creation.
    bias: Option<Vec<f32>>,
    /// The scales of all experts as f32, kept only when some expert did not pack (its unpacked
    /// path reads them; ORT's own may be float16).
    scales: Option<Vec<f32>>,
    /// The codes, scales and zero points were left out of the context file this node was
    /// loaded from, which holds their packed form instead: no expert is packed until
    /// `import_packed` adopts them all, and `compute` refuses to run before (there are no
    /// tensors to fall back on).
    awaiting_import: bool,
}

impl Projection {
    fn all_packed(&self) -> bool {
        self.packed.iter().all(Option::is_some)
    }

    /// `Err` while the projection awaits its import (`awaiting_import`): nothing to compute
    /// from, neither packed weights nor tensors.
    fn ready(&self) -> Result<()> {
        if self.awaiting_import {
            return Err(Error::fail(format!(
                "QMoE {}: the experts' packed weights were never imported from the context \
                 file (the file holds no tensors to compute from)",
                self.which
            )));
        }
        Ok(())
    }

    /// The projection from the constant inputs (`info`): every expert packed through the
    /// weight cache, or, when the codes, scales or zero points are constants whose bytes a
    /// context file left out (their packed form is imported instead), awaiting that import.
    fn create(
        info: &KernelInfo<'_>,
        p: NBitsParams,
        experts: usize,
        inputs: [usize; 3],
        bias_input: usize,
        which: &'static str,
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
        // The packed inputs, with their sizes: an omitted one (a constant whose bytes are not
        // at hand) is checked by its layout.
        let mut packed_inputs = vec![
            (inputs[0], lens[0], "weights"),
            (inputs[1], lens[1], "scales"),
        ];
        if p.has_zero_points {
            packed_inputs.push((inputs[2], lens[2], "zero points"));
        }
        let mut omitted = false;
        for &(i, want, what) in &packed_inputs {
            if info.constant_input(i)?.is_some() {
                continue;
            }
            let Some((_, shape)) = info.constant_layout(i)? else {
                return Err(Error::invalid_argument(format!(
                    "input {i} of {which} is not a constant initializer"
                )));
            };
            let n = checked_numel(what, &shape).map_err(Error::invalid_argument)?;
            if n != want {
                return Err(Error::invalid_argument(format!(
                    "{which} {what} has shape {shape:?} ({n} values), expected {want}"
                )));
            }
            omitted = true;
        }
        if omitted {
            return Projection::awaiting(which, p, experts, inputs, bias);
        }
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
        let zps = match &zp_t {
            Some(t) => Some(t.data::<u8>()?),
            None => None,
        };
        Projection::packing(
            which,
            p,
            experts,
            inputs,
            codes_t.data::<u8>()?,
            scales_f32(&scales_t, which)?,
            zps,
            bias,
        )
    }

    /// The projection over every expert's codes, scales (as f32) and zero points in ORT's
    /// layout (sizes checked by the caller), each expert packed through the weight cache.
    #[allow(clippy::too_many_arguments)]
    fn packing(
        which: &'static str,
        p: NBitsParams,
        experts: usize,
        inputs: [usize; 3],
        codes: &[u8],
        scales: std::borrow::Cow<'_, [f32]>,
        zps: Option<&[u8]>,
        bias: Option<Vec<f32>>,
    ) -> Result<Projection> {
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
            which,
            p,
            inputs,
            packed,
            hostile,
            bias,
            scales,
            awaiting_import: false,
        })
    }

    /// The projection of a node loaded from a context file: no expert packed, awaiting
    /// `import_packed` (see `awaiting_import`).
    fn awaiting(
        which: &'static str,
        p: NBitsParams,
        experts: usize,
        inputs: [usize; 3],
        bias: Option<Vec<f32>>,
    ) -> Result<Projection> {
        let mut packed = Vec::new();
        packed
            .try_reserve_exact(experts)
            .map_err(|e| Error::fail(format!("{which}: {e}")))?;
        packed.resize(experts, None);
        Ok(Projection {
            which,
            p,
            inputs,
            packed,
            hostile: crate::memory::try_vec(experts, false)
                .map_err(|e| Error::fail(format!("{which}: {e}")))?,
            bias,
            scales: None,
            awaiting_import: true,
        })
    }

    /// Makes `weights` (one per expert) the experts: the state `packing` leaves when every
    /// expert packed (no hostile expert, no scales kept, nothing awaited).
    fn adopt(&mut self, weights: Vec<Arc<CachedWeight<PackedNBits>>>) {
        debug_assert_eq!(weights.len(), self.packed.len());
        self.packed = weights.into_iter().map(Some).collect();
        self.hostile.fill(false);
        self.scales = None;
        self.awaiting_import = false;
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
        self.ready()?;
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
    // The layout, not the value: a node loaded from a context file has the weights' shapes
    // but not their bytes (their packed form is imported instead).
    let dims = |i: usize| -> Result<Vec<usize>> {
        let (_, shape) = info
            .constant_layout(i)?
            .ok_or_else(|| info.error(OP, format!("input {i} is not a constant initializer")))?;
        Ok(shape)
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

/// The op whose cache keys the experts' packs carry (`pack_cached`: QMoE experts and
/// MatMulNBits nodes over equal bytes and params share one entry).
const PACK_OP: &str = "MatMulNBits";

/// The packed-weight sections one expert's projection `p` takes in a context file: its
/// records, then its zero points if it has any (`PackedNBits::export_parts`).
fn sections_of(p: &NBitsParams) -> usize {
    1 + usize::from(p.has_zero_points)
}

/// The first parameter in which expert `expert`'s packed weight (`got`) differs from the
/// node's projection (`want`), as MatMulNBits compares them (`matmul_nbits::params_mismatch`),
/// the error naming the projection and the expert.
fn params_mismatch(
    which: &str,
    expert: usize,
    want: &NBitsParams,
    got: &NBitsParams,
) -> Option<String> {
    super::matmul_nbits::params_mismatch(want, got).map(|e| format!("{which} expert {expert}: {e}"))
}

/// Field `name` of an export's key or description as an array of `experts` entries.
fn per_expert<'v>(
    v: &'v serde_json::Value,
    part: &str,
    name: &str,
    experts: usize,
) -> Result<&'v Vec<serde_json::Value>> {
    let a = v
        .get(name)
        .and_then(serde_json::Value::as_array)
        .ok_or_else(|| {
            Error::invalid_argument(format!("the QMoE export's {part} has no '{name}' list"))
        })?;
    if a.len() != experts {
        return Err(Error::invalid_argument(format!(
            "the QMoE export's {part} lists {} {name} experts, the node has {experts}",
            a.len()
        )));
    }
    Ok(a)
}

impl QMoe {
    fn projections(&self) -> [&Projection; 2] {
        [&self.fc1, &self.fc2]
    }

    /// `Err` while a projection awaits its import (see `Projection::awaiting_import`).
    fn ready(&self) -> Result<()> {
        self.fc1.ready()?;
        self.fc2.ready()
    }

    /// The node's output for `tokens` rows of `x` routed by `routes`, the experts' tensors
    /// `t1` / `t2` where some expert of that projection did not pack (`ort_tensors`): what
    /// `compute` runs once it has read its inputs.
    #[allow(clippy::too_many_arguments)]
    fn forward(
        &self,
        x: &[f32],
        tokens: usize,
        routes: &Routes,
        t1: Option<&OrtExperts<'_>>,
        t2: Option<&OrtExperts<'_>>,
        out: &mut [f32],
    ) -> Result<MoeRoute> {
        self.ready()?;
        let expert = |e: usize| Expert {
            fc1: self.fc1.matrix(e, t1),
            fc1_bias: self.fc1.bias(e),
            fc2: self.fc2.matrix(e, t2),
            fc2_bias: self.fc2.bias(e),
        };
        let par = &*self.env.par;
        moe::run(x, tokens, &self.shape, &self.act, routes, &expert, out, par).map_err(Error::fail)
    }
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

    /// Every expert of both projections, when each packed (else `None`: the context file then
    /// keeps the raw tensors and a later session packs them again). `covers`: the codes, scales
    /// and zero points of fc1 and fc2 (not the biases, copied at creation from the constants
    /// the file keeps). `key`: `{"fc1": [...], "fc2": [...]}`, each expert's cache key.
    /// `meta`: `{"experts": E, "fc1": [...], "fc2": [...]}`, each expert's
    /// `PackedNBits::export_parts` description. `sections`, expert by expert: fc1's records,
    /// fc1's zero points (if it has them), fc2's records, fc2's zero points (if it has them).
    fn export_packed(&self) -> Option<PackedExport<'_>> {
        if !(self.fc1.all_packed() && self.fc2.all_packed()) {
            return None;
        }
        let experts = self.shape.experts;
        let mut covers = vec![IN_FC1, IN_FC1_SCALES, IN_FC2, IN_FC2_SCALES];
        for (proj, zp) in [(&self.fc1, IN_FC1_ZP), (&self.fc2, IN_FC2_ZP)] {
            if proj.p.has_zero_points {
                covers.push(zp);
            }
        }
        let (mut keys, mut metas) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
        let mut sections = Vec::new();
        for e in 0..experts {
            for (j, proj) in self.projections().into_iter().enumerate() {
                let w = proj.packed[e].as_ref()?;
                let (meta, parts) = w.export_parts();
                keys[j].push(w.key().to_json());
                metas[j].push(meta);
                sections.extend(parts);
            }
        }
        let [k1, k2] = keys;
        let [m1, m2] = metas;
        Some(PackedExport {
            covers,
            key: serde_json::json!({"fc1": k1, "fc2": k2}),
            meta: serde_json::json!({"experts": experts, "fc1": m1, "fc2": m2}),
            sections,
        })
    }

    /// Restores what `export_packed` gave: checks the description against the node (the
    /// expert count, each expert's params in both projections, the section count) before
    /// anything is adopted, then adopts every expert through the weight cache (keys derived
    /// from where its sections lie, `adopted_key`). On any error the kernel is left as it was.
    fn import_packed(&mut self, imp: PackedImport) -> Result<bool> {
        let experts = self.shape.experts;
        let described = imp
            .meta
            .get("experts")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| {
                Error::invalid_argument("the QMoE export's description has no expert count")
            })?;
        if described != experts as u64 {
            return Err(Error::invalid_argument(format!(
                "the QMoE export holds {described} experts, the node has {experts}"
            )));
        }
        let names = ["fc1", "fc2"];
        let mut stored = [Vec::new(), Vec::new()];
        for (j, name) in names.into_iter().enumerate() {
            let proj = self.projections()[j];
            let keys = per_expert(&imp.key, "key", name, experts)?;
            let metas = per_expert(&imp.meta, "description", name, experts)?;
            for (e, (k, m)) in keys.iter().zip(metas).enumerate() {
                let key = adopt::stored_key(k, PACK_OP, "be a QMoE expert")
                    .map_err(|x| Error::invalid_argument(format!("{name} expert {e}: {x}")))?;
                let got = PackedNBits::described_params(m)
                    .map_err(|x| Error::invalid_argument(format!("{name} expert {e}: {x}")))?;
                if let Some(x) = params_mismatch(name, e, &proj.p, &got) {
                    return Err(Error::invalid_argument(x));
                }
                stored[j].push(key);
            }
        }
        let per = [sections_of(&self.fc1.p), sections_of(&self.fc2.p)];
        let want = experts
            .checked_mul(per[0] + per[1])
            .ok_or_else(|| Error::invalid_argument("the QMoE export's sections overflow"))?;
        if imp.sections.len() != want {
            return Err(Error::invalid_argument(format!(
                "the QMoE export has {} sections, the node's {experts} experts take {want} \
                 ({} for fc1 and {} for fc2 each)",
                imp.sections.len(),
                per[0],
                per[1]
            )));
        }
        let mut weights = [Vec::new(), Vec::new()];
        for w in &mut weights {
            w.try_reserve_exact(experts)
                .map_err(|x| Error::fail(format!("QMoE import: {x}")))?;
        }
        let mut sections = imp.sections.into_iter();
        let [s1, s2] = &stored;
        for (e, (k1, k2)) in s1.iter().zip(s2).enumerate() {
            for (j, (name, k)) in names.into_iter().zip([k1, k2]).enumerate() {
                let parts: Vec<FileSlice<u8>> = sections.by_ref().take(per[j]).collect();
                let meta = &imp.meta[name][e];
                let w = adopt::adopt(k, parts, |s| import_nbits(meta, s), nbits_file_bytes)
                    .map_err(|x| Error::invalid_argument(format!("{name} expert {e}: {x}")))?;
                let Some(w) = w else {
                    return Ok(false);
                };
                // A live entry with the key may hold another description's weight (only a
                // file giving two weights one key and the same sections could make one): the
                // weight's own params decide.
                if let Some(x) = params_mismatch(name, e, &self.projections()[j].p, w.params()) {
                    return Err(Error::invalid_argument(x));
                }
                weights[j].push(w);
            }
        }
        let [w1, w2] = weights;
        self.fc1.adopt(w1);
        self.fc2.adopt(w2);
        Ok(true)
    }

    fn compute(&self, ctx: &KernelContext<'_>) -> Result<()> {
        self.ready()?;
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
        let route = self.forward(x, tokens, &routes, t1.as_ref(), t2.as_ref(), out)?;
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

#[cfg(test)]
mod tests {
    //! A node that packed every expert, exported, and a fresh kernel of the same node (its
    //! codes, scales and zero points absent, as loaded from a context file) that imported the
    //! export from a mapped file: the state packing leaves, the same outputs bit for bit, the
    //! same route. The kernels are built field by field (`create` needs ORT's kernel info) from
    //! the projections `create` makes (`Projection::packing`, `Projection::awaiting`); the
    //! products are `forward`, what `compute` runs once it has read its inputs.

    use super::*;
    use crate::os::mapped::FileMap;
    use crate::runtime::par::Serial;

    use crate::ep::nodes::test_files::{import_of, write_sections, Lcg, TempFile};

    /// One node: its attributes, which projections have zero points, the scale choices.
    #[derive(Clone, Copy, Debug)]
    struct Case {
        bits: usize,
        block: usize,
        accuracy: usize,
        zp: [bool; 2],
        acc4_f16: bool,
        /// Per projection: the scales were float16 in the model.
        f16_source: [bool; 2],
    }

    const SHAPE: MoeShape = MoeShape {
        experts: 4,
        hidden: 64,
        inter: 32,
        top_k: 2,
    };

    fn act() -> MoeActivation {
        MoeActivation::from_name("swiglu", 1.702, 1.0, 7.0).unwrap()
    }

    /// The params `create` gives the node's fc1 and fc2.
    fn params(c: &Case) -> [NBitsParams; 2] {
        let a = Attrs {
            top_k: SHAPE.top_k,
            act: act(),
            normalize: true,
            bits: c.bits,
            block: c.block,
            accuracy: c.accuracy,
        };
        let ps = projection_params(&SHAPE, &a, c.zp).unwrap();
        [0, 1].map(|j| {
            ps[j]
                .with_acc4_f16_scales(c.acc4_f16)
                .with_f16_source_scales(c.f16_source[j])
        })
    }

    /// One projection's constants in ORT's layout, all experts.
    struct Weights {
        codes: Vec<u8>,
        scales: Vec<f32>,
        zp: Option<Vec<u8>>,
        bias: Vec<f32>,
    }

    fn weights(p: &NBitsParams, seed: u64) -> Weights {
        let mut r = Lcg(seed);
        let [b, s, z, n] = projection_lens(p, SHAPE.experts).unwrap();
        Weights {
            codes: r.bytes(b),
            // Multiples of 2^-10 below 0.1: exact in f16, as float16 scales widened are.
            scales: (0..s)
                .map(|_| (1 + r.next() % 100) as f32 / 1024.0)
                .collect(),
            zp: p.has_zero_points.then(|| r.bytes(z)),
            bias: (0..n).map(|_| r.f32(-0.1, 0.1)).collect(),
        }
    }

    const INPUTS: [[usize; 3]; 2] = [
        [IN_FC1, IN_FC1_SCALES, IN_FC1_ZP],
        [IN_FC2, IN_FC2_SCALES, IN_FC2_ZP],
    ];
    const NAMES: [&str; 2] = ["fc1", "fc2"];

    /// The kernel `create` makes for the node of `c` over `w`: every expert packed, or
    /// (`packed` false) loaded from a context file, awaiting its import (the biases are at
    /// hand either way: the file keeps them).
    fn kernel(c: &Case, w: &[Weights; 2], packed: bool) -> QMoe {
        let ps = params(c);
        let proj = |j: usize| {
            let w = &w[j];
            if packed {
                Projection::packing(
                    NAMES[j],
                    ps[j],
                    SHAPE.experts,
                    INPUTS[j],
                    &w.codes,
                    std::borrow::Cow::Borrowed(&w.scales),
                    w.zp.as_deref(),
                    Some(w.bias.clone()),
                )
            } else {
                Projection::awaiting(
                    NAMES[j],
                    ps[j],
                    SHAPE.experts,
                    INPUTS[j],
                    Some(w.bias.clone()),
                )
            }
            .unwrap()
        };
        let mut env = KernelEnv::new(Arc::new(Serial));
        env.acc4_f16_scales = c.acc4_f16;
        QMoe {
            shape: SHAPE,
            act: act(),
            normalize: true,
            fc1: proj(0),
            fc2: proj(1),
            env: Arc::new(env),
        }
    }

    /// `k`'s export written to a file; the file and the sections' places.
    fn export_to_file(k: &QMoe) -> (TempFile, PackedExport<'_>, Vec<(usize, usize)>) {
        let e = k
            .export_packed()
            .expect("a node whose every expert packed exports");
        let (file, at) = write_sections("qmoe", &e.sections);
        (file, e, at)
    }

    /// `k`'s output and route for `tokens` random rows (seeded, so two kernels see one input).
    fn run(k: &QMoe, tokens: usize) -> Result<(Vec<f32>, MoeRoute)> {
        let mut r = Lcg(99 + tokens as u64);
        let x: Vec<f32> = (0..tokens * SHAPE.hidden)
            .map(|_| r.f32(-1.0, 1.0))
            .collect();
        let logits: Vec<f32> = (0..tokens * SHAPE.experts)
            .map(|_| r.f32(-2.0, 2.0))
            .collect();
        let routes =
            moe::route_tokens(&logits, None, tokens, SHAPE.experts, SHAPE.top_k, true).unwrap();
        let mut out = vec![f32::NAN; tokens * SHAPE.hidden];
        let route = k.forward(&x, tokens, &routes, None, None, &mut out)?;
        Ok((out, route))
    }

    /// What `prepack` answers for every input of the node.
    fn prepack_answers(k: &mut QMoe) -> Vec<bool> {
        let byte = [0u8; 4];
        let t = Tensor::from_mapped(&byte, U8, vec![4]).unwrap();
        (0..=IN_ROUTER_WEIGHTS)
            .map(|i| k.prepack(i, &t).unwrap())
            .collect()
    }

    fn cases() -> [Case; 3] {
        [
            Case {
                bits: 4,
                block: 32,
                accuracy: 4,
                zp: [false, false],
                acc4_f16: true,
                f16_source: [false, false],
            },
            Case {
                bits: 8,
                block: 16,
                accuracy: 0,
                zp: [true, true],
                acc4_f16: true,
                f16_source: [false, false],
            },
            Case {
                bits: 4,
                block: 16,
                accuracy: 4,
                zp: [true, false],
                acc4_f16: false,
                f16_source: [false, true],
            },
        ]
    }

    fn all_weights(c: &Case, seed: u64) -> [Weights; 2] {
        let ps = params(c);
        [weights(&ps[0], seed), weights(&ps[1], seed + 1)]
    }

    #[test]
    fn an_imported_node_computes_what_the_packing_node_does() {
        for (i, c) in cases().iter().enumerate() {
            let w = all_weights(c, 11 + 2 * i as u64);
            let mut packer = kernel(c, &w, true);
            assert!(packer.fc1.all_packed() && packer.fc2.all_packed(), "{c:?}");
            let packer_answers = prepack_answers(&mut packer);
            let (file, e, at) = export_to_file(&packer);
            let mut want_covers = vec![IN_FC1, IN_FC1_SCALES, IN_FC2, IN_FC2_SCALES];
            for (there, zp) in [(c.zp[0], IN_FC1_ZP), (c.zp[1], IN_FC2_ZP)] {
                if there {
                    want_covers.push(zp);
                }
            }
            assert_eq!(
                e.covers, want_covers,
                "{c:?}: the biases stay raw constants"
            );
            let per_expert = 2 + usize::from(c.zp[0]) + usize::from(c.zp[1]);
            assert_eq!(e.sections.len(), SHAPE.experts * per_expert);
            let map = Arc::new(FileMap::open(&file.0).unwrap());

            let mut fresh = kernel(c, &w, false);
            assert!(
                fresh.export_packed().is_none(),
                "nothing to export before the import"
            );
            let err = run(&fresh, 1).unwrap_err().to_string();
            assert!(err.contains("never imported"), "{err}");
            assert!(
                fresh.import_packed(import_of(&e, &map, &at)).unwrap(),
                "{c:?}"
            );

            // The state `create` leaves once every expert packed.
            for (j, (a, b)) in [(&packer.fc1, &fresh.fc1), (&packer.fc2, &fresh.fc2)]
                .into_iter()
                .enumerate()
            {
                assert!(!b.awaiting_import && b.all_packed() && b.scales.is_none());
                assert!(b.hostile.iter().all(|&h| !h));
                assert_eq!(a.hostile, b.hostile);
                assert_eq!(a.bias, b.bias);
                for (x, y) in a.packed.iter().zip(&b.packed) {
                    let (x, y) = (x.as_ref().unwrap(), y.as_ref().unwrap());
                    assert!(
                        y.adopted() && y.in_file() && y.held_bytes() == 0,
                        "{}",
                        NAMES[j]
                    );
                    assert_eq!(x.params(), y.params());
                    assert_eq!(x.weight_bytes(), y.weight_bytes());
                    assert_eq!(x.zero_point_bytes(), y.zero_point_bytes());
                }
            }
            assert_eq!(packer_answers, prepack_answers(&mut fresh));
            for tokens in [1, 3, 9] {
                let (x, rx) = run(&packer, tokens).unwrap();
                let (y, ry) = run(&fresh, tokens).unwrap();
                assert!(x.iter().all(|v| v.is_finite()) && x.iter().any(|&v| v != 0.0));
                assert!(
                    x.iter().zip(&y).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{c:?} tokens={tokens}: the imported node differs"
                );
                assert_eq!(rx, ry, "the same route");
                assert!(ry.all_packed);
            }
            // Exported again, the imported node describes the same weights.
            let again = fresh.export_packed().unwrap();
            assert_eq!(
                (again.meta, again.covers),
                (e.meta.clone(), e.covers.clone())
            );

            // Another node importing the same file (through another map of it) shares the
            // entries; one importing a copy of the file does not.
            let map2 = Arc::new(FileMap::open(&file.0).unwrap());
            let mut twin = kernel(c, &w, false);
            assert!(twin.import_packed(import_of(&e, &map2, &at)).unwrap());
            let copy = TempFile(file.0.with_extension("copy"));
            std::fs::copy(&file.0, &copy.0).unwrap();
            let copy_map = Arc::new(FileMap::open(&copy.0).unwrap());
            let mut other = kernel(c, &w, false);
            assert!(other.import_packed(import_of(&e, &copy_map, &at)).unwrap());
            for x in 0..SHAPE.experts {
                let [f, t, o] = [&fresh, &twin, &other].map(|k| k.fc2.packed[x].clone().unwrap());
                assert!(Arc::ptr_eq(&f, &t) && !Arc::ptr_eq(&f, &o));
            }
            // No two experts share an entry (each has sections of its own).
            let f = &fresh.fc1.packed;
            assert!(!Arc::ptr_eq(f[0].as_ref().unwrap(), f[1].as_ref().unwrap()));
        }
    }

    #[test]
    fn an_expert_with_hostile_scales_leaves_the_node_without_an_export() {
        let c = cases()[0];
        let mut w = all_weights(&c, 5);
        w[1].scales[3] = f32::INFINITY;
        let k = kernel(&c, &w, true);
        assert!(k.fc1.all_packed() && !k.fc2.all_packed() && k.fc2.hostile[0]);
        assert!(k.export_packed().is_none());
    }

    /// A node, an edit of the import it is given, and what the refusal must name.
    type Check<'a> = (Case, &'a dyn Fn(&mut PackedImport), &'a [&'a str]);

    #[test]
    fn an_import_that_does_not_fit_the_node_is_refused_naming_the_problem() {
        let c = cases()[1];
        let w = all_weights(&c, 3);
        let packer = kernel(&c, &w, true);
        let (file, e, at) = export_to_file(&packer);
        let map = Arc::new(FileMap::open(&file.0).unwrap());
        // Each refusal leaves the node as it was: awaiting, nothing packed.
        let refused = |node: Case, edit: &dyn Fn(&mut PackedImport)| -> String {
            let mut k = kernel(&node, &all_weights(&node, 3), false);
            let mut imp = import_of(&e, &map, &at);
            edit(&mut imp);
            let err = k.import_packed(imp).unwrap_err().to_string();
            for p in [&k.fc1, &k.fc2] {
                assert!(
                    p.awaiting_import && p.packed.iter().all(Option::is_none),
                    "{err}"
                );
            }
            err
        };
        let none = |_: &mut PackedImport| {};
        let checks: [Check<'_>; 11] = [
            (
                c,
                &|i| i.meta["experts"] = 5.into(),
                &["holds 5 experts", "node has 4"],
            ),
            (
                c,
                &|i| {
                    i.key["fc2"].as_array_mut().unwrap().pop();
                },
                &["lists 3 fc2 experts"],
            ),
            (
                c,
                &|i| {
                    i.meta.as_object_mut().unwrap().remove("fc1");
                },
                &["no 'fc1' list"],
            ),
            (
                c,
                &|i| i.meta["fc2"][1]["block_size"] = 32.into(),
                &["fc2 expert 1", "block_size=32", "block_size=16"],
            ),
            (
                c,
                &|i| i.meta["fc1"][2]["layout"] = 99.into(),
                &["fc1 expert 2", "layout"],
            ),
            (
                c,
                &|i| i.meta["fc1"][0]["group_at"][1] = 3.into(),
                &["fc1 expert 0", "group_at"],
            ),
            (
                c,
                &|i| i.key["fc1"][3]["op"] = "QLinearMatMul".into(),
                &["fc1 expert 3", "QLinearMatMul"],
            ),
            (
                c,
                &|i| i.key["fc2"][0]["digest"] = "xyz".into(),
                &["fc2 expert 0", "digest"],
            ),
            (
                c,
                &|i| {
                    i.sections.pop();
                },
                &["sections", "take 16"],
            ),
            // Nodes other than the writer's: other zero points, other bits.
            (
                Case {
                    zp: [true, false],
                    ..c
                },
                &none,
                &["fc2 expert 0", "zero points=1"],
            ),
            (Case { bits: 4, ..c }, &none, &["fc1 expert 0", "bits=8"]),
        ];
        for (node, edit, needles) in checks {
            let err = refused(node, edit);
            for n in needles {
                assert!(err.contains(n), "expected {n:?} in: {err}");
            }
        }
        // The f16 choices: a level-4 node packs its scales as the provider option says, and a
        // node whose scales were float16 packs them as f16 below level 4.
        let c4 = cases()[0];
        let packer = kernel(&c4, &all_weights(&c4, 8), true);
        let (file, e, at) = export_to_file(&packer);
        let map = Arc::new(FileMap::open(&file.0).unwrap());
        for (node, needle) in [
            (
                Case {
                    acc4_f16: false,
                    ..c4
                },
                "f16 scales (acc4_scales)",
            ),
            (
                Case {
                    f16_source: [true, false],
                    ..c4
                },
                "f16 source scales",
            ),
        ] {
            let mut k = kernel(&node, &all_weights(&node, 8), false);
            let err = k
                .import_packed(import_of(&e, &map, &at))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(needle) && err.contains("fc1 expert 0"),
                "{err}"
            );
            assert!(k.fc1.awaiting_import && k.fc2.awaiting_import);
        }
    }
}
