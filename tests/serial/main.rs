//! Tests of process-wide settings and counters: the scratch and prepared-A counters, the
//! scratch budget, the weight arena, the prefetch distance, the count of worker threads
//! and the largest allocation (this binary's global allocator counts it). One binary, one module
//! per former `tests/<name>.rs` (`cargo test --release --test serial gemm_scratch::` runs one of
//! them); every test holds [`serial`] for its whole run, so no two of them overlap and each
//! starts from the process defaults.
//!
//! Still in binaries of their own: `memory_globals` (reads the budgets' defaults before any
//! configuration) and `log_bridge_host` (sets the process's one `log` logger).

use std::sync::{Mutex, MutexGuard};

#[path = "../common/lanes.rs"]
mod lanes_common;
#[path = "../common/matmul_shapes_fuzz.rs"]
mod matmul_shapes_fuzz;
#[path = "../common/nbits.rs"]
mod nbits_common;
#[path = "../common/proc.rs"]
mod proc;
#[path = "../common/qgemm.rs"]
mod qgemm_common;
#[path = "../common/rng.rs"]
mod rng;
#[path = "../common/smaps.rs"]
mod smaps;

mod fuzz_matmul_shapes_smoke;
mod gemm_scratch;
mod matmul_nbits_prefetch;
mod matmul_nbits_scratch;
mod memory_scratch;
mod memory_weight_arena;
mod qgemm_scratch;
mod runtime_shutdown;

/// Runs the calling test alone in this process: held until the guard drops (a failed test's
/// poison is cleared). On entry it puts back what the tests here change: the default
/// scratch budget, no weight-arena mapping limit, the default prefetch distances. On drop it
/// releases the scratch the test parked on its own thread before it lets the next test in: the
/// harness thread's buffers would otherwise go back at that thread's exit, which can fall inside
/// the next test and move the process-wide `parked_bytes` it measures.
pub(crate) fn serial() -> Serial {
    static ONE: Mutex<()> = Mutex::new(());
    let guard = ONE.lock().unwrap_or_else(|e| e.into_inner());
    rcpu::memory::configure(None, Some(rcpu::memory::default_scratch_budget()));
    rcpu::memory::weight_arena().set_mapped_limit(None);
    rcpu::kernels::matmul_nbits::prefetch::reset_prefetch();
    Serial { _lock: guard }
}

/// The guard [`serial`] hands out.
pub(crate) struct Serial {
    _lock: MutexGuard<'static, ()>,
}

impl Drop for Serial {
    fn drop(&mut self) {
        // Runs before the field (the lock) drops.
        rcpu::memory::scratch::release_thread_scratch();
    }
}
