//! ORT-facing kernels: for each op, the claim predicate, creation (attributes, constant weights)
//! and compute, calling into the pure compute of its family (`elementwise`, `gemm`,
//! `matmul_nbits`, ...). Everything here is safe code over the `abi` views.

pub mod activation;
pub(crate) mod adopt;
pub mod binary;
pub mod cast;
pub mod claim;
pub mod f32_weight;
pub mod gather_block_quantized;
pub mod gemm;
pub mod gemv_chain;
pub mod glue_common;
pub mod group_query_attention;
pub mod layer_norm;
pub mod matmul;
pub mod matmul_nbits;
pub mod norm_broadcast;
pub mod qlinear_matmul;
pub mod qmoe;
pub mod reshape;
pub mod rotary_embedding;
pub mod skip_layer_norm;
pub mod softmax;
pub mod split;
pub mod swiglu;
#[cfg(test)]
pub(crate) mod test_files;
