//! Kernels, one module per op family. Each family: pure compute functions behind a uniform
//! signature, a scalar reference beside them, ISA variants picked once per process from
//! [`isa::Isa::get`].
pub mod isa;
pub mod matmul_nbits;
