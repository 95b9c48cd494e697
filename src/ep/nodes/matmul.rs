//! MatMul over float32 (numpy semantics: 1-D operands, batched with broadcast). A constant 2-D
//! B is prepacked (`f32_weight.rs`); A's leading dims are then flattened into the rows of one
//! product.

use std::sync::Arc;

use crate::abi::graph::Node;
use crate::abi::kernel_context::KernelContext;
use crate::abi::kernel_info::KernelInfo;
use crate::abi::status::{Error, Result};
use crate::abi::tensor::Tensor;
use crate::ep::op::{types, Decline, KernelEnv, OpDef, OpKernel, PackedExport, PackedImport};
use crate::kernels::gemm::{matmul_f32, Sgemm};
use crate::kernels::shape::{checked_numel, matmul_shapes};
use crate::runtime::par::take_lanes_used;
use crate::telemetry::ledger;

use super::claim::{known_dims, only_attrs, require_elem, require_output_elem, F32};
use super::f32_weight::ConstB;

struct MatMul {
    /// B when it is a constant 2-D initializer (offered through prepack).
    weight: Option<ConstB>,
    env: Arc<KernelEnv>,
}

impl MatMul {
    /// `Y = A @ W` with A `[..., K]` (1-D A: `[K]`, Y `[N]`) flattened to rows.
    fn compute_weight(&self, ctx: &KernelContext<'_>, w: &ConstB) -> Result<()> {
        let a = ctx.required_input(0)?;
        let sa = a.shape();
        let (k, n) = (w.k, w.n);
        let Some((&ka, lead)) = sa.split_last() else {
            return Err(Error::invalid_argument(
                "input A is a scalar; MatMul needs rank >= 1",
            ));
        };
        if ka != k {
            return Err(Error::invalid_argument(format!(
                "A {sa:?} and B {:?}: inner dimensions {ka} and {k} differ",
                w.shape
            )));
        }
        let rows = checked_numel("input A", lead).map_err(Error::invalid_argument)?;
        let mut out_shape = lead.to_vec();
        out_shape.push(n);
        let out = ctx.output(0, &out_shape)?.into_data::<f32>()?;
        let a = a.data::<f32>()?;
        let par = &*self.env.par;
        let call = Sgemm::new(rows, n, k, a).par(par);
        let variant = w.with(ctx, 1, |b| call.run_weight(b, out).map_err(Error::fail))?;
        ledger::record("MatMul", variant, take_lanes_used());
        Ok(())
    }
}

impl OpKernel for MatMul {
    fn prepack(&mut self, input_index: usize, tensor: &Tensor<'_>) -> Result<bool> {
        if input_index != 1 {
            return Ok(false);
        }
        self.weight = ConstB::prepack(tensor, false)?;
        Ok(self.weight.as_ref().is_some_and(ConstB::is_packed))
    }

    fn export_packed(&self) -> Option<PackedExport<'_>> {
        self.weight.as_ref()?.export_packed()
    }

    fn import_packed(&mut self, imp: PackedImport) -> Result<bool> {
        match ConstB::import_packed(imp, false)? {
            Some(w) => {
                self.weight = Some(w);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn compute(&self, ctx: &KernelContext<'_>) -> Result<()> {
        if let Some(w) = &self.weight {
            return self.compute_weight(ctx, w);
        }
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
        ledger::record("MatMul", variant, take_lanes_used());
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
    Ok(Box::new(MatMul {
        weight: None,
        env: env.clone(),
    }))
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
