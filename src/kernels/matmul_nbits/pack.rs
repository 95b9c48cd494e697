//! The prepacked weight layout every tile kernel (scalar, AVX2, AVX-512, VNNI) reads.
//!
//! Columns are taken in groups of [`NR`] = 16 (one AVX-512 register of f32 / i32 lanes; two AVX2
//! registers). Tail columns are padded with code 0, scale 0 and zero point 0, so they produce 0.
//! Per group, everything a kernel streams is contiguous:
//!
//! * `weights`: `[group][block][chunk of 8 k][64 bytes]`, `block_size / 8` chunks per block.
//!   In a chunk starting at k0, byte `4 * col + j` (j in 0..4) holds the code of (k0 + j, col) in
//!   its low nibble and the code of (k0 + 4 + j, col) in its high nibble. So one 64-byte load is
//!   16 dword lanes, one per column: `& 0x0F` gives four consecutive k per lane (the u8 operand of
//!   `vpdpbusd` / `vpmaddubsw`), `>> 4 & 0x0F` the next four; for fp32, `>> 8j & 0x0F` gives k0 + j.
//!   k beyond K (tail of the last block) holds code 0; callers pad A with zeros there.
//! * `scales`: `[group][block][16]` f32.
//! * `zero_points` (only when the node has them): `[group][block][16]` u8, one per byte; absent
//!   means 8 everywhere.
//!
//! Zero points are applied per block through the sum of A over the block, never per element
//! (see the kernels), so no `-zp*scale` table is stored: it would add as many bytes as the scales.

use super::params::NBitsParams;
use super::reference::weight_code;
use crate::memory::AlignedBuf;

/// Columns per group.
pub const NR: usize = 16;

/// A MatMulNBits weight rearranged for the tile kernels.
#[derive(Debug, Clone)]
pub struct PackedNBits {
    pub(crate) params: NBitsParams,
    /// 64-byte aligned (as is every group inside it: group sizes are multiples of 64 bytes),
    /// so no 64-byte weight or scale load of the kernels straddles two cache lines.
    pub(crate) weights: AlignedBuf<u8>,
    pub(crate) scales: AlignedBuf<f32>,
    pub(crate) zero_points: Option<AlignedBuf<u8>>,
}

/// One column group's slices, as the kernels see them.
#[derive(Debug, Clone, Copy)]
pub struct GroupView<'a> {
    /// `k_blocks * block_size * 8` bytes.
    pub w: &'a [u8],
    /// `k_blocks * 16` scales.
    pub scales: &'a [f32],
    /// `k_blocks * 16` zero points, or `None` for 8.
    pub zps: Option<&'a [u8]>,
    pub k_blocks: usize,
    pub block_size: usize,
}

/// Packed weight bytes per column group.
pub(crate) fn group_weight_bytes(p: &NBitsParams) -> usize {
    p.k_blocks() * p.block_size * NR / 2
}

/// Number of column groups for N columns.
pub(crate) fn groups(p: &NBitsParams) -> usize {
    p.n.div_ceil(NR)
}

impl PackedNBits {
    /// The node parameters this weight was packed for.
    pub fn params(&self) -> &NBitsParams {
        &self.params
    }

    /// Heap bytes really held.
    pub fn bytes(&self) -> usize {
        self.weights.held_bytes()
            + self.scales.held_bytes()
            + self.zero_points.as_ref().map_or(0, |z| z.held_bytes())
    }

    /// The slices of column group `g`.
    pub fn group(&self, g: usize) -> GroupView<'_> {
        let p = &self.params;
        let (wb, sb) = (group_weight_bytes(p), p.k_blocks() * NR);
        GroupView {
            w: &self.weights.as_slice()[g * wb..(g + 1) * wb],
            scales: &self.scales.as_slice()[g * sb..(g + 1) * sb],
            zps: self
                .zero_points
                .as_ref()
                .map(|z| &z.as_slice()[g * sb..(g + 1) * sb]),
            k_blocks: p.k_blocks(),
            block_size: p.block_size,
        }
    }
}

/// Packs B / scales / zero_points (ORT layout) for `p`. Sizes must have passed
/// [`NBitsParams::check_sizes`]; panics otherwise.
pub fn pack(b: &[u8], scales: &[f32], zero_points: Option<&[u8]>, p: &NBitsParams) -> PackedNBits {
    p.check_sizes(b.len(), scales.len(), zero_points.map(|z| z.len()), None)
        .unwrap_or_else(|e| panic!("{e}"));
    let g_count = groups(p);
    let (wb, sb) = (group_weight_bytes(p), p.k_blocks() * NR);
    let mut weights = AlignedBuf::<u8>::zeroed(g_count * wb);
    let mut sc = AlignedBuf::<f32>::zeroed(g_count * sb);
    let mut zps = zero_points.map(|_| AlignedBuf::<u8>::zeroed(g_count * sb));
    for g in 0..g_count {
        pack_group(
            b,
            scales,
            zero_points,
            p,
            g,
            &mut weights.as_mut_slice()[g * wb..(g + 1) * wb],
            &mut sc.as_mut_slice()[g * sb..(g + 1) * sb],
            zps.as_mut()
                .map(|z| &mut z.as_mut_slice()[g * sb..(g + 1) * sb]),
        );
    }
    PackedNBits {
        params: *p,
        weights,
        scales: sc,
        zero_points: zps,
    }
}

/// Packs column group `g` into the given (zeroed or stale) slices; every byte is written.
///
/// Chunk `i` of a group covers k = 8i..8i+8 and is dword `i` of each column's row of B (blocks
/// are multiples of 8 long), so packing is a 16-way dword transpose with a lane-local nibble
/// shuffle ([`shuffle_chunk`]); only the chunk that straddles K goes element by element.
#[allow(clippy::too_many_arguments)]
pub(crate) fn pack_group(
    b: &[u8],
    scales: &[f32],
    zero_points: Option<&[u8]>,
    p: &NBitsParams,
    g: usize,
    w_out: &mut [u8],
    s_out: &mut [f32],
    mut z_out: Option<&mut [u8]>,
) {
    let kbs = p.k_blocks();
    let row_bytes = kbs * p.blob_bytes();
    let cols = p.n.saturating_sub(g * NR).min(NR);
    let zrb = p.zp_row_bytes();
    for col in 0..NR {
        let n = g * NR + col;
        let real = col < cols;
        let srow = if real {
            &scales[n * kbs..(n + 1) * kbs]
        } else {
            &[][..]
        };
        for kb in 0..kbs {
            s_out[kb * NR + col] = if real { srow[kb] } else { 0.0 };
        }
        if let Some(z) = z_out.as_deref_mut() {
            for kb in 0..kbs {
                z[kb * NR + col] = match zero_points {
                    Some(zp) if real => (zp[n * zrb + kb / 2] >> (4 * (kb % 2))) & 0x0F,
                    _ => 0,
                };
            }
        }
    }
    let chunks = kbs * p.block_size / 8;
    let full = p.k / 8;
    // Full chunks of real columns: one column at a time, reading its row of B sequentially.
    for col in 0..cols {
        let n = g * NR + col;
        let row = &b[n * row_bytes..n * row_bytes + 4 * full];
        for (x, out) in row.chunks_exact(4).zip(w_out.chunks_exact_mut(4 * NR)) {
            let v = shuffle_chunk(u32::from_le_bytes(x.try_into().unwrap()));
            out[4 * col..4 * col + 4].copy_from_slice(&v.to_le_bytes());
        }
    }
    // Padding columns, the chunk straddling K (codes past K are padding, written as 0) and
    // chunks past K.
    for (i, out) in w_out.chunks_exact_mut(4 * NR).enumerate().take(chunks) {
        let first_col = if i < full { cols } else { 0 };
        for (col, d) in out.chunks_exact_mut(4).enumerate().skip(first_col) {
            let v = if col < cols && 8 * i < p.k {
                let n = g * NR + col;
                let code = |k: usize| {
                    if k < p.k {
                        weight_code(b, p, k, n) as u32
                    } else {
                        0
                    }
                };
                (0..4).fold(0, |acc, j| {
                    acc | (code(8 * i + j) | code(8 * i + 4 + j) << 4) << (8 * j)
                })
            } else {
                0
            };
            d.copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// One chunk from ORT order (byte j = codes k0+2j low, k0+2j+1 high) to packed order
/// (byte j = codes k0+j low, k0+4+j high).
#[inline]
fn shuffle_chunk(x: u32) -> u32 {
    let lo = x & 0x0F0F_0F0F; // codes k0, k0+2, k0+4, k0+6
    let hi = (x >> 4) & 0x0F0F_0F0F; // codes k0+1, k0+3, k0+5, k0+7
    let first = (lo & 0xFF) | ((hi & 0xFF) << 8) | ((lo & 0xFF00) << 8) | ((hi & 0xFF00) << 16);
    let second =
        ((lo >> 16) & 0xFF) | ((hi >> 8) & 0xFF00) | ((lo >> 8) & 0xFF_0000) | (hi & 0xFF00_0000);
    first | (second << 4)
}
