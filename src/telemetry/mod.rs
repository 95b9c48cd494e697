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
        },
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
