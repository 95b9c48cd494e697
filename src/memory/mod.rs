//! The process-wide memory governors and the caches they govern.
//!
//! Two governors, both process-wide ([`weights`], [`scratch_governor`]):
//! - **weights**: bounds the [`GovernedWeightCache`] of prepacked weights ([`weight_cache`]). Default budget:
//!   50% of `MemAvailable` from `/proc/meminfo` at first use; [`FALLBACK_WEIGHT_BUDGET`] (1 GiB) if that is
//!   unreadable.
//! - **scratch**: bounds what kernels park per thread between calls, summed over all threads: the
//!   scratch buffers of [`scratch`] (packed A/B panels of gemm and qgemm, MatMulNBits' packed
//!   weight groups, attention work buffers), MatMulNBits' prepared A, and the intermediate-value
//!   buffers fused partitions keep between runs ([`ValuePool`]). Default budget:
//!   min(64 MiB, 1% of `MemAvailable`); [`FALLBACK_SCRATCH_BUDGET`] (16 MiB) if `/proc/meminfo`
//!   is unreadable.
//!
//! Budgets are process-wide, so sessions share them. Policy when sessions pass different budgets
//! ([`configure`], from the `weight_cache_mb` / `scratch_cache_mb` provider options): **the last
//! configured value wins** for new reservations; existing grants are kept (a lower budget does not evict
//! anything, it declines new reservations until enough is released).
//!
//! Packed weights live in the process-wide [`weight_arena`] (huge-page regions shared by many
//! weights); each weight's grant is settled to the bytes it takes there, and the arena's slack
//! (under 2 MiB per live region, plus dropped pieces whose region still lives) shows in its stats.
//! A packed weight read from a context file lives in a read-only file mapping instead
//! ([`WeightBytes`]); the cache adopts it at no charge ([`GovernedWeightCache::get_or_adopt`]):
//! its pages are page cache the kernel can drop and read again, not memory the budget governs.
//!
//! Every decline has a correct slower path: the weight cache returns `None` (compute from the original
//! weight), scratch frees an unparked buffer after use (allocate per call), a value pool frees what
//! it cannot keep at the end of a run (the next run allocates it again).

mod aligned;
mod constant_copy;
mod content_hash;
mod governor;
mod key_digest;
pub mod scratch;
mod try_alloc;
mod value_pool;
mod weight_arena;
mod weight_bytes;
mod weight_cache;

pub use aligned::{AlignedBuf, HUGE_PAGE_MIN_BYTES};
pub use constant_copy::{constant_copy_stats, ConstantBytes, ConstantCopy, ConstantCopyStats};
pub use content_hash::{content_hash, params_hash};
pub use governor::{Governor, GovernorRef, Grant, OverBudget, Reservation};
pub use key_digest::KeyDigest;
pub use scratch::{
    scratch_error, scratch_stats, try_with_scratch_f32, try_with_scratch_i32, try_with_scratch_u16,
    try_with_scratch_u8, ScratchStats, Shortfall,
};
pub use try_alloc::{try_copy, try_vec, AllocError};
pub use value_pool::{value_pool_stats, ValuePool, ValuePoolStats};
pub use weight_arena::{
    weight_arena, ArenaBuf, ArenaStats, WeightArena, ALIGN as ARENA_ALIGN, OWN_REGION_MIN_BYTES,
    REGION_BYTES,
};
pub use weight_bytes::WeightBytes;
pub use weight_cache::{CachedWeight, GovernedWeightCache, WeightKey, KNOWN_WEIGHT_OPS};

use std::sync::LazyLock;

/// Weight budget when `/proc/meminfo` is unreadable.
pub const FALLBACK_WEIGHT_BUDGET: u64 = 1 << 30;
/// Scratch budget when `/proc/meminfo` is unreadable.
pub const FALLBACK_SCRATCH_BUDGET: u64 = 16 << 20;
/// Upper bound of the default scratch budget.
pub const MAX_DEFAULT_SCRATCH_BUDGET: u64 = 64 << 20;

/// `MemAvailable` in bytes from `/proc/meminfo`, if readable.
pub fn mem_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&text)
}

fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let mut it = line["MemAvailable:".len()..].split_whitespace();
    let n: u64 = it.next()?.parse().ok()?;
    match it.next() {
        Some("kB") | None => n.checked_mul(1024),
        Some(_) => None,
    }
}

/// Default weight budget: 50% of `MemAvailable` (or [`FALLBACK_WEIGHT_BUDGET`]).
pub fn default_weight_budget() -> u64 {
    mem_available_bytes().map_or(FALLBACK_WEIGHT_BUDGET, |m| m / 2)
}

/// Default scratch budget: min(64 MiB, 1% of `MemAvailable`) (or [`FALLBACK_SCRATCH_BUDGET`]).
pub fn default_scratch_budget() -> u64 {
    mem_available_bytes().map_or(FALLBACK_SCRATCH_BUDGET, |m| {
        (m / 100).min(MAX_DEFAULT_SCRATCH_BUDGET)
    })
}

static WEIGHTS: LazyLock<Governor> =
    LazyLock::new(|| Governor::named("weights", default_weight_budget()));
static SCRATCH: LazyLock<Governor> =
    LazyLock::new(|| Governor::named("scratch", default_scratch_budget()));
static WEIGHT_CACHE: LazyLock<GovernedWeightCache> =
    LazyLock::new(|| GovernedWeightCache::new(weights()));

/// Adds `bytes` to a statistics gauge and raises its high-water mark to the new value (Relaxed:
/// figures for the stats JSON only; no budget is enforced through them).
pub(crate) fn gauge_add(
    live: &std::sync::atomic::AtomicU64,
    peak: &std::sync::atomic::AtomicU64,
    bytes: u64,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let now = live.fetch_add(bytes, Relaxed) + bytes;
    peak.fetch_max(now, Relaxed);
}

/// The process-wide governor of prepacked weights.
pub fn weights() -> &'static Governor {
    &WEIGHTS
}

/// The process-wide governor of what kernels park per thread between calls (scratch buffers,
/// prepared A).
pub fn scratch_governor() -> &'static Governor {
    &SCRATCH
}

/// The process-wide weight cache, drawing on [`weights`].
pub fn weight_cache() -> &'static GovernedWeightCache {
    &WEIGHT_CACHE
}

/// Set the process-wide budgets; `None` keeps the current value. The last configured value wins for new
/// reservations; existing grants are kept.
pub fn configure(weight_budget_bytes: Option<u64>, scratch_budget_bytes: Option<u64>) {
    if let Some(b) = weight_budget_bytes {
        weights().set_budget(b);
    }
    if let Some(b) = scratch_budget_bytes {
        scratch_governor().set_budget(b);
    }
}

/// Memory figures for the stats JSON. `scratch` holds the scratch governor's figures (budget,
/// live bytes, grants, declines) and the scratch counters (reuses, parks, ...) side by side.
pub fn stats() -> serde_json::Value {
    let mut scratch = scratch_governor().stats();
    if let (Some(s), Ok(serde_json::Value::Object(counters))) = (
        scratch.as_object_mut(),
        serde_json::to_value(scratch_stats()),
    ) {
        s.extend(counters);
    }
    serde_json::json!({
        "weights": weights().stats(),
        "weight_cache": weight_cache().stats(),
        "weight_arena": weight_arena().stats_json(),
        "scratch": scratch,
        "fused_values": value_pool_stats(),
        "fused_constants": constant_copy_stats(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mem_available() {
        let t = "MemTotal:       16000000 kB\nMemFree:  1 kB\nMemAvailable:    8000000 kB\n";
        assert_eq!(parse_mem_available(t), Some(8_000_000 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 5 kB\n"), None);
    }
}
