//! com.microsoft.SkipSimplifiedLayerNormalization over float32: `v = input + skip (+ bias)`,
//! `output = v / sqrt(mean(v^2) + epsilon) * gamma`, optional output 3 `input_skip_bias_sum = v`.
//! Outputs 1 and 2 (mean, inv_std_var) are not produced by ORT's CPU kernel either; a node that
//! wires them stays with ORT. `skip` is the input's shape, or `[seq, hidden]` / `[1, seq, hidden]`
//! broadcast over the batch, as ORT accepts.

use std::sync::Arc;

use crate::abi::graph::Node;
use crate::abi::kernel_context::KernelContext;
use crate::abi::kernel_info::KernelInfo;
use crate::abi::status::{Error, Result};
use crate::ep::op::{types, Decline, KernelEnv, OpDef, OpKernel};
use crate::kernels::norm::{norm_f32, NormInputs, NormOutputs, NormParams};
use crate::runtime::par::take_lanes_used;
use crate::telemetry::ledger;

use super::claim::{input_type, only_attrs, require_elem, require_output_elem, F32};
use super::glue_common::{known_rank_dims, optional_output, output_wired};

const OP: &str = "SkipSimplifiedLayerNormalization";
const DEFAULT_EPSILON: f32 = 1e-5;

struct SkipNorm {
    epsilon: f32,
    env: Arc<KernelEnv>,
}

/// ORT's shape rule: input rank 2 or 3; skip equal to input, or its last two dims (2-D or
/// batch 1); gamma and bias 1-D of hidden.
fn check_shapes(x: &[usize], skip: &[usize]) -> std::result::Result<(), String> {
    if x.len() != 2 && x.len() != 3 {
        return Err(format!("input has rank {}, expected 2 or 3", x.len()));
    }
    let tail = &x[x.len() - 2..];
    let ok = skip == x
        || (skip.len() == 2 && skip == tail)
        || (skip.len() == 3 && skip[0] == 1 && &skip[1..] == tail);
    if !ok {
        return Err(format!("skip {skip:?} does not match input {x:?}"));
    }
    Ok(())
}

impl OpKernel for SkipNorm {
    fn compute(&self, ctx: &KernelContext<'_>) -> Result<()> {
        let x = ctx.required_input(0)?;
        let skip = ctx.required_input(1)?;
        let gamma = ctx.required_input(2)?;
        let bias = ctx.input(3)?;
        let shape = x.shape();
        check_shapes(shape, skip.shape()).map_err(Error::invalid_argument)?;
        let n = *shape.last().unwrap_or(&0);
        if n == 0 {
            // As ORT 1.31.1, which refuses an empty hidden dimension whatever the batch.
            return Err(Error::invalid_argument(format!(
                "hidden size must be positive, got 0 (input {shape:?})"
            )));
        }
        for (what, t) in [("gamma", Some(&gamma)), ("bias", bias.as_ref())] {
            if let Some(t) = t {
                if t.shape().len() != 1 || t.shape()[0] != n {
                    return Err(Error::invalid_argument(format!(
                        "{what} has shape {:?}, expected [{n}]",
                        t.shape()
                    )));
                }
            }
        }
        let y = ctx.output(0, shape)?.into_data::<f32>()?;
        let sum = optional_output(ctx, 3, shape)?;
        let xs = x.data::<f32>()?;
        if xs.is_empty() {
            ledger::record(OP, "empty", take_lanes_used());
            return Ok(());
        }
        let b = match &bias {
            Some(b) => Some(b.data::<f32>()?),
            None => None,
        };
        let variant = norm_f32(
            NormParams {
                simplified: true,
                epsilon: self.epsilon,
            },
            n,
            NormInputs {
                x: xs,
                skip: Some(skip.data::<f32>()?),
                bias: b,
                scale: gamma.data::<f32>()?,
                beta: None,
            },
            NormOutputs {
                y,
                mean: None,
                inv_std: None,
                sum,
            },
            &*self.env.par,
        )
        .map_err(Error::invalid_argument)?;
        ledger::record(OP, variant, take_lanes_used());
        Ok(())
    }
}

fn claim(node: &Node<'_>) -> std::result::Result<(), Decline> {
    only_attrs(node, &["epsilon"])?;
    if let Some(e) = node.attr_f32("epsilon").filter(|e| e.is_nan() || *e < 0.0) {
        // ORT's kernel refuses these when the session is created; left to it, so the model fails
        // as it does without rcpu.
        return Err(format!("epsilon {e} is negative or NaN"));
    }
    for i in 0..3 {
        require_elem(node, i, F32)?;
    }
    if input_type(node, 3)?.is_some() {
        require_elem(node, 3, F32)?;
    }
    require_output_elem(node, F32)?;
    for (i, what) in [(1, "mean"), (2, "inv_std_var")] {
        if output_wired(node, i)? {
            return Err(format!("output {i} ({what}) is not implemented"));
        }
    }
    let x = known_rank_dims(node, 0)?;
    if let Some(x) = &x {
        if x.len() != 2 && x.len() != 3 {
            return Err(format!("input has rank {}, expected 2 or 3", x.len()));
        }
    }
    for i in [2, 3] {
        if let Some(d) = known_rank_dims(node, i)? {
            if d.len() != 1 {
                return Err(format!("input {i} has rank {}, expected 1", d.len()));
            }
            if let Some(&h) = x.as_ref().and_then(|x| x.last()) {
                if h >= 0 && d[0] >= 0 && d[0] != h {
                    return Err(format!("input {i} has {} elements, hidden is {h}", d[0]));
                }
            }
        }
    }
    // Static, incompatible skip shapes stay with ORT (it reports them its own way).
    if let (Some(x), Some(s)) = (x, known_rank_dims(node, 1)?) {
        let xs: Option<Vec<usize>> = x.iter().map(|&d| usize::try_from(d).ok()).collect();
        let ss: Option<Vec<usize>> = s.iter().map(|&d| usize::try_from(d).ok()).collect();
        if let (Some(xs), Some(ss)) = (xs, ss) {
            check_shapes(&xs, &ss)?;
        }
    }
    Ok(())
}

fn create(info: &KernelInfo<'_>, env: &Arc<KernelEnv>) -> Result<Box<dyn OpKernel>> {
    Ok(Box::new(SkipNorm {
        epsilon: info.attr_f32("epsilon").unwrap_or(DEFAULT_EPSILON),
        env: env.clone(),
    }))
}

pub const SKIP_SIMPLIFIED_LAYER_NORMALIZATION: OpDef = OpDef {
    op: OP,
    domain: "com.microsoft",
    since: 1,
    until: 1,
    types: &[("T", types::F32), ("U", types::F32)],
    claim,
    create,
};
