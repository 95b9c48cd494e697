//! Reshape (ONNX 5-25) of float32 data by an int64 `shape` input: the data copied unchanged
//! under the new dims. A `0` in `shape` keeps the input's dim at that index (unless `allowzero`
//! = 1, opset 14 on, where it is a literal 0), one `-1` takes what the other dims leave.
//!
//! Why rcpu takes it: the model builder wraps the per-head query / key norms of Qwen3- and
//! Gemma3-style decoders in Reshapes (`[B, S, heads * head]` -> `[B, S * heads, head]` and back),
//! and each one left to ORT cut the layer's fused partition in pieces. Other element types
//! (the int64 mask and position chains) stay on ORT. Inside a fused partition the output takes
//! over the input's buffer where the partition owns both and the Reshape is the input's last
//! reader (`OpKernel::view_dims`, `abi::fused`): no copy, route `view`; elsewhere (a partition's
//! own input or output) the data is copied, route `copy`. A Reshape alone (no other rcpu node in
//! its partition, or `fuse=off`) is left to ORT (`ep::capability::worth_taking`).

use std::sync::Arc;

use crate::abi::graph::Node;
use crate::abi::kernel_context::KernelContext;
use crate::abi::kernel_info::KernelInfo;
use crate::abi::status::{Error, Result};
use crate::abi::tensor::Tensor;
use crate::ep::op::{types, Decline, KernelEnv, OpDef, OpKernel};
use crate::runtime::par::take_lanes_used;
use crate::telemetry::ledger;

use super::claim::{only_attrs, require_elem, require_output_elem, F32, I64};

const OP: &str = "Reshape";

struct Reshape {
    allowzero: bool,
}

/// The output dims of a Reshape of `input` dims by `shape` (ONNX's rule), or why there are none.
/// Every product is checked: a model's `shape` may hold anything.
pub fn reshaped(
    input: &[usize],
    shape: &[i64],
    allowzero: bool,
) -> std::result::Result<Vec<usize>, String> {
    let count = input
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| format!("input dims {input:?} overflow"))?;
    let mut out = Vec::with_capacity(shape.len());
    let mut infer = None;
    for (i, &s) in shape.iter().enumerate() {
        let d = match s {
            -1 if infer.is_some() => return Err(format!("shape {shape:?} has more than one -1")),
            -1 => {
                infer = Some(i);
                1
            }
            0 if !allowzero => *input.get(i).ok_or_else(|| {
                format!("shape {shape:?}: a 0 at index {i} copies an input dim, but the input {input:?} has rank {}", input.len())
            })?,
            s if s < 0 => return Err(format!("shape {shape:?} has the negative dim {s}")),
            s => usize::try_from(s).map_err(|_| format!("shape {shape:?}: dim {s} does not fit"))?,
        };
        out.push(d);
    }
    let known = out
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| format!("shape {shape:?} overflows"))?;
    if let Some(i) = infer {
        if allowzero && shape.contains(&0) {
            return Err(format!(
                "shape {shape:?} has both -1 and a literal 0 (allowzero = 1)"
            ));
        }
        if known == 0 || count % known != 0 {
            return Err(format!(
                "input dims {input:?} cannot be reshaped to {shape:?}"
            ));
        }
        out[i] = count / known;
    } else if known != count {
        return Err(format!(
            "input dims {input:?} ({count} elements) cannot be reshaped to {shape:?} ({known})"
        ));
    }
    Ok(out)
}

impl Reshape {
    /// The data input and the output dims of this call.
    fn dims<'a>(&self, ctx: &KernelContext<'a>) -> Result<(Tensor<'a>, Vec<usize>)> {
        let x = ctx.required_input(0)?;
        let shape = ctx.required_input(1)?;
        if shape.shape().len() != 1 {
            return Err(Error::invalid_argument(format!(
                "shape has dims {:?}, expected one dimension",
                shape.shape()
            )));
        }
        let dims = reshaped(x.shape(), shape.data::<i64>()?, self.allowzero)
            .map_err(Error::invalid_argument)?;
        Ok((x, dims))
    }
}

impl OpKernel for Reshape {
    fn compute(&self, ctx: &KernelContext<'_>) -> Result<()> {
        let (x, dims) = self.dims(ctx)?;
        let src = x.data::<f32>()?;
        ctx.output(0, &dims)?
            .into_data::<f32>()?
            .copy_from_slice(src);
        ledger::record(OP, "copy", take_lanes_used());
        Ok(())
    }

    /// Inside a fused partition the data need not move: the partition hands the input's buffer
    /// to the output where it may (`abi::fused`), and the route says `view`.
    fn is_view(&self) -> bool {
        true
    }

    fn view_dims(&self, ctx: &KernelContext<'_>) -> Option<Result<Vec<usize>>> {
        let dims = self.dims(ctx).map(|(_, dims)| dims);
        if dims.is_ok() {
            ledger::record(OP, "view", take_lanes_used());
        }
        Some(dims)
    }
}

fn claim(node: &Node<'_>) -> std::result::Result<(), Decline> {
    only_attrs(node, &["allowzero"])?;
    if let Some(a) = node.attr_i64("allowzero").filter(|a| !matches!(a, 0 | 1)) {
        return Err(format!("allowzero {a} is not 0 or 1"));
    }
    require_elem(node, 0, F32)?;
    require_elem(node, 1, I64)?;
    require_output_elem(node, F32)?;
    Ok(())
}

fn create(info: &KernelInfo<'_>, _env: &Arc<KernelEnv>) -> Result<Box<dyn OpKernel>> {
    Ok(Box::new(Reshape {
        allowzero: info.attr_i64("allowzero").unwrap_or(0) == 1,
    }))
}

pub const RESHAPE: OpDef = OpDef {
    op: OP,
    domain: "",
    since: 5,
    until: 25,
    types: &[("T", types::F32)],
    claim,
    create,
};

#[cfg(test)]
mod tests {
    use super::reshaped;

    #[test]
    fn zeros_copy_and_minus_one_infers() {
        assert_eq!(reshaped(&[2, 3, 4], &[0, -1], false), Ok(vec![2, 12]));
        assert_eq!(
            reshaped(&[1, 5, 896], &[0, -1, 64], false),
            Ok(vec![1, 70, 64])
        );
        assert_eq!(
            reshaped(&[1, 70, 64], &[0, -1, 896], false),
            Ok(vec![1, 5, 896])
        );
        assert_eq!(reshaped(&[2, 3, 4], &[4, 0, 2], false), Ok(vec![4, 3, 2]));
        assert_eq!(reshaped(&[0, 3], &[3, 0], true), Ok(vec![3, 0]));
        assert_eq!(reshaped(&[0, 3], &[-1, 3], false), Ok(vec![0, 3]));
        assert_eq!(reshaped(&[], &[1, 1], false), Ok(vec![1, 1]));
        assert!(reshaped(&[6], &[], false)
            .unwrap_err()
            .contains("cannot be reshaped"));
    }

    #[test]
    fn bad_shapes_are_errors_not_panics() {
        for (input, shape, allowzero) in [
            (&[2usize, 3][..], &[-1i64, -1][..], false),
            (&[2, 3], &[4, -1], false),
            (&[2, 3], &[5], false),
            (&[2, 3], &[0, 0, 0], false),
            (&[2, 3], &[-2, 3], false),
            (&[0, 3], &[0, -1], true),
            (&[2, 3], &[i64::MAX, i64::MAX], false),
            (&[usize::MAX, 2], &[-1], false),
        ] {
            assert!(
                reshaped(input, shape, allowzero).is_err(),
                "{input:?} by {shape:?}"
            );
        }
    }
}
