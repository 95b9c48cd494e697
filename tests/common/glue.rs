// Shared helpers for the glue-op tests (norm, softmax, activation), included with `#[path] mod`;
// needs `rng` (tests/common/rng.rs) at the crate root.
#![allow(dead_code)]

use rcpu::kernels::isa::Isa;
use rcpu::runtime::par::{Dispatch, Par, ScopedThreads};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Three scoped threads: real concurrency for the chunked paths.
pub(crate) const THREE: ScopedThreads = ScopedThreads(3);

/// Counts task dispatches, to prove the parallel path was taken.
pub(crate) struct CountingPar(pub AtomicUsize);
impl Par for CountingPar {
    fn lanes(&self) -> usize {
        3
    }
    fn chunks(&self, kind: Dispatch, n: usize, f: &(dyn Fn(usize) + Sync)) {
        if kind == Dispatch::Task {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
        THREE.chunks(kind, n, f)
    }
}

/// The one seeded PRNG (`tests/common/rng.rs`, declared as `rng` at the crate root).
#[allow(unused_imports)] // not every glue test draws data
pub(crate) use crate::rng::Rng;

pub(crate) const ISAS: [Isa; 3] = [Isa::Scalar, Isa::Avx2, Isa::Avx512];
pub(crate) const COLS: [usize; 7] = [1, 3, 15, 16, 17, 100, 4096];

/// `got` vs the f64 reference: NaN where NaN, the same infinity where infinite, otherwise
/// `|got - want| <= atol + rtol * |want|`.
pub(crate) fn assert_close(what: &str, got: &[f32], want: &[f64], rtol: f64, atol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let g = g as f64;
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= atol + rtol * w.abs()
        };
        assert!(ok, "{what}: element {i}: got {g:e}, want {w:e}");
    }
}

/// `a` and `b` bit-identical (NaN payloads aside).
pub(crate) fn assert_same(what: &str, a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "{what}: length");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
            "{what}: element {i}: {x:e} vs {y:e}"
        );
    }
}

/// erfc in f64: Taylor series of erf below 2.5, a continued fraction above.
pub(crate) fn erfc64(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x < 0.0 {
        return 2.0 - erfc64(-x);
    }
    if x < 2.5 {
        let mut term = x;
        let mut sum = x;
        let mut k = 0.0f64;
        while term.abs() > 1e-20 * sum.abs() {
            k += 1.0;
            term *= -x * x / k;
            sum += term / (2.0 * k + 1.0);
        }
        return 1.0 - sum * 2.0 / std::f64::consts::PI.sqrt();
    }
    if x.is_infinite() {
        return 0.0;
    }
    let mut t = x;
    for k in (1..=80).rev() {
        t = x + (k as f64 / 2.0) / t;
    }
    (-x * x).exp() / std::f64::consts::PI.sqrt() / t
}
