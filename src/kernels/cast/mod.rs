//! Cast between float32 and float16 (IEEE binary16), elementwise over a contiguous buffer,
//! bit-exact with ORT's CPU EP run on one thread: f32 -> f16 rounds to nearest even (overflow
//! to infinity, gradual underflow), f16 -> f32 is exact. NaN encodings follow ORT's layout: ORT
//! converts blocks of [`BLOCK_TO_F16`] (8) / [`BLOCK_TO_F32`] (16) elements with the hardware
//! NaN rule and the last `n % block` in scalar code with the scalar rule (`scalar.rs` says
//! what each is). ORT with more than one intra-op thread splits large
//! tensors at thread-dependent points, each piece with its own scalar tail, so only NaN payload
//! bits can differ from such a session, never a value or where the NaNs are.
//! Scalar reference in `scalar.rs`; AVX2 (F16C) and AVX-512 in `x86.rs`. Outputs of at least
//! `activation::PAR_MIN_ELEMS` elements are split over lanes at multiples of the block.

mod scalar;
#[cfg(target_arch = "x86_64")]
mod x86;

use std::sync::LazyLock;

use crate::kernels::activation::chunked;
use crate::kernels::isa::Isa;
use crate::kernels::simd::{plain_entry, Level};
use crate::runtime::par::Par;

pub use scalar::{f16_to_f32, f32_to_f16, NanRule};

/// A float16 element as its IEEE binary16 bits (rcpu converts float16, never computes in it).
/// Plain bits, so the kernels use it without knowing ORT; `abi::tensor` re-exports it as the
/// element type of float16 tensors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(transparent)]
pub struct F16Bits(pub u16);

/// ORT converts whole blocks of this many elements with the hardware rule (f32 -> f16).
pub const BLOCK_TO_F16: usize = 8;
/// The same for f16 -> f32.
pub const BLOCK_TO_F32: usize = 16;

/// A multiple of both blocks, so pieces split over lanes keep ORT's block layout.
const CHUNK_ELEMS: usize = 1 << 14;

/// One level's converters; each entry takes the level minted for the call (`kernels/simd.rs`).
struct Kernels {
    isa: Isa,
    to_f16: fn(Level, &[f32], &mut [F16Bits]),
    to_f32: fn(Level, &[F16Bits], &mut [f32]),
    name: &'static str,
}

plain_entry!(fn to_f16_scalar(x: &[f32], out: &mut [F16Bits]) => scalar::to_f16_block);
plain_entry!(fn to_f32_scalar(x: &[F16Bits], out: &mut [f32]) => scalar::to_f32_block);

const SCALAR: Kernels = Kernels {
    isa: Isa::Scalar,
    to_f16: to_f16_scalar,
    to_f32: to_f32_scalar,
    name: "scalar",
};
#[cfg(target_arch = "x86_64")]
const AVX2: Kernels = Kernels {
    isa: Isa::Avx2,
    to_f16: x86::to_f16_avx2,
    to_f32: x86::to_f32_avx2,
    name: "avx2-f16c",
};
#[cfg(target_arch = "x86_64")]
const AVX512: Kernels = Kernels {
    isa: Isa::Avx512,
    to_f16: x86::to_f16_avx512,
    to_f32: x86::to_f32_avx512,
    name: "avx512",
};

/// This family's kernel tables, one per ISA level.
static TABLES: crate::kernels::isa::IsaTables<Kernels> = crate::isa_tables!(SCALAR, AVX2, AVX512);

static DISPATCH: LazyLock<&'static Kernels> = LazyLock::new(|| TABLES.active());

fn check(a: usize, b: usize) -> Result<(), String> {
    if a != b {
        return Err(format!("Cast: input has {a} elements, output {b}"));
    }
    Ok(())
}

/// `out = f16(x)`. Returns the variant that ran.
pub fn f32_to_f16_buf(
    x: &[f32],
    out: &mut [F16Bits],
    par: &dyn Par,
) -> Result<&'static str, String> {
    to_f16_with_kernels(*DISPATCH, x, out, par)
}

/// `out = f32(x)`. Returns the variant that ran.
pub fn f16_to_f32_buf(
    x: &[F16Bits],
    out: &mut [f32],
    par: &dyn Par,
) -> Result<&'static str, String> {
    to_f32_with_kernels(*DISPATCH, x, out, par)
}

/// [`f32_to_f16_buf`] forced onto one ISA variant (tests). `Err` when the CPU lacks it.
pub fn f32_to_f16_with(
    isa: Isa,
    x: &[f32],
    out: &mut [F16Bits],
    par: &dyn Par,
) -> Result<&'static str, String> {
    to_f16_with_kernels(TABLES.for_isa(isa)?, x, out, par)
}

/// [`f16_to_f32_buf`] forced onto one ISA variant (tests). `Err` when the CPU lacks it.
pub fn f16_to_f32_with(
    isa: Isa,
    x: &[F16Bits],
    out: &mut [f32],
    par: &dyn Par,
) -> Result<&'static str, String> {
    to_f32_with_kernels(TABLES.for_isa(isa)?, x, out, par)
}

fn to_f16_with_kernels(
    k: &'static Kernels,
    x: &[f32],
    out: &mut [F16Bits],
    par: &dyn Par,
) -> Result<&'static str, String> {
    check(x.len(), out.len())?;
    let lv = Level::require(k.isa)?;
    let body = x.len() - x.len() % BLOCK_TO_F16;
    let (head, tail) = out.split_at_mut(body);
    chunked(par, head, CHUNK_ELEMS, |s, o| {
        (k.to_f16)(lv, &x[s..s + o.len()], o)
    });
    scalar::to_f16(&x[body..], tail, NanRule::Scalar);
    Ok(k.name)
}

fn to_f32_with_kernels(
    k: &'static Kernels,
    x: &[F16Bits],
    out: &mut [f32],
    par: &dyn Par,
) -> Result<&'static str, String> {
    check(x.len(), out.len())?;
    let lv = Level::require(k.isa)?;
    let body = x.len() - x.len() % BLOCK_TO_F32;
    let (head, tail) = out.split_at_mut(body);
    chunked(par, head, CHUNK_ELEMS, |s, o| {
        (k.to_f32)(lv, &x[s..s + o.len()], o)
    });
    scalar::to_f32(&x[body..], tail, NanRule::Scalar);
    Ok(k.name)
}
