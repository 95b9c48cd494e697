//! Normalisations (LayerNorm, RMSNorm, Skip RMSNorm with bias and the sum output) against an
//! f64 reference: every ISA this CPU has, odd row lengths, 0/1/many rows, NaN/Inf rows, serial
//! and a 3-lane Par (bit-identical to serial). Tolerance: rtol 1e-5, atol 1e-6.

use crate::glue_common;
use glue_common::*;

use rcpu::kernels::norm::{norm_f32, norm_f32_with, NormInputs, NormOutputs, NormParams};
use rcpu::runtime::par::{Par, Serial};
use std::sync::atomic::{AtomicUsize, Ordering};

const RTOL: f64 = 1e-5;
const ATOL: f64 = 1e-6;

struct Case {
    simplified: bool,
    eps: f32,
    n: usize,
    x: Vec<f32>,
    skip: Option<Vec<f32>>,
    bias: Option<Vec<f32>>,
    scale: Vec<f32>,
    beta: Option<Vec<f32>>,
}

/// (y, mean, inv_std, sum) in f64.
fn reference(c: &Case) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    let n = c.n;
    let rows = c.x.len() / n;
    let skip_rows = c.skip.as_ref().map(|s| s.len() / n).unwrap_or(1);
    let (mut y, mut means, mut invs, mut sums) = (vec![], vec![], vec![], vec![]);
    for r in 0..rows {
        let v: Vec<f64> = (0..n)
            .map(|i| {
                let mut v = c.x[r * n + i] as f64;
                if let Some(s) = &c.skip {
                    v += s[(r % skip_rows) * n + i] as f64;
                }
                if let Some(b) = &c.bias {
                    v += b[i] as f64;
                }
                v
            })
            .collect();
        let mean = v.iter().sum::<f64>() / n as f64;
        let var = if c.simplified {
            v.iter().map(|a| a * a).sum::<f64>() / n as f64
        } else {
            v.iter().map(|a| (a - mean) * (a - mean)).sum::<f64>() / n as f64
        };
        let d = (var + c.eps as f64).sqrt();
        for i in 0..n {
            let t = if c.simplified { v[i] } else { v[i] - mean } / d * c.scale[i] as f64;
            y.push(t + c.beta.as_ref().map(|b| b[i] as f64).unwrap_or(0.0));
        }
        means.push(mean);
        invs.push(1.0 / d);
        sums.extend(v);
    }
    (y, means, invs, sums)
}

type Outs = (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>);

fn run(c: &Case, isa: Option<rcpu::kernels::isa::Isa>, par: &dyn Par) -> Option<Outs> {
    let rows = c.x.len() / c.n;
    let mut y = vec![f32::MAX; rows * c.n];
    let mut mean = vec![f32::MAX; rows];
    let mut inv = vec![f32::MAX; rows];
    let mut sum = vec![f32::MAX; rows * c.n];
    let inp = NormInputs {
        x: &c.x,
        skip: c.skip.as_deref(),
        bias: c.bias.as_deref(),
        scale: &c.scale,
        beta: c.beta.as_deref(),
    };
    let out = NormOutputs {
        y: &mut y,
        mean: Some(&mut mean),
        inv_std: Some(&mut inv),
        sum: Some(&mut sum),
    };
    let p = NormParams {
        simplified: c.simplified,
        epsilon: c.eps,
    };
    let r = match isa {
        Some(isa) => norm_f32_with(isa, p, c.n, inp, out, par),
        None => norm_f32(p, c.n, inp, out, par),
    };
    match r {
        Ok(_) => Some((y, mean, inv, sum)),
        Err(e) if e.contains("not supported") => None,
        Err(e) => panic!("{e}"),
    }
}

fn check(c: &Case, what: &str) {
    let (ry, rm, ri, rs) = reference(c);
    let serial = run(c, None, &Serial).unwrap();
    for isa in ISAS {
        for (pname, par) in [("serial", &Serial as &dyn Par), ("3-lane", &THREE)] {
            let Some((y, m, i, s)) = run(c, Some(isa), par) else {
                continue;
            };
            let w = format!("{what} {isa:?} {pname}");
            assert_close(&format!("{w} y"), &y, &ry, RTOL, ATOL);
            assert_close(&format!("{w} inv_std"), &i, &ri, RTOL, ATOL);
            assert_close(&format!("{w} mean"), &m, &rm, RTOL, ATOL);
            if c.skip.is_some() || c.bias.is_some() {
                assert_close(&format!("{w} sum"), &s, &rs, 1e-6, 1e-7);
            } else {
                // Without a skip/bias the sum output is the input itself.
                assert_same(&format!("{w} sum"), &s, &c.x);
            }
            if isa == rcpu::kernels::isa::Isa::get() {
                assert_same(&format!("{w} vs default serial"), &y, &serial.0);
            }
        }
    }
}

fn case(rng: &mut Rng, simplified: bool, skip: bool, bias: bool, rows: usize, n: usize) -> Case {
    Case {
        simplified,
        eps: 1e-5,
        n,
        x: rng.vec_f32(rows * n, -3.0, 3.0),
        skip: skip.then(|| rng.vec_f32(rows * n, -1.0, 1.0)),
        bias: bias.then(|| rng.vec_f32(n, -0.5, 0.5)),
        scale: rng.vec_f32(n, 0.5, 1.5),
        beta: (!simplified).then(|| rng.vec_f32(n, -0.5, 0.5)),
    }
}

#[test]
fn all_sizes_all_forms() {
    let mut rng = Rng(0x5eed_1234);
    for &n in &COLS {
        for rows in [0usize, 1, 5] {
            for (simplified, skip, bias) in [
                (true, false, false),
                (false, false, false),
                (true, true, false),
                (true, true, true),
                (false, true, true),
            ] {
                let c = case(&mut rng, simplified, skip, bias, rows, n);
                check(
                    &c,
                    &format!("n={n} rows={rows} simpl={simplified} skip={skip} bias={bias}"),
                );
            }
        }
    }
}

#[test]
fn epsilon_enters_the_denominator() {
    let mut rng = Rng(31);
    for simplified in [true, false] {
        let mut c = case(&mut rng, simplified, false, false, 3, 17);
        c.eps = 0.5;
        check(&c, &format!("eps=0.5 simpl={simplified}"));
    }
}

#[test]
fn many_rows_take_the_parallel_path() {
    let mut rng = Rng(77);
    for simplified in [true, false] {
        let c = case(&mut rng, simplified, true, true, 40, 4096);
        let par = CountingPar(AtomicUsize::new(0));
        let got = run(&c, None, &par).unwrap();
        assert!(par.0.load(Ordering::Relaxed) > 0, "parallel path not taken");
        let serial = run(&c, None, &Serial).unwrap();
        assert_same("parallel vs serial y", &got.0, &serial.0);
        assert_same("parallel vs serial inv", &got.2, &serial.2);
        assert_same("parallel vs serial sum", &got.3, &serial.3);
        check(&c, "40x4096");
    }
}

#[test]
fn skip_broadcast_over_batch() {
    let mut rng = Rng(9);
    let (rows, n) = (12, 17);
    let mut c = case(&mut rng, true, false, true, rows, n);
    c.skip = Some(rng.vec_f32(4 * n, -1.0, 1.0)); // 3 batches of [4, 17] share one skip
    check(&c, "skip [4,17] over [3,4,17]");
}

#[test]
fn nan_and_inf_rows_stay_in_their_rows() {
    let mut rng = Rng(3);
    for simplified in [true, false] {
        for &n in &[3usize, 17, 100] {
            let mut c = case(&mut rng, simplified, false, false, 4, n);
            c.x[n + 1] = f32::NAN; // row 1
            c.x[2 * n] = f32::INFINITY; // row 2
            c.x[3 * n + n - 1] = f32::NEG_INFINITY; // row 3
            check(&c, &format!("specials simpl={simplified} n={n}"));
            let (y, ..) = run(&c, None, &Serial).unwrap();
            assert!(
                y[..n].iter().all(|v| v.is_finite()),
                "row 0 must stay finite"
            );
            assert!(y[n..2 * n].iter().all(|v| v.is_nan()), "NaN row is NaN");
        }
    }
}

#[test]
fn rejects_bad_lengths() {
    let x = vec![1.0f32; 6];
    let mut y = vec![0.0f32; 6];
    let p = NormParams {
        simplified: true,
        epsilon: 1e-5,
    };
    let inp = NormInputs {
        x: &x,
        skip: None,
        bias: None,
        scale: &[1.0, 1.0],
        beta: None,
    };
    let out = NormOutputs {
        y: &mut y,
        mean: None,
        inv_std: None,
        sum: None,
    };
    assert!(norm_f32(p, 3, inp, out, &Serial).is_err());
}

/// Rows of large finite values (ORT 1.31's answers, probed): LayerNorm takes the mean first and
/// the variance around it, so a constant row has variance 0 (y = beta, inv_std = 1/sqrt(eps)) and
/// a mean that stays finite even when the f32 sum overflows; a variance that overflows gives
/// inv_std 0 and y = beta. RMSNorm's sum of squares overflows to inf: y = 0, inv_std = 0.
#[test]
fn large_finite_rows_stay_finite_as_ort() {
    let mut rng = Rng(21);
    for &v in &[2e19f32, -1e37, 3e38] {
        for &n in &[8usize, 17, 100] {
            let mut c = case(&mut rng, false, false, false, 2, n);
            c.x = vec![v; 2 * n];
            check(&c, &format!("LayerNorm constant {v} n={n}"));
            // Variance overflow: +-v alternating.
            c.x = (0..2 * n)
                .map(|i| if i % 2 == 0 { v } else { -v })
                .collect();
            for isa in ISAS {
                let Some((y, _, inv, _)) = run(&c, Some(isa), &Serial) else {
                    continue;
                };
                let beta = c.beta.as_ref().unwrap();
                for (i, &t) in y.iter().enumerate() {
                    assert_eq!(t, beta[i % n], "{isa:?} {v} n={n} y[{i}]");
                }
                assert!(inv.iter().all(|&d| d == 0.0), "{isa:?} {v} n={n} {inv:?}");
            }
            let mut c = case(&mut rng, true, false, false, 2, n);
            c.x = vec![v; 2 * n];
            for isa in ISAS {
                let Some((y, _, inv, _)) = run(&c, Some(isa), &Serial) else {
                    continue;
                };
                assert!(y.iter().all(|&t| t == 0.0), "{isa:?} RMS {v} n={n} {y:?}");
                assert!(inv.iter().all(|&d| d == 0.0), "{isa:?} RMS {v} n={n}");
            }
        }
    }
}
