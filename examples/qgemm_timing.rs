//! Kernel-only timing of QGemm (a measurement, not a test: it prints, it asserts nothing).
//!
//! `cargo run --release -p rcpu --example qgemm_timing [serial|lanes|all]` (default all)
//!
//! `serial`: one thread (`Serial`), active kernels, prepacked B, uint8 x int8, per-tensor
//! parameters, timed by the thread's CPU clock. N = 64 keeps B in L2 (compute rate);
//! K = N = 2048 (4 MB) is the bench shape. Prints the median (and best) of 9 repeats of
//! `iters` calls each, as GB/s of B and GMAC/s, and the bench shape's rate as a ratio to the
//! in-L2 rate of the same M.
//! `lanes`: wall time on two pinned lanes (the EP's pool) against one thread on the same
//! clock, as a speed-up ratio.

#[path = "../tests/common/nbits.rs"]
mod nbits_common;
#[path = "../tests/common/qgemm.rs"]
mod qgemm_common;
#[path = "../tests/common/rng.rs"]
mod rng;
#[path = "common/timing.rs"]
mod timing;

use qgemm_common::QCase;
use rcpu::kernels::qgemm::{pack, run, BSource, Kernels, Signs};
use rcpu::runtime::par::{Par, Serial};
use rcpu::telemetry::ledger::Variant;
use timing::Clock;

/// Seconds per call of a u8 x s8 problem on `par`, sorted, 9 repeats of `iters` calls.
fn samples(m: usize, k: usize, n: usize, iters: usize, par: &dyn Par, clock: Clock) -> Vec<f64> {
    let c = QCase::new(Signs::U8S8, m, k, n, false, false, 3);
    let packed = pack(&c.b, c.k, c.n, c.batches, c.signs);
    let call = c.call(BSource::Packed(packed.view()));
    let mut y = vec![0u8; c.out_len()];
    timing::samples(9, iters, clock, || {
        run(&call, &mut y, par).unwrap();
    })
}

/// One thread, CPU clock; returns the median GMAC/s.
fn time(m: usize, k: usize, n: usize, iters: usize) -> f64 {
    let t = samples(m, k, n, iters, &Serial, Clock::ThreadCpu);
    let med = timing::median(&t);
    let gmac = (m * k * n) as f64 / med / 1e9;
    println!(
        "{} m={m} k={k} n={n}: {:.1} us/call (best {:.1}), B {:.1} GB/s, {gmac:.1} GMAC/s",
        Kernels::active().route(m).text(),
        med * 1e6,
        t[0] * 1e6,
        (k * n) as f64 / med / 1e9,
    );
    gmac
}

/// Two pinned lanes against one thread, both on the wall clock, arms alternating.
fn time_lanes(m: usize, k: usize, n: usize, iters: usize) {
    use rcpu::runtime::lanes::PoolConfig;
    let pool = rcpu::runtime::registry::pool_for(&PoolConfig {
        threads: 2,
        ..Default::default()
    });
    let (mut one, mut two) = (Vec::new(), Vec::new());
    for r in 0..3 {
        let mut lanes = || two.extend(samples(m, k, n, iters, &*pool, Clock::Wall));
        let mut serial = || one.extend(samples(m, k, n, iters, &Serial, Clock::Wall));
        if r % 2 == 0 {
            lanes();
            serial();
        } else {
            serial();
            lanes();
        }
    }
    one.sort_by(f64::total_cmp);
    two.sort_by(f64::total_cmp);
    println!(
        "2 lanes m={m} k={k} n={n}: {:.1} us/call wall (best {:.1}); 1 thread {:.1} us; speed-up {:.2}x",
        timing::median(&two) * 1e6,
        two[0] * 1e6,
        timing::median(&one) * 1e6,
        timing::median(&one) / timing::median(&two)
    );
}

fn main() {
    let what = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    if what == "serial" || what == "all" {
        for (m, iters_l2, iters_big) in [(1, 2000, 100), (128, 50, 3)] {
            let l2 = time(m, 2048, 64, iters_l2);
            let big = time(m, 2048, 2048, iters_big);
            println!("  m={m}: n=2048 runs at {:.2}x the in-L2 rate", big / l2);
        }
    }
    if what == "lanes" || what == "all" {
        time_lanes(1, 2048, 2048, 200);
        time_lanes(128, 2048, 2048, 5);
    }
}
