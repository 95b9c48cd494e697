//! The only place with FFI: rcpu's own `#[repr(C)]` EP-ABI declarations, the negotiated
//! `OrtApi`, status and panic guard, the factory/EP/kernel shells (vtables and casts only), safe
//! views (kernel context, tensors, kernel info, graph/node) handed to the rest of the crate, the
//! `log` bridge to ORT's logger and `ort_pool` (rcpu's chunks on ORT's intra-op pool). OS calls are in
//! `crate::os`; only `ep` (and the plugin's exports) may import this module (`tests/module_seams.rs`).

pub mod api;
pub mod ep;
pub(crate) mod ep_context;
pub mod ep_types;
pub mod exports;
pub mod factory;
pub(crate) mod frame;
pub(crate) mod fused;
pub mod graph;
pub mod kernel;
pub mod kernel_context;
pub mod kernel_info;
pub mod log_bridge;
pub mod ort_pool;
pub mod session;
pub mod status;
pub mod tensor;
