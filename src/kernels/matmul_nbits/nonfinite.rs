//! Rows of A holding NaN or an infinity, answered as ORT's CPU EP answers them (probed on
//! ORT 1.31.1), after the fast path has run over every row:
//!
//! * fp32 path (accuracy levels other than 4): ORT dequantises and sums `a[k] * w[k][n]` in
//!   IEEE arithmetic. A NaN anywhere makes the whole row NaN; an infinity `a[k]` contributes
//!   `a[k] * w[k][n]`: `+-inf` by the sign of the weight, NaN where the weight is 0 (and NaN
//!   where opposite infinities meet). The fast path's zero-point term (`-zp * sum(a)`) would
//!   turn every such row into NaN, so those rows are recomputed: the finite part through the
//!   fast path (infinities replaced by 0), plus `a[k] * w[k][.]` for each infinite `a[k]`, the
//!   weight row `w[k][.]` read through the same kernels as the product with a one-hot row.
//! * int8 path (accuracy level 4): ORT quantises A per block; an infinite block maximum, or a
//!   block of NaN only, makes its scale non-finite and every output of the row NaN. An isolated
//!   NaN among finite values is coded 0 here, as the fast path does already. What ORT makes of
//!   it depends on its quantizing kernel: 0 where these rules were probed, but on an AVX2 host
//!   without AVX-512 its 8-bit path codes it as the block's lowest code and its 4-bit path as no
//!   single value (the adversarial corpus leaves that case out); no answer is ORT's everywhere.
//!
//! The scan is `M * K` comparisons, negligible next to the weights; ordinary rows never leave
//! the fast path.

use super::params::NBitsParams;

/// The fast path on finite rows: `(rows, m, with_bias, out)`.
pub(crate) type FastGemm<'a> = dyn Fn(&[f32], usize, bool, &mut [f32]) -> Result<(), String> + 'a;

/// One-hot rows per weight-row product.
const ONEHOT_BATCH: usize = 16;

/// What a row of A needs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum RowFix {
    /// Every output NaN.
    AllNan,
    /// fp32 path with infinities (and no NaN): recompute.
    Infinities,
}

/// Rows of `a` (`m` rows of `p.k`) whose answers differ from the fast path's, with their fix;
/// `abs_max` is the kernel table's scan of a row ([`abs_max`] bit for bit).
pub(crate) fn scan(
    a: &[f32],
    m: usize,
    p: &NBitsParams,
    abs_max: &dyn Fn(&[f32]) -> f32,
) -> Result<Vec<(usize, RowFix)>, String> {
    let mut out = Vec::new();
    for r in 0..m {
        let row = &a[r * p.k..(r + 1) * p.k];
        if abs_max(row).is_finite() {
            continue;
        }
        let fix = if p.int8_compute() {
            let bad_block = row
                .chunks(p.block_size.max(1))
                .any(|blk| blk.iter().any(|x| x.is_infinite()) || blk.iter().all(|x| x.is_nan()));
            if !bad_block {
                continue;
            }
            RowFix::AllNan
        } else if row.iter().any(|x| x.is_nan()) {
            RowFix::AllNan
        } else {
            RowFix::Infinities
        };
        out.try_reserve(1)
            .map_err(|_| "cannot allocate the non-finite row list".to_string())?;
        out.push((r, fix));
    }
    Ok(out)
}

/// Recomputes one fp32-path row holding infinities (no NaN) into `y` (`p.n`), given `gemm`:
/// `gemm(a_rows, m, out)` runs the fast path on `m` finite rows (bias included when `bias`).
pub(crate) fn infinite_row(
    row: &[f32],
    p: &NBitsParams,
    y: &mut [f32],
    gemm: &FastGemm<'_>,
) -> Result<(), String> {
    let oom = |what: &str| format!("cannot allocate {what} for a non-finite row of A");
    let inf_at: Vec<usize> = {
        let mut v = Vec::new();
        for (k, x) in row.iter().enumerate() {
            if x.is_infinite() {
                v.try_reserve(1).map_err(|_| oom("positions"))?;
                v.push(k);
            }
        }
        v
    };
    // Finite part, with the bias.
    let mut finite = Vec::new();
    finite
        .try_reserve_exact(row.len())
        .map_err(|_| oom("a row"))?;
    finite.extend(row.iter().map(|&x| if x.is_finite() { x } else { 0.0 }));
    gemm(&finite, 1, true, y)?;
    // Weight rows of the infinite positions: one-hot rows through the same kernels, a few
    // at a time (bounded scratch: ONEHOT_BATCH rows of K and of N).
    let (k, n) = (p.k, p.n);
    let batch = ONEHOT_BATCH.min(inf_at.len());
    let cells = |a: usize, b: usize| a.checked_mul(b).ok_or_else(|| oom("weight rows"));
    let mut onehot = Vec::new();
    onehot
        .try_reserve_exact(cells(batch, k)?)
        .map_err(|_| oom("one-hot rows"))?;
    let mut w = Vec::new();
    w.try_reserve_exact(cells(batch, n)?)
        .map_err(|_| oom("weight rows"))?;
    for part in inf_at.chunks(ONEHOT_BATCH) {
        let s = part.len();
        onehot.clear();
        onehot.resize(s * k, 0.0);
        for (i, &kk) in part.iter().enumerate() {
            onehot[i * k + kk] = 1.0;
        }
        w.clear();
        w.resize(s * n, 0.0);
        gemm(&onehot, s, false, &mut w)?;
        for (i, &kk) in part.iter().enumerate() {
            for (yv, &wv) in y.iter_mut().zip(&w[i * n..(i + 1) * n]) {
                *yv += row[kk] * wv;
            }
        }
    }
    Ok(())
}

/// Largest |x| of `v` (0 when empty); +inf or NaN when `v` holds one (as the bit pattern's
/// maximum: an integer max over the magnitude bits). Finite exactly when every value is. The
/// scalar table's scan of A; the AVX-512 tables use `quant_avx512::abs_max` (the same bits,
/// several times faster: at the baseline target this fold has no unsigned max).
pub(crate) fn abs_max(v: &[f32]) -> f32 {
    f32::from_bits(v.iter().fold(0u32, |m, x| m.max(x.to_bits() & 0x7fff_ffff)))
}

/// Whether no intermediate of the fast path can overflow for a row of A with `amax = max|a|`
/// and weights with `smax = max|scale|`. Every partial sum of either path is bounded by
/// `K * amax * smax * 30` (codes and zero points lie in 0..=15, so `|q - zp|`, `|q|` and `zp`
/// are at most 15, and the fp32 path also forms `zp * sum(a)`; the int8 path's block scales
/// `amax_block / 127` times its codes stay within `amax`). Below a quarter of `f32::MAX` (in
/// f64, where the product cannot overflow) the row's outputs are finite or owe their
/// non-finite values to the bias, which a recompute would give again: the output scan can be
/// skipped. NaN or infinite `amax`/`smax` fail the test.
pub(crate) fn cannot_overflow(amax: f32, smax: f32, k: usize) -> bool {
    let bound = f64::from(amax) * f64::from(smax) * 30.0 * k as f64;
    bound < f64::from(f32::MAX) / 4.0
}

/// Finite rows of A whose output holds a NaN or an infinity (|A| near `f32::MAX`): the fast path
/// sums codes and subtracts `zp * sum(a)` per block, so an overflow can end in `inf - inf` = NaN
/// where ORT's straight sum gives an infinity. Such rows are recomputed on A scaled by a power of
/// two (exact) to the unit range, the result scaled back, then the bias added:
/// `y = 2^e * fast(a * 2^-e) + bias`. A row whose non-finite outputs come from the weights or the
/// bias (NaN scales, a NaN bias) gets the same answer again. Allocates two rows (fallibly).
// The call's inputs, its output, and the two kernels it needs (the fast path, the scan of A).
#[allow(clippy::too_many_arguments)]
pub(crate) fn rescale_overflowed_rows(
    a: &[f32],
    m: usize,
    p: &NBitsParams,
    scale_max: Option<f32>,
    bias: Option<&[f32]>,
    out: &mut [f32],
    gemm: &FastGemm<'_>,
    abs_max: &dyn Fn(&[f32]) -> f32,
) -> Result<(), String> {
    let (k, n) = (p.k, p.n);
    let mut scaled: Vec<f32> = Vec::new();
    let mut y: Vec<f32> = Vec::new();
    for r in 0..m {
        let row = &a[r * k..(r + 1) * k];
        let amax = abs_max(row);
        // Non-finite rows are `scan`'s; rows that cannot overflow need no output scan.
        if !amax.is_finite() || scale_max.is_some_and(|s| cannot_overflow(amax, s, k)) {
            continue;
        }
        let o = &mut out[r * n..(r + 1) * n];
        if o.iter().all(|v| v.is_finite()) {
            continue;
        }
        if amax == 0.0 {
            continue;
        }
        if scaled.capacity() < k || y.capacity() < n {
            let oom = |_| "cannot allocate two rows to recompute an overflowed row".to_string();
            scaled.try_reserve_exact(k).map_err(oom)?;
            y.try_reserve_exact(n).map_err(oom)?;
        }
        // amax in [2^e, 2^(e+1)): the scaled row's largest value is in [1, 2).
        let e = (amax.log2().floor() as i32).clamp(-126, 127);
        let down = 2f32.powi(-e);
        scaled.clear();
        scaled.extend(row.iter().map(|&v| v * down));
        y.clear();
        y.resize(n, 0.0);
        gemm(&scaled, 1, false, &mut y)?;
        let up = 2f32.powi(e);
        for (j, (dst, &v)) in o.iter_mut().zip(&y).enumerate() {
            *dst = v * up + bias.map_or(0.0, |b| b[j]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abs_max_sees_magnitudes_and_non_finite_values() {
        assert_eq!(abs_max(&[]), 0.0);
        assert_eq!(abs_max(&[1.0, -3.5, 2.0]), 3.5);
        assert!(abs_max(&[1.0, f32::NEG_INFINITY]).is_infinite());
        assert!(abs_max(&[f32::NAN, 1.0]).is_nan());
    }

    #[test]
    fn overflow_bound_is_conservative() {
        // Typical decode rows: far below the bound.
        assert!(cannot_overflow(100.0, 0.1, 4864));
        // The adversarial rows (|a| near f32::MAX) and hostile scales must be scanned.
        assert!(!cannot_overflow(3e38, 1e-3, 64));
        assert!(!cannot_overflow(1.0, f32::MAX / 16.0, 32));
        assert!(!cannot_overflow(f32::INFINITY, 1.0, 1));
        assert!(!cannot_overflow(f32::NAN, 1.0, 1));
        // At the bound's edge the worst output (K * amax * smax * 15) is still finite.
        let (k, smax) = (4096usize, 1.0f32);
        let amax = (f64::from(f32::MAX) / 4.0 / (30.0 * k as f64) * 0.99) as f32;
        assert!(cannot_overflow(amax, smax, k));
        assert!((f64::from(amax) * 15.0 * k as f64) < f64::from(f32::MAX));
    }
}
