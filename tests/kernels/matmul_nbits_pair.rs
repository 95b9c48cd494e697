//! The pair call (`matmul_pair_m1`: two weights over one row of A, combined per column group by
//! an epilogue, one dispatch): the epilogue must see exactly what two separate `matmul_packed`
//! calls write, at every ISA level, accuracy level, scale format and lane count, on shapes with
//! a partial last block (K % 32 != 0) and a partial last group (N % 32 != 0); rows the separate
//! calls must answer themselves (non-finite values, values large enough to overflow) are
//! refused; mismatched weights are an error.

use crate::nbits_common::{Problem, THREE};

use rcpu::kernels::matmul_nbits::{
    matmul_packed_with, matmul_pair_m1_with, pack, pair_row_fits, Kernels, PackedNBits,
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
    // (K, N, acc, zero points, f16 scales at level 4)
    let shapes = [
        (896, 4864, 4, false, true),
        (896, 4864, 4, false, false),
        (100, 37, 4, true, true),
        (33, 1, 4, false, true),
        (64, 96, 0, true, true),
        (129, 70, 0, false, true),
        (4864, 96, 1, false, true),
    ];
    for (i, &(k, n, acc, zp, f16)) in shapes.iter().enumerate() {
        let mut first = Problem::new(k, n, 1, 32, acc, zp, false, 11 + i as u64);
        let mut second = Problem::new(k, n, 1, 32, acc, zp, false, 101 + i as u64);
        first.p = first.p.with_acc4_f16_scales(f16);
        second.p = second.p.with_acc4_f16_scales(f16);
        let (w1, w2) = (packed(&first), packed(&second));
        let a = &first.a;
        for kern in Kernels::supported() {
            for (pname, par) in pars {
                let ctx = format!(
                    "K={k} N={n} acc={acc} zp={zp} f16={f16} {} {pname}",
                    kern.isa.name()
                );
                let mut y1 = vec![f32::NAN; n];
                let mut y2 = vec![f32::NAN; n];
                matmul_packed_with(kern, a, 1, &w1, None, &mut y1, par).unwrap();
                matmul_packed_with(kern, a, 1, &w2, None, &mut y2, par).unwrap();
                let mut want = vec![0f32; n];
                epi(&y1, &y2, &mut want);
                let mut got = vec![f32::NAN; n];
                let route = matmul_pair_m1_with(kern, a, &w1, &w2, &epi, &mut got, par)
                    .unwrap()
                    .unwrap_or_else(|| panic!("{ctx}: a finite row was refused"));
                assert!(route.path_is_pair(), "{ctx}: route {route:?}");
                for (j, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g.to_bits(), w.to_bits(), "{ctx}: column {j}: {g} vs {w}");
                }
            }
        }
    }
}

#[test]
fn pair_refuses_rows_the_separate_calls_must_answer() {
    let pr = Problem::new(96, 40, 1, 32, 4, false, false, 7);
    let pr2 = Problem::new(96, 40, 1, 32, 4, false, false, 8);
    let (w1, w2) = (packed(&pr), packed(&pr2));
    for (what, v) in [
        ("NaN", f32::NAN),
        ("infinity", f32::INFINITY),
        ("huge", 3e38),
    ] {
        let mut a = pr.a.clone();
        a[50] = v;
        assert!(!pair_row_fits(&a, &w1, &w2), "{what} accepted");
        for kern in Kernels::supported() {
            let mut out = vec![0f32; 40];
            let r = matmul_pair_m1_with(kern, &a, &w1, &w2, &epi, &mut out, &Serial).unwrap();
            assert!(r.is_none(), "{what}: {} took the row", kern.isa.name());
            assert!(out.iter().all(|&x| x == 0.0), "{what}: output written");
        }
    }
    assert!(pair_row_fits(&pr.a, &w1, &w2));
}

#[test]
fn pair_of_different_shapes_is_an_error() {
    let pr = Problem::new(96, 40, 1, 32, 4, false, false, 7);
    let other = Problem::new(96, 72, 1, 32, 4, false, false, 8);
    let (w1, w2) = (packed(&pr), packed(&other));
    let mut out = vec![0f32; 40];
    let r = matmul_pair_m1_with(Kernels::active(), &pr.a, &w1, &w2, &epi, &mut out, &Serial);
    assert!(r.is_err_and(|e| e.contains("differ")));
}
