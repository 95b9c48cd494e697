//! Scalar reference conversions between f32 and IEEE binary16, written out bit by bit.
//!
//! Two NaN rules, because ORT's CPU EP (MLAS, x86-64 with F16C) converts a buffer in blocks
//! (8 elements to f16, 16 to f32) with the hardware instructions and the remaining `n % block`
//! elements in scalar code:
//! - block rule ([`NanRule::Hardware`], `vcvtps2ph` / `vcvtph2ps`): f32 -> f16 keeps the sign
//!   and the top 9 payload bits and sets the quiet bit; f16 -> f32 shifts the payload up and
//!   sets the quiet bit (a signalling NaN becomes quiet);
//! - tail rule ([`NanRule::Scalar`]): f32 -> f16 gives the canonical quiet NaN `sign | 0x7e00`;
//!   f16 -> f32 shifts the payload up and leaves the quiet bit as it was.
//!
//! Every non-NaN value converts the same way under both rules: f32 -> f16 rounds to nearest
//! even with gradual underflow and overflow to infinity; f16 -> f32 is exact.

use super::F16Bits;

/// Which NaN encoding a conversion produces (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NanRule {
    Hardware,
    Scalar,
}

/// f32 -> f16 under `rule`.
pub fn f32_to_f16(x: f32, rule: NanRule) -> F16Bits {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32;
    let man = b & 0x7f_ffff;
    if exp == 0xff {
        let low = match (man, rule) {
            (0, _) => 0,
            (_, NanRule::Hardware) => 0x200 | (man >> 13) as u16,
            (_, NanRule::Scalar) => 0x200,
        };
        return F16Bits(sign | 0x7c00 | low);
    }
    // Exponent rebased to binary16 (bias 15).
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return F16Bits(sign | 0x7c00);
    }
    // The significand with its implicit bit (f32 subnormals are far below f16's range: 0).
    if exp == 0 {
        return F16Bits(sign);
    }
    let sig = man | 0x80_0000;
    // Right shift onto binary16's 10 fraction bits: 13 for normal results, more for
    // subnormal ones (e < 1); past 24 everything rounds to zero.
    let shift = if e >= 1 { 13 } else { (14 - e) as u32 };
    if shift > 24 {
        return F16Bits(sign);
    }
    let kept = sig >> shift;
    let rest = sig & ((1u32 << shift) - 1);
    let half = 1u32 << (shift - 1);
    let round_up = rest > half || (rest == half && kept & 1 == 1);
    // A carry out of the fraction bumps the exponent (up to 0x7c00, infinity: correct).
    let base = if e >= 1 {
        ((e as u32) << 10) | (kept & 0x3ff)
    } else {
        kept
    };
    F16Bits(sign | (base + round_up as u32) as u16)
}

/// f16 -> f32 under `rule` (exact for every non-NaN value).
pub fn f16_to_f32(h: F16Bits, rule: NanRule) -> f32 {
    let h = h.0 as u32;
    let sign = (h & 0x8000) << 16;
    let exp = (h >> 10) & 0x1f;
    let man = h & 0x3ff;
    let bits = match exp {
        0x1f if man != 0 && rule == NanRule::Hardware => 0x7fc0_0000 | (man << 13),
        0x1f => 0x7f80_0000 | (man << 13),
        0 if man == 0 => 0,
        0 => {
            // Subnormal man * 2^-24: normalise (lz = zeros above the top set bit in 10 bits).
            let lz = man.leading_zeros() - 22;
            let m = (man << (lz + 1)) & 0x3ff;
            ((127 - 15 - lz) << 23) | (m << 13)
        }
        _ => ((exp + 127 - 15) << 23) | (man << 13),
    };
    f32::from_bits(sign | bits)
}

pub(super) fn to_f16(x: &[f32], out: &mut [F16Bits], rule: NanRule) {
    out.iter_mut()
        .zip(x)
        .for_each(|(o, &v)| *o = f32_to_f16(v, rule));
}

pub(super) fn to_f32(x: &[F16Bits], out: &mut [f32], rule: NanRule) {
    out.iter_mut()
        .zip(x)
        .for_each(|(o, &v)| *o = f16_to_f32(v, rule));
}

pub(super) fn to_f16_block(x: &[f32], out: &mut [F16Bits]) {
    to_f16(x, out, NanRule::Hardware)
}

pub(super) fn to_f32_block(x: &[F16Bits], out: &mut [f32]) {
    to_f32(x, out, NanRule::Hardware)
}
