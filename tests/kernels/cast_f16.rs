//! Cast f32 <-> f16: the scalar reference against independent f64 arithmetic (every f16 value,
//! every halfway point between neighbours and one f32 ulp either side, random f32 bit patterns),
//! the NaN rules of ORT's block/tail layout, and every ISA variant (serial and 3-lane) against
//! the scalar reference over odd lengths: all bit-exact.

use crate::glue_common;
use glue_common::*;

use rcpu::kernels::cast::F16Bits;
use rcpu::kernels::cast::{
    f16_to_f32, f16_to_f32_with, f32_to_f16, f32_to_f16_with, NanRule, BLOCK_TO_F16, BLOCK_TO_F32,
};
use rcpu::runtime::par::{Par, Serial};
use std::sync::atomic::{AtomicUsize, Ordering};

/// f16 bits -> value in f64 (non-NaN), from the definition.
fn f16_value(h: u16) -> f64 {
    let s = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let e = ((h >> 10) & 0x1f) as i32;
    let m = (h & 0x3ff) as f64;
    match e {
        0 => s * m * 2f64.powi(-24),
        0x1f => s * f64::INFINITY,
        _ => s * (1.0 + m / 1024.0) * 2f64.powi(e - 15),
    }
}

/// Nearest f16 (ties to even) of a non-NaN f32, computed in f64.
fn f16_nearest(x: f32) -> u16 {
    let sign = if x.is_sign_negative() { 0x8000 } else { 0 };
    let a = (x as f64).abs();
    if a >= 65520.0 {
        return sign | 0x7c00;
    }
    if a < 2f64.powi(-14) {
        return sign | (a * 2f64.powi(24)).round_ties_even() as u16;
    }
    let e = a.log2().floor() as i32;
    let q = (a * 2f64.powi(10 - e)).round_ties_even() as u32;
    let (e, q) = if q == 2048 { (e + 1, 1024) } else { (e, q) };
    sign | (((e + 15) as u16) << 10) | (q - 1024) as u16
}

fn all_f16() -> Vec<u16> {
    (0..=u16::MAX).collect()
}

fn is_nan16(h: u16) -> bool {
    h & 0x7c00 == 0x7c00 && h & 0x3ff != 0
}

#[test]
fn f16_to_f32_reference_is_exact_and_keeps_nan_payloads() {
    for h in all_f16() {
        for rule in [NanRule::Hardware, NanRule::Scalar] {
            let got = f16_to_f32(F16Bits(h), rule);
            if is_nan16(h) {
                let quiet = if rule == NanRule::Hardware {
                    0x40_0000
                } else {
                    0
                };
                let want =
                    ((h as u32 & 0x8000) << 16) | 0x7f80_0000 | ((h as u32 & 0x3ff) << 13) | quiet;
                assert_eq!(got.to_bits(), want, "{h:#06x} {rule:?}");
            } else {
                assert_eq!(got as f64, f16_value(h), "{h:#06x}");
                assert_eq!(got.is_sign_negative(), h & 0x8000 != 0, "{h:#06x} sign");
            }
        }
    }
}

/// f32 inputs: every f16 value, the halfway points between neighbours and one ulp either side,
/// powers around the subnormal and overflow edges, f32 subnormals, random bit patterns.
fn f32_cases() -> Vec<f32> {
    let mut v = vec![];
    for h in 0u16..0x7c00 {
        let lo = f16_value(h);
        let hi = f16_value(h + 1);
        v.push(lo as f32);
        let mid = ((lo + hi) / 2.0) as f32;
        for b in [mid.to_bits(), mid.to_bits() + 1, mid.to_bits() - 1] {
            v.push(f32::from_bits(b));
        }
    }
    v.extend([
        65504.0,
        65519.99,
        65520.0,
        1e10,
        f32::MAX,
        f32::MIN_POSITIVE,
        1e-45,
        3e-8,
        2.9e-8,
    ]);
    let mut s = 0x1234_5678_9abc_def1u64;
    for _ in 0..1 << 20 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.push(f32::from_bits((s >> 32) as u32));
    }
    let neg: Vec<f32> = v.iter().map(|x| -x).collect();
    v.extend(neg);
    v
}

#[test]
fn f32_to_f16_reference_rounds_to_nearest_even() {
    for x in f32_cases() {
        for rule in [NanRule::Hardware, NanRule::Scalar] {
            let got = f32_to_f16(x, rule).0;
            if x.is_nan() {
                let low = if rule == NanRule::Hardware {
                    0x200 | ((x.to_bits() & 0x7f_ffff) >> 13) as u16
                } else {
                    0x200
                };
                let sign = ((x.to_bits() >> 16) & 0x8000) as u16;
                assert_eq!(got, sign | 0x7c00 | low, "{:#010x} {rule:?}", x.to_bits());
            } else {
                assert_eq!(got, f16_nearest(x), "{x:e} ({:#010x})", x.to_bits());
            }
        }
    }
}

#[test]
fn f32_nan_payloads() {
    for (bits, hw, tail) in [
        (0x7fc0_0000u32, 0x7e00u16, 0x7e00u16),
        (0x7f80_0001, 0x7e00, 0x7e00),
        (0x7fff_ffff, 0x7fff, 0x7e00),
        (0xffa0_0000, 0xff00, 0xfe00),
        (0x7f80_2000, 0x7e01, 0x7e00),
    ] {
        let x = f32::from_bits(bits);
        assert_eq!(f32_to_f16(x, NanRule::Hardware).0, hw, "{bits:#x}");
        assert_eq!(f32_to_f16(x, NanRule::Scalar).0, tail, "{bits:#x}");
    }
}

/// The rule element `i` of an `n`-element buffer converts with: the hardware rule on whole
/// blocks of `block`, the scalar rule on the `n % block` tail.
fn rule_at(i: usize, n: usize, block: usize) -> NanRule {
    if i < n - n % block {
        NanRule::Hardware
    } else {
        NanRule::Scalar
    }
}

/// What the buffer conversions must produce (rules by [`rule_at`]).
fn want_f16(x: &[f32]) -> Vec<u16> {
    let rule = |i| rule_at(i, x.len(), BLOCK_TO_F16);
    x.iter()
        .enumerate()
        .map(|(i, &v)| f32_to_f16(v, rule(i)).0)
        .collect()
}

fn want_f32(x: &[F16Bits]) -> Vec<u32> {
    let rule = |i| rule_at(i, x.len(), BLOCK_TO_F32);
    x.iter()
        .enumerate()
        .map(|(i, &v)| f16_to_f32(v, rule(i)).to_bits())
        .collect()
}

#[test]
fn every_isa_matches_the_block_and_tail_layout() {
    // NaN payloads everywhere, so block and tail encodings show; plus ordinary values.
    let nan_f16: Vec<u16> = (0..70_000u32).map(|i| 0x7c01 + (i % 1000) as u16).collect();
    let mut lens = vec![
        0usize,
        1,
        7,
        8,
        9,
        15,
        16,
        17,
        23,
        33,
        100,
        65_536,
        65_536 + 13,
        200_005,
    ];
    lens.sort();
    let cases = f32_cases();
    for &n in &lens {
        let mut x32: Vec<f32> = cases.iter().copied().cycle().take(n).collect();
        for (i, v) in x32.iter_mut().enumerate().filter(|(i, _)| i % 3 == 0) {
            *v = f32::from_bits(0x7f80_0001 + (i as u32 * 4099) % 0x7f_ffff);
        }
        let x16: Vec<F16Bits> = (0..n)
            .map(|i| {
                F16Bits(if i % 2 == 0 {
                    nan_f16[i % nan_f16.len()]
                } else {
                    i as u16
                })
            })
            .collect();
        let (w16, w32) = (want_f16(&x32), want_f32(&x16));
        for isa in ISAS {
            let counting = CountingPar(AtomicUsize::new(0));
            // Whether this CPU has the ISA (a table it lacks is skipped, and so is its check of
            // the parallel path).
            let mut ran = false;
            for (pname, par) in [
                ("serial", &Serial as &dyn Par),
                ("3-lane", &counting as &dyn Par),
            ] {
                let mut o16 = vec![F16Bits(0xdead); n];
                match f32_to_f16_with(isa, &x32, &mut o16, par) {
                    Ok(_) => ran = true,
                    Err(e) if e.contains("not supported") => continue,
                    Err(e) => panic!("{e}"),
                }
                let g16: Vec<u16> = o16.iter().map(|h| h.0).collect();
                if let Some(i) = (0..n).find(|&i| g16[i] != w16[i]) {
                    panic!(
                        "f32->f16 {isa:?} {pname} n={n} at {i}: {:#06x} vs {:#06x}",
                        g16[i], w16[i]
                    );
                }
                let mut o32 = vec![0.0f32; n];
                f16_to_f32_with(isa, &x16, &mut o32, par).unwrap();
                if let Some(i) = (0..n).find(|&i| o32[i].to_bits() != w32[i]) {
                    panic!(
                        "f16->f32 {isa:?} {pname} n={n} at {i}: {:#x} vs {:#x}",
                        o32[i].to_bits(),
                        w32[i]
                    );
                }
            }
            if ran && n >= 65_536 {
                assert!(
                    counting.0.load(Ordering::Relaxed) > 0,
                    "parallel path not taken at n={n}"
                );
            }
        }
    }
}

#[test]
fn length_mismatch_is_an_error() {
    let mut o = vec![F16Bits(0); 3];
    assert!(f32_to_f16_with(rcpu::kernels::isa::Isa::Scalar, &[1.0; 4], &mut o, &Serial).is_err());
}
