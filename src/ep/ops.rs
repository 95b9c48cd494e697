//! The table of kernels rcpu registers with ORT. Adding an op = adding its `OpDef` here.

use crate::ep::nodes::{
    activation, binary, cast, gemm, layer_norm, matmul, matmul_nbits, skip_layer_norm, softmax,
};
use crate::ep::nodes::{group_query_attention, rotary_embedding};
use crate::ep::op::OpDef;

pub static OPS: &[OpDef] = &[
    binary::ADD,
    binary::SUB,
    binary::MUL,
    binary::DIV,
    matmul::MATMUL,
    gemm::GEMM,
    matmul_nbits::MATMUL_NBITS,
    layer_norm::LAYER_NORMALIZATION,
    layer_norm::SIMPLIFIED_LAYER_NORMALIZATION,
    skip_layer_norm::SKIP_SIMPLIFIED_LAYER_NORMALIZATION,
    skip_layer_norm::SKIP_LAYER_NORMALIZATION,
    softmax::SOFTMAX,
    activation::SIGMOID,
    activation::RELU,
    activation::TANH,
    activation::POW,
    activation::GELU,
    activation::MS_GELU,
    activation::FAST_GELU,
    crate::ep::nodes::qlinear_matmul::QLINEAR_MATMUL_10,
    crate::ep::nodes::qlinear_matmul::QLINEAR_MATMUL_21,
    rotary_embedding::ROTARY_EMBEDDING,
    group_query_attention::GROUP_QUERY_ATTENTION,
    cast::CAST,
    crate::ep::nodes::reshape::RESHAPE,
    crate::ep::nodes::split::SPLIT,
    crate::ep::nodes::gather_block_quantized::GATHER_BLOCK_QUANTIZED,
    crate::ep::nodes::qmoe::QMOE,
];
