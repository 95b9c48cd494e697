//! Softmax against an f64 reference: last axis and strided axes, odd lengths, 0/1/many rows,
//! NaN / +inf / all -inf rows, every ISA this CPU has, serial and a 3-lane Par (bit-identical).
//! Tolerance: rtol 1e-5, atol 1e-6.

use crate::glue_common;
use glue_common::*;

use rcpu::kernels::isa::Isa;
use rcpu::kernels::softmax::{softmax_f32, softmax_f32_with, SoftmaxPath, SoftmaxRoute};
use rcpu::runtime::par::{Par, Serial};
use rcpu::telemetry::ledger::Variant;
use std::sync::atomic::{AtomicUsize, Ordering};

const RTOL: f64 = 1e-5;
const ATOL: f64 = 1e-6;

fn reference(x: &[f32], outer: usize, dim: usize, inner: usize) -> Vec<f64> {
    let mut y = vec![0.0f64; x.len()];
    for o in 0..outer {
        for c in 0..inner {
            let idx = |j: usize| (o * dim + j) * inner + c;
            let v: Vec<f64> = (0..dim).map(|j| x[idx(j)] as f64).collect();
            let poisoned = v.iter().any(|a| a.is_nan() || *a == f64::INFINITY)
                || v.iter().all(|a| *a == f64::NEG_INFINITY);
            let m = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = v.iter().map(|a| (a - m).exp()).sum();
            for j in 0..dim {
                y[idx(j)] = if poisoned {
                    f64::NAN
                } else {
                    (v[j] - m).exp() / s
                };
            }
        }
    }
    y
}

fn check(x: &[f32], outer: usize, dim: usize, inner: usize, what: &str) {
    let want = reference(x, outer, dim, inner);
    let mut serial = vec![0.0f32; x.len()];
    softmax_f32(x, outer, dim, inner, &mut serial, &Serial).unwrap();
    for isa in ISAS {
        for (pname, par) in [("serial", &Serial as &dyn Par), ("3-lane", &THREE)] {
            let mut y = vec![f32::MAX; x.len()];
            match softmax_f32_with(isa, x, outer, dim, inner, &mut y, par) {
                Ok(route) => {
                    // The family has no VNNI table: the AVX-512 one serves that level.
                    let table = if isa == Isa::Avx512Vnni {
                        Isa::Avx512
                    } else {
                        isa
                    };
                    let path = if inner == 1 {
                        SoftmaxPath::LastAxis
                    } else {
                        SoftmaxPath::Strided
                    };
                    assert_eq!(route, SoftmaxRoute { isa: table, path }, "{what}");
                }
                Err(e) if e.contains("not supported") => continue,
                Err(e) => panic!("{e}"),
            }
            let w = format!("{what} {isa:?} {pname}");
            assert_close(&w, &y, &want, RTOL, ATOL);
            if isa == Isa::get() {
                assert_same(&format!("{w} vs default serial"), &y, &serial);
            }
        }
    }
}

#[test]
fn last_axis_all_sizes() {
    let mut rng = Rng(11);
    for &n in &COLS {
        for rows in [0usize, 1, 6] {
            let x = rng.vec_f32(rows * n, -8.0, 8.0);
            check(&x, rows, n, 1, &format!("rows={rows} n={n}"));
        }
    }
}

#[test]
fn large_logits_do_not_overflow() {
    let mut rng = Rng(12);
    let x: Vec<f32> = rng
        .vec_f32(3 * 33, -1.0, 1.0)
        .iter()
        .map(|v| v * 80.0 + 1000.0)
        .collect();
    check(&x, 3, 33, 1, "shifted by 1000");
}

#[test]
fn strided_axes() {
    let mut rng = Rng(13);
    for (outer, dim, inner) in [(2, 5, 3), (1, 17, 16), (3, 1, 7), (4, 33, 2), (0, 3, 4)] {
        let x = rng.vec_f32(outer * dim * inner, -5.0, 5.0);
        check(&x, outer, dim, inner, &format!("[{outer},{dim},{inner}]"));
    }
}

#[test]
fn special_rows() {
    let mut rng = Rng(14);
    for &n in &[1usize, 3, 17, 100] {
        let mut x = rng.vec_f32(5 * n, -4.0, 4.0);
        x[n] = f32::NAN; // row 1: NaN
        x[2 * n + n / 2] = f32::INFINITY; // row 2: +inf
        x[3 * n..4 * n].fill(f32::NEG_INFINITY); // row 3: all -inf
        x[4 * n] = f32::NEG_INFINITY; // row 4: one -inf (gets probability 0)
        check(&x, 5, n, 1, &format!("specials n={n}"));
        let mut y = vec![0.0f32; x.len()];
        softmax_f32(&x, 5, n, 1, &mut y, &Serial).unwrap();
        assert!(
            y[..n].iter().all(|v| v.is_finite()),
            "row 0 must stay finite"
        );
        if n > 1 {
            assert_eq!(y[4 * n], 0.0, "exp(-inf) is 0");
        }
    }
}

#[test]
fn many_rows_take_the_parallel_path() {
    let mut rng = Rng(15);
    let (rows, n) = (24, 4096);
    let x = rng.vec_f32(rows * n, -6.0, 6.0);
    let par = CountingPar(AtomicUsize::new(0));
    let mut y = vec![0.0f32; x.len()];
    softmax_f32(&x, rows, n, 1, &mut y, &par).unwrap();
    assert!(par.0.load(Ordering::Relaxed) > 0, "parallel path not taken");
    let mut s = vec![0.0f32; x.len()];
    softmax_f32(&x, rows, n, 1, &mut s, &Serial).unwrap();
    assert_same("parallel vs serial", &y, &s);
    check(&x, rows, n, 1, "24x4096");
}

#[test]
fn rejects_bad_lengths() {
    let mut y = vec![0.0f32; 5];
    assert!(softmax_f32(&[0.0; 6], 2, 3, 1, &mut y, &Serial).is_err());
}

/// The ledger text of every Softmax route: what rcpu-bench, pytest and the e2e tests read, byte
/// for byte.
#[test]
fn route_texts_are_the_ledger_names() {
    let mut got = Vec::new();
    for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni] {
        for path in [SoftmaxPath::LastAxis, SoftmaxPath::Strided] {
            got.push(SoftmaxRoute { isa, path }.text());
        }
    }
    let want = [
        "scalar-last-axis",
        "scalar-strided",
        "avx2-last-axis",
        "scalar-strided",
        "avx512-last-axis",
        "scalar-strided",
        "avx512-last-axis",
        "scalar-strided",
    ];
    assert_eq!(got, want);
}
