//! Kernel-only timing of QGemm (ignored by default; run with
//! `cargo test --release --test qgemm_perf -- --ignored --nocapture`).
//!
//! Single thread (`Serial`), active kernels, prepacked B, uint8 x int8, per-tensor parameters.
//! N = 64 keeps B in L2 (compute rate); K = N = 2048 (4 MB) is the bench shape. Prints the median
//! of 9 repeats of `iters` calls each, as GB/s of B (M = 1) and GMAC/s.

#[path = "common/nbits.rs"]
mod nbits_common;
#[path = "common/qgemm.rs"]
mod qgemm_common;

use qgemm_common::QCase;
use rcpu::kernels::qgemm::{pack, run, BSource, Kernels, Signs};
use rcpu::runtime::par::Serial;
use std::time::Instant;

fn time(m: usize, k: usize, n: usize, iters: usize) {
    let c = QCase::new(Signs::U8S8, m, k, n, false, false, 3);
    let packed = pack(&c.b, c.k, c.n, c.batches, c.signs);
    let call = c.call(BSource::Packed(packed.view()));
    let mut y = vec![0u8; c.out_len()];
    let mut t = Vec::new();
    for _ in 0..9 {
        let t0 = Instant::now();
        for _ in 0..iters {
            run(&call, &mut y, &Serial).unwrap();
        }
        t.push(t0.elapsed().as_secs_f64() / iters as f64);
    }
    t.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let med = t[t.len() / 2];
    println!(
        "{} m={m} k={k} n={n}: {:.1} us/call, B {:.1} GB/s, {:.1} GMAC/s",
        Kernels::active().variant_name(m),
        med * 1e6,
        (k * n) as f64 / med / 1e9,
        (m * k * n) as f64 / med / 1e9
    );
}

#[test]
#[ignore]
fn qgemm_timing() {
    time(1, 2048, 64, 2000);
    time(1, 2048, 2048, 100);
    time(128, 2048, 64, 50);
    time(128, 2048, 2048, 3);
}
