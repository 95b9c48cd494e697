//! Cast (ONNX 6-21) between float32 and float16 only, in either direction, bit-exact with
//! ORT's CPU EP. `to` selects the output type. Every other type pair stays on ORT (f32 -> f32
//! included: a copy). `saturate` (opset 19+, default 1, which ORT reports on every such node)
//! applies to float8 targets only; a node with `saturate=0` also stays on ORT, whose own kernel
//! rejects it for other targets, as it keeps doing.

use std::sync::Arc;

use crate::abi::graph::Node;
use crate::abi::kernel_context::KernelContext;
use crate::abi::kernel_info::KernelInfo;
use crate::abi::status::{Error, Result};
use crate::abi::tensor::{elem_name, ElemType, F16Bits};
use crate::ep::op::{types, Decline, KernelEnv, OpDef, OpKernel};
use crate::kernels::cast::{f16_to_f32_buf, f32_to_f16_buf};
use crate::runtime::par::take_lanes_used;
use crate::telemetry::ledger;

use super::claim::{input_type, only_attrs, require_output_elem, F32};

const F16: ElemType = ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;

struct Cast {
    to_f16: bool,
    env: Arc<KernelEnv>,
}

impl OpKernel for Cast {
    fn compute(&self, ctx: &KernelContext<'_>) -> Result<()> {
        let x = ctx.required_input(0)?;
        let shape = x.shape();
        let out = ctx.output(0, shape)?;
        let par = &*self.env.par;
        let variant = if self.to_f16 {
            f32_to_f16_buf(x.data::<f32>()?, out.into_data::<F16Bits>()?, par)
        } else {
            f16_to_f32_buf(x.data::<F16Bits>()?, out.into_data::<f32>()?, par)
        }
        .map_err(Error::invalid_argument)?;
        let op = if self.to_f16 {
            "Cast(f32->f16)"
        } else {
            "Cast(f16->f32)"
        };
        ledger::record(op, variant, take_lanes_used());
        Ok(())
    }
}

/// The ONNX element type code of `to`, as ORT's enum.
fn target(to: Option<i64>) -> std::result::Result<ElemType, Decline> {
    match to {
        Some(1) => Ok(F32),
        Some(10) => Ok(F16),
        Some(t) => Err(format!(
            "to={t}: rcpu casts only between float32 and float16"
        )),
        None => Err("attribute 'to' is missing".into()),
    }
}

fn claim(node: &Node<'_>) -> std::result::Result<(), Decline> {
    only_attrs(node, &["to", "saturate"])?;
    if node.attr_i64("saturate").is_some_and(|v| v != 1) {
        return Err("saturate=0 is for float8 targets (ORT rejects it for float16)".into());
    }
    let to = target(node.attr_i64("to"))?;
    let from = input_type(node, 0)?.ok_or("input 0 is missing")?.elem;
    let pair_ok = (from == F32 && to == F16) || (from == F16 && to == F32);
    if !pair_ok {
        return Err(format!(
            "{} -> {}: rcpu casts only float32 <-> float16",
            elem_name(from),
            elem_name(to)
        ));
    }
    require_output_elem(node, to)
}

fn create(info: &KernelInfo<'_>, env: &Arc<KernelEnv>) -> Result<Box<dyn OpKernel>> {
    let to = target(info.attr_i64("to")).map_err(Error::invalid_argument)?;
    Ok(Box::new(Cast {
        to_f16: to == F16,
        env: env.clone(),
    }))
}

/// Cast 6 through 21 (19 added `saturate`, float8 only; 21 added int4/uint4 types). The kernel
/// def lists float32 and float16 for both T1 and T2; the claim keeps the f32 <-> f16 pairs.
pub const CAST: OpDef = OpDef {
    op: "Cast",
    domain: "",
    since: 6,
    until: 21,
    types: &[("T1", types::F32_F16), ("T2", types::F32_F16)],
    claim,
    create,
};
