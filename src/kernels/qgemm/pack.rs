//! The packed B layout.
//!
//! Per batch, B `[K, N]` (row-major, ONNX's layout) becomes `ceil(N / 64)` panels of 64 columns
//! (the last one `round_up(N mod 64, 16)` wide). Within a panel of width `w`, k-group `g`
//! (k = 4g .. 4g + 3) takes `4 w` bytes: column c's four k values at `g * 4w + 4c`. K is padded
//! to a multiple of 4 and columns to a multiple of 16 with zero bytes (zero in either sign).
//! Panel p of a batch starts at `p * Kp * 64`. Bytes are stored flipped (`^ 0x80`) when
//! [`Signs::flips_b`]; `colsum` holds each column's sum of the stored values, read in the
//! sign the kernels read them (int8 when A is uint8, uint8 when A is int8).

use super::{Signs, NR, PANEL};
use crate::memory::{weight_arena, ArenaBuf};

/// K rounded up to a multiple of 4.
pub fn k_padded(k: usize) -> usize {
    k.div_ceil(4) * 4
}

/// N rounded up to a multiple of `NR`.
pub fn n_padded(n: usize) -> usize {
    n.div_ceil(NR) * NR
}

/// (packed bytes, column sums) for `batches` matrices of `[k, n]`.
pub fn packed_sizes(k: usize, n: usize, batches: usize) -> (usize, usize) {
    (k_padded(k) * n_padded(n) * batches, n * batches)
}

/// [`packed_sizes`] with checked arithmetic: `None` when a size overflows or passes
/// `isize::MAX` bytes (validate a model's B shape with this before anything is sized by it).
pub fn checked_packed_sizes(k: usize, n: usize, batches: usize) -> Option<(usize, usize)> {
    if batches == 0 {
        return Some((0, 0)); // an empty B packs to nothing, however large K and N
    }
    let kp = k.checked_next_multiple_of(4)?;
    let np = n.checked_next_multiple_of(NR)?;
    let bytes = kp.checked_mul(np)?.checked_mul(batches)?;
    let sums = n.checked_mul(batches)?;
    (bytes <= isize::MAX as usize && sums <= isize::MAX as usize / 4).then_some((bytes, sums))
}

/// An owned packed B (what the weight cache holds for a constant B). The bytes are 64-byte
/// aligned, so every 64-byte load of the tile kernels reads exactly one cache line (a plain
/// `Vec` of this size starts 16 bytes into its mapping: every load split two lines), and they
/// live on huge pages, in the weight arena ([`crate::memory::weight_arena`]).
pub struct PackedB {
    pub k: usize,
    pub n: usize,
    pub batches: usize,
    pub signs: Signs,
    data: ArenaBuf<u8>,
    colsum: Vec<i32>,
}

impl PackedB {
    pub fn view(&self) -> PackedView<'_> {
        PackedView {
            k: self.k,
            n: self.n,
            batches: self.batches,
            signs: self.signs,
            data: &self.data,
            colsum: &self.colsum,
        }
    }

    /// Bytes held: the arena piece (alignment padding included) and the column sums.
    pub fn bytes(&self) -> usize {
        self.data.taken_bytes() + self.colsum.capacity() * 4
    }
}

/// A packed B, owned elsewhere (the weight cache or per-call scratch).
#[derive(Clone, Copy)]
pub struct PackedView<'a> {
    pub k: usize,
    pub n: usize,
    pub batches: usize,
    pub signs: Signs,
    pub data: &'a [u8],
    pub colsum: &'a [i32],
}

impl<'a> PackedView<'a> {
    /// Number of panels per batch.
    pub fn panels(&self) -> usize {
        self.n.div_ceil(PANEL)
    }

    /// Panel `p` of batch `bi`: its bytes, width (multiple of 16) and real column count.
    pub fn panel(&self, bi: usize, p: usize) -> (&'a [u8], usize, usize) {
        let kp = k_padded(self.k);
        let c0 = p * PANEL;
        let cols = PANEL.min(self.n - c0);
        let width = n_padded(cols);
        let start = bi * kp * n_padded(self.n) + c0 * kp;
        (&self.data[start..start + kp * width], width, cols)
    }

    /// Checks that the buffers have the sizes the shape asks for.
    pub fn check(&self) -> Result<(), String> {
        let (d, c) = packed_sizes(self.k, self.n, self.batches);
        if self.data.len() < d || self.colsum.len() < c {
            return Err(format!(
                "packed B holds {} bytes and {} column sums, [{}, {}] x {} needs {d} and {c}",
                self.data.len(),
                self.colsum.len(),
                self.k,
                self.n,
                self.batches
            ));
        }
        Ok(())
    }
}

/// Packs `batches` row-major `[k, n]` matrices `b` into `data` and `colsum` (sizes from
/// [`packed_sizes`]; every byte and sum is written, so stale contents are fine).
pub fn pack_into(
    b: &[u8],
    k: usize,
    n: usize,
    batches: usize,
    signs: Signs,
    data: &mut [u8],
    colsum: &mut [i32],
) {
    let (dl, cl) = packed_sizes(k, n, batches);
    assert!(
        b.len() >= k * n * batches && data.len() >= dl && colsum.len() >= cl,
        "pack_into: buffers too small for [{k}, {n}] x {batches}"
    );
    let flip = if signs.flips_b() { 0x80u8 } else { 0 };
    let read = |v: u8| -> i32 {
        if signs.a_signed() {
            v as i32
        } else {
            v as i8 as i32
        }
    };
    let (kp, np) = (k_padded(k), n_padded(n));
    for bi in 0..batches {
        let src = &b[bi * k * n..(bi + 1) * k * n];
        let dst = &mut data[bi * kp * np..(bi + 1) * kp * np];
        let sums = &mut colsum[bi * n..(bi + 1) * n];
        sums.fill(0);
        for p in 0..n.div_ceil(PANEL) {
            let c0 = p * PANEL;
            let width = n_padded(PANEL.min(n - c0));
            let panel = &mut dst[c0 * kp..c0 * kp + kp * width];
            for g in 0..kp / 4 {
                let group = &mut panel[g * 4 * width..(g + 1) * 4 * width];
                for j in 0..4 {
                    let kk = 4 * g + j;
                    if kk >= k {
                        for c in 0..width {
                            group[4 * c + j] = 0;
                        }
                        continue;
                    }
                    let row = &src[kk * n..(kk + 1) * n];
                    for c in 0..width {
                        let col = c0 + c;
                        let v = if col < n { row[col] ^ flip } else { 0 };
                        group[4 * c + j] = v;
                        if col < n {
                            sums[col] = sums[col].wrapping_add(read(v));
                        }
                    }
                }
            }
        }
    }
}

/// Packs into a fresh [`PackedB`].
pub fn pack(b: &[u8], k: usize, n: usize, batches: usize, signs: Signs) -> PackedB {
    try_pack(b, k, n, batches, signs).expect("QLinearMatMul pack: out of memory")
}

/// [`pack`], or `None` when the packed buffers cannot be allocated (or their size overflows).
pub fn try_pack(b: &[u8], k: usize, n: usize, batches: usize, signs: Signs) -> Option<PackedB> {
    let (dl, cl) = checked_packed_sizes(k, n, batches)?;
    let mut data = weight_arena().try_alloc::<u8>(dl).ok()?;
    let mut colsum = crate::memory::try_vec(cl, 0i32).ok()?;
    pack_into(b, k, n, batches, signs, &mut data, &mut colsum);
    Some(PackedB {
        k,
        n,
        batches,
        signs,
        data,
        colsum,
    })
}
