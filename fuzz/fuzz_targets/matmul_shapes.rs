//! Fuzz target: MatMul / QLinearMatMul shape checking and planning (see ../README.md). The
//! property lives in tests/common/matmul_shapes_fuzz.rs, shared with the stable smoke test
//! tests/serial/fuzz_matmul_shapes_smoke.rs; here the draws come from the fuzzer's bytes. Run with
//! `-malloc_limit_mb=64` so an allocation sized by the shapes (planning once listed 2^40
//! offsets) is a finding.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/common/matmul_shapes_fuzz.rs"]
mod matmul_shapes_fuzz;
use matmul_shapes_fuzz::{property, AllocProbe, Draw};

/// Draws 8 bytes at a time from the input, zeros once it runs out.
struct Bytes<'a>(&'a [u8]);

impl Draw for Bytes<'_> {
    fn next(&mut self) -> u64 {
        let mut v = [0u8; 8];
        let n = self.0.len().min(8);
        v[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        u64::from_le_bytes(v)
    }
}

/// libFuzzer's `-malloc_limit_mb` bounds allocations here.
struct NoProbe;

impl AllocProbe for NoProbe {
    fn reset(&self) {}
    fn largest(&self) -> usize {
        0
    }
}

fuzz_target!(|data: &[u8]| {
    property(&mut Bytes(data), &NoProbe);
});
