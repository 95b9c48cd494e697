//! MatMul over float32 (numpy semantics: 1-D operands, batched with broadcast).

use std::sync::Arc;

use crate::abi::graph::Node;
use crate::abi::kernel_context::KernelContext;
use crate::abi::kernel_info::KernelInfo;
use crate::abi::status::{Error, Result};
use crate::kernels::gemm::matmul_f32;
use crate::kernels::op::{types, Decline, KernelEnv, OpDef, OpKernel};
use crate::kernels::shape::matmul_shapes;
use crate::telemetry::ledger;

use super::claim::{known_dims, only_attrs, require_elem, require_output_elem, F32};

struct MatMul {
    env: Arc<KernelEnv>,
}

impl OpKernel for MatMul {
    fn compute(&self, ctx: &KernelContext<'_>) -> Result<()> {
        let a = ctx.required_input(0)?;
        let b = ctx.required_input(1)?;
        let plan = matmul_shapes(a.shape(), b.shape()).map_err(Error::invalid_argument)?;
        let out = ctx.output(0, &plan.out_shape)?.into_data::<f32>()?;
        let variant = matmul_f32(
            a.data()?,
            a.shape(),
            b.data()?,
            b.shape(),
            out,
            &*self.env.par,
        )
        .map_err(Error::invalid_argument)?;
        ledger::record("MatMul", variant, self.env.par.lanes());
        Ok(())
    }
}

fn claim(node: &Node<'_>) -> std::result::Result<(), Decline> {
    only_attrs(node, &[])?;
    let a = require_elem(node, 0, F32)?;
    let b = require_elem(node, 1, F32)?;
    require_output_elem(node, F32)?;
    if let (Some(x), Some(y)) = (known_dims(&a), known_dims(&b)) {
        matmul_shapes(&x, &y)?;
    }
    Ok(())
}

fn create(_info: &KernelInfo<'_>, env: &Arc<KernelEnv>) -> Result<Box<dyn OpKernel>> {
    Ok(Box::new(MatMul { env: env.clone() }))
}

pub const MATMUL: OpDef = OpDef {
    op: "MatMul",
    domain: "",
    since: 1,
    until: 13,
    types: &[("T", types::F32)],
    claim,
    create,
};
