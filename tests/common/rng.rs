//! The one seeded PRNG of the tests, examples and rcpu-bench: xorshift64 (shifts 13, 7, 17).
//! Deterministic, no dependency, the same stream on every run and machine. Included with
//! `#[path] mod` by the test binaries that draw data and by `rcpu_e2e::rng`.
#![allow(dead_code, unreachable_pub)]

/// xorshift64 state. A zero state would stay zero: seed through [`Rng::seeded`] (or pass a
/// non-zero state to `Rng(..)`).
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The state for `seed` mixed with the odd constant `mix` (never zero).
    pub fn mixed(seed: u64, mix: u64) -> Rng {
        Rng(seed.wrapping_mul(mix) | 1)
    }

    /// The state for `seed` (golden-ratio mix), the usual entry point.
    pub fn seeded(seed: u64) -> Rng {
        Rng::mixed(seed, 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `0..n` (`n == 0` counts as 1).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// One element of `v` (non-empty).
    pub fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.below(v.len() as u64) as usize]
    }

    /// Uniform in [0, 1) with 24 bits.
    pub fn unit_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in [lo, hi).
    pub fn f32(&mut self, lo: f32, hi: f32) -> f32 {
        self.unit_f32() * (hi - lo) + lo
    }

    pub fn vec_f32(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.f32(lo, hi)).collect()
    }

    /// A byte (bits 32..40 of the next draw).
    pub fn byte(&mut self) -> u8 {
        (self.next_u64() >> 32) as u8
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.byte()).collect()
    }
}
