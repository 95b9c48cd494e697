//! Accuracy level 4 stores its scales as f16 (see `pack.rs`): what that costs in accuracy, with
//! a bound derived from the rounding, and where it must not be used; and with f32 scales asked
//! for (`acc4_f16_scales` false, provider option `acc4_scales=f32`), none of it.
//!
//! The bound. With A quantised per block (int8 codes `qa`, scale `sa_b`) and `c_b` the exact
//! integer dot of block b (with zero points), the f64 result with the node's f32 scales is
//! `y = sum_b t_b + bias`, `t_b = c_b * s_b * sa_b`. The kernels use `h_b = f16(s_b)`, and
//! `|h_b - s_b| <= 2^-11 |s_b|` for f16 normals under round to nearest (11 significant bits),
//! so the scale rounding moves y by at most `2^-11 * sum_b |t_b|`. The f32 arithmetic adds, per
//! block, one rounding of `h_b * sa_b` and at most two of the accumulation (FMA, or multiply
//! then add in the scalar kernel), each `<= 2^-24` of a partial sum bounded by `sum_b |t_b|`
//! (to first order), plus one for the bias add. Hence, per output,
//! `|got - y| <= 2^-11 * S + (kb + 4) * 2^-23 * (S + |bias|)`, `S = sum_b |t_b|`.
//! With a single block the first term is the rounding of one scale: truncating instead of
//! rounding (error up to 2^-10) or any other wrong conversion exceeds it for many of 4096
//! random scales.

use crate::nbits_common as matmul_nbits_common;
use matmul_nbits_common::{acc4_scales, rel_l2, Problem, Rng, THREE};

use rcpu::kernels::matmul_nbits::prepare_a::PreparedA;
use rcpu::kernels::matmul_nbits::reference::{
    matmul_reference, matmul_reference_int8, weight_code, zero_point,
};
use rcpu::kernels::matmul_nbits::{matmul_packed_with, pack, Kernels, NBitsWeight};
use rcpu::runtime::par::{Par, Serial};

/// Per output: (y with the f32 scales, S = sum of |t_b|), both in f64 (see the module doc).
fn terms(pr: &Problem) -> Vec<(f64, f64)> {
    let (p, m) = (&pr.p, pr.m);
    let (kbs, bs) = (p.k_blocks(), p.block_size);
    let prep = PreparedA::new(&pr.a, m, p);
    let mut out = Vec::with_capacity(m * p.n);
    for r in 0..m {
        for n in 0..p.n {
            let (mut y, mut s_abs) = (0f64, 0f64);
            for kb in 0..kbs {
                let zp = zero_point(pr.zp.as_deref(), p, n, kb) as i64;
                let c: i64 = (kb * bs..((kb + 1) * bs).min(p.k))
                    .map(|k| {
                        (weight_code(&pr.b, p, k, n) as i64 - zp) * prep.q[r * prep.kp + k] as i64
                    })
                    .sum();
                let t =
                    c as f64 * pr.scales[n * kbs + kb] as f64 * prep.qscale[r * kbs + kb] as f64;
                y += t;
                s_abs += t.abs();
            }
            out.push((y + pr.bias.as_ref().map_or(0.0, |b| b[n] as f64), s_abs));
        }
    }
    out
}

/// Checks every kernel set's level-4 output (packed and unpacked) against the bound; returns
/// the largest `|got - y| / S` seen.
fn check_bound(pr: &Problem, label: &str) -> f64 {
    let (p, m) = (&pr.p, pr.m);
    let want = terms(pr);
    let packed = pack(&pr.b, &pr.scales, pr.zp.as_deref(), p);
    let pars: [(&str, &dyn Par); 2] = [("serial", &Serial), ("3threads", &THREE)];
    let mut worst = 0f64;
    for kern in Kernels::supported() {
        for (pname, par) in pars {
            let ctx = format!("{label} {} {pname}", kern.isa.name());
            let bias = pr.bias.as_deref();
            let mut got = vec![f32::NAN; m * p.n];
            matmul_packed_with(kern, &pr.a, m, &packed, bias, &mut got, par).unwrap();
            let (_, un) = pr.unpacked(kern, par);
            let same = un.iter().zip(&got).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "{ctx}: unpacked differs from packed");
            for (i, (&g, &(y, s))) in got.iter().zip(&want).enumerate() {
                let bias = bias.map_or(0.0, |b| b[i % p.n].abs() as f64);
                let f32_part = (p.k_blocks() + 4) as f64 * 2f64.powi(-23) * (s + bias);
                let bound = 2f64.powi(-11) * s + f32_part;
                let err = (g as f64 - y).abs();
                assert!(
                    err <= bound,
                    "{ctx}: output {i}: {g} vs {y}, error {err:e} > bound {bound:e} (S = {s:e})"
                );
                if s > 0.0 {
                    worst = worst.max(err / s);
                }
            }
        }
    }
    worst
}

/// Scales log-uniform over 2^-13..2^3 in magnitude, random sign: many binades, all f16 normals.
fn spread_scales(pr: &mut Problem, seed: u64) {
    let mut r = Rng(seed | 1);
    for s in &mut pr.scales {
        let mag = 2f32.powf(r.f32(-13.0, 3.0));
        *s = if r.next_u64() & 1 == 0 { mag } else { -mag };
    }
}

/// One block per output: the error is one scale's rounding; 4096 columns x 2 rows.
#[test]
fn single_block_error_is_one_f16_rounding() {
    for bs in [32, 128] {
        let mut pr = Problem::new(bs, 4096, 2, bs, 4, true, false, 41 + bs as u64);
        spread_scales(&mut pr, 7 + bs as u64);
        let worst = check_bound(&pr, &format!("K=bs={bs} N=4096"));
        eprintln!("bs={bs}: max |got - y| / S = {worst:e} (f16 unit roundoff 2^-11 = 4.88e-4)");
    }
}

/// Many blocks, zero points and bias, prefill and decode shapes; reports the error against the
/// f64 reference with float A (what f16 scales add next to A's int8 quantisation).
#[test]
fn multi_block_error_within_bound() {
    for (k, n, m, bs, zp, bias) in [
        (4096, 96, 1, 32, false, false),
        (1000, 200, 3, 32, true, true),
        (2048, 64, 5, 128, true, false),
        (300, 40, 17, 16, false, true),
    ] {
        let mut pr = Problem::new(k, n, m, bs, 4, zp, bias, (k + n + m) as u64);
        spread_scales(&mut pr, (k * n) as u64);
        let label = format!("K={k} N={n} M={m} bs={bs} zp={zp} bias={bias}");
        let worst = check_bound(&pr, &label);
        // Against float A (f64): level 4 with f32 scales (the int8 reference) and with f16.
        let p = &pr.p;
        let (z, b) = (pr.zp.as_deref(), pr.bias.as_deref());
        let mut exact = vec![0f32; m * n];
        matmul_reference(
            &pr.a,
            m,
            &NBitsWeight {
                b: &pr.b,
                scales: &pr.scales,
                zero_points: z,
                p,
            },
            b,
            &mut exact,
        );
        let mut f32s = vec![0f32; m * n];
        matmul_reference_int8(
            &pr.a,
            m,
            &NBitsWeight {
                b: &pr.b,
                scales: &pr.scales,
                zero_points: z,
                p,
            },
            b,
            &mut f32s,
        );
        let mut f16s = vec![0f32; m * n];
        let h = acc4_scales(&pr.scales, p);
        matmul_reference_int8(
            &pr.a,
            m,
            &NBitsWeight {
                b: &pr.b,
                scales: &h,
                zero_points: z,
                p,
            },
            b,
            &mut f16s,
        );
        let (e32, e16) = (rel_l2(&f32s, &exact), rel_l2(&f16s, &exact));
        eprintln!(
            "{label}: max |got - y| / S = {worst:e}; rel L2 vs f64 float-A reference: \
             f32 scales {e32:.3e}, f16 scales {e16:.3e}"
        );
        // The f16 rounding is small next to A's quantisation (rel L2 about 1e-2 .. 1e-3).
        assert!(e16 <= e32 * 1.1 + 1e-4, "{label}: {e16:e} vs {e32:e}");
    }
}

/// A group holding a scale f16 cannot represent within 2^-11 (an f16 subnormal, or beyond
/// 65504) keeps f32 scales: those columns get the f32-scale result to f32 rounding; the other
/// groups still use f16. Blind f16 would put 1e-6 off by up to 3% and 1e5 at infinity.
#[test]
fn groups_beyond_f16_normals_keep_f32() {
    let (k, n, m, bs) = (256, 128, 3, 32);
    let kbs = k / bs;
    let mut pr = Problem::new(k, n, m, bs, 4, true, true, 99);
    spread_scales(&mut pr, 3);
    // Group 1: one column's scales at 1e-6 (f16 subnormal); group 2: one scale at 1e5 and one
    // at 2^-14 (the smallest normal, exact); group 3: one scale of 6e-5 (just below 2^-14).
    for kb in 0..kbs {
        pr.scales[40 * kbs + kb] = 1.0e-6 * (kb as f32 + 1.0);
    }
    pr.scales[70 * kbs + 2] = 1.0e5;
    pr.scales[71 * kbs + 3] = 2f32.powi(-14);
    pr.scales[100 * kbs + 5] = 6.0e-5;
    let h = acc4_scales(&pr.scales, &pr.p);
    let kept = |g: usize| {
        pr.scales[g * 32 * kbs..(g + 1) * 32 * kbs] == h[g * 32 * kbs..(g + 1) * 32 * kbs]
    };
    assert!(
        !kept(0) && kept(1) && kept(2) && kept(3),
        "test data: groups 1..3 must stay f32"
    );
    check_bound(&pr, "mixed groups");
    let p = &pr.p;
    let (z, b) = (pr.zp.as_deref(), pr.bias.as_deref());
    let mut want = vec![0f32; m * n];
    matmul_reference_int8(
        &pr.a,
        m,
        &NBitsWeight {
            b: &pr.b,
            scales: &pr.scales,
            zero_points: z,
            p,
        },
        b,
        &mut want,
    );
    let packed = pack(&pr.b, &pr.scales, z, p);
    let exact = terms(&pr);
    for kern in Kernels::supported() {
        let mut got = vec![0f32; m * n];
        matmul_packed_with(kern, &pr.a, m, &packed, b, &mut got, &THREE).unwrap();
        for r in 0..m {
            for col in 32..n {
                let i = r * n + col;
                let (y, s) = exact[i];
                let bias = b.map_or(0.0, |b| b[col].abs() as f64);
                let bound = (kbs + 4) as f64 * 2f64.powi(-23) * (s + bias);
                let err = (got[i] as f64 - y).abs();
                assert!(
                    err <= bound,
                    "{} row {r} col {col}: {} vs {y}, error {err:e} > f32 bound {bound:e}",
                    kern.isa.name(),
                    got[i]
                );
            }
        }
    }
}

/// Bytes per weight of the packed layout (block 32, no zero points): level 4 reads f16 scales
/// (16 + 2 bytes per 32 weights = 0.5625, as llama.cpp's Q4_0), level 0 keeps f32 (0.625), and
/// so does level 4 with f32 scales asked for.
#[test]
fn packed_bytes_per_weight() {
    let (k, n) = (4096, 1024);
    for (acc, f16, want) in [(4, true, 0.5625), (0, true, 0.625), (4, false, 0.625)] {
        let pr = Problem::new(k, n, 1, 32, acc, false, false, 5);
        let p = pr.p.with_acc4_f16_scales(f16);
        let packed = pack(&pr.b, &pr.scales, None, &p);
        let per = packed.bytes() as f64 / (k * n) as f64;
        assert!(
            (want..want + 1e-3).contains(&per),
            "acc={acc} f16={f16}: {per} bytes per weight, expected {want}"
        );
    }
}

/// The largest `|got - y| / bound32` over every kernel set, packed and unpacked (which must
/// agree bit for bit), where `bound32 = (kb + 4) 2^-23 (S + |bias|)` is the f32 arithmetic's
/// share of the module doc's bound: at most 1 when the kernels compute with the f32 scales.
fn worst_against_f32_bound(pr: &Problem, label: &str) -> f64 {
    let (p, m) = (&pr.p, pr.m);
    let want = terms(pr);
    let packed = pack(&pr.b, &pr.scales, pr.zp.as_deref(), p);
    let bias = pr.bias.as_deref();
    let mut worst = 0f64;
    for kern in Kernels::supported() {
        let ctx = format!("{label} {}", kern.isa.name());
        let mut got = vec![f32::NAN; m * p.n];
        matmul_packed_with(kern, &pr.a, m, &packed, bias, &mut got, &THREE).unwrap();
        let (_, un) = pr.unpacked(kern, &THREE);
        let same = un.iter().zip(&got).all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(same, "{ctx}: unpacked differs from packed");
        for (i, (&g, &(y, s))) in got.iter().zip(&want).enumerate() {
            let b = bias.map_or(0.0, |b| b[i % p.n].abs() as f64);
            let bound = (p.k_blocks() + 4) as f64 * 2f64.powi(-23) * (s + b);
            worst = worst.max((g as f64 - y).abs() / bound);
        }
    }
    worst
}

/// With f32 scales asked for (option `acc4_scales=f32`), level 4 computes with the node's own
/// f32 scales: every output is within the f32 arithmetic's bound of the f64 result with those
/// scales, for scales f16 would have rounded (all f16 normals, so the default packs them as f16).
/// The same data with the default f16 scales exceeds that bound by far (the rounding is up to
/// 2^-11 of a block's term, the bound about (kb + 4) 2^-23), so the test tells the two apart.
#[test]
fn f32_scales_asked_for_compute_with_the_f32_scales() {
    for (k, n, m, bs, zp, bias) in [
        (4096, 96, 1, 32, false, false),
        (1000, 200, 3, 32, true, true),
        (300, 40, 17, 16, false, true),
    ] {
        let mut pr = Problem::new(k, n, m, bs, 4, zp, bias, (k + 3 * n + m) as u64);
        spread_scales(&mut pr, (k * n + 1) as u64);
        let label = format!("K={k} N={n} M={m} bs={bs} zp={zp} bias={bias}");
        assert!(pr.p.acc4_f16_scales, "f16 scales are the default");
        let f16 = worst_against_f32_bound(&pr, &format!("{label} f16"));
        pr.p = pr.p.with_acc4_f16_scales(false);
        let f32 = worst_against_f32_bound(&pr, &format!("{label} f32"));
        eprintln!("{label}: max |got - y| / f32 bound: f32 scales {f32:.3}, f16 scales {f16:.3}");
        assert!(
            f32 <= 1.0,
            "{label}: f32 scales asked for, {f32} x the f32 bound"
        );
        assert!(
            f16 > 4.0,
            "{label}: f16 scales only {f16} x the f32 bound (test data)"
        );
    }
}

/// A model whose scales are f16 values (QMoE's float16 scales, `f16_source_scales`) packs them
/// as f16 at every accuracy level: the kernels see the very f32 scales, so every kernel set's
/// output is bit-identical to the f32-scale pack's, packed and unpacked, from fewer bytes; a
/// group holding one scale f16 cannot represent exactly keeps f32 scales (and still agrees).
#[test]
fn f16_source_scales_pack_smaller_with_identical_results() {
    use rcpu::kernels::isa::Isa;
    let three: &dyn Par = &THREE;
    // (K, N, M, bits, acc, zp)
    let shapes = [
        (96, 70, 1, 4, 0, false),
        (96, 70, 5, 4, 1, true),
        (2880, 64, 1, 4, 0, false),
        (64, 40, 3, 8, 0, true),
        (128, 33, 2, 4, 4, false),
        (64, 40, 1, 8, 4, true),
    ];
    for (i, &(k, n, m, bits, acc, zp)) in shapes.iter().enumerate() {
        let make = if bits == 8 {
            Problem::new8
        } else {
            Problem::new
        };
        let mut pr = make(k, n, m, 32, acc, zp, true, 700 + i as u64);
        // The model's scales are f16 values; one column of the last group gets one that is not.
        for s in pr.scales.iter_mut() {
            *s = matmul_nbits_common::round_to_f16(*s);
        }
        let odd = (n - 1) * pr.p.k_blocks();
        pr.scales[odd] *= 1.0 + 2f32.powi(-20);
        let f32_pack = pack(&pr.b, &pr.scales, pr.zp.as_deref(), &pr.p);
        let p16 = pr.p.with_f16_source_scales(true);
        let f16_pack = pack(&pr.b, &pr.scales, pr.zp.as_deref(), &p16);
        if acc != 4 {
            assert!(
                f16_pack.bytes() < f32_pack.bytes(),
                "case {i}: f16 pack {} bytes, f32 pack {}",
                f16_pack.bytes(),
                f32_pack.bytes()
            );
        }
        for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni] {
            let Ok(kern) = Kernels::for_isa(isa) else {
                continue;
            };
            for par in [&Serial as &dyn Par, three] {
                let run = |w: &rcpu::kernels::matmul_nbits::PackedNBits| {
                    let mut out = vec![f32::NAN; m * n];
                    matmul_packed_with(kern, &pr.a, m, w, pr.bias.as_deref(), &mut out, par)
                        .unwrap();
                    out
                };
                let (a, b) = (run(&f32_pack), run(&f16_pack));
                assert!(
                    a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "case {i} {isa:?}: the f16-scale pack answers differently"
                );
            }
        }
    }
}
