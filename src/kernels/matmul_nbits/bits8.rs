//! 8-bit MatMulNBits (`bits = 8`): the packed layout's groups holding whole code bytes.
//!
//! A 4-bit group ([`super::pack`]) is 16 dword lanes of four k each, lane `i` carrying column
//! `i` in its low nibbles and column `16 + i` in its high ones. An 8-bit group is the same
//! record over 16 real columns: lane `i`'s byte for k is column `i`'s 8-bit code itself, whose
//! nibbles split it as `q = 16 h + l`. Read as a 4-bit group, its "column" `i` is the low
//! nibbles `l` of real column `i` and its "column" `16 + i` the high nibbles `h`; so the
//! record's 32 scales are `s` for the first 16 and `16 s` for the other 16, and its zero-point
//! byte for lane `i` is column `i`'s 8-bit zero point (`zp = 16 zh + zl`), 128 when the node
//! has none ([`super::pack::absent_zp`]: 0x80, high nibble 8, low nibble 0). Then
//!
//! ```text
//! (q - zp) s = (h - zh) (16 s) + (l - zl) s
//! ```
//!
//! and every 4-bit kernel computes an 8-bit group's two halves as if they were 32 columns: the
//! driver adds "column" `16 + i` to "column" `i` as it writes real column `i`
//! (`driver::Ctx::write_row`, high half first). That is what the fp32 tiles, the `vpmaddubsw`
//! and AVX2 tiles, the scalar tile and the AMX GEMM do, unchanged. A token reads one byte a
//! weight plus the two scale streams.
//!
//! The VNNI tile has a kernel of its own for 8-bit groups (`tile_avx512::tile_i8_vnni8`):
//! `vpdpbusd` multiplies unsigned bytes, so one per 64 bytes over the whole code bytes is the
//! exact integer dot product `sum (q - zp) a` (seeded with `-zp * sum(a)`), scaled once by `s`;
//! the 4-bit VNNI tile spends two per 64 bytes and a mask (low nibbles, and all of them, for its
//! two halves). It writes each column's total as "column" `i` and zero as "column" `16 + i`, so
//! the driver's sum leaves the total. Its answers are the integer dot product scaled once (one
//! rounding) where the halves' are two scaled terms added (three): both within the level's
//! tolerance of the definition, not bit-identical to each other. So a table with the AMX GEMM
//! keeps the generic VNNI tile for 8-bit groups (`dispatch::Kernels::i8_tile8`): the AMX GEMM's
//! rows and the tile's tail rows then agree bit for bit, as for 4-bit weights.
//!
//! (Before this tile an 8-bit weight was split into two 4-bit weights in ORT's layout, packed and
//! cached apart and run as one pair call, `hi + lo`: the same bytes a token, twice the integer
//! work, and two streams a lane.)
//!
//! Scales large enough that `(q - zp) s` or `16 s` overflows f32 (`reference::hostile_scales`)
//! are never packed (`pack::try_pack_threads`): the node computes those by the definition taken
//! literally.

use super::pack::{
    chunk_offset, group_cols, put_scale, record_bytes, PackedNBits, CHUNK_BYTES, CHUNK_K, LANES,
};
use super::params::NBitsWeight;

/// Packs 8-bit column group `g` (real columns `16 g ..`) into `rec` and `z_out` as
/// [`super::pack::pack_group_as`] does a 4-bit one (the same contract: every byte of `k_blocks`
/// records written, codes past K and padding columns 0 with scale 0; f16 scales when `half`,
/// `group_f16`'s answer). See the module documentation for the layout.
pub(crate) fn pack_group8(
    weight: &NBitsWeight<'_>,
    g: usize,
    half: bool,
    rec: &mut [u8],
    z_out: Option<&mut [u8]>,
) {
    let NBitsWeight {
        b,
        scales,
        zero_points,
        p,
    } = *weight;
    debug_assert_eq!(p.bits, 8);
    let (kbs, bs, gc) = (p.k_blocks(), p.block_size, group_cols(p));
    let c0 = g * gc;
    let cols = p.n.saturating_sub(c0).min(gc);
    let rb = record_bytes(bs, half);
    let rec = &mut rec[..kbs * rb];
    let scale = |col: usize, kb: usize| {
        if col < cols {
            scales[(c0 + col) * kbs + kb]
        } else {
            0.0
        }
    };
    for kb in 0..kbs {
        let at = kb * rb + bs * LANES;
        for col in 0..LANES {
            // "Column" col: the low nibbles (scale s); col + 16: the high ones (16 s, exact).
            for (slot, s) in [(col, scale(col, kb)), (LANES + col, 16.0 * scale(col, kb))] {
                put_scale(&mut rec[at..], slot, s, half);
            }
        }
    }
    if let (Some(z), Some(zp)) = (z_out, zero_points) {
        let zrb = p.zp_row_bytes();
        for kb in 0..kbs {
            for lane in 0..LANES {
                z[kb * LANES + lane] = if lane < cols {
                    zp[(c0 + lane) * zrb + kb]
                } else {
                    0
                };
            }
        }
    }
    // Chunk c (k = 4c..4c + 4): lane i's dword is column i's four code bytes at 4c, which lie
    // side by side in ORT's layout (a column's row is its blocks' bytes back to back).
    let row_bytes = kbs * p.blob_bytes();
    let chunks = kbs * (bs / CHUNK_K);
    for c in 0..chunks {
        let at = chunk_offset(c, bs, rb);
        rec[at..at + CHUNK_BYTES].fill(0);
    }
    for lane in 0..cols {
        let row = &b[(c0 + lane) * row_bytes..(c0 + lane + 1) * row_bytes];
        for (c, four) in row[..p.k].chunks(CHUNK_K).enumerate() {
            let at = chunk_offset(c, bs, rb) + 4 * lane;
            rec[at..at + four.len()].copy_from_slice(four);
        }
    }
}

/// [`PackedNBits::column_codes`] for an 8-bit weight: column `n`'s K code bytes.
pub(crate) fn column_codes8(pk: &PackedNBits, n: usize, out: &mut [u8]) -> bool {
    let p = &pk.params;
    if n >= p.n || out.len() < pk.column_bytes() {
        return false;
    }
    let gc = group_cols(p);
    let (g, lane) = (pk.group(n / gc), n % gc);
    for k0 in (0..p.k).step_by(CHUNK_K) {
        let chunk = g.chunk(k0);
        for k in k0..(k0 + CHUNK_K).min(p.k) {
            out[k] = chunk[4 * lane + k % CHUNK_K];
        }
    }
    true
}
