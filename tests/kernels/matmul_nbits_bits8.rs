//! 8-bit MatMulNBits (`bits8`: two 4-bit halves, `q = 16 h + l`, run as one pair call).
//!
//! * The split rebuilds every code, zero point (the implied 128 included) and scale.
//! * Every kernel set, lane count, accuracy level and row count (0, 1, several, over several
//!   prefill tasks), block sizes 16..256, K with a partial last block, N with a partial last
//!   group, with and without zero points and bias: accuracy 0 / 1 against the f64 reference of
//!   the 8-bit weight (<= 1e-5 relative L2), accuracy 4 against the int8 reference of the 8-bit
//!   weight with the level's scales (<= 1e-5); packed and split-per-call (unpacked) bit for bit.
//! * Rows the pair path refuses take two separate calls whose sums are the pair's bit for bit,
//!   also when they take the rows a block at a time.
//! * Hostile scales are not split; mismatched halves are an error.

use crate::nbits_common::{acc4_scales, pack8, rel_l2, run8, Problem, THREE};

use rcpu::kernels::matmul_nbits::bits8::{matmul_bits8_with, split, Halves};
use rcpu::kernels::matmul_nbits::reference::{
    matmul_reference, matmul_reference_int8, weight_code, zero_point,
};
use rcpu::kernels::matmul_nbits::{try_pack, Kernels, NBitsPath, NBitsWeight};
use rcpu::runtime::par::{Par, ScopedThreads, Serial};

#[test]
fn split_rebuilds_every_code_zero_point_and_scale() {
    // K = 100 (4 blocks of 32, the last partial; an odd count of zero-point nibbles at bs 32
    // would need K in (64, 96]: K = 70 below).
    for (k, bs) in [(100usize, 32usize), (70, 32), (256, 16)] {
        for zp in [false, true] {
            let pr = Problem::new8(k, 9, 1, bs, 0, zp, false, 5 + k as u64);
            let s = split(&pr.weight()).unwrap();
            let (h, l) = (s.hi(), s.lo());
            assert_eq!((h.p.bits, l.p.bits), (4, 4));
            assert!(
                l.p.has_zero_points,
                "the low half needs explicit zero points"
            );
            assert_eq!(h.p.has_zero_points, zp);
            for n in 0..9 {
                for kk in 0..pr.p.k_blocks() * bs {
                    let q = weight_code(&pr.b, &pr.p, kk, n);
                    let got = 16 * weight_code(h.b, h.p, kk, n) + weight_code(l.b, l.p, kk, n);
                    assert_eq!(got, q, "K={k} zp={zp} code ({kk}, {n})");
                }
                for kb in 0..pr.p.k_blocks() {
                    let z = zero_point(pr.zp.as_deref(), &pr.p, n, kb);
                    let got = 16 * zero_point(h.zero_points, h.p, n, kb)
                        + zero_point(l.zero_points, l.p, n, kb);
                    assert_eq!(got, z, "K={k} zp={zp} zero point ({n}, {kb})");
                }
            }
            for (i, &sc) in pr.scales.iter().enumerate() {
                assert_eq!(h.scales[i], 16.0 * sc);
                assert_eq!(l.scales[i].to_bits(), sc.to_bits());
            }
        }
    }
}

#[test]
fn bits8_matches_the_references_at_every_level() {
    let two = ScopedThreads(2);
    let pars: [(&str, &dyn Par); 3] = [("serial", &Serial), ("2 lanes", &two), ("3 lanes", &THREE)];
    let few: &[usize] = &[0, 1, 5];
    let many: &[usize] = &[0, 1, 2, 5, 33];
    // (K, N, block size, acc, zero points, bias, f16 scales at level 4, row counts)
    let shapes = [
        (100, 37, 32, 4, true, true, true, many),
        (100, 37, 32, 0, false, true, true, many),
        (33, 1, 16, 4, false, false, true, many),
        (33, 1, 16, 1, true, false, true, many),
        (896, 136, 32, 4, false, false, true, few),
        (896, 136, 32, 4, true, false, false, few),
        (64, 96, 64, 0, true, true, true, many),
        (300, 70, 128, 4, true, true, true, few),
        (1000, 17, 256, 0, false, false, true, few),
        // Unpacked, the weight is split 1152 columns at a time here: three runs, the last of 96.
        (896, 2400, 32, 4, true, true, true, few),
        (896, 2400, 32, 1, false, false, true, &[1][..]),
        // Rows over several prefill tasks.
        (4864, 40, 32, 1, false, false, true, &[37][..]),
        (64, 40, 32, 4, true, false, true, &[300][..]),
    ];
    for (i, &(k, n, bs, acc, zp, bias, f16, ms)) in shapes.iter().enumerate() {
        for &m in ms {
            let mut pr = Problem::new8(k, n, m, bs, acc, zp, bias, 31 + i as u64);
            pr.p = pr.p.with_acc4_f16_scales(f16);
            let halves = pack8(&pr);
            let s = acc4_scales(&pr.scales, &pr.p);
            let w = NBitsWeight {
                scales: &s,
                ..pr.weight()
            };
            let mut want = vec![0f32; m * n];
            if acc == 4 {
                matmul_reference_int8(&pr.a, m, &w, pr.bias.as_deref(), &mut want);
            } else {
                matmul_reference(&pr.a, m, &w, pr.bias.as_deref(), &mut want);
            }
            for kern in Kernels::supported() {
                for (pname, par) in pars {
                    let ctx = format!(
                        "K={k} N={n} bs={bs} M={m} acc={acc} zp={zp} bias={bias} f16={f16} {} \
                         {pname}",
                        kern.isa.name()
                    );
                    let (route, got) = run8(kern, &pr, &pr.a, m, Some(&halves), par);
                    let e = rel_l2(&got, &want);
                    assert!(e <= 1e-5, "{ctx}: rel L2 {e:e} against the reference");
                    let (_, un) = run8(kern, &pr, &pr.a, m, None, par);
                    for (j, (g, u)) in got.iter().zip(&un).enumerate() {
                        assert_eq!(g.to_bits(), u.to_bits(), "{ctx}: unpacked element {j}");
                    }
                    if m > 0 && kern.route(acc, m).path != NBitsPath::AmxGemm {
                        assert!(route.0.path_is_pair(), "{ctx}: route {route:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn separate_calls_sum_as_the_pair() {
    // A row with an infinity makes the pair path refuse the whole call: every row then takes
    // the two separate calls, whose finite rows must be the pair's own answers bit for bit.
    // N = 40000: the separate calls take 64 rows at a time (their least block), then the rest.
    let shapes = [
        (100usize, 37usize, 4usize, 6usize),
        (130, 70, 0, 1),
        (64, 33, 1, 9),
        (64, 40000, 4, 70),
    ];
    for (k, n, acc, m) in shapes {
        let pr = Problem::new8(k, n, m, 32, acc, true, true, 90 + acc as u64);
        let halves = pack8(&pr);
        let mut a = pr.a.clone();
        a.extend((0..k).map(|j| if j == 3 { f32::INFINITY } else { 0.5 }));
        for kern in Kernels::supported() {
            for (pname, par) in [("serial", &Serial as &dyn Par), ("3 lanes", &THREE)] {
                let ctx = format!("K={k} N={n} acc={acc} M={m} {} {pname}", kern.isa.name());
                let (pair_route, pair) = run8(kern, &pr, &pr.a, m, Some(&halves), par);
                let (_, both) = run8(kern, &pr, &a, m + 1, Some(&halves), par);
                if kern.route(acc, m).path != NBitsPath::AmxGemm {
                    assert!(pair_route.0.path_is_pair(), "{ctx}: finite rows not paired");
                }
                for (j, (x, y)) in pair.iter().zip(&both).enumerate() {
                    assert_eq!(x.to_bits(), y.to_bits(), "{ctx}: element {j}: {x} vs {y}");
                }
            }
        }
    }
}

#[test]
fn hostile_scales_are_not_split_and_halves_must_match() {
    let mut pr = Problem::new8(64, 8, 1, 32, 0, true, false, 3);
    // (q - zp) s overflows f32 for |s| > f32::MAX / 256 (4-bit codes would allow 16x more).
    pr.scales[5] = f32::MAX / 200.0;
    assert!(split(&pr.weight()).is_err());
    pr.scales[5] = f32::MAX / 300.0;
    assert!(split(&pr.weight()).is_ok());
    pr.scales[5] = f32::NAN;
    assert!(split(&pr.weight()).is_err());
    // A 4-bit weight is not split.
    let p4 = Problem::new(64, 8, 1, 32, 0, true, false, 3);
    assert!(split(&p4.weight()).is_err());
    // Halves of different shapes are an error, not a wrong answer.
    let a = Problem::new8(64, 8, 1, 32, 0, true, false, 4);
    let b = Problem::new8(64, 16, 1, 32, 0, true, false, 4);
    let (ha, _) = pack8(&a);
    let (_, lb) = pack8(&b);
    let mut out = vec![0f32; 8];
    let err = matmul_bits8_with(
        Kernels::active(),
        &a.a,
        1,
        Halves::Packed(&ha, &lb),
        None,
        &mut out,
        &Serial,
    );
    assert!(err.is_err());
    // A 4-bit pack refuses 8-bit params (the layout holds nibbles).
    assert!(try_pack(&a.b, &a.scales, a.zp.as_deref(), &a.p).is_none());
}
