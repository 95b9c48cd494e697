//! Rough timing of one GroupQueryAttention kernel call at a decode shape (a measurement, not a
//! test: it prints, it asserts nothing). Default: Qwen2-0.5B decode (14 heads, 2 KV heads, head
//! 64, rotary, batch 1, one token after `past` rows).
//!
//! `cargo run --release -p rcpu --example gqa_timing [past iters rounds qscale evict_mb [heads kv
//! head]]` (default 64 2000 5 1 0 14 2 64; qscale 200 makes the softmax underflow to subnormal
//! probabilities; `16 8 128` is Qwen3-0.6B's shape)
//!
//! `evict_mb` > 0 measures the call the way a decoder sees it: before every (timed) call both
//! lanes stream that many MB of other memory (untimed), as the token's weight stream does between
//! two layers' attention, so the past buffers, the present outputs and the inputs come from
//! memory (e.g. `gqa_timing 64 200 5 1 300`; Qwen2-0.5B streams 278 MB per token).
//!
//! Arms, alternating within every round: present copied from a separate past buffer or shared
//! with it, each on one lane (`Serial`) and on two pinned lanes. Reports the median wall time
//! per call (us) and each arm's ratio to the serial copy arm of the same round.

#[path = "common/timing.rs"]
mod timing;

use rcpu::kernels::attention::gqa::{gqa_f32, GqaInputs, GqaOutputs, GqaRotary, GqaShape};
use rcpu::runtime::par::{Dispatch, Serial};
use rcpu::runtime::{pool_for, Affinity, Par, PoolConfig};
use std::time::Instant;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let past = *args.first().unwrap_or(&64);
    let iters = *args.get(1).unwrap_or(&2000);
    let rounds = args.get(2).copied().unwrap_or(5).max(1);
    // Query scale: 1 gives mild scores; a large one gives the peaky softmax of a random-weight
    // model, whose probabilities underflow into subnormals.
    let qscale = *args.get(3).unwrap_or(&1) as f32;
    let evict_mb = *args.get(4).unwrap_or(&0);
    let evict = vec![1u64; evict_mb * (1 << 20) / 8];
    // Shape (default Qwen2-0.5B's; `... 16 8 128` for Qwen3-0.6B's).
    let nh = *args.get(5).unwrap_or(&14);
    let nkv = *args.get(6).unwrap_or(&2);
    let head = *args.get(7).unwrap_or(&64);
    let rot = head;
    let present = past + 1;
    let sh = GqaShape {
        batch: 1,
        seq: 1,
        heads: nh,
        kv_heads: nkv,
        head,
        past_len: past,
        present_len: present,
        first_prompt: false,
        scale: 1.0 / (head as f32).sqrt(),
        window: 0,
        softcap: 0.0,
        smooth: false,
    };
    let val = |i: usize| ((i * 7919 % 1000) as f32) / 1000.0 - 0.5;
    let q: Vec<f32> = (0..nh * head).map(|i| qscale * val(i)).collect();
    let k: Vec<f32> = (0..nkv * head).map(|i| val(i + 3)).collect();
    let v: Vec<f32> = (0..nkv * head).map(|i| val(i + 5)).collect();
    let pk: Vec<f32> = (0..nkv * past * head).map(|i| val(i + 11)).collect();
    let pv: Vec<f32> = (0..nkv * past * head).map(|i| val(i + 13)).collect();
    let max_pos = present + 64;
    let cos: Vec<f32> = (0..max_pos * rot / 2)
        .map(|i| (i as f32 * 0.01).cos())
        .collect();
    let sin: Vec<f32> = (0..max_pos * rot / 2)
        .map(|i| (i as f32 * 0.01).sin())
        .collect();
    let seqlens = [past as i32];
    let cache = nkv * present * head;
    let mut out = vec![0f32; nh * head];
    let (mut prk, mut prv) = (vec![0f32; cache], vec![0f32; cache]);
    // Shared: present is the past buffer, `present` rows long, past rows already in it.
    let (mut sk, mut sv) = (vec![0f32; cache], vec![0f32; cache]);
    for n in 0..nkv {
        sk[n * present * head..][..past * head]
            .copy_from_slice(&pk[n * past * head..][..past * head]);
        sv[n * present * head..][..past * head]
            .copy_from_slice(&pv[n * past * head..][..past * head]);
    }
    let rotary = Some(GqaRotary {
        cos: &cos,
        sin: &sin,
        rot,
        interleaved: false,
    });
    let lanes = pool_for(&PoolConfig {
        threads: 2,
        affinity: Affinity::Physical,
        blocktime_us: rcpu::runtime::lanes::DEFAULT_BLOCKTIME_US,
    });
    let pars: [(&str, &dyn Par); 2] = [("serial", &Serial), ("2 lanes", &*lanes)];
    // Reads one word per cache line of `evict` on both lanes (a stand-in for the weight stream).
    let flush = || {
        const PIECE: usize = 1 << 16;
        let pieces = evict.len().div_ceil(PIECE);
        lanes.chunks(Dispatch::Task, pieces, &|i| {
            let part = &evict[i * PIECE..((i + 1) * PIECE).min(evict.len())];
            std::hint::black_box(part.iter().step_by(8).fold(0u64, |a, &x| a ^ x));
        });
    };
    let mut call = |shared: bool, par: &dyn Par| {
        let inp = GqaInputs {
            q: &q,
            kv: Some((&k, &v)),
            past: (!shared).then_some((&pk[..], &pv[..])),
            seqlens_k: &seqlens,
            rotary,
            rope_at: None,
            sinks: None,
        };
        let (ok, ov) = if shared {
            (&mut sk[..], &mut sv[..])
        } else {
            (&mut prk[..], &mut prv[..])
        };
        let o = GqaOutputs {
            out: &mut out,
            present_k: ok,
            present_v: ov,
            shared,
        };
        gqa_f32(&sh, &inp, o, par).unwrap()
    };
    let arms: Vec<(bool, usize)> = [false, true]
        .iter()
        .flat_map(|&s| (0..pars.len()).map(move |p| (s, p)))
        .collect();
    let mut med = vec![Vec::new(); arms.len()];
    for r in 0..rounds {
        for j in 0..arms.len() {
            let j = if r % 2 == 0 { j } else { arms.len() - 1 - j };
            let (shared, p) = arms[j];
            call(shared, pars[p].1);
            let mut s = Vec::with_capacity(iters);
            for _ in 0..iters {
                flush();
                let t = Instant::now();
                std::hint::black_box(call(shared, pars[p].1));
                s.push(t.elapsed().as_secs_f64() * 1e6);
            }
            s.sort_by(f64::total_cmp);
            med[j].push(timing::median(&s));
        }
    }
    println!("GQA decode: heads {nh}/{nkv}, head {head}, past {past}, qscale {qscale}, evict {evict_mb} MB, median us per call per round");
    for (j, &(shared, p)) in arms.iter().enumerate() {
        let ratios: Vec<String> = med[j]
            .iter()
            .zip(&med[0])
            .map(|(a, b)| format!("{a:.2} ({:.2}x)", a / b))
            .collect();
        let kind = if shared { "shared" } else { "copy  " };
        println!("{kind} {:8}: {}", pars[p].0, ratios.join("  "));
    }
}
