//! How close the MatMulNBits M=1 kernel comes to a plain read of its own packed weights, on the
//! same lanes, in the same minute (DRAM bandwidth on a shared VM drifts). Not a benchmark under
//! BENCHMARKING.md rules (no ORT arm): a diagnostic for the streaming efficiency of the kernel
//! and of the chunk split.
//!
//! `cargo run --release -p rcpu --example matmul_nbits_stream [K N threads passes]`
//! (default 4096 86016 2 3: 226 MB packed, well past L3). Prints per pass: the kernel (acc 4,
//! block 32, zero points) and a plain read of the packed weight bytes split as the kernel splits
//! them (`par::stream_units_per_chunk` over column groups) and in two contiguous halves; best of
//! 10 each.

use rcpu::kernels::matmul_nbits::{matmul_packed, pack, NBitsParams, NR};
use rcpu::runtime::lanes::PoolConfig;
use rcpu::runtime::par::{stream_units_per_chunk, Par};
use rcpu::runtime::registry::pool_for;
use std::time::Instant;

fn best(iters: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..iters)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// Sum of u64 words with eight independent accumulators (load-bound).
fn sum(c: &[u8]) -> u64 {
    let mut acc = [0u64; 8];
    for w in c.chunks_exact(64) {
        for (i, a) in acc.iter_mut().enumerate() {
            *a = a.wrapping_add(u64::from_le_bytes(w[8 * i..8 * i + 8].try_into().unwrap()));
        }
    }
    acc.iter().fold(0, |x, y| x.wrapping_add(*y))
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let arg = |i: usize, d: usize| *args.get(i).unwrap_or(&d);
    let (k, n, threads, passes) = (arg(0, 4096), arg(1, 86016), arg(2, 2), arg(3, 3));
    let p = NBitsParams::new(k, n, 32, 4, true);
    let mut seed = 7u64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let b: Vec<u8> = (0..n * p.k_blocks() * p.blob_bytes())
        .map(|_| rnd() as u8)
        .collect();
    let scales = vec![0.01f32; n * p.k_blocks()];
    let zp: Vec<u8> = (0..n * p.zp_row_bytes()).map(|_| rnd() as u8).collect();
    let packed = pack(&b, &scales, Some(&zp), &p);
    drop(b);
    let a: Vec<f32> = (0..k).map(|i| (i % 13) as f32 * 0.1 - 0.6).collect();
    let mut out = vec![0f32; n];
    let lanes = pool_for(&PoolConfig {
        threads,
        ..Default::default()
    });
    let (all, w) = (packed.bytes() as f64, packed.weight_bytes());
    let groups = n.div_ceil(NR);
    let group_bytes = w.len() / groups;
    let chunk = stream_units_per_chunk(groups, group_bytes, lanes.lanes()) * group_bytes;
    let half = w.len().div_ceil(2);
    println!(
        "K={k} N={n}: {:.0} MB packed ({:.0} MB weight codes), {} lanes",
        all / 1e6,
        w.len() as f64 / 1e6,
        lanes.lanes()
    );
    for pass in 0..passes {
        let t = best(10, || {
            matmul_packed(&a, 1, &packed, None, &mut out, &*lanes).unwrap();
        });
        let read = |parts: usize, size: usize| {
            best(10, || {
                lanes.decode_chunks(parts, &|i| {
                    std::hint::black_box(sum(&w[i * size..((i + 1) * size).min(w.len())]));
                })
            })
        };
        let (tc, th) = (read(w.len().div_ceil(chunk), chunk), read(2, half));
        println!(
            "pass {pass}: kernel {:.1} GB/s | plain read: kernel's split {:.1} GB/s, \
             halves {:.1} GB/s",
            all / t / 1e9,
            w.len() as f64 / tc / 1e9,
            w.len() as f64 / th / 1e9
        );
    }
}
