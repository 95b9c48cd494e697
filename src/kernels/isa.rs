//! The instruction-set level of this process, detected once.
//!
//! Every kernel family builds its dispatch table from `Isa::get()` exactly once per process
//! (a `std::sync::LazyLock` table of function pointers), so the hot path never re-checks CPU
//! features. `RCPU_ISA=scalar|avx2|avx512` caps the level for diagnostics and tests; it can only
//! lower what the CPU supports, never raise it.

use std::sync::LazyLock;

use crate::kernels::simd;

/// Ordered ISA levels: a higher level implies every lower one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Portable Rust, no explicit SIMD: the reference every variant is tested against.
    Scalar,
    /// AVX2 + FMA (+ F16C).
    Avx2,
    /// AVX-512 F/BW/DQ/VL.
    Avx512,
    /// AVX-512 with VNNI (vpdpbusd).
    Avx512Vnni,
}

impl Isa {
    /// Short lower-case name used in the dispatch ledger.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Avx512Vnni => "avx512vnni",
        }
    }

    /// What the CPU supports (ignores the environment cap): [`simd::detect`].
    pub fn detect_hardware() -> Isa {
        simd::detect()
    }

    /// The process's level: hardware, capped by `RCPU_ISA` when set. Computed once.
    pub fn get() -> Isa {
        static LEVEL: LazyLock<Isa> = LazyLock::new(|| {
            let hw = Isa::detect_hardware();
            match std::env::var("RCPU_ISA")
                .ok()
                .as_deref()
                .and_then(Isa::parse)
            {
                Some(cap) => hw.min(cap),
                None => hw,
            }
        });
        *LEVEL
    }

    /// Parses a cap name (`scalar`, `avx2`, `avx512`, `avx512vnni`).
    pub fn parse(s: &str) -> Option<Isa> {
        match s.trim().to_ascii_lowercase().as_str() {
            "scalar" => Some(Isa::Scalar),
            "avx2" => Some(Isa::Avx2),
            "avx512" => Some(Isa::Avx512),
            "avx512vnni" | "vnni" => Some(Isa::Avx512Vnni),
            _ => None,
        }
    }
}

/// Logs the process's ISA choice at INFO, once per process (the first EP created in it). Every
/// kernel family dispatches from [`Isa::get`], so this one line says which variants run.
pub fn log_choice_once() {
    static LOGGED: std::sync::Once = std::sync::Once::new();
    LOGGED.call_once(|| {
        let (level, hw) = (Isa::get(), hardware());
        let why = if level < hw {
            " (capped by RCPU_ISA)"
        } else {
            ""
        };
        log::info!(
            "rcpu kernels dispatch at ISA level {}{why}; the CPU supports {}",
            level.name(),
            hw.name()
        );
    });
}

/// The hardware level, detected once (no environment cap): what variants may run at all.
pub fn hardware() -> Isa {
    simd::hardware()
}

/// The kernel tables of one family, one per ISA level it implements. Every family builds one
/// with [`isa_tables!`](crate::isa_tables) and picks from it once per process. The SIMD tables
/// hold entries that run only under their level's token ([`simd`]), and [`IsaTables::for_isa`]
/// mints that token before it hands a table out.
///
/// The tables are private: [`IsaTables::for_isa`] and [`IsaTables::active`] are the one way
/// any module reaches them, so none is reached without its level's token.
pub struct IsaTables<T: 'static> {
    scalar: &'static T,
    avx2: Option<&'static T>,
    avx512: Option<&'static T>,
    /// AVX-512 with VNNI; `None` means the `avx512` table serves that level too.
    avx512vnni: Option<&'static T>,
}

impl<T> IsaTables<T> {
    /// The tables of one family (what [`isa_tables!`](crate::isa_tables) builds).
    pub const fn new(
        scalar: &'static T,
        avx2: Option<&'static T>,
        avx512: Option<&'static T>,
        avx512vnni: Option<&'static T>,
    ) -> Self {
        IsaTables {
            scalar,
            avx2,
            avx512,
            avx512vnni,
        }
    }

    /// The table for `isa`, handed out only once `isa`'s token was minted; `Err` (every family's
    /// one answer for "no table for this ISA") when this CPU (or this build) cannot run it.
    pub fn for_isa(&self, isa: Isa) -> Result<&'static T, String> {
        let unsupported = || simd::unsupported(isa);
        simd::check(isa)?;
        match isa {
            Isa::Scalar => Ok(self.scalar),
            Isa::Avx2 => self.avx2.ok_or_else(unsupported),
            Isa::Avx512 => self.avx512.ok_or_else(unsupported),
            Isa::Avx512Vnni => self.avx512vnni.or(self.avx512).ok_or_else(unsupported),
        }
    }

    /// The table for the process's level ([`Isa::get`]), scalar when none fits.
    pub fn active(&self) -> &'static T {
        self.for_isa(Isa::get()).unwrap_or(self.scalar)
    }
}

/// `isa_tables!(SCALAR, AVX2, AVX512)`: an [`IsaTables`] whose SIMD entries exist on x86-64 only;
/// `isa_tables!(SCALAR, AVX2, AVX512, AVX512VNNI)` adds a table for the VNNI level.
#[macro_export]
macro_rules! isa_tables {
    ($scalar:expr, $avx2:expr, $avx512:expr) => {
        $crate::kernels::isa::IsaTables::new(
            &$scalar,
            $crate::isa_tables!(@simd $avx2),
            $crate::isa_tables!(@simd $avx512),
            None,
        )
    };
    ($scalar:expr, $avx2:expr, $avx512:expr, $avx512vnni:expr) => {
        $crate::kernels::isa::IsaTables::new(
            &$scalar,
            $crate::isa_tables!(@simd $avx2),
            $crate::isa_tables!(@simd $avx512),
            $crate::isa_tables!(@simd $avx512vnni),
        )
    };
    (@simd $t:expr) => {{
        #[cfg(target_arch = "x86_64")]
        {
            Some(&$t)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            None
        }
    }};
}
