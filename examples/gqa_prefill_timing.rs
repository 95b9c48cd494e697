//! Rough timing of one GroupQueryAttention prefill call, the per-query-head path against the
//! grouped one (a measurement, not a test: it prints, it asserts nothing). Shapes: Qwen2-0.5B
//! (14 heads, 2 KV heads) and Llama-3.2-1B (32 / 8), head 64, rotary, batch 1, first prompt (past
//! 0), `seq` new tokens.
//!
//! `cargo run --release -p rcpu --example gqa_prefill_timing [rounds iters512 iters64]` (default
//! 5 5 60)
//!
//! Per shape, sequence length (512, 64) and lanes (one: `Serial`; two pinned lanes) the two paths
//! alternate within every round (the order flips every round). Reports the median wall time per
//! call (ms) per round, the per-round ratio per-row / grouped (> 1: grouped faster), the medians
//! over the rounds, and whether the two paths' outputs are bit-identical.

#[path = "common/timing.rs"]
mod timing;

use rcpu::kernels::attention::gqa::{
    gqa_f32_prefill, GqaInputs, GqaOutputs, GqaRotary, GqaShape, Prefill,
};
use rcpu::runtime::par::Serial;
use rcpu::runtime::{pool_for, Affinity, Par, PoolConfig};
use std::time::Instant;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let rounds = args.first().copied().unwrap_or(5).max(1);
    let iters512 = args.get(1).copied().unwrap_or(5).max(1);
    let iters64 = args.get(2).copied().unwrap_or(60).max(1);
    let lanes = pool_for(&PoolConfig {
        threads: 2,
        affinity: Affinity::Physical,
        blocktime_us: rcpu::runtime::lanes::DEFAULT_BLOCKTIME_US,
    });
    let pars: [(&str, &dyn Par); 2] = [("1 lane ", &Serial), ("2 lanes", &*lanes)];
    let head = 64usize;
    println!("GQA prefill, head {head}, rotary, first prompt: median ms per call per round, ratio per-row / grouped");
    for (name, nh, nkv) in [("qwen2-0.5b", 14usize, 2usize), ("llama-3.2-1b", 32, 8)] {
        for (seq, iters) in [(512usize, iters512), (64, iters64)] {
            let sh = GqaShape {
                batch: 1,
                seq,
                heads: nh,
                kv_heads: nkv,
                head,
                past_len: 0,
                present_len: seq,
                first_prompt: true,
                scale: 1.0 / (head as f32).sqrt(),
                window: 0,
                softcap: 0.0,
                smooth: false,
            };
            let val = |i: usize| ((i * 7919 % 1000) as f32) / 1000.0 - 0.5;
            let q: Vec<f32> = (0..seq * nh * head).map(val).collect();
            let k: Vec<f32> = (0..seq * nkv * head).map(|i| val(i + 3)).collect();
            let v: Vec<f32> = (0..seq * nkv * head).map(|i| val(i + 5)).collect();
            let cos: Vec<f32> = (0..seq * head / 2)
                .map(|i| (i as f32 * 0.01).cos())
                .collect();
            let sin: Vec<f32> = (0..seq * head / 2)
                .map(|i| (i as f32 * 0.01).sin())
                .collect();
            let seqlens = [seq as i32 - 1];
            let cache = nkv * seq * head;
            let mut outs = [vec![0f32; seq * nh * head], vec![0f32; seq * nh * head]];
            let (mut pk, mut pv) = (vec![0f32; cache], vec![0f32; cache]);
            let inp = GqaInputs {
                q: &q,
                kv: Some((&k, &v)),
                past: None,
                seqlens_k: &seqlens,
                rotary: Some(GqaRotary {
                    cos: &cos,
                    sin: &sin,
                    rot: head,
                    interleaved: false,
                }),
                rope_at: None,
                sinks: None,
            };
            let paths = [Prefill::PerRow, Prefill::Grouped];
            for (pname, par) in pars {
                let mut med = [Vec::new(), Vec::new()];
                for r in 0..rounds {
                    for j in 0..2 {
                        let j = if r % 2 == 0 { j } else { 1 - j };
                        let mut call = || {
                            let o = GqaOutputs {
                                out: &mut outs[j],
                                present_k: &mut pk,
                                present_v: &mut pv,
                                shared: false,
                            };
                            gqa_f32_prefill(None, paths[j], &sh, &inp, o, par).unwrap()
                        };
                        call();
                        let mut s = Vec::with_capacity(iters);
                        for _ in 0..iters {
                            let t = Instant::now();
                            std::hint::black_box(call());
                            s.push(t.elapsed().as_secs_f64() * 1e3);
                        }
                        s.sort_by(f64::total_cmp);
                        med[j].push(timing::median(&s));
                    }
                }
                let same = outs[0]
                    .iter()
                    .zip(&outs[1])
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                let fmt = |m: &[f64]| {
                    m.iter()
                        .map(|x| format!("{x:.2}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                let ratios: Vec<f64> = med[0].iter().zip(&med[1]).map(|(a, b)| a / b).collect();
                let sorted_median = |v: &[f64]| {
                    let mut v = v.to_vec();
                    v.sort_by(f64::total_cmp);
                    timing::median(&v)
                };
                let (m0, m1) = (sorted_median(&med[0]), sorted_median(&med[1]));
                println!(
                    "{name} {nh}/{nkv} seq {seq:3} {pname}: per-row {} | grouped {} | ratio {} | medians {m0:.3} / {m1:.3} ms, median ratio {:.2}x, bit-identical {same}",
                    fmt(&med[0]),
                    fmt(&med[1]),
                    fmt(&ratios),
                    sorted_median(&ratios)
                );
            }
        }
    }
}
