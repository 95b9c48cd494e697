//! The prepacked weight layout every tile kernel (scalar, AVX2, AVX-512, VNNI) reads.
//!
//! Columns are taken in groups of [`NR`] = 32: one AVX-512 register of 16 dword lanes, where
//! lane `i` carries column `i` in the low nibbles of its bytes and column `16 + i` in the high
//! nibbles. Tail columns are padded with code 0, scale 0 and zero point 0, so they produce 0.
//! (An 8-bit weight's groups are the same records over 16 columns, lane `i`'s bytes column
//! `i`'s whole codes: `bits8`.)
//! Per group, everything a kernel streams is contiguous:
//!
//! * records: per group, per block, one record: the block's codes, `[chunk of 4 k][64 bytes]`
//!   (`block_size / 4` chunks), then its 32 scales (`[32]`, little endian). So each group is one
//!   contiguous stream that a kernel reads front to back, codes and scales as they are used.
//!   In a chunk starting at k0, byte `4 * i + j` (lane i in 0..16, j in 0..4) holds the code of
//!   (k0 + j, column i) in its low nibble and the code of (k0 + j, column 16 + i) in its high
//!   nibble. One 64-byte load is 16 dword lanes of four consecutive k, and both nibbles of a
//!   byte meet the same A value. That is what the int8 kernels exploit: with `lo = v & 0x0F`,
//!   `vpdpbusd(lo, a)` is the dot of columns 0..16 and `vpdpbusd(v, a)` (no mask) is that plus
//!   16 times the dot of columns 16..32, so one mask and one A broadcast serve 32 columns
//!   (before: one mask per nibble and an A broadcast per 4 k of 16 columns). fp32 extracts
//!   `(v >> 8j) & 0x0F` and `(v >> 8j + 4) & 0x0F` for k0 + j.
//!   k beyond K (tail of the last block) holds code 0; callers pad A with zeros there.
//!   The scales are f32 for accuracy levels 0..3 and f16 for level 4 unless the session asks for
//!   f32 (see below), chosen per group, so a record is `block_size * 16 + 128` or `+ 64` bytes:
//!   a multiple of 64, and every group starts 64-byte aligned, so no 64-byte load straddles two
//!   lines.
//!
//!   Why records: before them the scales were a second array, `[group][block][32]`, a
//!   second stream per lane next to the codes, with a software prefetch on each. One lane
//!   streamed the VNNI tile's bytes at 0.84-0.90 of a plain read of them; a copy of the tile over
//!   records without software prefetch streamed at 0.99-1.01 (`examples/matmul_nbits_stream`,
//!   arms `two:` and `rec:`, whose doc has the numbers). Two lanes sharing one memory path hid
//!   the difference (an earlier build of records had measured no gain per token that way); a lane
//!   with a path of its own (the development VM's vCPUs when placed apart, a core of a larger
//!   host) streams at its own rate, which is what records raise.
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
use crate::memory::{weight_arena, WeightBytes};

/// Columns per group.
pub const NR: usize = 32;
/// Dword lanes per chunk (each lane carries two columns, one per nibble).
pub(crate) const LANES: usize = NR / 2;
/// k per 64-byte chunk.
pub(crate) const CHUNK_K: usize = 4;

/// A MatMulNBits weight rearranged for the tile kernels: every group's records in one piece of
/// the process-wide huge-page weight arena ([`crate::memory::weight_arena`]), then (when the
/// node has them) the zero points in another, so consecutive packs lie back to back. A weight
/// restored from a context file ([`PackedNBits::import_parts`]) holds the same two byte arrays
/// as slices of the mapped file instead ([`WeightBytes`]), read in place.
#[derive(Debug)]
pub struct PackedNBits {
    pub(crate) params: NBitsParams,
    /// Every group's records, group after group (see the module documentation). 64-byte
    /// aligned, as is every group inside it (records are multiples of 64 bytes).
    pub(crate) records: WeightBytes,
    /// Byte offset of each group's records in `records`, and the total at the end (groups with
    /// f32 and with f16 scales differ in size).
    pub(crate) group_at: Vec<usize>,
    /// Per group: whether its scales are f16 (else f32).
    pub(crate) f16_groups: Vec<bool>,
    pub(crate) zero_points: Option<WeightBytes>,
    /// Largest |scale| of the weight (finite: hostile scales are never packed); bounds every
    /// output's magnitude, so the overflow check after a call can skip rows that cannot overflow
    /// (see `nonfinite::cannot_overflow`).
    pub(crate) scale_max: f32,
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

/// Writes scale `s` into slot `slot` of a record's scales (`scales`: from the first scale on),
/// as f16 bits (`half`, [`scale_to_f16`]) or f32, little endian.
pub(crate) fn put_scale(scales: &mut [u8], slot: usize, s: f32, half: bool) {
    if half {
        scales[2 * slot..2 * slot + 2].copy_from_slice(&scale_to_f16(s).to_le_bytes());
    } else {
        scales[4 * slot..4 * slot + 4].copy_from_slice(&s.to_le_bytes());
    }
}

/// One column group's records, as the kernels see them.
#[derive(Debug, Clone, Copy)]
pub struct GroupView<'a> {
    /// `k_blocks` records of [`GroupView::record_bytes`] each: a block's codes, then its scales.
    pub rec: &'a [u8],
    /// Whether the scales are f16 bits (else f32).
    pub f16: bool,
    /// `k_blocks * 16` zero-point bytes (two columns each), or `None` for 8.
    pub zps: Option<&'a [u8]>,
    /// The zero-point byte of every lane when `zps` is `None` ([`absent_zp`]): 0x88 for 4-bit
    /// weights (8 in each nibble), 0x80 for 8-bit ones (128: high nibble 8, low nibble 0).
    pub absent_zp: u8,
    pub k_blocks: usize,
    pub block_size: usize,
}

impl<'a> GroupView<'a> {
    /// Code bytes of one block (`block_size * 16`, a multiple of 64).
    #[inline]
    pub fn code_bytes(&self) -> usize {
        self.block_size * LANES
    }

    /// Bytes of one record: the block's codes and its 32 scales.
    #[inline]
    pub fn record_bytes(&self) -> usize {
        record_bytes(self.block_size, self.f16)
    }

    /// Whether `rec` holds all `k_blocks` records (what every kernel asserts before its
    /// unchecked loads).
    #[inline]
    pub fn complete(&self) -> bool {
        self.k_blocks
            .checked_mul(self.record_bytes())
            .is_some_and(|n| n <= self.rec.len())
    }

    /// The 64 code bytes of the chunk starting at `k0` (a multiple of [`CHUNK_K`]).
    #[inline]
    pub fn chunk(&self, k0: usize) -> &'a [u8] {
        let at = chunk_offset(k0 / CHUNK_K, self.block_size, self.record_bytes());
        &self.rec[at..at + CHUNK_BYTES]
    }

    /// Byte offset in `rec` of block `kb`'s record (its first chunk of codes).
    #[inline]
    pub fn block_at(&self, kb: usize) -> usize {
        kb * self.record_bytes()
    }

    /// Byte offset in `rec` of block `kb`'s scales.
    #[inline]
    pub fn scales_at(&self, kb: usize) -> usize {
        self.block_at(kb) + self.code_bytes()
    }

    /// The scale of column `col` in block `kb`, as f32 (f16 widens exactly).
    #[inline]
    pub fn scale(&self, kb: usize, col: usize) -> f32 {
        let at = self.scales_at(kb);
        if self.f16 {
            let b = &self.rec[at + 2 * col..at + 2 * col + 2];
            f16_to_f32(F16Bits(u16::from_le_bytes([b[0], b[1]])), NanRule::Hardware)
        } else {
            let b = &self.rec[at + 4 * col..at + 4 * col + 4];
            f32::from_le_bytes([b[0], b[1], b[2], b[3]])
        }
    }
}

/// Bytes of one chunk of codes (`CHUNK_K` k of `NR` columns).
pub(crate) const CHUNK_BYTES: usize = CHUNK_K * NR / 2;

/// Bytes of one record: `block_size * 16` code bytes and 32 scales of 2 (f16) or 4 bytes.
pub(crate) fn record_bytes(block_size: usize, f16: bool) -> usize {
    block_size * LANES + NR * if f16 { 2 } else { 4 }
}

/// Byte offset of a group's chunk `c` (k = 4c..4c + 4) in its records of `record` bytes each:
/// in record `c / (block_size / 4)`, at `(c % (block_size / 4)) * 64`.
#[inline]
pub(super) fn chunk_offset(c: usize, block_size: usize, record: usize) -> usize {
    let per_block = block_size / CHUNK_K;
    (c / per_block) * record + (c % per_block) * CHUNK_BYTES
}

/// Packed bytes of one column group with f32 scales (the larger kind): what the splits size
/// their units by and the unpacked path packs a group into.
pub(crate) fn group_record_bytes(p: &NBitsParams) -> usize {
    p.k_blocks()
        .saturating_mul(record_bytes(p.block_size, false))
}

/// Zero-point bytes per column group.
pub(crate) fn group_zp_bytes(p: &NBitsParams) -> usize {
    p.k_blocks() * LANES
}

/// Real columns per group: [`NR`] for 4-bit weights, [`LANES`] for 8-bit ones, whose code bytes
/// fill a group's lanes whole (`bits8`).
pub(crate) fn group_cols(p: &NBitsParams) -> usize {
    if p.bits == 8 {
        LANES
    } else {
        NR
    }
}

/// Number of column groups for N columns.
pub(crate) fn groups(p: &NBitsParams) -> usize {
    p.n.div_ceil(group_cols(p))
}

/// The zero-point byte of a group without zero points ([`GroupView::absent_zp`]): the implied
/// zero point (`NBitsParams::default_zero_point`) in both nibbles of a 4-bit lane's byte, or the
/// 8-bit one whole.
pub(crate) fn absent_zp(p: &NBitsParams) -> u8 {
    let z = p.default_zero_point();
    if p.bits == 8 {
        z
    } else {
        z | z << 4
    }
}

/// An idle lane reads a packed weight's records ahead of the call that streams them
/// (`runtime::warm`).
impl crate::runtime::WarmBytes for PackedNBits {
    fn warm_bytes(&self) -> &[u8] {
        self.weight_bytes()
    }
}

impl PackedNBits {
    /// The node parameters this weight was packed for.
    pub fn params(&self) -> &NBitsParams {
        &self.params
    }

    /// Bytes really held: what the pieces took from the weight arena (alignment padding
    /// included) plus the per-group offsets and flags on the heap. Bytes in a mapped file
    /// ([`PackedNBits::import_parts`]) are page cache, not held memory: they count 0.
    pub fn bytes(&self) -> usize {
        self.records.arena_bytes()
            + self.group_at.capacity() * std::mem::size_of::<usize>()
            + self.f16_groups.capacity()
            + self.zero_points.as_ref().map_or(0, |z| z.arena_bytes())
    }

    /// Start address of the arena region (or the file mapping) holding the records
    /// (diagnostics and tests: which region, e.g. to find it in `/proc/self/smaps`).
    pub fn region_addr(&self) -> usize {
        self.records.region_addr()
    }

    /// Whether the records lie in a mapped file ([`PackedNBits::import_parts`]) rather than the
    /// weight arena.
    pub fn in_file(&self) -> bool {
        self.records.is_file()
    }

    /// The packed records of every group (codes and scales), e.g. for streaming diagnostics.
    pub fn weight_bytes(&self) -> &[u8] {
        self.records.as_slice()
    }

    /// The packed zero points (`[group][block][16]`, see the module documentation); empty when
    /// the weight has none.
    pub fn zero_point_bytes(&self) -> &[u8] {
        self.zero_points.as_deref().unwrap_or(&[])
    }

    /// The records of groups `groups` (a range of group indices, clamped to the groups there
    /// are): one contiguous run of bytes.
    pub fn groups_bytes(&self, groups: std::ops::Range<usize>) -> &[u8] {
        &self.records.as_slice()[self.groups_range(groups)]
    }

    /// Where the records of groups `groups` lie in [`PackedNBits::weight_bytes`] (clamped as
    /// [`PackedNBits::groups_bytes`]).
    pub fn groups_range(&self, groups: std::ops::Range<usize>) -> std::ops::Range<usize> {
        let last = self.group_at.len() - 1;
        let (a, b) = (groups.start.min(last), groups.end.min(last));
        self.group_at[a]..self.group_at[b.max(a)]
    }

    /// Writes column `n`'s K codes into `out` in ORT's layout for one row of B (4-bit: code `k`
    /// in byte `k / 2`, the low nibble for even `k`; 8-bit: code `k` in byte `k`, the
    /// [`column_bytes`](Self::column_bytes)): exactly what [`pack`] read from B, since the
    /// codes are stored unchanged (zero points and scales are kept apart). Bytes from
    /// [`column_bytes`](Self::column_bytes) on are left alone. The embedding gather of a model whose embedding table
    /// is tied to its lm_head reads its rows from the lm_head's packed weight this way
    /// (`ep::nodes::gather_block_quantized`). False, with nothing written, when `n >= N` or
    /// `out` is shorter than that.
    pub fn column_codes(&self, n: usize, out: &mut [u8]) -> bool {
        let p = &self.params;
        if p.bits == 8 {
            return super::bits8::column_codes8(self, n, out);
        }
        let bytes = self.column_bytes();
        if n >= p.n || out.len() < bytes {
            return false;
        }
        let g = self.group(n / NR);
        let (lane, shift) = (n % NR % LANES, 4 * (n % NR / LANES));
        let out = &mut out[..bytes];
        out.fill(0);
        for k0 in (0..p.k).step_by(CHUNK_K) {
            // Lane `lane`'s dword of the chunk, byte k % 4 (see the module documentation).
            let chunk = g.chunk(k0);
            for k in k0..(k0 + CHUNK_K).min(p.k) {
                let byte = chunk[4 * lane + k % CHUNK_K];
                out[k / 2] |= ((byte >> shift) & 0x0F) << (4 * (k % 2));
            }
        }
        true
    }

    /// Bytes of one column's codes in ORT's layout: `ceil(K / 2)` at 4 bits, `K` at 8.
    pub fn column_bytes(&self) -> usize {
        let p = &self.params;
        if p.bits == 8 {
            p.k
        } else {
            p.k.div_ceil(2)
        }
    }

    /// The records of column group `g`.
    pub fn group(&self, g: usize) -> GroupView<'_> {
        let p = &self.params;
        let zb = group_zp_bytes(p);
        GroupView {
            rec: &self.records.as_slice()[self.group_at[g]..self.group_at[g + 1]],
            f16: self.f16_groups[g],
            zps: self
                .zero_points
                .as_ref()
                .map(|z| &z.as_slice()[g * zb..(g + 1) * zb]),
            absent_zp: absent_zp(p),
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
    let threads = if groups(p).saturating_mul(group_record_bytes(p)) >= PARALLEL_PACK_MIN_BYTES {
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

/// [`pack_threads`], `None` when the packed buffers cannot be allocated (or `p` is not 4-bit).
pub fn try_pack_threads(
    b: &[u8],
    scales: &[f32],
    zero_points: Option<&[u8]>,
    p: &NBitsParams,
    threads: usize,
) -> Option<PackedNBits> {
    // 8-bit scales large enough for `16 s` (a group's high-nibble scales) or a term to overflow
    // are never packed: the node computes those by the literal definition (as it does 4-bit
    // ones, which it never offers for packing).
    if !matches!(p.bits, 4 | 8) || (p.bits == 8 && super::reference::hostile_scales(scales, p)) {
        return None;
    }
    let weight = NBitsWeight {
        b,
        scales,
        zero_points,
        p,
    };
    weight.check_sizes(None).unwrap_or_else(|e| panic!("{e}"));
    let g_count = groups(p);
    let zb = group_zp_bytes(p);
    // Which groups get f16 scales (the choice `pack_group` makes again for each group), and
    // where each group's records start. g_count = ceil(N / 32): tiny next to the weights, but
    // still derived from the model, so reserved fallibly and summed with checked arithmetic.
    let mut f16_groups: Vec<bool> = Vec::new();
    f16_groups.try_reserve_exact(g_count).ok()?;
    f16_groups.extend((0..g_count).map(|g| group_f16(scales, p, g)));
    let mut group_at: Vec<usize> = Vec::new();
    group_at.try_reserve_exact(g_count + 1).ok()?;
    group_at.push(0);
    for &half in &f16_groups {
        let size = p.k_blocks().checked_mul(record_bytes(p.block_size, half))?;
        group_at.push(group_at.last()?.checked_add(size)?);
    }
    let arena = weight_arena();
    let mut records = arena.try_alloc::<u8>(*group_at.last()?).ok()?;
    let mut zps = match zero_points {
        Some(_) => Some(arena.try_alloc::<u8>(g_count.checked_mul(zb)?).ok()?),
        None => None,
    };
    let per = g_count.div_ceil(threads.clamp(1, g_count.max(1)));
    // Each share: `per` groups' records and zero points.
    let mut rest = records.as_mut_slice();
    let mut z_sh = zps
        .as_mut()
        .map(|z| Shares::new(z.as_mut_slice(), per * zb));
    let (at, f16_groups_ref) = (&group_at, &f16_groups);
    std::thread::scope(|scope| {
        let mut g0 = 0;
        while g0 < g_count {
            let n = per.min(g_count - g0);
            let (r, tail) = std::mem::take(&mut rest).split_at_mut(at[g0 + n] - at[g0]);
            rest = tail;
            let mut z = z_sh.as_mut().map(|z| z.take());
            // Packs groups g0..g0 + n into this share's slices, letting go of the source
            // behind it (`release_behind`).
            let mut run = move || {
                let mut released = g0;
                for g in g0..g0 + n {
                    let r = &mut r[at[g] - at[g0]..at[g + 1] - at[g0]];
                    let i = g - g0;
                    let z = z.as_deref_mut().map(|z| &mut z[i * zb..(i + 1) * zb]);
                    pack_group_as(&weight, g, f16_groups_ref[g], r, z);
                    if g + 1 - released >= RELEASE_GROUPS || g + 1 == g0 + n {
                        release_behind(b, p, released..g + 1);
                        released = g + 1;
                    }
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
        records: records.into(),
        group_at,
        f16_groups,
        zero_points: zps.map(WeightBytes::from),
        // An 8-bit group's high-nibble scales are 16 s (`bits8`).
        scale_max: super::nonfinite::abs_max(scales) * if p.bits == 8 { 16.0 } else { 1.0 },
    })
}

/// Groups packed between two [`release_behind`] calls (a few hundred KiB to a few MiB of B).
const RELEASE_GROUPS: usize = 64;

/// Lets the kernel reclaim the pages of B that groups `gs` were packed from
/// (`os::advise_page_out`, which never changes what memory holds). B is a model initializer ORT
/// maps from the model's file; a packer that let its source go only at the end would hold the
/// whole source and the whole packed weight at once, which for a vocabulary-sized lm_head (68 MB
/// of codes at Qwen2-0.5B shapes) made the peak of session creation.
fn release_behind(b: &[u8], p: &NBitsParams, gs: std::ops::Range<usize>) {
    let (gc, col) = (group_cols(p), p.k_blocks() * p.blob_bytes());
    let start = (gs.start * gc).min(p.n) * col;
    let end = ((gs.end * gc).min(p.n) * col).min(b.len());
    if let Some(part) = b.get(start..end) {
        let _ = crate::os::advise_page_out(part);
    }
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
/// 2^-11 ([`f16_exact_enough`]; padding columns are 0); at any level when the model's scales are
/// f16 values ([`NBitsParams::f16_source_scales`]) and f16 holds every one of the group's
/// exactly (a normal f16 or 0: the kernels then see the very f32 scales, so no result changes).
/// An 8-bit group stores `s` and `16 s` (`bits8`): both must be.
pub(crate) fn group_f16(scales: &[f32], p: &NBitsParams, g: usize) -> bool {
    let (kbs, gc) = (p.k_blocks(), group_cols(p));
    let cols = (g * gc).min(p.n)..((g + 1) * gc).min(p.n);
    let wide = p.bits == 8;
    let lossy = p.f16_scales();
    let fits = |s: f32| {
        f16_exact_enough(s)
            && (lossy || f16_to_f32(f32_to_f16(s, NanRule::Hardware), NanRule::Hardware) == s)
    };
    (lossy || p.f16_source_scales)
        && scales[cols.start * kbs..cols.end * kbs]
            .iter()
            .all(|&s| fits(s) && (!wide || fits(16.0 * s)))
}

/// Chunks [`pack_group`] fills per tile (a multiple of 4).
const PACK_TILE: usize = 128;

/// Packs column group `g` into `rec`, its records (zeroed or stale; at least `k_blocks *
/// record_bytes(block_size, half)` bytes, every one of which is written), and its zero points
/// into `z_out`. The scales are f16 when [`group_f16`] says so (returns true), else f32.
pub(crate) fn pack_group(
    weight: &NBitsWeight<'_>,
    g: usize,
    rec: &mut [u8],
    z_out: Option<&mut [u8]>,
) -> bool {
    let half = group_f16(weight.scales, weight.p, g);
    pack_group_as(weight, g, half, rec, z_out);
    half
}

/// [`pack_group`] with the group's scale format already chosen (`half`: [`group_f16`]'s
/// answer for it, which [`try_pack_threads`] computes once per group to size the records).
///
/// Chunk `i` of a group covers k = 4i..4i+4, which is the `u16` at byte `2i` of each column's
/// row of B (blocks are multiples of 4 long); a lane zips two columns' words ([`zip_nibbles`]).
/// Only the chunk that straddles K goes element by element.
pub(crate) fn pack_group_as(
    weight: &NBitsWeight<'_>,
    g: usize,
    half: bool,
    rec: &mut [u8],
    z_out: Option<&mut [u8]>,
) {
    debug_assert_eq!(half, group_f16(weight.scales, weight.p, g));
    if weight.p.bits == 8 {
        return super::bits8::pack_group8(weight, g, half, rec, z_out);
    }
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
    let (bs, rb) = (p.block_size, record_bytes(p.block_size, half));
    let rec = &mut rec[..kbs * rb];
    for kb in 0..kbs {
        let at = kb * rb + bs * LANES;
        for col in 0..NR {
            put_scale(&mut rec[at..], col, scale(col, kb), half);
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
    // Chunk c's 64 bytes ([`chunk_offset`]). Four consecutive chunks from a multiple of 4 lie
    // in one record (bs / 4 is a multiple of 4: bs >= 16).
    let chunk_at = |c: usize| chunk_offset(c, bs, rb);
    let chunks = kbs * (bs / CHUNK_K);
    let full = p.k / CHUNK_K;
    // Chunks from the one straddling K on are built by OR-ing codes in.
    for c in full.min(chunks)..chunks {
        rec[chunk_at(c)..chunk_at(c) + CHUNK_BYTES].fill(0);
    }
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
        for lane in 0..LANES {
            let (lo_row, hi_row) = (row(lane), row(LANES + lane));
            for q in t0..t1 {
                let out = &mut rec[chunk_at(4 * q)..chunk_at(4 * q) + 4 * CHUNK_BYTES];
                let (lo, hi) = (quad(lo_row, q), quad(hi_row, q));
                // Two chunks per step: dword t of `x` = chunk 2h + t's (low word, high word).
                for h in 0..2 {
                    let (l, u) = (lo >> (32 * h), hi >> (32 * h));
                    let x = (l & 0xFFFF)
                        | (u & 0xFFFF) << 16
                        | (l & 0xFFFF_0000) << 16
                        | (u & 0xFFFF_0000) << 32;
                    let z = zip_nibbles(x);
                    let at = 2 * h * CHUNK_BYTES + 4 * lane;
                    out[at..at + 4].copy_from_slice(&(z as u32).to_le_bytes());
                    out[at + CHUNK_BYTES..at + CHUNK_BYTES + 4]
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
    for c in full_quads * 4..full {
        let out = &mut rec[chunk_at(c)..chunk_at(c) + CHUNK_BYTES];
        for (lane, d) in out.chunks_exact_mut(4).enumerate() {
            let x = word(row(lane), c) | word(row(LANES + lane), c) << 16;
            d.copy_from_slice(&(zip_nibbles(x as u64) as u32).to_le_bytes());
        }
    }
    // The chunk straddling K (codes past K stay 0, as do chunks past K).
    if full < chunks {
        let out = &mut rec[chunk_at(full)..chunk_at(full) + CHUNK_BYTES];
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
