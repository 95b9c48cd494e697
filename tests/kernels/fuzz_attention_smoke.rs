//! The property of the `fuzz/` target `attention_params` (GroupQueryAttention and
//! RotaryEmbedding parameter checks, then the kernels), run on stable as a bounded, deterministic
//! test: a few thousand fixed-seed xorshift cases. Nothing may panic, an accepted GQA call's
//! present buffer stays within past + new rows, and the generator reaches the kernels.

use crate::attention_fuzz;
use attention_fuzz::{gqa_case, rotary_case, Draw};

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::rng;
use rng::Rng;

impl Draw for Rng {
    fn next(&mut self) -> u64 {
        self.next_u64()
    }
}

fn run(seed: u64, cases: usize, case: fn(&mut Rng) -> bool) -> usize {
    let mut ran = 0;
    for i in 0..cases {
        let mut d = Rng(seed
            .wrapping_add(i as u64)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            | 1);
        match catch_unwind(AssertUnwindSafe(|| case(&mut d))) {
            Ok(true) => ran += 1,
            Ok(false) => {}
            Err(_) => panic!("case {i} (seed {seed:#x}) panicked"),
        }
    }
    ran
}

#[test]
fn gqa_parameters_never_panic() {
    let ran = run(0x6a7_0001, 20_000, gqa_case);
    println!("GQA: {ran} of 20000 cases ran the kernels");
    assert!(ran > 300, "only {ran} cases reached the kernels");
}

#[test]
fn rotary_parameters_never_panic() {
    let ran = run(0x7e7_0002, 20_000, rotary_case);
    println!("RotaryEmbedding: {ran} of 20000 cases ran the kernel");
    assert!(ran > 300, "only {ran} cases reached the kernel");
}
