//! Scratch buffers against the process-wide scratch governor. These tests reconfigure the global
//! budget, so they run in `tests/serial/`, one at a time (`crate::serial`).

use rcpu::memory::{
    configure, scratch_governor, scratch_stats, try_with_scratch_f32, try_with_scratch_i32,
};
use std::sync::{Arc, Barrier};

const MIB: u64 = 1 << 20;

#[test]
fn parked_bytes_summed_over_threads_stay_within_process_cap() {
    let _serial = crate::serial();
    configure(None, Some(4 * MIB));
    let before = scratch_stats();
    let live_before = scratch_governor().live_bytes();
    let parked = Arc::new(Barrier::new(9));
    let checked = Arc::new(Barrier::new(9));
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let (parked, checked) = (parked.clone(), checked.clone());
            std::thread::spawn(move || {
                let n = (MIB / 4) as usize; // 1 MiB of f32
                let sum = try_with_scratch_f32(n, |s| {
                    s.fill(t as f32);
                    s.iter().sum::<f32>()
                })
                .unwrap();
                assert_eq!(sum, t as f32 * n as f32);
                parked.wait(); // every thread has tried to park
                checked.wait(); // main has measured; keep buffers parked until then
            })
        })
        .collect();
    parked.wait();
    let mid = scratch_stats();
    let held = mid.parked_bytes - before.parked_bytes;
    assert!(
        held <= 4 * MIB,
        "parked {held} bytes over all threads > 4 MiB cap"
    );
    assert_eq!(held, 4 * MIB, "four 1 MiB buffers fit exactly");
    assert_eq!(mid.parks - before.parks, 4);
    assert_eq!(
        mid.declined_parks - before.declined_parks,
        4,
        "oversize buffers are released"
    );
    assert!(scratch_governor().live_bytes() - live_before <= 4 * MIB);
    assert!(scratch_governor().peak_live_bytes() <= 4 * MIB);
    checked.wait();
    for h in handles {
        h.join().unwrap();
    }
    // Thread exit releases the parked grants.
    assert_eq!(scratch_stats().parked_bytes, before.parked_bytes);
    assert_eq!(scratch_governor().live_bytes(), live_before);
}

#[test]
fn budget_zero_scratch_still_works_nothing_parked() {
    let _serial = crate::serial();
    configure(None, Some(0));
    let before = scratch_stats();
    std::thread::spawn(|| {
        for round in 0..3 {
            let v = try_with_scratch_i32(1000, |s| {
                for (i, x) in s.iter_mut().enumerate() {
                    *x = i as i32 + round;
                }
                s.iter().map(|&x| x as i64).sum::<i64>()
            })
            .unwrap();
            assert_eq!(v, 499_500 + 1000 * round as i64);
        }
    })
    .join()
    .unwrap();
    let after = scratch_stats();
    assert_eq!(
        after.fresh_allocations - before.fresh_allocations,
        3,
        "fresh buffer each call"
    );
    assert_eq!(after.reuses, before.reuses);
    assert_eq!(after.parks, before.parks);
    assert_eq!(after.declined_parks - before.declined_parks, 3);
    assert_eq!(after.parked_bytes, before.parked_bytes, "nothing parked");
}

#[test]
fn parked_buffer_is_reused_and_grown_within_budget() {
    let _serial = crate::serial();
    configure(None, Some(4 * MIB));
    let before = scratch_stats();
    let base = before.parked_bytes;
    std::thread::spawn(move || {
        try_with_scratch_f32(1024, |s| s.fill(1.0)).unwrap();
        try_with_scratch_f32(512, |s| assert_eq!(s.len(), 512)).unwrap(); // reuse (smaller)
        try_with_scratch_f32(1024, |s| assert_eq!(s.len(), 1024)).unwrap(); // reuse (same)
        try_with_scratch_f32(4096, |s| assert_eq!(s.len(), 4096)).unwrap(); // grow: fresh, replaces the parked one
        try_with_scratch_f32(4096, |_| ()).unwrap(); // reuse
                                                     // Nested use while the parked buffer is lent out gets its own buffer.
        try_with_scratch_f32(16, |outer| {
            try_with_scratch_f32(16, |inner| {
                inner.fill(2.0);
                outer.fill(3.0);
            })
            .unwrap()
        })
        .unwrap();
        let s = scratch_stats();
        assert_eq!(
            s.parked_bytes,
            base + 4096 * 4,
            "only the largest buffer stays parked"
        );
    })
    .join()
    .unwrap();
    let after = scratch_stats();
    assert_eq!(after.reuses - before.reuses, 4);
    assert_eq!(after.fresh_allocations - before.fresh_allocations, 3);
    assert_eq!(
        after.parked_bytes, before.parked_bytes,
        "released at thread exit"
    );
}

#[test]
fn fallible_scratch_declines_an_impossible_size_and_keeps_the_parked_buffer() {
    let _serial = crate::serial();
    configure(None, Some(4 * MIB));
    // Park a buffer, then ask for more than the address space holds: no call, no abort.
    try_with_scratch_f32(1024, |b| b.fill(1.0)).unwrap();
    let mut called = false;
    let r = try_with_scratch_f32(usize::MAX / 8, |_| called = true);
    assert!(r.is_none() && !called);
    // The parked buffer is still lent (reuse, not a fresh allocation).
    let before = scratch_stats();
    let got = try_with_scratch_f32(1024, |b| b.len());
    assert_eq!(got, Some(1024));
    assert_eq!(scratch_stats().fresh_allocations, before.fresh_allocations);
}
