//! The measurement behind `DEFAULT_BLOCKTIME_US` (ignored by default; run with
//! `cargo test --release -p rcpu --test runtime_blocktime -- --ignored --nocapture`).
//!
//! For each blocktime and each gap between dispatches (busy-waited on the caller, like the
//! host work between the ops of a decode step), it reports the median dispatch latency of a
//! 2-lane job of 2 x ~5 us chunks and the workers' CPU time per dispatch. Arms alternate
//! within every round (docs/benchmarking.md, rule 1).

use rcpu::abi::os::thread_cpu_time;
use rcpu::runtime::{pool_for, Affinity, Lanes, Par, PoolConfig};
use std::time::{Duration, Instant};

fn busy(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

fn workers_cpu(p: &Lanes) -> Duration {
    p.worker_tids()
        .iter()
        .map(|&t| thread_cpu_time(t).unwrap_or_default())
        .sum()
}

#[test]
#[ignore]
fn measure_blocktime() {
    let blocktimes = [0u64, 50, 200, 1000];
    let gaps_us = [2u64, 20, 100, 500, 3000];
    let pools: Vec<_> = blocktimes
        .iter()
        .map(|&b| {
            pool_for(&PoolConfig {
                threads: 2,
                affinity: Affinity::Physical,
                blocktime_us: b,
            })
        })
        .collect();
    let iters = 200;
    let rounds = 5;
    for &gap in &gaps_us {
        let mut lat: Vec<Vec<f64>> = vec![Vec::new(); pools.len()];
        let mut cpu = vec![Duration::ZERO; pools.len()];
        for r in 0..rounds {
            for k in 0..pools.len() {
                let k = if r % 2 == 0 { k } else { pools.len() - 1 - k };
                let p = &pools[k];
                let c0 = workers_cpu(p);
                let mut samples = Vec::with_capacity(iters);
                for _ in 0..iters {
                    busy(Duration::from_micros(gap));
                    let t = Instant::now();
                    p.decode_chunks(2, &|_| busy(Duration::from_micros(5)));
                    samples.push(t.elapsed().as_secs_f64() * 1e6);
                }
                cpu[k] += workers_cpu(p) - c0;
                samples.sort_by(f64::total_cmp);
                lat[k].push(samples[iters / 2]);
            }
        }
        for (k, b) in blocktimes.iter().enumerate() {
            lat[k].sort_by(f64::total_cmp);
            println!(
                "gap {gap:>5} us  blocktime {b:>5} us: p50 latency {:7.1} us, worker cpu/dispatch {:7.1} us  {:?}",
                lat[k][rounds / 2],
                cpu[k].as_secs_f64() * 1e6 / (iters * rounds) as f64,
                pools[k].counters()
            );
        }
    }
}
