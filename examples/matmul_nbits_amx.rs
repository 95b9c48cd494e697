//! AMX against VNNI for the accuracy-level-4 MatMulNBits GEMM, in one process (a measurement,
//! not a test: it prints, it asserts nothing).
//!
//! `cargo run --release -p rcpu --example matmul_nbits_amx [shapes|threshold|all] [rounds]`
//!
//! `shapes`: Qwen2-0.5B's projections (K=896 N=1152 / 896 / 4864, K=4864 N=896, K=896
//! N=151936), block 32, zero points, at M = 64 and 512. `threshold`: small M at K=896 N=4864 and
//! K=4864 N=896, to see from which M the AMX route wins. Single thread (`Serial`): the kernels'
//! rates, not the pool's, timed in thread CPU time (time slices lost to other processes on a
//! shared machine do not count). Arms alternate within each round (VNNI, AMX, VNNI, ...); the per-arm
//! median over rounds and the ratio VNNI / AMX (> 1: AMX faster) are printed. Both arms give
//! bit-identical outputs (checked once per shape; a mismatch is printed).

#[path = "../tests/common/nbits.rs"]
mod matmul_nbits_common;
#[path = "../tests/common/rng.rs"]
mod rng;
#[path = "common/timing.rs"]
mod timing;

use matmul_nbits_common::Problem;
use rcpu::kernels::isa::Isa;
use rcpu::kernels::matmul_nbits::{matmul_packed_with, pack, Kernels};
use rcpu::runtime::par::Serial;
use rcpu::telemetry::ledger::Variant;
use timing::Clock;

fn compare(k: usize, n: usize, m: usize, rounds: usize, amx: &Kernels, vnni: &Kernels) {
    let pr = Problem::new(k, n, m, 32, 4, true, false, 7);
    let packed = pack(&pr.b, &pr.scales, pr.zp.as_deref(), &pr.p);
    let mut y = [vec![0f32; m * n], vec![0f32; m * n]];
    // `RCPU_AMX_EXAMPLE_ARM=amx|vnni` runs one arm only (for profiling).
    let only = std::env::var("RCPU_AMX_EXAMPLE_ARM").ok();
    let arms = match only.as_deref() {
        Some("amx") => [amx, amx],
        Some("vnni") => [vnni, vnni],
        _ => [vnni, amx],
    };
    // Sized so one sample is at least ~20 ms of VNNI work (at ~100 GMAC/s).
    let iters = (2e9 / (m * n * k) as f64).ceil().max(1.0) as usize;
    let mut t = [Vec::new(), Vec::new()];
    for _ in 0..rounds {
        for (i, kern) in arms.iter().enumerate() {
            let s = timing::samples(1, iters, Clock::ThreadCpu, || {
                matmul_packed_with(kern, &pr.a, m, &packed, None, &mut y[i], &Serial).unwrap()
            });
            t[i].push(s[0]);
        }
    }
    let same = y[0]
        .iter()
        .zip(&y[1])
        .all(|(a, b)| a.to_bits() == b.to_bits());
    let med = t.map(|mut v| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    });
    let gmac = |s: f64| (m * n * k) as f64 / s / 1e9;
    println!(
        "M={m:<4} K={k:<5} N={n:<6}: vnni {:10.1} us ({:6.1} GMAC/s)  {} {:10.1} us ({:6.1} GMAC/s)  vnni/amx {:5.2}{}",
        med[0] * 1e6,
        gmac(med[0]),
        amx.route(4, m).text(),
        med[1] * 1e6,
        gmac(med[1]),
        med[0] / med[1],
        if same { "" } else { "  OUTPUTS DIFFER" }
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let what = args.get(1).map_or("all", |s| s.as_str());
    let rounds = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5);
    let (amx, every) = match Kernels::amx().and_then(|a| Ok((a, Kernels::amx_every_m()?))) {
        Ok(k) => k,
        Err(e) => {
            println!("AMX not usable here: {e}");
            return;
        }
    };
    let vnni = Kernels::for_isa(Isa::Avx512Vnni).unwrap();
    if what == "threshold" || what == "all" {
        println!(
            "-- threshold (AMX route from M = {})",
            rcpu::kernels::matmul_nbits::dispatch::AMX_MIN_M
        );
        for (k, n) in [(896, 4864), (4864, 896)] {
            for m in [2, 4, 8, 12, 16, 24, 32] {
                // The AMX kernel at every M (the route's set takes it from AMX_MIN_M).
                compare(k, n, m, rounds, every, vnni);
            }
        }
    }
    if let Some(shape) = what.strip_prefix("one=") {
        // one=M,K,N
        let v: Vec<usize> = shape.split(',').map(|x| x.parse().unwrap()).collect();
        compare(v[1], v[2], v[0], rounds, every, vnni);
    }
    if what == "shapes" || what == "all" {
        println!("-- Qwen2-0.5B shapes");
        for m in [64, 512] {
            for (k, n) in [
                (896, 1152),
                (896, 896),
                (896, 4864),
                (4864, 896),
                (896, 151936),
            ] {
                compare(k, n, m, rounds, amx, vnni);
            }
        }
    }
}
