//! Claim and compute helpers shared by the glue-op node kernels (normalisations, softmax,
//! activations).

use crate::abi::graph::Node;
use crate::abi::kernel_context::KernelContext;
use crate::abi::status::{Error, Result};
use crate::ep::op::Decline;

use super::claim::input_type;

fn err(e: Error) -> Decline {
    e.msg
}

/// Whether output `i` is wired to a non-empty name.
pub fn output_wired(node: &Node<'_>, i: usize) -> std::result::Result<bool, Decline> {
    let outs = node.outputs().map_err(err)?;
    Ok(match outs.get(i).copied().flatten() {
        None => false,
        Some(v) => !v.name().map_err(err)?.is_empty(),
    })
}

/// Declines `stash_type` other than 1 (float32 statistics).
pub fn stash_type_f32(node: &Node<'_>) -> std::result::Result<(), Decline> {
    match node.attr_i64("stash_type") {
        None | Some(1) => Ok(()),
        Some(v) => Err(format!(
            "stash_type={v} is not implemented (only 1, float32)"
        )),
    }
}

/// Input `i`'s rank and dims where the rank is known (ORT reports unknown rank as no dims).
pub fn known_rank_dims(
    node: &Node<'_>,
    i: usize,
) -> std::result::Result<Option<Vec<i64>>, Decline> {
    Ok(input_type(node, i)?.and_then(|t| (!t.dims.is_empty()).then_some(t.dims)))
}

/// Product of dims when all are known.
pub fn known_count(dims: &[i64]) -> Option<usize> {
    dims.iter()
        .map(|&d| usize::try_from(d).ok())
        .try_fold(1usize, |a, d| d.map(|d| a * d))
}

/// Normalises `axis` for `rank` (ONNX: `[-rank, rank)`).
pub fn norm_axis(axis: i64, rank: usize) -> std::result::Result<usize, String> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(format!("axis {axis} is out of range for rank {rank}"));
    }
    Ok(if axis < 0 { axis + r } else { axis } as usize)
}

/// Optional output `i`: `None` when the node has no output there or ORT gives it no buffer
/// (an output left empty in the graph).
pub fn optional_output<'a>(
    ctx: &KernelContext<'a>,
    i: usize,
    shape: &[usize],
) -> Result<Option<&'a mut [f32]>> {
    if i >= ctx.output_count()? {
        return Ok(None);
    }
    match ctx.output(i, shape) {
        Ok(t) => t.into_data::<f32>().map(Some),
        Err(_) => Ok(None),
    }
}
