//! Rough single-thread timing of the glue kernels (not a benchmark under the rules of
//! docs/benchmarking.md: no ORT arm, no interleaving; `rcpu-bench compare` on a model from
//! `scripts/glue_models.py` is the measurement). Used to see ns per element of each ISA variant while tuning.
//!
//! `cargo run --release -p rcpu --example glue_timing [rows width iters]`
//! Prints, per ISA variant, the best-of-`iters` time of Sigmoid, erf-Gelu, tanh-Gelu, Softmax
//! (rows of `width`), RMSNorm, LayerNorm and the skip RMSNorm over `rows x width`.

#[path = "common/timing.rs"]
mod timing;

use rcpu::kernels::activation::{activation_f32_with, Activation};
use rcpu::kernels::isa::Isa;
use rcpu::kernels::norm::{norm_f32_with, NormInputs, NormOutputs, NormParams};
use rcpu::kernels::softmax::softmax_f32_with;
use rcpu::runtime::par::Serial;

/// Best of `iters` runs, in microseconds.
fn best_us(iters: usize, f: impl FnMut()) -> f64 {
    timing::best_secs(iters, f) * 1e6
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let (rows, w, iters) = (
        *args.first().unwrap_or(&128),
        *args.get(1).unwrap_or(&4864),
        *args.get(2).unwrap_or(&200),
    );
    let n = rows * w;
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let x: Vec<f32> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 8.0 - 4.0
        })
        .collect();
    let scale = vec![1.0f32; w];
    let mut y = vec![0.0f32; n];
    println!("rows={rows} width={w} ({n} elements), best of {iters}, us (ns/element)");
    for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
        let mut line = format!("{isa:?}:");
        let mut put = |name: &str, us: f64| {
            line += &format!("  {name} {us:.1} ({:.3})", us * 1e3 / n as f64);
        };
        for (name, act) in [
            ("sigmoid", Activation::Sigmoid),
            ("gelu-erf", Activation::GeluErf),
            ("gelu-tanh", Activation::GeluTanh),
        ] {
            let us = best_us(iters, || {
                activation_f32_with(isa, act, &x, None, &mut y, &Serial).unwrap();
            });
            put(name, us);
        }
        put(
            "softmax",
            best_us(iters, || {
                softmax_f32_with(isa, &x, rows, w, 1, &mut y, &Serial).unwrap();
            }),
        );
        for (name, simplified, skip) in [
            ("rms", true, false),
            ("ln", false, false),
            ("skip-rms", true, true),
        ] {
            let p = NormParams {
                simplified,
                epsilon: 1e-6,
            };
            let us = best_us(iters, || {
                let inp = NormInputs {
                    x: &x,
                    skip: skip.then_some(&x[..]),
                    bias: None,
                    scale: &scale,
                    beta: None,
                };
                let out = NormOutputs {
                    y: &mut y,
                    mean: None,
                    inv_std: None,
                    sum: None,
                };
                norm_f32_with(isa, p, w, inp, out, &Serial).unwrap();
            });
            put(name, us);
        }
        println!("{line}");
    }
}
