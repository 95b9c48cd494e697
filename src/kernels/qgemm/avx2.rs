//! AVX2 kernels (also serve AVX-512 CPUs without VNNI): the tile widens bytes to int16 and
//! multiplies with `vpmaddwd`, which is exact (no `vpmaddubsw` int16 saturation); row sums with
//! `vpsadbw`.
//!
//! 16 packed bytes = 4 columns x 4 k, widened to 16 int16 lanes, times A's 4 bytes widened and
//! repeated; `vpmaddwd` leaves two partial sums per column (k0 + k1, k2 + k3), added at the end.

use std::arch::x86_64::*;

use super::pack::k_padded;
use super::{MR, PANEL};
use crate::kernels::simd::{simd_entry, Avx2};

/// 16 bytes widened to int16: sign-extended when `signed`, else zero-extended.
#[inline]
#[target_feature(enable = "avx2")]
fn widen(v: __m128i, signed: bool) -> __m256i {
    if signed {
        _mm256_cvtepi8_epi16(v)
    } else {
        _mm256_cvtepu8_epi16(v)
    }
}

/// One k-group: the 16 columns of group `zi` against one A dword per row.
///
/// # Safety
/// AVX2; k-group `g` of the panel (`4 * width` bytes at `4 * width * g`) is readable.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn step<const R: usize, const AS: bool>(
    acc: &mut [[__m256i; 4]; R],
    panel: *const u8,
    width: usize,
    zi: usize,
    g: usize,
    dwords: [i32; R],
) {
    // SAFETY: group g, columns 16 zi .. 16 zi + 16: 64 bytes inside the panel.
    let wp = unsafe { panel.add(g * 4 * width + zi * 64) };
    let mut w = [_mm256_setzero_si256(); 4];
    for (q, wq) in w.iter_mut().enumerate() {
        // SAFETY: 16 bytes at 16q of the 64 above. B is stored uint8 when A is int8.
        *wq = widen(
            unsafe { _mm_loadu_si128(wp.add(16 * q) as *const __m128i) },
            !AS,
        );
    }
    for (acc_r, &d) in acc.iter_mut().zip(&dwords) {
        let av = widen(_mm_set1_epi32(d), AS);
        for (aq, wq) in acc_r.iter_mut().zip(&w) {
            *aq = _mm256_add_epi32(*aq, _mm256_madd_epi16(*wq, av));
        }
    }
}

/// R rows x the 16 columns of group `zi` of the panel. `AS`: A is int8 (B stored uint8).
///
/// # Safety
/// AVX2; `a` readable for `(R - 1) * lda + k` bytes; `panel` for `k_padded(k) * width` bytes,
/// `zi < width / 16`; `r0 + R <= MR`.
#[inline]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn rows<const R: usize, const AS: bool>(
    a: *const u8,
    lda: usize,
    k: usize,
    panel: *const u8,
    width: usize,
    zi: usize,
    r0: usize,
    out: &mut [[i32; PANEL]; MR],
) {
    let mut acc = [[_mm256_setzero_si256(); 4]; R];
    let k4 = k / 4;
    for g in 0..k4 {
        let mut d = [0i32; R];
        for (r, dr) in d.iter_mut().enumerate() {
            // SAFETY: bytes 4g .. 4g + 4 <= k of row r are readable.
            *dr = unsafe { (a.add(r * lda + 4 * g) as *const i32).read_unaligned() };
        }
        // SAFETY: group g < k_padded / 4 is inside the panel.
        unsafe { step::<R, AS>(&mut acc, panel, width, zi, g, d) };
    }
    let tail = k - 4 * k4;
    if tail > 0 {
        let mut d = [0i32; R];
        for (r, dr) in d.iter_mut().enumerate() {
            let mut t = [0u8; 4];
            for (j, tj) in t.iter_mut().enumerate().take(tail) {
                // SAFETY: 4 * k4 + j < k: inside row r.
                *tj = unsafe { *a.add(r * lda + 4 * k4 + j) };
            }
            *dr = i32::from_le_bytes(t);
        }
        // SAFETY: the last (padded) group is inside the panel.
        unsafe { step::<R, AS>(&mut acc, panel, width, zi, k4, d) };
    }
    for (r, acc_r) in acc.iter().enumerate() {
        for (q, aq) in acc_r.iter().enumerate() {
            let mut t = [0i32; 8];
            // SAFETY: t holds 8 int32.
            unsafe { _mm256_storeu_si256(t.as_mut_ptr() as *mut __m256i, *aq) };
            for c in 0..4 {
                out[r0 + r][zi * 16 + q * 4 + c] = t[2 * c].wrapping_add(t[2 * c + 1]);
            }
        }
    }
}

/// AVX2 [`super::TileFn`]: rows in pairs, one 16-column group at a time.
///
/// # Safety
/// The CPU must support AVX2.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn tile(
    a: &[u8],
    lda: usize,
    rows_n: usize,
    k: usize,
    panel: &[u8],
    width: usize,
    a_signed: bool,
    acc: &mut [[i32; PANEL]; MR],
) {
    assert!((1..=MR).contains(&rows_n) && width <= PANEL && width.is_multiple_of(16));
    assert!(a.len() >= (rows_n - 1) * lda + k && panel.len() >= k_padded(k) * width);
    let pp = panel.as_ptr();
    for zi in 0..width / 16 {
        let mut r0 = 0;
        while r0 < rows_n {
            // SAFETY: rows r0 .. r0 + 1 or 2 <= rows_n are readable (asserted); features are this
            // fn's contract.
            let ap = unsafe { a.as_ptr().add(r0 * lda) };
            // SAFETY: `rows`' contract: AVX2 (this fn's); `ap` has the rows taken (1 or 2, at most
            // rows_n - r0) of lda-strided length k (asserted above); `panel` covers
            // k_padded(k) * width (asserted); zi < width / 16; r0 + R <= rows_n <= MR.
            unsafe {
                match (rows_n - r0 >= 2, a_signed) {
                    (true, true) => rows::<2, true>(ap, lda, k, pp, width, zi, r0, acc),
                    (true, false) => rows::<2, false>(ap, lda, k, pp, width, zi, r0, acc),
                    (false, true) => rows::<1, true>(ap, lda, k, pp, width, zi, r0, acc),
                    (false, false) => rows::<1, false>(ap, lda, k, pp, width, zi, r0, acc),
                }
            }
            r0 += 2;
        }
    }
}

/// AVX2 [`super::RowSumFn`].
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn row_sum(a: &[u8], a_signed: bool) -> i32 {
    let flip = _mm256_set1_epi8(if a_signed { 0x80u8 as i8 } else { 0 });
    let zero = _mm256_setzero_si256();
    let mut acc = _mm256_setzero_si256();
    let chunks = a.len() / 32;
    for i in 0..chunks {
        // SAFETY: bytes 32i .. 32i + 32 are inside `a`.
        let v = unsafe { _mm256_loadu_si256(a.as_ptr().add(32 * i) as *const __m256i) };
        acc = _mm256_add_epi64(acc, _mm256_sad_epu8(_mm256_xor_si256(v, flip), zero));
    }
    let mut t = [0i64; 4];
    // SAFETY: t holds 4 int64.
    unsafe { _mm256_storeu_si256(t.as_mut_ptr() as *mut __m256i, acc) };
    let done = 32 * chunks;
    super::scalar::finish_row_sum(t.iter().sum(), done, &a[done..], a_signed)
}

// Table entries: each takes the AVX2 token from the caller's Level and runs its kernel under it
// ("avx2" is a feature of the AVX2 level; the kernels' only other contract is checked by their
// own asserts).
simd_entry!(pub(super) fn tile_entry(
    a: &[u8], lda: usize, rows_n: usize, k: usize, panel: &[u8], width: usize, a_signed: bool,
    acc: &mut [[i32; PANEL]; MR],
) = Avx2 => tile);
simd_entry!(pub(super) fn row_sum_entry(a: &[u8], a_signed: bool) -> i32 = Avx2 => row_sum);
