//! A SwiGLU MLP's gate and up projections as one step of a fused partition (issue 17).
//!
//! The model builder's MLP is `h = Mul(Mul(g, Sigmoid(g)), u)` with `g = MatMulNBits(x, Wg)`
//! and `u = MatMulNBits(x, Wu)` over the same `x`. Run node by node at decode (one row of `x`),
//! that is two weight streams with a dispatch each, then three passes over the N-wide `g` and
//! `u` on the calling lane, after the streams have evicted them from its cache (measured on the
//! Qwen2-0.5B shape: about 7 us of the Sigmoid and the two Muls per layer against 0.9 us for
//! the same kernels on cached data). The combined step streams both weights in one dispatch
//! (`matmul_nbits::matmul_pair`): each lane computes a few column groups of `g`, the same of
//! `u`, and writes those columns of `h` at once, so `g`, `Sigmoid(g)` and their product never
//! reach memory. At prefill (many rows) the same holds per row tile: there the three
//! elementwise passes had run over M x N arrays (at 512 rows of the Qwen2-0.5B shape, 10 MB
//! each; ~4% of rcpu's prefill in ORT's profile of the per-node path).
//!
//! Gate and up weights may be 4- or 8-bit (both the same: `matmul_nbits::pair_compatible`).
//!
//! The answer is the node-by-node answer bit for bit: the epilogue runs the Sigmoid node's own
//! kernel on each group's values (an elementwise kernel, the same per element wherever the
//! element sits) and the two IEEE multiplications the Mul nodes make, in their order. Inputs the
//! pair path does not take (no rows, a non-finite `x` or one large enough to overflow, another
//! element type, the row counts the AMX GEMM takes) go to the five nodes themselves
//! (`abi::fused`), so every error and every special value is theirs.

use std::sync::Arc;

use crate::abi::kernel_context::KernelContext;
use crate::abi::status::{Error, Result};
use crate::abi::tensor::ElemType;
use crate::ep::op::{KernelEnv, OpKernel};
use crate::kernels::activation::{activation_f32, Activation};
use crate::kernels::matmul_nbits::{
    matmul_pair, pair_compatible, pair_declines_rows, pair_rows_fit,
};
use crate::runtime::par::{take_lanes_used, Serial};
use crate::telemetry::ledger;

use super::matmul_nbits::{packed_operand, pair_ran, PackedOperand};

/// The combined gate / up step of one MLP (see the module documentation).
pub(crate) struct SwiGlu {
    gate: PackedOperand,
    up: PackedOperand,
    env: Arc<KernelEnv>,
}

/// The ledger variant of the Sigmoid and Muls a pair step runs inside its MatMulNBits calls.
const IN_PAIR: &str = "in-swiglu-pair";

/// `h = (g * sigmoid(g)) * u` over one column group, as the Sigmoid and Mul nodes compute it.
fn silu_mul(g: &[f32], u: &[f32], h: &mut [f32]) {
    // The Sigmoid node's kernel (on the calling lane, as that node runs it at decode size); it
    // fails only on unequal lengths, which the pair call never passes.
    let ran = activation_f32(Activation::Sigmoid, g, None, h, &Serial);
    debug_assert!(ran.is_ok());
    for ((h, &g), &u) in h.iter_mut().zip(g).zip(u) {
        *h = (g * *h) * u;
    }
}

impl SwiGlu {
    /// The step over the gate and up nodes' kernels, when both run from packed weights of the
    /// same shape with no bias; `None` leaves the nodes to run one by one.
    pub(crate) fn new(
        gate: &dyn OpKernel,
        up: &dyn OpKernel,
        env: &Arc<KernelEnv>,
    ) -> Option<SwiGlu> {
        let (gate, up) = (packed_operand(gate)?, packed_operand(up)?);
        pair_compatible(&gate.weight, &up.weight).then(|| SwiGlu {
            gate,
            up,
            env: env.clone(),
        })
    }

    /// Runs the step over `ctx` (input 0: `x`, output 0: `h`) when the pair path takes this `x`;
    /// `Ok(false)`, with nothing written and no output requested, when the five nodes must run
    /// instead.
    pub(crate) fn try_run(&self, ctx: &KernelContext<'_>) -> Result<bool> {
        let x = ctx.required_input(0)?;
        if x.elem() != ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT {
            return Ok(false);
        }
        let p = self.gate.weight.params();
        let shape = x.shape();
        let Some((&k, lead)) = shape.split_last() else {
            return Ok(false);
        };
        // M rows (no row: an empty call, the nodes' path).
        let Some(m) = lead.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)) else {
            return Ok(false);
        };
        if k != p.k || pair_declines_rows(&self.gate.weight, m) {
            return Ok(false);
        }
        let a = x.data::<f32>()?;
        if !pair_rows_fit(a, m, &self.gate.weight, &self.up.weight) {
            return Ok(false);
        }
        let mut out_shape = lead.to_vec();
        out_shape.push(p.n);
        let out = ctx.output(0, &out_shape)?.into_data::<f32>()?;
        let par = &*self.env.par;
        let head = if m == 1 {
            // The session's order of M=1 calls, as the two nodes would report it, and the idle
            // lanes' hint for the call after the pair (the up node's successor).
            pair_ran(&self.env, &self.gate, &self.up, par)
        } else {
            None
        };
        let route = matmul_pair(
            a,
            m,
            &self.gate.weight,
            &self.up.weight,
            &silu_mul,
            out,
            par,
        )
        .map_err(Error::fail)?
        .ok_or_else(|| Error::fail("the pair path refused rows it had accepted"))?;
        if let Some(h) = head {
            h.prefetch();
        }
        let lanes = take_lanes_used();
        // Two MatMulNBits calls ran (as one dispatch); the Sigmoid and Muls ran inside them,
        // recorded as such so a report tells them from nodes left to ORT.
        for _ in 0..2 {
            ledger::record("MatMulNBits", route.of_bits(p.bits), lanes);
            ledger::record("Mul", IN_PAIR, lanes);
        }
        ledger::record("Sigmoid", IN_PAIR, lanes);
        Ok(true)
    }
}
