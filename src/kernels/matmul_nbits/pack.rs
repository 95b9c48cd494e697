//! The prepacked weight layout every tile kernel (scalar, AVX2, AVX-512, VNNI) reads.
//!
//! Columns are taken in groups of [`NR`] = 32: one AVX-512 register of 16 dword lanes, where
//! lane `i` carries column `i` in the low nibbles of its bytes and column `16 + i` in the high
//! nibbles. Tail columns are padded with code 0, scale 0 and zero point 0, so they produce 0.
//! Per group, everything a kernel streams is contiguous:
//!
//! * `weights`: `[group][block][chunk of 4 k][64 bytes]`, `block_size / 4` chunks per block.
//!   In a chunk starting at k0, byte `4 * i + j` (lane i in 0..16, j in 0..4) holds the code of
//!   (k0 + j, column i) in its low nibble and the code of (k0 + j, column 16 + i) in its high
//!   nibble. One 64-byte load is 16 dword lanes of four consecutive k, and both nibbles of a
//!   byte meet the same A value. That is what the int8 kernels exploit: with `lo = v & 0x0F`,
//!   `vpdpbusd(lo, a)` is the dot of columns 0..16 and `vpdpbusd(v, a)` (no mask) is that plus
//!   16 times the dot of columns 16..32, so one mask and one A broadcast serve 32 columns
//!   (before: one mask per nibble and an A broadcast per 4 k of 16 columns). fp32 extracts
//!   `(v >> 8j) & 0x0F` and `(v >> 8j + 4) & 0x0F` for k0 + j.
//!   k beyond K (tail of the last block) holds code 0; callers pad A with zeros there.
//! * `scales`: `[group][block][32]` f32.
//! * `zero_points` (only when the node has them): `[group][block][16]` u8, byte `i` = zero point
//!   of column i (low nibble) and of column 16 + i (high nibble), like the weights; absent means
//!   8 everywhere.
//!
//! Zero points are applied per block through the sum of A over the block, never per element
//! (see the kernels), so no `-zp*scale` table is stored: it would add as many bytes as the scales.

use super::params::NBitsParams;
use super::reference::weight_code;
use crate::memory::AlignedBuf;

/// Columns per group.
pub const NR: usize = 32;
/// Dword lanes per chunk (each lane carries two columns, one per nibble).
pub(crate) const LANES: usize = NR / 2;
/// k per 64-byte chunk.
pub(crate) const CHUNK_K: usize = 4;

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
    /// `k_blocks * block_size * 16` bytes.
    pub w: &'a [u8],
    /// `k_blocks * 32` scales.
    pub scales: &'a [f32],
    /// `k_blocks * 16` zero-point bytes (two columns each), or `None` for 8.
    pub zps: Option<&'a [u8]>,
    pub k_blocks: usize,
    pub block_size: usize,
}

/// Packed weight bytes per column group.
pub(crate) fn group_weight_bytes(p: &NBitsParams) -> usize {
    p.k_blocks() * p.block_size * NR / 2
}

/// Zero-point bytes per column group.
pub(crate) fn group_zp_bytes(p: &NBitsParams) -> usize {
    p.k_blocks() * LANES
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

    /// The packed weight codes (all groups), e.g. for streaming diagnostics.
    pub fn weight_bytes(&self) -> &[u8] {
        self.weights.as_slice()
    }

    /// The slices of column group `g`.
    pub fn group(&self, g: usize) -> GroupView<'_> {
        let p = &self.params;
        let (wb, sb, zb) = (group_weight_bytes(p), p.k_blocks() * NR, group_zp_bytes(p));
        GroupView {
            w: &self.weights.as_slice()[g * wb..(g + 1) * wb],
            scales: &self.scales.as_slice()[g * sb..(g + 1) * sb],
            zps: self
                .zero_points
                .as_ref()
                .map(|z| &z.as_slice()[g * zb..(g + 1) * zb]),
            k_blocks: p.k_blocks(),
            block_size: p.block_size,
        }
    }
}

/// Packed weights below which [`pack`] stays on the calling thread.
const PARALLEL_PACK_MIN_BYTES: usize = 4 << 20;

/// Packs B / scales / zero_points (ORT layout) for `p`. Sizes must have passed
/// [`NBitsParams::check_sizes`]; panics otherwise. Weights of at least 4 MiB packed are split
/// over one thread per physical core (see [`pack_threads`]).
pub fn pack(b: &[u8], scales: &[f32], zero_points: Option<&[u8]>, p: &NBitsParams) -> PackedNBits {
    try_pack(b, scales, zero_points, p).expect("MatMulNBits pack: out of memory")
}

/// [`pack`], or `None` when the packed buffers cannot be allocated (the caller then computes
/// from the original weight).
pub fn try_pack(
    b: &[u8],
    scales: &[f32],
    zero_points: Option<&[u8]>,
    p: &NBitsParams,
) -> Option<PackedNBits> {
    let threads = if groups(p) * group_weight_bytes(p) >= PARALLEL_PACK_MIN_BYTES {
        crate::runtime::lanes::default_threads()
    } else {
        1
    };
    try_pack_threads(b, scales, zero_points, p, threads)
}

/// [`pack`] on `threads` threads (the caller and `threads - 1` scoped threads, which end
/// before this returns: load-time work leaves no idle threads behind). Every group is packed
/// by the same code whatever the split, so the result does not depend on `threads`.
pub fn pack_threads(
    b: &[u8],
    scales: &[f32],
    zero_points: Option<&[u8]>,
    p: &NBitsParams,
    threads: usize,
) -> PackedNBits {
    try_pack_threads(b, scales, zero_points, p, threads).expect("MatMulNBits pack: out of memory")
}

/// [`pack_threads`], `None` when the packed buffers cannot be allocated.
pub fn try_pack_threads(
    b: &[u8],
    scales: &[f32],
    zero_points: Option<&[u8]>,
    p: &NBitsParams,
    threads: usize,
) -> Option<PackedNBits> {
    p.check_sizes(b.len(), scales.len(), zero_points.map(|z| z.len()), None)
        .unwrap_or_else(|e| panic!("{e}"));
    let g_count = groups(p);
    let (wb, sb, zb) = (group_weight_bytes(p), p.k_blocks() * NR, group_zp_bytes(p));
    let mut weights = AlignedBuf::<u8>::try_zeroed(g_count * wb).ok()?;
    let mut sc = AlignedBuf::<f32>::try_zeroed(g_count * sb).ok()?;
    let mut zps = match zero_points {
        Some(_) => Some(AlignedBuf::<u8>::try_zeroed(g_count * zb).ok()?),
        None => None,
    };
    // Packs groups g0.. into the given slices (which start at group g0).
    let run = |g0: usize, w: &mut [u8], s: &mut [f32], mut z: Option<&mut [u8]>| {
        for (i, (w, s)) in w
            .chunks_exact_mut(wb)
            .zip(s.chunks_exact_mut(sb))
            .enumerate()
        {
            let z = z.as_deref_mut().map(|z| &mut z[i * zb..(i + 1) * zb]);
            pack_group(b, scales, zero_points, p, g0 + i, w, s, z);
        }
    };
    let per = g_count.div_ceil(threads.clamp(1, g_count.max(1)));
    std::thread::scope(|scope| {
        let mut w_rest = weights.as_mut_slice();
        let mut s_rest = sc.as_mut_slice();
        let mut z_rest = zps.as_mut().map(|z| z.as_mut_slice());
        let mut g0 = 0;
        while g0 < g_count {
            let n = per.min(g_count - g0);
            let (w, wr) = std::mem::take(&mut w_rest).split_at_mut(n * wb);
            let (s, sr) = std::mem::take(&mut s_rest).split_at_mut(n * sb);
            let (z, zr) = match z_rest.take() {
                Some(z) => {
                    let (z, zr) = z.split_at_mut(n * zb);
                    (Some(z), Some(zr))
                }
                None => (None, None),
            };
            (w_rest, s_rest, z_rest) = (wr, sr, zr);
            if g0 + n == g_count {
                // The last share runs on the calling thread.
                run(g0, w, s, z);
            } else {
                let run = &run;
                scope.spawn(move || run(g0, w, s, z));
            }
            g0 += n;
        }
    });
    Some(PackedNBits {
        params: *p,
        weights,
        scales: sc,
        zero_points: zps,
    })
}

/// Chunks [`pack_group`] fills per tile (a multiple of 4).
const PACK_TILE: usize = 128;

/// Packs column group `g` into the given (zeroed or stale) slices; every byte is written.
///
/// Chunk `i` of a group covers k = 4i..4i+4, which is the `u16` at byte `2i` of each column's
/// row of B (blocks are multiples of 4 long); a lane zips two columns' words ([`zip_nibbles`]).
/// Only the chunk that straddles K goes element by element.
#[allow(clippy::too_many_arguments)]
pub(crate) fn pack_group(
    b: &[u8],
    scales: &[f32],
    zero_points: Option<&[u8]>,
    p: &NBitsParams,
    g: usize,
    w_out: &mut [u8],
    s_out: &mut [f32],
    z_out: Option<&mut [u8]>,
) {
    let kbs = p.k_blocks();
    let row_bytes = kbs * p.blob_bytes();
    let cols = p.n.saturating_sub(g * NR).min(NR);
    let zrb = p.zp_row_bytes();
    for col in 0..NR {
        for kb in 0..kbs {
            s_out[kb * NR + col] = if col < cols {
                scales[(g * NR + col) * kbs + kb]
            } else {
                0.0
            };
        }
    }
    if let Some(z) = z_out {
        let zp = |col: usize, kb: usize| match zero_points {
            Some(zp) if col < cols => (zp[(g * NR + col) * zrb + kb / 2] >> (4 * (kb % 2))) & 0x0F,
            _ => 0,
        };
        for kb in 0..kbs {
            for lane in 0..LANES {
                z[kb * LANES + lane] = zp(lane, kb) | zp(LANES + lane, kb) << 4;
            }
        }
    }
    let chunks = kbs * p.block_size / CHUNK_K;
    let full = p.k / CHUNK_K;
    let w_out = &mut w_out[..chunks * 4 * LANES];
    // Chunks from the one straddling K on are built by OR-ing codes in.
    w_out[full.min(chunks) * 4 * LANES..].fill(0);
    // Full chunks: lane i of chunk c is the u16 at byte 2c of column i's row (low nibbles) and
    // of column 16 + i's row (high nibbles), nibble-zipped. Work goes [`PACK_TILE`] chunks at a
    // time (8 KiB of output, which stays in L1) and lane by lane inside a tile, so each row is
    // read as one sequential stream: reading all 32 rows side by side would thrash L1, since
    // rows 2 KiB apart (K = 4096) share cache sets. Padding columns read as code 0.
    let row = |col: usize| {
        let at = (g * NR + col) * row_bytes;
        if col < cols {
            &b[at..at + 2 * full]
        } else {
            &[][..]
        }
    };
    // Four chunks per step: one u64 (16 codes) from each of a lane's two rows.
    let quad = |row: &[u8], q: usize| {
        row.get(8 * q..8 * q + 8)
            .map_or(0, |x| u64::from_le_bytes(x.try_into().unwrap()))
    };
    let full_quads = full / 4;
    for t0 in (0..full_quads).step_by(PACK_TILE / 4) {
        let t1 = (t0 + PACK_TILE / 4).min(full_quads);
        let tile = &mut w_out[t0 * 16 * LANES..t1 * 16 * LANES];
        for lane in 0..LANES {
            let (lo_row, hi_row) = (row(lane), row(LANES + lane));
            for (q, out) in (t0..t1).zip(tile.chunks_exact_mut(16 * LANES)) {
                let (lo, hi) = (quad(lo_row, q), quad(hi_row, q));
                // Two chunks per step: dword t of `x` = chunk 2h + t's (low word, high word).
                for h in 0..2 {
                    let (l, u) = (lo >> (32 * h), hi >> (32 * h));
                    let x = (l & 0xFFFF)
                        | (u & 0xFFFF) << 16
                        | (l & 0xFFFF_0000) << 16
                        | (u & 0xFFFF_0000) << 32;
                    let z = zip_nibbles(x);
                    let at = 2 * h * 4 * LANES + 4 * lane;
                    out[at..at + 4].copy_from_slice(&(z as u32).to_le_bytes());
                    out[at + 4 * LANES..at + 4 * LANES + 4]
                        .copy_from_slice(&((z >> 32) as u32).to_le_bytes());
                }
            }
        }
    }
    // The last full % 4 full chunks, one u16 per row.
    let word = |row: &[u8], c: usize| {
        row.get(2 * c..2 * c + 2)
            .map_or(0, |x| u16::from_le_bytes([x[0], x[1]]) as u32)
    };
    let rest = &mut w_out[full_quads * 16 * LANES..full * 4 * LANES];
    for (c, out) in (full_quads * 4..).zip(rest.chunks_exact_mut(4 * LANES)) {
        for (lane, d) in out.chunks_exact_mut(4).enumerate() {
            let x = word(row(lane), c) | word(row(LANES + lane), c) << 16;
            d.copy_from_slice(&(zip_nibbles(x as u64) as u32).to_le_bytes());
        }
    }
    // The chunk straddling K (codes past K stay 0, as do chunks past K).
    if full < chunks {
        let out = &mut w_out[full * 4 * LANES..(full + 1) * 4 * LANES];
        for col in 0..cols {
            let (lane, shift) = (col % LANES, 4 * (col / LANES));
            for k in CHUNK_K * full..p.k {
                let code = weight_code(b, p, k, g * NR + col);
                out[4 * lane + k % CHUNK_K] |= code << shift;
            }
        }
    }
}

/// Each dword of `x` holds four codes of one column in its low half and four of another in its
/// high half (code j at bits 4j and 16 + 4j, ORT's order); returns, per dword, byte j = low
/// code j | high code j << 4. Two swap steps of the nibble perfect shuffle: bytes 1 and 2, then
/// nibbles 1-2 and 5-6 (of each dword).
#[inline]
fn zip_nibbles(x: u64) -> u64 {
    let t = (x ^ (x >> 8)) & 0x0000_FF00_0000_FF00;
    let x = x ^ t ^ (t << 8);
    let t = (x ^ (x >> 4)) & 0x00F0_00F0_00F0_00F0;
    x ^ t ^ (t << 4)
}
