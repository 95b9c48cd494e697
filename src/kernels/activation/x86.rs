//! AVX2 / AVX-512 activations, written once over [`Simd`] and instantiated per ISA.

use super::consts::*;
use super::Activation;
use crate::kernels::simd::{isa_entry, Avx2, Avx512, Simd};

const SIGMOID: u8 = 0;
const GELU_ERF: u8 = 1;
const GELU_TANH: u8 = 2;
const RELU: u8 = 3;
const TANH: u8 = 4;
const SQUARE: u8 = 5;

#[inline(always)]
fn one<S: Simd, const A: u8>(s: S, v: S::V) -> S::V {
    match A {
        SIGMOID => s.sigmoid(v),
        GELU_ERF => {
            let z = s.mul(v, s.splat(std::f32::consts::FRAC_1_SQRT_2));
            s.mul(s.mul(s.splat(0.5), v), s.one_plus_erf(z))
        }
        SQUARE => s.mul(v, v),
        // `maxps` returns its second operand for a NaN and for two zeros: NaN and -0 pass.
        RELU => s.max(s.splat(0.0), v),
        TANH => {
            let (zero, one) = (s.splat(0.0), s.splat(1.0));
            let a = s.abs(v);
            let small = s.mul(v, s.horner(s.mul(v, v), &TANH_SMALL));
            let e = s.exp_neg(s.mul(a, s.splat(-2.0)));
            let t = s.div(s.sub(one, e), s.add(one, e));
            let large = s.select_lt(v, zero, s.sub(zero, t), t);
            // NaN: not below the bound, and `t` is NaN.
            s.select_lt(a, s.splat(TANH_SMALL_MAX), small, large)
        }
        _ => {
            let x2 = s.mul(v, v);
            let inner = s.fma(
                x2,
                s.splat(GELU_TANH_ALPHA * GELU_TANH_GAMMA),
                s.splat(GELU_TANH_ALPHA),
            );
            let u2 = s.mul(s.mul(v, inner), s.splat(2.0));
            s.mul(v, s.sigmoid(u2))
        }
    }
}

#[inline(always)]
fn run<S: Simd, const A: u8>(s: S, x: &[f32], b: Option<&[f32]>, out: &mut [f32]) {
    let n = out.len();
    assert!(x.len() >= n && b.is_none_or(|b| b.len() >= n));
    let w = S::W;
    let mut i = 0;
    while i + w <= n {
        let mut v = s.load(x, i);
        if let Some(b) = b {
            v = s.add(v, s.load(b, i));
        }
        s.store(out, i, one::<S, A>(s, v));
        i += w;
    }
    if i < n {
        let r = n - i;
        let mut v = s.load_part(x, i, r, 0.0);
        if let Some(b) = b {
            v = s.add(v, s.load_part(b, i, r, 0.0));
        }
        s.store_part(out, i, r, one::<S, A>(s, v));
    }
}

#[inline(always)]
fn apply_generic<S: Simd>(s: S, act: Activation, x: &[f32], b: Option<&[f32]>, out: &mut [f32]) {
    match act {
        Activation::Sigmoid => run::<S, SIGMOID>(s, x, b, out),
        Activation::GeluErf => run::<S, GELU_ERF>(s, x, b, out),
        Activation::GeluTanh => run::<S, GELU_TANH>(s, x, b, out),
        Activation::Relu => run::<S, RELU>(s, x, b, out),
        Activation::Tanh => run::<S, TANH>(s, x, b, out),
        Activation::Square => run::<S, SQUARE>(s, x, b, out),
    }
}

isa_entry!(apply_avx2, Avx2, "avx2,fma", apply_generic,
    (act: Activation, x: &[f32], b: Option<&[f32]>, out: &mut [f32]));
isa_entry!(apply_avx512, Avx512, "avx512f,avx512dq,avx2,fma", apply_generic,
    (act: Activation, x: &[f32], b: Option<&[f32]>, out: &mut [f32]));
