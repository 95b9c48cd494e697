//! Gemm over float32: `Y = alpha * A' * B' + beta * C` with transA/transB and C broadcast. A
//! constant B (the Linear weight, transB = 1 or 0) is prepacked (`f32_weight.rs`).

use std::sync::Arc;

use crate::abi::graph::Node;
use crate::abi::kernel_context::KernelContext;
use crate::abi::kernel_info::KernelInfo;
use crate::abi::status::{Error, Result};
use crate::abi::tensor::Tensor;
use crate::ep::op::{types, Decline, KernelEnv, OpDef, OpKernel, PackedExport, PackedImport};
use crate::kernels::gemm::{Op, Sgemm};
use crate::kernels::shape::broadcast_shapes;
use crate::runtime::par::take_lanes_used;
use crate::telemetry::ledger;

use super::claim::{input_type, only_attrs, require_elem, require_output_elem, F32};
use super::f32_weight::ConstB;

struct Gemm {
    alpha: f32,
    beta: f32,
    trans_a: bool,
    trans_b: bool,
    /// B when it is a constant 2-D initializer (offered through prepack).
    weight: Option<ConstB>,
    env: Arc<KernelEnv>,
}

/// Where this call's B comes from.
enum BInput<'w, 't> {
    /// The prepacked constant (or ORT's copy of it when the cache declined).
    Const(&'w ConstB),
    /// A runtime input.
    Tensor(Tensor<'t>),
}

impl OpKernel for Gemm {
    fn prepack(&mut self, input_index: usize, tensor: &Tensor<'_>) -> Result<bool> {
        if input_index != 1 {
            return Ok(false);
        }
        self.weight = ConstB::prepack(tensor, self.trans_b)?;
        Ok(self.weight.as_ref().is_some_and(ConstB::is_packed))
    }

    fn export_packed(&self) -> Option<PackedExport<'_>> {
        self.weight.as_ref()?.export_packed()
    }

    fn import_packed(&mut self, imp: PackedImport) -> Result<bool> {
        match ConstB::import_packed(imp, self.trans_b)? {
            Some(w) => {
                self.weight = Some(w);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn compute(&self, ctx: &KernelContext<'_>) -> Result<()> {
        let a = ctx.required_input(0)?;
        // A packed B may have been freed by ORT: a constant B's shape comes from prepack.
        let b = match &self.weight {
            Some(w) => BInput::Const(w),
            None => BInput::Tensor(ctx.required_input(1)?),
        };
        let c = ctx.input(2)?;
        let sa = a.shape();
        let sb = match &b {
            BInput::Const(w) => &w.shape[..],
            BInput::Tensor(b) => b.shape(),
        };
        if sa.len() != 2 || sb.len() != 2 {
            return Err(Error::invalid_argument(format!(
                "A and B must be 2-D, got {sa:?} and {sb:?}"
            )));
        }
        let (m, ka) = if self.trans_a {
            (sa[1], sa[0])
        } else {
            (sa[0], sa[1])
        };
        let (kb, n) = if self.trans_b {
            (sb[1], sb[0])
        } else {
            (sb[0], sb[1])
        };
        if ka != kb {
            return Err(Error::invalid_argument(format!(
                "inner dimensions differ: A {sa:?} (transA={}) and B {sb:?} (transB={})",
                self.trans_a as u8, self.trans_b as u8
            )));
        }
        let out = ctx.output(0, &[m, n])?.into_data::<f32>()?;
        let mut beta = 0.0;
        if let Some(c) = c.as_ref().filter(|_| self.beta != 0.0) {
            let cs = c.shape();
            let ok = broadcast_shapes(cs, &[m, n])
                .map(|s| s == [m, n])
                .unwrap_or(false);
            if !ok {
                return Err(Error::invalid_argument(format!(
                    "C of shape {cs:?} does not broadcast to [{m}, {n}]"
                )));
            }
            broadcast_into(c.data::<f32>()?, cs, out, m, n);
            beta = self.beta;
        }
        let lda = sa[1];
        let ldb = sb[1];
        let (a, par) = (a.data()?, &*self.env.par);
        let call = Sgemm::new(m, n, ka, a)
            .lda(lda, self.trans_a)
            .alpha(self.alpha)
            .beta(beta)
            .par(par);
        let variant = match &b {
            BInput::Const(w) => {
                w.with(ctx, 1, |wb| call.run_weight(wb, out).map_err(Error::fail))?
            }
            BInput::Tensor(b) => {
                let b = Op {
                    data: b.data()?,
                    ld: ldb,
                    trans: self.trans_b,
                };
                call.run(b, out).map_err(Error::fail)?
            }
        };
        ledger::record("Gemm", variant, take_lanes_used());
        Ok(())
    }
}

/// Writes C broadcast (unidirectionally) to [m, n] into `out`.
fn broadcast_into(c: &[f32], cs: &[usize], out: &mut [f32], m: usize, n: usize) {
    let (cm, cn) = match cs.len() {
        0 => (1, 1),
        1 => (1, cs[0]),
        _ => (cs[cs.len() - 2], cs[cs.len() - 1]),
    };
    for i in 0..m {
        let ci = if cm == 1 { 0 } else { i };
        for j in 0..n {
            let cj = if cn == 1 { 0 } else { j };
            out[i * n + j] = c[ci * cn + cj];
        }
    }
}

fn claim(node: &Node<'_>) -> std::result::Result<(), Decline> {
    only_attrs(node, &["alpha", "beta", "transA", "transB"])?;
    let a = require_elem(node, 0, F32)?;
    let b = require_elem(node, 1, F32)?;
    if input_type(node, 2)?.is_some() {
        require_elem(node, 2, F32)?;
    }
    require_output_elem(node, F32)?;
    for (name, t) in [("A", &a), ("B", &b)] {
        if !t.dims.is_empty() && t.dims.len() != 2 {
            return Err(format!("{name} has rank {}, Gemm needs 2", t.dims.len()));
        }
    }
    for attr in ["transA", "transB"] {
        if let Some(v) = node.attr_i64(attr) {
            if v != 0 && v != 1 {
                return Err(format!("{attr}={v} is not 0 or 1"));
            }
        }
    }
    Ok(())
}

fn create(info: &KernelInfo<'_>, env: &Arc<KernelEnv>) -> Result<Box<dyn OpKernel>> {
    Ok(Box::new(Gemm {
        alpha: info.attr_f32("alpha").unwrap_or(1.0),
        beta: info.attr_f32("beta").unwrap_or(1.0),
        trans_a: info.attr_i64("transA").unwrap_or(0) != 0,
        trans_b: info.attr_i64("transB").unwrap_or(0) != 0,
        weight: None,
        env: env.clone(),
    }))
}

/// Opset 7 dropped the `broadcast` attribute; 11 made C optional; 13 is the latest.
pub const GEMM: OpDef = OpDef {
    op: "Gemm",
    domain: "",
    since: 7,
    until: 13,
    types: &[("T", types::F32)],
    claim,
    create,
};
