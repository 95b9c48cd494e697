//! LayerNormalization (ONNX 17) and SimplifiedLayerNormalization (ORT's RMSNorm, registered by
//! ORT in the ONNX domain, opset 1) over float32: axis, epsilon, stash_type=1, and every optional
//! output (LayerNormalization: Mean, InvStdDev; Simplified: inv_std_var).

use std::sync::Arc;

use crate::abi::graph::Node;
use crate::abi::kernel_context::KernelContext;
use crate::abi::kernel_info::KernelInfo;
use crate::abi::status::{Error, Result};
use crate::kernels::norm::{norm_f32, NormInputs, NormOutputs, NormParams};
use crate::kernels::op::{types, Decline, KernelEnv, OpDef, OpKernel};
use crate::telemetry::ledger;

use super::claim::{input_type, only_attrs, require_elem, require_output_elem, F32};
use super::glue_common::{
    known_count, known_rank_dims, norm_axis, optional_output, stash_type_f32,
};

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
        let shape = x.shape().to_vec();
        let axis = norm_axis(self.axis, shape.len()).map_err(Error::invalid_argument)?;
        let n: usize = shape[axis..].iter().product();
        let stat_shape: Vec<usize> = shape
            .iter()
            .enumerate()
            .map(|(i, &d)| if i < axis { d } else { 1 })
            .collect();
        let y = ctx.output(0, &shape)?.into_data::<f32>()?;
        // Simplified has no Mean output: its inv_std_var is output 1.
        let (mean, inv_std) = if self.simplified {
            (None, optional_output(ctx, 1, &stat_shape)?)
        } else {
            (
                optional_output(ctx, 1, &stat_shape)?,
                optional_output(ctx, 2, &stat_shape)?,
            )
        };
        let xs = x.data::<f32>()?;
        if xs.is_empty() {
            // Rows of zero elements: ORT's statistics are 0/0 (NaN); no rows: nothing to write.
            for s in [mean, inv_std].into_iter().flatten() {
                s.fill(f32::NAN);
            }
            ledger::record(self.op, "empty", self.env.par.lanes());
            return Ok(());
        }
        let beta = match &bias {
            Some(b) => Some(b.data::<f32>()?),
            None => None,
        };
        let variant = norm_f32(
            NormParams {
                simplified: self.simplified,
                epsilon: self.epsilon,
            },
            n,
            NormInputs {
                x: xs,
                skip: None,
                bias: None,
                scale: scale.data::<f32>()?,
                beta,
            },
            NormOutputs {
                y,
                mean,
                inv_std,
                sum: None,
            },
            &*self.env.par,
        )
        .map_err(Error::invalid_argument)?;
        ledger::record(self.op, variant, self.env.par.lanes());
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
    let a = norm_axis(axis, xd.len())?;
    // Scale (and B) must hold exactly the normalised elements (no broadcasting implemented).
    if let Some(norm) = known_count(&xd[a..]) {
        let params: &[usize] = if simplified { &[1] } else { &[1, 2] };
        for &i in params {
            if let Some(t) = input_type(node, i)? {
                if let Some(c) = t.static_dims().map(|d| d.iter().product::<usize>()) {
                    if c != norm {
                        return Err(format!(
                            "input {i} has {c} elements, the normalised shape {norm} \
                             (broadcasting is not implemented)"
                        ));
                    }
                }
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
