//! Kernel-only timing of QGemm (ignored by default; run with
//! `cargo test --release --test qgemm_perf -- --ignored --nocapture`).
//!
//! Single thread (`Serial`), active kernels, prepacked B, uint8 x int8, per-tensor parameters.
//! Thread CPU time, so a loaded machine's lost time slices do
//! not count (its cache and memory contention still does). N = 64 keeps B in L2 (compute rate); K = N = 2048 (4 MB) is the bench shape. Prints the median
//! (and best) of 9 repeats of `iters` calls each, as GB/s of B (M = 1) and GMAC/s.

#[path = "common/nbits.rs"]
mod nbits_common;
#[path = "common/qgemm.rs"]
mod qgemm_common;

use qgemm_common::QCase;
use rcpu::kernels::qgemm::{pack, run, BSource, Kernels, Signs};
use rcpu::runtime::par::{Par, Serial};

/// This thread's CPU seconds (time slices lost to other processes on a loaded machine do not count).
fn cpu_now() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a live out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn wall_now() -> f64 {
    use std::sync::OnceLock;
    static T0: OnceLock<std::time::Instant> = OnceLock::new();
    T0.get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs_f64()
}

/// Seconds per call of a u8 x s8 problem on `par`, sorted, 9 repeats of `iters` calls timed by `clock`.
fn samples(
    m: usize,
    k: usize,
    n: usize,
    iters: usize,
    par: &dyn Par,
    clock: fn() -> f64,
) -> Vec<f64> {
    let c = QCase::new(Signs::U8S8, m, k, n, false, false, 3);
    let packed = pack(&c.b, c.k, c.n, c.batches, c.signs);
    let call = c.call(BSource::Packed(packed.view()));
    let mut y = vec![0u8; c.out_len()];
    let mut t: Vec<f64> = (0..9)
        .map(|_| {
            let t0 = clock();
            for _ in 0..iters {
                run(&call, &mut y, par).unwrap();
            }
            (clock() - t0) / iters as f64
        })
        .collect();
    t.sort_by(|a, b| a.partial_cmp(b).unwrap());
    t
}

fn time(m: usize, k: usize, n: usize, iters: usize) {
    let t = samples(m, k, n, iters, &Serial, cpu_now);
    let med = t[t.len() / 2];
    println!(
        "{} m={m} k={k} n={n}: {:.1} us/call (best {:.1}), B {:.1} GB/s, {:.1} GMAC/s",
        Kernels::active().variant_name(m),
        med * 1e6,
        t[0] * 1e6,
        (k * n) as f64 / med / 1e9,
        (m * k * n) as f64 / med / 1e9
    );
}

/// Wall time on two pinned lanes (the EP's pool), median and best of 9 repeats.
fn time_lanes(m: usize, k: usize, n: usize, iters: usize) {
    use rcpu::runtime::lanes::PoolConfig;
    let pool = rcpu::runtime::registry::pool_for(&PoolConfig {
        threads: 2,
        ..Default::default()
    });
    let t = samples(m, k, n, iters, &*pool, wall_now);
    println!(
        "2 lanes m={m} k={k} n={n}: {:.1} us/call wall (best {:.1})",
        t[t.len() / 2] * 1e6,
        t[0] * 1e6
    );
}

#[test]
#[ignore]
fn qgemm_timing_two_lanes() {
    time_lanes(1, 2048, 2048, 200);
    time_lanes(128, 2048, 2048, 5);
}

#[test]
#[ignore]
fn qgemm_timing() {
    time(1, 2048, 64, 2000);
    time(1, 2048, 2048, 100);
    time(128, 2048, 64, 50);
    time(128, 2048, 2048, 3);
}
