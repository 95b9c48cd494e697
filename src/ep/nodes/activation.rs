//! Elementwise activations over float32: Sigmoid (ONNX 6-13), Gelu (ONNX 20, approximate
//! "none" | "tanh"), com.microsoft.Gelu (erf form) and com.microsoft.FastGelu (tanh form, optional
//! 1-D bias added to X first, broadcast along the last dim), Relu (ONNX 6-14; the builder's MLP
//! activation for `relu` / `relu2` models), Tanh (ONNX 6-13; Gemma 2's final logit softcap) and
//! Pow (ONNX 12-15) with a constant exponent of one element equal to 2 (the square of `relu2`):
//! `x * x`, which is what `pow(x, 2)` rounds to.

use std::sync::Arc;

use crate::abi::graph::Node;
use crate::abi::kernel_context::KernelContext;
use crate::abi::kernel_info::KernelInfo;
use crate::abi::status::{Error, Result};
use crate::abi::tensor::ElemType;
use crate::ep::op::{types, Decline, KernelEnv, OpDef, OpKernel};
use crate::kernels::activation::{activation_f32, Activation};
use crate::runtime::par::take_lanes_used;
use crate::telemetry::ledger;

use super::claim::{input, input_type, only_attrs, require_elem, require_output_elem, F32, I64};
use super::glue_common::known_rank_dims;

const I32: ElemType = ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32;

struct Act {
    op: &'static str,
    act: Activation,
    /// Input 1 is an optional bias (FastGelu).
    has_bias_input: bool,
    env: Arc<KernelEnv>,
}

impl OpKernel for Act {
    fn compute(&self, ctx: &KernelContext<'_>) -> Result<()> {
        let x = ctx.required_input(0)?;
        let bias = if self.has_bias_input {
            ctx.input(1)?
        } else {
            None
        };
        let shape = x.shape();
        if self.has_bias_input && shape.is_empty() {
            // As ORT 1.31.1's FastGelu (a scalar has no hidden dimension).
            return Err(Error::invalid_argument(
                "input 0 is expected to have 1 or more dimensions, got 0",
            ));
        }
        let out = ctx.output(0, shape)?.into_data::<f32>()?;
        let b = match &bias {
            Some(b) => {
                let last = shape.last().copied().unwrap_or(1);
                if b.shape().len() != 1 || b.shape()[0] != last {
                    return Err(Error::invalid_argument(format!(
                        "bias has shape {:?}, expected [{last}] (X's last dimension)",
                        b.shape()
                    )));
                }
                Some(b.data::<f32>()?).filter(|_| !out.is_empty())
            }
            None => None,
        };
        let variant = activation_f32(self.act, x.data::<f32>()?, b, out, &*self.env.par)
            .map_err(Error::invalid_argument)?;
        ledger::record(self.op, variant, take_lanes_used());
        Ok(())
    }
}

fn claim_plain(node: &Node<'_>) -> std::result::Result<(), Decline> {
    only_attrs(node, &[])?;
    require_elem(node, 0, F32)?;
    require_output_elem(node, F32)
}

/// Pow 12-15: a float32 base, and an exponent that is a constant initializer of one element
/// equal to 2 (float32, int32 or int64) whose rank does not exceed the base's (so the output has
/// the base's shape).
fn claim_pow(node: &Node<'_>) -> std::result::Result<(), Decline> {
    only_attrs(node, &[])?;
    require_elem(node, 0, F32)?;
    require_output_elem(node, F32)?;
    let e = input(node, 1)?.ok_or("the exponent is not wired")?;
    let t = e
        .constant_value()
        .map_err(|e| e.msg)?
        .ok_or("an exponent that is not a constant initializer is not implemented")?;
    let two = match t.elem() {
        F32 => t.data::<f32>().map_err(|e| e.msg)? == [2.0],
        I32 => t.data::<i32>().map_err(|e| e.msg)? == [2],
        I64 => t.data::<i64>().map_err(|e| e.msg)? == [2],
        _ => false,
    };
    if !two {
        return Err("only a constant exponent of one element equal to 2 is implemented".into());
    }
    if !t.shape().is_empty() {
        let base = known_rank_dims(node, 0)?.ok_or("the base's rank is unknown")?;
        if base.len() < t.shape().len() {
            return Err("the exponent's rank exceeds the base's".into());
        }
    }
    Ok(())
}

/// ONNX Gelu-20: the string attribute `approximate` is read at creation ("none" | "tanh"; ORT's
/// own kernel rejects anything else the same way, at creation).
fn claim_gelu20(node: &Node<'_>) -> std::result::Result<(), Decline> {
    only_attrs(node, &["approximate"])?;
    require_elem(node, 0, F32)?;
    require_output_elem(node, F32)
}

fn claim_fast_gelu(node: &Node<'_>) -> std::result::Result<(), Decline> {
    only_attrs(node, &[])?;
    require_elem(node, 0, F32)?;
    if input_type(node, 1)?.is_some() {
        require_elem(node, 1, F32)?;
        if let Some(b) = known_rank_dims(node, 1)? {
            if b.len() != 1 {
                return Err(format!("bias has rank {}, expected 1", b.len()));
            }
            if let Some(&last) = known_rank_dims(node, 0)?.as_ref().and_then(|x| x.last()) {
                if last >= 0 && b[0] >= 0 && b[0] != last {
                    return Err(format!(
                        "bias has {} elements, X's last dim is {last}",
                        b[0]
                    ));
                }
            }
        }
    }
    require_output_elem(node, F32)
}

fn make(
    env: &Arc<KernelEnv>,
    op: &'static str,
    act: Activation,
    has_bias_input: bool,
) -> Result<Box<dyn OpKernel>> {
    Ok(Box::new(Act {
        op,
        act,
        has_bias_input,
        env: env.clone(),
    }))
}

fn create_sigmoid(_info: &KernelInfo<'_>, env: &Arc<KernelEnv>) -> Result<Box<dyn OpKernel>> {
    make(env, "Sigmoid", Activation::Sigmoid, false)
}

fn create_relu(_info: &KernelInfo<'_>, env: &Arc<KernelEnv>) -> Result<Box<dyn OpKernel>> {
    make(env, "Relu", Activation::Relu, false)
}

fn create_pow(_info: &KernelInfo<'_>, env: &Arc<KernelEnv>) -> Result<Box<dyn OpKernel>> {
    make(env, "Pow", Activation::Square, false)
}

fn create_tanh(_info: &KernelInfo<'_>, env: &Arc<KernelEnv>) -> Result<Box<dyn OpKernel>> {
    make(env, "Tanh", Activation::Tanh, false)
}

fn create_gelu20(info: &KernelInfo<'_>, env: &Arc<KernelEnv>) -> Result<Box<dyn OpKernel>> {
    let act = match info.attr_string("approximate").as_deref() {
        None | Some("none") => Activation::GeluErf,
        Some("tanh") => Activation::GeluTanh,
        Some(other) => {
            return Err(Error::invalid_argument(format!(
                "Gelu: approximate=\"{other}\" is not \"none\" or \"tanh\""
            )))
        }
    };
    make(env, "Gelu", act, false)
}

fn create_ms_gelu(_info: &KernelInfo<'_>, env: &Arc<KernelEnv>) -> Result<Box<dyn OpKernel>> {
    make(env, "com.microsoft.Gelu", Activation::GeluErf, false)
}

fn create_fast_gelu(_info: &KernelInfo<'_>, env: &Arc<KernelEnv>) -> Result<Box<dyn OpKernel>> {
    make(env, "FastGelu", Activation::GeluTanh, true)
}

/// Sigmoid 6 (no `consumed_inputs`) through 13 (the latest).
pub const SIGMOID: OpDef = OpDef {
    op: "Sigmoid",
    domain: "",
    since: 6,
    until: 13,
    types: &[("T", types::F32)],
    claim: claim_plain,
    create: create_sigmoid,
};

/// Relu 6 (no `consumed_inputs`) through 14 (14 adds integer types; float32 is the same op).
pub const RELU: OpDef = OpDef {
    op: "Relu",
    domain: "",
    since: 6,
    until: 14,
    types: &[("T", types::F32)],
    claim: claim_plain,
    create: create_relu,
};

/// Tanh 6 (no `consumed_inputs`) through 13.
pub const TANH: OpDef = OpDef {
    op: "Tanh",
    domain: "",
    since: 6,
    until: 13,
    types: &[("T", types::F32)],
    claim: claim_plain,
    create: create_tanh,
};

/// Pow 12 (the exponent's type apart from the base's) through 15.
pub const POW: OpDef = OpDef {
    op: "Pow",
    domain: "",
    since: 12,
    until: 15,
    types: &[("T", types::F32), ("T1", &[F32, I32, I64])],
    claim: claim_pow,
    create: create_pow,
};

pub const GELU: OpDef = OpDef {
    op: "Gelu",
    domain: "",
    since: 20,
    until: 20,
    types: &[("T", types::F32)],
    claim: claim_gelu20,
    create: create_gelu20,
};

pub const MS_GELU: OpDef = OpDef {
    op: "Gelu",
    domain: "com.microsoft",
    since: 1,
    until: 1,
    types: &[("T", types::F32)],
    claim: claim_plain,
    create: create_ms_gelu,
};

pub const FAST_GELU: OpDef = OpDef {
    op: "FastGelu",
    domain: "com.microsoft",
    since: 1,
    until: 1,
    types: &[("T", types::F32)],
    claim: claim_fast_gelu,
    create: create_fast_gelu,
};
