//! What one two-lane decode dispatch costs on the lanes, against the least any hand-over can
//! cost (issue 17). Not a benchmark under BENCHMARKING.md rules (no ORT arm, no assertions): a
//! diagnostic.
//!
//! `cargo run --release -p rcpu --example dispatch_cost -- lanes|least [iters]`, one arm per
//! process (run both, alternating, several times; the lane round trip of the two CPUs decides
//! the figures, so note it, e.g. with the bench's lane probe).
//!
//! Both arms run the same job: two chunks, each of which waits until both have started, so a
//! dispatch costs the whole hand-over to the worker and back, as a decode call's does, and
//! nothing else. `lanes`: `Par::chunks` on the plugin's pool (two lanes: the caller and one
//! pinned worker). `least`: one thread pinned where the pool's worker is and one line each way
//! (the caller stores a sequence number, the thread runs its chunk and stores it back), the
//! least any protocol can do. The difference is what the lanes' dispatch (lending the job,
//! publishing it, the claim counter, the barrier) adds per call.

use rcpu::runtime::lanes::PoolConfig;
use rcpu::runtime::par::{Dispatch, Par};
use rcpu::runtime::registry::pool_for;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A counter alone on its cache lines.
#[repr(align(128))]
struct Line(AtomicU64);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let least = match args.first().map(String::as_str) {
        Some("lanes") => false,
        Some("least") => true,
        _ => {
            eprintln!("usage: dispatch_cost lanes|least [iters]");
            std::process::exit(2);
        }
    };
    let iters: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let pool = pool_for(&PoolConfig {
        threads: 2,
        ..PoolConfig::default()
    });
    let arrived = AtomicU64::new(0);
    // Each chunk waits until both have started.
    let job = |_i: usize| {
        arrived.fetch_add(1, Ordering::AcqRel);
        while !arrived.load(Ordering::Acquire).is_multiple_of(2) {
            std::hint::spin_loop();
        }
    };
    if !least {
        for round in 0..5 {
            let t = Instant::now();
            for _ in 0..iters {
                pool.chunks(Dispatch::Decode, 2, &job);
            }
            let ns = t.elapsed().as_nanos() as f64 / iters as f64;
            println!("round {round}: lanes {ns:.0} ns per dispatch");
        }
        return;
    }
    let (go, done) = (Line(AtomicU64::new(0)), Line(AtomicU64::new(0)));
    let cpu = pool.cpus().get(1).copied().flatten();
    drop(pool);
    std::thread::scope(|s| {
        let (go, done, job) = (&go, &done, &job);
        s.spawn(move || {
            if let Some(c) = cpu {
                let _ = rcpu::os::pin_current_thread(c);
            }
            let mut seen = 0;
            loop {
                let e = go.0.load(Ordering::Acquire);
                if e == u64::MAX {
                    return;
                }
                if e != seen {
                    seen = e;
                    job(1);
                    done.0.store(e, Ordering::Release);
                } else {
                    std::hint::spin_loop();
                }
            }
        });
        let mut e = 0;
        for round in 0..5 {
            let t = Instant::now();
            for _ in 0..iters {
                e += 1;
                go.0.store(e, Ordering::Release);
                job(0);
                while done.0.load(Ordering::Acquire) != e {
                    std::hint::spin_loop();
                }
            }
            let ns = t.elapsed().as_nanos() as f64 / iters as f64;
            println!("round {round}: least {ns:.0} ns per dispatch");
        }
        go.0.store(u64::MAX, Ordering::Release);
    });
}
