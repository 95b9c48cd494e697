//! The per-process choice of tile kernels, and the variant names recorded in the ledger.

use std::sync::LazyLock;

use super::pack::{GroupView, NR};
use super::prepare_a::{quantize_row_scalar, PreparedA, QuantRowFn};
use super::MR;
use crate::kernels::isa::Isa;

/// A tile kernel: rows `r0..r0 + nr` (`nr <= MR`) of prepared A against one column group,
/// results (without bias) into `res[0..nr]`.
///
/// Unsafe because SIMD variants require their CPU features; a `Kernels` table only holds
/// variants the hardware supports, which is what makes calling through it sound.
pub(crate) type TileFn = unsafe fn(&GroupView, &PreparedA, usize, usize, &mut [[f32; NR]; MR]);

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

fn build(isa: Isa) -> Kernels {
    use super::tile_scalar as s;
    match isa {
        Isa::Scalar => Kernels {
            isa,
            f32_tile: s::tile_f32,
            i8_tile: s::tile_i8,
            quant_row: quantize_row_scalar,
            names: names!("scalar"),
        },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            use super::tile_avx2 as v;
            Kernels {
                isa,
                f32_tile: v::tile_f32,
                i8_tile: v::tile_i8,
                quant_row: quantize_row_scalar,
                names: names!("avx2"),
            }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => {
            use super::tile_avx512 as v;
            Kernels {
                isa,
                f32_tile: v::tile_f32,
                i8_tile: v::tile_i8_maddubs,
                quant_row: super::quant_avx512::quantize_row,
                names: names!("avx512"),
            }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => {
            use super::tile_avx512 as v;
            Kernels {
                isa,
                f32_tile: v::tile_f32,
                i8_tile: v::tile_i8_vnni,
                quant_row: super::quant_avx512::quantize_row,
                names: names!("avx512vnni"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        _ => build(Isa::Scalar),
    }
}

/// Every level the hardware supports, lowest first.
static TABLES: LazyLock<Vec<Kernels>> = LazyLock::new(|| {
    let hw = Isa::detect_hardware();
    [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni]
        .into_iter()
        .filter(|&l| l <= hw)
        .map(build)
        .collect()
});

/// The process's choice (from `Isa::get()`), made once.
static ACTIVE: LazyLock<&'static Kernels> = LazyLock::new(|| {
    let want = Isa::get();
    TABLES
        .iter()
        .rev()
        .find(|k| k.isa <= want)
        .expect("scalar kernels always exist")
});

impl Kernels {
    /// The kernels this process uses.
    pub fn active() -> &'static Kernels {
        &ACTIVE
    }

    /// The kernels of `isa`, or `None` when the CPU lacks it.
    pub fn for_isa(isa: Isa) -> Option<&'static Kernels> {
        TABLES.iter().find(|k| k.isa == isa)
    }

    /// All kernel sets the CPU supports, lowest first (for tests and benchmarks).
    pub fn supported() -> &'static [Kernels] {
        &TABLES
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
