//! Gather of rows from a 4- or 8-bit block-quantized table (`com.microsoft.GatherBlockQuantized`
//! with uint8 storage, quantized along the last axis): the embedding lookup of LLMs whose
//! embedding table is tied to a 4-bit or an 8-bit lm_head. Pure compute, no ORT types.
//!
//! Layout (the MatMulNBits convention): row `r` holds `row_bytes` bytes. 4 bits: element `2j` in
//! the low nibble of byte `j`, element `2j + 1` in the high nibble; 8 bits: element `j` is byte
//! `j`. Blocks of `block` elements along the row each have an f32 scale (`scales[r * blocks +
//! b]`) and an optional zero point of the same width, packed per row like the codes (4 bits:
//! `zero_points[r * blocks.div_ceil(2) + b / 2]`, low nibble for even `b`; 8 bits:
//! `zero_points[r * blocks + b]`), `2^(bits - 1)` when absent (8 or 128). An element
//! dequantizes to `(code - zero_point) as f32 * scale`.

/// A validated view of the quantized table.
pub struct QuantTable<'a> {
    codes: &'a [u8],
    /// 4 or 8.
    bits: usize,
    row_bytes: usize,
    scales: &'a [f32],
    zero_points: Option<&'a [u8]>,
    block: usize,
    blocks: usize,
}

impl<'a> QuantTable<'a> {
    /// Checks that the buffers hold `codes.len() / row_bytes` whole rows of `bits`-bit codes (4
    /// or 8) with their scales and zero points. `block` must be positive and even.
    pub fn new(
        codes: &'a [u8],
        row_bytes: usize,
        scales: &'a [f32],
        zero_points: Option<&'a [u8]>,
        block: usize,
        bits: usize,
    ) -> Result<Self, String> {
        if bits != 4 && bits != 8 {
            return Err(format!("{bits}-bit codes (4 or 8 are read)"));
        }
        if row_bytes == 0 || block == 0 || !block.is_multiple_of(2) {
            return Err(format!(
                "row of {row_bytes} bytes, block of {block}: both must be positive, the block even"
            ));
        }
        if !codes.len().is_multiple_of(row_bytes) {
            return Err(format!(
                "{} code bytes are not whole rows of {row_bytes}",
                codes.len()
            ));
        }
        let rows = codes.len() / row_bytes;
        let elems = row_bytes
            .checked_mul(8 / bits)
            .ok_or("row length overflows usize")?;
        let blocks = elems.div_ceil(block);
        let want_scales = rows.checked_mul(blocks).ok_or("scale count overflows")?;
        if scales.len() != want_scales {
            return Err(format!(
                "{} scales for {rows} rows of {blocks} blocks (want {want_scales})",
                scales.len()
            ));
        }
        if let Some(z) = zero_points {
            let want = rows
                .checked_mul(blocks.div_ceil(8 / bits))
                .ok_or("zero-point count overflows")?;
            if z.len() != want {
                return Err(format!(
                    "{} zero-point bytes for {rows} rows of {blocks} blocks (want {want})",
                    z.len()
                ));
            }
        }
        Ok(QuantTable {
            codes,
            bits,
            row_bytes,
            scales,
            zero_points,
            block,
            blocks,
        })
    }

    /// Rows in the table.
    pub fn rows(&self) -> usize {
        self.codes.len() / self.row_bytes
    }

    /// Elements in a row (two per byte at 4 bits, one at 8).
    pub fn row_len(&self) -> usize {
        self.row_bytes * (8 / self.bits)
    }

    /// Dequantizes row `r` into `out` (`row_len()` elements).
    pub fn dequant_row(&self, r: usize, out: &mut [f32]) {
        let codes = &self.codes[r * self.row_bytes..][..self.row_bytes];
        let scales = &self.scales[r * self.blocks..][..self.blocks];
        if self.bits == 8 {
            self.dequant_row8(r, codes, scales, out);
            return;
        }
        let zp_row = self.blocks.div_ceil(2);
        for (b, (&scale, dst)) in scales
            .iter()
            .zip(out[..self.row_len()].chunks_mut(self.block))
            .enumerate()
        {
            let zp = match self.zero_points {
                Some(z) => (z[r * zp_row + b / 2] >> (4 * (b & 1))) & 0x0F,
                None => 8,
            } as i32;
            // `block` is even whenever it is a power of two >= 2, so a block starts on a byte.
            let src = &codes[b * self.block / 2..];
            for (pair, &byte) in dst.chunks_mut(2).zip(src) {
                pair[0] = ((byte & 0x0F) as i32 - zp) as f32 * scale;
                if let Some(hi) = pair.get_mut(1) {
                    *hi = ((byte >> 4) as i32 - zp) as f32 * scale;
                }
            }
        }
    }

    /// [`Self::dequant_row`] of an 8-bit table: one code a byte, one zero point a byte (128
    /// when absent).
    fn dequant_row8(&self, r: usize, codes: &[u8], scales: &[f32], out: &mut [f32]) {
        for (b, (&scale, dst)) in scales
            .iter()
            .zip(out[..self.row_len()].chunks_mut(self.block))
            .enumerate()
        {
            let zp = match self.zero_points {
                Some(z) => z[r * self.blocks + b],
                None => 128,
            } as i32;
            for (d, &q) in dst.iter_mut().zip(&codes[b * self.block..]) {
                *d = (q as i32 - zp) as f32 * scale;
            }
        }
    }
}

/// Gathers along axis 0 of a table whose axis 0 has `table.rows() / group` entries of `group`
/// rows each: for every index, its `group` rows dequantized, in order, into `out`
/// (`indices.len() * group * row_len()` elements). Negative indices count from the end; an index
/// outside `[-entries, entries)` yields zeros (what ORT's CPU EP writes for it).
pub fn gather<I: Copy + Into<i64>>(
    table: &QuantTable<'_>,
    group: usize,
    indices: &[I],
    out: &mut [f32],
) {
    let entries = table.rows() / group.max(1);
    gather_rows(entries, group, table.row_len(), indices, out, |r, dst| {
        table.dequant_row(r, dst)
    });
}

/// [`gather`] over any source of rows: `row(r, dst)` fills `dst` (`row_len` elements) with row
/// `r` of a table of `entries * group` rows (the caller's own layout, e.g. a packed lm_head's
/// codes for a tied embedding).
pub fn gather_rows<I: Copy + Into<i64>>(
    entries: usize,
    group: usize,
    row_len: usize,
    indices: &[I],
    out: &mut [f32],
    mut row: impl FnMut(usize, &mut [f32]),
) {
    let entries = entries as i64;
    let span = group * row_len;
    for (&ix, dst) in indices.iter().zip(out.chunks_mut(span.max(1))) {
        let ix: i64 = ix.into();
        let i = if ix < 0 { ix + entries } else { ix };
        if !(0..entries).contains(&i) {
            dst.fill(0.0);
            continue;
        }
        for (g, row_out) in dst.chunks_mut(row_len.max(1)).enumerate() {
            row(i as usize * group + g, row_out);
        }
    }
}
