//! Scalar reference softmax (`f32::exp`), contiguous rows and the strided form.

pub(super) fn row(x: &[f32], out: &mut [f32], n: usize) {
    for (xr, or) in x.chunks(n).zip(out.chunks_mut(n)) {
        one_row(xr, or);
    }
}

fn one_row(x: &[f32], out: &mut [f32]) {
    let m = x
        .iter()
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    // A NaN anywhere is not picked by the max, but exp(NaN - m) poisons the sum as in ORT.
    let mut sum = 0.0f32;
    for (o, &v) in out.iter_mut().zip(x) {
        let e = (v - m).exp();
        *o = e;
        sum += e;
    }
    let r = 1.0 / sum;
    out.iter_mut().for_each(|o| *o *= r);
}

/// Softmax along the middle axis of `x: [dim, inner]` (one outer block).
pub(super) fn strided(x: &[f32], dim: usize, inner: usize, out: &mut [f32]) {
    for c in 0..inner {
        let at = |j: usize| j * inner + c;
        let m = (0..dim).fold(
            f32::NEG_INFINITY,
            |m, j| if x[at(j)] > m { x[at(j)] } else { m },
        );
        let mut sum = 0.0f32;
        for j in 0..dim {
            let e = (x[at(j)] - m).exp();
            out[at(j)] = e;
            sum += e;
        }
        let r = 1.0 / sum;
        for j in 0..dim {
            out[at(j)] *= r;
        }
    }
}
