//! The kernel tests: one binary, one module per former `tests/<name>.rs` (`cargo test --release
//! --test kernels glue_norm::` runs one of them). They run in parallel with each other: none
//! sets a process-wide setting or reads a process-wide counter (those tests are in
//! `tests/serial/`).

#[path = "../common/attention_fuzz.rs"]
mod attention_fuzz;
#[path = "../common/gemm.rs"]
mod gemm_common;
#[path = "../common/glue.rs"]
mod glue_common;
#[path = "../common/nbits.rs"]
mod nbits_common;
#[path = "../common/qgemm.rs"]
mod qgemm_common;
#[path = "../common/rng.rs"]
mod rng;

mod attention_gqa;
mod attention_gqa_quant;
mod attention_rotary;
mod cast_f16;
mod f32_broadcast;
mod f32_matmul;
mod f32_sgemm;
mod f32_weights;
mod fuzz_attention_smoke;
mod fuzz_nbits_smoke;
mod gather_quant;
mod glue_activation;
mod glue_decode_serial;
mod glue_norm;
mod glue_softmax;
mod matmul_nbits_amx;
mod matmul_nbits_bits8;
mod matmul_nbits_f16_scales;
mod matmul_nbits_kernels;
mod matmul_nbits_nonfinite;
mod matmul_nbits_pair;
mod matmul_nbits_params;
mod matmul_nbits_persist;
mod moe;
mod qgemm_kernels;
mod simd_tokens;
