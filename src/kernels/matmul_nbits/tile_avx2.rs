//! AVX2 + FMA tile kernels. A 64-byte chunk of a 32-column group (see `pack`) is two ymm halves
//! of 8 dword lanes: half h holds columns 8h..8h+8 (low nibbles) and 16+8h..24+8h (high
//! nibbles). Same per-block math as the AVX-512 kernels. fp32 runs one half at a time over the
//! whole K (so a row's accumulators fit the 16 ymm registers), with two accumulators per set of
//! columns and row (k even / odd). int8 masks both nibbles, multiplies with `vpmaddubsw` (no i16
//! saturation: 2 * 15 * 127 < 32767), sums up to eight chunks in i16 and widens with
//! `vpmaddwd`; up to two rows take both halves in one pass over K, more rows one half per pass.

use std::arch::x86_64::*;

use super::pack::{GroupView, CHUNK_BYTES, CHUNK_K, NR};
use super::prepare_a::PreparedA;
use super::MR;

#[inline]
#[target_feature(enable = "avx2")]
fn nib<const SH: i32>(v: __m256i) -> __m256 {
    _mm256_cvtepi32_ps(_mm256_and_si256(
        _mm256_srli_epi32::<SH>(v),
        _mm256_set1_epi32(0x0F),
    ))
}

/// Half `h` of chunk `c` of block `kb`.
///
/// # Safety
/// Every record of the group present ([`GroupView::complete`]), `kb < k_blocks`, `c <
/// block_size / CHUNK_K`, `h < 2`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn half_chunk(g: &GroupView, kb: usize, c: usize, h: usize) -> __m256i {
    let at = g.block_at(kb) + c * CHUNK_BYTES + 32 * h;
    // SAFETY: the caller's contract: these 32 bytes lie in block kb's codes, inside `rec`.
    unsafe { _mm256_loadu_si256(g.rec.as_ptr().add(at) as *const __m256i) }
}

/// Zero points of block `kb`, half `h`, as i32 lanes: `[low columns, high columns]` (the
/// nibbles of `g.absent_zp` when absent).
#[inline]
#[target_feature(enable = "avx2")]
fn zero_points(g: &GroupView, kb: usize, h: usize) -> [__m256i; 2] {
    match g.zps {
        Some(z) => {
            let z = &z[kb * 16 + 8 * h..kb * 16 + 8 * h + 8];
            // SAFETY: `z` is exactly 8 readable bytes.
            let z = _mm256_cvtepu8_epi32(unsafe { _mm_loadl_epi64(z.as_ptr() as *const __m128i) });
            [
                _mm256_and_si256(z, _mm256_set1_epi32(0x0F)),
                _mm256_srli_epi32::<4>(z),
            ]
        }
        None => {
            let z = g.absent_zp as i32;
            [_mm256_set1_epi32(z & 0x0F), _mm256_set1_epi32(z >> 4)]
        }
    }
}

/// Scales of block `kb`, half `h` (from its record): `[low columns, high columns]`, f32 loads
/// or (`F16`) f16 widened exactly with `vcvtph2ps`. Panics if the record is not in `g.rec`.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn scales<const F16: bool>(g: &GroupView, kb: usize, h: usize) -> [__m256; 2] {
    let at = g.scales_at(kb);
    if F16 {
        let s = &g.rec[at..at + 2 * NR];
        let at = |i: usize| s[2 * i..2 * i + 16].as_ptr() as *const __m128i;
        // SAFETY: each load reads the 8 u16 (16 bytes) of a checked sub-slice.
        unsafe {
            [
                _mm256_cvtph_ps(_mm_loadu_si128(at(8 * h))),
                _mm256_cvtph_ps(_mm_loadu_si128(at(16 + 8 * h))),
            ]
        }
    } else {
        let s = &g.rec[at..at + 4 * NR];
        let at = |i: usize| s[4 * i..4 * i + 32].as_ptr() as *const f32;
        // SAFETY: each load reads the 8 floats (32 bytes) of a checked sub-slice.
        unsafe { [_mm256_loadu_ps(at(8 * h)), _mm256_loadu_ps(at(16 + 8 * h))] }
    }
}

/// Stores half `h` of each row's totals (`[low columns, high columns]`).
#[inline]
#[target_feature(enable = "avx2")]
fn store<const R: usize>(total: &[[__m256; 2]; R], h: usize, res: &mut [[f32; NR]; MR]) {
    for (t, out) in total.iter().zip(res.iter_mut()) {
        // SAFETY: columns 8h..8h+8 and 16+8h..24+8h lie inside the 32-float row.
        unsafe {
            _mm256_storeu_ps(out.as_mut_ptr().add(8 * h), t[0]);
            _mm256_storeu_ps(out.as_mut_ptr().add(16 + 8 * h), t[1]);
        }
    }
}

/// fp32 tile.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `g` and `a` must have the packed sizes,
/// `r0 + nr <= rows of a`, `1 <= nr <= MR`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn tile_f32(
    g: &GroupView,
    a: &PreparedA,
    r0: usize,
    nr: usize,
    res: &mut [[f32; NR]; MR],
) {
    // SAFETY: forwarded contract.
    unsafe { by_rows!(f32_rows, g, a, r0, nr, res) }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f32_rows<const R: usize, const F16: bool>(
    g: &GroupView,
    a: &PreparedA,
    r0: usize,
    res: &mut [[f32; NR]; MR],
) {
    let bs = g.block_size;
    assert!(g.complete());
    assert!(
        a.f.len() >= (r0 + R) * a.kp && a.kp == g.k_blocks * bs && a.fsum.len() >= (r0 + R) * a.kb
    );
    for h in 0..2 {
        let mut total = [[_mm256_setzero_ps(); 2]; R];
        for kb in 0..g.k_blocks {
            // [row][set of columns][k parity]
            let mut acc = [[[_mm256_setzero_ps(); 2]; 2]; R];
            for c in 0..bs / CHUNK_K {
                let k0 = kb * bs + c * CHUNK_K;
                // SAFETY: chunk c < bs / 4 of block kb, every record present (asserted above).
                let v = unsafe { half_chunk(g, kb, c, h) };
                macro_rules! step {
                    ($j:literal, $sl:literal, $sh:literal) => {
                        let (wl, wh) = (nib::<$sl>(v), nib::<$sh>(v));
                        for (r, acc_r) in acc.iter_mut().enumerate() {
                            // SAFETY: row r0 + r has kp >= k0 + 4 elements (asserted above).
                            let x = _mm256_set1_ps(unsafe {
                                *a.f.as_ptr().add((r0 + r) * a.kp + k0 + $j)
                            });
                            acc_r[0][$j % 2] = _mm256_fmadd_ps(x, wl, acc_r[0][$j % 2]);
                            acc_r[1][$j % 2] = _mm256_fmadd_ps(x, wh, acc_r[1][$j % 2]);
                        }
                    };
                }
                step!(0, 0, 4);
                step!(1, 8, 12);
                step!(2, 16, 20);
                step!(3, 24, 28);
            }
            let s = scales::<F16>(g, kb, h);
            let z = zero_points(g, kb, h);
            for (r, acc_r) in acc.iter().enumerate() {
                let neg_sum = _mm256_set1_ps(-a.fsum[(r0 + r) * a.kb + kb]);
                for set in 0..2 {
                    let dot = _mm256_add_ps(acc_r[set][0], acc_r[set][1]);
                    let t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(z[set]), neg_sum, dot);
                    total[r][set] = _mm256_fmadd_ps(t, s[set], total[r][set]);
                }
            }
        }
        store(&total, h, res);
    }
}

/// Chunks whose `vpmaddubsw` products are summed in i16 before widening (see `i8_rows`).
const I16_CHUNKS: usize = 8;

/// int8 tile (`vpmaddubsw` + `vpmaddwd`).
///
/// # Safety
/// As [`tile_f32`].
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn tile_i8(
    g: &GroupView,
    a: &PreparedA,
    r0: usize,
    nr: usize,
    res: &mut [[f32; NR]; MR],
) {
    // SAFETY: forwarded contract.
    unsafe { by_rows!(i8_rows, g, a, r0, nr, res) }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn i8_rows<const R: usize, const F16: bool>(
    g: &GroupView,
    a: &PreparedA,
    r0: usize,
    res: &mut [[f32; NR]; MR],
) {
    let bs = g.block_size;
    assert!(g.complete());
    assert!(
        a.q.len() >= (r0 + R) * a.kp && a.kp == g.k_blocks * bs && a.qsum.len() >= (r0 + R) * a.kb
    );
    let mask = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    let chunks = bs / CHUNK_K;
    // [row][half][set of columns]
    let mut total = [[[_mm256_setzero_ps(); 2]; 2]; R];
    // One pass over K for the halves listed (constant indices keep the accumulators in
    // registers). Up to two rows run both halves in one pass (A is broadcast once per chunk);
    // more rows run one half per pass, so the i16 accumulators still fit the 16 ymm registers
    // (both halves at four rows measured 20% slower at M=128).
    macro_rules! pass {
        ($($h:literal),+) => {
            for kb in 0..g.k_blocks {
                let mut acc = [[[_mm256_setzero_si256(); 2]; 2]; R];
                // `vpmaddubsw` pairs are at most 2 * 15 * 127 = 3810, so up to I16_CHUNKS
                // chunks sum in i16 (30480 < 32767) before one `vpmaddwd` widens them.
                for c0 in (0..chunks).step_by(I16_CHUNKS) {
                    let mut acc16 = [[[_mm256_setzero_si256(); 2]; 2]; R];
                    for c in c0..(c0 + I16_CHUNKS).min(chunks) {
                        let k0 = kb * bs + c * CHUNK_K;
                        let x: [__m256i; R] = std::array::from_fn(|r| {
                            // SAFETY: row r0 + r has kp >= k0 + 4 int8 values; unaligned read.
                            _mm256_set1_epi32(unsafe {
                                (a.q.as_ptr().add((r0 + r) * a.kp + k0) as *const i32)
                                    .read_unaligned()
                            })
                        });
                        $(
                            // SAFETY: chunk c < bs / 4 of block kb, every record present
                            // (asserted above).
                            let v = unsafe { half_chunk(g, kb, c, $h) };
                            let sets = [
                                _mm256_and_si256(v, mask),
                                _mm256_and_si256(_mm256_srli_epi16::<4>(v), mask),
                            ];
                            for (acc_r, x_r) in acc16.iter_mut().zip(&x) {
                                for set in 0..2 {
                                    let p = _mm256_maddubs_epi16(sets[set], *x_r);
                                    acc_r[$h][set] = _mm256_add_epi16(acc_r[$h][set], p);
                                }
                            }
                        )+
                    }
                    for (acc_r, acc16_r) in acc.iter_mut().zip(&acc16) {
                        $(
                            for set in 0..2 {
                                let wide = _mm256_madd_epi16(acc16_r[$h][set], ones);
                                acc_r[$h][set] = _mm256_add_epi32(acc_r[$h][set], wide);
                            }
                        )+
                    }
                }
                $(
                    let (s, z) = (scales::<F16>(g, kb, $h), zero_points(g, kb, $h));
                    for (r, (acc_r, total_r)) in acc.iter().zip(total.iter_mut()).enumerate() {
                        let i = (r0 + r) * a.kb + kb;
                        let qsum = _mm256_set1_epi32(a.qsum[i]);
                        let sa = _mm256_set1_ps(a.qscale[i]);
                        for set in 0..2 {
                            let zq = _mm256_mullo_epi32(z[set], qsum);
                            let corr = _mm256_sub_epi32(acc_r[$h][set], zq);
                            let ss = _mm256_mul_ps(s[set], sa);
                            total_r[$h][set] =
                                _mm256_fmadd_ps(_mm256_cvtepi32_ps(corr), ss, total_r[$h][set]);
                        }
                    }
                )+
            }
        };
    }
    if R <= 2 {
        pass!(0, 1);
    } else {
        pass!(0);
        pass!(1);
    }
    for h in 0..2 {
        store(&total.map(|t| t[h]), h, res);
    }
}
