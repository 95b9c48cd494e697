//! Caller placement (runtime/lanes.rs, "Caller placement"): a caller that dispatches while it
//! runs on a worker's CPU is moved to lane 0's CPU for the dispatch, and its affinity mask is
//! put back afterwards.

use rcpu::abi::os;
use rcpu::runtime::{pool_for, Affinity, Par, PoolConfig};
use std::sync::Mutex;
use std::time::{Duration, Instant};

fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

#[test]
fn caller_on_a_worker_cpu_runs_its_chunks_on_lane_0_cpu() {
    let allowed = os::allowed_cpus().expect("sched_getaffinity");
    if allowed.len() < 2 {
        eprintln!("skipped: needs 2 CPUs in the affinity mask, have {allowed:?}");
        return;
    }
    let (home, worker_cpu) = (allowed[0], allowed[1]);
    let pool = pool_for(&PoolConfig {
        threads: 2,
        affinity: Affinity::List(vec![home, worker_cpu]),
        blocktime_us: 311,
    });
    assert_eq!(pool.cpus()[1], Some(worker_cpu), "worker not pinned");
    // A thread of its own, so the test harness thread's mask is never touched.
    std::thread::spawn(move || {
        // The spawned thread starts with the process's mask (both CPUs).
        let full = os::SavedAffinity::save().expect("save mask");
        let mut collided = 0;
        for attempt in 0..20 {
            // Put the caller on the worker's CPU, then widen its mask again: it stays there
            // until the OS moves it, which is the situation the placement guards against.
            os::pin_current_thread(worker_cpu).expect("pin to the worker cpu");
            full.restore().expect("widen mask");
            if os::current_cpu() != Some(worker_cpu) {
                continue;
            }
            let before = pool.counters();
            let me = std::thread::current().id();
            let caller_cpus = Mutex::new(Vec::new());
            pool.decode_chunks(8, &|_| {
                if std::thread::current().id() == me {
                    caller_cpus.lock().unwrap().push(os::current_cpu());
                }
                spin(Duration::from_micros(200));
            });
            let after = pool.counters();
            let cpus = caller_cpus.into_inner().unwrap();
            assert!(!cpus.is_empty(), "attempt {attempt}: the caller ran no chunk");
            assert!(
                cpus.iter().all(|&c| c == Some(home)),
                "attempt {attempt}: caller chunks ran on {cpus:?}, expected cpu {home} (worker on {worker_cpu})"
            );
            assert_eq!(after.caller_collisions - before.caller_collisions, 1);
            assert_eq!(after.caller_moves - before.caller_moves, 1);
            assert_eq!(
                os::allowed_cpus().unwrap(),
                allowed,
                "the caller's affinity mask was not restored"
            );
            collided += 1;
        }
        assert!(
            collided > 0,
            "the caller never stayed on the worker's cpu long enough to test"
        );
    })
    .join()
    .unwrap();
}
