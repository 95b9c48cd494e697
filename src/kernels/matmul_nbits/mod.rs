//! `com.microsoft.MatMulNBits` (bits = 4 and 8): pure compute.
//!
//! * [`params`]: attributes, validation, expected input sizes.
//! * [`reference`]: naive scalar references over ORT's layout, 4- and 8-bit (test ground truth).
//! * [`bits8`]: 8-bit weights in the packed layout (16-column groups of whole code bytes).
//! * [`pack`]: the prepacked layout ([`PackedNBits`]), 32-column groups (16 for 8-bit codes).
//! * [`persist`]: a packed weight as a description and byte sections for a context file, and
//!   back over a mapped file's bytes (validated, never copied).
//! * [`prepare_a`]: per-call A preparation (padding + block sums, or int8 quantisation; the
//!   quantiser is per ISA, `quant_avx512` for AVX-512, bit-identical to the scalar one).
//! * `tile_*`: one tile kernel per ISA and accuracy; the same kernel serves M = 1 (GEMV, one
//!   row per call) and M > 1 (GEMM, up to [`MR`] rows per call, sharing each unpacked weight).
//! * `tile_amx`: the AMX int8 GEMM (accuracy level 4 from [`dispatch::AMX_MIN_M`] rows, where
//!   the CPU and the OS allow AMX): a whole column group for all rows of a call, the group's
//!   weights unpacked once into a B-tile panel; bit-identical to the VNNI tile.
//! * `dequant`: the f32 levels from `dequant::DEQUANT_MIN_M` rows: the weight dequantized slice
//!   by slice into the f32 GEMM's panels, then the f32 GEMM (`dequant_avx2`: its SIMD kernel).
//! * [`prefetch`]: the software prefetch distance of the AVX-512 kernels' weight stream.
//! * [`row1_tuner`]: the one-row (decode) distance, chosen by timing the process's decode calls.
//! * [`dispatch`]: the per-process kernel table and the route of a call.
//! * `route`: the typed route ([`NBitsRoute`]) and its ledger text.
//! * `driver`: chunking over `Par` and the unpacked fallback.
//! * `nonfinite`: rows of A with NaN / infinities, answered as ORT answers them.
//!
//! The unpacked path ([`matmul_unpacked`]) packs, inside each chunk, only the column groups
//! that chunk computes (into a chunk-local scratch buffer) and then runs the very same tile
//! kernel with the same row blocking, so its results are bit-identical to [`matmul_packed`].

/// `by_rows!(kernel, group, a, r0, nr, results)` calls the tile kernel `kernel::<NR_ROWS, F16>`
/// for `nr` rows (1..=[`MR`]) and the group's scale format (`group.f16`), both as constants:
/// the format is fixed per group, so it is chosen once here, not per block. Shared by the x86
/// tiles (declared before their modules, so they see it).
#[cfg(target_arch = "x86_64")]
macro_rules! by_rows {
    ($f:ident, $g:expr, $a:expr, $r0:expr, $nr:expr, $res:expr) => {
        if $g.f16 {
            by_rows!(@rows $f, true, $g, $a, $r0, $nr, $res)
        } else {
            by_rows!(@rows $f, false, $g, $a, $r0, $nr, $res)
        }
    };
    (@rows $f:ident, $h:literal, $g:expr, $a:expr, $r0:expr, $nr:expr, $res:expr) => {
        match $nr {
            1 => $f::<1, $h>($g, $a, $r0, $res),
            2 => $f::<2, $h>($g, $a, $r0, $res),
            3 => $f::<3, $h>($g, $a, $r0, $res),
            4 => $f::<4, $h>($g, $a, $r0, $res),
            _ => unreachable!("nr must be 1..=MR"),
        }
    };
}

pub mod bits8;
mod dequant;
#[cfg(target_arch = "x86_64")]
mod dequant_avx2;
pub mod dispatch;
mod driver;
mod nonfinite;
pub mod pack;
pub mod params;
pub mod persist;
pub mod prefetch;
pub mod prepare_a;
#[cfg(target_arch = "x86_64")]
mod quant_avx512;
pub mod reference;
mod route;
pub mod row1_tuner;
#[cfg(target_arch = "x86_64")]
mod tile_amx;
#[cfg(target_arch = "x86_64")]
mod tile_avx2;
#[cfg(target_arch = "x86_64")]
mod tile_avx512;
mod tile_scalar;

pub use dispatch::{route, Kernels};
pub use pack::{pack, pack_threads, try_pack, try_pack_threads, PackedNBits, NR};
pub use params::{NBitsInput, NBitsParams, NBitsWeight};
pub use route::{BitsRoute, NBitsPath, NBitsRoute};

use crate::runtime::par::{Par, StreamSplit};

/// Where, in `packed.weight_bytes()`, the records lie of the segment an M=1 call of `packed`
/// over `lanes` lanes hands its second chunk (`StreamSplit::range(1)`; the caller claims chunk
/// 0 right after it publishes the job, so this is what another lane streams, front to back,
/// before it takes what is left of the other segments from their far ends), at most
/// [`IDLE_PREFETCH_SEGMENT_MAX`] bytes of it. Empty when the call has a single chunk (it runs
/// on the caller alone). What a caller hints to the idle lanes (`Par::idle_read`) before that
/// call: a lane that finds its segment cached finishes it early and takes more of the caller's,
/// so every byte fetched while the caller ran the nodes in between is a byte the call does not
/// wait for. (Before, the hint was the segment's first run, a quarter of it: the idle
/// lane ran out of hint in the longer gaps, e.g. attention's before the output projection.
/// Qwen2-0.5B decode, old / new per round, medians of 12 and 16 rounds: 1.024 and 1.012.)
pub fn decode_second_segment(packed: &PackedNBits, lanes: usize) -> std::ops::Range<usize> {
    let p = packed.params();
    let split = StreamSplit::decode(pack::groups(p), pack::group_record_bytes(p), lanes);
    if split.chunks() < 2 {
        return 0..0;
    }
    let r = packed.groups_range(split.range(1));
    r.start..r.end.min(r.start.saturating_add(IDLE_PREFETCH_SEGMENT_MAX))
}

/// Where, in `packed.weight_bytes()`, the first [`CALLER_PREFETCH_BYTES`] lie of the segment the
/// calling lane of an M=1 call of `packed` over `lanes` lanes streams (`StreamSplit::range(0)`:
/// the caller claims chunk 0 right after it publishes the job; with one lane, the whole weight).
/// What the caller hints into its own cache as the previous M=1 call ends
/// (`ep::nodes::matmul_nbits::CallerHead`): the idle lanes read their segments ahead,
/// but the caller's own stream started cold after the nodes in between (presumably a memory
/// latency per line until the hardware prefetchers caught up). Prefetched, those first lines are
/// on their way while the caller runs the norm or the attention.
///
/// Qwen2-0.5B decode past 64 (2 lanes, `rcpu-bench llm --null-plugin`, old / new per round,
/// eighteen runs of 24 rounds; docs/journal/measurements-2026-12.md, the caller's own stream no
/// longer starting cold): near 1.007 (209 rounds, 129 faster), apart 1.017 (163
/// rounds, 117 faster); a small gain at the edge of the host's noise, steady in sign. Other
/// lengths (one to three runs each): 4 KiB 1.000 near / 1.020 apart, 12 KiB 1.010 / 1.013,
/// 24 KiB 1.009 / 0.994: past what the memory system keeps in flight, the caller stalls
/// issuing them.
pub fn decode_first_segment(packed: &PackedNBits, lanes: usize) -> std::ops::Range<usize> {
    let p = packed.params();
    let split = StreamSplit::decode(pack::groups(p), pack::group_record_bytes(p), lanes);
    if split.chunks() == 0 {
        return 0..0;
    }
    let r = packed.groups_range(split.range(0));
    r.start..r.end.min(r.start.saturating_add(CALLER_PREFETCH_BYTES))
}

/// The most bytes of its own segment a caller prefetches ([`decode_first_segment`]).
pub const CALLER_PREFETCH_BYTES: usize = 8 << 10;

/// The most bytes of a segment [`decode_second_segment`] names: half of one lane's L2 on the
/// machines measured, so what was fetched is still there when the call reaches it.
pub const IDLE_PREFETCH_SEGMENT_MAX: usize = 512 << 10;

/// A pair call's epilogue, elementwise: `out[i] = f(first[i], second[i])` over slices holding
/// some columns of the products (a run of column groups of one row, or whole groups of several
/// rows back to back), the same `f` for every element wherever it sits. It runs on whichever
/// lane computed the columns, so it must be a pure function of its inputs.
pub type PairEpilogue<'e> = dyn Fn(&[f32], &[f32], &mut [f32]) + Sync + 'e;

/// Whether two packed weights can run as one pair call ([`matmul_pair`]): the same K, N,
/// block size, accuracy level (A is prepared once for both) and bits (the same groups).
pub fn pair_compatible(first: &PackedNBits, second: &PackedNBits) -> bool {
    let (p, q) = (&first.params, &second.params);
    (p.k, p.n, p.block_size, p.accuracy_level, p.bits)
        == (q.k, q.n, q.block_size, q.accuracy_level, q.bits)
}

/// `out = epi(A W1, A W2)` for `m` rows of `a` (K values each) over two packed weights with
/// [`pair_compatible`] shapes, with the process's kernels: one dispatch, each lane computing a
/// few column groups of one product, then the same of the other, and combining them with `epi`,
/// so neither product is written (an MLP's gate and up projections with SiLU(gate) * up, say).
/// `epi` sees exactly the values two [`matmul_packed`] calls would have written. `Ok(None)` when
/// these rows must take two separate calls (a non-finite value in A, values large enough to
/// overflow: the separate calls answer those as ORT does; or the row counts of the AMX GEMM or
/// the f32 levels' dequantizing GEMM, which have no pair path); `Err` when the weights are not compatible or a scratch buffer cannot be
/// allocated. Panics unless `a` has M x K and `out` M x N values.
pub fn matmul_pair(
    a: &[f32],
    m: usize,
    first: &PackedNBits,
    second: &PackedNBits,
    epi: &PairEpilogue<'_>,
    out: &mut [f32],
    par: &dyn Par,
) -> Result<Option<NBitsRoute>, String> {
    matmul_pair_with(Kernels::active(), a, m, first, second, epi, out, par)
}

/// Whether [`matmul_pair`] takes these `m` rows (`a`: M x K values) for its values: every one
/// finite and small enough that no intermediate can overflow (it may still decline the AMX
/// route). Lets a caller choose the path before it allocates the output.
pub fn pair_rows_fit(a: &[f32], m: usize, first: &PackedNBits, second: &PackedNBits) -> bool {
    let kernels = Kernels::active();
    crate::kernels::simd::Level::require(kernels.isa)
        .is_ok_and(|lv| driver::pair_rows_fit(kernels, lv, a, m, first, second))
}

/// Whether [`matmul_pair`] declines `m` rows whatever their values: none, or as many as the
/// active kernels' AMX GEMM or the f32 levels' dequantizing GEMM take (no pair path there).
pub fn pair_declines_rows(first: &PackedNBits, m: usize) -> bool {
    m == 0 || driver::no_pair_path(Kernels::active(), &first.params, m)
}

/// [`matmul_pair`] with an explicit kernel set (e.g. from [`Kernels::for_isa`]).
#[allow(clippy::too_many_arguments)]
pub fn matmul_pair_with(
    kernels: &Kernels,
    a: &[f32],
    m: usize,
    first: &PackedNBits,
    second: &PackedNBits,
    epi: &PairEpilogue<'_>,
    out: &mut [f32],
    par: &dyn Par,
) -> Result<Option<NBitsRoute>, String> {
    driver::run_pair(kernels, a, m, first, second, epi, out, par)
}

/// `out[j] = A[rows_j] W_j` (no bias) for several packed weights of equal params, one row of
/// `a` (`a_rows` rows of K) each, with the process's kernels, in one dispatch over the lanes:
/// a mixture-of-experts decode step's k experts (the same row through every fc1, each expert's
/// own row through its fc2). `jobs` holds (row of A, weight); `out` holds `jobs.len()` rows of N.
/// Each product is bit-identical to a [`matmul_packed`] call of its row. `Ok(None)` when a row
/// must take separate calls (non-finite values, or values large enough to overflow).
pub fn matmul_rows_packed(
    a: &[f32],
    a_rows: usize,
    jobs: &[(usize, &PackedNBits)],
    out: &mut [f32],
    par: &dyn Par,
) -> Result<Option<NBitsRoute>, String> {
    driver::run_rows(Kernels::active(), a, a_rows, jobs, out, par)
}

/// Rows per tile-kernel call (register blocking along M).
pub const MR: usize = 4;

/// Y = A W (+ bias) from a prepacked weight with the process's kernels; returns the route,
/// or `Err` when a scratch buffer cannot be allocated.
/// `a` holds `m` rows of `K`, `out` `m` rows of `N`. `m == 0` is a no-op.
pub fn matmul_packed(
    a: &[f32],
    m: usize,
    packed: &PackedNBits,
    bias: Option<&[f32]>,
    out: &mut [f32],
    par: &dyn Par,
) -> Result<NBitsRoute, String> {
    matmul_packed_with(Kernels::active(), a, m, packed, bias, out, par)
}

/// [`matmul_packed`] with an explicit kernel set (e.g. from [`Kernels::for_isa`]).
pub fn matmul_packed_with(
    kernels: &Kernels,
    a: &[f32],
    m: usize,
    packed: &PackedNBits,
    bias: Option<&[f32]>,
    out: &mut [f32],
    par: &dyn Par,
) -> Result<NBitsRoute, String> {
    driver::run(
        kernels,
        a,
        m,
        driver::Source::Packed(packed),
        bias,
        out,
        par,
    )
}

/// Y = A W (+ bias) straight from ORT's layout (the path when no packed copy is cached).
/// Bit-identical to [`matmul_packed`] on the same inputs.
pub fn matmul_unpacked(
    a: &[f32],
    m: usize,
    w: &NBitsWeight<'_>,
    bias: Option<&[f32]>,
    out: &mut [f32],
    par: &dyn Par,
) -> Result<NBitsRoute, String> {
    matmul_unpacked_with(Kernels::active(), a, m, w, bias, out, par)
}

/// [`matmul_unpacked`] with an explicit kernel set.
pub fn matmul_unpacked_with(
    kernels: &Kernels,
    a: &[f32],
    m: usize,
    w: &NBitsWeight<'_>,
    bias: Option<&[f32]>,
    out: &mut [f32],
    par: &dyn Par,
) -> Result<NBitsRoute, String> {
    w.check_sizes(None).unwrap_or_else(|e| panic!("{e}"));
    driver::run(kernels, a, m, driver::Source::Unpacked(*w), bias, out, par)
}
