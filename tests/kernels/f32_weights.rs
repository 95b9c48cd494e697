//! Constant-B GEMM (`sgemm_weight`, every ISA variant) against a naive f64 triple loop, and the
//! prepacked and unpacked forms of one call against each other.
//!
//! Tolerance vs the reference: |got - ref| <= 1e-5 * (|alpha| * sum_p |op(A)_ip op(B)_pj| +
//! |beta C_ij|), as in f32_sgemm. Packed vs unpacked: bit-identical (same kernels, same order
//! of operations), for every shape, transpose, alpha/beta and lane count.

use rcpu::kernels::gemm::{pack_weight, pack_weight_with, sgemm_weight, sgemm_weight_with, Weight};
use rcpu::kernels::isa::Isa;
use rcpu::runtime::par::{Par, ScopedThreads, Serial};

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
/// packed and unpacked variant names, `None` when the CPU lacks `isa`.
fn check(isa: Isa, c: Case, seed: u64) -> Option<(&'static str, &'static str)> {
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
    let mut names = (None, None);
    let mut first: Option<Vec<f32>> = None;
    for par in pars {
        for w in [Weight::Packed(&packed), unpacked] {
            let mut cm = c0.clone();
            let name =
                sgemm_weight_with(isa, ta, m, n, k, alpha, a, lda, w, beta, &mut cm, ldc, par)
                    .unwrap();
            match w {
                Weight::Packed(_) => names.0 = Some(name),
                Weight::Unpacked { .. } => names.1 = Some(name),
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
    Some((names.0.unwrap(), names.1.unwrap()))
}

fn expect_route(isa: Isa, c: Case, names: (&str, &str)) {
    let class = if c.m == 0 || c.n == 0 {
        "empty"
    } else if c.k == 0 {
        "k0-scale"
    } else if c.m == 1 {
        "gemv-m1"
    } else {
        "gemm"
    };
    for (name, form) in [(names.0, "prepacked"), (names.1, "unpacked")] {
        assert!(
            name.starts_with(isa.name()) && name.contains(class),
            "{name} for {isa:?} {c:?}"
        );
        if class == "gemm" || class == "gemv-m1" {
            assert!(name.ends_with(form), "{name}: expected the {form} route");
        }
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
                if let Some(names) = check(isa, c, (si * 4 + t) as u64 + 7) {
                    expect_route(isa, c, names);
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
    let v1 = sgemm_weight(
        false,
        m,
        n,
        k,
        1.0,
        &a,
        k,
        Weight::Packed(&p),
        0.0,
        &mut c1,
        n,
        &Serial,
    )
    .unwrap();
    let w = Weight::Unpacked {
        b: &b,
        ldb: n,
        trans: false,
    };
    let v2 = sgemm_weight(false, m, n, k, 1.0, &a, k, w, 0.0, &mut c2, n, &Serial).unwrap();
    assert!(
        v1.ends_with("prepacked") && v2.ends_with("unpacked"),
        "{v1} {v2}"
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
        let r = sgemm_weight_with(
            isa,
            false,
            1,
            5,
            6,
            1.0,
            &a,
            6,
            Weight::Packed(&p),
            0.0,
            &mut c,
            5,
            &Serial,
        );
        assert!(r.is_err(), "a scalar-packed weight must not run on {isa:?}");
    }
    let wrong = std::panic::catch_unwind(|| {
        let mut c = vec![0f32; 4];
        sgemm_weight_with(
            Isa::Scalar,
            false,
            1,
            4,
            6,
            1.0,
            &a,
            6,
            Weight::Packed(&p),
            0.0,
            &mut c,
            4,
            &Serial,
        )
    });
    assert!(wrong.is_err(), "a 6x5 packed weight must refuse a 6x4 call");
}
