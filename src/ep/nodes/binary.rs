//! Add, Sub, Mul, Div over float32 with numpy broadcasting.

use std::sync::Arc;

use crate::abi::graph::Node;
use crate::abi::kernel_context::KernelContext;
use crate::abi::kernel_info::KernelInfo;
use crate::abi::status::{Error, Result};
use crate::ep::op::{types, Decline, KernelEnv, OpDef, OpKernel};
use crate::kernels::elementwise::{binary_f32, BinaryOp};
use crate::kernels::shape::{broadcast_dims, broadcast_shapes};
use crate::runtime::par::take_lanes_used;
use crate::telemetry::ledger;

use super::claim::{known_dims, only_attrs, require_elem, require_output_elem, F32};

struct Binary {
    op: BinaryOp,
    name: &'static str,
    env: Arc<KernelEnv>,
}

impl OpKernel for Binary {
    fn compute(&self, ctx: &KernelContext<'_>) -> Result<()> {
        let a = ctx.required_input(0)?;
        let b = ctx.required_input(1)?;
        let shape = broadcast_dims(a.shape(), b.shape()).map_err(Error::invalid_argument)?;
        let out = ctx.output(0, &shape)?.into_data::<f32>()?;
        let variant = binary_f32(
            self.op,
            a.data()?,
            a.shape(),
            b.data()?,
            b.shape(),
            out,
            &*self.env.par,
        )
        .map_err(Error::invalid_argument)?;
        ledger::record(self.name, variant, take_lanes_used());
        Ok(())
    }
}

fn claim(node: &Node<'_>) -> std::result::Result<(), Decline> {
    only_attrs(node, &[])?;
    let a = require_elem(node, 0, F32)?;
    let b = require_elem(node, 1, F32)?;
    require_output_elem(node, F32)?;
    // Statically incompatible shapes stay with ORT, which reports them its own way.
    if let (Some(x), Some(y)) = (known_dims(&a), known_dims(&b)) {
        broadcast_shapes(&x, &y)?;
    }
    Ok(())
}

macro_rules! binary_def {
    ($name:literal, $op:expr, $create:ident) => {{
        fn $create(_info: &KernelInfo<'_>, env: &Arc<KernelEnv>) -> Result<Box<dyn OpKernel>> {
            Ok(Box::new(Binary {
                op: $op,
                name: $name,
                env: env.clone(),
            }))
        }
        // Opset 7 introduced numpy broadcasting (no `broadcast` attribute); 14 is the latest.
        OpDef {
            op: $name,
            domain: "",
            since: 7,
            until: 14,
            types: &[("T", types::F32)],
            claim,
            create: $create,
        }
    }};
}

pub const ADD: OpDef = binary_def!("Add", BinaryOp::Add, create_add);
pub const SUB: OpDef = binary_def!("Sub", BinaryOp::Sub, create_sub);
pub const MUL: OpDef = binary_def!("Mul", BinaryOp::Mul, create_mul);
pub const DIV: OpDef = binary_def!("Div", BinaryOp::Div, create_div);
