//! Per-call preparation of A: once per call, shared by every column group.
//!
//! fp32 path: rows copied into a zero-padded buffer of `k_blocks * block_size` columns (so the
//! kernels read whole blocks and the padded weight codes, which are 0, meet a = 0), plus the f32
//! sum of each row over each block (for the zero-point term `-zp * sum(a)`).
//! int8 path: each row quantised per block (symmetric, scale = max|a| / 127, round to nearest
//! even), zero padded, plus the integer sum of each row over each block.

use super::params::NBitsParams;

/// A, prepared for the tile kernels. Row `r` of the active representation starts at `r * kp`;
/// per-block values of row `r` at `r * kb`.
#[derive(Debug, Default)]
pub struct PreparedA {
    /// Padded row length (`k_blocks * block_size`).
    pub kp: usize,
    /// Blocks per row.
    pub kb: usize,
    /// fp32 path: padded A.
    pub f: Vec<f32>,
    /// fp32 path: per (row, block) sum of A.
    pub fsum: Vec<f32>,
    /// int8 path: quantised A.
    pub q: Vec<i8>,
    /// int8 path: per (row, block) scale of A.
    pub qscale: Vec<f32>,
    /// int8 path: per (row, block) sum of quantised A.
    pub qsum: Vec<i32>,
}

impl PreparedA {
    /// Prepares the first `m` rows of `a` (row length `p.k`) for `p`'s accuracy level.
    pub fn new(a: &[f32], m: usize, p: &NBitsParams) -> PreparedA {
        let (kb, bs) = (p.k_blocks(), p.block_size);
        let kp = kb * bs;
        let mut out = PreparedA {
            kp,
            kb,
            ..Default::default()
        };
        if p.int8_compute() {
            out.q = vec![0i8; m * kp];
            out.qscale = vec![0f32; m * kb];
            out.qsum = vec![0i32; m * kb];
            for r in 0..m {
                let row = &a[r * p.k..(r + 1) * p.k];
                for b in 0..kb {
                    let src = &row[b * bs..((b + 1) * bs).min(p.k)];
                    let dst = &mut out.q[r * kp + b * bs..r * kp + b * bs + src.len()];
                    let (scale, sum) = quantize_block(src, dst);
                    out.qscale[r * kb + b] = scale;
                    out.qsum[r * kb + b] = sum;
                }
            }
        } else {
            out.f = vec![0f32; m * kp];
            out.fsum = vec![0f32; m * kb];
            for r in 0..m {
                let row = &a[r * p.k..(r + 1) * p.k];
                out.f[r * kp..r * kp + p.k].copy_from_slice(row);
                for b in 0..kb {
                    let blk = &out.f[r * kp + b * bs..r * kp + (b + 1) * bs];
                    out.fsum[r * kb + b] = blk.iter().sum();
                }
            }
        }
        out
    }
}

/// Quantises one block symmetrically to int8; returns (scale, sum of the codes).
fn quantize_block(src: &[f32], dst: &mut [i8]) -> (f32, i32) {
    let amax = src.iter().fold(0f32, |acc, x| acc.max(x.abs()));
    let scale = amax / 127.0;
    let inv = if amax > 0.0 { 127.0 / amax } else { 0.0 };
    let mut sum = 0i32;
    for (d, &x) in dst.iter_mut().zip(src) {
        let q = round_ties_even_small(x * inv).clamp(-127.0, 127.0) as i8;
        *d = q;
        sum += q as i32;
    }
    (scale, sum)
}

/// Round to nearest, ties to even, for |y| < 2^22 (here |y| <= 127 plus rounding slack): adding
/// and subtracting 1.5 * 2^23 leaves the rounded value under the default rounding mode. Same
/// result as `f32::round_ties_even`, which without SSE4.1 in the baseline target is a libm call
/// per element.
#[inline]
fn round_ties_even_small(y: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (y + MAGIC) - MAGIC
}
