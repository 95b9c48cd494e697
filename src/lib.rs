//! rcpu: a CPU execution provider for ONNX Runtime, loaded as a plugin library.
//!
//! All logic lives in this crate; `plugin/` only exports the C entry points.
//! See `docs/architecture.md` for the module map and the rules each module keeps.

pub mod abi;
pub mod ep;
pub mod kernels;
pub mod memory;
pub mod os;
pub mod runtime;
pub mod telemetry;
