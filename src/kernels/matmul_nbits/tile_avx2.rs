//! AVX2 + FMA tile kernels: the 16 columns of a group are two ymm halves (bytes 0..32 of a
//! chunk are columns 0..8, bytes 32..64 columns 8..16). Same per-block math as the AVX-512
//! kernels; fp32 uses two accumulators per half and row (k even / odd), int8 uses
//! `vpmaddubsw` + `vpmaddwd` (no i16 saturation: 2 * 15 * 127 < 32767).

use std::arch::x86_64::*;

use super::pack::{GroupView, NR};
use super::prepare_a::PreparedA;
use super::MR;

macro_rules! by_rows {
    ($f:ident, $g:expr, $a:expr, $r0:expr, $nr:expr, $res:expr) => {
        match $nr {
            1 => $f::<1>($g, $a, $r0, $res),
            2 => $f::<2>($g, $a, $r0, $res),
            3 => $f::<3>($g, $a, $r0, $res),
            4 => $f::<4>($g, $a, $r0, $res),
            _ => unreachable!("nr must be 1..=MR"),
        }
    };
}

#[inline]
#[target_feature(enable = "avx2")]
fn nib<const SH: i32>(v: __m256i) -> __m256 {
    _mm256_cvtepi32_ps(_mm256_and_si256(
        _mm256_srli_epi32::<SH>(v),
        _mm256_set1_epi32(0x0F),
    ))
}

/// Zero points of block `kb`, half `h`, as i32 lanes (8 when absent).
#[inline]
#[target_feature(enable = "avx2")]
fn zero_points(g: &GroupView, kb: usize, h: usize) -> __m256i {
    match g.zps {
        Some(z) => {
            let z = &z[kb * NR + 8 * h..kb * NR + 8 * h + 8];
            // SAFETY: `z` is exactly 8 readable bytes.
            _mm256_cvtepu8_epi32(unsafe { _mm_loadl_epi64(z.as_ptr() as *const __m128i) })
        }
        None => _mm256_set1_epi32(8),
    }
}

/// fp32 tile.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `g` and `a` must have the packed sizes,
/// `r0 + nr <= rows of a`, `1 <= nr <= MR`.
#[target_feature(enable = "avx2,fma")]
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
#[target_feature(enable = "avx2,fma")]
unsafe fn f32_rows<const R: usize>(
    g: &GroupView,
    a: &PreparedA,
    r0: usize,
    res: &mut [[f32; NR]; MR],
) {
    let bs = g.block_size;
    assert!(g.w.len() >= g.k_blocks * bs * NR / 2 && g.scales.len() >= g.k_blocks * NR);
    assert!(
        a.f.len() >= (r0 + R) * a.kp && a.kp == g.k_blocks * bs && a.fsum.len() >= (r0 + R) * a.kb
    );
    let wp = g.w.as_ptr();
    let mut total = [[_mm256_setzero_ps(); 2]; R];
    for kb in 0..g.k_blocks {
        let mut acc = [[[_mm256_setzero_ps(); 2]; 2]; R];
        for c in 0..bs / 8 {
            let k0 = kb * bs + c * 8;
            for h in 0..2 {
                // SAFETY: chunk k0 occupies bytes k0*8 .. k0*8+64 of w (asserted length above).
                let v =
                    unsafe { _mm256_loadu_si256(wp.add(k0 * NR / 2 + 32 * h) as *const __m256i) };
                let w = [
                    nib::<0>(v),
                    nib::<8>(v),
                    nib::<16>(v),
                    nib::<24>(v),
                    nib::<4>(v),
                    nib::<12>(v),
                    nib::<20>(v),
                    _mm256_cvtepi32_ps(_mm256_srli_epi32::<28>(v)),
                ];
                for (r, acc_r) in acc.iter_mut().enumerate() {
                    // SAFETY: row r0 + r has kp >= k0 + 8 elements (asserted above).
                    let ap = unsafe { a.f.as_ptr().add((r0 + r) * a.kp + k0) };
                    for (j, wj) in w.iter().enumerate() {
                        // SAFETY: j < 8, inside the row.
                        let x = _mm256_set1_ps(unsafe { *ap.add(j) });
                        acc_r[h][j % 2] = _mm256_fmadd_ps(x, *wj, acc_r[h][j % 2]);
                    }
                }
            }
        }
        for h in 0..2 {
            // SAFETY: scales holds k_blocks * 16 floats.
            let s = unsafe { _mm256_loadu_ps(g.scales.as_ptr().add(kb * NR + 8 * h)) };
            let zp = _mm256_cvtepi32_ps(zero_points(g, kb, h));
            for (r, acc_r) in acc.iter().enumerate() {
                let dot = _mm256_add_ps(acc_r[h][0], acc_r[h][1]);
                let neg_sum = _mm256_set1_ps(-a.fsum[(r0 + r) * a.kb + kb]);
                let t = _mm256_fmadd_ps(zp, neg_sum, dot);
                total[r][h] = _mm256_fmadd_ps(t, s, total[r][h]);
            }
        }
    }
    for (r, t) in total.iter().enumerate() {
        // SAFETY: res[r] is 16 floats.
        unsafe {
            _mm256_storeu_ps(res[r].as_mut_ptr(), t[0]);
            _mm256_storeu_ps(res[r].as_mut_ptr().add(8), t[1]);
        }
    }
}

/// int8 tile (`vpmaddubsw` + `vpmaddwd`).
///
/// # Safety
/// As [`tile_f32`].
#[target_feature(enable = "avx2,fma")]
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
#[target_feature(enable = "avx2,fma")]
unsafe fn i8_rows<const R: usize>(
    g: &GroupView,
    a: &PreparedA,
    r0: usize,
    res: &mut [[f32; NR]; MR],
) {
    let bs = g.block_size;
    assert!(g.w.len() >= g.k_blocks * bs * NR / 2 && g.scales.len() >= g.k_blocks * NR);
    assert!(
        a.q.len() >= (r0 + R) * a.kp && a.kp == g.k_blocks * bs && a.qsum.len() >= (r0 + R) * a.kb
    );
    let wp = g.w.as_ptr();
    let mask = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    let mut total = [[_mm256_setzero_ps(); 2]; R];
    for kb in 0..g.k_blocks {
        let mut acc = [[_mm256_setzero_si256(); 2]; R];
        for c in 0..bs / 8 {
            let k0 = kb * bs + c * 8;
            for h in 0..2 {
                // SAFETY: chunk k0 occupies bytes k0*8 .. k0*8+64 of w.
                let v =
                    unsafe { _mm256_loadu_si256(wp.add(k0 * NR / 2 + 32 * h) as *const __m256i) };
                let lo = _mm256_and_si256(v, mask);
                let hi = _mm256_and_si256(_mm256_srli_epi32::<4>(v), mask);
                for (r, acc_r) in acc.iter_mut().enumerate() {
                    // SAFETY: row r0 + r has kp >= k0 + 8 int8 values; unaligned reads.
                    let (a_lo, a_hi) = unsafe {
                        let ap = a.q.as_ptr().add((r0 + r) * a.kp + k0);
                        (
                            _mm256_set1_epi32((ap as *const i32).read_unaligned()),
                            _mm256_set1_epi32((ap.add(4) as *const i32).read_unaligned()),
                        )
                    };
                    let p = _mm256_add_epi16(
                        _mm256_maddubs_epi16(lo, a_lo),
                        _mm256_maddubs_epi16(hi, a_hi),
                    );
                    acc_r[h] = _mm256_add_epi32(acc_r[h], _mm256_madd_epi16(p, ones));
                }
            }
        }
        for h in 0..2 {
            // SAFETY: scales holds k_blocks * 16 floats.
            let s = unsafe { _mm256_loadu_ps(g.scales.as_ptr().add(kb * NR + 8 * h)) };
            let zp = zero_points(g, kb, h);
            for (r, acc_r) in acc.iter().enumerate() {
                let i = (r0 + r) * a.kb + kb;
                let corr = _mm256_sub_epi32(
                    acc_r[h],
                    _mm256_mullo_epi32(zp, _mm256_set1_epi32(a.qsum[i])),
                );
                let ss = _mm256_mul_ps(s, _mm256_set1_ps(a.qscale[i]));
                total[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(corr), ss, total[r][h]);
            }
        }
    }
    for (r, t) in total.iter().enumerate() {
        // SAFETY: res[r] is 16 floats.
        unsafe {
            _mm256_storeu_ps(res[r].as_mut_ptr(), t[0]);
            _mm256_storeu_ps(res[r].as_mut_ptr().add(8), t[1]);
        }
    }
}
