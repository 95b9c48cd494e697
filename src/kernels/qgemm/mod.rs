//! 8-bit GEMM with int32 accumulation and requantization to 8 bits (ONNX `QLinearMatMul`): pure
//! compute.
//!
//! * [`pack`]: B packed once into 64-column panels, four k per column lane (the `vpdpbusd`
//!   layout), with per-column sums for the zero-point correction ([`PackedB`]).
//! * [`requant`]: the requantization step, bit-identical to ORT's MLAS (`float(acc) * scale`,
//!   clamp, round half to even, add the output zero point).
//! * `scalar` / `avx2` / `avx512`: tile kernels (`MR` rows x one panel, full K) and row sums.
//!   AVX-512 VNNI uses `vpdpbusd`; AVX2 widens to int16 and uses `vpmaddwd` (exact, no
//!   `vpmaddubsw` saturation). Chosen once per process ([`Kernels::active`]).
//! * [`call`]: one node call from raw inputs (per-column terms, row sums, per-call packing of a
//!   non-constant B) in the thread's parked scratch.
//! * `driver`: splitting a call over `Par` (M = 1: panels with the decode dispatch; M > 1:
//!   row blocks x panels with the task dispatch), row sums, writes.
//! * [`reference`]: a naive scalar reference over ONNX's layout (test ground truth).
//!
//! Signs: `vpdpbusd` multiplies unsigned by signed bytes. A is always read in its own sign; B is
//! stored in the other one. uint8 x int8 stores B as is; uint8 x uint8 and int8 x int8 store
//! `b ^ 0x80` (b - 128 read as int8, b + 128 read as uint8) and shift B's zero point by the same
//! amount, so `sum (a - za)(b - zb)` is unchanged.

pub mod call;
mod driver;
pub mod pack;
pub mod reference;
pub mod requant;
mod route;
mod scalar;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

pub use call::{run, run_with, BSource, Call, Quant};
pub use driver::{qgemm, qgemm_with, Products};
pub use pack::{
    checked_packed_sizes, pack, pack_into, packed_sizes, try_pack, PackedB, PackedView,
};
pub use requant::{Cols, Requant};
pub use route::{QGemmPath, QGemmRoute};

use crate::kernels::isa::Isa;
use crate::kernels::simd::{plain_entry, Level};
use std::sync::LazyLock;

/// Columns per vector group (one zmm of int32 lanes).
pub const NR: usize = 16;
/// Columns per packed panel (what one tile call covers).
pub const PANEL: usize = 64;
/// Rows per tile call.
pub const MR: usize = 6;

/// The element types of A and B (the output has A's type), as ORT's CPU EP registers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Signs {
    U8U8,
    U8S8,
    S8S8,
}

impl Signs {
    /// The combination for A and B signedness; `None` for int8 A x uint8 B (ORT has no kernel).
    pub fn from_types(a_signed: bool, b_signed: bool) -> Option<Signs> {
        match (a_signed, b_signed) {
            (false, false) => Some(Signs::U8U8),
            (false, true) => Some(Signs::U8S8),
            (true, true) => Some(Signs::S8S8),
            (true, false) => None,
        }
    }
    /// A (and the output) are int8.
    pub fn a_signed(self) -> bool {
        self == Signs::S8S8
    }
    pub fn b_signed(self) -> bool {
        self != Signs::U8U8
    }
    /// B is stored as `b ^ 0x80`.
    pub fn flips_b(self) -> bool {
        self != Signs::U8S8
    }
    /// What to add to B's zero point to get the zero point of the stored B.
    pub fn b_zero_shift(self) -> i32 {
        match self {
            Signs::U8U8 => -128,
            Signs::U8S8 => 0,
            Signs::S8S8 => 128,
        }
    }
    /// Short name for ledger routes.
    pub fn name(self) -> &'static str {
        match self {
            Signs::U8U8 => "u8u8",
            Signs::U8S8 => "u8s8",
            Signs::S8S8 => "s8s8",
        }
    }
}

/// A tile kernel: rows `0..rows` (`1..=MR`, row stride `lda`) of A against one packed panel of
/// `width` columns (a multiple of `NR`, at most `PANEL`), over all `k`; raw int32 dot products
/// (no zero-point terms) into `acc[r][..width]`. `a_signed` says how A's bytes are read.
///
/// A SIMD entry runs its kernel only under its level's token (`kernels/simd.rs`), so calling
/// one is safe on any CPU.
pub(crate) type TileFn = fn(
    level: Level,
    a: &[u8],
    lda: usize,
    rows: usize,
    k: usize,
    panel: &[u8],
    width: usize,
    a_signed: bool,
    acc: &mut [[i32; PANEL]; MR],
);

/// Requantizes one row segment: `acc[j]` with `colsum[j]`, the row's sum and the parameters of
/// column `c0 + j`, into `out[j]` (bit patterns of uint8 or int8).
pub(crate) type RequantFn = fn(
    level: Level,
    acc: &[i32],
    colsum: &[i32],
    rowsum: i32,
    q: &Requant<'_>,
    c0: usize,
    out: &mut [u8],
);

/// The sum of one row of A read as uint8 or int8.
pub(crate) type RowSumFn = fn(level: Level, a: &[u8], a_signed: bool) -> i32;

/// The kernels of one ISA level. Every entry takes the level its driver minted for the call
/// ([`Level`], `kernels/simd.rs`).
pub struct Kernels {
    /// The level these kernels need.
    pub(crate) isa: Isa,
    pub(crate) tile: TileFn,
    pub(crate) requant: RequantFn,
    pub(crate) row_sum: RowSumFn,
}

impl Kernels {
    /// The route of a call with `m` rows in all (ledger text e.g. `avx512vnni-gemv`).
    pub fn route(&self, m: usize) -> QGemmRoute {
        let path = if m > 1 {
            QGemmPath::Gemm
        } else {
            QGemmPath::Gemv
        };
        QGemmRoute {
            isa: self.isa,
            path,
        }
    }

    /// The kernels this process uses (picked once from `Isa::get()`).
    pub fn active() -> &'static Kernels {
        &ACTIVE
    }

    /// The kernels of `isa`; `Err` when the CPU lacks it.
    pub fn for_isa(isa: Isa) -> Result<&'static Kernels, String> {
        TABLES.for_isa(isa)
    }
}

plain_entry!(fn tile_scalar(
    a: &[u8], lda: usize, rows: usize, k: usize, panel: &[u8], width: usize, a_signed: bool,
    acc: &mut [[i32; PANEL]; MR],
) => scalar::tile);
plain_entry!(fn requant_scalar(
    acc: &[i32], colsum: &[i32], rowsum: i32, q: &Requant<'_>, c0: usize, out: &mut [u8],
) => requant::requant_row_scalar);
plain_entry!(fn row_sum_scalar(a: &[u8], a_signed: bool) -> i32 => scalar::row_sum);

const SCALAR: Kernels = Kernels {
    isa: Isa::Scalar,
    tile: tile_scalar,
    requant: requant_scalar,
    row_sum: row_sum_scalar,
};

#[cfg(target_arch = "x86_64")]
const AVX2: Kernels = Kernels {
    isa: Isa::Avx2,
    tile: avx2::tile_entry,
    requant: requant_scalar,
    row_sum: avx2::row_sum_entry,
};

#[cfg(target_arch = "x86_64")]
const AVX512VNNI: Kernels = Kernels {
    isa: Isa::Avx512Vnni,
    tile: avx512::tile_entry,
    requant: avx512::requant_row_entry,
    row_sum: avx512::row_sum_entry,
};

/// AVX-512 without VNNI runs the AVX2 kernels (widening multiply-add).
static TABLES: crate::kernels::isa::IsaTables<Kernels> =
    crate::isa_tables!(SCALAR, AVX2, AVX2, AVX512VNNI);

static ACTIVE: LazyLock<&'static Kernels> = LazyLock::new(|| TABLES.active());
