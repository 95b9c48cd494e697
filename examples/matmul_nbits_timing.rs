//! Rough single-thread timing of the MatMulNBits kernels (not a benchmark under
//! docs/benchmarking.md rules: no interleaving with ORT, no steady-state detection).
//!
//! `cargo run --release -p rcpu --example matmul_nbits_timing [K N iters [gemm=1 [zp=1]]]`
//! Prints, per ISA variant: M=1 GB/s of packed weight bytes (codes + scales) for accuracy 0 and
//! 4, the unpacked path at M=1, and M=128 GFLOP/s; plus a plain read of a same-sized buffer.
//! `zp=0` packs the weights without zero points (symmetric, as onnxruntime-genai's builder makes
//! them by default).
//! Times are the best of `iters` runs.

#[path = "common/timing.rs"]
mod timing;

use rcpu::kernels::matmul_nbits::{
    matmul_packed_with, matmul_unpacked_with, pack, pack_threads, Kernels, NBitsParams, NBitsWeight,
};
use rcpu::runtime::par::Serial;
use rcpu::telemetry::ledger::Variant;
use timing::best_secs;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let (k, n, iters) = (
        *args.first().unwrap_or(&4096),
        *args.get(1).unwrap_or(&4096),
        *args.get(2).unwrap_or(&30),
    );
    let gemm = *args.get(3).unwrap_or(&1) != 0;
    let with_zp = *args.get(4).unwrap_or(&1) != 0;
    let bs = 32;
    let mut seed = 0x1234_5678_9abc_def1u64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let p0 = NBitsParams::new(k, n, bs, 0, with_zp);
    let b: Vec<u8> = (0..n * p0.k_blocks() * p0.blob_bytes())
        .map(|_| rnd() as u8)
        .collect();
    let scales: Vec<f32> = (0..n * p0.k_blocks())
        .map(|_| (rnd() % 1000) as f32 * 1e-4)
        .collect();
    let zp_bytes: Vec<u8> = (0..n * p0.zp_row_bytes()).map(|_| rnd() as u8).collect();
    let zp = with_zp.then_some(&zp_bytes[..]);
    let a_all: Vec<f32> = (0..128 * k)
        .map(|_| (rnd() % 2000) as f32 * 1e-3 - 1.0)
        .collect();
    let mut out = vec![0f32; 128 * n];
    let a = &a_all[..if gemm { 128 * k } else { k }];

    let buf = vec![1u8; n * k / 2 + n * p0.k_blocks() * 5];
    let t = best_secs(iters, || {
        let s: u64 = buf
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .fold(0, u64::wrapping_add);
        std::hint::black_box(s);
    });
    let zp_text = if with_zp { "yes" } else { "no" };
    println!("K={k} N={n} block={bs} zp={zp_text} threads=1 iters={iters}");
    println!(
        "plain read of {} MB: {:.1} GB/s",
        buf.len() >> 20,
        buf.len() as f64 / t / 1e9
    );
    let tp = best_secs(5, || {
        std::hint::black_box(pack_threads(&b, &scales, zp, &p0, 1));
    });
    let tpd = best_secs(5, || {
        std::hint::black_box(pack(&b, &scales, zp, &p0));
    });
    println!(
        "pack: one thread {:.1} us, default split {:.1} us",
        tp * 1e6,
        tpd * 1e6
    );
    for acc in [0, 4] {
        let p = NBitsParams::new(k, n, bs, acc, with_zp);
        let packed = pack(&b, &scales, zp, &p);
        let wbytes = packed.bytes() as f64;
        for kern in Kernels::supported() {
            let name = kern.route(acc, 1).text();
            let t1 = best_secs(iters, || {
                matmul_packed_with(kern, &a[..k], 1, &packed, None, &mut out[..n], &Serial)
                    .unwrap();
            });
            let tu = best_secs(iters.div_ceil(4), || {
                matmul_unpacked_with(
                    kern,
                    &a[..k],
                    1,
                    &NBitsWeight {
                        b: &b,
                        scales: &scales,
                        zero_points: zp,
                        p: &p,
                    },
                    None,
                    &mut out[..n],
                    &Serial,
                )
                .unwrap();
            });
            let m = 128;
            let tm = if gemm {
                best_secs(iters.div_ceil(10).max(3), || {
                    matmul_packed_with(kern, a, m, &packed, None, &mut out, &Serial).unwrap();
                })
            } else {
                f64::NAN
            };
            println!(
                "{name:24} M=1: {:7.1} us {:6.1} GB/s | unpacked M=1: {:8.1} us | M=128: {:7.1} GFLOP/s",
                t1 * 1e6,
                wbytes / t1 / 1e9,
                tu * 1e6,
                2.0 * (m * n * k) as f64 / tm / 1e9
            );
        }
    }
}
