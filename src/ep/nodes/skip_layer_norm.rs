//! com.microsoft.SkipSimplifiedLayerNormalization and SkipLayerNormalization over float32:
//! `v = input + skip (+ bias)`, then RMSNorm `output = v / sqrt(mean(v^2) + epsilon) * gamma`
//! (simplified) or LayerNorm `output = (v - mean) / sqrt(var + epsilon) * gamma (+ beta)`;
//! optional output 3 `input_skip_bias_sum = v`. The inputs after gamma differ: the simplified
//! op's input 3 is `bias`; SkipLayerNormalization's input 3 is `beta` and input 4 `bias`.
//! Outputs 1 and 2 (mean, inv_std_var) are not produced by ORT's CPU kernel either; a node that
//! wires them stays with ORT. `skip` is the input's shape, or `[seq, hidden]` / `[1, seq, hidden]`
//! broadcast over the batch, as ORT accepts.
//!
//! SkipLayerNormalization is what the model builder emits for decoders with a plain LayerNorm
//! (Phi-2, GPT-2, OLMo, Nemotron): claimed, their layers stay inside rcpu's fused partition
//! instead of being cut twice per layer by nodes left to ORT. The mean and variance are rcpu's
//! LayerNorm's (`kernels::norm`: the mean summed in f64, the variance in a second pass around
//! it); ORT's kernel sums both serially in f32 and takes `mean(v^2) - mean^2`, which agrees within
//! the parity tolerances on model-like rows and is the less accurate of the two where the mean
//! dwarfs the spread (`e2e/python/test_parity_glue.py`, offset rows).

use std::sync::Arc;

use crate::abi::graph::Node;
use crate::abi::kernel_context::KernelContext;
use crate::abi::kernel_info::KernelInfo;
use crate::abi::status::{Error, Result};
use crate::abi::tensor::Tensor;
use crate::ep::op::{types, Decline, KernelEnv, OpDef, OpKernel};
use crate::kernels::norm::{norm_f32, NormInputs, NormOutputs, NormParams};
use crate::runtime::par::take_lanes_used;
use crate::telemetry::ledger;

use super::claim::{input_type, only_attrs, require_elem, require_output_elem, F32};
use super::glue_common::{known_rank_dims, optional_output, output_wired};

/// The schema's default epsilon of both ops (ORT's `kDefaultSkipLayerNormEpsilon`; ORT fills
/// it into a node that omits the attribute before rcpu sees the node).
const DEFAULT_EPSILON: f32 = 1e-12;

/// Which of the two ops a node is: its name and where its optional inputs sit.
#[derive(Clone, Copy)]
struct Form {
    op: &'static str,
    simplified: bool,
    /// Input index of beta (`None`: the op has none).
    beta: Option<usize>,
    /// Input index of bias.
    bias: usize,
}

const SIMPLIFIED: Form = Form {
    op: "SkipSimplifiedLayerNormalization",
    simplified: true,
    beta: None,
    bias: 3,
};

const FULL: Form = Form {
    op: "SkipLayerNormalization",
    simplified: false,
    beta: Some(3),
    bias: 4,
};

impl Form {
    /// The optional 1-D inputs after gamma: (index, name).
    fn vectors(&self) -> impl Iterator<Item = (usize, &'static str)> {
        self.beta
            .map(|i| (i, "beta"))
            .into_iter()
            .chain(std::iter::once((self.bias, "bias")))
    }
}

struct SkipNorm {
    form: Form,
    epsilon: f32,
    env: Arc<KernelEnv>,
}

/// An optional input's floats.
fn floats<'a>(t: Option<&Tensor<'a>>) -> Result<Option<&'a [f32]>> {
    t.map(|t| t.data::<f32>()).transpose()
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
        let beta = match self.form.beta {
            Some(i) => ctx.input(i)?,
            None => None,
        };
        let bias = ctx.input(self.form.bias)?;
        let shape = x.shape();
        check_shapes(shape, skip.shape()).map_err(Error::invalid_argument)?;
        let n = *shape.last().unwrap_or(&0);
        if n == 0 {
            // As ORT 1.31.1, which refuses an empty hidden dimension whatever the batch.
            return Err(Error::invalid_argument(format!(
                "hidden size must be positive, got 0 (input {shape:?})"
            )));
        }
        for (what, t) in [
            ("gamma", Some(&gamma)),
            ("beta", beta.as_ref()),
            ("bias", bias.as_ref()),
        ] {
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
            ledger::record(self.form.op, "empty", take_lanes_used());
            return Ok(());
        }
        let variant = norm_f32(
            NormParams {
                simplified: self.form.simplified,
                epsilon: self.epsilon,
            },
            n,
            NormInputs {
                x: xs,
                skip: Some(skip.data::<f32>()?),
                bias: floats(bias.as_ref())?,
                scale: gamma.data::<f32>()?,
                beta: floats(beta.as_ref())?,
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
        ledger::record(self.form.op, variant, take_lanes_used());
        Ok(())
    }
}

fn claim(form: Form, node: &Node<'_>) -> std::result::Result<(), Decline> {
    only_attrs(node, &["epsilon"])?;
    if let Some(e) = node.attr_f32("epsilon").filter(|e| e.is_nan() || *e < 0.0) {
        // ORT's kernel refuses these when the session is created; left to it, so the model fails
        // as it does without rcpu.
        return Err(format!("epsilon {e} is negative or NaN"));
    }
    for i in 0..3 {
        require_elem(node, i, F32)?;
    }
    for (i, _) in form.vectors() {
        if input_type(node, i)?.is_some() {
            require_elem(node, i, F32)?;
        }
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
    for i in std::iter::once(2).chain(form.vectors().map(|(i, _)| i)) {
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

fn create(form: Form, info: &KernelInfo<'_>, env: &Arc<KernelEnv>) -> Result<Box<dyn OpKernel>> {
    Ok(Box::new(SkipNorm {
        form,
        epsilon: info.attr_f32("epsilon").unwrap_or(DEFAULT_EPSILON),
        env: env.clone(),
    }))
}

pub const SKIP_SIMPLIFIED_LAYER_NORMALIZATION: OpDef = OpDef {
    op: SIMPLIFIED.op,
    domain: "com.microsoft",
    since: 1,
    until: 1,
    types: &[("T", types::F32), ("U", types::F32)],
    claim: |node| claim(SIMPLIFIED, node),
    create: |info, env| create(SIMPLIFIED, info, env),
};

pub const SKIP_LAYER_NORMALIZATION: OpDef = OpDef {
    op: FULL.op,
    domain: "com.microsoft",
    since: 1,
    until: 1,
    types: &[("T", types::F32), ("U", types::F32)],
    claim: |node| claim(FULL, node),
    create: |info, env| create(FULL, info, env),
};
