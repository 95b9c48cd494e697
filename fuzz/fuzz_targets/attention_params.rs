//! Fuzz target: GroupQueryAttention / RotaryEmbedding parameter checks and kernels (see
//! ../README.md). The property lives in tests/common/attention_fuzz.rs, shared with the stable
//! smoke test tests/kernels/fuzz_attention_smoke.rs; here the draws come from the fuzzer's bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/common/attention_fuzz.rs"]
mod attention_fuzz;
use attention_fuzz::{gqa_case, rotary_case, Draw};

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

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let mut d = Bytes(rest);
    if which % 2 == 0 {
        gqa_case(&mut d);
    } else {
        rotary_case(&mut d);
    }
});
