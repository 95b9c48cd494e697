//! Parity measures.

/// ||a - b||_2 / max(||b||_2, tiny).
pub fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    let (mut num, mut den) = (0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        num += (x as f64 - y as f64).powi(2);
        den += (y as f64).powi(2);
    }
    (num / den.max(1e-30)).sqrt()
}

/// Largest |a - b| / (atol + rtol * |b|); <= 1 means within tolerance. NaNs must coincide.
pub fn max_scaled_err(a: &[f32], b: &[f32], rtol: f32, atol: f32) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter()
        .zip(b)
        .map(|(&x, &y)| {
            if x.is_nan() || y.is_nan() {
                if x.is_nan() && y.is_nan() {
                    0.0
                } else {
                    f32::INFINITY
                }
            } else if x == y {
                0.0
            } else {
                (x - y).abs() / (atol + rtol * y.abs())
            }
        })
        .fold(0.0, f32::max)
}
