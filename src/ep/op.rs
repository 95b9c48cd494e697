//! The uniform shape of an ORT-facing kernel: a static [`OpDef`] (what ORT registers and what
//! `GetCapability` claims) and an [`OpKernel`] instance per node (prepare at creation, compute per
//! call). Pure compute lives in `crate::kernels`; this file is the contract between the node
//! kernels (`nodes/`) and the table, the claim rules and the ABI shell that drive them.

use std::sync::Arc;

use crate::abi::graph::Node;
use crate::abi::kernel_context::KernelContext;
use crate::abi::kernel_info::KernelInfo;
use crate::abi::status::Result;
use crate::abi::tensor::{ElemType, Tensor};
use crate::ep::nodes::gemv_chain::Chain;
use crate::kernels::matmul_nbits::PackedNBits;
use crate::memory::CachedWeight;
use crate::os::mapped::FileSlice;
use crate::runtime::Par;

/// What every kernel instance of one EP (one session) shares: the worker lanes it dispatches
/// on, and the order its M=1 MatMulNBits calls ran in (for the idle lanes' prefetch).
pub struct KernelEnv {
    pub par: Arc<dyn Par + Send + Sync>,
    pub gemv_chain: Chain<CachedWeight<PackedNBits>>,
    /// Whether MatMulNBits at accuracy level 4 may pack its scales as f16 (provider option
    /// `acc4_scales`, default f16).
    pub acc4_f16_scales: bool,
    /// Whether fused partitions time their steps (provider option `step_times`, default off).
    pub step_times: bool,
}

impl KernelEnv {
    /// The environment of kernels dispatching on `par` (f16 scales at level 4, the default).
    pub fn new(par: Arc<dyn Par + Send + Sync>) -> KernelEnv {
        KernelEnv {
            par,
            gemv_chain: Chain::default(),
            acc4_f16_scales: true,
            step_times: false,
        }
    }
}

/// What a kernel persists of its packed constants in a context file (`ep::context`), from
/// [`OpKernel::export_packed`].
pub struct PackedExport<'a> {
    /// The input indices whose constant values the kernel no longer needs once this export is
    /// imported again (the context model may leave them out).
    pub covers: Vec<usize>,
    /// The packed weight's cache key ([`crate::memory::WeightKey::to_json`]).
    pub key: serde_json::Value,
    /// The description of the packed weight (e.g. `PackedNBits::export_parts`).
    pub meta: serde_json::Value,
    /// The byte sections, in order; each is to be stored at a 64-byte aligned offset (page
    /// aligned in practice) and handed back in the same order.
    pub sections: Vec<&'a [u8]>,
}

/// An export read back from a context file, for [`OpKernel::import_packed`]: the key and the
/// description as exported, the sections as slices of the mapped file, in export order.
pub struct PackedImport {
    pub key: serde_json::Value,
    pub meta: serde_json::Value,
    pub sections: Vec<FileSlice<u8>>,
}

/// One node's kernel.
pub trait OpKernel: Send + Sync {
    /// Runs the node. Errors name the problem; the caller prefixes the node name.
    fn compute(&self, ctx: &KernelContext<'_>) -> Result<()>;

    /// ORT offers constant input `input_index` for prepacking. Return `true` when the kernel
    /// keeps its own packed copy and will never read the original again (ORT may free it).
    fn prepack(&mut self, _input_index: usize, _tensor: &Tensor<'_>) -> Result<bool> {
        Ok(false)
    }

    /// The kernel as `Any`, for a fused partition that combines several nodes' kernels into
    /// one step (`ep::nodes::swiglu`); `None` (the default) for kernels nothing combines.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }

    /// The kernel as mutable `Any`, for a fused partition that rewires a kernel's inputs at
    /// `Compile` (`ep::nodes::gather_block_quantized::share_tied_codes`); `None` (the default)
    /// for kernels nothing rewires.
    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        None
    }

    /// For a kernel whose output 0 is its input 0's data unchanged under other dims (a view,
    /// `ep::nodes::reshape`): those dims, checked as `compute` checks them (`Err`: the error
    /// `compute` would give). A fused partition then hands input 0's buffer to output 0 instead
    /// of running `compute` where it owns both values and this node is input 0's last reader
    /// (`abi::fused`); a kernel that answers `Some(Ok(..))` has recorded its route as `compute`
    /// would. `None` (the default): not a view.
    fn view_dims(&self, _ctx: &KernelContext<'_>) -> Option<Result<Vec<usize>>> {
        None
    }

    /// Whether [`OpKernel::view_dims`] may answer `Some` (asked once per step before it).
    fn is_view(&self) -> bool {
        false
    }

    /// The kernel's packed constants, to store in a context file; `None` (the default) for a
    /// kernel that holds none (nothing packed, or a kind of kernel that never persists).
    fn export_packed(&self) -> Option<PackedExport<'_>> {
        None
    }

    /// Restores what [`OpKernel::export_packed`] gave, over a mapped context file's bytes, so
    /// the kernel is in the state a successful `prepack` of the covered inputs leaves. `Ok(true)`
    /// when the kernel now holds the weight, `Ok(false)` (the default) when it does not take
    /// imports (it then needs its constant inputs as usual); `Err` when the import contradicts
    /// the node (a description or key that is malformed, or made for other parameters).
    fn import_packed(&mut self, _imp: PackedImport) -> Result<bool> {
        Ok(false)
    }
}

/// Why a node is not claimed (logged at verbose level, shown in tests).
pub type Decline = String;

/// Builds a node's kernel from its attributes and constant inputs.
pub type CreateFn = fn(&KernelInfo<'_>, &Arc<KernelEnv>) -> Result<Box<dyn OpKernel>>;

/// A registered kernel: identity for ORT's registry, the claim predicate, the factory.
pub struct OpDef {
    pub op: &'static str,
    /// "" for the ONNX domain, "com.microsoft" for contrib ops.
    pub domain: &'static str,
    /// Inclusive opset range this kernel implements.
    pub since: i32,
    pub until: i32,
    /// Type constraints (name, allowed element types) as in the op schema.
    pub types: &'static [(&'static str, &'static [ElemType])],
    /// Claim predicate: `Ok(())` when the kernel really supports this node (attributes, dtypes,
    /// and shapes where known), `Err(reason)` otherwise.
    pub claim: fn(&Node<'_>) -> std::result::Result<(), Decline>,
    /// Builds the node's kernel from its attributes and constant inputs.
    pub create: CreateFn,
}

/// Element-type shorthands for `OpDef::types`.
pub mod types {
    use super::ElemType;
    pub const F32: &[ElemType] = &[ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT];
    pub const U8: &[ElemType] = &[ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8];
    pub const F32_F16: &[ElemType] = &[
        ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,
        ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16,
    ];
    pub const U8_I8: &[ElemType] = &[
        ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8,
        ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8,
    ];
    pub const I32: &[ElemType] = &[ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32];
    pub const I64: &[ElemType] = &[ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64];
}
