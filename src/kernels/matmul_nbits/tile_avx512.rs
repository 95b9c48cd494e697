//! AVX-512 tile kernels over the 32-column groups of `pack`: one zmm = 16 dword lanes, lane i
//! carrying column i (low nibbles) and column 16 + i (high nibbles) for four consecutive k.
//!
//! fp32: each 64-byte chunk (4 k x 32 columns) is unpacked with a shift (`>> 8j` for the low
//! columns at k0+j, `>> 8j+4` for the high ones) and a `vpermps` lookup in a 16-entry f32 table
//! (code -> float; it reads only the low 4 index bits, so no mask and no convert), then FMA'd
//! with broadcast A into two accumulators per half and row (k even / odd) to hide FMA latency.
//! Per block: `total += (dot - zp * sum_a) * scale`.
//! int8 (VNNI): `lo = v & 0x0F`; `vpdpbusd(lo, a)` accumulates the low columns and
//! `vpdpbusd(v, a)` the low columns plus 16 x the high ones, so per block
//! `hi = (full - lo) >> 4` exactly (no saturation: `vpdpbusd` sums in i32, 255 * 127 * 256 plus
//! the zero-point seed stays far below 2^31). One mask and one broadcast of A per 64 bytes.
//! int8 without VNNI: `vpmaddubsw` saturates at 2^15, so both nibbles are masked
//! (`& 0x0F`, `>> 4 & 0x0F`) and summed with `vpmaddwd`.
//! Both int8 variants give the exact integer `dot - zp * sum_a8` per (block, column), then
//! `total += f32(that) * (scale * scale_a)`.
//! Per-row arithmetic does not depend on how many rows share a call.
//!
//! What the M=1 VNNI tile costs beyond its bytes (issue 17): diagnostic variants of it (not
//! kept), interleaved with it call by call in one process on weights streamed from DRAM
//! (`examples/matmul_nbits_stream --sweep`, 200 copies, p10 of 480 calls; K=896 N=4864 and
//! K=4864 N=896): the same loads and prefetches with no arithmetic at all 85.4 and 82.4-84.7 us
//! against the tile's 87.5 and 84.0-86.9, so the arithmetic (two `vpdpbusd` per 64 bytes, the
//! per-block epilogue) costs 2-3% and trimming it cannot pay much; the weight loads alone,
//! without the scale stream, 76.5 and 73.1-73.7 us: the scales (11-12% of the bytes) cost their
//! share of the bytes and no more. (That was two lanes sharing one memory path; one lane on its
//! own streamed the two-stream layout at 0.84-0.90 of a plain read, which the records closed:
//! see `pack`.) (A variant reading block 0's scales for every block, a hot buffer,
//! came out slower, 94-100 and 96-98 us; not understood.) What did cost was the decode split
//! (the guided split's alternating runs, `runtime::segments`) and too few lines in flight (the
//! L2 prefetch, `prefetch`).
//!
//! That holds while the lanes wait on DRAM. It does not when the core is shared: in one
//! diagnostic run on the development VM (`examples/decode_anatomy`, a moment when a plain read
//! reached ~50 GB/s instead of ~34) the lanes' own instructions ran ~3x slower than usual (A
//! preparation 3.6 instead of 1.2 us a call) and the GEMVs streamed at ~34 GB/s, 65% of that
//! read: bound by the tile's instruction rate. The VNNI tile's inner loop is therefore lean:
//! four chunks per iteration off one weight pointer, the L1 prefetch without a branch (over one
//! row, with the records, behind a test that is off by default; over several rows still
//! without), the chunk offset computed without the mask the wrapping `k0 * NR / 2` made the
//! compiler add; about 8 instructions per 64 bytes at M=1 where the chunk-by-chunk loop (a
//! branch per prefetch, the address recomputed per chunk) issued about 15. Measured on weights hot in L3, where the tile
//! is bound by its instructions (`matmul_nbits_stream --sweep 896 4864 2 40 1 4 1
//! --pf=3072/6144`, old and new builds alternated, p50): 60.6 -> 70.7 and 60.1 -> 71.1 GB/s;
//! K=896 N=2048 54.2 -> 60.3 and 51.1 -> 57.7. The other tiles' chunk and prefetch addresses
//! lost the same mask (the `vpmaddubsw` tile, `RCPU_ISA=avx512`, L3-hot: 60.9 -> 66.1 GB/s).
//! Streaming from DRAM at ordinary bandwidth the loop changes nothing (Qwen2-0.5B decode old /
//! new 1.000 over 16 rounds); without the L2 prefetch it is faster when bandwidth is plentiful
//! (`prefetch`).

// AVX-512 intrinsics are stable since Rust 1.89, above the workspace's declared MSRV (1.85):
// building this module needs 1.89+, so the workspace `rust-version` should be raised.
#![allow(clippy::incompatible_msrv)]

use std::arch::x86_64::*;

use super::pack::{GroupView, CHUNK_BYTES, CHUNK_K, LANES, NR};
use super::prefetch::{prefetch_bytes, vnni_prefetch_bytes};
use super::prepare_a::PreparedA;
use super::MR;
use crate::kernels::x86_asm::fma_bcast;

/// Codes of one k of a chunk as f32: `lut[(v >> SH) & 0x0F]`. `vpermps` reads only the low
/// four index bits, so the table lookup is the mask and the int -> float conversion at once.
#[inline]
#[target_feature(enable = "avx512f")]
fn nib<const SH: u32>(v: __m512i, lut: __m512) -> __m512 {
    _mm512_permutexvar_ps(_mm512_srli_epi32::<SH>(v), lut)
}

// Software prefetch of the weight stream, `prefetch::prefetch_bytes(rows)` ahead (see `prefetch`
// for the measurements). An earlier measurement on a Zen 4 VM had found a 4 KiB-ahead
// `prefetcht0` per chunk slower (K=N=4096 L3 91.9 vs 79.0 us; K=4096 N=57344 4407 vs 4322 us);
// the distance is a runtime setting so that a machine can be re-checked with
// `examples/matmul_nbits_stream --sweep`.

/// Prefetches the cache line `dist` bytes past the chunk at `at` into L1 and the one `far`
/// bytes past it into L2 (`prefetcht2`; nothing for a distance of 0). The address may lie past
/// the group or the whole buffer: a prefetch never faults, and the pointer is only computed
/// (wrapping), never dereferenced. A group's records are one stream, so the lines ahead are its
/// next codes and scales alike.
#[inline]
#[target_feature(enable = "avx512f")]
fn prefetch(at: *const u8, dist: usize, far: usize) {
    if dist != 0 {
        _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(dist) as *const i8);
    }
    if far != 0 {
        _mm_prefetch::<_MM_HINT_T2>(at.wrapping_add(far) as *const i8);
    }
}

/// Start of block `kb`'s record (only computed, wrapping; dereferenced by [`chunk`] and
/// [`scales`] under their contracts).
#[inline]
fn block(g: &GroupView, kb: usize) -> *const u8 {
    g.rec.as_ptr().wrapping_add(g.block_at(kb))
}

/// The 64 code bytes at `at`.
///
/// # Safety
/// `at` must be a chunk of a record of a group whose records are all present
/// ([`GroupView::complete`]): block `kb`'s chunk `c` is `block(g, kb) + c * CHUNK_BYTES`, `c <
/// block_size / CHUNK_K`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn chunk(at: *const u8) -> __m512i {
    // SAFETY: the caller's contract: 64 readable bytes.
    unsafe { _mm512_loadu_si512(at as *const _) }
}

/// Zero-point bytes of block `kb` as i32 lanes (low nibble: column i, high nibble: column
/// 16 + i; `g.absent_zp` when absent).
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) fn zero_point_bytes(g: &GroupView, kb: usize) -> __m512i {
    match g.zps {
        Some(z) => {
            let z = &z[kb * LANES..(kb + 1) * LANES];
            // SAFETY: `z` is exactly 16 readable bytes.
            _mm512_cvtepu8_epi32(unsafe { _mm_loadu_si128(z.as_ptr() as *const __m128i) })
        }
        None => _mm512_set1_epi32(g.absent_zp as i32),
    }
}

/// Zero points of block `kb` as i32 lanes: `[columns 0..16, columns 16..32]`.
#[inline]
#[target_feature(enable = "avx512f")]
fn zero_point_halves(g: &GroupView, kb: usize) -> [__m512i; 2] {
    let z = zero_point_bytes(g, kb);
    [
        _mm512_and_si512(z, _mm512_set1_epi32(0x0F)),
        _mm512_srli_epi32::<4>(z),
    ]
}

/// The two halves' scales of block `kb` (its record's 32 scales): f32 loads, or (`F16`) f16
/// widened exactly with `vcvtph2ps`.
///
/// # Safety
/// `kb < g.k_blocks`, every record of the group present ([`GroupView::complete`]) and `F16 ==
/// g.f16` (the kernels assert the first two once per group and pick `F16` from `g.f16`).
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn scales<const F16: bool>(g: &GroupView, kb: usize) -> [__m512; 2] {
    let s = g.rec.as_ptr().wrapping_add(g.scales_at(kb));
    if F16 {
        // SAFETY: block kb's record (present: the contract) ends with 32 f16 scales, 64 bytes.
        unsafe {
            [
                _mm512_cvtph_ps(_mm256_loadu_si256(s as *const __m256i)),
                _mm512_cvtph_ps(_mm256_loadu_si256(s.add(32) as *const __m256i)),
            ]
        }
    } else {
        // SAFETY: block kb's record (present: the contract) ends with 32 f32 scales, 128 bytes.
        unsafe {
            [
                _mm512_loadu_ps(s as *const f32),
                _mm512_loadu_ps(s.add(64) as *const f32),
            ]
        }
    }
}

/// Stores the two halves of each row's totals.
#[inline]
#[target_feature(enable = "avx512f")]
fn store<const R: usize>(total: &[[__m512; 2]; R], res: &mut [[f32; NR]; MR]) {
    for (t, out) in total.iter().zip(res.iter_mut()) {
        let (lo, hi) = out.split_at_mut(16);
        // SAFETY: both halves are 16 floats.
        unsafe {
            _mm512_storeu_ps(lo.as_mut_ptr(), t[0]);
            _mm512_storeu_ps(hi.as_mut_ptr(), t[1]);
        }
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
unsafe fn f32_rows<const R: usize, const F16: bool>(
    g: &GroupView,
    a: &PreparedA,
    r0: usize,
    res: &mut [[f32; NR]; MR],
) {
    let bs = g.block_size;
    // No L2 prefetch here: on top of the L1 one it cost this compute-heavier tile 2-3% (see
    // `prefetch`).
    let pf = prefetch_bytes(R);
    assert!(g.complete());
    assert!(
        a.f.len() >= (r0 + R) * a.kp && a.kp == g.k_blocks * bs && a.fsum.len() >= (r0 + R) * a.kb
    );
    let lut = _mm512_setr_ps(
        0., 1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12., 13., 14., 15.,
    );
    let mut total = [[_mm512_setzero_ps(); 2]; R];
    for kb in 0..g.k_blocks {
        // [row][half][k parity]
        let mut acc = [[[_mm512_setzero_ps(); 2]; 2]; R];
        for c in 0..bs / CHUNK_K {
            let k0 = kb * bs + c * CHUNK_K;
            let at = block(g, kb).wrapping_add(c * CHUNK_BYTES);
            prefetch(at, pf, 0);
            // SAFETY: chunk c of block kb, every record present (asserted above).
            let v = unsafe { chunk(at) };
            // w[2j] = low columns at k0 + j, w[2j + 1] = high columns.
            let w = [
                _mm512_permutexvar_ps(v, lut),
                nib::<4>(v, lut),
                nib::<8>(v, lut),
                nib::<12>(v, lut),
                nib::<16>(v, lut),
                nib::<20>(v, lut),
                nib::<24>(v, lut),
                nib::<28>(v, lut),
            ];
            for (r, acc_r) in acc.iter_mut().enumerate() {
                // SAFETY: row r0 + r has kp >= k0 + 4 elements (asserted above).
                let ap = unsafe { a.f.as_ptr().add((r0 + r) * a.kp + k0) };
                for (i, wi) in w.iter().enumerate() {
                    let (half, j) = (i % 2, i / 2);
                    // SAFETY: j < 4, inside the row.
                    acc_r[half][j % 2] = unsafe { fma_bcast(acc_r[half][j % 2], *wi, ap.add(j)) };
                }
            }
        }
        // SAFETY: kb < k_blocks, records present (asserted above), F16 chosen from g.f16.
        let s = unsafe { scales::<F16>(g, kb) };
        let zp = zero_point_halves(g, kb).map(|z| _mm512_cvtepi32_ps(z));
        for (r, acc_r) in acc.iter().enumerate() {
            let neg_sum = _mm512_set1_ps(-a.fsum[(r0 + r) * a.kb + kb]);
            for h in 0..2 {
                let dot = _mm512_add_ps(acc_r[h][0], acc_r[h][1]);
                let t = _mm512_fmadd_ps(zp[h], neg_sum, dot);
                total[r][h] = _mm512_fmadd_ps(t, s[h], total[r][h]);
            }
        }
    }
    store(&total, res);
}

/// `-zp * qsum` per lane (`zp` one i32 per lane, at most 255) for a row whose quantised block
/// sum is `qsum`: the starting value of a block's accumulator, so the zero-point correction
/// costs no extra subtraction. `|qsum| <= 127 * 256 < 2^15`, so `vpmaddwd` on the (zp, 0) i16
/// pairs against the broadcast low half of `-qsum` is exact.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn zp_seed(zp: __m512i, qsum: i32) -> __m512i {
    _mm512_madd_epi16(zp, _mm512_set1_epi32(-qsum))
}

/// [`zp_seed`] for a group whose every lane of `zp` is `uniform` when that is `Some` (weights
/// without zero points: 8 a nibble, 0x88 a byte): one broadcast of the scalar `-uniform *
/// qsum`, the same integers (`|qsum| <= 127 * 256`, so the product is far inside i32). Over
/// several rows a tile seeds two accumulators per row and block against 16 `vpdpbusd`, and
/// `vpmaddwd` competes with them for the multiply pipes: with the broadcast the VNNI tile at
/// M=128 ran 330-338 GFLOP/s against 314-317 (`examples/matmul_nbits_timing 896 4864 10 1 0`,
/// one thread, the builds alternating), and Qwen2-0.5B prefill took ~5% less a token.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn seed(zp: __m512i, uniform: Option<i32>, qsum: i32) -> __m512i {
    match uniform {
        Some(u) => _mm512_set1_epi32(u * -qsum),
        None => zp_seed(zp, qsum),
    }
}

/// A broadcast dword of the four int8 A values of row `row` at `k0`.
///
/// # Safety
/// Row `row` of `a.q` must hold `k0 + 4` values.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn a_dword(a: &PreparedA, row: usize, k0: usize) -> __m512i {
    // SAFETY: the caller's contract; unaligned read of 4 bytes.
    _mm512_set1_epi32(unsafe { (a.q.as_ptr().add(row * a.kp + k0) as *const i32).read_unaligned() })
}

/// Adds one block's exact integer results (`c[half]`) to the totals:
/// `total += f32(c) * (scale * scale_a)`.
#[inline]
#[target_feature(enable = "avx512f,fma")]
fn finish_block(total: &mut [__m512; 2], c: [__m512i; 2], s: &[__m512; 2], scale_a: f32) {
    let sa = _mm512_set1_ps(scale_a);
    for h in 0..2 {
        let ss = _mm512_mul_ps(s[h], sa);
        total[h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c[h]), ss, total[h]);
    }
}

macro_rules! check_i8_sizes {
    ($g:expr, $a:expr, $r0:expr, $r:expr) => {
        assert!($g.complete());
        assert!(
            $a.q.len() >= ($r0 + $r) * $a.kp
                && $a.kp == $g.k_blocks * $g.block_size
                && $a.qsum.len() >= ($r0 + $r) * $a.kb
        );
    };
}

/// `vnni_chunks!(g, kb, R, pf, pf2, |k, ch, v| body)`: the VNNI tiles' walk over block `kb`'s
/// chunks, four at a time (a block's chunk count is a power of two from 4): `v` the chunk's 64
/// bytes, `k` its first k, `ch` its place in the four (the tiles keep two accumulator chains,
/// `ch % 2`: constant chain indices keep the accumulators in registers). The lean body (one
/// weight pointer per four chunks, the L1 prefetch unconditional over several rows and off by
/// default over one, the L2 one on a loop-invariant test) issues about half the instructions per
/// weight byte of a chunk-by-chunk loop, which counts when the core is shared
/// (`prefetch::vnni_prefetch_bytes`). A macro, so the body is the tile's own code (a closure
/// left out of line would lose the tile's target features). The caller has asserted
/// `g.complete()`.
macro_rules! vnni_chunks {
    ($g:expr, $kb:expr, $rows:expr, $pf:expr, $pf2:expr, |$k:ident, $ch:ident, $v:ident| $body:block) => {{
        let bs = $g.block_size;
        for c in (0..bs / CHUNK_K).step_by(4) {
            let k0 = $kb * bs + c * CHUNK_K;
            // Only computed (wrapping), never dereferenced: a chunk's bytes are read by `chunk`
            // below, whose bounds the caller's assertion covers.
            let w = block($g, $kb).wrapping_add(c * CHUNK_BYTES);
            for $ch in 0..4 {
                let at = w.wrapping_add($ch * CHUNK_BYTES);
                // Over several rows unconditionally (a run-time test here made the four-row
                // body slower, see `prefetch`); over one row only when a distance is set.
                if $rows > 1 || $pf != 0 {
                    _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add($pf) as *const i8);
                }
                if $pf2 != 0 {
                    _mm_prefetch::<_MM_HINT_T2>(at.wrapping_add($pf2) as *const i8);
                }
                // SAFETY: chunk c + ch of block kb (c + ch < bs / 4), every record present
                // (asserted by the caller).
                let $v = unsafe { chunk(at) };
                let $k = k0 + $ch * CHUNK_K;
                $body
            }
        }
    }};
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,avx512vnni")]
unsafe fn i8_vnni_rows<const R: usize, const F16: bool>(
    g: &GroupView,
    a: &PreparedA,
    r0: usize,
    res: &mut [[f32; NR]; MR],
) {
    check_i8_sizes!(g, a, r0, R);
    let (pf, pf2) = vnni_prefetch_bytes(R);
    let mask = _mm512_set1_epi8(0x0F);
    let mut total = [[_mm512_setzero_ps(); 2]; R];
    // Without zero points every byte is `g.absent_zp` (0x88 for 4-bit weights). Over one row
    // (decode, bound by the weight stream) the seeds stay as they were: the broadcast is
    // measured for tiles over several rows.
    let u = g.absent_zp as i32;
    let (u_lo, u_full) = match g.zps {
        None if R > 1 => (Some(u & 0x0F), Some(u)),
        _ => (None, None),
    };
    for kb in 0..g.k_blocks {
        // Seeds: `lo` starts at -zp_lo * qsum; `full` (= lo + 16 hi) at -(zp_lo + 16 zp_hi) * qsum,
        // which is the zero-point byte itself times -qsum.
        let z = zero_point_bytes(g, kb);
        let z_lo = _mm512_and_si512(z, _mm512_set1_epi32(0x0F));
        let qsum = |r: usize| a.qsum[(r0 + r) * a.kb + kb];
        // Two chains each (even / odd chunks; integer sums, so the split changes no result):
        // a block's 4..64 dependent `vpdpbusd` would otherwise bound it by latency.
        let zero = _mm512_setzero_si512();
        let mut lo: [[__m512i; 2]; R] = std::array::from_fn(|r| [seed(z_lo, u_lo, qsum(r)), zero]);
        let mut full: [[__m512i; 2]; R] = std::array::from_fn(|r| [seed(z, u_full, qsum(r)), zero]);
        // Chunks four at a time, chunk `ch` on chain `ch % 2` (`vnni_chunks`).
        vnni_chunks!(g, kb, R, pf, pf2, |k, ch, v| {
            let v_lo = _mm512_and_si512(v, mask);
            for r in 0..R {
                // SAFETY: row r0 + r has kp >= k + 4 values (asserted).
                let x = unsafe { a_dword(a, r0 + r, k) };
                lo[r][ch % 2] = _mm512_dpbusd_epi32(lo[r][ch % 2], v_lo, x);
                full[r][ch % 2] = _mm512_dpbusd_epi32(full[r][ch % 2], v, x);
            }
        });
        // SAFETY: kb < k_blocks, records present (asserted above), F16 chosen from g.f16.
        let s = unsafe { scales::<F16>(g, kb) };
        for r in 0..R {
            let lo = _mm512_add_epi32(lo[r][0], lo[r][1]);
            let full = _mm512_add_epi32(full[r][0], full[r][1]);
            let hi = _mm512_srai_epi32::<4>(_mm512_sub_epi32(full, lo));
            finish_block(&mut total[r], [lo, hi], &s, a.qscale[(r0 + r) * a.kb + kb]);
        }
    }
    store(&total, res);
}

/// The VNNI tile over an 8-bit group (`bits8`): lane `i`'s bytes are column `i`'s whole codes,
/// so one `vpdpbusd` per 64 bytes (unsigned codes times int8 A) sums `q a` exactly, seeded with
/// `-zp * qsum` (the zero-point byte itself); per block `total += f32(dot) * (s * scale_a)`
/// with the record's first 16 scales (`s`; the other 16, `16 s`, are the halves' and are not
/// read). Writes each column's total as "column" `i` and 0 as "column" `16 + i`, which the
/// driver adds to it. `255 * 127 * 256` plus the seed stays far below 2^31.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,avx512vnni")]
unsafe fn i8_vnni8_rows<const R: usize, const F16: bool>(
    g: &GroupView,
    a: &PreparedA,
    r0: usize,
    res: &mut [[f32; NR]; MR],
) {
    check_i8_sizes!(g, a, r0, R);
    let (pf, pf2) = vnni_prefetch_bytes(R);
    let mut total = [_mm512_setzero_ps(); R];
    let u_full = match g.zps {
        None if R > 1 => Some(g.absent_zp as i32),
        _ => None,
    };
    for kb in 0..g.k_blocks {
        let z = zero_point_bytes(g, kb);
        let qsum = |r: usize| a.qsum[(r0 + r) * a.kb + kb];
        // Two chains (even / odd chunks), as in the 4-bit tile.
        let zero = _mm512_setzero_si512();
        let mut full: [[__m512i; 2]; R] = std::array::from_fn(|r| [seed(z, u_full, qsum(r)), zero]);
        vnni_chunks!(g, kb, R, pf, pf2, |k, ch, v| {
            for (r, acc) in full.iter_mut().enumerate() {
                // SAFETY: row r0 + r has kp >= k + 4 values (asserted).
                let x = unsafe { a_dword(a, r0 + r, k) };
                acc[ch % 2] = _mm512_dpbusd_epi32(acc[ch % 2], v, x);
            }
        });
        // SAFETY: kb < k_blocks, records present (asserted above), F16 chosen from g.f16.
        let [s, _] = unsafe { scales::<F16>(g, kb) };
        for r in 0..R {
            let dot = _mm512_cvtepi32_ps(_mm512_add_epi32(full[r][0], full[r][1]));
            let ss = _mm512_mul_ps(s, _mm512_set1_ps(a.qscale[(r0 + r) * a.kb + kb]));
            total[r] = _mm512_fmadd_ps(dot, ss, total[r]);
        }
    }
    let zero = _mm512_setzero_ps();
    let halves: [[__m512; 2]; R] = std::array::from_fn(|r| [total[r], zero]);
    store(&halves, res);
}

/// int8 tile with VNNI `vpdpbusd` over an 8-bit group (`bits8`; [`i8_vnni8_rows`]).
///
/// # Safety
/// As [`tile_i8_vnni`].
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,avx512vnni")]
pub(crate) unsafe fn tile_i8_vnni8(
    g: &GroupView,
    a: &PreparedA,
    r0: usize,
    nr: usize,
    res: &mut [[f32; NR]; MR],
) {
    // SAFETY: forwarded contract.
    unsafe { by_rows!(i8_vnni8_rows, g, a, r0, nr, res) }
}

// No i16 saturation in vpmaddubsw: 2 * 15 * 127 < 32767.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma")]
unsafe fn i8_maddubs_rows<const R: usize, const F16: bool>(
    g: &GroupView,
    a: &PreparedA,
    r0: usize,
    res: &mut [[f32; NR]; MR],
) {
    check_i8_sizes!(g, a, r0, R);
    let bs = g.block_size;
    // The L2 prefetch is measured for the VNNI tile only (see `prefetch`).
    let pf = prefetch_bytes(R);
    let mask = _mm512_set1_epi8(0x0F);
    let ones = _mm512_set1_epi16(1);
    let mut total = [[_mm512_setzero_ps(); 2]; R];
    // Without zero points each nibble's zero point is uniform (over several rows, as in the
    // VNNI tile).
    let absent = g.absent_zp as i32;
    let u = [absent & 0x0F, absent >> 4].map(|z| (R > 1 && g.zps.is_none()).then_some(z));
    for kb in 0..g.k_blocks {
        let zh = zero_point_halves(g, kb);
        let qsum = |r: usize| a.qsum[(r0 + r) * a.kb + kb];
        let mut acc: [[__m512i; 2]; R] =
            std::array::from_fn(|r| [seed(zh[0], u[0], qsum(r)), seed(zh[1], u[1], qsum(r))]);
        for c in 0..bs / CHUNK_K {
            let k0 = kb * bs + c * CHUNK_K;
            let at = block(g, kb).wrapping_add(c * CHUNK_BYTES);
            prefetch(at, pf, 0);
            // SAFETY: chunk c of block kb, every record present (asserted).
            let v = unsafe { chunk(at) };
            let halves = [
                _mm512_and_si512(v, mask),
                _mm512_and_si512(_mm512_srli_epi16::<4>(v), mask),
            ];
            for (r, acc_r) in acc.iter_mut().enumerate() {
                // SAFETY: row r0 + r has kp >= k0 + 4 values (asserted).
                let x = unsafe { a_dword(a, r0 + r, k0) };
                for h in 0..2 {
                    let p = _mm512_madd_epi16(_mm512_maddubs_epi16(halves[h], x), ones);
                    acc_r[h] = _mm512_add_epi32(acc_r[h], p);
                }
            }
        }
        // SAFETY: kb < k_blocks, records present (asserted above), F16 chosen from g.f16.
        let s = unsafe { scales::<F16>(g, kb) };
        for (r, acc_r) in acc.iter().enumerate() {
            finish_block(&mut total[r], *acc_r, &s, a.qscale[(r0 + r) * a.kb + kb]);
        }
    }
    store(&total, res);
}

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
