//! Kernels, one module per op family. Each family: pure compute functions behind a uniform
//! signature, a scalar reference beside them, ISA variants picked once per process from
//! [`isa::Isa::get`]. Nothing here knows ORT: the ORT-facing node kernels that call this code are
//! in `crate::ep::nodes`; `tests/module_seams.rs` keeps ORT's FFI (`abi`) and `ep` out of this tree.
pub mod activation;
pub mod attention;
pub mod cast;
pub(crate) mod described;
pub mod dims;
pub(crate) mod disjoint;
pub mod elementwise;
pub mod fp_env;
pub mod gather_quant;
pub mod gemm;
pub mod isa;
pub mod matmul_nbits;
pub mod moe;
pub mod norm;
pub mod qgemm;
pub mod shape;
pub mod simd;
pub mod softmax;
pub mod split;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_asm;
