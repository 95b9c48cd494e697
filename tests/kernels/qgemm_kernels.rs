//! QGemm (QLinearMatMul compute) against the naive scalar reference: every ISA variant the CPU
//! has, all three sign combinations, per-tensor and per-column scales / zero points, odd and
//! empty sizes, batched products, prepacked and per-call packed B, serial and threaded.

use crate::qgemm_common;

use qgemm_common::{QCase, ALL_SIGNS};
use rcpu::kernels::isa::Isa;
use rcpu::kernels::qgemm::{pack, run_with, BSource, Kernels, QGemmPath, QGemmRoute};
use rcpu::runtime::par::{Par, ScopedThreads, Serial};
use rcpu::telemetry::ledger::Variant;

fn kernel_sets() -> Vec<(Isa, &'static Kernels)> {
    [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni]
        .into_iter()
        .filter_map(|i| Kernels::for_isa(i).ok().map(|k| (i, k)))
        .collect()
}

/// Runs `c` with every kernel set, packed and per-call packed B, and compares exactly.
fn check(c: &QCase, par: &dyn Par, what: &str) {
    let want = c.expected();
    let packed = pack(&c.b, c.k, c.n, c.batches, c.signs);
    for (isa, kern) in kernel_sets() {
        for (src, label) in [
            (BSource::Packed(packed.view()), "packed"),
            (BSource::Raw(&c.b), "raw"),
        ] {
            let mut got = vec![0xA5u8; c.out_len()];
            let call = c.call(src);
            let route = run_with(kern, &call, &mut got, par).unwrap();
            // AVX-512 without VNNI runs the AVX2 table.
            let table = if isa == Isa::Avx512 { Isa::Avx2 } else { isa };
            let rows = call.prods.a_offsets.len() * call.prods.m;
            let path = if rows > 1 {
                QGemmPath::Gemm
            } else {
                QGemmPath::Gemv
            };
            assert_eq!(route, QGemmRoute { isa: table, path }, "{what} m={}", c.m);
            if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
                panic!(
                    "{what} {:?} m={} k={} n={} isa={} B {label}: first mismatch at {i} (row {}, col {}): got {} want {}",
                    c.signs,
                    c.m,
                    c.k,
                    c.n,
                    isa.name(),
                    i / c.n.max(1),
                    i % c.n.max(1),
                    got[i],
                    want[i]
                );
            }
        }
    }
}

const SHAPES: [(usize, usize, usize); 12] = [
    (0, 5, 7),
    (1, 1, 1),
    (1, 7, 13),
    (1, 64, 64),
    (1, 301, 200),
    (2, 3, 17),
    (5, 33, 65),
    (6, 64, 16),
    (7, 130, 129),
    (13, 100, 47),
    (3, 0, 9),
    (19, 260, 70),
];

#[test]
fn every_variant_matches_the_reference() {
    for (si, &signs) in ALL_SIGNS.iter().enumerate() {
        for (i, &(m, k, n)) in SHAPES.iter().enumerate() {
            for (col_scale, col_zero) in
                [(false, false), (true, false), (false, true), (true, true)]
            {
                let seed = (si * 100 + i * 4) as u64 + col_scale as u64 * 2 + col_zero as u64;
                let c = QCase::new(signs, m, k, n, col_scale, col_zero, seed);
                check(
                    &c,
                    &Serial,
                    &format!("scale/col={col_scale} zero/col={col_zero}"),
                );
            }
        }
    }
}

#[test]
fn extreme_zero_points_match() {
    for &signs in &ALL_SIGNS {
        for &(m, k, n) in &[(1, 257, 33), (9, 128, 80)] {
            let c = QCase::new(signs, m, k, n, false, true, 7).with_extreme_zeros();
            check(&c, &Serial, "extreme zero points");
        }
    }
}

#[test]
fn large_shapes_on_threads_match() {
    let par = ScopedThreads(3);
    for &signs in &ALL_SIGNS {
        // M = 1 (decode split over panels), M > 1 (row blocks x panels), a tall M.
        for &(m, k, n) in &[(1, 2048, 1000), (50, 515, 300), (400, 64, 70)] {
            let c = QCase::new(signs, m, k, n, true, false, 11);
            check(&c, &par, "threaded");
        }
    }
}

#[test]
fn batched_products_match() {
    for &signs in &ALL_SIGNS {
        // Six products over three A blocks (one repeated) and two B batches, per-column params.
        let c = QCase::batched(signs, 5, 45, 70, &[0, 1, 2, 0, 1, 2], 2, true, true, 3);
        check(&c, &Serial, "batched");
        check(&c, &ScopedThreads(2), "batched threaded");
    }
}

#[test]
fn ties_round_half_to_even() {
    // k = 1, every product an integer, scale 0.5: x.5 values must round to even like MLAS.
    for &signs in &ALL_SIGNS {
        let mut c = QCase::new(signs, 4, 1, 40, false, false, 5);
        c.a_scale = 1.0;
        c.b_scale = vec![0.5];
        c.y_scale = 1.0;
        check(&c, &Serial, "ties");
    }
}

#[test]
fn bad_sizes_are_errors() {
    let c = QCase::new(ALL_SIGNS[0], 2, 8, 8, false, false, 1);
    let mut out = vec![0u8; c.out_len()];
    let short = &c.b[..10];
    let err = run_with(
        Kernels::active(),
        &c.call(BSource::Raw(short)),
        &mut out,
        &Serial,
    );
    assert!(err.is_err(), "a short B was accepted");
    let mut bad = QCase::new(ALL_SIGNS[0], 2, 8, 8, true, false, 1);
    bad.b_scale.truncate(3);
    let err = run_with(
        Kernels::active(),
        &bad.call(BSource::Raw(&bad.b)),
        &mut out,
        &Serial,
    );
    assert!(err.unwrap_err().contains("b_scale"));
}

#[test]
fn packed_b_is_cache_line_aligned() {
    // The tile kernels load 64 bytes at a time from panel offsets that are multiples of 64: a
    // 64-byte aligned start keeps every load inside one cache line. Small, odd and large sizes
    // (a large plain Vec starts 16 bytes into its mapping).
    for &(k, n) in &[(1, 1), (7, 13), (301, 200), (2048, 2048)] {
        let c = QCase::new(ALL_SIGNS[1], 1, k, n, false, false, 2);
        let packed = pack(&c.b, c.k, c.n, c.batches, c.signs);
        let v = packed.view();
        assert_eq!(
            v.data.as_ptr() as usize % 64,
            0,
            "k={k} n={n}: packed B unaligned"
        );
        // Every panel starts on a cache line too (panel offsets are multiples of 64).
        for p in 0..v.panels() {
            assert_eq!(
                v.panel(0, p).0.as_ptr() as usize % 64,
                0,
                "k={k} n={n} panel {p}"
            );
        }
    }
}

/// The ledger text of every QGemm route: what rcpu-bench, pytest and the e2e tests read, byte
/// for byte.
#[test]
fn route_texts_are_the_ledger_names() {
    let mut got = Vec::new();
    for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni] {
        for path in [QGemmPath::Gemv, QGemmPath::Gemm] {
            got.push(QGemmRoute { isa, path }.text());
        }
    }
    let want = [
        "scalar-gemv",
        "scalar-gemm",
        "avx2-gemv",
        "avx2-gemm",
        "avx2-gemv",
        "avx2-gemm",
        "avx512vnni-gemv",
        "avx512vnni-gemm",
    ];
    assert_eq!(got, want);
}
