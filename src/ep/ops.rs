//! The table of kernels rcpu registers with ORT. Adding an op = adding its `OpDef` here.

use crate::kernels::nodes::{binary, gemm, matmul, matmul_nbits};
use crate::kernels::op::OpDef;

pub static OPS: &[OpDef] = &[
    binary::ADD,
    binary::SUB,
    binary::MUL,
    binary::DIV,
    matmul::MATMUL,
    gemm::GEMM,
    matmul_nbits::MATMUL_NBITS,
];
