//! Scalar reference row normalisation (serial f32 sums, mean then variance, as ORT's CPU EP).

use super::{NormParams, Row};

pub(super) fn row(
    p: NormParams,
    r: Row<'_>,
    y: &mut [f32],
    mut sum_out: Option<&mut [f32]>,
) -> (f32, f32) {
    let n = r.x.len();
    let mut s = 0.0f32;
    for i in 0..n {
        let mut v = r.x[i];
        if let Some(k) = r.skip {
            v += k[i];
        }
        if let Some(b) = r.bias {
            v += b[i];
        }
        if let Some(o) = sum_out.as_deref_mut() {
            o[i] = v;
        }
        y[i] = v;
        s += v;
    }
    let mean = if p.simplified {
        s / n as f32
    } else {
        super::row_mean(y)
    };
    // RMSNorm: the plain sum of squares; LayerNorm: mean first, then the variance around it.
    let c = if p.simplified { 0.0 } else { mean };
    let q: f32 = y.iter().map(|&v| (v - c) * (v - c)).sum();
    let d = (q / n as f32 + p.epsilon).sqrt();
    for i in 0..n {
        y[i] = if p.simplified {
            y[i] / d * r.scale[i]
        } else {
            let t = (y[i] - mean) / d * r.scale[i];
            match r.beta {
                Some(b) => t + b[i],
                None => t,
            }
        };
    }
    (mean, 1.0 / d)
}
