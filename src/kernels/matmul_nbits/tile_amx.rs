//! AMX int8 GEMM of one 32-column group (accuracy level 4, M > 1): every row of the call against
//! the group's weights, with the same integers and the same f32 epilogue as the VNNI tile
//! (`tile_avx512::i8_vnni_rows`), so its results are bit-identical to it.
//!
//! * B panel: the group's int4 codes are unpacked once per call into a per-lane scratch panel in
//!   AMX's B layout (K/4 rows of 16 columns x 4 consecutive k), one panel half per 16 columns.
//!   `pack`'s 64-byte chunk (4 k x 16 dword lanes, low nibble column i, high nibble column
//!   16 + i) is exactly one B row of each half: `v & 0x0F` and `(v >> 4) & 0x0F`. The zero point
//!   is subtracted there (`code - zp` in -15..=15, int8), so no `zp * sum(a)` term is needed.
//! * Tiles: C 2 x 2 (tmm0..3: rows 0..16 / 16..32 x columns 0..16 / 16..32), A tmm4/5 (16 rows
//!   of prepared int8 A each, stride `kp`), B tmm6/7 (the panel halves). K per tile is
//!   `min(block_size, 64)`: the int32 sums must stay per K block, so a tile never spans two
//!   blocks; larger blocks take several `tdpbssd` into the same C before the epilogue.
//! * Epilogue per block (AVX-512): C tiles stored, then per row and half
//!   `total += f32(c) * (scale * scale_a)`, exactly `finish_block` of the VNNI tile.
//!
//! Prepared A must hold its rows padded with zeros to a multiple of [`AMX_ROWS`] (`prepare_a`
//! does when the call takes this path): every A tile load reads 16 whole rows. Tile state is
//! configured on entry and released (`tilerelease`) before return, also on unwinding.

use std::arch::asm;
use std::arch::x86_64::*;
use std::ops::Range;

use super::dispatch::{amx_panel_len as panel_len, AMX_ROWS};
use super::pack::{GroupView, CHUNK_K, NR};
use super::prepare_a::PreparedA;
use super::tile_avx512::{scales, zero_point_bytes};

/// Rows of an A or C tile.
const TR: usize = 16;
/// Bytes of a B tile row (16 columns x 4 k) and of a C tile row (16 i32).
const ROW_BYTES: usize = 64;

/// `ldtilecfg`'s 64-byte operand, palette 1.
#[repr(C, align(64))]
struct TileCfg([u8; 64]);

impl TileCfg {
    /// C tiles 16 x 64 bytes, A tiles 16 x `kt` bytes, B tiles `kt / 4` x 64 bytes.
    fn new(kt: usize) -> TileCfg {
        let mut c = [0u8; 64];
        c[0] = 1;
        let shape = |c: &mut [u8; 64], t: usize, rows: usize, colsb: usize| {
            c[16 + 2 * t..18 + 2 * t].copy_from_slice(&(colsb as u16).to_le_bytes());
            c[48 + t] = rows as u8;
        };
        for t in 0..4 {
            shape(&mut c, t, TR, ROW_BYTES);
        }
        for t in 4..6 {
            shape(&mut c, t, TR, kt);
        }
        for t in 6..8 {
            shape(&mut c, t, kt / 4, ROW_BYTES);
        }
        TileCfg(c)
    }
}

/// Releases the tile state when dropped, so no return or unwind leaves it configured.
struct Tiles;

impl Tiles {
    /// Loads `cfg` into the tile configuration.
    ///
    /// # Safety
    /// AMX-TILE must be usable by this process (the `Amx` token).
    unsafe fn configure(cfg: &TileCfg) -> Tiles {
        // SAFETY: the caller's contract; `cfg` is a valid palette-1 configuration (rows <= 16,
        // colsb <= 64) of 64 readable bytes.
        unsafe { asm!("ldtilecfg [{0}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly)) };
        Tiles
    }
}

impl Drop for Tiles {
    fn drop(&mut self) {
        // SAFETY: a `Tiles` exists only after `configure` ran under the AMX contract, so
        // `tilerelease` is available; it only resets the tile state.
        unsafe { asm!("tilerelease", options(nostack, nomem)) };
    }
}

/// Unpacks group `g` into `panel` (see the module doc), zero points subtracted.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn unpack(g: &GroupView, panel: &mut [i32]) {
    let kp = g.k_blocks * g.block_size;
    assert!(panel.len() >= panel_len(kp) && g.complete());
    let half = kp / CHUNK_K * ROW_BYTES;
    let (mask, spread) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi32(0x0101_0101));
    let dst = panel.as_mut_ptr() as *mut u8;
    for kb in 0..g.k_blocks {
        // Zero points of the block, each spread over the 4 bytes of its lane.
        let z = zero_point_bytes(g, kb);
        let z_lo = _mm512_mullo_epi32(_mm512_and_si512(z, _mm512_set1_epi32(0x0F)), spread);
        let z_hi = _mm512_mullo_epi32(_mm512_srli_epi32::<4>(z), spread);
        for c in 0..g.block_size / CHUNK_K {
            let row = kb * g.block_size / CHUNK_K + c;
            let chunk = g.chunk(row * CHUNK_K);
            // SAFETY: `chunk` is the 64 code bytes of chunk `row` (a checked slice).
            let v = unsafe { _mm512_loadu_si512(chunk.as_ptr() as *const _) };
            let lo = _mm512_sub_epi8(_mm512_and_si512(v, mask), z_lo);
            let hi = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16::<4>(v), mask), z_hi);
            // SAFETY: B rows `row` of both halves end at `half + (row + 1) * 64 <= kp * 32`
            // bytes, inside the panel (asserted).
            unsafe {
                _mm512_storeu_si512(dst.add(row * ROW_BYTES) as *mut _, lo);
                _mm512_storeu_si512(dst.add(half + row * ROW_BYTES) as *mut _, hi);
            }
        }
    }
}

/// Four C tiles as stored by `tilestored`: `[tile][row][column]`.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct CBuf([[[i32; TR]; TR]; 4]);

/// Block `kb` of row tile `r0` into C tiles tmm0..2T (zeroed first): A tiles from prepared A,
/// B tiles from the panel (`half`: byte offset of the second half).
///
/// # Safety
/// As [`row_tile`].
#[inline(always)]
unsafe fn issue<const T: usize>(
    a: &PreparedA,
    r0: usize,
    kb: usize,
    bs: usize,
    kt: usize,
    b: *const u8,
    half: usize,
) {
    let kp = a.kp;
    // SAFETY: the caller's contract (tiles configured as `TileCfg::new(kt)`); the loads read,
    // for A, 16 rows of `kt` bytes at stride `kp` from row r0 (+16) column k0 (k0 + kt <= kp,
    // rows inside `a.q`), for B, `kt / 4` rows of 64 bytes from B row k0 / 4 of each half
    // (inside the panel).
    unsafe {
        asm!("tilezero tmm0", "tilezero tmm1", options(nostack, nomem));
        if T == 2 {
            asm!("tilezero tmm2", "tilezero tmm3", options(nostack, nomem));
        }
        for sub in 0..bs / kt {
            let k0 = kb * bs + sub * kt;
            let b0 = b.add(k0 / CHUNK_K * ROW_BYTES);
            asm!(
                "tileloadd tmm6, [{b0} + {s}*1]",
                "tileloadd tmm7, [{b1} + {s}*1]",
                b0 = in(reg) b0, b1 = in(reg) b0.add(half), s = in(reg) ROW_BYTES,
                options(nostack, readonly)
            );
            let a0 = a.q.as_ptr().add(r0 * kp + k0);
            asm!(
                "tileloadd tmm4, [{a0} + {s}*1]",
                "tdpbssd tmm0, tmm4, tmm6",
                "tdpbssd tmm1, tmm4, tmm7",
                a0 = in(reg) a0, s = in(reg) kp,
                options(nostack, readonly)
            );
            if T == 2 {
                asm!(
                    "tileloadd tmm5, [{a1} + {s}*1]",
                    "tdpbssd tmm2, tmm5, tmm6",
                    "tdpbssd tmm3, tmm5, tmm7",
                    a1 = in(reg) a0.add(TR * kp), s = in(reg) kp,
                    options(nostack, readonly)
                );
            }
        }
    }
}

/// Stores C tiles tmm0..2T into `cbuf`.
///
/// # Safety
/// Tiles configured as `TileCfg::new(_)` (C tiles 16 rows of 64 bytes).
#[inline(always)]
unsafe fn store<const T: usize>(cbuf: &mut CBuf) {
    let c = cbuf.0.as_mut_ptr();
    // SAFETY: the caller's contract; each store writes 16 rows of 64 bytes into its tile of
    // `cbuf` (1 KiB each).
    unsafe {
        asm!(
            "tilestored [{c0} + {s}*1], tmm0",
            "tilestored [{c1} + {s}*1], tmm1",
            c0 = in(reg) c, c1 = in(reg) c.add(1), s = in(reg) ROW_BYTES,
            options(nostack)
        );
        if T == 2 {
            asm!(
                "tilestored [{c2} + {s}*1], tmm2",
                "tilestored [{c3} + {s}*1], tmm3",
                c2 = in(reg) c.add(2), c3 = in(reg) c.add(3), s = in(reg) ROW_BYTES,
                options(nostack)
            );
        }
    }
}

/// `T` A tiles (16 rows each) from row `r0` against the panel over every block; per-row totals
/// into `total[..16 * T]`. Software pipelined: block kb's tile work is issued before block
/// kb - 1's epilogue (from the other C buffer), so the AVX-512 epilogue overlaps the tiles.
///
/// # Safety
/// Tiles configured by [`TileCfg::new`]`(kt)` under the AMX contract; `panel` unpacked for `g`
/// (`panel_len(kp)` i32); `a.q` and `a.qscale` hold rows `r0..r0 + 16 * T` (padding included).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma")]
unsafe fn row_tile<const T: usize, const F16: bool>(
    g: &GroupView,
    a: &PreparedA,
    r0: usize,
    kt: usize,
    panel: &[i32],
    total: &mut [[__m512; 2]; AMX_ROWS],
) {
    let bs = g.block_size;
    let half = a.kp / CHUNK_K * ROW_BYTES;
    let b = panel.as_ptr() as *const u8;
    let mut cbuf = [CBuf([[[0; TR]; TR]; 4]); 2];
    for kb in 0..=g.k_blocks {
        if kb < g.k_blocks {
            // Prefetch the next block's lines of A (each line serves 64 / bs blocks) and of
            // the panel. Addresses are only computed (wrapping), never dereferenced: a prefetch
            // never faults.
            let kn = (kb + 1) * bs;
            if kn < a.kp {
                if (kn % 64) < bs {
                    for r in 0..T * TR {
                        let p = a.q.as_ptr().wrapping_add((r0 + r) * a.kp + kn);
                        _mm_prefetch::<_MM_HINT_T0>(p);
                    }
                }
                for l in 0..(bs / CHUNK_K).div_ceil(1) {
                    let row = kn / CHUNK_K + l;
                    _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(row * ROW_BYTES) as *const i8);
                    _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(half + row * ROW_BYTES) as *const i8);
                }
            }
            // SAFETY: the caller's contract.
            unsafe { issue::<T>(a, r0, kb, bs, kt, b, half) };
        }
        if kb > 0 {
            let (kb, c) = (kb - 1, &cbuf[(kb - 1) % 2]);
            // SAFETY: kb < k_blocks; `group_i8` asserted the records present and picked F16
            // from g.f16.
            let s = unsafe { scales::<F16>(g, kb) };
            for i in 0..T {
                for rr in 0..TR {
                    let r = i * TR + rr;
                    let sa = _mm512_set1_ps(a.qscale[(r0 + r) * a.kb + kb]);
                    for h in 0..2 {
                        let row = &c.0[2 * i + h][rr];
                        // SAFETY: `row` is 16 readable i32.
                        let c = unsafe { _mm512_loadu_si512(row.as_ptr() as *const _) };
                        let ss = _mm512_mul_ps(s[h], sa);
                        total[r][h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c), ss, total[r][h]);
                    }
                }
            }
        }
        if kb < g.k_blocks {
            // SAFETY: the caller's contract.
            unsafe { store::<T>(&mut cbuf[kb % 2]) };
        }
    }
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma")]
unsafe fn group_rows<const F16: bool>(
    g: &GroupView,
    a: &PreparedA,
    rows: Range<usize>,
    panel: &[i32],
    emit: &mut dyn FnMut(usize, &[f32; NR]),
) {
    let kt = g.block_size.min(64);
    // SAFETY: the caller's contract (AMX usable).
    let _tiles = unsafe { Tiles::configure(&TileCfg::new(kt)) };
    let mut r0 = rows.start;
    while r0 < rows.end {
        let nr = (rows.end - r0).min(AMX_ROWS);
        let mut total = [[_mm512_setzero_ps(); 2]; AMX_ROWS];
        // SAFETY: tiles configured for `kt` above; the panel and A sizes were checked by
        // `group_i8` (rows r0 .. r0 + 32 exist, padding included).
        unsafe {
            if nr > TR {
                row_tile::<2, F16>(g, a, r0, kt, panel, &mut total);
            } else {
                row_tile::<1, F16>(g, a, r0, kt, panel, &mut total);
            }
        }
        let mut out = [0f32; NR];
        for (r, t) in total.iter().enumerate().take(nr) {
            let (lo, hi) = out.split_at_mut(16);
            // SAFETY: both halves are 16 writable floats.
            unsafe {
                _mm512_storeu_ps(lo.as_mut_ptr(), t[0]);
                _mm512_storeu_ps(hi.as_mut_ptr(), t[1]);
            }
            emit(r0 + r, &out);
        }
        r0 += nr;
    }
}

/// Rows `rows` (starting at a multiple of [`AMX_ROWS`]) of prepared A against group `g`:
/// `emit(row, results)` per row, results without bias. `panel` is scratch of at least
/// `amx_scratch_len(kp)` elements (contents on entry unused).
///
/// # Safety
/// AMX int8 must be usable by this process (the `Amx` token), with the AVX-512 F/BW/DQ/VL + FMA
/// level; everything else is checked here.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma")]
pub(crate) unsafe fn group_i8(
    g: &GroupView,
    a: &PreparedA,
    rows: Range<usize>,
    panel: &mut [i32],
    emit: &mut dyn FnMut(usize, &[f32; NR]),
) {
    let kp = g.k_blocks * g.block_size;
    assert!(g.complete() && a.kp == kp && a.kb == g.k_blocks);
    assert!(rows.start.is_multiple_of(AMX_ROWS) && rows.start <= rows.end);
    // Whole row tiles of A (padding rows included) for every tile load.
    let padded = rows.end.next_multiple_of(AMX_ROWS);
    assert!(a.q.len() >= padded * kp && a.qscale.len() >= padded * a.kb);
    // The panel from its first 64-byte boundary (a 4-byte aligned pointer reaches one within
    // 16 elements).
    let at = panel.as_ptr().align_offset(64).min(16);
    assert!(panel.len() >= at + panel_len(kp));
    let panel = &mut panel[at..at + panel_len(kp)];
    unpack(g, panel);
    let panel = &*panel;
    // SAFETY: the caller's contract; sizes asserted above (and by `unpack`).
    unsafe {
        if g.f16 {
            group_rows::<true>(g, a, rows, panel, emit)
        } else {
            group_rows::<false>(g, a, rows, panel, emit)
        }
    }
}
