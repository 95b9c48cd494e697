//! Single-thread sgemm rate per ISA variant (a measurement, not a test: it prints, it asserts
//! nothing).
//!
//! `cargo run --release -p rcpu --example sgemm_timing [n iters]` (default 512 15)
//!
//! Each variant the machine supports (called explicitly through `Sgemm::run_with`) multiplies two
//! n x n matrices; prints the best-of-`iters` wall GFLOP/s and its ratio to the scalar variant.

#[path = "../tests/common/nbits.rs"]
mod nbits_common;
#[path = "../tests/common/rng.rs"]
mod rng;
#[path = "common/timing.rs"]
mod timing;

use nbits_common::Rng;
use rcpu::kernels::gemm::{Op, Sgemm};
use rcpu::kernels::isa::Isa;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let n = args.first().copied().unwrap_or(512).max(1);
    let iters = *args.get(1).unwrap_or(&15);
    let mut rng = Rng(5);
    let (a, b): (Vec<f32>, Vec<f32>) = (
        (0..n * n).map(|_| rng.f32(-1.0, 1.0)).collect(),
        (0..n * n).map(|_| rng.f32(-1.0, 1.0)).collect(),
    );
    let mut c = vec![0.0; n * n];
    let flop = 2.0 * (n * n * n) as f64;
    let mut scalar = None;
    for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
        let bop = Op {
            data: &b,
            ld: n,
            trans: false,
        };
        let mut call = || Sgemm::new(n, n, n, &a).run_with(isa, bop, &mut c);
        if call().is_err() {
            println!("{isa:?}: not supported here");
            continue;
        }
        let gflops = flop / timing::best_secs(iters, || call().unwrap()) / 1e9;
        let base = *scalar.get_or_insert(gflops);
        println!(
            "{isa:?} n={n}: {gflops:.1} GFLOP/s (best of {iters}, wall), {:.2}x scalar",
            gflops / base
        );
    }
}
