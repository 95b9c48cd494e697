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
/// Full blocks (whose length is a multiple of 16, as every valid block size is) use AVX-512,
/// [`BATCH`] blocks at a time; a partial last block uses the scalar code.
///
/// A batch takes each block's largest magnitude as a 16-lane running maximum, then folds the
/// batch's 16 maxima vectors into one vector holding every block's maximum (`fold16`), so the
/// scales, the multipliers and their stores are one vector operation for the batch; the codes'
/// sums fold the same way. A block at a time, the two horizontal reductions and the scalar
/// division made a K = 4864 row a chain of 152 dependent reductions (issue 17: about 1.5 us of
/// the caller's serial work before every decode call of the down projection).
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
    // Blocks the vector code takes: whole blocks of a multiple of 16 values.
    let full = if bs != 0 && bs.is_multiple_of(16) {
        k / bs
    } else {
        0
    };
    let mut b = 0;
    while b < full {
        let n = BATCH.min(full - b);
        let src = &row[b * bs..(b + n) * bs];
        let dst = &mut q[b * bs..(b + n) * bs];
        // SAFETY: the CPU has AVX-512 F/BW/DQ/VL (this function's contract); `src` and `dst`
        // hold `n` whole blocks of `bs` values, `qscale` and `qsum` at least `b + n` entries.
        unsafe { quantize_batch(src, bs, n, dst, &mut qscale[b..b + n], &mut qsum[b..b + n]) };
        b += n;
    }
    for b in full..kb {
        let src = &row[b * bs..((b + 1) * bs).min(k)];
        (qscale[b], qsum[b]) = quantize_block(src, &mut q[b * bs..b * bs + src.len()]);
    }
}

/// Blocks one [`quantize_batch`] takes: one per lane of a 16-lane vector.
const BATCH: usize = 16;

/// Quantises `n <= BATCH` whole blocks of `bs` values (a multiple of 16): `src` and `dst` hold
/// `n * bs` values, `qscale` and `qsum` `n` entries.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/DQ/VL.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
unsafe fn quantize_batch(
    src: &[f32],
    bs: usize,
    n: usize,
    dst: &mut [i8],
    qscale: &mut [f32],
    qsum: &mut [i32],
) {
    assert!(n <= BATCH && bs.is_multiple_of(16));
    assert!(src.len() == n * bs && dst.len() == n * bs && qscale.len() == n && qsum.len() == n);
    let sp = src.as_ptr();
    // Block j's running maximum magnitude (f32 bits, in the integer type `fold16` takes).
    let mut mx = [_mm512_setzero_si512(); BATCH];
    // Lanes where some block of the batch held a NaN.
    let mut nan: __mmask16 = 0;
    for (j, m) in mx.iter_mut().enumerate().take(n) {
        for i in (j * bs..(j + 1) * bs).step_by(16) {
            // SAFETY: i + 16 <= n * bs = src.len().
            let v = unsafe { _mm512_loadu_ps(sp.add(i)) };
            nan |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
            // vmaxps returns its second operand when either is NaN: with the running maximum
            // second, a NaN element leaves it unchanged, as `f32::max` does in the scalar
            // reference; the maxima are therefore never NaN, which `fold16` relies on.
            let running = _mm512_castsi512_ps(*m);
            *m = _mm512_castps_si512(_mm512_max_ps(_mm512_abs_ps(v), running));
        }
    }
    // Lane j: block j's largest magnitude (lanes from n on: 0).
    let amax = _mm512_castsi512_ps(fold16(mx, Fold::MaxF32));
    let c127 = _mm512_set1_ps(127.0);
    // As the scalar reference: scale = amax / 127, multiplier 127 / amax, or 0 for amax = 0.
    let scale = _mm512_div_ps(amax, c127);
    let inv = _mm512_maskz_div_ps(
        _mm512_cmp_ps_mask::<_CMP_GT_OQ>(amax, _mm512_setzero_ps()),
        c127,
        amax,
    );
    let lanes: __mmask16 = if n == BATCH { !0 } else { (1u16 << n) - 1 };
    // SAFETY: the mask enables lanes 0..n, within qscale (n entries).
    unsafe { _mm512_mask_storeu_ps(qscale.as_mut_ptr(), lanes, scale) };
    let (lo, hi) = (_mm512_set1_epi32(-127), _mm512_set1_epi32(127));
    let (flo, fhi) = (_mm512_set1_ps(-127.0), _mm512_set1_ps(127.0));
    // Every value finite and every multiplier finite: each product is within 127 * (1 + 2^-23)
    // of 0 (|x| <= amax, inv = 127 / amax rounded), so rounding it gives -127..=127 with no
    // clamp, and no product is NaN: the clamps and the NaN mask below change nothing.
    let inf = _mm512_set1_ps(f32::INFINITY);
    let finite = nan == 0
        && _mm512_mask_cmp_ps_mask::<_CMP_LT_OQ>(lanes, amax, inf) == lanes
        && _mm512_mask_cmp_ps_mask::<_CMP_LT_OQ>(lanes, inv, inf) == lanes;
    let mut sums = [_mm512_setzero_si512(); BATCH];
    for (j, sum) in sums.iter_mut().enumerate().take(n) {
        let invj = _mm512_permutexvar_ps(_mm512_set1_epi32(j as i32), inv);
        for i in (j * bs..(j + 1) * bs).step_by(16) {
            // SAFETY: i + 16 <= n * bs = src.len().
            let v = _mm512_mul_ps(unsafe { _mm512_loadu_ps(sp.add(i)) }, invj);
            let x = if finite {
                _mm512_cvtps_epi32(v)
            } else {
                // As the scalar reference: NaN codes are 0 and the clamp happens in float
                // (cvtps would turn NaN and +-inf into i32::MIN before an integer clamp).
                let v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask::<_CMP_ORD_Q>(v, v), v);
                let v = _mm512_min_ps(_mm512_max_ps(v, flo), fhi);
                _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(v), lo), hi)
            };
            *sum = _mm512_add_epi32(*sum, x);
            // SAFETY: i + 16 <= n * bs = dst.len().
            unsafe {
                _mm_storeu_si128(
                    dst.as_mut_ptr().add(i) as *mut __m128i,
                    _mm512_cvtsepi32_epi8(x),
                )
            };
        }
    }
    let total = fold16(sums, Fold::AddI32);
    // SAFETY: the mask enables lanes 0..n, within qsum (n entries).
    unsafe { _mm512_mask_storeu_epi32(qsum.as_mut_ptr(), lanes, total) };
}

/// How [`fold16`] joins two values.
#[derive(Clone, Copy)]
enum Fold {
    /// `vmaxps` on the f32 bits (exact in any order for values without NaN).
    MaxF32,
    /// `vpaddd` (exact in any order).
    AddI32,
}

/// Folds 16 vectors into one whose lane j is `op` over the 16 lanes of `v[j]`: four rounds, each
/// combining pairs of vectors and halving the lanes each vector's partial results take (a pair
/// of `vpermt2d` gathers the lower and the upper halves of every segment, `op` joins them), so
/// vector j's lanes stay in one segment and the segments stay in order.
/// (A closure for `op` would not inherit this function's target features: every intrinsic in
/// it would become a call.)
#[inline]
#[target_feature(enable = "avx512f")]
fn fold16(v: [__m512i; 16], op: Fold) -> __m512i {
    // Round r (segment width w = 16 >> r before it, h = w / 2 after): output lane p reads lane
    // (p / h) * w + p % h of the pair's first vector when p / h < 16 / w, else of its second
    // (index + 16); `hi` the same lanes + h.
    const fn idx(w: usize, upper: bool) -> [i32; 16] {
        let (h, c) = (w / 2, 16 / w);
        let mut out = [0i32; 16];
        let mut p = 0;
        while p < 16 {
            let (s, o) = (p / h, p % h);
            let lane = if s < c {
                s * w + o
            } else {
                16 + (s - c) * w + o
            };
            out[p] = (lane + if upper { h } else { 0 }) as i32;
            p += 1;
        }
        out
    }
    const IDX: [[[i32; 16]; 2]; 4] = [
        [idx(16, false), idx(16, true)],
        [idx(8, false), idx(8, true)],
        [idx(4, false), idx(4, true)],
        [idx(2, false), idx(2, true)],
    ];
    let mut cur = v;
    let mut len = 16;
    for ix in &IDX {
        // SAFETY: each index array is 16 i32 values (64 bytes), read unaligned.
        let (lo, hi) = unsafe {
            (
                _mm512_loadu_si512(ix[0].as_ptr() as *const _),
                _mm512_loadu_si512(ix[1].as_ptr() as *const _),
            )
        };
        for i in 0..len / 2 {
            let (a, b) = (cur[2 * i], cur[2 * i + 1]);
            let (x, y) = (
                _mm512_permutex2var_epi32(a, lo, b),
                _mm512_permutex2var_epi32(a, hi, b),
            );
            cur[i] = match op {
                Fold::MaxF32 => _mm512_castps_si512(_mm512_max_ps(
                    _mm512_castsi512_ps(x),
                    _mm512_castsi512_ps(y),
                )),
                Fold::AddI32 => _mm512_add_epi32(x, y),
            };
        }
        len /= 2;
    }
    cur[0]
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
