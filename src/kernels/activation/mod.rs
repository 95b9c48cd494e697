//! f32 activations: Sigmoid, GELU (erf form and tanh form), FastGELU (tanh form with an optional
//! bias added first), Relu and Tanh, elementwise over a contiguous buffer.
//!
//! Math (all variants): `sigmoid(x) = 1 / (1 + e)` or `e / (1 + e)` with `e = exp(-|x|)` (no
//! overflow); `gelu(x) = 0.5 * x * (1 + erf(x / sqrt 2))` with `1 + erf` computed from erfc for
//! `x / sqrt 2 <= -1` (accurate where it is small); tanh-GELU as `x * sigmoid(2u)`, which equals
//! `0.5 * x * (1 + tanh(u))` with `u = x * (alpha + alpha * gamma * x^2)` and is accurate on both
//! tails. Relu as ORT has it: `x < 0 ? 0 : x` (NaN and -0 pass through). Tanh from its Taylor
//! series near 0 and `(1 - e) / (1 + e)`, `e = exp(-2|x|)`, beyond (`consts::TANH_SMALL_MAX`).
//! The scalar reference uses `f32::exp` (`f32::tanh`); the SIMD variants rcpu's exp polynomial
//! (~2 ulp).
//!
//! Outputs of at least [`PAR_MIN_ELEMS`] elements are split into chunks for `Par::chunks` (`Dispatch::Task`).

pub(crate) mod consts;
mod scalar;
#[cfg(target_arch = "x86_64")]
mod x86;

use parking_lot::Mutex;
use std::sync::LazyLock;

use crate::kernels::isa::Isa;
use crate::runtime::par::{Dispatch, Par};

/// The activation to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Activation {
    Sigmoid,
    /// `0.5 x (1 + erf(x / sqrt 2))` (ONNX Gelu approximate="none", com.microsoft.Gelu).
    GeluErf,
    /// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))` (approximate="tanh", FastGelu).
    GeluTanh,
    /// `x < 0 ? 0 : x`.
    Relu,
    Tanh,
    /// `x * x` (Pow with the exponent 2: what `pow(x, 2)` rounds to).
    Square,
}

/// Outputs at least this large are split over lanes. Measured with `cargo run --release --example
/// glue_split_timing` (2 lanes, serial and split arms alternating, a 2-vCPU Xeon under ~50% foreign
/// load): Sigmoid serial/split was 0.97-1.08 at 8192, 0.99 at 16384, 1.61 at 32768; a decode step's
/// activations (4864 elements) stay on the calling lane.
pub const PAR_MIN_ELEMS: usize = 1 << 14;
const CHUNK_ELEMS: usize = 1 << 13;

/// `out = act(x + b)` over equal-length slices (`b` absent: `act(x)`).
type ActFn = fn(Activation, &[f32], Option<&[f32]>, &mut [f32]);

struct Kernels {
    f: ActFn,
    name: &'static str,
}

const SCALAR: Kernels = Kernels {
    f: scalar::apply,
    name: "scalar",
};
#[cfg(target_arch = "x86_64")]
const AVX2: Kernels = Kernels {
    f: x86::apply_avx2,
    name: "avx2",
};
#[cfg(target_arch = "x86_64")]
const AVX512: Kernels = Kernels {
    f: x86::apply_avx512,
    name: "avx512",
};

/// This family's kernel tables, one per ISA level.
static TABLES: crate::kernels::isa::IsaTables<Kernels> = crate::isa_tables!(SCALAR, AVX2, AVX512);

static DISPATCH: LazyLock<&'static Kernels> = LazyLock::new(|| TABLES.active());

/// `out[i] = act(x[i] + bias[i % bias.len()])` (no bias: `act(x[i])`). `bias`, when given, must
/// be non-empty and divide `x.len()`. Returns the variant that ran (`"avx512"`, ...).
pub fn activation_f32(
    act: Activation,
    x: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    par: &dyn Par,
) -> Result<&'static str, String> {
    run(*DISPATCH, act, x, bias, out, par)
}

/// [`activation_f32`] forced onto one ISA variant (tests). `Err` when the CPU lacks it.
pub fn activation_f32_with(
    isa: Isa,
    act: Activation,
    x: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    par: &dyn Par,
) -> Result<&'static str, String> {
    let k = TABLES.for_isa(isa)?;
    run(k, act, x, bias, out, par)
}

fn run(
    k: &'static Kernels,
    act: Activation,
    x: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    par: &dyn Par,
) -> Result<&'static str, String> {
    if x.len() != out.len() {
        return Err(format!(
            "{act:?}: input has {} elements, output {}",
            x.len(),
            out.len()
        ));
    }
    let n = out.len();
    match bias {
        None => chunked(par, out, CHUNK_ELEMS, |start, o| {
            (k.f)(act, &x[start..start + o.len()], None, o)
        }),
        Some(b) => {
            if b.is_empty() || !n.is_multiple_of(b.len()) {
                return Err(format!(
                    "{act:?}: bias of {} elements does not divide the input's {n}",
                    b.len()
                ));
            }
            let row = b.len();
            let rows = row * (CHUNK_ELEMS / row).max(1);
            chunked(par, out, rows, |start, o| {
                for (r, orow) in o.chunks_mut(row).enumerate() {
                    let at = start + r * row;
                    (k.f)(act, &x[at..at + row], Some(b), orow);
                }
            })
        }
    }
    Ok(k.name)
}

/// Runs `f(start, chunk)` over `out` in `chunk`-element pieces: one call when small, otherwise
/// through `Par::chunks` (`Dispatch::Task`) (each piece a disjoint `&mut` behind its own uncontended lock).
/// Also serves the other elementwise families (Cast).
pub(crate) fn chunked<T: Send>(
    par: &dyn Par,
    out: &mut [T],
    chunk: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    if out.len() < PAR_MIN_ELEMS || par.lanes() < 2 {
        f(0, out);
        return;
    }
    let parts: Vec<Mutex<&mut [T]>> = out.chunks_mut(chunk).map(Mutex::new).collect();
    par.chunks(Dispatch::Task, parts.len(), &|i| {
        let mut piece = parts[i].lock();
        f(i * chunk, &mut piece)
    });
}
