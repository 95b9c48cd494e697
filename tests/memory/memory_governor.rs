//! Governor: budget enforcement, release on drop, settle accounting, concurrency. Local governors only.

use rcpu::memory::{Governor, OverBudget, Reservation};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[test]
fn grant_drop_returns_budget_and_over_budget_declines() {
    let g = Arc::new(Governor::new(100));
    let a = g.reserve_shared(60).grant().expect("60 of 100 fits");
    assert_eq!(g.live_bytes(), 60);
    assert!(
        matches!(g.reserve_shared(50), Reservation::Declined),
        "60+50 > 100"
    );
    assert_eq!(g.declines(), 1);
    drop(a);
    assert_eq!(g.live_bytes(), 0, "dropping the grant returns its bytes");
    assert_eq!(g.reserved_bytes(), 0);
    let b = g
        .reserve_shared(50)
        .grant()
        .expect("fits again after release");
    let c = g
        .reserve_shared(50)
        .grant()
        .expect("exactly at budget is allowed");
    assert!(!g.reserve_shared(1).is_granted());
    assert_eq!(g.live_bytes(), 100);
    assert_eq!(g.peak_live_bytes(), 100);
    assert_eq!(g.grants(), 3);
    drop((b, c));
    assert_eq!(g.live_bytes(), 0);
}

#[test]
fn budget_zero_declines_every_nonzero_request() {
    let g = Arc::new(Governor::new(0));
    for bytes in [1u64, 64, 1 << 20, u64::MAX] {
        assert!(
            !g.reserve_shared(bytes).is_granted(),
            "{bytes} bytes on budget 0"
        );
    }
    assert!(
        g.reserve_shared(0).is_granted(),
        "a zero-byte request holds nothing"
    );
    assert_eq!(g.live_bytes(), 0);
    assert_eq!(g.peak_live_bytes(), 0);
}

#[test]
fn settle_moves_live_to_measured_bytes() {
    let g = Arc::new(Governor::new(1000));
    let mut a = g.reserve_shared(400).grant().unwrap();
    assert_eq!((g.live_bytes(), g.reserved_bytes()), (400, 400));
    a.settle(250).unwrap();
    assert_eq!((g.live_bytes(), g.reserved_bytes()), (250, 400));
    let _b = g
        .reserve_shared(700)
        .grant()
        .expect("shrunk grant frees room");
    assert_eq!(
        a.settle(301),
        Err(OverBudget),
        "growth is checked against the budget"
    );
    assert_eq!(
        a.held_bytes(),
        250,
        "a refused settle leaves the grant unchanged"
    );
    a.settle(300).unwrap();
    assert_eq!(g.live_bytes(), 1000);
    drop(a);
    assert_eq!((g.live_bytes(), g.reserved_bytes()), (700, 700));
}

#[test]
fn lowering_the_budget_keeps_existing_grants() {
    let g = Arc::new(Governor::new(100));
    let a = g.reserve_shared(80).grant().unwrap();
    g.set_budget(50);
    assert_eq!(g.live_bytes(), 80, "existing grant kept");
    assert!(
        !g.reserve_shared(1).is_granted(),
        "new reservations decline while over budget"
    );
    drop(a);
    assert!(g.reserve_shared(50).is_granted());
}

#[test]
fn concurrent_reserve_release_never_exceeds_budget() {
    // One thread alone holds up to 3 grants of up to 300 bytes, so it meets this budget even
    // when the scheduler runs the threads one after another (a loaded 2-core CI machine).
    const BUDGET: u64 = 500;
    const THREADS: u64 = 16;
    const ITERS: u64 = 20_000;
    let g = Arc::new(Governor::new(BUDGET));
    let max_seen = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let g = Arc::clone(&g);
            let max_seen = Arc::clone(&max_seen);
            std::thread::spawn(move || {
                let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                let mut held = Vec::new();
                for _ in 0..ITERS {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if let Some(grant) = g.reserve_shared(1 + x % 300).grant() {
                        max_seen.fetch_max(g.live_bytes(), Ordering::Relaxed);
                        held.push(grant);
                    }
                    if held.len() > (x % 3) as usize {
                        held.remove(0);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert!(
        g.peak_live_bytes() <= BUDGET,
        "peak {} > budget",
        g.peak_live_bytes()
    );
    assert!(max_seen.load(Ordering::Relaxed) <= BUDGET);
    assert_eq!(g.grants() + g.declines(), THREADS * ITERS);
    assert!(
        g.declines() > 0 && g.grants() > 0,
        "the test must hit the budget"
    );
    assert_eq!((g.live_bytes(), g.reserved_bytes()), (0, 0));
}
