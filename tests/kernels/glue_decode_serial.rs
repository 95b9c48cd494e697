//! The glue nodes of a decode step (Qwen2-0.5B: RMSNorm over hidden 896, Sigmoid and Mul over the
//! 4864-wide MLP) run on the calling lane alone: at those sizes the kernel is well under a
//! microsecond, less than waking a second lane costs, so each family's split threshold
//! (`PAR_MIN_ELEMS`) keeps them serial. A control at the threshold proves the counting Par sees
//! a split when one happens.

use crate::glue_common;
use glue_common::*;

use rcpu::kernels::activation::{self, activation_f32, Activation};
use rcpu::kernels::elementwise::{self, binary_f32, BinaryOp};
use rcpu::kernels::norm::{self, norm_f32, NormInputs, NormOutputs, NormParams};
use std::sync::atomic::{AtomicUsize, Ordering};

const HIDDEN: usize = 896;
const INTER: usize = 4864;

/// Task dispatches of one skip-RMSNorm over `rows` rows of `n`.
fn norm_dispatches(rows: usize, n: usize) -> usize {
    let mut rng = Rng(5);
    let (x, skip) = (
        rng.vec_f32(rows * n, -1.0, 1.0),
        rng.vec_f32(rows * n, -1.0, 1.0),
    );
    let scale = vec![1.0f32; n];
    let (mut y, mut sum) = (vec![0.0f32; rows * n], vec![0.0f32; rows * n]);
    let par = CountingPar(AtomicUsize::new(0));
    let p = NormParams {
        simplified: true,
        epsilon: 1e-6,
    };
    let inp = NormInputs {
        x: &x,
        skip: Some(&skip),
        bias: None,
        scale: &scale,
        beta: None,
    };
    let out = NormOutputs {
        y: &mut y,
        mean: None,
        inv_std: None,
        sum: Some(&mut sum),
    };
    norm_f32(p, n, inp, out, &par).unwrap();
    par.0.load(Ordering::Relaxed)
}

fn sigmoid_dispatches(n: usize) -> usize {
    let x = Rng(6).vec_f32(n, -4.0, 4.0);
    let mut y = vec![0.0f32; n];
    let par = CountingPar(AtomicUsize::new(0));
    activation_f32(Activation::Sigmoid, &x, None, &mut y, &par).unwrap();
    par.0.load(Ordering::Relaxed)
}

fn mul_dispatches(n: usize) -> usize {
    let mut rng = Rng(7);
    let (a, b) = (rng.vec_f32(n, -1.0, 1.0), rng.vec_f32(n, -1.0, 1.0));
    let mut y = vec![0.0f32; n];
    let par = CountingPar(AtomicUsize::new(0));
    binary_f32(BinaryOp::Mul, &a, &[1, n], &b, &[1, n], &mut y, &par).unwrap();
    par.0.load(Ordering::Relaxed)
}

#[test]
fn decode_shaped_glue_runs_on_one_lane() {
    assert_eq!(
        norm_dispatches(1, HIDDEN),
        0,
        "skip RMSNorm 1x{HIDDEN} was split"
    );
    assert_eq!(sigmoid_dispatches(INTER), 0, "Sigmoid of {INTER} was split");
    assert_eq!(mul_dispatches(INTER), 0, "Mul of {INTER} was split");
    assert_eq!(mul_dispatches(HIDDEN), 0, "Mul of {HIDDEN} was split");
}

#[test]
fn glue_at_the_split_threshold_is_split() {
    let rows = norm::PAR_MIN_ELEMS.div_ceil(HIDDEN);
    assert!(norm_dispatches(rows, HIDDEN) > 0, "norm {rows}x{HIDDEN}");
    assert!(sigmoid_dispatches(activation::PAR_MIN_ELEMS) > 0);
    assert!(mul_dispatches(elementwise::PAR_MIN_ELEMS) > 0);
}
