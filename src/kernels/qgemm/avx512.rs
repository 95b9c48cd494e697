//! AVX-512 VNNI kernels: the tile (`vpdpbusd`, up to 6 rows x 4 zmm of 16 columns, accumulators
//! in registers over all of K), the requantization (16 columns per step, bit-identical to the
//! scalar one) and row sums (`vpsadbw`).
//!
//! Each k-group of 4 is one dword of A per row, broadcast, against one zmm of packed B per 16
//! columns. `vpdpbusd` reads its first multiplicand as uint8 and the second as int8, so uint8 A
//! goes first and int8 A second (B is stored in the other sign, see `pack`).

// AVX-512 intrinsics are stable since Rust 1.89 (the workspace's rust-version).
use std::arch::x86_64::*;

use super::pack::k_padded;
use super::requant::{Cols, Requant};
use super::{MR, PANEL};
use crate::kernels::simd::{simd_entry, Avx512Vnni};

/// One vpdpbusd step; `AS`: A (in `av`) is int8.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn dot<const AS: bool>(acc: __m512i, av: __m512i, w: __m512i) -> __m512i {
    if AS {
        _mm512_dpbusd_epi32(acc, w, av)
    } else {
        _mm512_dpbusd_epi32(acc, av, w)
    }
}

/// R rows x Z zmm of columns.
///
/// # Safety
/// AVX-512 F/BW/VNNI; `a` readable for `(R - 1) * lda + k` bytes; `panel` for
/// `k_padded(k) * Z * 16` bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn rows<const R: usize, const Z: usize, const AS: bool>(
    a: *const u8,
    lda: usize,
    k: usize,
    panel: *const u8,
    out: &mut [[i32; PANEL]; MR],
) {
    let mut acc = [[_mm512_setzero_si512(); Z]; R];
    let stride = Z * 64;
    let k4 = k / 4;
    for g in 0..k4 {
        // SAFETY: group g of the panel is `stride` bytes at g * stride (< k_padded * width).
        let wp = unsafe { panel.add(g * stride) };
        let mut w = [_mm512_setzero_si512(); Z];
        for (z, wz) in w.iter_mut().enumerate() {
            // SAFETY: inside the group (z * 64 + 64 <= stride).
            *wz = unsafe { _mm512_loadu_si512(wp.add(z * 64) as *const _) };
        }
        for (r, acc_r) in acc.iter_mut().enumerate() {
            // SAFETY: bytes 4g .. 4g + 4 <= k of row r are readable (caller contract).
            let av = _mm512_set1_epi32(unsafe {
                (a.add(r * lda + 4 * g) as *const i32).read_unaligned()
            });
            for (accz, wz) in acc_r.iter_mut().zip(&w) {
                *accz = dot::<AS>(*accz, av, *wz);
            }
        }
    }
    let tail = k - 4 * k4;
    if tail > 0 {
        // SAFETY: the last (padded) group of the panel.
        let wp = unsafe { panel.add(k4 * stride) };
        for (r, acc_r) in acc.iter_mut().enumerate() {
            // The last k % 4 bytes of the row, zero padded (the padded B bytes are zero too).
            let mut t = [0u8; 4];
            for (j, tj) in t.iter_mut().enumerate().take(tail) {
                // SAFETY: 4 * k4 + j < k: inside row r.
                *tj = unsafe { *a.add(r * lda + 4 * k4 + j) };
            }
            let av = _mm512_set1_epi32(i32::from_le_bytes(t));
            for (z, accz) in acc_r.iter_mut().enumerate() {
                // SAFETY: inside the last group.
                let wz = unsafe { _mm512_loadu_si512(wp.add(z * 64) as *const _) };
                *accz = dot::<AS>(*accz, av, wz);
            }
        }
    }
    for (r, acc_r) in acc.iter().enumerate() {
        for (z, accz) in acc_r.iter().enumerate() {
            // SAFETY: out[r] holds PANEL >= Z * 16 int32.
            unsafe { _mm512_storeu_si512(out[r].as_mut_ptr().add(z * 16) as *mut _, *accz) };
        }
    }
}

macro_rules! by_rows_cols {
    ($as:literal, $rows:expr, $z:expr, $args:tt; $($r:literal),*) => {
        match $rows {
            $($r => match $z {
                1 => rows::<$r, 1, $as> $args,
                2 => rows::<$r, 2, $as> $args,
                3 => rows::<$r, 3, $as> $args,
                _ => rows::<$r, 4, $as> $args,
            },)*
            _ => unreachable!("rows must be 1..=MR"),
        }
    };
}

/// VNNI [`super::TileFn`].
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VNNI.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
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
    let z = width / 16;
    if z == 0 {
        return;
    }
    let (ap, pp) = (a.as_ptr(), panel.as_ptr());
    // SAFETY: sizes asserted above; features are this fn's contract.
    unsafe {
        if a_signed {
            by_rows_cols!(true, rows_n, z, (ap, lda, k, pp, acc); 1, 2, 3, 4, 5, 6)
        } else {
            by_rows_cols!(false, rows_n, z, (ap, lda, k, pp, acc); 1, 2, 3, 4, 5, 6)
        }
    }
}

/// AVX-512 [`super::RequantFn`]: the scalar steps, 16 columns at a time.
///
/// # Safety
/// The CPU must support AVX-512 F/BW.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn requant_row(
    acc: &[i32],
    colsum: &[i32],
    rowsum: i32,
    q: &Requant<'_>,
    c0: usize,
    out: &mut [u8],
) {
    let n = out.len();
    assert!(acc.len() >= n && colsum.len() >= n);
    if let Cols::Column(s) = q.scale {
        assert!(s.len() >= c0 + n);
    }
    if let Cols::Column(z) = q.zw {
        assert!(z.len() >= c0 + n);
    }
    let (lo, hi) = q.bounds();
    let (lo, hi) = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
    let za = _mm512_set1_epi32(q.za);
    let rs = _mm512_set1_epi32(rowsum);
    let kza = _mm512_set1_epi32((q.k as i32).wrapping_mul(q.za));
    let yzp = _mm512_set1_epi32(q.yzp);
    let mut j = 0;
    while j < n {
        let m: __mmask16 = if n - j >= 16 {
            0xFFFF
        } else {
            (1u16 << (n - j)) - 1
        };
        // SAFETY: masked loads/stores touch only lanes j .. j + popcount(m) <= n (asserted
        // lengths above; column params hold c0 + n values).
        unsafe {
            let v = _mm512_maskz_loadu_epi32(m, acc.as_ptr().add(j));
            let cs = _mm512_maskz_loadu_epi32(m, colsum.as_ptr().add(j));
            let zw = match q.zw {
                Cols::Tensor(z) => _mm512_set1_epi32(z),
                Cols::Column(z) => _mm512_maskz_loadu_epi32(m, z.as_ptr().add(c0 + j)),
            };
            let sc = match q.scale {
                Cols::Tensor(s) => _mm512_set1_ps(s),
                Cols::Column(s) => _mm512_maskz_loadu_ps(m, s.as_ptr().add(c0 + j)),
            };
            // acc - za * colsum - zw * rowsum + k * za * zw (wrapping int32).
            let v = _mm512_sub_epi32(v, _mm512_mullo_epi32(za, cs));
            let v = _mm512_sub_epi32(v, _mm512_mullo_epi32(zw, rs));
            let v = _mm512_add_epi32(v, _mm512_mullo_epi32(kza, zw));
            let f = _mm512_mul_ps(_mm512_cvtepi32_ps(v), sc);
            let f = _mm512_min_ps(_mm512_max_ps(f, lo), hi);
            let i =
                _mm512_cvt_roundps_epi32::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(f);
            let i = _mm512_add_epi32(i, yzp);
            _mm512_mask_cvtepi32_storeu_epi8(out.as_mut_ptr().add(j) as *mut _, m, i);
        }
        j += 16;
    }
}

/// AVX-512 [`super::RowSumFn`] (`vpsadbw` against zero sums 8 bytes per lane).
///
/// # Safety
/// The CPU must support AVX-512 F/BW.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn row_sum(a: &[u8], a_signed: bool) -> i32 {
    let flip = _mm512_set1_epi8(if a_signed { 0x80u8 as i8 } else { 0 });
    let zero = _mm512_setzero_si512();
    let mut acc = _mm512_setzero_si512();
    let chunks = a.len() / 64;
    for i in 0..chunks {
        // SAFETY: bytes 64i .. 64i + 64 are inside `a`.
        let v = unsafe { _mm512_loadu_si512(a.as_ptr().add(64 * i) as *const _) };
        acc = _mm512_add_epi64(acc, _mm512_sad_epu8(_mm512_xor_si512(v, flip), zero));
    }
    let done = 64 * chunks;
    super::scalar::finish_row_sum(_mm512_reduce_add_epi64(acc), done, &a[done..], a_signed)
}

// Table entries: each takes the VNNI level's token from the caller's Level and runs its kernel
// under it (every feature the kernels enable is one of that level's; their only other contract
// is their own asserts).
simd_entry!(pub(super) fn tile_entry(
    a: &[u8], lda: usize, rows_n: usize, k: usize, panel: &[u8], width: usize, a_signed: bool,
    acc: &mut [[i32; PANEL]; MR],
) = Avx512Vnni => tile);
simd_entry!(pub(super) fn requant_row_entry(
    acc: &[i32], colsum: &[i32], rowsum: i32, q: &Requant<'_>, c0: usize, out: &mut [u8],
) = Avx512Vnni => requant_row);
simd_entry!(pub(super) fn row_sum_entry(a: &[u8], a_signed: bool) -> i32 = Avx512Vnni => row_sum);
