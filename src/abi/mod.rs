//! The only place with FFI: rcpu's own `#[repr(C)]` EP-ABI declarations, the negotiated
//! `OrtApi`, status and panic guard, the factory/EP/kernel shells (vtables and casts only), safe
//! views (kernel context, tensors, kernel info, graph/node) handed to the rest of the crate, the
//! `log` bridge to ORT's logger, `ort_pool` (rcpu's chunks on ORT's intra-op pool), and `os` (the
//! OS calls and the closure lending the worker lanes need).

pub mod api;
pub mod ep;
pub mod ep_types;
pub mod exports;
pub mod factory;
pub mod graph;
pub mod kernel;
pub mod kernel_context;
pub mod kernel_info;
pub mod log_bridge;
pub mod mapped;
pub mod ort_pool;
pub mod os;
pub mod session;
pub mod status;
pub mod tensor;
