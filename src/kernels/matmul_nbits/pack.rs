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
//! * scales: `[group][block][32]`, as f32 for accuracy levels 0..3 and as f16 for level 4 unless
//!   the session asks for f32 (see below). A second stream per lane next to the weights:
//!   measured (issue 17, see `tile_avx512`) to cost its share of the bytes and no more, so it is
//!   not interleaved into the weight stream. Stop 29 built the interleaved layout (each block's
//!   scales after its codes, one stream a lane) through every kernel and measured no gain per
//!   decode token (old/new 0.944-1.016 over six runs of three prefetch variants; README,
//!   stop 29); only with the software prefetch off did the second stream cost (~6%).
//! * `zero_points` (only when the node has them): `[group][block][16]` u8, byte `i` = zero point
//!   of column i (low nibble) and of column 16 + i (high nibble), like the weights; absent means
//!   8 everywhere.
//!
//! Zero points are applied per block through the sum of A over the block, never per element
//! (see the kernels), so no `-zp*scale` table is stored: it would add as many bytes as the scales.
//!
//! f16 scales (accuracy level 4): decode at M = 1 streams the whole weight once per token, so
//! its time is its bytes. With block size 32 a column-block is 16 bytes of codes plus its scale:
//! 4 bytes as f32 (0.625 bytes per weight), 2 as f16 (0.5625, what llama.cpp's Q4_0 reads).
//! Level 4 already quantises A to int8 per block, and rounding a scale to f16 (round to nearest
//! even) changes it by at most 2^-11 of itself, so each block's term changes by at most 2^-11
//! relative. That holds only for f16 normals, so a group keeps f32 scales when any of its scales
//! is neither 0 nor of magnitude in [2^-14, 65504] ([`f16_exact_enough`]): tiny scales would
//! lose precision as f16 subnormals, huge ones would become infinite, NaN and infinities stay
//! as they are. The choice is per group and made by [`pack_group`] from that group's scales
//! alone, so the unpacked path (which packs group by group) makes the same choice. Levels 0..3
//! keep f32 scales: their results do not change.
//!
//! f16 scales are a perturbation of the model: on a 6-layer Qwen-shaped model, level-4 logits
//! move 1.2-1.3x as far from ORT's as ORT's own move when one f32 weight changes by 1e-6
//! (`e2e/python/acc4_spread.py`). A session that wants its logits within ORT's spread sets the
//! provider option `acc4_scales=f32` ([`NBitsParams::acc4_f16_scales`] false): every group then
//! keeps f32 scales (0.625 bytes per weight at block 32, about 10% more for decode to read).
//! The choice is part of the weight cache key, so sessions asking differently never share a pack.

use super::params::{NBitsParams, NBitsWeight};
use super::reference::weight_code;
use crate::kernels::cast::{f16_to_f32, f32_to_f16, F16Bits, NanRule};
use crate::memory::{weight_arena, ArenaBuf};

/// Columns per group.
pub const NR: usize = 32;
/// Dword lanes per chunk (each lane carries two columns, one per nibble).
pub(crate) const LANES: usize = NR / 2;
/// k per 64-byte chunk.
pub(crate) const CHUNK_K: usize = 4;

/// A MatMulNBits weight rearranged for the tile kernels. Its buffers are pieces of the
/// process-wide huge-page weight arena ([`crate::memory::weight_arena`]), claimed in the order
/// weights, scales, f16 scales, zero points, so consecutive packs lie back to back.
#[derive(Debug)]
pub struct PackedNBits {
    pub(crate) params: NBitsParams,
    /// 64-byte aligned (as is every group inside it: group sizes are multiples of 64 bytes),
    /// so no 64-byte weight or scale load of the kernels straddles two cache lines.
    pub(crate) weights: ArenaBuf<u8>,
    /// f32 scales of every group that reads f32 (all of them below level 4; at level 4 only
    /// groups whose scales f16 cannot hold): `[group][block][32]` over all groups, or empty when
    /// no group reads f32.
    pub(crate) scales: ArenaBuf<f32>,
    /// f16 scales (bits) of the groups that read f16, `[group][block][32]` over all groups, or
    /// empty when none does (always below level 4).
    pub(crate) scales16: ArenaBuf<u16>,
    /// Per group: whether it reads `scales16` (else `scales`).
    pub(crate) f16_groups: Vec<bool>,
    pub(crate) zero_points: Option<ArenaBuf<u8>>,
    /// Largest |scale| of the weight (finite: hostile scales are never packed); bounds every
    /// output's magnitude, so the overflow check after a call can skip rows that cannot overflow
    /// (see `nonfinite::cannot_overflow`).
    pub(crate) scale_max: f32,
}

/// One group's scales, `[block][32]`, in the format the group was packed with.
#[derive(Debug, Clone, Copy)]
pub enum Scales<'a> {
    F32(&'a [f32]),
    /// IEEE binary16 bits, every one 0 or normal (see [`f16_exact_enough`]).
    F16(&'a [u16]),
}

impl<'a> Scales<'a> {
    /// Number of scales.
    pub fn len(&self) -> usize {
        match self {
            Scales::F32(s) => s.len(),
            Scales::F16(s) => s.len(),
        }
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The scales as (f32, f16) slices, the one not in use empty: SIMD kernels take this once
    /// per call and pick the per-block load at compile time.
    pub(crate) fn split(self) -> (&'a [f32], &'a [u16]) {
        match self {
            Scales::F32(s) => (s, &[]),
            Scales::F16(s) => (&[], s),
        }
    }

    /// Scale `i` as f32 (f16 widens exactly).
    #[inline]
    pub fn get(&self, i: usize) -> f32 {
        match self {
            Scales::F32(s) => s[i],
            Scales::F16(s) => f16_to_f32(F16Bits(s[i]), NanRule::Hardware),
        }
    }
}

/// Whether f16 holds `s` to within 2^-11 of itself (round to nearest even): 0, or a magnitude
/// in f16's normal range [2^-14, 65504]. Subnormals (fewer significant bits), overflow, NaN and
/// infinities are refused.
pub fn f16_exact_enough(s: f32) -> bool {
    s == 0.0 || (1.0 / 16384.0..=65504.0).contains(&s.abs())
}

/// `s` rounded to f16 (nearest even), as bits. Only for values [`f16_exact_enough`] accepts.
pub(crate) fn scale_to_f16(s: f32) -> u16 {
    f32_to_f16(s, NanRule::Hardware).0
}

/// One column group's slices, as the kernels see them.
#[derive(Debug, Clone, Copy)]
pub struct GroupView<'a> {
    /// `k_blocks * block_size * 16` bytes.
    pub w: &'a [u8],
    /// `k_blocks * 32` scales.
    pub scales: Scales<'a>,
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

    /// Bytes really held: what the pieces took from the weight arena (alignment padding
    /// included) plus the per-group flags on the heap.
    pub fn bytes(&self) -> usize {
        self.weights.taken_bytes()
            + self.scales.taken_bytes()
            + self.scales16.taken_bytes()
            + self.f16_groups.capacity()
            + self.zero_points.as_ref().map_or(0, |z| z.taken_bytes())
    }

    /// Start address of the arena region holding the packed codes (diagnostics and tests:
    /// which region, e.g. to find it in `/proc/self/smaps`).
    pub fn region_addr(&self) -> usize {
        self.weights.mapping().addr()
    }

    /// The packed weight codes (all groups), e.g. for streaming diagnostics.
    pub fn weight_bytes(&self) -> &[u8] {
        self.weights.as_slice()
    }

    /// Writes column `n`'s K codes into `out` in ORT's layout for one row of B (code `k` in
    /// byte `k / 2`, the low nibble for even `k`): exactly what [`pack`] read from B, since the
    /// codes are stored unchanged (zero points and scales are kept apart). Bytes from
    /// `K.div_ceil(2)` on are left alone. The embedding gather of a model whose embedding table
    /// is tied to its lm_head reads its rows from the lm_head's packed weight this way
    /// (`ep::nodes::gather_block_quantized`). False, with nothing written, when `n >= N` or
    /// `out` is shorter than `K.div_ceil(2)`.
    pub fn column_codes(&self, n: usize, out: &mut [u8]) -> bool {
        let p = &self.params;
        let bytes = p.k.div_ceil(2);
        if n >= p.n || out.len() < bytes {
            return false;
        }
        let wb = group_weight_bytes(p);
        let w = &self.weights.as_slice()[n / NR * wb..][..wb];
        let (lane, shift) = (n % NR % LANES, 4 * (n % NR / LANES));
        let out = &mut out[..bytes];
        out.fill(0);
        for k in 0..p.k {
            // The chunk of k, lane `lane`'s dword, byte k % 4 (see the module documentation).
            let byte = w[k / CHUNK_K * 4 * LANES + 4 * lane + k % CHUNK_K];
            out[k / 2] |= ((byte >> shift) & 0x0F) << (4 * (k % 2));
        }
        true
    }

    /// The slices of column group `g`.
    pub fn group(&self, g: usize) -> GroupView<'_> {
        let p = &self.params;
        let (wb, sb, zb) = (group_weight_bytes(p), p.k_blocks() * NR, group_zp_bytes(p));
        GroupView {
            w: &self.weights.as_slice()[g * wb..(g + 1) * wb],
            scales: if self.f16_groups[g] {
                Scales::F16(&self.scales16.as_slice()[g * sb..(g + 1) * sb])
            } else {
                Scales::F32(&self.scales.as_slice()[g * sb..(g + 1) * sb])
            },
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
    let weight = NBitsWeight {
        b,
        scales,
        zero_points,
        p,
    };
    weight.check_sizes(None).unwrap_or_else(|e| panic!("{e}"));
    let g_count = groups(p);
    let (wb, sb, zb) = (group_weight_bytes(p), p.k_blocks() * NR, group_zp_bytes(p));
    // Which groups get f16 scales (the choice `pack_group` makes again for each group).
    // g_count = ceil(N / 32): tiny next to the weights, but still derived from the model.
    let mut f16_groups: Vec<bool> = Vec::new();
    f16_groups.try_reserve_exact(g_count).ok()?;
    f16_groups.extend((0..g_count).map(|g| group_f16(scales, p, g)));
    let any_f32 = f16_groups.iter().any(|&h| !h);
    let any_f16 = f16_groups.iter().any(|&h| h);
    let half_len = if any_f16 { g_count * sb } else { 0 };
    let arena = weight_arena();
    let mut weights = arena.try_alloc::<u8>(g_count.checked_mul(wb)?).ok()?;
    let mut sc = arena
        .try_alloc::<f32>(if any_f32 { g_count.checked_mul(sb)? } else { 0 })
        .ok()?;
    let mut sc16 = arena.try_alloc::<u16>(half_len).ok()?;
    let mut zps = match zero_points {
        Some(_) => Some(arena.try_alloc::<u8>(g_count.checked_mul(zb)?).ok()?),
        None => None,
    };
    let per = g_count.div_ceil(threads.clamp(1, g_count.max(1)));
    // Each share: `per` groups of every buffer (an empty buffer gives empty shares).
    let mut w_sh = Shares::new(weights.as_mut_slice(), per * wb);
    let mut s_sh = Shares::new(sc.as_mut_slice(), per * sb);
    let mut h_sh = Shares::new(sc16.as_mut_slice(), per * sb);
    let mut z_sh = zps
        .as_mut()
        .map(|z| Shares::new(z.as_mut_slice(), per * zb));
    let f16_groups_ref = &f16_groups;
    std::thread::scope(|scope| {
        let mut g0 = 0;
        while g0 < g_count {
            let n = per.min(g_count - g0);
            let (w, s, h) = (w_sh.take(), s_sh.take(), h_sh.take());
            let mut z = z_sh.as_mut().map(|z| z.take());
            // Packs groups g0..g0 + n into this share's slices.
            let mut run = move || {
                for i in 0..n {
                    let w = &mut w[i * wb..(i + 1) * wb];
                    let s = s.get_mut(i * sb..(i + 1) * sb).unwrap_or_default();
                    let h = h.get_mut(i * sb..(i + 1) * sb).unwrap_or_default();
                    let z = z.as_deref_mut().map(|z| &mut z[i * zb..(i + 1) * zb]);
                    let half = pack_group(&weight, g0 + i, w, s, h, z);
                    debug_assert_eq!(half, f16_groups_ref[g0 + i]);
                }
            };
            if g0 + n == g_count {
                // The last share runs on the calling thread.
                run();
            } else {
                scope.spawn(run);
            }
            g0 += n;
        }
    });
    Some(PackedNBits {
        params: *p,
        weights,
        scales: sc,
        scales16: sc16,
        f16_groups,
        zero_points: zps,
        scale_max: super::nonfinite::abs_max(scales),
    })
}

/// Consecutive pieces of one buffer, one per share of groups.
struct Shares<'a, T> {
    rest: &'a mut [T],
    len: usize,
}

impl<'a, T> Shares<'a, T> {
    fn new(buf: &'a mut [T], len: usize) -> Self {
        Shares { rest: buf, len }
    }

    /// The next `len` elements (fewer at the end; empty once the buffer is used up, so an
    /// empty buffer gives only empty pieces).
    fn take(&mut self) -> &'a mut [T] {
        let r = std::mem::take(&mut self.rest);
        let (head, tail) = r.split_at_mut(self.len.min(r.len()));
        self.rest = tail;
        head
    }
}

/// Whether group `g` stores f16 scales: at accuracy level 4 unless the session asked for f32
/// scales ([`NBitsParams::f16_scales`]), when f16 holds every scale of its real columns within
/// 2^-11 ([`f16_exact_enough`]; padding columns are 0).
pub(crate) fn group_f16(scales: &[f32], p: &NBitsParams, g: usize) -> bool {
    let kbs = p.k_blocks();
    let cols = (g * NR).min(p.n)..((g + 1) * NR).min(p.n);
    p.f16_scales()
        && scales[cols.start * kbs..cols.end * kbs]
            .iter()
            .all(|&s| f16_exact_enough(s))
}

/// Chunks [`pack_group`] fills per tile (a multiple of 4).
const PACK_TILE: usize = 128;

/// Packs column group `g` into the given (zeroed or stale) slices; every byte is written except
/// in the scale slice the group does not use. Scales go to `h_out` as f16 when [`group_f16`]
/// says so (returns true), else to `s_out` as f32 (returns false); the unused one may be empty.
///
/// Chunk `i` of a group covers k = 4i..4i+4, which is the `u16` at byte `2i` of each column's
/// row of B (blocks are multiples of 4 long); a lane zips two columns' words ([`zip_nibbles`]).
/// Only the chunk that straddles K goes element by element.
pub(crate) fn pack_group(
    weight: &NBitsWeight<'_>,
    g: usize,
    w_out: &mut [u8],
    s_out: &mut [f32],
    h_out: &mut [u16],
    z_out: Option<&mut [u8]>,
) -> bool {
    let NBitsWeight {
        b,
        scales,
        zero_points,
        p,
    } = *weight;
    let kbs = p.k_blocks();
    let row_bytes = kbs * p.blob_bytes();
    let cols = p.n.saturating_sub(g * NR).min(NR);
    let zrb = p.zp_row_bytes();
    let scale = |col: usize, kb: usize| {
        if col < cols {
            scales[(g * NR + col) * kbs + kb]
        } else {
            0.0
        }
    };
    let half = group_f16(scales, p, g);
    for col in 0..NR {
        for kb in 0..kbs {
            if half {
                h_out[kb * NR + col] = scale_to_f16(scale(col, kb));
            } else {
                s_out[kb * NR + col] = scale(col, kb);
            }
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
    half
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
