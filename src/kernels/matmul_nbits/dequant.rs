//! The f32 route for many rows (accuracy levels 0..3 from [`DEQUANT_MIN_M`] rows, 16 on the
//! AVX-512 tables): each task of
//! the f32 GEMM's blocked driver dequantizes its `KC x NC` slice of the weight into the GEMM's
//! B panels, `W[k][n] = (q - zp) * scale` in f32, and runs the f32 micro-kernels over all its
//! rows (`gemm::gemm_panels`).
//!
//! Why: the f32 tile kernel expands each code to f32 again for every [`MR`](super::MR) rows and
//! holds a block's dot products apart from the running totals, so on AVX2 its registers spill
//! and it runs at about 40% of the FMA peak (18 GMAC/s a core on a 2.4 GHz EPYC against 41 for
//! the f32 GEMM, `examples/matmul_nbits_rates.rs` and `examples/sgemm_timing.rs`). Dequantizing
//! a slice costs a few operations a weight once per task, which the GEMM's rows amortise; below
//! [`DEQUANT_MIN_M`] rows the tile kernel is faster. This is also how ORT computes these levels
//! for a prompt (dequantize, then SGEMM), so its answers sit as close to ORT's as the tile's.
//!
//! A weight is dequantized from its packed groups ([`PackedPanels`], the table's
//! [`DequantFn`]: SIMD where there is one) or straight from ORT's layout ([`UnpackedPanels`],
//! scalar: packing was declined, which is rare). Both compute `(q as f32 - zp as f32) * scale`
//! with the same f32 scale (f16 source scales widen exactly), so the two give the same panels
//! and the GEMM the same answers, bit for bit.

use super::dispatch::Kernels;
use super::pack::{GroupView, PackedNBits, CHUNK_BYTES, CHUNK_K, LANES, NR};
use super::params::{NBitsParams, NBitsWeight};
use super::reference::{weight_code, zero_point};
use crate::kernels::gemm::{gemm_panels, PanelSource, Sgemm};
use crate::kernels::simd::Level;
use crate::runtime::par::Par;

/// Rows from which an f32-level call dequantizes into the GEMM's panels on the scalar and AVX2
/// tables (their `dequant_min_m`; [`Kernels::with_dequant_min_m`] moves it for measurements).
/// `examples/matmul_nbits_dequant.rs` (one thread, thread CPU time, 2.4 GHz AVX2 EPYC; tile /
/// dequantizing time, median of 5 interleaved rounds) at gpt-oss's expert shapes and Qwen2-0.5B's
/// MLP: 0.63-0.77 at 4 rows, 0.81-0.95 at 8, 1.31-1.45 at 12, 1.58-1.65 at 24, 1.77-1.87 at 64.
pub(crate) const DEQUANT_MIN_M: usize = 12;
/// The AVX-512 tables' row count: their f32 tile has 32 registers and does not spill, so the
/// crossover lies higher; not measured on an AVX-512 host yet, kept at a row count where the
/// AVX2 measurement already favours the GEMM by a third.
pub(crate) const DEQUANT_MIN_M_AVX512: usize = 16;

/// Zero point and scale of each column of one block of a group, as f32 (column `c` of a 4-bit
/// group: lane `c % 16`, nibble `c / 16`; of an 8-bit group, `c < 16`: lane `c`, whole byte).
#[derive(Clone, Copy)]
pub(crate) struct BlockConsts {
    pub zp: [f32; NR],
    pub scale: [f32; NR],
}

/// A dequantizing kernel: `rows` rows (k) of one block's codes from the first chunk of `codes`
/// (whole chunks of [`CHUNK_BYTES`]), column block `b` (8 columns: `8b..8b + 8`) written where
/// `dst[b]` says (`Some(at)`: row `r`'s 8 values at `out[at + r * ld..][..8]`; `None`: skipped).
/// `bits8`: an 8-bit group (two column blocks). Each value is `(q - zp) * scale` in f32.
pub(crate) type DequantFn =
    fn(Level, &[u8], usize, &BlockConsts, &[Option<usize>; 4], usize, bool, &mut [f32]);

/// The scalar kernel ([`DequantFn`]).
pub(crate) fn dequant_scalar(
    codes: &[u8],
    rows: usize,
    c: &BlockConsts,
    dst: &[Option<usize>; 4],
    ld: usize,
    bits8: bool,
    out: &mut [f32],
) {
    for r in 0..rows {
        let chunk = &codes[(r / CHUNK_K) * CHUNK_BYTES..][..CHUNK_BYTES];
        let j = r % CHUNK_K;
        for (b, at) in dst.iter().enumerate() {
            let Some(at) = *at else { continue };
            let row = &mut out[at + r * ld..][..8];
            for (i, o) in row.iter_mut().enumerate() {
                let col = 8 * b + i;
                let q = code(chunk, j, col, bits8);
                *o = (q as f32 - c.zp[col]) * c.scale[col];
            }
        }
    }
}

/// The code of (row `j` of a chunk, column `col`) in the packed layout (`pack`, `bits8`).
fn code(chunk: &[u8], j: usize, col: usize, bits8: bool) -> u8 {
    if bits8 {
        chunk[4 * col + j]
    } else {
        (chunk[4 * (col % LANES) + j] >> (4 * (col / LANES))) & 0x0F
    }
}

/// The constants of block `kb` of group `g` (`bits8`: an 8-bit group).
fn block_consts(g: &GroupView, kb: usize, bits8: bool) -> BlockConsts {
    let mut c = BlockConsts {
        zp: [0.0; NR],
        scale: [0.0; NR],
    };
    let cols = if bits8 { LANES } else { NR };
    for col in 0..cols {
        let lane = col % LANES;
        let byte = g.zps.map_or(g.absent_zp, |z| z[kb * LANES + lane]);
        let zp = if bits8 {
            byte
        } else {
            (byte >> (4 * (col / LANES))) & 0x0F
        };
        c.zp[col] = zp as f32;
        c.scale[col] = g.scale(kb, col);
    }
    c
}

/// Rows `k0..k0 + kc` (`k0` a multiple of [`CHUNK_K`]) of group `g` into `out`, column block `b`
/// of row `k0 + r` at `dst[b] + r * ld` (see [`DequantFn`]), block by block.
#[allow(clippy::too_many_arguments)]
fn dequant_rows(
    kernel: DequantFn,
    lv: Level,
    g: &GroupView,
    bits8: bool,
    k0: usize,
    kc: usize,
    dst: &[Option<usize>; 4],
    ld: usize,
    out: &mut [f32],
) {
    assert!(k0.is_multiple_of(CHUNK_K));
    let bs = g.block_size;
    let (mut k, end) = (k0, k0 + kc);
    while k < end {
        let kb = k / bs;
        let piece = ((kb + 1) * bs).min(end) - k;
        let consts = block_consts(g, kb, bits8);
        let first = g.block_at(kb) + (k % bs) / CHUNK_K * CHUNK_BYTES;
        let codes = &g.rec[first..g.block_at(kb) + g.code_bytes()];
        let shifted = dst.map(|d| d.map(|at| at + (k - k0) * ld));
        kernel(lv, codes, piece, &consts, &shifted, ld, bits8, out);
        k += piece;
    }
}

/// Where column block `b` (8 columns) of group `g` (of `gc` columns) lands in a fill of
/// columns `j0..j0 + width` in `nr`-wide panels of `kc` rows: `None` outside the window.
fn destinations(
    g: usize,
    gc: usize,
    j0: usize,
    width: usize,
    nr: usize,
    kc: usize,
) -> [Option<usize>; 4] {
    std::array::from_fn(|b| {
        let col = g * gc + 8 * b;
        (8 * b < gc && (j0..j0 + width).contains(&col)).then(|| {
            let w = col - j0;
            (w / nr) * kc * nr + w % nr
        })
    })
}

/// A packed weight as the f32 GEMM's B (`K x N`, `B[k][n] = W[n][k]`), dequantized group by
/// group with the table's kernel.
pub(crate) struct PackedPanels<'a> {
    pub kernel: DequantFn,
    pub lv: Level,
    pub pk: &'a PackedNBits,
}

impl PanelSource for PackedPanels<'_> {
    fn fill(&self, pc: usize, kc: usize, j0: usize, nc: usize, nr: usize, out: &mut [f32]) {
        let p = &self.pk.params;
        let bits8 = p.bits == 8;
        let gc = super::pack::group_cols(p);
        // The panels end at j0 + nc rounded up to `nr`. Their columns lie inside a group
        // (padding columns compute 0 there), except past the last 16-column group of an 8-bit
        // weight under 32-wide panels: those are zeroed below.
        let width = nc.next_multiple_of(nr);
        let last = super::pack::groups(p);
        for g in j0 / gc..(j0 + width).div_ceil(gc).min(last) {
            let dst = destinations(g, gc, j0, width, nr, kc);
            let view = self.pk.group(g);
            dequant_rows(self.kernel, self.lv, &view, bits8, pc, kc, &dst, nr, out);
        }
        // Panel columns past the last group (8-bit groups are 16 columns, panels up to 32).
        for w in (last * gc).saturating_sub(j0)..width {
            let at = (w / nr) * kc * nr + w % nr;
            (0..kc).for_each(|kk| out[at + kk * nr] = 0.0);
        }
    }
}

/// An unpacked weight (ORT's layout) as the f32 GEMM's B, dequantized element by element.
pub(crate) struct UnpackedPanels<'a> {
    pub w: NBitsWeight<'a>,
}

impl PanelSource for UnpackedPanels<'_> {
    fn fill(&self, pc: usize, kc: usize, j0: usize, nc: usize, nr: usize, out: &mut [f32]) {
        let w = &self.w;
        let p = w.p;
        let kbs = p.k_blocks();
        for (q, panel) in out.chunks_mut(kc * nr).take(nc.div_ceil(nr)).enumerate() {
            let jq = j0 + q * nr;
            let cols = nr.min(nc - q * nr);
            for kk in 0..kc {
                let (k, row) = (pc + kk, &mut panel[kk * nr..(kk + 1) * nr]);
                let kb = k / p.block_size;
                for (c, o) in row[..cols].iter_mut().enumerate() {
                    let n = jq + c;
                    let zp = zero_point(w.zero_points, p, n, kb) as f32;
                    let q = weight_code(w.b, p, k, n) as f32;
                    *o = (q - zp) * w.scales[n * kbs + kb];
                }
                row[cols..].fill(0.0);
            }
        }
    }
}

/// `out = a W (+ bias)` for `m` rows through the f32 GEMM over `src`'s panels (weights of `p`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    kernels: &Kernels,
    a: &[f32],
    m: usize,
    p: &NBitsParams,
    src: &dyn PanelSource,
    bias: Option<&[f32]>,
    out: &mut [f32],
    par: &dyn Par,
) -> Result<(), String> {
    let call = Sgemm::new(m, p.n, p.k, &a[..m * p.k]).par(par);
    gemm_panels(kernels.isa, &call, src, &mut out[..m * p.n])?;
    if let Some(b) = bias {
        for row in out[..m * p.n].chunks_exact_mut(p.n) {
            row.iter_mut().zip(b).for_each(|(y, &b)| *y += b);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::isa::Isa;

    /// Every table's kernel writes the scalar kernel's bits: 4- and 8-bit groups, every row
    /// count of a 64-deep block (partial last chunks included), every subset of the column
    /// blocks, panel widths 8, 16 and 32, f32 zero points and scales of both signs. Seen
    /// failing with the AVX2 kernel's high-nibble shift dropped.
    #[test]
    fn every_table_matches_the_scalar_kernel() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let codes: Vec<u8> = (0..16 * CHUNK_BYTES).map(|_| next() as u8).collect();
        let mut c = BlockConsts {
            zp: [0.0; NR],
            scale: [0.0; NR],
        };
        for col in 0..NR {
            c.zp[col] = (next() % 256) as f32;
            c.scale[col] = (next() % 2001) as f32 / 1000.0 - 1.0;
        }
        let isas = [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni];
        let tables: Vec<&Kernels> = isas
            .iter()
            .filter_map(|&i| Kernels::for_isa(i).ok())
            .collect();
        for bits8 in [false, true] {
            for ld in [8, 16, 32] {
                for mask in 1..16u32 {
                    let dst: [Option<usize>; 4] =
                        std::array::from_fn(|b| (mask >> b & 1 != 0).then_some(b * 64 * ld));
                    let dst = if bits8 {
                        [dst[0], dst[1], None, None]
                    } else {
                        dst
                    };
                    for rows in 1..=64 {
                        let len = 4 * 64 * ld;
                        let mut want = vec![f32::NAN; len];
                        dequant_scalar(&codes, rows, &c, &dst, ld, bits8, &mut want);
                        for t in &tables {
                            let lv = Level::require(t.isa).unwrap();
                            let mut got = vec![f32::NAN; len];
                            (t.dequant)(lv, &codes, rows, &c, &dst, ld, bits8, &mut got);
                            let same = got
                                .iter()
                                .zip(&want)
                                .all(|(x, y)| x.to_bits() == y.to_bits());
                            assert!(
                                same,
                                "{} bits8={bits8} ld={ld} mask={mask} rows={rows}",
                                t.isa.name()
                            );
                        }
                    }
                }
            }
        }
    }
}
