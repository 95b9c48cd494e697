//! Scalar reference of the activations: `f32::exp` and rcpu's erf polynomials, no SIMD.

use super::consts::*;
use super::Activation;

fn horner(x: f32, c: &[f32]) -> f32 {
    c.iter().rev().fold(0.0, |r, &ci| r * x + ci)
}

pub(crate) fn sigmoid(x: f32) -> f32 {
    let e = (-x.abs()).exp();
    let r = 1.0 / (1.0 + e);
    if x < 0.0 {
        e * r
    } else {
        r
    }
}

/// `1 + erf(z)`, from erfc where `z <= -1` so small results keep their precision.
pub(crate) fn one_plus_erf(z: f32) -> f32 {
    if z.is_nan() {
        return z;
    }
    let a = z.abs();
    if a < 1.0 {
        return z * horner(z * z, &ERF_SMALL) + 1.0;
    }
    let ec = if a < ERFC_MAX_ARG {
        (-a * a + horner(a, &ERFC_LARGE)).exp()
    } else {
        0.0
    };
    if z < 0.0 {
        ec
    } else {
        2.0 - ec
    }
}

pub(crate) fn gelu_erf(x: f32) -> f32 {
    0.5 * x * one_plus_erf(x * std::f32::consts::FRAC_1_SQRT_2)
}

pub(crate) fn gelu_tanh(x: f32) -> f32 {
    let u = x * (x * x * (GELU_TANH_ALPHA * GELU_TANH_GAMMA) + GELU_TANH_ALPHA);
    x * sigmoid(2.0 * u)
}

pub(super) fn apply(act: Activation, x: &[f32], b: Option<&[f32]>, out: &mut [f32]) {
    let f = match act {
        Activation::Sigmoid => sigmoid,
        Activation::GeluErf => gelu_erf,
        Activation::GeluTanh => gelu_tanh,
        Activation::Relu => |x: f32| if x < 0.0 { 0.0 } else { x },
        Activation::Tanh => f32::tanh,
        Activation::Square => |x: f32| x * x,
    };
    match b {
        None => out.iter_mut().zip(x).for_each(|(o, &v)| *o = f(v)),
        Some(b) => out
            .iter_mut()
            .zip(x.iter().zip(b))
            .for_each(|(o, (&v, &c))| *o = f(v + c)),
    }
}
