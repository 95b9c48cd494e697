//! Kernel-only rates of the MatMulNBits tile kernels with the active kernel set (a measurement,
//! not a test: it prints, it asserts nothing).
//!
//! `cargo run --release -p rcpu --example matmul_nbits_rates [rates|prepare_a|ledger|all] [acc]`
//! (default all, both accuracy levels 4 and 0).
//!
//! `rates`: single thread (`Serial`), K = 4096, block 32, zero points. N = 64 keeps the packed
//! weight (~170 KB) in L2, so the figure is the kernel's compute rate; N = 4096 (~10.5 MB)
//! streams from L3 / DRAM. Median of 15 repeats of `iters` calls each, and the streaming rate
//! as a ratio to the in-L2 rate.
//! `prepare_a`: the cost of quantizing / preparing A (scalar against the active kernels' path,
//! with the ratio). `ledger`: the per-call cost of `telemetry::ledger::record`.
//! (`matmul_nbits_timing` times each ISA variant explicitly; this one the dispatch users get.)

#[path = "../tests/common/nbits.rs"]
mod matmul_nbits_common;
#[path = "../tests/common/rng.rs"]
mod rng;
#[path = "common/timing.rs"]
mod timing;

use matmul_nbits_common::Problem;
use rcpu::kernels::matmul_nbits::{matmul_packed, pack};
use rcpu::runtime::par::Serial;
use timing::Clock;

/// Median GB/s of packed weight bytes.
fn time(n: usize, m: usize, acc: usize, iters: usize) -> f64 {
    let pr = Problem::new(4096, n, m, 32, acc, true, false, 3);
    let packed = pack(&pr.b, &pr.scales, pr.zp.as_deref(), &pr.p);
    let mut y = vec![0f32; m * n];
    let t = timing::samples(15, iters, Clock::Wall, || {
        matmul_packed(&pr.a, m, &packed, None, &mut y, &Serial)
    });
    let med = timing::median(&t);
    let wbytes = (n * 4096 / 2 + n * 128 * 4 + n * 128) as f64;
    println!(
        "acc{acc} M={m:<3} K=4096 N={n:<5}: median {:9.1} us  min {:9.1} us  {:6.1} GB/s  {:6.2} GMAC/s",
        med * 1e6,
        t[0] * 1e6,
        wbytes / med / 1e9,
        (m * n * 4096) as f64 / med / 1e9
    );
    wbytes / med / 1e9
}

fn kernel_rates(only: Option<usize>) {
    for acc in [4, 0] {
        if only.is_some_and(|o| o != acc) {
            continue;
        }
        let l2 = time(64, 1, acc, 400);
        time(256, 1, acc, 200);
        let big = time(4096, 1, acc, 20);
        time(256, 128, acc, 3);
        println!(
            "  acc{acc} M=1: N=4096 streams at {:.2}x the in-L2 rate",
            big / l2
        );
    }
}

fn prepare_a_cost(only: Option<usize>) {
    use rcpu::kernels::matmul_nbits::{prepare_a::PreparedA, Kernels};
    for (m, acc) in [(1, 4), (1, 0), (128, 4), (128, 0)] {
        if only.is_some_and(|o| o != acc) {
            continue;
        }
        let pr = Problem::new(4096, 16, m, 32, acc, true, false, 3);
        let iters = if m == 1 { 2000 } else { 20 };
        let mut med = [0.0; 2];
        for (i, active) in [false, true].into_iter().enumerate() {
            let t = timing::samples(15, iters, Clock::Wall, || {
                std::hint::black_box(if active {
                    PreparedA::for_kernels(Kernels::active(), &pr.a, m, &pr.p)
                } else {
                    PreparedA::new(&pr.a, m, &pr.p)
                });
            });
            med[i] = timing::median(&t);
            println!(
                "PreparedA {:6} acc{acc} M={m:<3} K=4096: median {:8.2} us  min {:8.2} us",
                if active { "active" } else { "scalar" },
                med[i] * 1e6,
                t[0] * 1e6
            );
        }
        println!("  active takes {:.2}x the scalar time", med[1] / med[0]);
    }
}

fn ledger_cost() {
    use rcpu::telemetry::ledger;
    let t = timing::samples(5, 200_000, Clock::Wall, || {
        ledger::record("NbitsLedgerTimingOp", "v1", 2)
    });
    println!(
        "ledger::record: median {:.1} ns/call (best {:.1})",
        timing::median(&t) * 1e9,
        t[0] * 1e9
    );
}

fn main() {
    let what = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let only = std::env::args().nth(2).and_then(|s| s.parse().ok());
    let all = what == "all";
    if all || what == "rates" {
        kernel_rates(only);
    }
    if all || what == "prepare_a" {
        prepare_a_cost(only);
    }
    if all || what == "ledger" {
        ledger_cost();
    }
}
