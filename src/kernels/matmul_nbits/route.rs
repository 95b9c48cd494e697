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
    /// pair; the AMX GEMM has no pair path, callers take the separate calls there).
    pub(crate) fn paired(self) -> NBitsRoute {
        let path = match self.path {
            NBitsPath::F32Gemv | NBitsPath::F32GemvPair => NBitsPath::F32GemvPair,
            NBitsPath::F32Gemm | NBitsPath::F32GemmPair => NBitsPath::F32GemmPair,
            NBitsPath::Int8Gemv | NBitsPath::Int8GemvPair => NBitsPath::Int8GemvPair,
            NBitsPath::Int8Gemm | NBitsPath::Int8GemmPair | NBitsPath::AmxGemm => {
                NBitsPath::Int8GemmPair
            }
        };
        NBitsRoute {
            isa: self.isa,
            path,
        }
    }
}

macro_rules! texts {
    ($isa:literal) => {
        [
            concat!($isa, "-acc0-gemv"),
            concat!($isa, "-acc0-gemm"),
            concat!($isa, "-acc4-gemv"),
            concat!($isa, "-acc4-gemm"),
            concat!($isa, "-acc0-gemv-pair"),
            concat!($isa, "-acc4-gemv-pair"),
            concat!($isa, "-acc0-gemm-pair"),
            concat!($isa, "-acc4-gemm-pair"),
        ]
    };
}

static SCALAR: [&str; 8] = texts!("scalar");
static AVX2: [&str; 8] = texts!("avx2");
static AVX512: [&str; 8] = texts!("avx512");
static AVX512VNNI: [&str; 8] = texts!("avx512vnni");

impl Variant for NBitsRoute {
    fn text(self) -> &'static str {
        let i = match self.path {
            NBitsPath::F32Gemv => 0,
            NBitsPath::F32Gemm => 1,
            NBitsPath::Int8Gemv => 2,
            NBitsPath::Int8Gemm => 3,
            // One AMX table (over the VNNI level): its text names no level.
            NBitsPath::AmxGemm => return "amx-acc4-gemm",
            NBitsPath::F32GemvPair => 4,
            NBitsPath::Int8GemvPair => 5,
            NBitsPath::F32GemmPair => 6,
            NBitsPath::Int8GemmPair => 7,
        };
        let t = match self.isa {
            Isa::Scalar => &SCALAR,
            Isa::Avx2 => &AVX2,
            Isa::Avx512 => &AVX512,
            Isa::Avx512Vnni => &AVX512VNNI,
        };
        t[i]
    }
}

/// The route of an 8-bit call (`bits8`): the route its packed groups took (a pair call's
/// included: an 8-bit SwiGLU step), named with a `-bits8` suffix in the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Bits8Route(pub NBitsRoute);

macro_rules! texts8 {
    ($isa:literal) => {
        [
            concat!($isa, "-acc0-gemv-bits8"),
            concat!($isa, "-acc0-gemm-bits8"),
            concat!($isa, "-acc4-gemv-bits8"),
            concat!($isa, "-acc4-gemm-bits8"),
            concat!($isa, "-acc0-gemv-pair-bits8"),
            concat!($isa, "-acc4-gemv-pair-bits8"),
            concat!($isa, "-acc0-gemm-pair-bits8"),
            concat!($isa, "-acc4-gemm-pair-bits8"),
        ]
    };
}

static SCALAR8: [&str; 8] = texts8!("scalar");
static AVX2_8: [&str; 8] = texts8!("avx2");
static AVX512_8: [&str; 8] = texts8!("avx512");
static AVX512VNNI_8: [&str; 8] = texts8!("avx512vnni");

impl Variant for Bits8Route {
    fn text(self) -> &'static str {
        let i = match self.0.path {
            NBitsPath::F32Gemv => 0,
            NBitsPath::F32Gemm => 1,
            NBitsPath::Int8Gemv => 2,
            NBitsPath::Int8Gemm => 3,
            NBitsPath::AmxGemm => return "amx-acc4-gemm-bits8",
            NBitsPath::F32GemvPair => 4,
            NBitsPath::Int8GemvPair => 5,
            NBitsPath::F32GemmPair => 6,
            NBitsPath::Int8GemmPair => 7,
        };
        let t = match self.0.isa {
            Isa::Scalar => &SCALAR8,
            Isa::Avx2 => &AVX2_8,
            Isa::Avx512 => &AVX512_8,
            Isa::Avx512Vnni => &AVX512VNNI_8,
        };
        t[i]
    }
}
