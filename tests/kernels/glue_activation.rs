//! Sigmoid, GELU (erf), GELU (tanh), FastGELU-with-bias, Relu and Tanh against f64 references over
//! wide ranges and IEEE specials, odd lengths, every ISA this CPU has, serial and a 3-lane Par
//! (bit-identical to serial). Tolerance: sigmoid rtol 1e-5 / atol 1e-6; GELU rtol 1e-5 / atol 1e-5;
//! Relu and Square (Pow 2) exact (Relu keeps -0 and NaN, as ORT); Tanh rtol 1e-6 / atol 1e-30, relative
//! near 0 too (the f64 references are exact, so this bounds rcpu's error, not a diff to ORT).

use crate::glue_common;
use glue_common::*;

use rcpu::kernels::activation::{activation_f32, activation_f32_with, Activation};
use rcpu::runtime::par::{Par, Serial};
use std::sync::atomic::{AtomicUsize, Ordering};

const SPECIALS: [f32; 16] = [
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    0.0,
    -0.0,
    1e-30,
    -1e-30,
    88.0,
    -88.0,
    100.0,
    -100.0,
    1e30,
    -1e30,
    -5.5,
    -3.9,
    1.0,
];

fn reference(act: Activation, x: f32) -> f64 {
    let x = x as f64;
    match act {
        Activation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        Activation::GeluErf => 0.5 * x * erfc64(-x / std::f64::consts::SQRT_2),
        Activation::GeluTanh => {
            let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
            0.5 * x * (1.0 + u.tanh())
        }
        Activation::Relu => {
            if x < 0.0 {
                0.0
            } else {
                x
            }
        }
        Activation::Tanh => x.tanh(),
        // The f64 square of an f32 is exact; one rounding to f32, as `x * x` in f32.
        Activation::Square => ((x * x) as f32) as f64,
    }
}

fn tol(act: Activation) -> (f64, f64) {
    match act {
        Activation::Sigmoid => (1e-5, 1e-6),
        Activation::Relu => (0.0, 0.0),
        Activation::Tanh => (1e-6, 1e-30),
        Activation::Square => (0.0, 0.0),
        _ => (1e-5, 1e-5),
    }
}

const ACTS: [Activation; 6] = [
    Activation::Sigmoid,
    Activation::GeluErf,
    Activation::GeluTanh,
    Activation::Relu,
    Activation::Tanh,
    Activation::Square,
];

fn check(act: Activation, x: &[f32], bias: Option<&[f32]>, what: &str) {
    let want: Vec<f64> = x
        .iter()
        .enumerate()
        .map(|(i, &v)| reference(act, bias.map(|b| v + b[i % b.len()]).unwrap_or(v)))
        .collect();
    let (rtol, atol) = tol(act);
    let mut serial = vec![0.0f32; x.len()];
    activation_f32(act, x, bias, &mut serial, &Serial).unwrap();
    for isa in ISAS {
        for (pname, par) in [("serial", &Serial as &dyn Par), ("3-lane", &THREE)] {
            let mut y = vec![f32::MAX; x.len()];
            match activation_f32_with(isa, act, x, bias, &mut y, par) {
                Ok(_) => {}
                Err(e) if e.contains("not supported") => continue,
                Err(e) => panic!("{e}"),
            }
            let w = format!("{what} {act:?} {isa:?} {pname}");
            assert_close(&w, &y, &want, rtol, atol);
            if isa == rcpu::kernels::isa::Isa::get() {
                assert_same(&format!("{w} vs default serial"), &y, &serial);
            }
        }
    }
}

#[test]
fn odd_lengths_and_specials() {
    let mut rng = Rng(21);
    for act in ACTS {
        for &n in &[0usize, 1, 3, 15, 16, 17, 100, 4096] {
            let mut x = rng.vec_f32(n, -12.0, 12.0);
            for (i, s) in SPECIALS.iter().enumerate() {
                if i * 7 < n {
                    x[i * 7] = *s;
                }
            }
            check(act, &x, None, &format!("n={n}"));
        }
    }
}

#[test]
fn dense_sweep_of_the_range() {
    // Every region of the piecewise math: erf's |z| < 1 and erfc branches, exp's underflow.
    let x: Vec<f32> = (0..40001).map(|i| -20.0 + i as f32 * 0.001).collect();
    for act in ACTS {
        check(act, &x, None, "sweep [-20, 20]");
    }
}

#[test]
fn bias_is_added_per_column() {
    let mut rng = Rng(22);
    for &n in &[1usize, 3, 17, 100] {
        let x = rng.vec_f32(4 * n, -6.0, 6.0);
        let b = rng.vec_f32(n, -1.0, 1.0);
        check(
            Activation::GeluTanh,
            &x,
            Some(&b),
            &format!("FastGelu bias n={n}"),
        );
    }
    let mut y = vec![0.0f32; 6];
    let err = activation_f32(
        Activation::GeluTanh,
        &[0.0; 6],
        Some(&[1.0; 4]),
        &mut y,
        &Serial,
    );
    assert!(
        err.is_err(),
        "a bias that does not divide X must be rejected"
    );
}

#[test]
fn large_buffers_take_the_parallel_path() {
    let mut rng = Rng(23);
    let x = rng.vec_f32(100_003, -10.0, 10.0);
    let b = rng.vec_f32(7, -1.0, 1.0);
    for act in ACTS {
        for bias in [None, Some(&b[..])] {
            let x = if bias.is_some() {
                &x[..100_002]
            } else {
                &x[..]
            };
            let par = CountingPar(AtomicUsize::new(0));
            let mut y = vec![0.0f32; x.len()];
            activation_f32(act, x, bias, &mut y, &par).unwrap();
            assert!(par.0.load(Ordering::Relaxed) > 0, "parallel path not taken");
            let mut s = vec![0.0f32; x.len()];
            activation_f32(act, x, bias, &mut s, &Serial).unwrap();
            assert_same(&format!("{act:?} parallel vs serial"), &y, &s);
        }
    }
}

/// The exp behind sigmoid (and softmax) is accurate to a few ulp, not just to the 1e-5 parity
/// tolerance: sigmoid's relative error over [-87, 87] (dominated by exp for x < 0), in units of
/// 2^-24, must stay within 4 for every variant.
#[test]
fn sigmoid_is_within_a_few_ulp() {
    let x: Vec<f32> = (0..174_001).map(|i| -87.0 + i as f32 * 0.001).collect();
    for isa in ISAS {
        let mut y = vec![0.0f32; x.len()];
        if activation_f32_with(isa, Activation::Sigmoid, &x, None, &mut y, &Serial).is_err() {
            continue;
        }
        let worst = x
            .iter()
            .zip(&y)
            .map(|(&v, &g)| {
                let w = reference(Activation::Sigmoid, v);
                ((g as f64 - w) / w).abs() / f32::EPSILON as f64 * 2.0
            })
            .fold(0.0f64, f64::max);
        eprintln!("{isa:?}: sigmoid max error {worst:.2} ulp");
        assert!(worst <= 4.0, "{isa:?}: sigmoid max error {worst:.2} ulp");
    }
}

/// Relu keeps -0 and NaN (ORT: `x < 0 ? 0 : x`), on every variant; seen failing with `max(x, 0)`
/// in the other operand order (NaN became 0).
#[test]
fn relu_keeps_negative_zero_and_nan() {
    let x = [-0.0f32, f32::NAN, -1.0, 2.0];
    for isa in ISAS {
        let mut y = vec![7.0f32; 4];
        match activation_f32_with(isa, Activation::Relu, &x, None, &mut y, &Serial) {
            Ok(_) => {}
            Err(e) if e.contains("not supported") => continue,
            Err(e) => panic!("{e}"),
        }
        assert!(
            y[0] == 0.0 && y[0].is_sign_negative(),
            "{isa:?}: -0 -> {}",
            y[0]
        );
        assert!(y[1].is_nan(), "{isa:?}: NaN -> {}", y[1]);
        assert_eq!((y[2], y[3]), (0.0, 2.0), "{isa:?}");
    }
}
