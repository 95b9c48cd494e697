//! Counters, the dispatch ledger and the stats JSON read through `RcpuEp_StatsJson`.

pub mod ledger;
pub mod step_times;

/// Everything rcpu can report, as one JSON document:
/// `{"version", "isa", "ledger": [...], "step_times": [...], "pools": [...], "memory": {...}}`.
pub fn stats_json() -> serde_json::Value {
    serde_json::json!({
        "version": crate::ep::VERSION,
        "isa": crate::kernels::isa::Isa::get().name(),
        "ledger": ledger::rows(),
        "step_times": step_times::rows(),
        "pools": crate::runtime::pool_stats(),
        "memory": crate::memory::stats(),
        "kernels": {
            "matmul_nbits_prepared_a_growths": crate::kernels::matmul_nbits::prepare_a::prepared_a_growths(),
            "matmul_nbits_decode_prefetch": decode_prefetch(),
        },
    })
}

/// The decode (M = 1) prefetch distance the process's tuner chose and how it got there
/// (`kernels::matmul_nbits::row1_tuner`): cumulative since the process started (a choice, not a
/// counter: [`reset`] leaves it).
fn decode_prefetch() -> serde_json::Value {
    let r = crate::kernels::matmul_nbits::row1_tuner::TUNER.report();
    serde_json::json!({
        "distance_bytes": r.distance_bytes,
        "decode_calls": r.decode_calls,
        "trials": r.trials,
        "switches": r.switches,
        "last_ratio": r.last_ratio,
    })
}

/// Writes the stats JSON into `buf` (NUL-terminated, truncated to fit) and returns the full
/// length in bytes without the NUL, so a caller can retry with a larger buffer.
pub fn write_stats(buf: &mut [u8]) -> usize {
    let s = stats_json().to_string();
    let bytes = s.as_bytes();
    if !buf.is_empty() {
        let n = bytes.len().min(buf.len() - 1);
        buf[..n].copy_from_slice(&bytes[..n]);
        buf[n] = 0;
    }
    bytes.len()
}

/// Clears the ledger, the step times and every pool's counters.
pub fn reset() {
    ledger::reset();
    step_times::reset();
    crate::runtime::reset_counters();
}
