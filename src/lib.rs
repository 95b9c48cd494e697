//! rcpu: a CPU execution provider for ONNX Runtime, loaded as a plugin library.
//!
//! All logic lives in this crate; `plugin/` only exports the C entry points.
//! See `../shared/docs/DESIGN.md` (mirrored in README.md) for the layout.

pub mod abi;
pub mod ep;
pub mod kernels;
pub mod memory;
pub mod runtime;
pub mod telemetry;
