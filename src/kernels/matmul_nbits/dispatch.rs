//! The per-process choice of tile kernels, and the route each call takes.

use std::ops::Range;
use std::sync::LazyLock;

use super::dequant::{dequant_scalar, BlockConsts, DequantFn, DEQUANT_MIN_M, DEQUANT_MIN_M_AVX512};
use super::pack::{GroupView, NR};
use super::prepare_a::{quantize_row_scalar, PreparedA, QuantRowFn};
use super::route::{NBitsPath, NBitsRoute};
use super::{nonfinite, tile_scalar, MR};
use crate::kernels::isa::{Isa, IsaTables};
use crate::kernels::simd::{plain_entry, Level};

/// A tile kernel: rows `r0..r0 + nr` (`nr <= MR`) of prepared A against one column group,
/// results (without bias) into `res[0..nr]`. A SIMD entry runs its kernel only under its level's
/// token (`kernels/simd.rs`), so calling one is safe on any CPU.
/// The leading [`Level`] is the one the driver minted for the call (`kernels/simd.rs`).
pub(crate) type TileFn = fn(Level, &GroupView, &PreparedA, usize, usize, &mut [[f32; NR]; MR]);

/// Largest |x| of a row (the `abs_max` entry of [`Kernels`]).
pub(crate) type AbsMaxFn = fn(Level, &[f32]) -> f32;

/// A whole-group GEMM (the AMX one, `tile_amx`): rows `rows` (from a multiple of
/// [`AMX_ROWS`](super::tile_amx::AMX_ROWS)) of prepared A, padded with zero rows to a multiple of
/// it, against one column group, using the i32 slice (at least `tile_amx::panel_len(kp)`) as
/// scratch; `emit(row, results)` per row, results without bias. Bit-identical to the VNNI tile.
pub(crate) type GemmFn =
    fn(&GroupView, &PreparedA, Range<usize>, &mut [i32], &mut dyn FnMut(usize, &[f32; NR]));

/// Rows from which an accuracy-level-4 call takes the AMX GEMM where the process has it; below,
/// the VNNI tile. Measured with `examples/matmul_nbits_amx.rs threshold` (single thread, thread
/// CPU time, loaded 2-vCPU Sapphire Rapids VM): VNNI / AMX time 0.52-0.59 at M = 8, 0.97-1.08 at
/// 16, 0.95 at 24, 1.26-1.30 at 32 (K=896 N=4864 and K=4864 N=896). The AMX kernel works in
/// tiles of 16 and 32 rows, so 24 rows cost as much as 32.
pub const AMX_MIN_M: usize = 32;

/// On the AMX route, a last partial row tile shorter than this goes to the VNNI tile (which
/// costs per 4 rows; AMX per 16 or 32): measured equal at 16 rows, VNNI faster below.
const AMX_TAIL_MIN: usize = 16;

/// Rows per AMX row tile (two A tiles of 16 rows); prepared A is padded to a multiple of it on
/// the AMX path.
pub(crate) const AMX_ROWS: usize = 32;

/// i32 elements of the AMX GEMM's per-group B panel for prepared rows of `kp` (two halves of
/// `kp / 4` B-tile rows of 64 bytes: `kp * 32` bytes).
pub(crate) fn amx_panel_len(kp: usize) -> usize {
    kp * NR / 4
}

/// Scratch (i32 elements) the AMX GEMM needs for its panel: [`amx_panel_len`] plus room to
/// start it on a 64-byte boundary (a tile row split over two cache lines loads far slower).
pub(crate) fn amx_scratch_len(kp: usize) -> usize {
    amx_panel_len(kp) + 16
}

/// The kernels of one ISA level.
#[derive(Clone, Copy)]
pub struct Kernels {
    /// The level these kernels need.
    pub isa: Isa,
    pub(crate) f32_tile: TileFn,
    pub(crate) i8_tile: TileFn,
    /// The int8 tile for 8-bit groups (`bits8`): the VNNI level's own kernel, elsewhere (and
    /// beside the AMX GEMM, to stay bit-identical with it) `i8_tile`.
    pub(crate) i8_tile8: TileFn,
    /// Per-row int8 quantiser of A (accuracy level 4).
    pub(crate) quant_row: QuantRowFn,
    /// Largest |x| of a row of A (`nonfinite::abs_max`, bit-identical at every level): the
    /// per-call non-finite and overflow scans.
    pub(crate) abs_max: AbsMaxFn,
    /// The f32 levels' many-row route: a block of a group's codes dequantized into the f32
    /// GEMM's panels (`dequant`; the same values at every level).
    pub(crate) dequant: DequantFn,
    /// Rows from which the f32 levels take that route.
    dequant_min_m: usize,
    /// Accuracy level 4 from [`AMX_MIN_M`] rows: the AMX GEMM (only in the tables
    /// [`Kernels::amx`] and [`Kernels::amx_every_m`] hand out, minted from the `Amx` token).
    i8_gemm: Option<GemmFn>,
    /// Rows from which the AMX GEMM is taken.
    amx_min_m: usize,
    /// A last partial AMX row tile shorter than this goes to the tile kernel.
    pub(crate) amx_tail_min: usize,
}

/// The table entries: each takes its level's token from the caller's Level and runs the kernel
/// under it. Every feature a kernel enables is one of its token's level (AVX2 level: "avx2,fma,f16c"; AVX-512 level:
/// F/BW/DQ/VL + FMA; VNNI level: those + VNNI), and the kernels check everything else they
/// index (their `assert!`s on the view's and prepared A's lengths, slice indexing for zero
/// points and scales of A, `nr` matched against 1..=MR), so features are their only unchecked
/// contract.
#[cfg(target_arch = "x86_64")]
mod entries {
    use super::super::dequant::BlockConsts;
    use super::super::pack::{GroupView, NR};
    use super::super::prepare_a::PreparedA;
    use super::super::{dequant_avx2, quant_avx512, tile_amx, tile_avx2, tile_avx512, MR};
    use crate::kernels::simd::{simd_entry, Amx, Avx2, Avx512, Avx512Vnni};
    use std::ops::Range;

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
    simd_entry!(pub(super) fn i8_avx512vnni8(
        g: &GroupView, a: &PreparedA, r0: usize, nr: usize, res: &mut [[f32; NR]; MR],
    ) = Avx512Vnni => tile_avx512::tile_i8_vnni8);
    /// The AMX GEMM's entry. `Amx` is not a [`Level`](crate::kernels::simd::Level) (it needs
    /// the OS permission on top of a level), so the entry takes its token itself, once per group.
    pub(super) fn i8_amx(
        g: &GroupView,
        a: &PreparedA,
        rows: Range<usize>,
        panel: &mut [i32],
        emit: &mut dyn FnMut(usize, &[f32; NR]),
    ) {
        let _token = Amx::get().expect("the AMX table is handed out only under the Amx token");
        // SAFETY: `tile_amx::group_i8` enables the AVX-512 level's features; its tile
        // instructions (inline asm) need AMX-TILE / AMX-INT8 with the OS permission. The `Amx`
        // token exists, which proves all of them (it is minted only above the VNNI level).
        unsafe { tile_amx::group_i8(g, a, rows, panel, emit) }
    }
    simd_entry!(pub(super) fn abs_max_avx512(v: &[f32]) -> f32 = Avx512 => quant_avx512::abs_max);
    simd_entry!(pub(super) fn dequant_avx2(
        codes: &[u8], rows: usize, c: &BlockConsts, dst: &[Option<usize>; 4], ld: usize,
        bits8: bool, out: &mut [f32],
    ) = Avx2 => dequant_avx2::dequant);
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
plain_entry!(fn abs_max_scalar(v: &[f32]) -> f32 => nonfinite::abs_max);
plain_entry!(fn dequant_scalar_entry(
    codes: &[u8], rows: usize, c: &BlockConsts, dst: &[Option<usize>; 4], ld: usize,
    bits8: bool, out: &mut [f32],
) => dequant_scalar);
plain_entry!(fn quant_scalar(
    row: &[f32], bs: usize, q: &mut [i8], qscale: &mut [f32], qsum: &mut [i32],
) => quantize_row_scalar);

const SCALAR: Kernels = Kernels {
    isa: Isa::Scalar,
    f32_tile: f32_scalar,
    i8_tile: i8_scalar,
    i8_tile8: i8_scalar,
    quant_row: quant_scalar,
    abs_max: abs_max_scalar,
    dequant: dequant_scalar_entry,
    dequant_min_m: DEQUANT_MIN_M,
    i8_gemm: None,
    amx_min_m: usize::MAX,
    amx_tail_min: 0,
};

#[cfg(target_arch = "x86_64")]
const AVX2: Kernels = Kernels {
    isa: Isa::Avx2,
    f32_tile: entries::f32_avx2,
    i8_tile: entries::i8_avx2,
    i8_tile8: entries::i8_avx2,
    quant_row: quant_scalar,
    abs_max: abs_max_scalar,
    dequant: entries::dequant_avx2,
    dequant_min_m: DEQUANT_MIN_M,
    i8_gemm: None,
    amx_min_m: usize::MAX,
    amx_tail_min: 0,
};

#[cfg(target_arch = "x86_64")]
const AVX512: Kernels = Kernels {
    isa: Isa::Avx512,
    f32_tile: entries::f32_avx512,
    i8_tile: entries::i8_avx512,
    i8_tile8: entries::i8_avx512,
    quant_row: entries::quant_avx512,
    abs_max: entries::abs_max_avx512,
    dequant: entries::dequant_avx2,
    dequant_min_m: DEQUANT_MIN_M_AVX512,
    i8_gemm: None,
    amx_min_m: usize::MAX,
    amx_tail_min: 0,
};

#[cfg(target_arch = "x86_64")]
const AVX512VNNI: Kernels = Kernels {
    isa: Isa::Avx512Vnni,
    f32_tile: entries::f32_avx512,
    i8_tile: entries::i8_avx512vnni,
    i8_tile8: entries::i8_avx512vnni8,
    quant_row: entries::quant_avx512,
    abs_max: entries::abs_max_avx512,
    dequant: entries::dequant_avx2,
    dequant_min_m: DEQUANT_MIN_M_AVX512,
    i8_gemm: None,
    amx_min_m: usize::MAX,
    amx_tail_min: 0,
};

/// [`AVX512VNNI`] with the AMX GEMM from [`AMX_MIN_M`] rows (handed out only under the `Amx`
/// token).
#[cfg(target_arch = "x86_64")]
const AVX512VNNI_AMX: Kernels = Kernels {
    i8_tile8: entries::i8_avx512vnni,
    i8_gemm: Some(entries::i8_amx),
    amx_min_m: AMX_MIN_M,
    amx_tail_min: AMX_TAIL_MIN,
    ..AVX512VNNI
};

/// [`AVX512VNNI_AMX`] taking AMX for every M > 1 and every row (tests and measurements).
#[cfg(target_arch = "x86_64")]
const AVX512VNNI_AMX_EVERY_M: Kernels = Kernels {
    amx_min_m: 2,
    amx_tail_min: 0,
    ..AVX512VNNI_AMX
};

/// The AMX table (`every_m`: the one for every M) when the process may use AMX (the `Amx`
/// token), else `Err`.
fn amx_table_for(every_m: bool) -> Result<&'static Kernels, String> {
    #[cfg(target_arch = "x86_64")]
    if crate::kernels::simd::Amx::get().is_some() {
        return Ok(if every_m {
            &AVX512VNNI_AMX_EVERY_M
        } else {
            &AVX512VNNI_AMX
        });
    }
    let _ = every_m;
    Err("AMX int8 is not usable here (CPU, OS tile state or arch_prctl permission)".to_string())
}

/// The AMX table of the process's route.
fn amx_table() -> Result<&'static Kernels, String> {
    amx_table_for(false)
}

/// Whether `RCPU_AMX=0` (diagnostics: compare with the VNNI path in one build) turns AMX off.
fn amx_disabled_by_env() -> bool {
    std::env::var("RCPU_AMX").is_ok_and(|v| v.trim() == "0")
}

/// This family's kernel tables, one per ISA level.
static TABLES: IsaTables<Kernels> = crate::isa_tables!(SCALAR, AVX2, AVX512, AVX512VNNI);

/// The process's choice (from `Isa::get()`), made once.
/// At the VNNI level the AMX table replaces the plain one where AMX is usable (and not turned off
/// with `RCPU_AMX=0`).
static ACTIVE: LazyLock<&'static Kernels> = LazyLock::new(|| {
    let level = TABLES.active();
    match amx_table() {
        Ok(amx) if level.isa == amx.isa && !amx_disabled_by_env() => amx,
        _ => level,
    }
});

/// Every level the hardware supports, lowest first (each minted through [`IsaTables::for_isa`]),
/// then the AMX table where AMX is usable.
static SUPPORTED: LazyLock<Vec<&'static Kernels>> = LazyLock::new(|| {
    [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni]
        .into_iter()
        .filter_map(|l| TABLES.for_isa(l).ok())
        .chain(amx_table().ok())
        .collect()
});

impl Kernels {
    /// The kernels this process uses.
    pub fn active() -> &'static Kernels {
        &ACTIVE
    }

    /// Largest |x| of `v` (the maximum of the magnitude bits: +inf or NaN when `v` holds one)
    /// with this table's scan of A; the same bits at every level. `Err` when the CPU lacks the
    /// table's level.
    pub fn row_abs_max(&self, v: &[f32]) -> Result<f32, String> {
        Ok((self.abs_max)(Level::require(self.isa)?, v))
    }

    /// The kernels of `isa`; `Err` when the CPU lacks it.
    pub fn for_isa(isa: Isa) -> Result<&'static Kernels, String> {
        TABLES.for_isa(isa)
    }

    /// The VNNI level's kernels with the AMX GEMM (accuracy level 4 from [`AMX_MIN_M`] rows);
    /// `Err` where the CPU or the OS does not let this process use AMX.
    pub fn amx() -> Result<&'static Kernels, String> {
        amx_table()
    }

    /// [`Kernels::amx`] taking the AMX GEMM for every M > 1 and every row (no VNNI for short
    /// tails): for tests and measurements of the AMX kernel at any M.
    pub fn amx_every_m() -> Result<&'static Kernels, String> {
        amx_table_for(true)
    }

    /// Whether this set has the AMX GEMM.
    pub fn has_amx(&self) -> bool {
        self.i8_gemm.is_some()
    }

    /// Short name of the set for reports: its level's name, `avx512vnni+amx` for [`Kernels::amx`].
    pub fn label(&self) -> &'static str {
        if self.has_amx() {
            "avx512vnni+amx"
        } else {
            self.isa.name()
        }
    }

    /// Whether a call of `m` rows at `accuracy_level` dequantizes into the f32 GEMM's panels
    /// (`dequant`: the f32 levels from `dequant_min_m` rows).
    pub(crate) fn dequant(&self, accuracy_level: usize, m: usize) -> bool {
        accuracy_level != 4 && m >= self.dequant_min_m
    }

    /// This table with the f32 levels' dequantizing route from `m` rows (`usize::MAX`: never),
    /// for measurements and tests that compare it with the tile kernel at the same row count.
    pub fn with_dequant_min_m(&self, m: usize) -> Kernels {
        Kernels {
            dequant_min_m: m.max(2),
            ..*self
        }
    }

    /// The whole-group GEMM a call of `m` rows at `accuracy_level` takes, if any.
    pub(crate) fn gemm(&self, accuracy_level: usize, m: usize) -> Option<GemmFn> {
        self.i8_gemm
            .filter(|_| accuracy_level == 4 && m >= self.amx_min_m.max(2))
    }

    /// All kernel sets the CPU supports, lowest first, then [`Kernels::amx`] where usable (for
    /// tests and benchmarks).
    pub fn supported() -> &'static [&'static Kernels] {
        &SUPPORTED
    }

    /// The route of a call at `accuracy_level` with `m` rows (ledger text e.g.
    /// `avx512vnni-acc4-gemv`).
    pub fn route(&self, accuracy_level: usize, m: usize) -> NBitsRoute {
        let path = if self.gemm(accuracy_level, m).is_some() {
            NBitsPath::AmxGemm
        } else if self.dequant(accuracy_level, m) {
            NBitsPath::F32Dequant
        } else {
            match (accuracy_level == 4, m > 1) {
                (false, false) => NBitsPath::F32Gemv,
                (false, true) => NBitsPath::F32Gemm,
                (true, false) => NBitsPath::Int8Gemv,
                (true, true) => NBitsPath::Int8Gemm,
            }
        };
        NBitsRoute {
            isa: self.isa,
            path,
        }
    }
}

/// The route the active kernels take for `accuracy_level` and `m` rows.
pub fn route(accuracy_level: usize, m: usize) -> NBitsRoute {
    Kernels::active().route(accuracy_level, m)
}
