//! The null band and the verdict (rule 2).
//!
//! The null arm repeats one arm (A/A). Its per-round ratio `null_b_over_a` would be 1 on a quiet
//! machine; its spread over the steady rounds is the band of ratios noise alone produces. The band
//! is taken symmetric in log space (a 0.9 and a 1.1 are the same distance from 1), so an effect
//! counts as real only when |ln ratio| exceeds the largest |ln null ratio| in the band.

use super::quant::{max, min, quantile};

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct NullBand {
    /// Observed low and high of the null ratio (min/max, or 10-90% with 10+ rounds).
    pub lo: f64,
    pub hi: f64,
    /// Half-width in ln units, symmetric around 1.
    pub half_width_ln: f64,
}

impl NullBand {
    pub fn from_ratios(r: &[f64]) -> Option<NullBand> {
        if r.is_empty() || r.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
            return None;
        }
        let (lo, hi) = if r.len() >= 10 {
            (quantile(r, 0.1), quantile(r, 0.9))
        } else {
            (min(r), max(r))
        };
        Some(NullBand {
            lo,
            hi,
            half_width_ln: lo.ln().abs().max(hi.ln().abs()),
        })
    }
    /// The symmetric band as ratios `[1/e^w, e^w]`.
    pub fn symmetric(&self) -> (f64, f64) {
        ((-self.half_width_ln).exp(), self.half_width_ln.exp())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Verdict {
    Real,
    Noise,
}

impl Verdict {
    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Real => "real",
            Verdict::Noise => "noise",
        }
    }
}

/// `ratio` (ORT / rcpu) against the band.
pub fn verdict(ratio: f64, band: &NullBand) -> Verdict {
    if ratio.is_finite() && ratio > 0.0 && ratio.ln().abs() > band.half_width_ln {
        Verdict::Real
    } else {
        Verdict::Noise
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn band(r: &[f64]) -> NullBand {
        NullBand::from_ratios(r).unwrap()
    }

    #[test]
    fn inside_band_is_noise() {
        let b = band(&[0.97, 1.02, 1.04, 0.99, 1.01]);
        assert_eq!(verdict(1.03, &b), Verdict::Noise);
        assert_eq!(verdict(0.97, &b), Verdict::Noise);
    }

    #[test]
    fn outside_band_is_real_both_ways() {
        let b = band(&[0.98, 1.02, 1.01, 0.99]);
        assert_eq!(verdict(1.30, &b), Verdict::Real);
        assert_eq!(verdict(0.80, &b), Verdict::Real);
    }

    #[test]
    fn band_wider_than_effect_is_noise() {
        // A/A wanders 25% either way; a 15% effect proves nothing.
        let b = band(&[0.8, 1.25, 1.1, 0.9, 1.0]);
        assert_eq!(verdict(1.15, &b), Verdict::Noise);
        // The band is symmetric: an A/A that only ran slow still covers the fast side.
        let one_sided = band(&[1.0, 1.2, 1.1]);
        assert_eq!(verdict(1.0 / 1.15, &one_sided), Verdict::Noise);
        let slow_side = band(&[0.8, 1.0, 0.9]);
        assert_eq!(verdict(1.15, &slow_side), Verdict::Noise);
    }

    #[test]
    fn band_uses_10_90_range_with_many_rounds() {
        let mut r = vec![1.0; 10];
        r[0] = 3.0; // one outlier round does not widen a 10-round band to 3x
        let b = band(&r);
        assert!(b.hi < 1.3, "{b:?}");
        assert!(NullBand::from_ratios(&[]).is_none());
        assert!(NullBand::from_ratios(&[1.0, f64::NAN]).is_none());
    }
}
