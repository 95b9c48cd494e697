//! The measurement behind `DEFAULT_BLOCKTIME_US` (a measurement, not a test: it prints, it
//! asserts nothing).
//!
//! `cargo run --release -p rcpu --example runtime_blocktime [iters rounds]` (default 200 5)
//!
//! For each blocktime and each gap between dispatches (busy-waited on the caller, like the
//! host work between the ops of a decode step), it reports the median dispatch latency of a
//! 2-lane job of 2 x ~5 us chunks and the workers' CPU time per dispatch, and both as ratios
//! to the `DEFAULT_BLOCKTIME_US` arm of the same gap. Arms alternate within every round
//! (docs/benchmarking.md, rule 1).

#[path = "../tests/common/proc.rs"]
mod proc;
#[path = "common/timing.rs"]
mod timing;

use proc::thread_cpu_time;
use rcpu::runtime::lanes::DEFAULT_BLOCKTIME_US;
use rcpu::runtime::{pool_for, Affinity, Dispatch, Lanes, Par, PoolConfig};
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

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let iters = *args.first().unwrap_or(&200);
    let rounds = args.get(1).copied().unwrap_or(5).max(1);
    let blocktimes = [0u64, 50, DEFAULT_BLOCKTIME_US, 1000];
    let base = blocktimes
        .iter()
        .position(|&b| b == DEFAULT_BLOCKTIME_US)
        .unwrap_or(0);
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
    println!("2 lanes, job of 2 x 5 us chunks, {iters} dispatches x {rounds} rounds per arm");
    for &gap in &gaps_us {
        let mut lat: Vec<Vec<f64>> = vec![Vec::new(); pools.len()];
        let mut cpu = vec![Duration::ZERO; pools.len()];
        for r in 0..rounds {
            for k in 0..pools.len() {
                let k = if r % 2 == 0 { k } else { pools.len() - 1 - k };
                let p = &pools[k];
                let c0 = workers_cpu(p);
                let mut s = Vec::with_capacity(iters);
                for _ in 0..iters {
                    busy(Duration::from_micros(gap));
                    let t = Instant::now();
                    p.chunks(Dispatch::Decode, 2, &|_| busy(Duration::from_micros(5)));
                    s.push(t.elapsed().as_secs_f64() * 1e6);
                }
                cpu[k] += workers_cpu(p).saturating_sub(c0);
                s.sort_by(f64::total_cmp);
                lat[k].push(timing::median(&s));
            }
        }
        let per_dispatch = |c: Duration| c.as_secs_f64() * 1e6 / (iters * rounds) as f64;
        for l in &mut lat {
            l.sort_by(f64::total_cmp);
        }
        let (base_lat, base_cpu) = (timing::median(&lat[base]), per_dispatch(cpu[base]));
        for (k, b) in blocktimes.iter().enumerate() {
            let (l, c) = (timing::median(&lat[k]), per_dispatch(cpu[k]));
            println!(
                "gap {gap:>5} us  blocktime {b:>5} us: p50 latency {l:7.1} us ({:5.2}x), \
                 worker cpu/dispatch {c:7.1} us ({:5.2}x)  {:?}",
                l / base_lat,
                c / base_cpu,
                pools[k].counters()
            );
        }
    }
}
