//! `mixed:k=4096,n=4096,layers=4,block=32,acc=4,m=1[,zp=0|1][,sym]`: a decode-shaped chain in
//! which rcpu's nodes alternate with heavy nodes rcpu leaves to ORT's CPU EP (issue 17, "mixed
//! partitions"). Layer i is
//!
//! ```text
//! h -> MatMulNBits K->N (int4, rcpu) -> com.microsoft.DynamicQuantizeMatMul N->K (int8, ORT) -> h'
//! ```
//!
//! rcpu registers no kernel for `DynamicQuantizeMatMul`, so it stays on ORT, whose kernel
//! quantizes A on the fly and runs an MLAS int8 GEMM over ORT's intra-op pool; after each of
//! them ORT's pool threads spin (unless `session.intra_op.allow_spinning=0`) on the cores rcpu's
//! lanes then need for the next MatMulNBits.

use crate::onnx::{dtype, GraphBuilder};

use super::gen::rand_bytes;

/// One `DynamicQuantizeMatMul` (f32 [m, k] x int8 [k, n] -> f32 [m, n]) named `name`, with
/// initializers `Bq{tag}` (int8, seeded) and `bq_scale{tag}` (one f32 scale per column, keeping
/// the activation's magnitude); returns the bytes of its initializers.
#[allow(clippy::too_many_arguments)]
pub(super) fn dqmm_layer(
    g: &mut GraphBuilder,
    name: &str,
    tag: &str,
    input: &str,
    out: &str,
    k: usize,
    n: usize,
    seed: u64,
) -> u64 {
    let b = rand_bytes(k * n, seed);
    // Uniform int8 has variance ~5461; scale each column so the output stays near |input|.
    let base = 1.0 / (5461.0 * k as f32).sqrt();
    let scales: Vec<f32> = crate::rand_f32(n, seed ^ 0xd9)
        .iter()
        .map(|r| base * (1.0 + 0.5 * r))
        .collect();
    let (bn, sn) = (format!("Bq{tag}"), format!("bq_scale{tag}"));
    g.initializer_raw(&bn, dtype::INT8, &[k as i64, n as i64], b);
    g.initializer_f32(&sn, &[n as i64], &scales);
    g.node(
        "DynamicQuantizeMatMul",
        "com.microsoft",
        name,
        &[input, &bn, &sn],
        &[out],
        &[],
    );
    (k * n + n * 4) as u64
}
