//! sgemm (every ISA variant, called explicitly) against a naive f64 triple loop.
//!
//! Tolerance: |got - ref| <= 1e-5 * (|alpha| * sum_p |op(A)_ip * op(B)_pj| + |beta * C_ij|),
//! i.e. relative 1e-5 to the magnitude of the terms summed (K <= 257 keeps f32 accumulation
//! error well inside that). beta == 0 runs with a NaN-filled C; padding columns of C
//! (between n and ldc) must stay untouched.

use rcpu::kernels::gemm::{BForm, GemmPath, GemmRoute, Op, Sgemm};
use rcpu::kernels::isa::Isa;
use rcpu::runtime::par::{Par, ScopedThreads, Serial};
use rcpu::telemetry::ledger::Variant;

use crate::gemm_common::GemmCase;
use crate::rng;
use rng::Rng;

const ISAS: [Isa; 3] = [Isa::Scalar, Isa::Avx2, Isa::Avx512];

struct Case {
    ta: bool,
    tb: bool,
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    beta: f32,
    extra_ld: usize,
}

/// Runs one case on `isa` (skipped when unsupported) and checks it; returns the route's text.
fn check(isa: Isa, c: &Case, par: &dyn Par, seed: u64) -> Option<&'static str> {
    let Case {
        ta,
        tb,
        m,
        n,
        k,
        alpha,
        beta,
        extra_ld,
    } = *c;
    let (ac, bc) = (if ta { m } else { k }, if tb { k } else { n });
    let (lda, ldb, ldc) = (ac + extra_ld, bc + extra_ld, n + extra_ld);
    let g = GemmCase::draw(
        &mut Rng(seed | 1),
        [ta, tb],
        [m, n, k],
        [alpha, beta],
        [lda, ldb, ldc],
    );
    let mut cm = g.c0.clone();
    let call = Sgemm::new(m, n, k, &g.a)
        .lda(lda, ta)
        .alpha(alpha)
        .beta(beta)
        .ldc(ldc)
        .par(par);
    let bop = Op {
        data: &g.b,
        ld: ldb,
        trans: tb,
    };
    let route = match call.run_with(isa, bop, &mut cm) {
        Ok(route) => route,
        Err(_) => return None,
    };
    let name = route.text();
    g.check(
        &cm,
        &format!(
            "{name} ta={ta} tb={tb} m={m} n={n} k={k} alpha={alpha} beta={beta} ld+{extra_ld}"
        ),
    );
    let expect = if m == 0 || n == 0 {
        GemmPath::Empty
    } else if k == 0 {
        GemmPath::K0Scale
    } else if m == 1 {
        GemmPath::GemvM1
    } else if n == 1 {
        GemmPath::GemvN1
    } else {
        GemmPath::Gemm
    };
    assert_eq!(
        route,
        GemmRoute { isa, path: expect },
        "{name} for {isa:?}, m={m} n={n} k={k}"
    );
    Some(name)
}

const SIZES: [usize; 11] = [0, 1, 2, 3, 7, 16, 17, 33, 64, 100, 257];
const AB: [(f32, f32); 5] = [(1.0, 0.0), (0.5, 0.0), (1.0, 1.0), (-1.5, 0.25), (0.0, 2.0)];

fn run_all(isa: Isa) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut ran = 0;
    // Fixed edge cases, then a random sample of the size grid.
    let mut shapes = vec![
        (0, 5, 7),
        (5, 0, 7),
        (7, 5, 0),
        (1, 1, 1),
        (1, 257, 100),
        (100, 1, 257),
        (257, 33, 17),
        (64, 64, 64),
        (17, 100, 257),
        (3, 2, 33),
    ];
    for _ in 0..30 {
        let pick = |r: &mut Rng| SIZES[(r.next_u64() % SIZES.len() as u64) as usize];
        let (m, n, k) = (pick(&mut rng), pick(&mut rng), pick(&mut rng));
        if m * n * k <= 1 << 20 {
            shapes.push((m, n, k));
        }
    }
    for (si, &(m, n, k)) in shapes.iter().enumerate() {
        for t in 0..4 {
            let (alpha, beta) = AB[(si + t) % AB.len()];
            let case = Case {
                ta: t & 1 == 1,
                tb: t & 2 == 2,
                m,
                n,
                k,
                alpha,
                beta,
                extra_ld: (si % 3) * 3,
            };
            if check(isa, &case, &Serial, (si * 4 + t) as u64).is_some() {
                ran += 1;
            }
        }
    }
    if isa <= Isa::detect_hardware() {
        assert_eq!(ran, shapes.len() * 4);
    } else {
        eprintln!("{isa:?} not supported here; skipped");
    }
}

#[test]
fn scalar_variant() {
    run_all(Isa::Scalar);
}

#[test]
fn avx2_variant() {
    run_all(Isa::Avx2);
}

#[test]
fn avx512_variant() {
    run_all(Isa::Avx512);
}

#[test]
fn every_beta_zero_ignores_nan_c_even_when_k_is_zero() {
    for isa in ISAS {
        for &(m, n, k) in &[(7, 5, 0), (9, 40, 3), (1, 40, 3), (40, 1, 3)] {
            check(
                isa,
                &Case {
                    ta: false,
                    tb: true,
                    m,
                    n,
                    k,
                    alpha: 2.0,
                    beta: 0.0,
                    extra_ld: 1,
                },
                &Serial,
                7,
            );
        }
    }
}

#[test]
fn parallel_grid_and_gemv_chunks() {
    // Large enough (>= 1M MACs) to split into a tile grid / decode chunks; 3 lanes and serial.
    let pars: [&dyn Par; 2] = [&ScopedThreads(3), &Serial];
    for isa in ISAS {
        for par in pars {
            for t in 0..4 {
                let (ta, tb) = (t & 1 == 1, t & 2 == 2);
                let big = Case {
                    ta,
                    tb,
                    m: 300,
                    n: 301,
                    k: 37,
                    alpha: 0.75,
                    beta: 0.5,
                    extra_ld: 2,
                };
                check(isa, &big, par, 11);
                let m1 = Case {
                    ta,
                    tb,
                    m: 1,
                    n: 3001,
                    k: 129,
                    alpha: 1.0,
                    beta: 0.0,
                    extra_ld: 0,
                };
                check(isa, &m1, par, 12);
                let n1 = Case {
                    ta,
                    tb,
                    m: 2999,
                    n: 1,
                    k: 65,
                    alpha: 1.0,
                    beta: 1.0,
                    extra_ld: 1,
                };
                check(isa, &n1, par, 13);
            }
        }
    }
}

#[test]
fn dispatched_matches_process_isa() {
    let (m, n, k) = (5, 6, 7);
    let mut c = vec![0.0; m * n];
    let (a, b) = (vec![1.0; m * k], vec![1.0; k * n]);
    let bop = Op {
        data: &b,
        ld: n,
        trans: false,
    };
    let route = Sgemm::new(m, n, k, &a).run(bop, &mut c).unwrap();
    let isa = match Isa::get() {
        Isa::Avx512Vnni => Isa::Avx512,
        i => i,
    };
    assert_eq!(route.isa, isa, "{route:?}");
    assert!(c.iter().all(|&v| v == 7.0));
}

/// The ledger text of every GEMM route: what rcpu-bench and the e2e tests read, byte for byte.
#[test]
fn route_texts_are_the_ledger_names() {
    use GemmPath::*;
    let paths = [
        Gemm,
        GemvM1,
        GemvN1,
        Empty,
        K0Scale,
        WeightGemm(BForm::Prepacked),
        WeightGemm(BForm::Unpacked),
        WeightGemvM1(BForm::Prepacked),
        WeightGemvM1(BForm::Unpacked),
    ];
    let mut got = Vec::new();
    for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
        for path in paths {
            got.push(GemmRoute { isa, path }.text());
        }
    }
    let want = [
        "scalar-gemm-8x8",
        "scalar-gemv-m1",
        "scalar-gemv-n1",
        "scalar-empty",
        "scalar-k0-scale",
        "scalar-gemm-8x8-prepacked",
        "scalar-gemm-8x8-unpacked",
        "scalar-gemv-m1-prepacked",
        "scalar-gemv-m1-unpacked",
        "avx2-gemm-6x16",
        "avx2-gemv-m1",
        "avx2-gemv-n1",
        "avx2-empty",
        "avx2-k0-scale",
        "avx2-gemm-6x16-prepacked",
        "avx2-gemm-6x16-unpacked",
        "avx2-gemv-m1-prepacked",
        "avx2-gemv-m1-unpacked",
        "avx512-gemm-8x32",
        "avx512-gemv-m1",
        "avx512-gemv-n1",
        "avx512-empty",
        "avx512-k0-scale",
        "avx512-gemm-8x32-prepacked",
        "avx512-gemm-8x32-unpacked",
        "avx512-gemv-m1-prepacked",
        "avx512-gemv-m1-unpacked",
    ];
    assert_eq!(got, want);
    let vnni = GemmRoute {
        isa: Isa::Avx512Vnni,
        path: GemvM1,
    };
    assert_eq!(vnni.text(), "avx512-gemv-m1");
}
