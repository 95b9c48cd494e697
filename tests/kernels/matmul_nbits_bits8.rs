//! 8-bit MatMulNBits (`bits8`: 16-column groups whose lanes hold whole code bytes, read by the
//! 4-bit kernels as two halves, `q = 16 h + l`, and by the VNNI level's own 8-bit tile).
//!
//! * The packed layout keeps every code, zero point (the implied 128 included) and scale: the
//!   codes read back as ORT's bytes, "column" `i` of a group scales by `s` and `16 + i` by `16 s`.
//! * Every kernel set, lane count, accuracy level and row count (0, 1, several, over several
//!   prefill tasks), block sizes 16..256, K with a partial last block, N with a partial last
//!   group, with and without zero points and bias: accuracy 0 / 1 against the f64 reference of
//!   the 8-bit weight (<= 1e-5 relative L2), accuracy 4 against the int8 reference of the 8-bit
//!   weight with the level's scales (<= 1e-5); packed and unpacked bit for bit; each row of a
//!   call bit for bit its own one-row call.
//! * Hostile scales are not packed; their literal path adds a bias as an Add after it would.

use crate::nbits_common::{acc4_scales, rel_l2, run_nbits, Problem, THREE};

use rcpu::kernels::matmul_nbits::reference::{
    hostile_scales, matmul_dequant_f32, matmul_reference, matmul_reference_int8, weight_code,
    zero_point,
};
use rcpu::kernels::matmul_nbits::{pack, try_pack, Kernels, NBitsPath, NBitsWeight};
use rcpu::runtime::par::{Par, ScopedThreads, Serial};

#[test]
fn packed_layout_keeps_every_code_zero_point_and_scale() {
    // K = 100: 4 blocks of 32, the last partial; N = 37: three groups of 16, the last of 5.
    for (k, bs) in [(100usize, 32usize), (70, 32), (256, 16), (130, 64)] {
        for zp in [false, true] {
            let pr = Problem::new8(k, 37, 1, bs, 0, zp, false, 5 + k as u64);
            let w = pack(&pr.b, &pr.scales, pr.zp.as_deref(), &pr.p);
            let mut codes = vec![0u8; k];
            for n in 0..37 {
                assert!(w.column_codes(n, &mut codes));
                for (kk, &c) in codes.iter().enumerate() {
                    assert_eq!(
                        c,
                        weight_code(&pr.b, &pr.p, kk, n),
                        "K={k} code ({kk}, {n})"
                    );
                }
                let g = w.group(n / 16);
                let i = n % 16;
                for kb in 0..pr.p.k_blocks() {
                    let s = pr.scales[n * pr.p.k_blocks() + kb];
                    assert_eq!(
                        g.scale(kb, i).to_bits(),
                        s.to_bits(),
                        "K={k} scale ({n}, {kb})"
                    );
                    assert_eq!(
                        g.scale(kb, 16 + i),
                        16.0 * s,
                        "K={k} high scale ({n}, {kb})"
                    );
                    let z = zero_point(pr.zp.as_deref(), &pr.p, n, kb);
                    let got = g.zps.map_or(g.absent_zp, |zs| zs[kb * 16 + i]);
                    assert_eq!(got, z, "K={k} zp={zp} zero point ({n}, {kb})");
                }
            }
            assert!(!w.column_codes(37, &mut codes), "a column past N");
            assert!(!w.column_codes(0, &mut codes[..k - 1]), "a short buffer");
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
            let packed = pack(&pr.b, &pr.scales, pr.zp.as_deref(), &pr.p);
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
                    let (_, got) = run_nbits(kern, &pr, &pr.a, m, Some(&packed), par);
                    let e = rel_l2(&got, &want);
                    assert!(e <= 1e-5, "{ctx}: rel L2 {e:e} against the reference");
                    let (_, un) = run_nbits(kern, &pr, &pr.a, m, None, par);
                    for (j, (g, u)) in got.iter().zip(&un).enumerate() {
                        assert_eq!(g.to_bits(), u.to_bits(), "{ctx}: unpacked element {j}");
                    }
                    // Rows 0, 1 and the last, each as a call of its own: the same bits where
                    // both take the tile kernel; from the dequantizing GEMM's row count on (f32
                    // levels, another order of sums), each within the bound of the reference.
                    let dequant = kern.route(acc, m).path == NBitsPath::F32Dequant;
                    for r in [0, 1, m.saturating_sub(1)].into_iter().filter(|&r| r < m) {
                        let row = &pr.a[r * k..(r + 1) * k];
                        let (_, one) = run_nbits(kern, &pr, row, 1, Some(&packed), par);
                        let mine = &got[r * n..(r + 1) * n];
                        if dequant {
                            let e = rel_l2(&one, &want[r * n..(r + 1) * n]);
                            assert!(e <= 1e-5, "{ctx}: row {r} alone: rel L2 {e:e}");
                            continue;
                        }
                        for (j, (x, y)) in one.iter().zip(mine).enumerate() {
                            assert_eq!(x.to_bits(), y.to_bits(), "{ctx}: row {r} column {j}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn hostile_scales_are_not_packed() {
    let mut pr = Problem::new8(64, 8, 1, 32, 0, true, false, 3);
    // (q - zp) s overflows f32 for |s| > f32::MAX / 256 (4-bit codes would allow 16x more).
    pr.scales[5] = f32::MAX / 200.0;
    assert!(try_pack(&pr.b, &pr.scales, pr.zp.as_deref(), &pr.p).is_none());
    pr.scales[5] = f32::MAX / 300.0;
    assert!(try_pack(&pr.b, &pr.scales, pr.zp.as_deref(), &pr.p).is_some());
    pr.scales[5] = f32::NAN;
    assert!(try_pack(&pr.b, &pr.scales, pr.zp.as_deref(), &pr.p).is_none());
    // Bits other than 4 and 8 are not packed.
    let p2 = pr.p.with_bits(2);
    pr.scales[5] = 1.0;
    assert!(try_pack(&pr.b, &pr.scales, pr.zp.as_deref(), &p2).is_none());
}

/// The literal path of hostile scales adds a bias after rounding the product to f32, as an Add
/// after the node would (and as the fast paths do): so a fused plan that folds a following
/// Add's bias into the node (`fold_bias`) answers as the two nodes, bit for bit (summed in f64
/// before the rounding, the bias had made `fuse=on` differ from `fuse=off` where it nearly
/// cancelled the product). 4- and 8-bit weights share the path.
#[test]
fn literal_path_adds_the_bias_as_an_add_would() {
    for bits in [4usize, 8] {
        for bad in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MAX / 4.0] {
            let mut pr = if bits == 8 {
                Problem::new8(96, 24, 5, 32, 0, true, true, 11)
            } else {
                Problem::new(96, 24, 5, 32, 0, true, true, 11)
            };
            pr.scales[3] = bad;
            assert!(hostile_scales(&pr.scales, &pr.p), "{bits} {bad}");
            let bias = pr.bias.clone().unwrap();
            let (m, n) = (pr.m, pr.p.n);
            let mut folded = vec![0f32; m * n];
            matmul_dequant_f32(&pr.a, m, &pr.weight(), Some(&bias), &mut folded).unwrap();
            let mut plain = vec![0f32; m * n];
            matmul_dequant_f32(&pr.a, m, &pr.weight(), None, &mut plain).unwrap();
            for (i, (f, y)) in folded.iter().zip(&plain).enumerate() {
                let add = y + bias[i % n];
                assert!(
                    f.to_bits() == add.to_bits() || (f.is_nan() && add.is_nan()),
                    "bits {bits} scale {bad}: output {i}: {f} folded, {add} as an Add"
                );
            }
        }
    }
}
