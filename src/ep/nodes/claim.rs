//! Claim helpers shared by the node kernels.

use crate::abi::graph::{Node, ValueInfo};
use crate::abi::tensor::{elem_name, ElemType, TensorType};
use crate::ep::op::Decline;

fn err(e: crate::abi::status::Error) -> Decline {
    e.msg
}

/// The tensor type of input `i` (None when omitted).
pub fn input_type(node: &Node<'_>, i: usize) -> Result<Option<TensorType>, Decline> {
    let inputs = node.inputs().map_err(err)?;
    match inputs.get(i).copied().flatten() {
        None => Ok(None),
        Some(v) => v.tensor_type().map_err(err),
    }
}

/// Input `i` (None when omitted).
pub fn input<'a>(node: &Node<'a>, i: usize) -> Result<Option<ValueInfo<'a>>, Decline> {
    Ok(node.inputs().map_err(err)?.get(i).copied().flatten())
}

/// Requires input `i` to be present with element type `elem`.
pub fn require_elem(node: &Node<'_>, i: usize, elem: ElemType) -> Result<TensorType, Decline> {
    let t = input_type(node, i)?.ok_or_else(|| format!("input {i} is missing"))?;
    if t.elem != elem {
        return Err(format!(
            "input {i} is {}, rcpu implements {}",
            elem_name(t.elem),
            elem_name(elem)
        ));
    }
    Ok(t)
}

/// Requires every present output to have element type `elem`.
pub fn require_output_elem(node: &Node<'_>, elem: ElemType) -> Result<(), Decline> {
    for (i, o) in node.outputs().map_err(err)?.iter().enumerate() {
        if let Some(o) = o {
            if let Some(t) = o.tensor_type().map_err(err)? {
                if t.elem != elem {
                    return Err(format!("output {i} is {}", elem_name(t.elem)));
                }
            }
        }
    }
    Ok(())
}

/// Declines when the node has an attribute outside `known`.
pub fn only_attrs(node: &Node<'_>, known: &[&str]) -> Result<(), Decline> {
    for a in node.attr_names().map_err(err)? {
        if !known.contains(&a.as_str()) {
            return Err(format!("attribute '{a}' is not implemented"));
        }
    }
    Ok(())
}

pub const F32: ElemType = ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
pub const I64: ElemType = ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;

/// The dims of `t` when its rank and every dim are known at load time. ORT reports an unknown
/// rank as zero dims, so zero dims counts as unknown here (ops with a true rank-0 form must not
/// rely on this for scalars).
pub fn known_dims(t: &TensorType) -> Option<Vec<usize>> {
    if t.dims.is_empty() {
        return None;
    }
    t.static_dims()
}
