//! Scalar reference kernels of the attention family: scaled QK scores, weighted sums of matrix
//! rows (scores from transposed keys, probabilities times V), one rotary row.

/// `out[j] = scale * dot(q, k[j])` for the first `out.len()` rows of `k` (rows of `q.len()`).
pub(super) fn scores(q: &[f32], k: &[f32], scale: f32, out: &mut [f32]) {
    for (o, kr) in out.iter_mut().zip(k.chunks_exact(q.len())) {
        *o = scale * q.iter().zip(kr).map(|(a, b)| a * b).sum::<f32>();
    }
}

/// [`scores`] of two query rows over the same key rows (`out0` for `q[0]`, `out1` for `q[1]`).
pub(super) fn scores_pair(
    q: [&[f32]; 2],
    k: &[f32],
    scale: f32,
    out0: &mut [f32],
    out1: &mut [f32],
) {
    scores(q[0], k, scale, out0);
    scores(q[1], k, scale, out1);
}

/// `out[c] = scale * sum_r coef[r] * m[r * ld + c]` for `c < out.len()`: scores from transposed
/// keys (`coef` = query, `m` = K^T `[H, ld]`) and probabilities times V (`m` = V, scale 1).
pub(super) fn rows(coef: &[f32], m: &[f32], ld: usize, scale: f32, out: &mut [f32]) {
    out.fill(0.0);
    for (r, &x) in coef.iter().enumerate() {
        for (o, &v) in out.iter_mut().zip(&m[r * ld..]) {
            *o += x * v;
        }
    }
    out.iter_mut().for_each(|o| *o *= scale);
}

/// [`rows`] for `g` coefficient rows (`coef` `[g, r]`, `out` `[g, n]`) over the same matrix:
/// the reference of the grouped prefill kernel, one [`rows`] call per row.
pub(super) fn rows_group(
    g: usize,
    coef: &[f32],
    m: &[f32],
    ld: usize,
    scale: f32,
    out: &mut [f32],
) {
    if g == 0 {
        return;
    }
    let (r, n) = (coef.len() / g, out.len() / g);
    if r == 0 || n == 0 {
        out.iter_mut().for_each(|o| *o = 0.0 * scale);
        return;
    }
    for (c, o) in coef.chunks_exact(r).zip(out.chunks_exact_mut(n)) {
        rows(c, m, ld, scale, o);
    }
}

/// Rotates the first `2 * cos.len()` elements of `x` into `out` (rotate-half pairs `(i, i + half)`
/// or interleaved pairs `(2i, 2i + 1)`) and copies the rest of the row unchanged.
pub(super) fn rope_row(x: &[f32], cos: &[f32], sin: &[f32], interleaved: bool, out: &mut [f32]) {
    let half = cos.len();
    let rot = 2 * half;
    for i in 0..half {
        let (a, b) = if interleaved {
            (2 * i, 2 * i + 1)
        } else {
            (i, i + half)
        };
        let (x1, x2) = (x[a], x[b]);
        out[a] = x1 * cos[i] - x2 * sin[i];
        out[b] = x2 * cos[i] + x1 * sin[i];
    }
    out[rot..].copy_from_slice(&x[rot..]);
}
