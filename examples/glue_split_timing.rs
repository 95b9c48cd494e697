//! The measurement behind the glue families' split thresholds (`PAR_MIN_ELEMS` of `norm`,
//! `activation`, `elementwise`): at which size does a job split over two lanes beat the calling
//! lane alone? A measurement, not a test: it prints, it asserts nothing.
//!
//! `cargo run --release -p rcpu --example glue_split_timing [iters rounds]` (default 200 7)
//!
//! Per family (skip RMSNorm over rows of 896, Sigmoid, same-shape Mul) and size, two arms
//! alternate within every round (docs/benchmarking.md, rule 1): `serial` runs the kernel on the
//! caller (`Serial`); `split` runs the two halves as one `Dispatch::Task` job on a 2-lane pool
//! (the best case of the kernels' chunked path: one piece per lane). Printed: the median over
//! rounds of each arm's median call, and serial/split (above 1: splitting pays).

#[path = "common/timing.rs"]
mod timing;

use rcpu::kernels::activation::{activation_f32, Activation};
use rcpu::kernels::elementwise::{binary_f32, BinaryOp};
use rcpu::kernels::norm::{norm_f32, NormInputs, NormOutputs, NormParams};
use rcpu::runtime::par::Serial;
use rcpu::runtime::{pool_for, Affinity, Dispatch, Par, PoolConfig};
use std::sync::Mutex;
use timing::Clock;

const HIDDEN: usize = 896;

/// One family's kernel over `x` into `y` (norm: rows of HIDDEN, `w` the skip, `gamma` the scale;
/// Mul: `x * w`).
fn kernel(family: &str, x: &[f32], w: &[f32], gamma: &[f32], y: &mut [f32]) {
    let _ = match family {
        "norm" => norm_f32(
            NormParams {
                simplified: true,
                epsilon: 1e-6,
            },
            HIDDEN,
            NormInputs {
                x,
                skip: Some(w),
                bias: None,
                scale: gamma,
                beta: None,
            },
            NormOutputs {
                y,
                mean: None,
                inv_std: None,
                sum: None,
            },
            &Serial,
        ),
        "sigmoid" => activation_f32(Activation::Sigmoid, x, None, y, &Serial),
        _ => binary_f32(BinaryOp::Mul, x, &[x.len()], w, &[w.len()], y, &Serial).map(|_| ""),
    };
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let iters = *args.first().unwrap_or(&200);
    let rounds = args.get(1).copied().unwrap_or(7).max(1);
    let pool = pool_for(&PoolConfig {
        threads: 2,
        affinity: Affinity::Physical,
        blocktime_us: rcpu::runtime::lanes::DEFAULT_BLOCKTIME_US,
    });
    println!("2 lanes; {iters} calls x {rounds} rounds per arm; medians in us");
    for family in ["norm", "sigmoid", "mul"] {
        // Norm splits whole rows: from two rows up.
        for rows_or_k in [2usize, 4, 8, 16, 32, 64] {
            // norm: rows of HIDDEN; the others: the same element counts.
            let n = rows_or_k * if family == "norm" { HIDDEN } else { 4096 };
            let x: Vec<f32> = (0..n).map(|i| ((i % 97) as f32 - 48.0) / 16.0).collect();
            let w: Vec<f32> = (0..n).map(|i| 1.0 + (i % 13) as f32 / 64.0).collect();
            let gamma = vec![1.0f32; HIDDEN];
            let mut y = vec![0.0f32; n];
            // Halves on whole rows (norm) so each lane's piece is valid on its own.
            let unit = if family == "norm" { HIDDEN } else { 16 };
            let half = (n / 2).div_ceil(unit) * unit;
            let (mut ser, mut spl) = (Vec::new(), Vec::new());
            for r in 0..rounds {
                for arm in 0..2 {
                    if (arm == 1) == (r % 2 == 0) {
                        let (lo, hi) = y.split_at_mut(half);
                        let parts = [Mutex::new(lo), Mutex::new(hi)];
                        let t = timing::samples(iters, 1, Clock::Wall, || {
                            pool.chunks(Dispatch::Task, 2, &|i| {
                                let mut p = parts[i].lock().unwrap();
                                let at = if i == 0 { 0 } else { half };
                                let len = p.len();
                                kernel(family, &x[at..at + len], &w[at..at + len], &gamma, &mut p);
                            })
                        });
                        spl.push(timing::median(&t));
                    } else {
                        let t = timing::samples(iters, 1, Clock::Wall, || {
                            kernel(family, &x, &w, &gamma, &mut y)
                        });
                        ser.push(timing::median(&t));
                    }
                }
            }
            ser.sort_by(f64::total_cmp);
            spl.sort_by(f64::total_cmp);
            let (a, b) = (timing::median(&ser) * 1e6, timing::median(&spl) * 1e6);
            println!(
                "{family:<8} {n:>7} elems: serial {a:8.2}  split {b:8.2}  serial/split {:5.2}",
                a / b
            );
        }
    }
}
