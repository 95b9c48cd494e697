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
use super::reference::{weight_code, zero_point};

/// Columns per group.
pub const NR: usize = 16;

/// A MatMulNBits weight rearranged for the tile kernels.
#[derive(Debug, Clone)]
pub struct PackedNBits {
    pub(crate) params: NBitsParams,
    pub(crate) weights: Vec<u8>,
    pub(crate) scales: Vec<f32>,
    pub(crate) zero_points: Option<Vec<u8>>,
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
        self.weights.capacity()
            + self.scales.capacity() * std::mem::size_of::<f32>()
            + self.zero_points.as_ref().map_or(0, |z| z.capacity())
    }

    /// The slices of column group `g`.
    pub fn group(&self, g: usize) -> GroupView<'_> {
        let p = &self.params;
        let (wb, sb) = (group_weight_bytes(p), p.k_blocks() * NR);
        GroupView {
            w: &self.weights[g * wb..(g + 1) * wb],
            scales: &self.scales[g * sb..(g + 1) * sb],
            zps: self.zero_points.as_ref().map(|z| &z[g * sb..(g + 1) * sb]),
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
    let mut weights = vec![0u8; g_count * wb];
    let mut sc = vec![0f32; g_count * sb];
    let mut zps = zero_points.map(|_| vec![0u8; g_count * sb]);
    for g in 0..g_count {
        pack_group(
            b,
            scales,
            zero_points,
            p,
            g,
            &mut weights[g * wb..(g + 1) * wb],
            &mut sc[g * sb..(g + 1) * sb],
            zps.as_mut().map(|z| &mut z[g * sb..(g + 1) * sb]),
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
    let (kbs, bs, blob) = (p.k_blocks(), p.block_size, p.blob_bytes());
    let chunk_bytes = NR * 4;
    for col in 0..NR {
        let n = g * NR + col;
        for kb in 0..kbs {
            let so = kb * NR + col;
            if n >= p.n {
                s_out[so] = 0.0;
                if let Some(z) = z_out.as_deref_mut() {
                    z[so] = 0;
                }
                for c in 0..bs / 8 {
                    let o = (kb * bs / 8 + c) * chunk_bytes + 4 * col;
                    w_out[o..o + 4].fill(0);
                }
                continue;
            }
            s_out[so] = scales[n * kbs + kb];
            if let Some(z) = z_out.as_deref_mut() {
                z[so] = zero_point(zero_points, p, n, kb);
            }
            let src = &b[(n * kbs + kb) * blob..(n * kbs + kb + 1) * blob];
            let base = kb * bs / 8 * chunk_bytes + 4 * col;
            // Chunks entirely inside K: 4 source bytes (pairs (k0,k0+1) .. (k0+6,k0+7), low
            // nibble first) -> 4 packed bytes (k0+j low, k0+4+j high).
            let full = (p.k.saturating_sub(kb * bs) / 8).min(bs / 8);
            for (c, s) in src.chunks_exact(4).take(full).enumerate() {
                let o = base + c * chunk_bytes;
                let d: &mut [u8; 4] = (&mut w_out[o..o + 4]).try_into().unwrap();
                *d = [
                    (s[0] & 0x0F) | (s[2] << 4),
                    (s[0] >> 4) | (s[2] & 0xF0),
                    (s[1] & 0x0F) | (s[3] << 4),
                    (s[1] >> 4) | (s[3] & 0xF0),
                ];
            }
            for c in full..bs / 8 {
                let k0 = kb * bs + c * 8;
                let o = base + c * chunk_bytes;
                let code = |k: usize| if k < p.k { weight_code(b, p, k, n) } else { 0 };
                for j in 0..4 {
                    w_out[o + j] = code(k0 + j) | (code(k0 + 4 + j) << 4);
                }
            }
        }
    }
}
