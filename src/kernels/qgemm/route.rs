//! The typed route of a QGemm (QLinearMatMul) call: which kernel table ran and which path it
//! took. Calls return a [`QGemmRoute`]; its text (`avx512vnni-gemv`, `scalar-gemm`, ...) is made
//! only when the dispatch ledger records it ([`Variant`]).

use crate::kernels::isa::Isa;
use crate::telemetry::ledger::Variant;

/// The path of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QGemmPath {
    /// At most one row of A in all (over every product).
    Gemv,
    /// More than one row.
    Gemm,
}

/// A QGemm call's route: the kernel table's ISA level and the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QGemmRoute {
    pub isa: Isa,
    pub path: QGemmPath,
}

impl Variant for QGemmRoute {
    fn text(self) -> &'static str {
        let t = match self.isa {
            Isa::Scalar => ["scalar-gemv", "scalar-gemm"],
            // The family has no AVX-512 (non-VNNI) table: the AVX2 one serves that level.
            Isa::Avx2 | Isa::Avx512 => ["avx2-gemv", "avx2-gemm"],
            Isa::Avx512Vnni => ["avx512vnni-gemv", "avx512vnni-gemm"],
        };
        t[self.path as usize]
    }
}
