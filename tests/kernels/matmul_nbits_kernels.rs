//! MatMulNBits kernels against the scalar references over ORT's layout.
//!
//! Tolerances (relative L2 over the whole output):
//! * accuracy 0 vs the fp32 reference (f64 sums): <= 1e-5;
//! * accuracy 4 vs the scalar int8 reference (with the f16-rounded scales level 4 uses):
//!   <= 1e-5, and vs the fp32 reference: <= the bound the data implies (`acc4_vs_fp32_bound` in
//!   tests/common/nbits.rs: A's int8 quantisation steps and the f16 rounding of the scales).
//!
//! Every ISA level the CPU supports is run explicitly (scalar included), each with `Serial`
//! and with a 3-thread `Par`; the unpacked path must match the packed one bit for bit.

use crate::nbits_common as matmul_nbits_common;
use matmul_nbits_common::{acc4_vs_fp32_bound, rel_l2, Problem, THREE};

use rcpu::kernels::matmul_nbits::reference::matmul_reference;
use rcpu::kernels::matmul_nbits::{
    decode_first_segment, decode_second_segment, matmul_packed, matmul_packed_with,
    matmul_unpacked, pack, Kernels, NBitsParams, NBitsPath, NBitsRoute, NBitsWeight,
    CALLER_PREFETCH_BYTES, IDLE_PREFETCH_SEGMENT_MAX,
};
use rcpu::runtime::par::{Par, Serial};
use rcpu::telemetry::ledger::Variant;

const KS: [usize; 9] = [16, 17, 31, 32, 33, 100, 256, 1000, 4096];
const NS: [usize; 7] = [1, 3, 15, 16, 17, 33, 64];
const MS: [usize; 5] = [1, 2, 5, 33, 1];
const BSS: [usize; 5] = [16, 32, 64, 128, 256];

fn check(pr: &Problem, label: &str) {
    let (p, m) = (&pr.p, pr.m);
    let (zp, bias) = (pr.zp.as_deref(), pr.bias.as_deref());
    let mut want = vec![0f32; m * p.n];
    matmul_reference(&pr.a, m, &pr.weight(), bias, &mut want);
    // With the scales level 4 computes with (f16 where they fit, see `pack.rs`); the f16
    // rounding's own error is bounded in matmul_nbits_f16_scales.rs.
    let want8 = if p.int8_compute() {
        pr.int8_reference()
    } else {
        vec![0f32; m * p.n]
    };
    // Level 4 against the fp32 reference: the bound the data implies (A's int8 steps, the f16
    // scales), given the 1e-5 to the int8 reference.
    let bound = if p.int8_compute() {
        acc4_vs_fp32_bound(pr, &want, &want8, 1e-5)
    } else {
        0.0
    };
    let packed = pack(&pr.b, &pr.scales, zp, p);
    let pars: [(&str, &dyn Par); 2] = [("serial", &Serial), ("3threads", &THREE)];
    for kern in Kernels::supported() {
        for (pname, par) in pars {
            let ctx = format!(
                "{label} {} par={pname}",
                kern.route(p.accuracy_level, m).text()
            );
            let mut got = vec![f32::NAN; m * p.n];
            let name = matmul_packed_with(kern, &pr.a, m, &packed, bias, &mut got, par).unwrap();
            assert_eq!(name, kern.route(p.accuracy_level, m));
            assert!(
                got.iter().all(|x| x.is_finite()),
                "{ctx}: unwritten or non-finite output"
            );
            let e = rel_l2(&got, &want);
            if p.int8_compute() {
                let e8 = rel_l2(&got, &want8);
                assert!(e8 <= 1e-5, "{ctx}: vs int8 reference rel L2 {e8:e}");
                assert!(
                    e <= bound,
                    "{ctx}: vs fp32 reference rel L2 {e:e} > {bound:e}"
                );
            } else {
                assert!(e <= 1e-5, "{ctx}: vs fp32 reference rel L2 {e:e}");
            }
            let (_, un) = pr.unpacked(kern, par);
            let same = un.iter().zip(&got).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "{ctx}: unpacked differs from packed");
        }
    }
}

/// A sample of the cross product K x N x M x block x zp x bias, both accuracy levels.
#[test]
fn sampled_sizes_all_variants() {
    let mut cases = 0;
    for (i, &k) in KS.iter().enumerate() {
        for (j, &n) in NS.iter().enumerate() {
            let idx = i * NS.len() + j;
            let m = MS[idx % MS.len()];
            let bs = BSS[(idx / 2 + i) % BSS.len()];
            let (zp, bias) = (idx.is_multiple_of(2), (idx / 3).is_multiple_of(2));
            // Keep the biggest shapes cheap: large K only with modest M.
            let m = if k >= 1000 && n > 17 { m.min(5) } else { m };
            for acc in [0, 4] {
                let pr = Problem::new(k, n, m, bs, acc, zp, bias, idx as u64 * 2 + acc as u64);
                check(
                    &pr,
                    &format!("K={k} N={n} M={m} bs={bs} zp={zp} bias={bias} acc={acc}"),
                );
                cases += 1;
            }
        }
    }
    assert_eq!(cases, 126);
}

/// Every block size with every flag combination at a K that is not a multiple of the block.
#[test]
fn every_block_size_and_flag() {
    for (s, &bs) in BSS.iter().enumerate() {
        for flags in 0..8 {
            let (zp, bias, acc) = (
                flags & 1 != 0,
                flags & 2 != 0,
                if flags & 4 != 0 { 4 } else { 0 },
            );
            let k = 3 * bs + 5;
            let pr = Problem::new(k, 33, 6, bs, acc, zp, bias, (s * 8 + flags) as u64 + 1000);
            check(
                &pr,
                &format!("K={k} N=33 M=6 bs={bs} zp={zp} bias={bias} acc={acc}"),
            );
        }
    }
}

/// Large M exercises several row tiles and column chunks with the 3-thread Par.
#[test]
fn prefill_shape() {
    for acc in [0, 4] {
        let pr = Problem::new(1000, 64, 33, 32, acc, true, true, 77 + acc as u64);
        check(&pr, &format!("prefill acc={acc}"));
    }
}

/// Rows over several prefill tasks: a task covers as many rows as keep its prepared A within
/// the driver's budget (512 KiB: 256 rows at a short K, 48 at K = 8200 on the int8 path, 16 at
/// K = 4864 in f32), so these calls split their rows into tasks with a partial last one.
#[test]
fn prefill_rows_over_several_tasks() {
    for (k, n, m, acc) in [(8200, 40, 100, 4), (64, 40, 300, 4), (4864, 24, 37, 0)] {
        let pr = Problem::new(k, n, m, 32, acc, false, true, 91 + k as u64);
        check(&pr, &format!("tasks K={k} M={m} acc={acc}"));
    }
}

/// The f32 levels' many-row route (the weight dequantized into the f32 GEMM's panels, from 12
/// rows on AVX2 and scalar tables, 16 on AVX-512 ones): below, between and at those row counts,
/// a table moved to take it from 2 rows (`with_dequant_min_m`), rows over several of the
/// GEMM's row blocks (144), K over several of its 256-deep slices with a partial last block and
/// a K not a multiple of 4, N past its 1024-column blocks and not a multiple of any panel width,
/// one column, zero points and a bias. Each against the reference, packed against unpacked bit
/// for bit (`check`), and the answer the same bits on one lane and on three. Seen failing with
/// the dequantized value's zero point dropped in the AVX2 kernel, and with the panels of a
/// fill written one `nr` too far.
#[test]
fn dequant_route_rows_and_edges() {
    let cases = [
        (100, 33, 11, 32, true, false),
        (100, 33, 12, 32, true, false),
        (100, 33, 16, 32, false, true),
        (33, 17, 17, 16, true, true),
        (521, 1, 40, 64, false, false),
        (600, 1030, 20, 128, true, true),
        (64, 40, 300, 16, false, true),
    ];
    for (i, &(k, n, m, bs, zp, bias)) in cases.iter().enumerate() {
        for acc in [0, 1] {
            let pr = Problem::new(k, n, m, bs, acc, zp, bias, 900 + i as u64);
            check(
                &pr,
                &format!("dequant K={k} N={n} M={m} bs={bs} zp={zp} acc={acc}"),
            );
            let packed = pack(&pr.b, &pr.scales, pr.zp.as_deref(), &pr.p);
            for kern in Kernels::supported() {
                let mut one = vec![f32::NAN; m * n];
                let mut three = vec![f32::NAN; m * n];
                let b = pr.bias.as_deref();
                let r = matmul_packed_with(kern, &pr.a, m, &packed, b, &mut one, &Serial).unwrap();
                matmul_packed_with(kern, &pr.a, m, &packed, b, &mut three, &THREE).unwrap();
                let ctx = format!("K={k} N={n} M={m} {}", kern.isa.name());
                assert_eq!(r.path, kern.route(acc, m).path, "{ctx}");
                if m >= 16 {
                    assert_eq!(r.path, NBitsPath::F32Dequant, "{ctx}");
                } else if m < 12 {
                    assert_eq!(r.path, NBitsPath::F32Gemm, "{ctx}");
                }
                let same = one
                    .iter()
                    .zip(&three)
                    .all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "{ctx}: 1 lane vs 3");
                // The route at a row count the tables give the tile kernel.
                let early = kern.with_dequant_min_m(2);
                let mut got = vec![f32::NAN; m * n];
                let r = matmul_packed_with(&early, &pr.a, m, &packed, b, &mut got, &THREE).unwrap();
                assert_eq!(r.path, NBitsPath::F32Dequant, "{ctx}");
                let mut want = vec![0f32; m * n];
                matmul_reference(&pr.a, m, &pr.weight(), b, &mut want);
                let e = rel_l2(&got, &want);
                assert!(e <= 1e-5, "{ctx}: from 2 rows: rel L2 {e:e}");
            }
        }
    }
}

/// Many column groups at M = 1: several decode chunks. K from 4096 on: every lane prepares
/// its own A (`PER_LANE_A_MIN_K`), here also with a partial last block, a partial last group,
/// zero points and a bias; K = 1000 the calling thread prepares it.
#[test]
fn decode_many_chunks() {
    for acc in [0, 4] {
        let pr = Problem::new(4096, 257, 1, 32, acc, acc == 0, false, 5 + acc as u64);
        check(&pr, &format!("decode acc={acc}"));
        for k in [1000, 4099] {
            let pr = Problem::new(k, 70, 1, 32, acc, true, true, 7 + acc as u64);
            check(&pr, &format!("decode K={k} bias acc={acc}"));
        }
    }
}

/// M = 0 is a no-op; the dispatched entry points report the active variant.
#[test]
fn dispatched_entry_points() {
    let pr = Problem::new(64, 17, 3, 32, 4, true, true, 9);
    let (zp, bias) = (pr.zp.as_deref(), pr.bias.as_deref());
    let packed = pack(&pr.b, &pr.scales, zp, &pr.p);
    assert!(packed.bytes() >= 2 * 64 * 16 / 2);
    let mut empty: Vec<f32> = vec![];
    let name = matmul_packed(&[], 0, &packed, bias, &mut empty, &Serial).unwrap();
    assert_eq!(name, Kernels::active().route(4, 0));
    let mut y1 = vec![0f32; 3 * 17];
    let mut y2 = vec![0f32; 3 * 17];
    let n1 = matmul_packed(&pr.a, 3, &packed, bias, &mut y1, &Serial).unwrap();
    let n2 = matmul_unpacked(
        &pr.a,
        3,
        &NBitsWeight {
            b: &pr.b,
            scales: &pr.scales,
            zero_points: zp,
            p: &pr.p,
        },
        bias,
        &mut y2,
        &THREE,
    )
    .unwrap();
    assert_eq!(n1, n2);
    let int8_gemm = NBitsRoute {
        isa: Kernels::active().isa,
        path: NBitsPath::Int8Gemm,
    };
    assert_eq!(n1, int8_gemm);
    assert_eq!(y1, y2);
    // Every level up to the hardware's has a kernel set, so the loops above really cover
    // each variant this CPU can run.
    use rcpu::kernels::isa::Isa;
    let hw = Isa::detect_hardware();
    let levels = [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni];
    for l in levels {
        assert_eq!(Kernels::for_isa(l).is_ok(), l <= hw, "{}", l.name());
    }
    // ... plus the AMX set where this process may use AMX.
    assert_eq!(
        Kernels::supported().len(),
        levels.iter().filter(|&&l| l <= hw).count() + Kernels::amx().is_ok() as usize
    );
    assert_eq!(Kernels::active().isa, hw.min(Isa::get()));
    eprintln!(
        "variants: {:?}",
        Kernels::supported()
            .iter()
            .map(|k| k.label())
            .collect::<Vec<_>>()
    );
}

/// Quantisation ties (a = +-0.5, +-1.5 quanta) must round to even like the reference.
#[test]
fn int8_rounding_ties() {
    let mut pr = Problem::new(32, 16, 2, 32, 4, false, false, 11);
    // Row 0: max 127 => scale 1, values with exact .5 fractions; row 1: all zero (scale 0).
    for (i, x) in pr.a[..32].iter_mut().enumerate() {
        *x = if i == 0 {
            127.0
        } else {
            (i as f32 - 16.0) + 0.5
        };
    }
    pr.a[32..].fill(0.0);
    check(&pr, "ties");
}

/// K shorter than one 8-k chunk: every packed chunk is padding or straddles K.
#[test]
fn tiny_k() {
    for (i, k) in [1usize, 5, 7, 9].into_iter().enumerate() {
        for acc in [0, 4] {
            let pr = Problem::new(k, 17, 3, 16, acc, i % 2 == 0, true, 300 + i as u64);
            check(&pr, &format!("tiny K={k} acc={acc}"));
        }
    }
}

/// Every kernel set's A quantiser is bit-identical to the scalar one (random rows, ties,
/// all-zero blocks, non-finite values, partial last blocks, every block size).
#[test]
fn quantiser_matches_scalar_bit_for_bit() {
    use rcpu::kernels::matmul_nbits::prepare_a::PreparedA;
    for (i, &bs) in BSS.iter().enumerate() {
        // Longer rows: 16 and 17 blocks, 33 blocks and a partial one.
        for k in [bs, 3 * bs, 5 * bs + 7, 1000, 16 * bs, 17 * bs, 33 * bs + 5] {
            let mut pr = Problem::new(k, 1, 4, bs, 4, false, false, 900 + i as u64 + k as u64);
            // Row 1: exact .5 quanta (scale 1 where the block max is 127).
            for (j, x) in pr.a[k..2 * k].iter_mut().enumerate() {
                *x = if j % bs == 0 {
                    127.0
                } else {
                    ((j % 255) as f32 - 127.0) + 0.5
                };
            }
            // Row 2: zeros; every third block subnormal (its multiplier 127 / max is +inf: its
            // products are +-inf, or NaN for a zero); the block after it holding infinities
            // (multiplier 0: NaN products) but no NaN.
            pr.a[2 * k..3 * k].fill(0.0);
            for (j, x) in pr.a[2 * k..3 * k].iter_mut().enumerate() {
                let sign = if j % 2 == 0 { 1.0 } else { -1.0 };
                match (j / bs) % 3 {
                    1 if j % 3 != 0 => *x = f32::from_bits(1 + (j % 1000) as u32) * sign,
                    2 if j % 13 == 0 => *x = f32::INFINITY * sign,
                    _ => {}
                }
            }
            // Row 3: non-finite values (NaN is ignored by the block max and coded 0; an infinite
            // block max gives zero codes), mixed into ordinary blocks.
            for (j, x) in pr.a[3 * k..].iter_mut().enumerate() {
                match (j / bs) % 4 {
                    0 if j % 5 == 0 => *x = f32::NAN,
                    1 if j % 7 == 0 => *x = f32::INFINITY,
                    2 if j % 11 == 0 => *x = f32::NEG_INFINITY,
                    _ => {}
                }
            }
            let want = PreparedA::new(&pr.a, 4, &pr.p);
            for kern in Kernels::supported() {
                let got = PreparedA::for_kernels(kern, &pr.a, 4, &pr.p);
                let ctx = format!("bs={bs} K={k} isa={}", kern.isa.name());
                assert_eq!(got.q, want.q, "{ctx}: codes");
                assert_eq!(got.qsum, want.qsum, "{ctx}: sums");
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got.qscale), bits(&want.qscale), "{ctx}: scales");
            }
        }
    }
}

/// Every kernel set's scan of A (`Kernels::row_abs_max`: the non-finite and overflow checks
/// after each call) gives the same bits as the integer max of the magnitude bits: every length
/// around the SIMD widths (64 per step, a masked tail), the largest value, an infinity, NaNs
/// (either sign, payloads), subnormals and -0 at sampled positions.
#[test]
fn row_abs_max_matches_the_magnitude_bits_max() {
    let mut r = matmul_nbits_common::Rng::seeded(4242);
    let specials = [
        -3.0e38f32,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7fc0_1234),
        f32::from_bits(0xff80_0001),
        f32::from_bits(0x0000_0001),
        -0.0,
    ];
    let lens = (0usize..=80).chain([127, 128, 129, 896, 4864, 4867]);
    for len in lens {
        let base: Vec<f32> = (0..len).map(|_| r.f32(-2.0, 2.0)).collect();
        let mut cases = vec![base.clone()];
        for (s, &x) in specials.iter().enumerate() {
            for at in [0, len / 3, len.saturating_sub(1), (s * 7) % len.max(1)] {
                if at < len {
                    let mut v = base.clone();
                    v[at] = x;
                    cases.push(v);
                }
            }
        }
        for v in &cases {
            let want = v.iter().fold(0u32, |m, x| m.max(x.to_bits() & 0x7fff_ffff));
            for kern in Kernels::supported() {
                let got = kern.row_abs_max(v).unwrap();
                assert_eq!(got.to_bits(), want, "len={len} isa={}", kern.isa.name());
            }
        }
    }
}

/// A row's result does not depend on how many rows share the call: M = 1 (GEMV, one row per
/// tile call) equals row 0 of M = 2 (two rows per tile call) bit for bit.
#[test]
fn gemv_row_equals_gemm_row() {
    for (i, &bs) in BSS.iter().enumerate() {
        for acc in [0, 4] {
            let k = [bs * 3, 1000, 4096][i % 3];
            let pr = Problem::new(k, 33, 2, bs, acc, i % 2 == 0, i % 3 == 0, 500 + i as u64);
            let (zp, bias) = (pr.zp.as_deref(), pr.bias.as_deref());
            let packed = pack(&pr.b, &pr.scales, zp, &pr.p);
            for kern in Kernels::supported() {
                let mut y1 = vec![0f32; 33];
                let mut y2 = vec![0f32; 66];
                matmul_packed_with(kern, &pr.a[..k], 1, &packed, bias, &mut y1, &Serial).unwrap();
                matmul_packed_with(kern, &pr.a, 2, &packed, bias, &mut y2, &THREE).unwrap();
                let same = y1.iter().zip(&y2).all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "bs={bs} K={k} acc={acc} {}", kern.isa.name());
            }
        }
    }
}

/// Packing split over threads gives the same packed weight as one thread: same bytes, same
/// products (scales and zero points included), for group counts below, at and above the
/// thread count.
#[test]
fn threaded_pack_matches_serial_pack() {
    use rcpu::kernels::matmul_nbits::pack_threads;
    for (k, n, zp) in [
        (100, 5, true),
        (256, 96, true),
        (1000, 257, false),
        (33, 64, true),
    ] {
        let pr = Problem::new(k, n, 2, 32, 4, zp, false, (k + n) as u64);
        let z = pr.zp.as_deref();
        let one = pack_threads(&pr.b, &pr.scales, z, &pr.p, 1);
        let mut y1 = vec![0f32; 2 * n];
        matmul_packed(&pr.a, 2, &one, None, &mut y1, &Serial).unwrap();
        for threads in [2, 3, 8] {
            let many = pack_threads(&pr.b, &pr.scales, z, &pr.p, threads);
            let ctx = format!("K={k} N={n} zp={zp} threads={threads}");
            assert_eq!(one.weight_bytes(), many.weight_bytes(), "{ctx}");
            assert_eq!(one.bytes(), many.bytes(), "{ctx}");
            let mut y = vec![0f32; 2 * n];
            matmul_packed(&pr.a, 2, &many, None, &mut y, &Serial).unwrap();
            assert_eq!(y1, y, "{ctx}");
        }
    }
}

/// Extreme magnitudes: every code 15, zero points 0 (or none: 8), A all +1 or all -1 (int8 +-127
/// everywhere), the largest block. The integer partial sums reach their bounds here (i16 sums of
/// `vpmaddubsw` pairs, `vpdpbusd` over unmasked bytes, the zero-point seeds), which random data
/// never does.
#[test]
fn int8_extreme_magnitudes() {
    for (bs, zp_byte, sign, m) in [
        (256, Some(0u8), 1.0, 1),
        (256, None, -1.0, 5),
        (32, Some(0), -1.0, 2),
    ] {
        for acc in [0, 4] {
            let mut pr = Problem::new(3 * bs, 40, m, bs, acc, zp_byte.is_some(), false, 3);
            pr.b.fill(0xFF);
            if let (Some(z), Some(v)) = (pr.zp.as_mut(), zp_byte) {
                z.fill(v);
            }
            pr.a.fill(sign);
            pr.scales.fill(0.01);
            check(
                &pr,
                &format!("extreme bs={bs} zp={zp_byte:?} a={sign} M={m} acc={acc}"),
            );
        }
    }
}

/// The ledger text of every MatMulNBits route: what rcpu-bench, pytest and the e2e tests read,
/// byte for byte.
#[test]
fn route_texts_are_the_ledger_names() {
    use rcpu::kernels::isa::Isa;
    use NBitsPath::*;
    let mut got = Vec::new();
    for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni] {
        for path in [F32Gemv, F32Gemm, Int8Gemv, Int8Gemm, F32Dequant] {
            got.push(NBitsRoute { isa, path }.text());
        }
    }
    got.push(
        NBitsRoute {
            isa: Isa::Avx512Vnni,
            path: AmxGemm,
        }
        .text(),
    );
    let want = [
        "scalar-acc0-gemv",
        "scalar-acc0-gemm",
        "scalar-acc4-gemv",
        "scalar-acc4-gemm",
        "scalar-acc0-gemm-dequant",
        "avx2-acc0-gemv",
        "avx2-acc0-gemm",
        "avx2-acc4-gemv",
        "avx2-acc4-gemm",
        "avx2-acc0-gemm-dequant",
        "avx512-acc0-gemv",
        "avx512-acc0-gemm",
        "avx512-acc4-gemv",
        "avx512-acc4-gemm",
        "avx512-acc0-gemm-dequant",
        "avx512vnni-acc0-gemv",
        "avx512vnni-acc0-gemm",
        "avx512vnni-acc4-gemv",
        "avx512vnni-acc4-gemm",
        "avx512vnni-acc0-gemm-dequant",
        "amx-acc4-gemm",
    ];
    assert_eq!(got, want);
}

/// Guarantee: the hint an M=1 call leaves the idle lanes for the next call
/// (`decode_second_segment`) is the packed records of the whole segment that call's second
/// chunk streams (the second half with two lanes), from its first byte, cut at
/// `IDLE_PREFETCH_SEGMENT_MAX`, as a range of the weight's bytes; nothing when the call runs on
/// one lane or has one column group.
/// Qwen2-0.5B shapes (K=896, 32 columns of 28 blocks, each a record of 512 code bytes and 32 f16
/// scales = 16128 bytes per group). Seen failing: with the hint back to the segment's first run
/// (a quarter of it); with the hint still measured in code bytes after the scales joined the
/// records.
#[test]
fn idle_hint_is_the_second_lanes_segment() {
    let group = 28 * (512 + 64);
    // (N, lanes, offset and length of the hint in groups' bytes)
    for (n, lanes, at, len) in [
        (896, 2, 14 * group, 14 * group),
        (4864, 2, 76 * group, IDLE_PREFETCH_SEGMENT_MAX),
        (896, 4, 7 * group, 7 * group),
        (896, 1, 0, 0),
        (20, 2, 0, 0),
    ] {
        let p = NBitsParams::new(896, n, 32, 4, false);
        let b = vec![0x5a_u8; n * p.k_blocks() * p.blob_bytes()];
        let w = pack(&b, &vec![0.5; n * p.k_blocks()], None, &p);
        let hint = decode_second_segment(&w, lanes);
        assert_eq!(hint.len(), len, "N={n} lanes={lanes}: hint length");
        if len > 0 {
            assert_eq!(hint.start, at, "N={n} lanes={lanes}: hint offset");
        }
        assert!(hint.end <= w.weight_bytes().len(), "N={n} lanes={lanes}");
    }
}

/// The lines a caller prefetches of the next M=1 call (`decode_first_segment`) are the head of
/// its own segment: they start where the first group's records start, are at most
/// `CALLER_PREFETCH_BYTES` long, and end before the segment the idle lanes read ahead
/// (`decode_second_segment`) begins; with one lane (or a single chunk) the weight's head.
#[test]
fn caller_prefetch_is_the_head_of_its_own_segment() {
    let max = CALLER_PREFETCH_BYTES;
    // (K, N, lanes, prefetch length): segments longer than the bound; a single group (one
    // chunk) of K = 64, 2 records of 512 code and 64 scale bytes, shorter than it.
    for (k, n, lanes, len) in [
        (896, 896, 2, max),
        (896, 4864, 2, max),
        (896, 896, 4, max),
        (896, 896, 1, max),
        (64, 20, 2, 2 * (512 + 64)),
    ] {
        let p = NBitsParams::new(k, n, 32, 4, false);
        let b = vec![0x5a_u8; n * p.k_blocks() * p.blob_bytes()];
        let w = pack(&b, &vec![0.5; n * p.k_blocks()], None, &p);
        let head = decode_first_segment(&w, lanes);
        assert_eq!(head.start, 0, "K={k} N={n} lanes={lanes}: head offset");
        assert_eq!(head.len(), len, "K={k} N={n} lanes={lanes}: head length");
        let second = decode_second_segment(&w, lanes);
        if !second.is_empty() {
            assert!(
                head.end <= second.start,
                "K={k} N={n} lanes={lanes}: overlaps the idle lane's segment"
            );
        }
        assert!(
            head.end <= w.weight_bytes().len(),
            "K={k} N={n} lanes={lanes}"
        );
    }
}

/// `PackedNBits::column_codes` gives back every column's codes exactly as B held them (the
/// reference `weight_code`, so B's padding past K is not compared), for K within a block, odd K,
/// K past a chunk boundary, N not a multiple of a group, every block size, with and without
/// zero points and at both scale formats; and refuses a column past N or a short buffer.
#[test]
fn column_codes_give_back_the_codes_of_b() {
    use rcpu::kernels::matmul_nbits::pack;
    use rcpu::kernels::matmul_nbits::reference::weight_code;
    let mut seed = 900;
    for (k, n) in [(16, 1), (33, 31), (200, 40), (130, 33), (896, 70)] {
        for bs in [16, 32, 64, 128] {
            for (acc, zp) in [(4, false), (0, true), (1, false)] {
                seed += 1;
                let pr = Problem::new(k, n, 1, bs, acc, zp, false, seed);
                let packed = pack(&pr.b, &pr.scales, pr.zp.as_deref(), &pr.p);
                let mut row = vec![0u8; k.div_ceil(2) + 1];
                for col in 0..n {
                    row.fill(0xEE);
                    assert!(packed.column_codes(col, &mut row));
                    for kk in 0..k {
                        let got = (row[kk / 2] >> (4 * (kk % 2))) & 0x0F;
                        let want = weight_code(&pr.b, &pr.p, kk, col);
                        assert_eq!(got, want, "K={k} N={n} bs={bs} acc={acc}: ({kk}, {col})");
                    }
                    if k % 2 == 1 {
                        assert_eq!(row[k / 2] >> 4, 0, "the nibble past an odd K is 0");
                    }
                    assert_eq!(row[k.div_ceil(2)], 0xEE, "a byte past the row is untouched");
                }
                assert!(!packed.column_codes(n, &mut row), "a column past N");
                assert!(!packed.column_codes(0, &mut row[..k.div_ceil(2) - 1]));
            }
        }
    }
}

/// A's prepared buffers are parked per thread and reused without being cleared when their
/// size is unchanged: every element a call reads must be written by that call. A call whose
/// A is NaN over k 40..64 leaves those values behind; the next call on the same thread, with
/// K = 40 (the same padded length at block 32), must read zeros there (0 x NaN is NaN on the
/// fp32 path). Seen failing with the padding left unwritten.
#[test]
fn reused_a_buffers_carry_nothing_over() {
    for acc in [0, 4] {
        let first = Problem::new(64, 33, 1, 32, acc, false, false, 700 + acc as u64);
        let mut a_nan = first.a.clone();
        a_nan[40..].fill(f32::NAN);
        let second = Problem::new(40, 33, 1, 32, acc, false, false, 710 + acc as u64);
        let mut want = vec![0f32; second.p.n];
        matmul_reference(&second.a, 1, &second.weight(), None, &mut want);
        let (pk1, pk2) = (
            pack(&first.b, &first.scales, None, &first.p),
            pack(&second.b, &second.scales, None, &second.p),
        );
        for kern in Kernels::supported() {
            let mut out = vec![0f32; first.p.n];
            matmul_packed_with(kern, &a_nan, 1, &pk1, None, &mut out, &Serial).unwrap();
            let mut got = vec![f32::NAN; second.p.n];
            matmul_packed_with(kern, &second.a, 1, &pk2, None, &mut got, &Serial).unwrap();
            let ctx = format!("acc={acc} {}", kern.route(acc, 1).text());
            assert!(got.iter().all(|x| x.is_finite()), "{ctx}: {got:?}");
            let tol = if acc == 4 { 2e-2 } else { 1e-5 };
            assert!(
                rel_l2(&got, &want) <= tol,
                "{ctx}: rel L2 {}",
                rel_l2(&got, &want)
            );
        }
    }
}
