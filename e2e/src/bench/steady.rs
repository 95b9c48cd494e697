//! Steady-state detection over a series of per-round figures (rule 4).
//!
//! The rolling median over the last `k` rounds smooths single-round noise. The steady window is the
//! longest suffix of the series (at least `min_len` rounds, and at least half the series) in which
//! every rolling median lies within `tol` (relative) of the others: a warm-up at the start is cut
//! off, and a drift that keeps moving the rolling median leaves no such suffix.

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SteadyCfg {
    /// Rolling-median width.
    pub k: usize,
    /// Largest relative spread (max/min - 1) of the rolling medians inside the window.
    pub tol: f64,
    /// Fewest rounds a steady window may have.
    pub min_len: usize,
}

impl Default for SteadyCfg {
    fn default() -> Self {
        SteadyCfg {
            k: 3,
            tol: 0.05,
            min_len: 5,
        }
    }
}

/// The steady window `[start, len)` if there is one.
pub fn steady_start(series: &[f64], cfg: &SteadyCfg) -> Option<usize> {
    let n = series.len();
    let need = cfg.min_len.max(cfg.k).max(n.div_ceil(2));
    if n < need || n == 0 {
        return None;
    }
    (0..=n - need).find(|&s| window_is_steady(&series[s..], cfg))
}

fn window_is_steady(w: &[f64], cfg: &SteadyCfg) -> bool {
    let k = cfg.k.max(1);
    if w.len() < k {
        return false;
    }
    let meds: Vec<f64> = (k - 1..w.len())
        .map(|i| super::quant::median(&w[i + 1 - k..=i]))
        .collect();
    let lo = super::quant::min(&meds);
    let hi = super::quant::max(&meds);
    lo > 0.0 && hi / lo - 1.0 < cfg.tol
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_series_is_steady_from_the_start() {
        let s = [
            100.0, 101.0, 99.5, 100.2, 100.4, 99.8, 100.1, 100.3, 99.9, 100.0,
        ];
        assert_eq!(steady_start(&s, &SteadyCfg::default()), Some(0));
    }

    #[test]
    fn monotonic_drift_is_not_steady() {
        let s: Vec<f64> = (0..12).map(|i| 100.0 * 1.03f64.powi(i)).collect();
        assert_eq!(steady_start(&s, &SteadyCfg::default()), None);
    }

    #[test]
    fn warm_up_spike_is_excluded() {
        let s = [
            400.0, 250.0, 180.0, 100.0, 101.0, 99.0, 100.5, 100.0, 99.5, 100.2, 100.1, 99.9,
        ];
        let st = steady_start(&s, &SteadyCfg::default()).expect("steady after the spike");
        assert!(
            (1..=3).contains(&st),
            "window starts after the spike, at {st}"
        );
    }

    #[test]
    fn too_short_series_is_not_steady() {
        assert_eq!(steady_start(&[1.0, 1.0, 1.0], &SteadyCfg::default()), None);
    }
}
