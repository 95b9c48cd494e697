//! The typed route of a MatMulNBits call: which kernel table ran and which path it took. Calls
//! return an [`NBitsRoute`]; its text (`avx512vnni-acc4-gemv`, `amx-acc4-gemm`, ...) is made only
//! when the dispatch ledger records it ([`Variant`]).

use crate::kernels::isa::Isa;
use crate::telemetry::ledger::Variant;

/// The path of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NBitsPath {
    /// Accuracy level 0 (f32 A), M <= 1: the tile kernel, one row.
    F32Gemv,
    /// Accuracy level 0 (f32 A), M > 1: the tile kernel over row blocks.
    F32Gemm,
    /// Accuracy level 4 (int8 A), M <= 1.
    Int8Gemv,
    /// Accuracy level 4 (int8 A), M > 1, through the tile kernel.
    Int8Gemm,
    /// Accuracy level 4 from the AMX threshold: the AMX whole-group GEMM.
    AmxGemm,
    /// Accuracy level 0 (f32 A) from `dequant::DEQUANT_MIN_M` rows: the weight dequantized
    /// into the f32 GEMM's panels.
    F32Dequant,
    /// Accuracy level 0 (f32 A), M = 1, two weights over one A with an epilogue
    /// (`matmul_pair`).
    F32GemvPair,
    /// Accuracy level 4 (int8 A), M = 1, two weights over one A with an epilogue.
    Int8GemvPair,
    /// Accuracy level 0 (f32 A), M > 1 through the tile kernel, two weights with an epilogue.
    F32GemmPair,
    /// Accuracy level 4 (int8 A), M > 1 through the tile kernel, two weights with an epilogue.
    Int8GemmPair,
}

/// A MatMulNBits call's route: the kernel table's ISA level and the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NBitsRoute {
    pub isa: Isa,
    pub path: NBitsPath,
}

impl NBitsRoute {
    /// Whether this is a pair call's route (`matmul_pair`).
    pub fn path_is_pair(self) -> bool {
        matches!(
            self.path,
            NBitsPath::F32GemvPair
                | NBitsPath::Int8GemvPair
                | NBitsPath::F32GemmPair
                | NBitsPath::Int8GemmPair
        )
    }

    /// The same table's route for a pair of weights over one A (`matmul_pair`): the pair path
    /// of this route's accuracy and row count (one row: the M=1 pair, more: the tile GEMM
    /// pair; the AMX GEMM and the dequantizing GEMM have no pair path, callers take the
    /// separate calls there).
    pub(crate) fn paired(self) -> NBitsRoute {
        let path = match self.path {
            NBitsPath::F32Gemv | NBitsPath::F32GemvPair => NBitsPath::F32GemvPair,
            NBitsPath::F32Gemm | NBitsPath::F32GemmPair => NBitsPath::F32GemmPair,
            NBitsPath::Int8Gemv | NBitsPath::Int8GemvPair => NBitsPath::Int8GemvPair,
            NBitsPath::Int8Gemm | NBitsPath::Int8GemmPair | NBitsPath::AmxGemm => {
                NBitsPath::Int8GemmPair
            }
            NBitsPath::F32Dequant => NBitsPath::F32GemmPair,
        };
        NBitsRoute {
            isa: self.isa,
            path,
        }
    }
}

/// The ledger texts of one level's routes, each followed by `$sfx` (`""`, or `"-bits8"` for an
/// 8-bit call), in [`route_text`]'s order.
macro_rules! texts {
    ($isa:literal, $sfx:literal) => {
        [
            concat!($isa, "-acc0-gemv", $sfx),
            concat!($isa, "-acc0-gemm", $sfx),
            concat!($isa, "-acc4-gemv", $sfx),
            concat!($isa, "-acc4-gemm", $sfx),
            concat!($isa, "-acc0-gemv-pair", $sfx),
            concat!($isa, "-acc4-gemv-pair", $sfx),
            concat!($isa, "-acc0-gemm-pair", $sfx),
            concat!($isa, "-acc4-gemm-pair", $sfx),
            concat!($isa, "-acc0-gemm-dequant", $sfx),
        ]
    };
}

/// Per level: the 4-bit texts, then the 8-bit ones.
static SCALAR: [[&str; 9]; 2] = [texts!("scalar", ""), texts!("scalar", "-bits8")];
static AVX2: [[&str; 9]; 2] = [texts!("avx2", ""), texts!("avx2", "-bits8")];
static AVX512: [[&str; 9]; 2] = [texts!("avx512", ""), texts!("avx512", "-bits8")];
static AVX512VNNI: [[&str; 9]; 2] = [texts!("avx512vnni", ""), texts!("avx512vnni", "-bits8")];

/// The ledger text of `route`, for an 8-bit call's when `bits8`.
fn route_text(route: NBitsRoute, bits8: bool) -> &'static str {
    let i = match route.path {
        NBitsPath::F32Gemv => 0,
        NBitsPath::F32Gemm => 1,
        NBitsPath::Int8Gemv => 2,
        NBitsPath::Int8Gemm => 3,
        // One AMX table (over the VNNI level): its text names no level.
        NBitsPath::AmxGemm => {
            return if bits8 {
                "amx-acc4-gemm-bits8"
            } else {
                "amx-acc4-gemm"
            }
        }
        NBitsPath::F32GemvPair => 4,
        NBitsPath::Int8GemvPair => 5,
        NBitsPath::F32GemmPair => 6,
        NBitsPath::Int8GemmPair => 7,
        NBitsPath::F32Dequant => 8,
    };
    let t = match route.isa {
        Isa::Scalar => &SCALAR,
        Isa::Avx2 => &AVX2,
        Isa::Avx512 => &AVX512,
        Isa::Avx512Vnni => &AVX512VNNI,
    };
    t[bits8 as usize][i]
}

impl Variant for NBitsRoute {
    fn text(self) -> &'static str {
        route_text(self, false)
    }
}

/// A call's route with its weights' bit width: what the ledger records. An 8-bit call
/// (`bits8`; a pair call's included: an 8-bit SwiGLU step) is named as the route its packed
/// groups took with a `-bits8` suffix, a 4-bit one as the route itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BitsRoute {
    pub route: NBitsRoute,
    pub bits8: bool,
}

impl NBitsRoute {
    /// This route for a call over `bits`-bit weights.
    pub fn of_bits(self, bits: usize) -> BitsRoute {
        BitsRoute {
            route: self,
            bits8: bits == 8,
        }
    }
}

impl Variant for BitsRoute {
    fn text(self) -> &'static str {
        route_text(self.route, self.bits8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every 8-bit route's text is its 4-bit route's with `-bits8` after it, and every text
    /// names its level (the AMX GEMM's names AMX). Seen failing with the scalar level's 8-bit
    /// row built without the suffix.
    #[test]
    fn bits8_texts_are_the_routes_with_a_suffix() {
        use NBitsPath::*;
        let isas = [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni];
        let paths = [
            F32Gemv,
            F32Gemm,
            Int8Gemv,
            Int8Gemm,
            AmxGemm,
            F32Dequant,
            F32GemvPair,
            Int8GemvPair,
            F32GemmPair,
            Int8GemmPair,
        ];
        for isa in isas {
            for path in paths {
                let r = NBitsRoute { isa, path };
                let (t4, t8) = (r.of_bits(4).text(), r.of_bits(8).text());
                assert_eq!(t4, r.text(), "{r:?}");
                assert_eq!(t8, format!("{t4}-bits8"), "{r:?}");
                let level = if path == AmxGemm { "amx" } else { isa.name() };
                assert!(t4.starts_with(&format!("{level}-")), "{r:?}: {t4}");
                assert_eq!(t4.contains("-pair"), r.path_is_pair(), "{r:?}: {t4}");
            }
        }
    }
}
