//! End-to-end harness: loads the real ONNX Runtime (libonnxruntime.so from the pinned wheel)
//! next to the rcpu plugin, builds models, runs both EPs on the same inputs and compares.

pub mod bench;
pub mod compare;
pub mod onnx;
pub mod ort;
pub mod paths;
/// The /proc readers of tests, examples and the bench (one source file, shared with `tests/`).
#[path = "../../tests/common/proc.rs"]
pub mod proc;
/// The one seeded PRNG of tests, examples and the bench (one source file, shared with `tests/`).
#[path = "../../tests/common/rng.rs"]
pub mod rng;
pub mod stats;
pub mod threads;

use std::sync::OnceLock;

pub use ort::{Data, Ort, Provider, Session, SessionSpec, Tensor};

/// The EP name rcpu registers.
pub const EP_NAME: &str = "RcpuExecutionProvider";
/// The registration name the harness uses.
pub const REG_NAME: &str = "rcpu";

/// The runtime with the plugin registered (once per process).
pub fn ort_with_rcpu() -> &'static Ort {
    static REG: OnceLock<()> = OnceLock::new();
    let ort = Ort::get();
    REG.get_or_init(|| {
        let p = paths::plugin().unwrap_or_else(|e| panic!("{e}"));
        ort.register(REG_NAME, &p)
            .unwrap_or_else(|e| panic!("registering {}: {e}", p.display()));
    });
    ort
}

/// Deterministic pseudo-random f32 in [-1, 1) (the one PRNG, [`rng::Rng`]).
pub fn rand_f32(n: usize, seed: u64) -> Vec<f32> {
    rng::Rng::seeded(seed).vec_f32(n, -1.0, 1.0)
}
