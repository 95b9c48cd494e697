//! The typed route of an f32 GEMM call: which ISA variant ran and which path it took. Calls
//! return a [`GemmRoute`]; its text (`avx512-gemv-m1`, `scalar-gemm-8x8-prepacked`, ...) is made
//! only when the dispatch ledger records it ([`Variant`]).

use crate::kernels::isa::Isa;
use crate::telemetry::ledger::Variant;

/// The path of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GemmPath {
    /// The blocked driver over a strided B.
    Gemm,
    /// m == 1: the GEMV over op(B).
    GemvM1,
    /// n == 1: the GEMV over op(A).
    GemvN1,
    /// m == 0 or n == 0: nothing to compute.
    Empty,
    /// k == 0: `C = beta * C`.
    K0Scale,
    /// Constant B, m > 1: the blocked driver over the weight.
    WeightGemm(BForm),
    /// Constant B, m == 1: the panel GEMV over the weight.
    WeightGemvM1(BForm),
}

/// How a constant B reached the kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BForm {
    /// Packed once ([`super::Weight::Packed`]).
    Prepacked,
    /// The original tensor ([`super::Weight::Unpacked`]).
    Unpacked,
}

/// A GEMM call's route: the kernel table's ISA level and the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GemmRoute {
    pub isa: Isa,
    pub path: GemmPath,
}

/// The ledger texts of one table, in [`GemmPath::index`] order.
macro_rules! texts {
    ($isa:literal, $tile:literal) => {
        [
            concat!($isa, "-gemm-", $tile),
            concat!($isa, "-gemv-m1"),
            concat!($isa, "-gemv-n1"),
            concat!($isa, "-empty"),
            concat!($isa, "-k0-scale"),
            concat!($isa, "-gemm-", $tile, "-prepacked"),
            concat!($isa, "-gemm-", $tile, "-unpacked"),
            concat!($isa, "-gemv-m1-prepacked"),
            concat!($isa, "-gemv-m1-unpacked"),
        ]
    };
}

static SCALAR: [&str; 9] = texts!("scalar", "8x8");
static AVX2: [&str; 9] = texts!("avx2", "6x16");
static AVX512: [&str; 9] = texts!("avx512", "8x32");

impl GemmPath {
    fn index(self) -> usize {
        match self {
            GemmPath::Gemm => 0,
            GemmPath::GemvM1 => 1,
            GemmPath::GemvN1 => 2,
            GemmPath::Empty => 3,
            GemmPath::K0Scale => 4,
            GemmPath::WeightGemm(f) => 5 + f as usize,
            GemmPath::WeightGemvM1(f) => 7 + f as usize,
        }
    }
}

impl Variant for GemmRoute {
    fn text(self) -> &'static str {
        let t = match self.isa {
            Isa::Scalar => &SCALAR,
            Isa::Avx2 => &AVX2,
            // The GEMM family has no VNNI table: the AVX-512 one serves that level.
            Isa::Avx512 | Isa::Avx512Vnni => &AVX512,
        };
        t[self.path.index()]
    }
}
