//! Split (ONNX 13-25) of float32 data along one axis into the node's outputs, each a copy of
//! its piece (`kernels::split`). The sizes come from the int64 `split` input when given, else
//! from `num_outputs` (opset 18 on: equal pieces, the last one smaller), else equal pieces, by
//! ORT's rules where they leave ONNX's (`kernels::split::split_sizes`: an empty `split` is none,
//! `num_outputs` counts the node's outputs). A `num_outputs` beside a `split` input is left to
//! ORT, which refuses the model.
//!
//! Why rcpu takes it: the model builder writes a Split after the packed QKV projection of
//! decoders with per-head query / key norms (Qwen3-style: `[q | k | v]` into three, the norms
//! between Reshapes, then a GroupQueryAttention of separate Q, K and V), and after a packed
//! gate-up projection (`fuse_mlp_gate_up`). Each one left to ORT cut the layer's fused
//! partition in two. Like Reshape, a Split alone (no other rcpu node in its partition, or
//! `fuse=off`) is left to ORT (`ep::capability::worth_taking`): there it would only add a
//! hand-over between the EPs.

use std::sync::Arc;

use crate::abi::graph::Node;
use crate::abi::kernel_context::KernelContext;
use crate::abi::kernel_info::KernelInfo;
use crate::abi::status::{Error, Result};
use crate::ep::op::{types, Decline, KernelEnv, OpDef, OpKernel};
use crate::kernels::shape::checked_numel;
use crate::kernels::split::{copy_piece, split_sizes};
use crate::runtime::par::take_lanes_used;
use crate::telemetry::ledger;

use super::claim::{input_type, only_attrs, require_elem, require_output_elem, F32, I64};
use super::glue_common::norm_axis;

const OP: &str = "Split";

struct Split {
    axis: i64,
    num_outputs: Option<i64>,
}

impl OpKernel for Split {
    fn compute(&self, ctx: &KernelContext<'_>) -> Result<()> {
        let x = ctx.required_input(0)?;
        let dims = x.shape();
        let rank = dims.len();
        let axis = norm_axis(self.axis, rank).map_err(Error::invalid_argument)?;
        // Read in place: the tensor lives for the call, and a fed `split` may be of any length
        // (an empty one is no `split`: `split_sizes`).
        let split = match ctx.input(1)? {
            Some(s) if s.shape().len() != 1 => {
                return Err(Error::invalid_argument(format!(
                    "split has dims {:?}, expected one dimension",
                    s.shape()
                )))
            }
            Some(s) => Some(s.data::<i64>()?),
            None => None,
        };
        let outputs = ctx.output_count()?;
        let len = dims[axis];
        let sizes =
            split_sizes(len, outputs, split, self.num_outputs).map_err(Error::invalid_argument)?;
        let outer = checked_numel("the dims before the axis", &dims[..axis])
            .map_err(Error::invalid_argument)?;
        let inner = checked_numel("the dims after the axis", &dims[axis + 1..])
            .map_err(Error::invalid_argument)?;
        let src = x.data::<f32>()?;
        let mut start = 0usize;
        let mut out_dims = dims.to_vec();
        for (j, &size) in sizes.iter().enumerate() {
            // An omitted output (an empty name: ORT's own Split crashes on it) is skipped.
            if !ctx.output_present(j) {
                start += size;
                continue;
            }
            out_dims[axis] = size;
            let out = ctx.output(j, &out_dims)?.into_data::<f32>()?;
            copy_piece(src, out, outer, len, inner, start, size).ok_or_else(|| {
                Error::fail(format!(
                    "output {j}: piece {start}+{size} of {dims:?} does not fit"
                ))
            })?;
            start += size;
        }
        ledger::record(OP, "copy", take_lanes_used());
        Ok(())
    }
}

fn claim(node: &Node<'_>) -> std::result::Result<(), Decline> {
    only_attrs(node, &["axis", "num_outputs"])?;
    // ORT refuses the model when a `num_outputs` (other than its "not given", -1) comes with a
    // second input, even an empty or omitted one: left to ORT, the session gives its answer.
    let inputs = node.inputs().map_err(|e| e.msg)?.len();
    if let Some(n) = node.attr_i64("num_outputs").filter(|&n| n != -1) {
        if inputs > 1 {
            return Err(format!(
                "num_outputs {n} together with a split input (ORT refuses the node)"
            ));
        }
    }
    require_elem(node, 0, F32)?;
    if input_type(node, 1)?.is_some() {
        require_elem(node, 1, I64)?;
    }
    require_output_elem(node, F32)?;
    Ok(())
}

fn create(info: &KernelInfo<'_>, _env: &Arc<KernelEnv>) -> Result<Box<dyn OpKernel>> {
    Ok(Box::new(Split {
        axis: info.attr_i64("axis").unwrap_or(0),
        num_outputs: info.attr_i64("num_outputs"),
    }))
}

pub const SPLIT: OpDef = OpDef {
    op: OP,
    domain: "",
    since: 13,
    until: 25,
    types: &[("T", types::F32)],
    claim,
    create,
};

#[cfg(test)]
mod tests {
    use super::norm_axis;

    #[test]
    fn axes_count_from_either_end() {
        assert_eq!(norm_axis(-1, 3), Ok(2));
        assert_eq!(norm_axis(0, 3), Ok(0));
        assert_eq!(norm_axis(-3, 3), Ok(0));
        assert!(norm_axis(3, 3).is_err());
        assert!(norm_axis(-4, 3).is_err());
        assert!(norm_axis(0, 0).is_err());
        assert!(norm_axis(i64::MIN, 2).is_err());
    }
}
