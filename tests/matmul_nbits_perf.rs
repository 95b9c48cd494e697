//! Kernel-only timing of the MatMulNBits tile kernels (ignored by default; run with
//! `cargo test --release --test matmul_nbits_perf -- --ignored --nocapture`).
//!
//! Single thread (`Serial`), active kernels, K = 4096, block 32, zero points. N = 64 keeps the
//! packed weight (~170 KB) in L2, so the figure is the kernel's compute rate; N = 4096 (~10.5 MB)
//! streams from L3 / DRAM. Prints the median of 15 repeats of `iters` calls each.

#[path = "common/nbits.rs"]
mod matmul_nbits_common;
use matmul_nbits_common::Problem;

use rcpu::kernels::matmul_nbits::{matmul_packed, pack};
use rcpu::runtime::par::Serial;
use std::time::Instant;

fn time(n: usize, m: usize, acc: usize, iters: usize) {
    let pr = Problem::new(4096, n, m, 32, acc, true, false, 3);
    let packed = pack(&pr.b, &pr.scales, pr.zp.as_deref(), &pr.p);
    let mut y = vec![0f32; m * n];
    let mut t = Vec::new();
    for _ in 0..15 {
        let t0 = Instant::now();
        for _ in 0..iters {
            matmul_packed(&pr.a, m, &packed, None, &mut y, &Serial).unwrap();
        }
        t.push(t0.elapsed().as_secs_f64() / iters as f64);
    }
    t.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let med = t[t.len() / 2];
    let wbytes = (n * 4096 / 2 + n * 128 * 4 + n * 128) as f64;
    println!(
        "acc{acc} M={m:<3} K=4096 N={n:<5}: median {:9.1} us  min {:9.1} us  {:6.1} GB/s  {:6.2} GMAC/s",
        med * 1e6,
        t[0] * 1e6,
        wbytes / med / 1e9,
        (m * n * 4096) as f64 / med / 1e9
    );
}

#[test]
#[ignore]
fn kernel_rates() {
    let only = std::env::var("NBITS_PERF_ACC").ok();
    for acc in [4, 0] {
        if only.as_deref().is_some_and(|o| o != acc.to_string()) {
            continue;
        }
        time(64, 1, acc, 400);
        time(256, 1, acc, 200);
        time(4096, 1, acc, 20);
        time(256, 128, acc, 3);
    }
}

#[test]
#[ignore]
fn prepare_a_cost() {
    use rcpu::kernels::matmul_nbits::{prepare_a::PreparedA, Kernels};
    for (m, acc, active) in [
        (1, 4, false),
        (1, 4, true),
        (1, 0, true),
        (128, 4, false),
        (128, 4, true),
        (128, 0, true),
    ] {
        let pr = Problem::new(4096, 16, m, 32, acc, true, false, 3);
        let iters = if m == 1 { 2000 } else { 20 };
        let mut t = Vec::new();
        for _ in 0..15 {
            let t0 = Instant::now();
            for _ in 0..iters {
                std::hint::black_box(if active {
                    PreparedA::for_kernels(Kernels::active(), &pr.a, m, &pr.p)
                } else {
                    PreparedA::new(&pr.a, m, &pr.p)
                });
            }
            t.push(t0.elapsed().as_secs_f64() / iters as f64);
        }
        t.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "PreparedA {:6} acc{acc} M={m:<3} K=4096: median {:8.2} us  min {:8.2} us",
            if active { "active" } else { "scalar" },
            t[t.len() / 2] * 1e6,
            t[0] * 1e6
        );
    }
}

/// The lock-free ledger counts every call of a route across threads, merges, and resets to
/// "never ran"; also prints its per-call cost.
#[test]
fn ledger_counts_and_costs() {
    use rcpu::telemetry::ledger;
    let op: &'static str = "NbitsLedgerTestOp";
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..10_000 {
                    ledger::record(op, "v1", 2);
                }
            });
        }
    });
    // Same content at another address (a heap string leaked to 'static) merges into one row.
    let v1_other: &'static str = Box::leak(String::from("v1").into_boxed_str());
    ledger::record(op, v1_other, 2);
    ledger::record(op, "v2", 2);
    let rows: Vec<_> = ledger::rows()
        .into_iter()
        .filter(|r| r.route.op == op)
        .collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!((rows[0].route.variant, rows[0].calls), ("v1", 40_001));
    assert_eq!((rows[1].route.variant, rows[1].calls), ("v2", 1));
    assert_eq!(ledger::calls_for(op), 40_002);
    let t0 = Instant::now();
    for _ in 0..1_000_000 {
        ledger::record(op, "v1", 2);
    }
    println!(
        "ledger::record: {:.1} ns/call",
        t0.elapsed().as_secs_f64() * 1e3
    );
}
