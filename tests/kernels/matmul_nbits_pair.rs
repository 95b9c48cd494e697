//! The pair call (`matmul_pair`: two weights over M rows of A, combined per column group by an
//! epilogue, one dispatch): the epilogue must see exactly what two separate `matmul_packed`
//! calls write, at every ISA level, accuracy level, scale format, lane count and row count
//! (one row: the decode split; more: row tiles, a partial last one included), 4- and 8-bit
//! weights, on shapes with a partial last block (K % 32 != 0) and a partial last group (N % 32
//! != 0, N % 16 != 0); rows the separate
//! calls must answer themselves (non-finite values, values large enough to overflow, in any
//! row) are refused, and so are the AMX GEMM's row counts; mismatched weights are an error.

use crate::nbits_common::{Problem, THREE};

use rcpu::kernels::matmul_nbits::{
    matmul_packed_with, matmul_pair_with, pack, pair_rows_fit, Kernels, NBitsPath, PackedNBits,
};
use rcpu::runtime::par::{Par, ScopedThreads, Serial};

/// An epilogue that depends on both inputs and their order (a swapped or shifted pairing, or a
/// group handed another group's values, changes it).
fn epi(x: &[f32], y: &[f32], out: &mut [f32]) {
    for ((o, &a), &b) in out.iter_mut().zip(x).zip(y) {
        *o = a * 3.0 - b;
    }
}

fn packed(pr: &Problem) -> PackedNBits {
    pack(&pr.b, &pr.scales, pr.zp.as_deref(), &pr.p)
}

#[test]
fn pair_equals_two_separate_calls_bit_for_bit() {
    let two = ScopedThreads(2);
    let pars: [(&str, &dyn Par); 3] = [("serial", &Serial), ("2 lanes", &two), ("3 lanes", &THREE)];
    // (K, N, acc, zero points, f16 scales at level 4, row counts)
    let few: &[usize] = &[1, 5];
    let many: &[usize] = &[1, 2, 5, 17, 33];
    let shapes = [
        (896, 4864, 4, false, true, few),
        (896, 4864, 4, false, false, &[1][..]),
        (100, 37, 4, true, true, many),
        (33, 1, 4, false, true, many),
        (64, 96, 0, true, true, many),
        (129, 70, 0, false, true, many),
        (4864, 96, 1, false, true, few),
        // Rows over several prefill tasks (16 rows a task in f32 at K = 4864, 48 on the int8
        // path at K = 8200, 256 at a short K), each task's rows 64 at a time.
        (4864, 40, 1, false, true, &[37][..]),
        (8200, 40, 4, false, true, &[100][..]),
        (64, 40, 4, true, true, &[300][..]),
    ];
    // Every shape with 4-bit weights, and with 8-bit ones (16-column groups, `bits8`).
    let cases = shapes.iter().enumerate().flat_map(|s| [(4, s), (8, s)]);
    for (bits, (i, &(k, n, acc, zp, f16, ms))) in cases {
        let problem = if bits == 8 {
            Problem::new8
        } else {
            Problem::new
        };
        for &m in ms {
            let mut first = problem(k, n, m, 32, acc, zp, false, 11 + i as u64);
            let mut second = problem(k, n, m, 32, acc, zp, false, 101 + i as u64);
            first.p = first.p.with_acc4_f16_scales(f16);
            second.p = second.p.with_acc4_f16_scales(f16);
            let (w1, w2) = (packed(&first), packed(&second));
            let a = &first.a;
            for kern in Kernels::supported() {
                for (pname, par) in pars {
                    let ctx = format!(
                        "bits={bits} K={k} N={n} M={m} acc={acc} zp={zp} f16={f16} {} {pname}",
                        kern.isa.name()
                    );
                    let mut y1 = vec![f32::NAN; m * n];
                    let mut y2 = vec![f32::NAN; m * n];
                    matmul_packed_with(kern, a, m, &w1, None, &mut y1, par).unwrap();
                    matmul_packed_with(kern, a, m, &w2, None, &mut y2, par).unwrap();
                    let mut want = vec![0f32; m * n];
                    epi(&y1, &y2, &mut want);
                    let mut got = vec![f32::NAN; m * n];
                    let r = matmul_pair_with(kern, a, m, &w1, &w2, &epi, &mut got, par).unwrap();
                    let path = kern.route(acc, m).path;
                    if matches!(path, NBitsPath::AmxGemm | NBitsPath::F32Dequant) {
                        // No pair path on the AMX GEMM's or the dequantizing GEMM's route: the
                        // separate calls run.
                        assert!(r.is_none(), "{ctx}: the {path:?} route took the pair path");
                        continue;
                    }
                    let route = r.unwrap_or_else(|| panic!("{ctx}: finite rows were refused"));
                    assert!(route.path_is_pair(), "{ctx}: route {route:?}");
                    assert_eq!(
                        route.path,
                        match (acc == 4, m > 1) {
                            (false, false) => NBitsPath::F32GemvPair,
                            (false, true) => NBitsPath::F32GemmPair,
                            (true, false) => NBitsPath::Int8GemvPair,
                            (true, true) => NBitsPath::Int8GemmPair,
                        },
                        "{ctx}"
                    );
                    for (j, (g, w)) in got.iter().zip(&want).enumerate() {
                        assert_eq!(g.to_bits(), w.to_bits(), "{ctx}: element {j}: {g} vs {w}");
                    }
                }
            }
        }
    }
}

#[test]
fn pair_refuses_rows_the_separate_calls_must_answer() {
    for m in [1usize, 3] {
        let pr = Problem::new(96, 40, m, 32, 4, false, false, 7);
        let pr2 = Problem::new(96, 40, m, 32, 4, false, false, 8);
        let (w1, w2) = (packed(&pr), packed(&pr2));
        for (what, v) in [
            ("NaN", f32::NAN),
            ("infinity", f32::INFINITY),
            ("huge", 3e38),
        ] {
            // In the last row: every row is checked, not only the first.
            let mut a = pr.a.clone();
            a[(m - 1) * 96 + 50] = v;
            assert!(!pair_rows_fit(&a, m, &w1, &w2), "M={m} {what} accepted");
            for kern in Kernels::supported() {
                let mut out = vec![0f32; m * 40];
                let r = matmul_pair_with(kern, &a, m, &w1, &w2, &epi, &mut out, &Serial).unwrap();
                assert!(
                    r.is_none(),
                    "M={m} {what}: {} took the rows",
                    kern.isa.name()
                );
                assert!(
                    out.iter().all(|&x| x == 0.0),
                    "M={m} {what}: output written"
                );
            }
        }
        assert!(pair_rows_fit(&pr.a, m, &w1, &w2));
    }
}

#[test]
fn pair_of_different_shapes_is_an_error() {
    let pr = Problem::new(96, 40, 1, 32, 4, false, false, 7);
    let other = Problem::new(96, 72, 1, 32, 4, false, false, 8);
    let (w1, w2) = (packed(&pr), packed(&other));
    let mut out = vec![0f32; 40];
    let r = matmul_pair_with(
        Kernels::active(),
        &pr.a,
        1,
        &w1,
        &w2,
        &epi,
        &mut out,
        &Serial,
    );
    assert!(r.is_err_and(|e| e.contains("differ")));
    // The same shape in 4 and 8 bits: different groups, an error too.
    let eight = Problem::new8(96, 40, 1, 32, 4, false, false, 8);
    let w8 = packed(&eight);
    let r = matmul_pair_with(
        Kernels::active(),
        &pr.a,
        1,
        &w1,
        &w8,
        &epi,
        &mut out,
        &Serial,
    );
    assert!(r.is_err_and(|e| e.contains("differ")));
}
