//! The per-process choice of tile kernels, and the variant names recorded in the ledger.

use std::sync::LazyLock;

use super::pack::{GroupView, NR};
use super::prepare_a::{quantize_row_scalar, PreparedA, QuantRowFn};
use super::{tile_scalar, MR};
use crate::kernels::isa::{Isa, IsaTables};
use crate::kernels::simd::{plain_entry, Level};

/// A tile kernel: rows `r0..r0 + nr` (`nr <= MR`) of prepared A against one column group,
/// results (without bias) into `res[0..nr]`. A SIMD entry runs its kernel only under its level's
/// token (`kernels/simd.rs`), so calling one is safe on any CPU.
/// The leading [`Level`] is the one the driver minted for the call (`kernels/simd.rs`).
pub(crate) type TileFn = fn(Level, &GroupView, &PreparedA, usize, usize, &mut [[f32; NR]; MR]);

/// The kernels of one ISA level.
pub struct Kernels {
    /// The level these kernels need.
    pub isa: Isa,
    pub(crate) f32_tile: TileFn,
    pub(crate) i8_tile: TileFn,
    /// Per-row int8 quantiser of A (accuracy level 4).
    pub(crate) quant_row: QuantRowFn,
    /// [f32 gemv, f32 gemm, int8 gemv, int8 gemm]
    names: [&'static str; 4],
}

macro_rules! names {
    ($isa:literal) => {
        [
            concat!($isa, "-acc0-gemv"),
            concat!($isa, "-acc0-gemm"),
            concat!($isa, "-acc4-gemv"),
            concat!($isa, "-acc4-gemm"),
        ]
    };
}

/// The table entries: each takes its level's token from the caller's Level and runs the kernel
/// under it. Every feature a kernel enables is one of its token's level (AVX2 level: "avx2,fma,f16c"; AVX-512 level:
/// F/BW/DQ/VL + FMA; VNNI level: those + VNNI), and the kernels check everything else they
/// index (their `assert!`s on the view's and prepared A's lengths, slice indexing for zero
/// points and scales of A, `nr` matched against 1..=MR), so features are their only unchecked
/// contract.
#[cfg(target_arch = "x86_64")]
mod entries {
    use super::super::pack::{GroupView, NR};
    use super::super::prepare_a::PreparedA;
    use super::super::{quant_avx512, tile_avx2, tile_avx512, MR};
    use crate::kernels::simd::{simd_entry, Avx2, Avx512, Avx512Vnni};

    simd_entry!(pub(super) fn f32_avx2(
        g: &GroupView, a: &PreparedA, r0: usize, nr: usize, res: &mut [[f32; NR]; MR],
    ) = Avx2 => tile_avx2::tile_f32);
    simd_entry!(pub(super) fn i8_avx2(
        g: &GroupView, a: &PreparedA, r0: usize, nr: usize, res: &mut [[f32; NR]; MR],
    ) = Avx2 => tile_avx2::tile_i8);
    simd_entry!(pub(super) fn f32_avx512(
        g: &GroupView, a: &PreparedA, r0: usize, nr: usize, res: &mut [[f32; NR]; MR],
    ) = Avx512 => tile_avx512::tile_f32);
    simd_entry!(pub(super) fn i8_avx512(
        g: &GroupView, a: &PreparedA, r0: usize, nr: usize, res: &mut [[f32; NR]; MR],
    ) = Avx512 => tile_avx512::tile_i8_maddubs);
    simd_entry!(pub(super) fn i8_avx512vnni(
        g: &GroupView, a: &PreparedA, r0: usize, nr: usize, res: &mut [[f32; NR]; MR],
    ) = Avx512Vnni => tile_avx512::tile_i8_vnni);
    simd_entry!(pub(super) fn quant_avx512(
        row: &[f32], bs: usize, q: &mut [i8], qscale: &mut [f32], qsum: &mut [i32],
    ) = Avx512 => quant_avx512::quantize_row);
}

plain_entry!(fn f32_scalar(
    g: &GroupView, a: &PreparedA, r0: usize, nr: usize, res: &mut [[f32; NR]; MR],
) => tile_scalar::tile_f32);
plain_entry!(fn i8_scalar(
    g: &GroupView, a: &PreparedA, r0: usize, nr: usize, res: &mut [[f32; NR]; MR],
) => tile_scalar::tile_i8);
plain_entry!(fn quant_scalar(
    row: &[f32], bs: usize, q: &mut [i8], qscale: &mut [f32], qsum: &mut [i32],
) => quantize_row_scalar);

const SCALAR: Kernels = Kernels {
    isa: Isa::Scalar,
    f32_tile: f32_scalar,
    i8_tile: i8_scalar,
    quant_row: quant_scalar,
    names: names!("scalar"),
};

#[cfg(target_arch = "x86_64")]
const AVX2: Kernels = Kernels {
    isa: Isa::Avx2,
    f32_tile: entries::f32_avx2,
    i8_tile: entries::i8_avx2,
    quant_row: quant_scalar,
    names: names!("avx2"),
};

#[cfg(target_arch = "x86_64")]
const AVX512: Kernels = Kernels {
    isa: Isa::Avx512,
    f32_tile: entries::f32_avx512,
    i8_tile: entries::i8_avx512,
    quant_row: entries::quant_avx512,
    names: names!("avx512"),
};

#[cfg(target_arch = "x86_64")]
const AVX512VNNI: Kernels = Kernels {
    isa: Isa::Avx512Vnni,
    f32_tile: entries::f32_avx512,
    i8_tile: entries::i8_avx512vnni,
    quant_row: entries::quant_avx512,
    names: names!("avx512vnni"),
};

/// This family's kernel tables, one per ISA level.
static TABLES: IsaTables<Kernels> = crate::isa_tables!(SCALAR, AVX2, AVX512, AVX512VNNI);

/// The process's choice (from `Isa::get()`), made once.
static ACTIVE: LazyLock<&'static Kernels> = LazyLock::new(|| TABLES.active());

/// Every level the hardware supports, lowest first (each minted through [`IsaTables::for_isa`]).
static SUPPORTED: LazyLock<Vec<&'static Kernels>> = LazyLock::new(|| {
    [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni]
        .into_iter()
        .filter_map(|l| TABLES.for_isa(l).ok())
        .collect()
});

impl Kernels {
    /// The kernels this process uses.
    pub fn active() -> &'static Kernels {
        &ACTIVE
    }

    /// The kernels of `isa`; `Err` when the CPU lacks it.
    pub fn for_isa(isa: Isa) -> Result<&'static Kernels, String> {
        TABLES.for_isa(isa)
    }

    /// All kernel sets the CPU supports, lowest first (for tests and benchmarks).
    pub fn supported() -> &'static [&'static Kernels] {
        &SUPPORTED
    }

    /// Ledger name of the route for `accuracy_level` and `m` rows, e.g. `avx512vnni-acc4-gemv`.
    pub fn variant_name(&self, accuracy_level: usize, m: usize) -> &'static str {
        let int8 = accuracy_level == 4;
        self.names[2 * int8 as usize + (m > 1) as usize]
    }
}

/// Ledger name of the route the active kernels take for `accuracy_level` and `m` rows.
pub fn variant_name(accuracy_level: usize, m: usize) -> &'static str {
    Kernels::active().variant_name(accuracy_level, m)
}
