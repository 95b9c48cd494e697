//! The typed route of a binary elementwise call: which kernel table ran and which broadcasting
//! path it took. Calls return a [`BinaryRoute`]; its text (`avx512-same-shape`,
//! `scalar-broadcast`, ...) is made only when the dispatch ledger records it ([`Variant`]).

use crate::kernels::isa::Isa;
use crate::telemetry::ledger::Variant;

/// The path of one call, cheapest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryPath {
    /// An empty output: nothing to compute.
    Empty,
    /// Same shape up to leading 1s: one contiguous loop.
    SameShape,
    /// A one-element left operand.
    ScalarLhs,
    /// A one-element right operand.
    ScalarRhs,
    /// One operand is a suffix of the output shape, repeated over rows.
    RowBroadcast,
    /// The general N-d walk.
    Broadcast,
}

/// A binary elementwise call's route: the kernel table's ISA level and the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BinaryRoute {
    pub isa: Isa,
    pub path: BinaryPath,
}

/// The ledger texts of one table, in [`BinaryPath`] order.
macro_rules! texts {
    ($isa:literal) => {
        [
            concat!($isa, "-empty"),
            concat!($isa, "-same-shape"),
            concat!($isa, "-scalar-lhs"),
            concat!($isa, "-scalar-rhs"),
            concat!($isa, "-row-broadcast"),
            concat!($isa, "-broadcast"),
        ]
    };
}

static SCALAR: [&str; 6] = texts!("scalar");
static AVX2: [&str; 6] = texts!("avx2");
static AVX512: [&str; 6] = texts!("avx512");

impl Variant for BinaryRoute {
    fn text(self) -> &'static str {
        let t = match self.isa {
            Isa::Scalar => &SCALAR,
            Isa::Avx2 => &AVX2,
            // The family has no VNNI table: the AVX-512 one serves that level.
            Isa::Avx512 | Isa::Avx512Vnni => &AVX512,
        };
        t[self.path as usize]
    }
}
