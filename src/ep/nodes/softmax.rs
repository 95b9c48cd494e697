//! Softmax-13 over float32 along `axis` (default -1). Opsets 1-12 flatten the input to 2-D at
//! `axis` (different semantics) and are not registered.

use std::sync::Arc;

use crate::abi::graph::Node;
use crate::abi::kernel_context::KernelContext;
use crate::abi::kernel_info::KernelInfo;
use crate::abi::status::{Error, Result};
use crate::ep::op::{types, Decline, KernelEnv, OpDef, OpKernel};
use crate::kernels::shape::checked_numel;
use crate::kernels::softmax::softmax_f32;
use crate::runtime::par::take_lanes_used;
use crate::telemetry::ledger;

use super::claim::{only_attrs, require_elem, require_output_elem, F32};
use super::glue_common::{known_rank_dims, norm_axis};

struct Softmax {
    axis: i64,
    env: Arc<KernelEnv>,
}

impl OpKernel for Softmax {
    fn compute(&self, ctx: &KernelContext<'_>) -> Result<()> {
        let x = ctx.required_input(0)?;
        let shape = x.shape();
        let out = ctx.output(0, shape)?.into_data::<f32>()?;
        // Rank 0 has no valid axis: an error, as from ORT's own kernel.
        let a = norm_axis(self.axis, shape.len()).map_err(Error::invalid_argument)?;
        let numel =
            |what: &str, d: &[usize]| checked_numel(what, d).map_err(Error::invalid_argument);
        let (outer, dim, inner) = (
            numel("the dims before the axis", &shape[..a])?,
            shape[a],
            numel("the dims after the axis", &shape[a + 1..])?,
        );
        let variant = softmax_f32(x.data::<f32>()?, outer, dim, inner, out, &*self.env.par)
            .map_err(Error::invalid_argument)?;
        ledger::record("Softmax", variant, take_lanes_used());
        Ok(())
    }
}

fn claim(node: &Node<'_>) -> std::result::Result<(), Decline> {
    only_attrs(node, &["axis"])?;
    require_elem(node, 0, F32)?;
    require_output_elem(node, F32)?;
    let axis = node.attr_i64("axis").unwrap_or(-1);
    match known_rank_dims(node, 0)? {
        Some(d) => norm_axis(axis, d.len()).map(|_| ()),
        // Unknown rank (or a true scalar): ORT reports no dims; the axis is checked per call.
        None => Ok(()),
    }
}

fn create(info: &KernelInfo<'_>, env: &Arc<KernelEnv>) -> Result<Box<dyn OpKernel>> {
    Ok(Box::new(Softmax {
        axis: info.attr_i64("axis").unwrap_or(-1),
        env: env.clone(),
    }))
}

pub const SOFTMAX: OpDef = OpDef {
    op: "Softmax",
    domain: "",
    since: 13,
    until: 13,
    types: &[("T", types::F32)],
    claim,
    create,
};
