//! The constant B of an f32 MatMul/Gemm node: offered by ORT in `PrePackWeight`, packed once
//! through the governed weight cache into the GEMM panel layout (shared by every node and
//! session with the same weight). When the cache declines, the node keeps computing from ORT's
//! original tensor through the same route (`Weight::Unpacked`), with bit-identical results.

use std::sync::Arc;

use crate::abi::kernel_context::KernelContext;
use crate::abi::status::{Error, Result};
use crate::abi::tensor::Tensor;
use crate::kernels::gemm::{try_pack_weight, weight_panel_width, PackedB, Weight};
use crate::memory::{params_hash, weight_cache, CachedWeight, WeightKey};

/// Weight-cache key namespace of packed f32 GEMM weights.
const PACK_OP: &str = "f32-gemm-b";

/// A constant 2-D B: its shape and, when the cache granted it, the packed copy.
pub(super) struct ConstB {
    /// `op(B)` is `k x n`; B is stored `n x k` when `trans`.
    pub k: usize,
    pub n: usize,
    pub trans: bool,
    /// The stored shape of B (for error messages).
    pub shape: [usize; 2],
    packed: Option<Arc<CachedWeight<PackedB>>>,
}

impl ConstB {
    /// Offers constant B for packing. `None` when it is not a 2-D f32 weight worth packing
    /// (N = 1 products keep `sgemm`'s own vector path). Otherwise the shape is kept and the
    /// cache is asked for a packed copy; [`ConstB::is_packed`] says whether it granted one.
    pub(crate) fn prepack(tensor: &Tensor<'_>, trans: bool) -> Result<Option<ConstB>> {
        let &[r, c] = tensor.shape() else {
            return Ok(None);
        };
        let (k, n) = if trans { (c, r) } else { (r, c) };
        if n < 2 {
            return Ok(None);
        }
        let b = tensor.data::<f32>()?;
        let nr = weight_panel_width();
        let key = WeightKey::new(
            PACK_OP,
            params_hash(&[k as u64, n as u64, trans as u64, nr as u64]),
            tensor.raw_bytes()?,
        );
        let packed = weight_cache().try_get_or_pack(
            &key,
            PackedB::predicted_bytes(k, n, nr),
            || try_pack_weight(trans, k, n, b, c),
            PackedB::bytes,
        );
        Ok(Some(ConstB {
            k,
            n,
            trans,
            shape: [r, c],
            packed,
        }))
    }

    /// Whether the cache granted a packed copy (ORT may then free its own tensor).
    pub(crate) fn is_packed(&self) -> bool {
        self.packed.is_some()
    }

    /// Runs `f` with the weight operand: the packed copy, or ORT's tensor read from input
    /// `index` of this call (checked against the prepacked shape).
    pub(crate) fn with<R>(
        &self,
        ctx: &KernelContext<'_>,
        index: usize,
        f: impl FnOnce(Weight<'_>) -> Result<R>,
    ) -> Result<R> {
        if let Some(p) = &self.packed {
            return f(Weight::Packed(p));
        }
        let t = ctx.required_input(index)?;
        if t.shape() != self.shape {
            return Err(Error::invalid_argument(format!(
                "constant B has shape {:?} at run time, {:?} at prepack",
                t.shape(),
                self.shape
            )));
        }
        f(Weight::Unpacked {
            b: t.data::<f32>()?,
            ldb: self.shape[1],
            trans: self.trans,
        })
    }
}
