//! AVX2 dequantizing kernel ([`super::dequant::DequantFn`]): a 64-byte chunk (four k of a
//! group, `pack`) is two ymm halves of 8 dword lanes; column block `b` (8 columns) is half
//! `b % 2`, shifted by `8j` for row `j` (and by 4 more for a 4-bit group's high nibbles,
//! `b >= 2`), masked, converted, then `(q - zp) * scale`: the scalar kernel's operations.

use std::arch::x86_64::*;

use super::dequant::BlockConsts;
use super::pack::{CHUNK_BYTES, CHUNK_K};

/// # Safety
/// The CPU must support AVX2. Every other contract is checked here (`codes` holds the rows'
/// chunks, every destination's rows lie inside `out`).
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn dequant(
    codes: &[u8],
    rows: usize,
    c: &BlockConsts,
    dst: &[Option<usize>; 4],
    ld: usize,
    bits8: bool,
    out: &mut [f32],
) {
    if rows == 0 {
        return;
    }
    let chunks = rows.div_ceil(CHUNK_K);
    assert!(codes.len() >= chunks * CHUNK_BYTES);
    let blocks = if bits8 { 2 } else { 4 };
    for at in dst.iter().take(blocks).flatten() {
        assert!(at + (rows - 1) * ld + 8 <= out.len());
    }
    let mask = _mm256_set1_epi32(if bits8 { 0xFF } else { 0x0F });
    // SAFETY: each load reads 8 floats of a 32-float array.
    let (zp, scale): ([__m256; 4], [__m256; 4]) = unsafe {
        (
            std::array::from_fn(|b| _mm256_loadu_ps(c.zp.as_ptr().add(8 * b))),
            std::array::from_fn(|b| _mm256_loadu_ps(c.scale.as_ptr().add(8 * b))),
        )
    };
    for ch in 0..chunks {
        // SAFETY: chunk `ch` lies in `codes` (asserted above); unaligned 32-byte loads.
        let v = unsafe {
            let base = codes.as_ptr().add(ch * CHUNK_BYTES);
            [
                _mm256_loadu_si256(base as *const __m256i),
                _mm256_loadu_si256(base.add(32) as *const __m256i),
            ]
        };
        for j in 0..CHUNK_K.min(rows - ch * CHUNK_K) {
            let r = ch * CHUNK_K + j;
            for (b, at) in dst.iter().enumerate().take(blocks) {
                let Some(at) = *at else { continue };
                let shift = 8 * j + if bits8 { 0 } else { 4 * (b / 2) };
                let q = _mm256_srl_epi32(v[b % 2], _mm_cvtsi32_si128(shift as i32));
                let q = _mm256_cvtepi32_ps(_mm256_and_si256(q, mask));
                let w = _mm256_mul_ps(_mm256_sub_ps(q, zp[b]), scale[b]);
                // SAFETY: row r < rows of this destination lies inside `out` (asserted above).
                unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(at + r * ld), w) };
            }
        }
    }
}
