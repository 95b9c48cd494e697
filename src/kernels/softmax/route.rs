//! The typed route of a Softmax call: which kernel table ran and which path it took. Calls
//! return a [`SoftmaxRoute`]; its text (`avx512-last-axis`, `scalar-strided`, ...) is made only
//! when the dispatch ledger records it ([`Variant`]).

use crate::kernels::isa::Isa;
use crate::telemetry::ledger::Variant;

/// The path of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SoftmaxPath {
    /// Softmax over the last axis (`inner == 1`): the table's contiguous-row kernel.
    LastAxis,
    /// Any other axis: the strided scalar loop (the same in every table).
    Strided,
}

/// A Softmax call's route: the kernel table's ISA level and the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SoftmaxRoute {
    pub isa: Isa,
    pub path: SoftmaxPath,
}

impl Variant for SoftmaxRoute {
    fn text(self) -> &'static str {
        match (self.path, self.isa) {
            // Every table runs the scalar strided loop.
            (SoftmaxPath::Strided, _) => "scalar-strided",
            (SoftmaxPath::LastAxis, Isa::Scalar) => "scalar-last-axis",
            (SoftmaxPath::LastAxis, Isa::Avx2) => "avx2-last-axis",
            // The family has no VNNI table: the AVX-512 one serves that level.
            (SoftmaxPath::LastAxis, Isa::Avx512 | Isa::Avx512Vnni) => "avx512-last-axis",
        }
    }
}
