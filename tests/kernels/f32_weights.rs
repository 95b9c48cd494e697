//! Constant-B GEMM (`Sgemm::run_weight`, every ISA variant) against a naive f64 triple loop, and the
//! prepacked and unpacked forms of one call against each other.
//!
//! Tolerance vs the reference: |got - ref| <= 1e-5 * (|alpha| * sum_p |op(A)_ip op(B)_pj| +
//! |beta C_ij|), as in f32_sgemm. Packed vs unpacked: bit-identical (same kernels, same order
//! of operations), for every shape, transpose, alpha/beta and lane count.

use rcpu::kernels::gemm::{
    pack_weight, pack_weight_with, BForm, GemmPath, GemmRoute, Sgemm, Weight,
};
use rcpu::kernels::isa::Isa;
use rcpu::runtime::par::{Par, ScopedThreads, Serial};
use rcpu::telemetry::ledger::Variant;

use crate::gemm_common::GemmCase;
use crate::rng;
use rng::Rng;

const ISAS: [Isa; 3] = [Isa::Scalar, Isa::Avx2, Isa::Avx512];

#[derive(Clone, Copy, Debug)]
struct Case {
    ta: bool,
    tb: bool,
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    beta: f32,
}

/// Runs `c` on `isa` packed and unpacked (serial and on 3 threads), checks the packed result
/// against the reference and every other result against the packed one bit for bit. Returns the
/// packed and unpacked routes, `None` when the CPU lacks `isa`.
fn check(isa: Isa, c: Case, seed: u64) -> Option<(GemmRoute, GemmRoute)> {
    let Case {
        ta,
        tb,
        m,
        n,
        k,
        alpha,
        beta,
    } = c;
    let (lda, ldb, ldc) = (
        if ta { m } else { k } + 1,
        if tb { k } else { n } + 2,
        n + 3,
    );
    let g = GemmCase::draw(
        &mut Rng(seed | 1),
        [ta, tb],
        [m, n, k],
        [alpha, beta],
        [lda, ldb, ldc],
    );
    let (a, b, c0) = (&g.a, &g.b, &g.c0);
    let packed = pack_weight_with(isa, tb, k, n, b, ldb).ok()?;
    let unpacked = Weight::Unpacked { b, ldb, trans: tb };
    let three = ScopedThreads(3);
    let pars: [&dyn Par; 2] = [&Serial, &three];
    let mut routes = (None, None);
    let mut first: Option<Vec<f32>> = None;
    for par in pars {
        for w in [Weight::Packed(&packed), unpacked] {
            let mut cm = c0.clone();
            let call = Sgemm::new(m, n, k, a)
                .lda(lda, ta)
                .alpha(alpha)
                .beta(beta)
                .ldc(ldc)
                .par(par);
            let route = call.run_weight_with(isa, w, &mut cm).unwrap();
            let name = route.text();
            match w {
                Weight::Packed(_) => routes.0 = Some(route),
                Weight::Unpacked { .. } => routes.1 = Some(route),
            }
            match &first {
                None => first = Some(cm),
                Some(f) => assert!(
                    f.iter().zip(&cm).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{name} {c:?} lanes={}: not bit-identical to the packed serial result",
                    par.lanes()
                ),
            }
        }
    }
    g.check(&first.unwrap(), &format!("{isa:?} {c:?}"));
    Some((routes.0.unwrap(), routes.1.unwrap()))
}

fn expect_route(isa: Isa, c: Case, routes: (GemmRoute, GemmRoute)) {
    for (route, form) in [(routes.0, BForm::Prepacked), (routes.1, BForm::Unpacked)] {
        let path = if c.m == 0 || c.n == 0 {
            GemmPath::Empty
        } else if c.k == 0 {
            GemmPath::K0Scale
        } else if c.m == 1 {
            GemmPath::WeightGemvM1(form)
        } else {
            GemmPath::WeightGemm(form)
        };
        assert_eq!(route, GemmRoute { isa, path }, "{isa:?} {c:?}");
    }
}

#[test]
fn every_isa_matches_reference_and_packed_equals_unpacked() {
    // Odd K/N (not multiples of 8/16/32 or of KC), M = 0, 1, 7, and a few big ones.
    let mut shapes = vec![
        (0, 5, 7),
        (1, 0, 7),
        (3, 5, 0),
        (1, 1, 1),
        (1, 33, 17),
        (1, 257, 300),
        (1, 100, 1000),
        (1, 2049, 3),
        (7, 31, 19),
        (7, 65, 513),
        (2, 1, 40),
        (37, 129, 259),
        (150, 70, 260),
    ];
    let mut rng = Rng(0x5eed);
    const DIMS: [usize; 8] = [1, 2, 7, 16, 17, 33, 64, 100];
    for _ in 0..12 {
        let pick = |r: &mut Rng| DIMS[(r.next_u64() % DIMS.len() as u64) as usize];
        shapes.push((pick(&mut rng), pick(&mut rng), pick(&mut rng)));
    }
    const AB: [(f32, f32); 4] = [(1.0, 0.0), (0.5, 0.0), (1.0, 1.0), (-1.5, 0.25)];
    for isa in ISAS {
        let mut ran = 0;
        for (si, &(m, n, k)) in shapes.iter().enumerate() {
            for t in 0..4 {
                let (alpha, beta) = AB[(si + t) % AB.len()];
                let c = Case {
                    ta: t & 1 != 0,
                    tb: t & 2 != 0,
                    m,
                    n,
                    k,
                    alpha,
                    beta,
                };
                if let Some(routes) = check(isa, c, (si * 4 + t) as u64 + 7) {
                    expect_route(isa, c, routes);
                    ran += 1;
                }
            }
        }
        if isa == Isa::Scalar {
            assert!(ran > 0, "the scalar reference must always run");
        }
    }
}

#[test]
fn large_product_splits_into_tasks_and_stays_identical() {
    // Big enough for the task grid (several column and row blocks) and KC slicing.
    for (m, n, k) in [(300, 1100, 600), (1, 3000, 700)] {
        for tb in [false, true] {
            let c = Case {
                ta: false,
                tb,
                m,
                n,
                k,
                alpha: 1.0,
                beta: 0.0,
            };
            let isa = rcpu::kernels::isa::Isa::get().min(Isa::Avx512);
            check(isa, c, 99).expect("the process ISA runs");
        }
    }
}

#[test]
fn process_kernels_use_the_packed_table() {
    let (m, n, k) = (4, 40, 50);
    let mut rng = Rng(3);
    let (a, b) = (rng.vec_f32(m * k, -1.0, 1.0), rng.vec_f32(k * n, -1.0, 1.0));
    let p = pack_weight(false, k, n, &b, n);
    assert_eq!((p.k(), p.n()), (k, n));
    let (mut c1, mut c2) = (vec![0f32; m * n], vec![0f32; m * n]);
    let call = Sgemm::new(m, n, k, &a);
    let v1 = call.run_weight(Weight::Packed(&p), &mut c1).unwrap();
    let w = Weight::Unpacked {
        b: &b,
        ldb: n,
        trans: false,
    };
    let v2 = call.run_weight(w, &mut c2).unwrap();
    assert_eq!(
        (v1.path, v2.path),
        (
            GemmPath::WeightGemm(BForm::Prepacked),
            GemmPath::WeightGemm(BForm::Unpacked)
        )
    );
    assert_eq!(c1, c2);
}

#[test]
fn packed_weight_refuses_another_isa_and_shape() {
    let b = vec![1f32; 6 * 5];
    let p = pack_weight_with(Isa::Scalar, false, 6, 5, &b, 5).unwrap();
    let mut c = vec![0f32; 5];
    let a = vec![1f32; 6];
    if Isa::get() > Isa::Scalar {
        let isa = Isa::get().min(Isa::Avx512);
        let r = Sgemm::new(1, 5, 6, &a).run_weight_with(isa, Weight::Packed(&p), &mut c);
        assert!(r.is_err(), "a scalar-packed weight must not run on {isa:?}");
    }
    let wrong = std::panic::catch_unwind(|| {
        let mut c = vec![0f32; 4];
        Sgemm::new(1, 4, 6, &a).run_weight_with(Isa::Scalar, Weight::Packed(&p), &mut c)
    });
    assert!(wrong.is_err(), "a 6x5 packed weight must refuse a 6x4 call");
}
