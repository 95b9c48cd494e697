//! Plain scalar references over the ORIGINAL ORT layout: the ground truth tests compare against.
//! Deliberately naive (element-wise nibble extraction, f64 accumulation) and independent of the
//! packed layout.

use super::params::{NBitsParams, NBitsWeight};

/// The code of weight (k, n) in ORT's B layout: at 4 bits two per byte, low nibble first; at
/// 8 bits one per byte.
pub fn weight_code(b: &[u8], p: &NBitsParams, k: usize, n: usize) -> u8 {
    let kb = k / p.block_size;
    let within = k % p.block_size;
    let blob = (n * p.k_blocks() + kb) * p.blob_bytes();
    if p.bits == 8 {
        return b[blob + within];
    }
    let byte = b[blob + within / 2];
    if within.is_multiple_of(2) {
        byte & 0x0F
    } else {
        byte >> 4
    }
}

/// The zero point of (column n, block kb): at 4 bits nibble kb of column n's row, at 8 bits
/// byte kb; `p.default_zero_point()` (8 or 128) when absent.
pub fn zero_point(zero_points: Option<&[u8]>, p: &NBitsParams, n: usize, kb: usize) -> u8 {
    match zero_points {
        None => p.default_zero_point(),
        Some(z) if p.bits == 8 => z[n * p.zp_row_bytes() + kb],
        Some(z) => {
            let byte = z[n * p.zp_row_bytes() + kb / 2];
            if kb.is_multiple_of(2) {
                byte & 0x0F
            } else {
                byte >> 4
            }
        }
    }
}

/// fp32 semantics: dequantise W[k][n] = (q - zp) * scale, then Y = A W (+ bias), f64 sums.
pub fn matmul_reference(
    a: &[f32],
    m: usize,
    w: &NBitsWeight<'_>,
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    let NBitsWeight {
        b,
        scales,
        zero_points,
        p,
    } = *w;
    let (k_len, n_len, kbs) = (p.k, p.n, p.k_blocks());
    for n in 0..n_len {
        let wn: Vec<f64> = (0..k_len)
            .map(|k| {
                let kb = k / p.block_size;
                let q = weight_code(b, p, k, n) as f64;
                let zp = zero_point(zero_points, p, n, kb) as f64;
                (q - zp) * scales[n * kbs + kb] as f64
            })
            .collect();
        for r in 0..m {
            let row = &a[r * k_len..(r + 1) * k_len];
            let mut s: f64 = row.iter().zip(&wn).map(|(&x, &y)| x as f64 * y).sum();
            if let Some(bias) = bias {
                s += bias[n] as f64;
            }
            out[r * n_len + n] = s as f32;
        }
    }
}

/// Accuracy-level-4 semantics: each row of A quantised per block to int8 (symmetric,
/// scale = max|a| / 127, round to nearest even), integer dot with (q - zp), then scaled.
pub fn matmul_reference_int8(
    a: &[f32],
    m: usize,
    w: &NBitsWeight<'_>,
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    let NBitsWeight {
        b,
        scales,
        zero_points,
        p,
    } = *w;
    let (k_len, n_len, kbs, bs) = (p.k, p.n, p.k_blocks(), p.block_size);
    for r in 0..m {
        let row = &a[r * k_len..(r + 1) * k_len];
        // Quantise the row, block by block.
        let mut qa = vec![0i32; k_len];
        let mut sa = vec![0f64; kbs];
        for (kb, sa_kb) in sa.iter_mut().enumerate() {
            let blk = kb * bs..((kb + 1) * bs).min(k_len);
            let amax = row[blk.clone()]
                .iter()
                .fold(0f32, |acc, x| acc.max(x.abs()));
            let scale = amax / 127.0;
            let inv = if amax > 0.0 { 127.0 / amax } else { 0.0 };
            *sa_kb = scale as f64;
            for k in blk {
                qa[k] = (row[k] * inv).round_ties_even().clamp(-127.0, 127.0) as i32;
            }
        }
        for n in 0..n_len {
            let mut s = 0f64;
            for kb in 0..kbs {
                let zp = zero_point(zero_points, p, n, kb) as i32;
                let dot: i64 = (kb * bs..((kb + 1) * bs).min(k_len))
                    .map(|k| ((weight_code(b, p, k, n) as i32 - zp) * qa[k]) as i64)
                    .sum();
                s += dot as f64 * sa[kb] * scales[n * kbs + kb] as f64;
            }
            if let Some(bias) = bias {
                s += bias[n] as f64;
            }
            out[r * n_len + n] = s as f32;
        }
    }
}

/// Scales that make the f32 dequantisation `(q - zp) * scale` overflow or carry a NaN / an
/// infinity (|scale| > f32::MAX / 16 for 4-bit codes, f32::MAX / 256 for 8-bit ones: `|q - zp|`
/// reaches 15 or 255). The fast paths multiply scales into integer or block sums, which hides
/// those infinities; such weights take [`matmul_dequant_f32`] instead.
pub fn hostile_scales(scales: &[f32], p: &NBitsParams) -> bool {
    let limit = f32::MAX / (p.code_span() + 1) as f32;
    scales.iter().any(|s| s.is_nan() || s.abs() > limit)
}

/// The contrib op's definition taken literally, for hostile scales: W[k][n] = (q - zp) * scale
/// dequantised in f32 (an overflow is an infinity, `0 * inf` a NaN), then Y = A W with f64 sums
/// (so infinities and NaN land where they must whatever the order), rounded to f32, then the
/// bias added in f32. The bias comes after the rounding as in every other path (`driver`'s
/// `write_row`): so a bias a fused plan folded in from a following Add (`fold_bias`) gives that
/// Add's answer bit for bit, and `fuse=on` equals `fuse=off`. Scalar and slow; only for weights
/// no real model has. `Err` when the per-column buffer cannot be allocated.
pub fn matmul_dequant_f32(
    a: &[f32],
    m: usize,
    w: &NBitsWeight<'_>,
    bias: Option<&[f32]>,
    out: &mut [f32],
) -> Result<(), String> {
    let NBitsWeight {
        b,
        scales,
        zero_points,
        p,
    } = *w;
    let (k_len, n_len, kbs) = (p.k, p.n, p.k_blocks());
    let mut wn: Vec<f32> = Vec::new();
    wn.try_reserve_exact(k_len)
        .map_err(|_| format!("cannot allocate {k_len} dequantised weights"))?;
    for n in 0..n_len {
        wn.clear();
        wn.extend((0..k_len).map(|k| {
            let kb = k / p.block_size;
            let q = weight_code(b, p, k, n) as f32;
            let zp = zero_point(zero_points, p, n, kb) as f32;
            (q - zp) * scales[n * kbs + kb]
        }));
        for r in 0..m {
            let row = &a[r * k_len..(r + 1) * k_len];
            let s: f64 = row
                .iter()
                .zip(&wn)
                .map(|(&x, &y)| x as f64 * y as f64)
                .sum();
            let y = s as f32;
            out[r * n_len + n] = match bias {
                Some(bias) => y + bias[n],
                None => y,
            };
        }
    }
    Ok(())
}
