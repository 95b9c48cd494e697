//! The f32 levels' two routes at the same row counts: the tile kernel against the dequantizing
//! GEMM (`kernels/matmul_nbits/dequant.rs`), the crossover that sets `DEQUANT_MIN_M` (a
//! measurement, not a test: it prints, it asserts nothing).
//!
//! `cargo run --release -p rcpu --example matmul_nbits_dequant [rounds]` (default 5)
//!
//! Single thread (`Serial`, thread CPU time), the active kernel set, accuracy level 0, block 32, no zero points;
//! shapes of a gpt-oss expert (fc1 K=2880 N=5760, fc2 K=2880 N=2880) and a Qwen2-0.5B MLP
//! (K=896 N=4864). Per row count, `rounds` rounds each timing both routes back to back (the
//! order alternating), 3 calls a sample; prints each route's median GMAC/s and the median of the
//! per-round time ratios tile / dequantizing (above 1: the dequantizing GEMM is faster).

#[path = "../tests/common/nbits.rs"]
mod matmul_nbits_common;
#[path = "../tests/common/rng.rs"]
mod rng;
#[path = "common/timing.rs"]
mod timing;

use matmul_nbits_common::Problem;
use rcpu::kernels::matmul_nbits::{matmul_packed_with, pack, Kernels};
use rcpu::runtime::par::Serial;
use timing::Clock;

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let active = Kernels::active();
    let (tile, dequant) = (
        active.with_dequant_min_m(usize::MAX),
        active.with_dequant_min_m(2),
    );
    println!("kernels {}, {rounds} rounds", active.label());
    for (k, n) in [(2880, 5760), (2880, 2880), (896, 4864)] {
        for m in [4, 8, 12, 16, 24, 32, 64] {
            let pr = Problem::new(k, n, m, 32, 0, false, false, 3);
            let packed = pack(&pr.b, &pr.scales, pr.zp.as_deref(), &pr.p);
            let mut y = vec![0f32; m * n];
            let mut time = |kern: &Kernels| {
                let t = timing::samples(3, 3, Clock::ThreadCpu, || {
                    matmul_packed_with(kern, &pr.a, m, &packed, None, &mut y, &Serial)
                });
                timing::median(&t)
            };
            let (mut tt, mut td, mut ratio) = (vec![], vec![], vec![]);
            for r in 0..rounds {
                let (a, b) = if r % 2 == 0 {
                    let a = time(&tile);
                    (a, time(&dequant))
                } else {
                    let b = time(&dequant);
                    (time(&tile), b)
                };
                tt.push(a);
                td.push(b);
                ratio.push(a / b);
            }
            let gmac = |s: f64| (m * n * k) as f64 / s / 1e9;
            println!(
                "K={k:<5} N={n:<5} M={m:<3} tile {:6.2} GMAC/s  dequant {:6.2} GMAC/s  tile/dequant {:5.2}",
                gmac(timing::median(&tt)),
                gmac(timing::median(&td)),
                timing::median(&ratio)
            );
        }
    }
}
