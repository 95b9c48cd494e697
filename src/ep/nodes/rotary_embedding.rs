//! com.microsoft.RotaryEmbedding (opset 1) over float32: input `[B, S, hidden]` or
//! `[B, N, S, H]`, `position_ids` int64 (one element: offset for every batch, or `[B, S]`),
//! `cos_cache`/`sin_cache` `[max_pos, rot / 2]`. Attributes `interleaved`, `num_heads`,
//! `rotary_embedding_dim` (partial rotary: elements past it are copied). `is_packed_batching`
//! and a `scale` other than 1 stay on ORT.
//!
//! Head size as ORT derives it: `rotary_embedding_dim == 0` -> `2 * cos_cache.dims[1]` (the whole
//! head rotates), else `hidden / num_heads`.

use std::sync::Arc;

use crate::abi::graph::Node;
use crate::abi::kernel_context::KernelContext;
use crate::abi::kernel_info::KernelInfo;
use crate::abi::status::{Error, Result};
use crate::ep::op::{types, Decline, KernelEnv, OpDef, OpKernel};
use crate::kernels::attention::rotary::{rotary_f32, Positions, RotaryInputs, RotaryShape};
use crate::runtime::par::take_lanes_used;
use crate::telemetry::ledger;

use super::claim::{only_attrs, require_elem, require_output_elem, F32, I64};
use super::glue_common::known_rank_dims;

const OP: &str = "RotaryEmbedding";

struct Rotary {
    attrs: RotaryAttrs,
    env: Arc<KernelEnv>,
}

/// Attributes of a RotaryEmbedding node that shape a call.
#[derive(Clone, Copy, Debug)]
pub struct RotaryAttrs {
    pub interleaved: bool,
    /// `num_heads` (0: absent).
    pub num_heads: usize,
    /// `rotary_embedding_dim` (0: the whole head).
    pub rot: usize,
}

/// Shape of one call from the input and cache dims (ORT's rules, stricter where ORT would read
/// out of bounds); pure, so the fuzz smoke test reaches it.
pub fn shape_of(
    k: &RotaryAttrs,
    x: &[usize],
    cos: &[usize],
) -> std::result::Result<RotaryShape, String> {
    if cos.len() != 2 {
        return Err(format!("cos_cache has rank {}, expected 2", cos.len()));
    }
    let (batch, seq, hidden, heads_4d) = match *x {
        [b, s, h] => (b, s, h, None),
        [b, n, s, h] => (
            b,
            s,
            n.checked_mul(h).ok_or("input hidden size overflows")?,
            Some((n, h)),
        ),
        _ => return Err(format!("input has rank {}, expected 3 or 4", x.len())),
    };
    let head = match (k.rot, heads_4d) {
        (0, Some((_, h))) => h,
        (0, None) => cos[1].checked_mul(2).ok_or("cos_cache dims overflow")?,
        (_, Some((_, h))) => h,
        (_, None) if k.num_heads != 0 && hidden % k.num_heads == 0 => hidden / k.num_heads,
        _ => {
            return Err(format!(
                "hidden size {hidden} is not a multiple of num_heads {}",
                k.num_heads
            ))
        }
    };
    let rot = if k.rot == 0 { head } else { k.rot };
    if head == 0 || hidden % head != 0 {
        return Err(format!(
            "hidden size {hidden} is not a multiple of head size {head}"
        ));
    }
    let heads = hidden / head;
    if (k.num_heads != 0 && k.num_heads != heads) || heads_4d.is_some_and(|(n, _)| n != heads) {
        return Err(format!(
            "num_heads {} does not match the input {x:?}",
            k.num_heads
        ));
    }
    if rot > head || rot % 2 != 0 || cos[1].checked_mul(2) != Some(rot) {
        return Err(format!(
            "cos_cache {cos:?} does not fit rotary dimension {rot} (head size {head})"
        ));
    }
    Ok(RotaryShape {
        batch,
        seq,
        heads,
        head,
        rot,
        head_major: heads_4d.is_some(),
        interleaved: k.interleaved,
    })
}

impl OpKernel for Rotary {
    fn compute(&self, ctx: &KernelContext<'_>) -> Result<()> {
        let x = ctx.required_input(0)?;
        let pos = ctx.required_input(1)?;
        let cos = ctx.required_input(2)?;
        let sin = ctx.required_input(3)?;
        if cos.shape() != sin.shape() {
            return Err(Error::invalid_argument(format!(
                "cos_cache {:?} and sin_cache {:?} differ",
                cos.shape(),
                sin.shape()
            )));
        }
        let sh = shape_of(&self.attrs, x.shape(), cos.shape()).map_err(Error::invalid_argument)?;
        let ids = pos.data::<i64>()?;
        let positions = if ids.len() == 1 && pos.shape().len() <= 1 {
            Positions::Offset(ids[0])
        } else if pos.shape() == [sh.batch, sh.seq] {
            Positions::PerToken(ids)
        } else {
            return Err(Error::invalid_argument(format!(
                "position_ids {:?} is neither one element nor [batch, sequence] = [{}, {}]",
                pos.shape(),
                sh.batch,
                sh.seq
            )));
        };
        let out = ctx.output(0, x.shape())?.into_data::<f32>()?;
        let inputs = RotaryInputs {
            pos: positions,
            cos: cos.data()?,
            sin: sin.data()?,
            x: x.data()?,
        };
        let variant =
            rotary_f32(&sh, &inputs, out, &*self.env.par).map_err(Error::invalid_argument)?;
        ledger::record(OP, variant, take_lanes_used());
        Ok(())
    }
}

fn claim(node: &Node<'_>) -> std::result::Result<(), Decline> {
    only_attrs(
        node,
        &[
            "interleaved",
            "num_heads",
            "rotary_embedding_dim",
            "is_packed_batching",
            "scale",
        ],
    )?;
    if node.attr_i64("is_packed_batching").unwrap_or(0) != 0 {
        return Err("is_packed_batching is not implemented".into());
    }
    if node.attr_f32("scale").unwrap_or(1.0) != 1.0 {
        return Err("scale other than 1 is not implemented".into());
    }
    if !matches!(node.attr_i64("interleaved").unwrap_or(0), 0 | 1) {
        return Err("interleaved must be 0 or 1".into());
    }
    let rot = node.attr_i64("rotary_embedding_dim").unwrap_or(0);
    let heads = node.attr_i64("num_heads").unwrap_or(0);
    if rot < 0 || heads < 0 || (rot > 0 && heads == 0) {
        return Err(format!(
            "rotary_embedding_dim {rot} / num_heads {heads} are not valid"
        ));
    }
    require_elem(node, 0, F32)?;
    require_elem(node, 1, I64)?;
    require_elem(node, 2, F32)?;
    require_elem(node, 3, F32)?;
    require_output_elem(node, F32)?;
    match known_rank_dims(node, 0)? {
        Some(d) if d.len() != 3 && d.len() != 4 => {
            Err(format!("input rank {} is not 3 or 4", d.len()))
        }
        _ => Ok(()),
    }
}

fn create(info: &KernelInfo<'_>, env: &Arc<KernelEnv>) -> Result<Box<dyn OpKernel>> {
    let get = |n: &str| usize::try_from(info.attr_i64(n).unwrap_or(0)).unwrap_or(0);
    Ok(Box::new(Rotary {
        attrs: RotaryAttrs {
            interleaved: info.attr_i64("interleaved").unwrap_or(0) == 1,
            num_heads: get("num_heads"),
            rot: get("rotary_embedding_dim"),
        },
        env: env.clone(),
    }))
}

pub const ROTARY_EMBEDDING: OpDef = OpDef {
    op: OP,
    domain: "com.microsoft",
    since: 1,
    until: 1,
    types: &[("T", types::F32), ("M", types::I64)],
    claim,
    create,
};
