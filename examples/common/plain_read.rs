//! The plain read the streaming examples compare the int4 kernel with (`#[path =
//! "common/plain_read.rs"] mod plain_read;`): a sum of the buffer's words with the widest loads the
//! CPU has, so the read is bound by its loads, not its instructions (with 128-bit loads a
//! two-lane read of 280 MB took 22.8-24 GB/s on a 2-vCPU Emerald Rapids host that reads 32 GB/s
//! with 512-bit ones).
#![allow(dead_code)]

use rcpu::runtime::lanes::Lanes;
use rcpu::runtime::par::{Dispatch, Par};

/// The wrapping sum of `c`'s little-endian u64 words (a tail shorter than a word is left out).
pub(crate) fn sum(c: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked just above), all `sum_avx512` is compiled for.
            return unsafe { sum_avx512(c) };
        }
    }
    sum_words(c)
}

/// [`sum`] with four 512-bit accumulators over 256 bytes a step, the tail by [`sum_words`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn sum_avx512(c: &[u8]) -> u64 {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_setzero_si512(); 4];
    let mut steps = c.chunks_exact(256);
    for s in &mut steps {
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: `s` holds 256 bytes, so bytes 64k..64k+64 (k < 4) are inside it; unaligned.
            let v = unsafe { _mm512_loadu_si512(s.as_ptr().add(64 * k).cast()) };
            *a = _mm512_add_epi64(*a, v);
        }
    }
    let all = _mm512_add_epi64(
        _mm512_add_epi64(acc[0], acc[1]),
        _mm512_add_epi64(acc[2], acc[3]),
    );
    (_mm512_reduce_add_epi64(all) as u64).wrapping_add(sum_words(steps.remainder()))
}

/// The plain sum, eight independent accumulators.
fn sum_words(c: &[u8]) -> u64 {
    let mut acc = [0u64; 8];
    let mut words = c.chunks_exact(8);
    for (i, w) in (&mut words).enumerate() {
        let w = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
        acc[i % 8] = acc[i % 8].wrapping_add(w);
    }
    acc.iter().fold(0, |x, y| x.wrapping_add(*y))
}

/// Reads `parts` contiguous slices of `buf` in one dispatch.
pub(crate) fn read(lanes: &Lanes, buf: &[u8], parts: usize) {
    let size = buf.len().div_ceil(parts);
    lanes.chunks(Dispatch::Decode, parts, &|i| {
        std::hint::black_box(sum(&buf[i * size..((i + 1) * size).min(buf.len())]));
    });
}
