//! Idle reads (`Lanes::idle_read`, "Idle reads" in `runtime::park`): a spinning worker reads a
//! hinted range step by step, looks at the epoch before every step, and leaves the range at
//! once for a new job; a hint is bounded, consumed once, and never reads bytes whose owner is
//! gone.

use crate::lanes_common::{on_worker, wait_until};

use rcpu::runtime::hooks::Point;
use rcpu::runtime::warm::{IdleHint, HINT_MAX_BYTES, STEP_BYTES};
use rcpu::runtime::{pool_for, Affinity, Dispatch, Par, PoolConfig};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A hint naming all of `buf` (clipped to `HINT_MAX_BYTES`).
fn whole(buf: &Arc<Vec<u8>>) -> IdleHint {
    IdleHint::new(buf, 0..buf.len())
}

/// Counts `pool`'s idle-read steps (stall point `WorkerReadAhead`), stalling each by `stall`.
fn count_read_steps(pool: &rcpu::runtime::Lanes, stall: Duration) -> Arc<AtomicU64> {
    let steps = Arc::new(AtomicU64::new(0));
    let s = steps.clone();
    pool.set_stall_hook(Some(Arc::new(move |pt| {
        if let Point::WorkerReadAhead(_) = pt {
            s.fetch_add(1, Ordering::SeqCst);
            if !stall.is_zero() {
                std::thread::sleep(stall);
            }
        }
    })));
    steps
}

fn cfg(threads: usize, blocktime_us: u64) -> PoolConfig {
    PoolConfig {
        threads,
        affinity: Affinity::Physical,
        blocktime_us,
    }
}

/// Guarantee: a job published while a worker reads ahead is not delayed by the rest of the
/// range (at most the step in flight completes) and not lost (the worker joins it).
/// Staged: every read step stalls the worker 2 ms (stall point `WorkerReadAhead`), so the
/// 1 MiB hint would keep it busy for about two seconds; the dispatch's caller chunk waits
/// until the worker has joined, and the steps the worker takes after the publication
/// (`CallerPublished`) are counted.
/// Seen failing: with `Signal::spin` reading the whole range before it looks at the epoch
/// again (hundreds of steps after the publication).
#[test]
fn idle_read_yields_to_a_new_job_within_one_step() {
    // A blocktime no other test uses (own pool), long enough that the worker never parks.
    let pool = pool_for(&cfg(2, 30_000_001));
    let (steps, after) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let published = Arc::new(AtomicBool::new(false));
    let (s, a, p) = (steps.clone(), after.clone(), published.clone());
    pool.set_stall_hook(Some(Arc::new(move |pt| match pt {
        Point::WorkerReadAhead(_) => {
            s.fetch_add(1, Ordering::SeqCst);
            if p.load(Ordering::SeqCst) {
                a.fetch_add(1, Ordering::SeqCst);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        Point::CallerPublished => p.store(true, Ordering::SeqCst),
        _ => {}
    })));
    let buf = Arc::new(vec![1u8; 2 * HINT_MAX_BYTES]);
    for round in 0..3 {
        // A job first: the worker has seen the latest epoch and spins.
        pool.chunks(Dispatch::Decode, 2, &|_| {});
        published.store(false, Ordering::SeqCst);
        let (k0, s0) = (pool.counters(), steps.load(Ordering::SeqCst));
        after.store(0, Ordering::SeqCst);
        pool.idle_read(Some(whole(&buf)));
        wait_until("the worker reads ahead", || {
            steps.load(Ordering::SeqCst) >= s0 + 3
        });
        let joined = AtomicBool::new(false);
        let at_join = AtomicU64::new(u64::MAX);
        pool.chunks(Dispatch::Decode, 2, &|_| {
            if on_worker() {
                // After the job the worker resumes the range: count only the steps before it.
                at_join.store(after.load(Ordering::SeqCst), Ordering::SeqCst);
                joined.store(true, Ordering::SeqCst);
            } else {
                wait_until("the reading worker joins the job", || {
                    joined.load(Ordering::SeqCst)
                });
            }
        });
        let k = pool.counters();
        let late = at_join.load(Ordering::SeqCst);
        assert!(
            late <= 1,
            "round {round}: {late} read steps after the job was published"
        );
        assert!(joined.load(Ordering::SeqCst), "round {round}");
        assert!(
            k.idle_prefetch_cut > k0.idle_prefetch_cut,
            "round {round}: the cut range is counted: {k:?}"
        );
        // Cancel what is left, so the next round starts from a fresh hint.
        pool.idle_read(None);
    }
    pool.set_stall_hook(None);
}

/// Guarantee: a hint longer than `HINT_MAX_BYTES` is read up to that bound and
/// then no more (exactly that many bytes counted once the worker is idle again), in
/// `STEP_BYTES` steps; a one-lane pool ignores hints.
/// A hint whose bytes' owner is gone reads nothing.
/// Seen failing: with the bound dropped in `IdleHint::new` (3 MiB counted); with the hint
/// holding its owner strongly (the dropped buffer read).
#[test]
fn idle_read_is_bounded_done_once_and_needs_its_owner() {
    let pool = pool_for(&cfg(2, 30_000_002));
    let steps = count_read_steps(&pool, Duration::ZERO);
    let buf = Arc::new(vec![1u8; 3 * HINT_MAX_BYTES]);
    pool.chunks(Dispatch::Decode, 2, &|_| {});
    let s0 = steps.load(Ordering::SeqCst);
    pool.idle_read(Some(whole(&buf)));
    let want = (HINT_MAX_BYTES / STEP_BYTES) as u64;
    wait_until("the worker reads the bounded range", || {
        steps.load(Ordering::SeqCst) >= s0 + want
    });
    // The counter is added when the spin phase ends (on the worker, after it saw a job).
    std::thread::sleep(Duration::from_millis(20));
    pool.chunks(Dispatch::Decode, 2, &|_| {});
    wait_until("the worker counts its reads", || {
        pool.counters().idle_prefetch_bytes >= HINT_MAX_BYTES as u64
    });
    assert_eq!(steps.load(Ordering::SeqCst) - s0, want, "steps");
    assert_eq!(
        pool.counters().idle_prefetch_bytes,
        HINT_MAX_BYTES as u64,
        "{:?}",
        pool.counters()
    );
    // A hint whose buffer was dropped before the worker took it: no step, no byte (the same
    // step-counting hook still installed).
    let gone = Arc::new(vec![1u8; 64 * STEP_BYTES]);
    let hint = whole(&gone);
    assert_eq!(hint.bytes(), 64 * STEP_BYTES);
    drop(gone);
    let (s1, k1) = (steps.load(Ordering::SeqCst), pool.counters());
    pool.idle_read(Some(hint));
    std::thread::sleep(Duration::from_millis(20));
    pool.chunks(Dispatch::Decode, 2, &|_| {});
    std::thread::sleep(Duration::from_millis(20));
    pool.chunks(Dispatch::Decode, 2, &|_| {});
    pool.set_stall_hook(None);
    assert_eq!(
        steps.load(Ordering::SeqCst),
        s1,
        "steps over a dropped buffer"
    );
    assert_eq!(
        pool.counters().idle_prefetch_bytes,
        k1.idle_prefetch_bytes,
        "bytes read of a dropped buffer"
    );
    // One lane: no worker, nothing to hint (and no panic).
    let one = pool_for(&cfg(1, 30_000_003));
    one.idle_read(Some(whole(&buf)));
    one.chunks(Dispatch::Decode, 2, &|_| {});
    assert_eq!(one.counters().idle_prefetch_bytes, 0);
}

/// Guarantee (what a MatMulNBits decode call relies on when it posts the next call's hint just
/// before its own dispatch, `ep::nodes::matmul_nbits::hint_following`): a hint posted right
/// before a job is read after that job, whether the worker took it up before the job came (it
/// resumes the rest) or only once the job was done (it takes it then), and read once: exactly
/// `HINT_MAX_BYTES / STEP_BYTES` steps in all. Staged: every read step stalls the worker 200 us,
/// so a job published after the first step finds most of the range still unread.
/// Seen failing: with a worker dropping the rest of its hint when a job arrives (`drop_rest` on
/// a spin hit in `Signal::spin`): the first round stops after the steps before the job.
#[test]
fn a_hint_posted_before_a_job_is_read_after_it() {
    let pool = pool_for(&cfg(2, 30_000_004));
    let steps = count_read_steps(&pool, Duration::from_micros(200));
    let buf = Arc::new(vec![1u8; HINT_MAX_BYTES]);
    let want = (HINT_MAX_BYTES / STEP_BYTES) as u64;
    for taken_first in [true, false] {
        // A job first: the worker has seen the latest epoch, and the last hint is done.
        pool.chunks(Dispatch::Decode, 2, &|_| {});
        let s0 = steps.load(Ordering::SeqCst);
        pool.idle_read(Some(whole(&buf)));
        if taken_first {
            wait_until("the worker takes the hint up", || {
                steps.load(Ordering::SeqCst) > s0
            });
        }
        pool.chunks(Dispatch::Decode, 2, &|_| {});
        wait_until("the worker reads the whole hint after the job", || {
            steps.load(Ordering::SeqCst) >= s0 + want
        });
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            steps.load(Ordering::SeqCst) - s0,
            want,
            "steps with the hint taken up before the job: {taken_first}"
        );
    }
    pool.set_stall_hook(None);
}
