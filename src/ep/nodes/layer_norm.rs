//! LayerNormalization (ONNX 17) and SimplifiedLayerNormalization (ORT's RMSNorm, registered by
//! ORT in the ONNX domain, opset 1) over float32: axis, epsilon, stash_type=1, and every optional
//! output (LayerNormalization: Mean, InvStdDev; Simplified: inv_std_var).

use std::sync::Arc;

use crate::abi::graph::Node;
use crate::abi::kernel_context::KernelContext;
use crate::abi::kernel_info::KernelInfo;
use crate::abi::status::{Error, Result};
use crate::ep::op::{types, Decline, KernelEnv, OpDef, OpKernel};
use crate::kernels::dims::Dims;
use crate::kernels::norm::{norm_f32, NormInputs, NormOutputs, NormParams};
use crate::kernels::shape::checked_numel;
use crate::runtime::par::take_lanes_used;
use crate::telemetry::ledger;

use super::claim::{input_type, only_attrs, require_elem, require_output_elem, F32};
use super::glue_common::{known_rank_dims, norm_axis, optional_output, stash_type_f32};
use super::norm_broadcast;

const ATTRS: [&str; 3] = ["axis", "epsilon", "stash_type"];
const DEFAULT_EPSILON: f32 = 1e-5;

struct LayerNorm {
    op: &'static str,
    simplified: bool,
    axis: i64,
    epsilon: f32,
    env: Arc<KernelEnv>,
}

impl OpKernel for LayerNorm {
    fn compute(&self, ctx: &KernelContext<'_>) -> Result<()> {
        let x = ctx.required_input(0)?;
        let scale = ctx.required_input(1)?;
        let bias = if self.simplified { None } else { ctx.input(2)? };
        let shape = x.shape();
        let axis = norm_axis(self.axis, shape.len()).map_err(Error::invalid_argument)?;
        // Checked: an empty X may carry dims whose product does not fit (e.g. [0, 2^40, 2^40]).
        let n = checked_numel("X.shape[axis:]", &shape[axis..]).map_err(Error::invalid_argument)?;
        let mut stat_shape = Dims::from_slice(shape);
        stat_shape[axis..].fill(1);
        let y = ctx.output(0, shape)?.into_data::<f32>()?;
        // Simplified has no Mean output: its inv_std_var is output 1.
        let (mean, inv_std) = if self.simplified {
            (None, optional_output(ctx, 1, &stat_shape)?)
        } else {
            (
                optional_output(ctx, 1, &stat_shape)?,
                optional_output(ctx, 2, &stat_shape)?,
            )
        };
        let xd = x.shape();
        // Checked before anything else, empty X included (ORT refuses those too).
        let bd = bias.as_ref().map(|b| b.shape());
        let bcast = |d: &[usize]| {
            norm_broadcast::strides(xd, d).ok_or_else(|| {
                Error::invalid_argument(format!(
                    "scale {:?} and bias {bd:?} must match X.shape[axis:] or be NumPy-broadcastable \
                     to X {xd:?} (axis {axis})",
                    scale.shape()
                ))
            })
        };
        let s_st = bcast(scale.shape())?;
        let b_st = match bd {
            Some(d) => Some(bcast(d)?),
            None => None,
        };
        if n == 0 {
            // As ORT 1.31.1 (X [2, 0] and [0, 0] alike): rows of zero elements have no statistics.
            return Err(Error::invalid_argument(format!(
                "Size of X.shape[axis:] must be at least 1, got 0 (X {xd:?}, axis {axis})"
            )));
        }
        let xs = x.data::<f32>()?;
        if xs.is_empty() {
            // No rows: nothing to write.
            ledger::record(self.op, "empty", take_lanes_used());
            return Ok(());
        }
        let params = NormParams {
            simplified: self.simplified,
            epsilon: self.epsilon,
        };
        let sdata = scale.data::<f32>()?;
        let bdata = match &bias {
            Some(b) => Some(b.data::<f32>()?),
            None => None,
        };
        // The common case: parameters that are exactly the normalised elements, for every row.
        let direct = |st: &[usize], len: usize| len == n && st[..axis].iter().all(|&s| s == 0);
        if direct(&s_st, sdata.len())
            && b_st
                .as_ref()
                .zip(bdata)
                .is_none_or(|(st, d)| direct(st, d.len()))
        {
            let inputs = NormInputs {
                x: xs,
                skip: None,
                bias: None,
                scale: sdata,
                beta: bdata,
            };
            let outs = NormOutputs {
                y,
                mean,
                inv_std,
                sum: None,
            };
            let variant = norm_f32(params, n, inputs, outs, &*self.env.par)
                .map_err(Error::invalid_argument)?;
            ledger::record(self.op, variant, take_lanes_used());
            return Ok(());
        }
        let mut st: Vec<&[usize]> = vec![&s_st];
        if let Some(b) = &b_st {
            st.push(b);
        }
        let runs = norm_broadcast::runs(xd, axis, &st).map_err(Error::invalid_argument)?;
        let (mut sv, mut bv) = (Vec::new(), Vec::new());
        let (y, mut mean, mut inv_std) = (y, mean, inv_std);
        let mut variant = "";
        for run in &runs {
            norm_broadcast::gather(sdata, run.offs[0], xd, axis, &s_st, &mut sv)
                .map_err(Error::invalid_argument)?;
            if let (Some(d), Some(bst)) = (bdata, &b_st) {
                norm_broadcast::gather(d, run.offs[1], xd, axis, bst, &mut bv)
                    .map_err(Error::invalid_argument)?;
            }
            let rows = run.start..run.start + run.count;
            let inputs = NormInputs {
                x: &xs[rows.start * n..rows.end * n],
                skip: None,
                bias: None,
                scale: &sv,
                beta: bdata.map(|_| bv.as_slice()),
            };
            let outs = NormOutputs {
                y: &mut y[rows.start * n..rows.end * n],
                mean: mean.as_deref_mut().map(|o| &mut o[rows.clone()]),
                inv_std: inv_std.as_deref_mut().map(|o| &mut o[rows.clone()]),
                sum: None,
            };
            variant = norm_f32(params, n, inputs, outs, &*self.env.par)
                .map_err(Error::invalid_argument)?;
        }
        ledger::record(self.op, variant, take_lanes_used());
        Ok(())
    }
}

fn claim_common(node: &Node<'_>, simplified: bool) -> std::result::Result<(), Decline> {
    only_attrs(node, &ATTRS)?;
    stash_type_f32(node)?;
    require_elem(node, 0, F32)?;
    require_elem(node, 1, F32)?;
    if !simplified && input_type(node, 2)?.is_some() {
        require_elem(node, 2, F32)?;
    }
    require_output_elem(node, F32)?;
    let axis = node.attr_i64("axis").unwrap_or(-1);
    let Some(xd) = known_rank_dims(node, 0)? else {
        // Unknown rank: only the last-axis form can be checked at run time alone.
        return if axis == -1 {
            Ok(())
        } else {
            Err(format!("axis={axis} with an input of unknown rank"))
        };
    };
    norm_axis(axis, xd.len())?;
    // Scale (and B) broadcast to X as NumPy does (checked again at run time with real shapes).
    let params: &[usize] = if simplified { &[1] } else { &[1, 2] };
    for &i in params {
        if let Some(d) = input_type(node, i)?.and_then(|t| t.static_dims()) {
            // Only dims X fixes can refute a broadcast; unknown X dims (-1) accept any.
            let fits = d.len() <= xd.len()
                && d.iter()
                    .rev()
                    .zip(xd.iter().rev())
                    .all(|(&p, &x)| p == 1 || x < 0 || p as i64 == x);
            if !fits {
                return Err(format!("input {i} {d:?} does not broadcast to X {xd:?}"));
            }
        }
    }
    Ok(())
}

fn claim_layer_norm(node: &Node<'_>) -> std::result::Result<(), Decline> {
    claim_common(node, false)
}

fn claim_simplified(node: &Node<'_>) -> std::result::Result<(), Decline> {
    claim_common(node, true)
}

fn build(
    info: &KernelInfo<'_>,
    env: &Arc<KernelEnv>,
    op: &'static str,
    simplified: bool,
) -> Result<Box<dyn OpKernel>> {
    Ok(Box::new(LayerNorm {
        op,
        simplified,
        axis: info.attr_i64("axis").unwrap_or(-1),
        epsilon: info.attr_f32("epsilon").unwrap_or(DEFAULT_EPSILON),
        env: env.clone(),
    }))
}

fn create_layer_norm(info: &KernelInfo<'_>, env: &Arc<KernelEnv>) -> Result<Box<dyn OpKernel>> {
    build(info, env, "LayerNormalization", false)
}

fn create_simplified(info: &KernelInfo<'_>, env: &Arc<KernelEnv>) -> Result<Box<dyn OpKernel>> {
    build(info, env, "SimplifiedLayerNormalization", true)
}

/// ONNX LayerNormalization-17 (the latest).
pub const LAYER_NORMALIZATION: OpDef = OpDef {
    op: "LayerNormalization",
    domain: "",
    since: 17,
    until: 17,
    types: &[("T", types::F32), ("U", types::F32)],
    claim: claim_layer_norm,
    create: create_layer_norm,
};

/// ORT's SimplifiedLayerNormalization (RMSNorm): ONNX domain, opset 1.
pub const SIMPLIFIED_LAYER_NORMALIZATION: OpDef = OpDef {
    op: "SimplifiedLayerNormalization",
    domain: "",
    since: 1,
    until: 1,
    types: &[("T", types::F32), ("U", types::F32), ("V", types::F32)],
    claim: claim_simplified,
    create: create_simplified,
};
