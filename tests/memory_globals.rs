//! The process-wide governors, weight cache and stats JSON. Own binary: it reconfigures global budgets.

use rcpu::memory::{
    configure, default_scratch_budget, mem_available_bytes, scratch_governor, stats, weight_cache,
    weights, WeightKey, MAX_DEFAULT_SCRATCH_BUDGET,
};

#[test]
fn defaults_configure_and_stats() {
    // Defaults, read before any configure.
    let (w, a) = (weights().budget_bytes(), scratch_governor().budget_bytes());
    if let Some(avail) = mem_available_bytes() {
        // MemAvailable drifts between reads: allow 25%.
        let half = avail / 2;
        assert!(
            w.abs_diff(half) <= half / 4,
            "weights {w} vs 50% of {avail}"
        );
    }
    assert!(a > 0 && a <= MAX_DEFAULT_SCRATCH_BUDGET);
    assert!(default_scratch_budget() <= MAX_DEFAULT_SCRATCH_BUDGET);

    // None keeps the current value; the last configured value wins.
    configure(Some(1 << 20), None);
    assert_eq!(
        (weights().budget_bytes(), scratch_governor().budget_bytes()),
        (1 << 20, a)
    );
    configure(Some(0), Some(123));
    assert_eq!(
        (weights().budget_bytes(), scratch_governor().budget_bytes()),
        (0, 123)
    );

    // Budget 0: the global cache declines, the caller takes the unpacked path.
    let key = WeightKey::new("Global", 0, b"weights");
    assert!(weight_cache()
        .get_or_pack(&key, 7, || vec![0u8; 7], |v| v.capacity())
        .is_none());
    configure(Some(1 << 20), None);
    let held = weight_cache()
        .get_or_pack(&key, 7, || vec![0u8; 7], |v| v.capacity())
        .expect("fits after raising the budget");

    let s = stats();
    assert_eq!(s["weights"]["budget_bytes"], 1 << 20);
    assert_eq!(s["weights"]["live_bytes"], 7);
    assert_eq!(s["weights"]["declines"], 1);
    // The scratch governor's figures and the scratch counters share one `scratch` object.
    assert_eq!(s["scratch"]["budget_bytes"], 123);
    assert!(
        s["scratch"]["live_bytes"].is_u64(),
        "scratch.live_bytes in {s}"
    );
    assert!(s.get("accumulators").is_none(), "no accumulators key: {s}");
    assert_eq!(s["weight_cache"]["entries"], 1);
    assert_eq!(s["weight_cache"]["misses"], 1);
    assert_eq!(s["weight_cache"]["declines"], 1);
    for k in [
        "reuses",
        "fresh_allocations",
        "parked_bytes",
        "declined_parks",
    ] {
        assert!(s["scratch"][k].is_u64(), "scratch.{k} in {s}");
    }
    drop(held);
    assert_eq!(stats()["weights"]["live_bytes"], 0);
}
