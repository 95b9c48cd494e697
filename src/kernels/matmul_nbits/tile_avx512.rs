//! AVX-512 tile kernels: one zmm = the 16 columns of a group (one dword lane per column).
//!
//! fp32: each 64-byte chunk (8 k x 16 columns) is unpacked with a shift (`>> 8j` for k0+j,
//! `>> 8j+4` for k0+4+j) and a `vpermps` lookup in a 16-entry f32 table (code -> float; it
//! reads only the low 4 index bits, so no mask and no convert), then FMA'd with broadcast A into
//! four accumulators per row (k mod 4) to hide FMA latency. Per block: `total += (dot - zp * sum_a) * scale`.
//! int8: `& 0x0F` / `>> 4 & 0x0F` give 4 consecutive unsigned codes per lane, multiplied with a
//! broadcast dword of 4 int8 A values by `vpdpbusd` (VNNI) or `vpmaddubsw` + `vpmaddwd`;
//! per block `total += f32(dot - zp * sum_a8) * (scale * scale_a)`.
//! Per-row arithmetic does not depend on how many rows share a call.

// AVX-512 intrinsics are stable since Rust 1.89, above the workspace's declared MSRV (1.85):
// building this module needs 1.89+, so the workspace `rust-version` should be raised.
#![allow(clippy::incompatible_msrv)]

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

/// Codes of one k of a chunk as f32: `lut[(v >> SH) & 0x0F]`. `vpermps` reads only the low
/// four index bits, so the table lookup is the mask and the int -> float conversion at once.
#[inline]
#[target_feature(enable = "avx512f")]
fn nib<const SH: u32>(v: __m512i, lut: __m512) -> __m512 {
    _mm512_permutexvar_ps(_mm512_srli_epi32::<SH>(v), lut)
}

/// How far ahead of the chunk being read the kernels prefetch packed weights. Measured with
/// `nbits_ab` (K=4096, N=14336, M=1, acc 4, threads 2, 37 MB: DRAM-bound): ORT/rcpu 0.95-1.01
/// without prefetch, 1.11 at 1 KiB, 1.16 at 4 KiB (A/A null 1.06); no difference measurable
/// at N=4096 (L3-resident).
pub(crate) const PREFETCH_BYTES: usize = 4096;

/// Prefetches the weight line [`PREFETCH_BYTES`] past chunk `k0` of the group at `wp`. The
/// hardware prefetchers stop at 4 KiB page boundaries, and a decode step streams every weight
/// once from DRAM when the model does not fit the caches; one prefetch per 64-byte chunk keeps
/// the next lines in flight across those boundaries. Past the end of the group it touches the
/// next group or nothing: a prefetch never faults.
#[inline]
#[target_feature(enable = "avx512f")]
fn prefetch_ahead(wp: *const u8, k0: usize) {
    if PREFETCH_BYTES > 0 {
        let p = wp.wrapping_add(k0 * NR / 2 + PREFETCH_BYTES);
        // A hint: it never faults and reads no value, so the address (wrapping arithmetic,
        // never dereferenced) may point anywhere.
        _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
    }
}

/// Zero points of block `kb` as i32 lanes (8 when absent).
#[inline]
#[target_feature(enable = "avx512f")]
fn zero_points(g: &GroupView, kb: usize) -> __m512i {
    match g.zps {
        Some(z) => {
            let z = &z[kb * NR..kb * NR + NR];
            // SAFETY: `z` is exactly 16 readable bytes.
            _mm512_cvtepu8_epi32(unsafe { _mm_loadu_si128(z.as_ptr() as *const __m128i) })
        }
        None => _mm512_set1_epi32(8),
    }
}

/// fp32 tile.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/DQ/VL and FMA; `g` and `a` must have the packed sizes and
/// `r0 + nr <= rows of a`, `1 <= nr <= MR`.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma")]
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
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma")]
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
    let lut = _mm512_setr_ps(
        0., 1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12., 13., 14., 15.,
    );
    let mut total = [_mm512_setzero_ps(); R];
    for kb in 0..g.k_blocks {
        let mut acc = [[_mm512_setzero_ps(); 4]; R];
        for c in 0..bs / 8 {
            let k0 = kb * bs + c * 8;
            // SAFETY: chunk k0 occupies bytes k0*8 .. k0*8+64 of w (asserted length above).
            let v = unsafe { _mm512_loadu_si512(wp.add(k0 * NR / 2) as *const _) };
            prefetch_ahead(wp, k0);
            let w = [
                _mm512_permutexvar_ps(v, lut),
                nib::<8>(v, lut),
                nib::<16>(v, lut),
                nib::<24>(v, lut),
                nib::<4>(v, lut),
                nib::<12>(v, lut),
                nib::<20>(v, lut),
                nib::<28>(v, lut),
            ];
            for (r, acc_r) in acc.iter_mut().enumerate() {
                // SAFETY: row r0 + r has kp >= k0 + 8 elements (asserted above).
                let ap = unsafe { a.f.as_ptr().add((r0 + r) * a.kp + k0) };
                for (j, wj) in w.iter().enumerate() {
                    // SAFETY: j < 8, inside the row.
                    let x = _mm512_set1_ps(unsafe { *ap.add(j) });
                    acc_r[j % 4] = _mm512_fmadd_ps(x, *wj, acc_r[j % 4]);
                }
            }
        }
        // SAFETY: scales holds k_blocks * 16 floats.
        let s = unsafe { _mm512_loadu_ps(g.scales.as_ptr().add(kb * NR)) };
        let zp = _mm512_cvtepi32_ps(zero_points(g, kb));
        for (r, acc_r) in acc.iter().enumerate() {
            let dot = _mm512_add_ps(
                _mm512_add_ps(acc_r[0], acc_r[1]),
                _mm512_add_ps(acc_r[2], acc_r[3]),
            );
            let neg_sum = _mm512_set1_ps(-a.fsum[(r0 + r) * a.kb + kb]);
            let t = _mm512_fmadd_ps(zp, neg_sum, dot);
            total[r] = _mm512_fmadd_ps(t, s, total[r]);
        }
    }
    for (r, t) in total.iter().enumerate() {
        // SAFETY: res[r] is 16 floats.
        unsafe { _mm512_storeu_ps(res[r].as_mut_ptr(), *t) };
    }
}

/// `-zp * qsum` per column for block `kb` of a row whose quantised block sum is `qsum`: the
/// starting value of the block's accumulator, so the zero-point correction costs no extra
/// subtraction. `|qsum| <= 127 * 256 < 2^15` and `zp <= 15`, so `vpmaddwd` on the (zp, 0) i16
/// pairs against the broadcast low half of `-qsum` is exact.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn zp_init(g: &GroupView, kb: usize, qsum: i32) -> __m512i {
    match g.zps {
        Some(_) => _mm512_madd_epi16(zero_points(g, kb), _mm512_set1_epi32(-qsum)),
        None => _mm512_set1_epi32(-8 * qsum),
    }
}

/// Generates one int8 row kernel. `$dot(acc, u8_codes, s8_a)` is the u8 x s8 -> i32 dot step;
/// `$hi(v)` gives the high-nibble operand and `$hi_shift` how far the high accumulator must be
/// shifted right to undo it (`v & 0xF0` is the code times 16: one op less per chunk than
/// `(v >> 4) & 0x0F`, exact because every term of that accumulator is a multiple of 16; only for
/// `vpdpbusd`, since `vpmaddubsw` would saturate on 240 * 127 * 2).
macro_rules! i8_rows {
    ($name:ident, $features:literal, |$v:ident| $hi:expr, $hi_shift:literal,
     |$acc:ident, $u:ident, $s:ident| $dot:expr) => {
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn $name<const R: usize>(
            g: &GroupView,
            a: &PreparedA,
            r0: usize,
            res: &mut [[f32; NR]; MR],
        ) {
            let bs = g.block_size;
            assert!(g.w.len() >= g.k_blocks * bs * NR / 2 && g.scales.len() >= g.k_blocks * NR);
            assert!(
                a.q.len() >= (r0 + R) * a.kp
                    && a.kp == g.k_blocks * bs
                    && a.qsum.len() >= (r0 + R) * a.kb
            );
            let wp = g.w.as_ptr();
            let mask = _mm512_set1_epi8(0x0F);
            let mut total = [_mm512_setzero_ps(); R];
            for kb in 0..g.k_blocks {
                // Per row: the low-nibble accumulator starts at -zp * qsum, the high one at 0.
                let mut lo_acc: [__m512i; R] =
                    std::array::from_fn(|r| zp_init(g, kb, a.qsum[(r0 + r) * a.kb + kb]));
                let mut hi_acc = [_mm512_setzero_si512(); R];
                for c in 0..bs / 8 {
                    let k0 = kb * bs + c * 8;
                    // SAFETY: chunk k0 occupies bytes k0*8 .. k0*8+64 of w (asserted length).
                    let $v = unsafe { _mm512_loadu_si512(wp.add(k0 * NR / 2) as *const _) };
                    prefetch_ahead(wp, k0);
                    let lo = _mm512_and_si512($v, mask);
                    let hi = $hi;
                    for r in 0..R {
                        // SAFETY: row r0 + r has kp >= k0 + 8 int8 values; unaligned reads.
                        let (a_lo, a_hi) = unsafe {
                            let ap = a.q.as_ptr().add((r0 + r) * a.kp + k0);
                            (
                                _mm512_set1_epi32((ap as *const i32).read_unaligned()),
                                _mm512_set1_epi32((ap.add(4) as *const i32).read_unaligned()),
                            )
                        };
                        lo_acc[r] = {
                            let ($acc, $u, $s) = (lo_acc[r], lo, a_lo);
                            $dot
                        };
                        hi_acc[r] = {
                            let ($acc, $u, $s) = (hi_acc[r], hi, a_hi);
                            $dot
                        };
                    }
                }
                // SAFETY: scales holds k_blocks * 16 floats.
                let s = unsafe { _mm512_loadu_ps(g.scales.as_ptr().add(kb * NR)) };
                for r in 0..R {
                    let corr =
                        _mm512_add_epi32(lo_acc[r], _mm512_srai_epi32::<$hi_shift>(hi_acc[r]));
                    let ss = _mm512_mul_ps(s, _mm512_set1_ps(a.qscale[(r0 + r) * a.kb + kb]));
                    total[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(corr), ss, total[r]);
                }
            }
            for (r, t) in total.iter().enumerate() {
                // SAFETY: res[r] is 16 floats.
                unsafe { _mm512_storeu_ps(res[r].as_mut_ptr(), *t) };
            }
        }
    };
}

i8_rows!(
    i8_vnni_rows,
    "avx512f,avx512bw,avx512dq,avx512vl,fma,avx512vnni",
    |v| _mm512_and_si512(v, _mm512_set1_epi8(0xF0u8 as i8)),
    4,
    |acc, u, s| _mm512_dpbusd_epi32(acc, u, s)
);
// No i16 saturation in vpmaddubsw: 2 * 15 * 127 < 32767.
i8_rows!(
    i8_maddubs_rows,
    "avx512f,avx512bw,avx512dq,avx512vl,fma",
    |v| _mm512_and_si512(_mm512_srli_epi32::<4>(v), _mm512_set1_epi8(0x0F)),
    0,
    |acc, u, s| _mm512_add_epi32(
        acc,
        _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1))
    )
);

/// int8 tile with VNNI `vpdpbusd`.
///
/// # Safety
/// As [`tile_f32`], plus AVX-512 VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,avx512vnni")]
pub(crate) unsafe fn tile_i8_vnni(
    g: &GroupView,
    a: &PreparedA,
    r0: usize,
    nr: usize,
    res: &mut [[f32; NR]; MR],
) {
    // SAFETY: forwarded contract.
    unsafe { by_rows!(i8_vnni_rows, g, a, r0, nr, res) }
}

/// int8 tile with `vpmaddubsw` + `vpmaddwd` (AVX-512 without VNNI).
///
/// # Safety
/// As [`tile_f32`].
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma")]
pub(crate) unsafe fn tile_i8_maddubs(
    g: &GroupView,
    a: &PreparedA,
    r0: usize,
    nr: usize,
    res: &mut [[f32; NR]; MR],
) {
    // SAFETY: forwarded contract.
    unsafe { by_rows!(i8_maddubs_rows, g, a, r0, nr, res) }
}
