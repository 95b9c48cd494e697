//! AVX-512 per-block int8 quantisation of A rows (accuracy level 4), bit-identical to the scalar
//! [`super::prepare_a::quantize_row_scalar`]: the same `amax / 127` scale and `127 / amax`
//! multiplier, and `vcvtps2dq` under the default rounding mode (round to nearest even) in place of
//! the scalar add-and-subtract of 1.5 * 2^23, which rounds the same way for |y| < 2^22.

// AVX-512 intrinsics are stable since Rust 1.89 (see tile_avx512.rs).
#![allow(clippy::incompatible_msrv)]

use std::arch::x86_64::*;

use super::prepare_a::quantize_block;

/// Quantises one row of `k = row.len()` values in blocks of `bs` into `q` (at least
/// `kb * bs` bytes; bytes past `k` are left as they are), `qscale` and `qsum` (`kb` each).
/// Full blocks (whose length is a multiple of 16, as every valid block size is) use AVX-512;
/// a partial last block uses the scalar code.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/DQ/VL.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
pub(crate) unsafe fn quantize_row(
    row: &[f32],
    bs: usize,
    q: &mut [i8],
    qscale: &mut [f32],
    qsum: &mut [i32],
) {
    let k = row.len();
    let kb = k.div_ceil(bs);
    assert!(q.len() >= kb * bs && qscale.len() >= kb && qsum.len() >= kb);
    for b in 0..kb {
        let src = &row[b * bs..((b + 1) * bs).min(k)];
        let dst = &mut q[b * bs..b * bs + src.len()];
        if src.len() != bs || !bs.is_multiple_of(16) {
            (qscale[b], qsum[b]) = quantize_block(src, dst);
            continue;
        }
        let sp = src.as_ptr();
        let mut amax = _mm512_setzero_ps();
        for i in (0..bs).step_by(16) {
            // SAFETY: i + 16 <= bs = src.len().
            let v = unsafe { _mm512_loadu_ps(sp.add(i)) };
            // vmaxps returns its second operand when either is NaN: with `amax` second, a
            // NaN element leaves it unchanged, as `f32::max` does in the scalar reference.
            amax = _mm512_max_ps(_mm512_abs_ps(v), amax);
        }
        let amax = _mm512_reduce_max_ps(amax);
        let scale = amax / 127.0;
        let inv = _mm512_set1_ps(if amax > 0.0 { 127.0 / amax } else { 0.0 });
        let (lo, hi) = (_mm512_set1_epi32(-127), _mm512_set1_epi32(127));
        let (flo, fhi) = (_mm512_set1_ps(-127.0), _mm512_set1_ps(127.0));
        let mut sum = _mm512_setzero_si512();
        for i in (0..bs).step_by(16) {
            // SAFETY: i + 16 <= bs = src.len() = dst.len().
            unsafe {
                let v = _mm512_mul_ps(_mm512_loadu_ps(sp.add(i)), inv);
                // As the scalar reference: NaN codes are 0 and the clamp happens in float
                // (cvtps would turn NaN and +-inf into i32::MIN before an integer clamp).
                let v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask::<_CMP_ORD_Q>(v, v), v);
                let v = _mm512_min_ps(_mm512_max_ps(v, flo), fhi);
                let x = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(v), lo), hi);
                sum = _mm512_add_epi32(sum, x);
                _mm_storeu_si128(
                    dst.as_mut_ptr().add(i) as *mut __m128i,
                    _mm512_cvtsepi32_epi8(x),
                );
            }
        }
        qscale[b] = scale;
        qsum[b] = _mm512_reduce_add_epi32(sum);
    }
}

/// Largest |x| of `v` as [`super::nonfinite::abs_max`] computes it (the maximum of the
/// magnitude bits, so +inf or NaN when `v` holds one), bit-identical: an integer max is exact
/// in any order. Four 16-lane running maxima and a masked last load. The baseline-target fold
/// (SSE2 has no unsigned max) made the two scans of a K=4864 row about 2.6 us per call, more
/// than the int8 quantiser and twice the VNNI tile on the same row's L2-resident group (issue
/// 17, perf of `matmul_nbits_stream --sweep 4864 32 1 100000 1`).
///
/// # Safety
/// The CPU must support AVX-512 F.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn abs_max(v: &[f32]) -> f32 {
    let mag = _mm512_set1_epi32(0x7fff_ffff);
    let p = v.as_ptr() as *const i32;
    let mut m = [_mm512_setzero_si512(); 4];
    let mut i = 0;
    while i + 64 <= v.len() {
        for (j, mj) in m.iter_mut().enumerate() {
            // SAFETY: i + 16 * j + 16 <= i + 64 <= v.len().
            let x = unsafe { _mm512_loadu_si512(p.add(i + 16 * j) as *const _) };
            *mj = _mm512_max_epu32(*mj, _mm512_and_si512(x, mag));
        }
        i += 64;
    }
    while i < v.len() {
        let n = (v.len() - i).min(16);
        let k: __mmask16 = if n == 16 { !0 } else { (1u16 << n) - 1 };
        // SAFETY: the mask enables only lanes i..i + n <= v.len(); masked-off lanes are not
        // read (no fault past the slice).
        let x = unsafe { _mm512_maskz_loadu_epi32(k, p.add(i)) };
        m[0] = _mm512_max_epu32(m[0], _mm512_and_si512(x, mag));
        i += n;
    }
    let m01 = _mm512_max_epu32(m[0], m[1]);
    let m23 = _mm512_max_epu32(m[2], m[3]);
    f32::from_bits(_mm512_reduce_max_epu32(_mm512_max_epu32(m01, m23)))
}
