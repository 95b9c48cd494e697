//! Splitting a MatMulNBits call into chunks over `Par`, for packed and unpacked weights.
//!
//! Column groups are taken in ranges (`par::StreamSplit`). M = 1: `Par::chunks`
//! (`Dispatch::Decode`) over the chunks of `StreamSplit::decode` (segmented: one chunk per lane,
//! each streaming its own contiguous segment of groups front to back and then claiming what is
//! left of the others from their far ends, `runtime::segments`, so each lane reads one long
//! run and the lanes still finish together; `StreamSplit::run` hands a chunk its runs); A is
//! prepared once by the calling thread and lent to the lanes, or, for a long row, by every lane
//! for itself (`decode_a`, `PER_LANE_A_MIN_K`).
//! M > 1 (packed):
//! `Par::chunks` (`Dispatch::Task`) over (row tile of [`task_rows`] rows) x (range of
//! `StreamSplit::new`: long runs, a few per lane, a chunk count that is a multiple of the
//! lanes, lengths within one group of each other). Unpacked: chunks are ranges over all rows, each packing one
//! group at a time into chunk-local scratch.
//! Rows are always blocked `MR` at a time from row 0, so every output element sees the same
//! kernel call shape on both paths.
//! On the AMX route (`Kernels::gemm`) packed row tiles are `AMX_ROW_TILE` rows, and each group
//! runs the AMX GEMM over whole 32-row tiles from the tile's first row (a last tile under
//! `amx_tail_min` rows goes to the tile kernel); the AMX GEMM is bit-identical to the VNNI tile,
//! so the split never changes an answer.

use super::dequant;
use super::dispatch::{amx_scratch_len, GemmFn, Kernels, TileFn, AMX_ROWS};
use super::nonfinite::{self, RowFix};
use super::pack::{
    absent_zp, group_cols, group_record_bytes, group_zp_bytes, groups, pack_group, record_bytes,
    GroupView, PackedNBits, LANES, NR,
};
use super::params::{NBitsParams, NBitsWeight};
use super::prepare_a::{with_prepared, PreparedA};
use super::route::NBitsRoute;
use super::row1_tuner::TUNER;
use super::MR;
use crate::kernels::disjoint::DisjointOut;
use crate::kernels::simd::Level;
use crate::memory::scratch::{try_with_scratch_i32, try_with_scratch_u8, Shortfall};
use crate::runtime::par::{Dispatch, Par, SegmentClaims, StreamSplit};

/// Column groups of one weight a pair call computes before it turns to the other's
/// (`run_pair`): long enough runs of consecutive bytes per weight.
const PAIR_RUN_GROUPS: usize = 8;

/// The granule of an M > 1 task's rows (see [`task_rows`]).
const ROW_TILE: usize = 16;
/// Rows a pair task computes at a time (its three result buffers, 8 KiB each on its stack; see
/// [`run_pair`]).
const PAIR_ROWS: usize = 64;
/// Bytes of prepared A the rows of one M > 1 task may span: the task reads them once per
/// column group, so they should stay in the core's L2 (2 MB on the development VM's Zen 4)
/// beside the group's weights.
const TASK_A_BYTES: usize = 512 * 1024;
/// The most rows one M > 1 task covers.
const TASK_ROWS_MAX: usize = 256;

/// Rows per M > 1 task (the tile path): as many as keep the task's prepared A within
/// [`TASK_A_BYTES`], a multiple of [`ROW_TILE`] from `ROW_TILE` to [`TASK_ROWS_MAX`]. A task
/// streams each of its column groups' weights once for all its rows, so more rows mean fewer
/// passes over the weights (a 512-token prompt passed over Qwen2-0.5B's 278 MB of weights 32
/// times at 16 rows a task, 2 at 256; with more lanes on the same memory those passes would
/// bound the call). Qwen2-0.5B prefill at 512 tokens, 2 lanes, old / new per-round medians
/// against 16 rows a task: fixed 32 / 64 / 128 / 256 rows (the pair step over a whole task)
/// 1.012 / 1.018 / 1.026 and 1.042 / 1.034 (runs of 8 rounds); this rule with [`PAIR_ROWS`] 1.024 and 1.019 (10 and 16 rounds), at
/// 64 tokens 1.016 (a noisy host: single rounds 0.93-1.08).
fn task_rows(p: &NBitsParams) -> usize {
    // A prepared row: `kp` int8 codes, or `kp` f32 values (`PreparedA`).
    let kp = p.k_blocks().saturating_mul(p.block_size);
    let a_row = if p.int8_compute() {
        kp
    } else {
        kp.saturating_mul(4)
    };
    let fit = TASK_A_BYTES / a_row.max(1);
    (fit / ROW_TILE * ROW_TILE).clamp(ROW_TILE, TASK_ROWS_MAX)
}
/// Rows per M > 1 task tile on the AMX path (a multiple of `AMX_ROWS`): each task unpacks a
/// group's weights once for this many rows.
const AMX_ROW_TILE: usize = 256;

#[derive(Clone, Copy)]
pub(crate) enum Source<'a> {
    Packed(&'a PackedNBits),
    Unpacked(NBitsWeight<'a>),
}

impl Source<'_> {
    pub(crate) fn params(&self) -> NBitsParams {
        match self {
            Source::Packed(pk) => pk.params,
            Source::Unpacked(w) => *w.p,
        }
    }
}

/// The fast path over every row of A (`m` rows of `p.k`, bias included), then the rows whose
/// answers differ from its own given ORT's (`nonfinite`): NaN or infinities in A, and finite
/// rows whose output overflowed.
pub(crate) fn run(
    kernels: &Kernels,
    a: &[f32],
    m: usize,
    src: Source,
    bias: Option<&[f32]>,
    out: &mut [f32],
    par: &dyn Par,
) -> Result<NBitsRoute, String> {
    let p = src.params();
    if !matches!(p.bits, 4 | 8) {
        return Err(format!(
            "MatMulNBits: the kernels were handed a {}-bit weight",
            p.bits
        ));
    }
    let name = run_fast(kernels, a, m, src, bias, out, par)?;
    // The scans of A take the table's `abs_max` (the same bits at every level).
    let lv = Level::require(kernels.isa)?;
    let abs_max = |row: &[f32]| (kernels.abs_max)(lv, row);
    // Rows with NaN / infinities: ORT's answers (see `nonfinite`).
    let fixes = match nonfinite::scan(a, m, &p, &abs_max) {
        Ok(f) => f,
        // Only the list of rows failed to allocate: answer every row that needs it NaN.
        Err(_) => (0..m)
            .filter(|&r| a[r * p.k..(r + 1) * p.k].iter().any(|x| !x.is_finite()))
            .map(|r| (r, RowFix::AllNan))
            .collect(),
    };
    // The fast path over other rows, with or without the bias (the fix-ups' products).
    let gemm = |rows: &[f32], mm: usize, with_bias: bool, o: &mut [f32]| {
        run_fast(kernels, rows, mm, src, bias.filter(|_| with_bias), o, par).map(|_| ())
    };
    for (r, fix) in fixes {
        let y = &mut out[r * p.n..(r + 1) * p.n];
        let all_nan = match fix {
            RowFix::AllNan => true,
            RowFix::Infinities => {
                nonfinite::infinite_row(&a[r * p.k..(r + 1) * p.k], &p, y, &gemm).is_err()
            }
        };
        if all_nan {
            y.fill(f32::NAN);
        }
    }
    let scale_max = match &src {
        Source::Packed(pk) => Some(pk.scale_max),
        // Rarely used (packing declined): keep the full output scan.
        Source::Unpacked(_) => None,
    };
    nonfinite::rescale_overflowed_rows(a, m, &p, scale_max, bias, out, &gemm, &abs_max)?;
    Ok(name)
}

/// Whether `m` rows over weights of `p` take a route with no pair path (the AMX GEMM, the f32
/// levels' dequantizing GEMM): a pair call then runs as two calls.
pub(crate) fn no_pair_path(kernels: &Kernels, p: &NBitsParams, m: usize) -> bool {
    kernels.gemm(p.accuracy_level, m).is_some() || kernels.dequant(p.accuracy_level, m)
}

/// The fast path over every row (non-finite rows included, fixed up by [`run`]).
fn run_fast(
    kernels: &Kernels,
    a: &[f32],
    m: usize,
    src: Source,
    bias: Option<&[f32]>,
    out: &mut [f32],
    par: &dyn Par,
) -> Result<NBitsRoute, String> {
    let p = src.params();
    let name = kernels.route(p.accuracy_level, m);
    if m == 0 {
        return Ok(name);
    }
    assert!(
        a.len() >= m * p.k,
        "MatMulNBits: A has {} elements, expected {} (M={m} x K={})",
        a.len(),
        m * p.k,
        p.k
    );
    assert!(
        out.len() >= m * p.n,
        "MatMulNBits: output has {} elements, expected {}",
        out.len(),
        m * p.n
    );
    if let Some(b) = bias {
        assert_eq!(
            b.len(),
            p.n,
            "MatMulNBits: bias has {} elements, expected N={}",
            b.len(),
            p.n
        );
    }
    // The kernels' level, minted once for the call and handed to every tile call.
    let lv = Level::require(kernels.isa)?;
    if kernels.dequant(p.accuracy_level, m) {
        let kernel = kernels.dequant;
        return match src {
            Source::Packed(pk) => {
                let panels = dequant::PackedPanels { kernel, lv, pk };
                dequant::run(kernels, a, m, &p, &panels, bias, out, par)
            }
            Source::Unpacked(w) => {
                let panels = dequant::UnpackedPanels { w };
                dequant::run(kernels, a, m, &p, &panels, bias, out, par)
            }
        }
        .map(|()| name);
    }
    if let (1, Source::Packed(pk)) = (m, src) {
        let call = |from: DecodeA<'_>| decode_packed(kernels, lv, a, pk, bias, out, par, from);
        return decode_a(kernels, a, &p, call).map(|()| name);
    }
    // A is prepared once per call into this thread's parked buffers (no allocation when warm).
    with_prepared(kernels, a, m, &p, |prep| {
        let g_count = groups(&p);
        let split = if m == 1 {
            StreamSplit::decode(g_count, group_record_bytes(&p), par.lanes())
        } else {
            StreamSplit::new(g_count, group_record_bytes(&p), par.lanes())
        };
        let col_chunks = split.chunks();
        // The segmented split's claim counters for this call (unused by the other splits).
        let claims = SegmentClaims::new();
        let dst = DisjointOut::new(out);
        let ctx = Ctx::new(kernels, lv, prep, &p, bias, &dst, m);
        let gemm = ctx.gemm;
        match src {
            Source::Packed(pk) => {
                let row_tile = if gemm.is_some() {
                    AMX_ROW_TILE
                } else {
                    task_rows(&p)
                };
                // M = 1 went to `decode_packed` above.
                let row_tiles = m.div_ceil(row_tile);
                let body = |ci: usize| {
                    let (rt, cc) = (ci / col_chunks, ci % col_chunks);
                    let rows = rt * row_tile..((rt + 1) * row_tile).min(m);
                    // One result tile per chunk (not per group).
                    let mut res = [[0f32; NR]; MR];
                    split.run(cc, &claims, &mut |run| {
                        for g in run {
                            ctx.group(&pk.group(g), g, rows.clone(), &mut res);
                        }
                    });
                };
                par.chunks(Dispatch::Task, row_tiles * col_chunks, &body);
            }
            Source::Unpacked(weight) => {
                let (p, zero_points) = (weight.p, weight.zero_points);
                let kbs = p.k_blocks();
                let (rb, zb) = (
                    group_record_bytes(p),
                    zero_points.map_or(0, |_| group_zp_bytes(p)),
                );
                // Each chunk packs one group at a time into its lane's parked scratch (records and
                // zero points in one byte buffer, sized for f32 scales, the larger kind): no
                // allocation once the lane's buffer is parked. `pack_group` writes every byte the
                // group reads, so stale contents are fine.
                let short = Shortfall::default();
                let body = |cc: usize| {
                    let mut res = [[0f32; NR]; MR];
                    let done = try_with_scratch_u8(rb.saturating_add(zb), |bytes| {
                        let (r, z) = bytes.split_at_mut(rb);
                        let mut z = zero_points.map(|_| z);
                        split.run(cc, &claims, &mut |run| {
                            for g in run {
                                let half = pack_group(&weight, g, r, z.as_deref_mut());
                                let view = GroupView {
                                    rec: &r[..kbs * record_bytes(p.block_size, half)],
                                    f16: half,
                                    zps: z.as_deref(),
                                    absent_zp: absent_zp(p),
                                    k_blocks: kbs,
                                    block_size: p.block_size,
                                };
                                ctx.group(&view, g, 0..m, &mut res);
                            }
                        });
                    });
                    short.note(done, rb.saturating_add(zb));
                };
                if m == 1 {
                    par.chunks(Dispatch::Decode, col_chunks, &body);
                } else {
                    par.chunks(Dispatch::Task, col_chunks, &body);
                }
                short.check()?;
            }
        }
        Ok(name)
    })?
}

/// Where the lanes of a decode call (M = 1) find A prepared.
#[derive(Clone, Copy)]
enum DecodeA<'p> {
    /// Prepared once by the calling thread, lent to every lane.
    Lent(&'p PreparedA),
    /// Each lane prepares its own (`with_prepared`: its parked buffers) before its first group.
    PerLane,
}

impl DecodeA<'_> {
    /// Runs `f` on this lane's prepared A; `Err` when the lane could not allocate its own.
    fn with(
        self,
        kernels: &Kernels,
        a: &[f32],
        p: &NBitsParams,
        f: impl FnOnce(&PreparedA),
    ) -> Result<(), String> {
        match self {
            DecodeA::Lent(prep) => {
                // The calling thread has just written it: fetch the row at once rather than
                // meeting its lines one by one.
                prep.prefetch_row0(p.int8_compute());
                f(prep);
                Ok(())
            }
            DecodeA::PerLane => with_prepared(kernels, a, 1, p, f),
        }
    }
}

/// Runs a decode call (`call`) with A prepared where [`per_lane_a`] says: on every lane for a
/// long row, else once here and lent. Preparing A on the calling thread makes the call a chain:
/// the caller quantises A (reading the part of it other lanes produced, and writing lines other
/// lanes read the call before, each write waiting for their copies to go), then publishes the
/// job, then each lane fetches the prepared row from the caller's cache; with the vCPUs apart
/// each link is a cross-die transfer. Per lane, the preparation runs while the others wake and
/// writes lines no other lane reads, at the price of every lane reading the f32 row and
/// repeating the work: worth it for a long row only.
fn decode_a(
    kernels: &Kernels,
    a: &[f32],
    p: &NBitsParams,
    call: impl FnOnce(DecodeA<'_>) -> Result<(), String>,
) -> Result<(), String> {
    if per_lane_a(p) {
        call(DecodeA::PerLane)
    } else {
        with_prepared(kernels, a, 1, p, |prep| call(DecodeA::Lent(prep)))?
    }
}

/// A decode call (M = 1) over packed weights: `Par::chunks` (`Dispatch::Decode`) over the
/// segmented split, A from `from`.
#[allow(clippy::too_many_arguments)]
fn decode_packed(
    kernels: &Kernels,
    lv: Level,
    a: &[f32],
    pk: &PackedNBits,
    bias: Option<&[f32]>,
    out: &mut [f32],
    par: &dyn Par,
    from: DecodeA<'_>,
) -> Result<(), String> {
    let p = pk.params;
    let split = StreamSplit::decode(groups(&p), group_record_bytes(&p), par.lanes());
    let claims = SegmentClaims::new();
    let dst = DisjointOut::new(out);
    let failed = LaneError::default();
    let body = |cc: usize| {
        failed.note(from.with(kernels, a, &p, |prep| {
            let ctx = Ctx::new(kernels, lv, prep, &p, bias, &dst, 1);
            // One result tile per chunk (not per group: a decode call has N / 32 groups).
            let mut res = [[0f32; NR]; MR];
            split.run(cc, &claims, &mut |run| {
                for g in run {
                    ctx.group(&pk.group(g), g, 0..1, &mut res);
                }
            });
        }));
    };
    timed_decode(pk.bytes(), || {
        par.chunks(Dispatch::Decode, split.chunks(), &body)
    });
    failed.result()
}

/// Runs a decode call's dispatch (`dispatch`, over `bytes` weight bytes), timed for the one-row
/// prefetch distance's trial when it is a trial call (`row1_tuner`).
fn timed_decode(bytes: usize, dispatch: impl FnOnce()) {
    let trial = TUNER.begin(bytes);
    dispatch();
    if let Some(t) = trial {
        TUNER.end(t);
    }
}

/// A pair call over one row (decode): the split's unit is the two groups' weight bytes, and
/// each run of groups a chunk takes is done [`PAIR_RUN_GROUPS`] at a time (see [`run_pair`]);
/// A from `from`.
#[allow(clippy::too_many_arguments)]
fn decode_pair(
    kernels: &Kernels,
    lv: Level,
    a: &[f32],
    (first, second): (&PackedNBits, &PackedNBits),
    epi: &super::PairEpilogue<'_>,
    out: &mut [f32],
    par: &dyn Par,
    from: DecodeA<'_>,
) -> Result<(), String> {
    let p = first.params;
    let (tile, gc) = (tile_for(kernels, &p), group_cols(&p));
    let unit = group_record_bytes(&p).saturating_mul(2);
    let split = StreamSplit::decode(groups(&p), unit, par.lanes());
    let claims = SegmentClaims::new();
    let dst = DisjointOut::new(out);
    let failed = LaneError::default();
    let body = |ci: usize| {
        failed.note(from.with(kernels, a, &p, |prep| {
            let mut res = [[0f32; NR]; MR];
            let mut v1 = [0f32; PAIR_RUN_GROUPS * NR];
            let mut v2 = [0f32; PAIR_RUN_GROUPS * NR];
            let mut y = [0f32; PAIR_RUN_GROUPS * NR];
            split.run(ci, &claims, &mut |run| {
                // Up to PAIR_RUN_GROUPS groups of the first weight, then the same of the
                // second: each lane streams runs of consecutive bytes of one weight at a time.
                let mut g0 = run.start;
                while g0 < run.end {
                    let g1 = (g0 + PAIR_RUN_GROUPS).min(run.end);
                    for (w, v) in [(first, &mut v1), (second, &mut v2)] {
                        for g in g0..g1 {
                            tile(lv, &w.group(g), prep, 0, 1, &mut res);
                            let at = (g - g0) * gc;
                            group_columns(&p, &res[0], &mut v[at..at + gc]);
                        }
                    }
                    let cols = g0 * gc..(g1 * gc).min(p.n);
                    let w = cols.len();
                    epi(&v1[..w], &v2[..w], &mut y[..w]);
                    // SAFETY: the columns of groups g0..g1 belong to this chunk alone (the
                    // split's runs partition the groups), so no other writer touches them.
                    unsafe { dst.write(cols.start, &y[..w]) };
                    g0 = g1;
                }
            });
        }));
    };
    timed_decode(first.bytes().saturating_add(second.bytes()), || {
        par.chunks(Dispatch::Decode, split.chunks(), &body)
    });
    failed.result()
}

/// Shortest K whose decode calls (M = 1, packed) have every lane prepare A for itself
/// ([`decode_a`]); shorter rows are prepared once by the calling thread and lent to the lanes.
///
/// Qwen2-0.5B decode (`rcpu-bench llm`, 2 lanes, old / new per round, four runs each, the vCPUs
/// near / apart): every call per lane 1.013 / 1.027; only the down projection's (K = 4864)
/// 1.010 / 1.035; only the K = 896 calls' 0.999 / 1.027; down only against every call 1.006 /
/// 1.006. A short row costs little to prepare and hand over (896 int8 codes, 14 cache lines),
/// while each lane preparing its own reads the f32 row instead (4x the lines) and repeats the
/// work; a long one is where the hand-over chain (see [`decode_a`]) costs microseconds.
pub(crate) const PER_LANE_A_MIN_K: usize = 4096;

/// Whether a decode call over weights of `p` prepares A on every lane ([`PER_LANE_A_MIN_K`]).
fn per_lane_a(p: &NBitsParams) -> bool {
    p.k >= PER_LANE_A_MIN_K
}

/// The first error a lane met preparing its A (a decode call's lanes prepare A each).
#[derive(Default)]
struct LaneError(std::sync::OnceLock<String>);

impl LaneError {
    fn note(&self, r: Result<(), String>) {
        if let Err(e) = r {
            // A second error is the same shortfall seen by another lane: the first one says it.
            let _ = self.0.set(e);
        }
    }

    fn result(self) -> Result<(), String> {
        self.0.into_inner().map_or(Ok(()), Err)
    }
}

struct Ctx<'a, 'o> {
    tile: TileFn,
    /// The whole-group GEMM (AMX) when this call takes it.
    gemm: Option<GemmFn>,
    /// A last partial AMX row tile shorter than this goes to `tile`.
    amx_tail_min: usize,
    lv: Level,
    prep: &'a PreparedA,
    p: &'a NBitsParams,
    bias: Option<&'a [f32]>,
    dst: &'a DisjointOut<'o>,
    m: usize,
}

/// The tile kernel of `kernels` for weights of `p` (int8 or fp32 compute; 8-bit groups have
/// an int8 tile of their own, `bits8`).
fn tile_for(kernels: &Kernels, p: &NBitsParams) -> TileFn {
    if p.int8_compute() && p.bits == 8 {
        kernels.i8_tile8
    } else if p.int8_compute() {
        kernels.i8_tile
    } else {
        kernels.f32_tile
    }
}

impl<'a, 'o> Ctx<'a, 'o> {
    /// The context of an `m`-row call of `kernels` over weights of `p`, A prepared in `prep`.
    fn new(
        kernels: &Kernels,
        lv: Level,
        prep: &'a PreparedA,
        p: &'a NBitsParams,
        bias: Option<&'a [f32]>,
        dst: &'a DisjointOut<'o>,
        m: usize,
    ) -> Self {
        Ctx {
            tile: tile_for(kernels, p),
            gemm: kernels.gemm(p.accuracy_level, m),
            amx_tail_min: kernels.amx_tail_min,
            lv,
            prep,
            p,
            bias,
            dst,
            m,
        }
    }
}

impl Ctx<'_, '_> {
    /// Computes column group `g` for `rows` (which start at a multiple of `MR`, and of
    /// `AMX_ROWS` on the AMX path) and writes it; `res` is the chunk's result tile (the tile
    /// kernel writes every row it is asked for, so what it held before does not matter).
    fn group(
        &self,
        view: &GroupView,
        g: usize,
        rows: std::ops::Range<usize>,
        res: &mut [[f32; NR]; MR],
    ) {
        debug_assert!(rows.start.is_multiple_of(MR) && rows.end <= self.m);
        let gc = group_cols(self.p);
        let cols = g * gc..((g + 1) * gc).min(self.p.n);
        let mut r0 = rows.start;
        if let Some(gemm) = self.gemm {
            // Whole AMX row tiles, and a last partial one unless it is short (then the tile
            // kernel below takes it).
            let tail = rows.len() % AMX_ROWS;
            let end = if tail >= self.amx_tail_min {
                rows.end
            } else {
                rows.end - tail
            };
            let kp = view.k_blocks * view.block_size;
            let done = (end > r0)
                .then(|| {
                    try_with_scratch_i32(amx_scratch_len(kp), |panel| {
                        let mut emit =
                            |r: usize, res: &[f32; NR]| self.write_row(r, cols.clone(), res);
                        gemm(view, self.prep, r0..end, panel, &mut emit)
                    })
                })
                .flatten();
            // Without a panel the tile kernel below gives the same (bit-identical) answers.
            if done.is_some() {
                r0 = end;
            }
        }
        while r0 < rows.end {
            let nr = (rows.end - r0).min(MR);
            (self.tile)(self.lv, view, self.prep, r0, nr, res);
            for (ri, row) in res.iter().enumerate().take(nr) {
                self.write_row(r0 + ri, cols.clone(), row);
            }
            r0 += nr;
        }
    }

    /// Writes `row` (+ bias) to output row `r`, columns `cols` (of one group, `<= NR`). An
    /// 8-bit group's row holds its columns' two halves (`bits8`): column `i` is
    /// `row[16 + i] + row[i]`, high half first.
    fn write_row(&self, r: usize, cols: std::ops::Range<usize>, row: &[f32; NR]) {
        let at = r * self.p.n + cols.start;
        let mut sums = [0f32; LANES];
        let row: &[f32] = if self.p.bits == 8 {
            group_columns(self.p, row, &mut sums);
            &sums
        } else {
            row
        };
        let Some(bias) = self.bias else {
            // SAFETY: (row r, columns of group g) belongs to exactly one chunk: chunks
            // partition (row tile x group range), so no other writer touches this range.
            unsafe { self.dst.write(at, &row[..cols.len()]) };
            return;
        };
        let mut vals = [0f32; NR];
        let v = &mut vals[..cols.len()];
        for ((v, &x), &b) in v.iter_mut().zip(row).zip(&bias[cols]) {
            *v = x + b;
        }
        // SAFETY: as above.
        unsafe { self.dst.write(at, v) };
    }
}

/// A tile's result row for one group (`row`, [`NR`] values) as the group's real columns into
/// `out` ([`group_cols`] values): the row itself for 4-bit groups; for 8-bit ones (`bits8`)
/// column `i` is its high half plus its low half, `row[16 + i] + row[i]`.
#[inline]
fn group_columns(p: &NBitsParams, row: &[f32; NR], out: &mut [f32]) {
    if p.bits == 8 {
        for (i, o) in out.iter_mut().enumerate().take(LANES) {
            *o = row[LANES + i] + row[i];
        }
    } else {
        out.copy_from_slice(&row[..out.len()]);
    }
}

/// Whether rows `a` (`m` rows of K) can take the pair path: every value finite and small
/// enough that no intermediate of either product can overflow (`nonfinite::cannot_overflow`,
/// which also fails on non-finite values and NaN scales).
pub(crate) fn pair_rows_fit(
    kernels: &Kernels,
    lv: Level,
    a: &[f32],
    m: usize,
    first: &PackedNBits,
    second: &PackedNBits,
) -> bool {
    let k = first.params.k;
    let smax = first.scale_max.max(second.scale_max);
    m >= 1
        && a.len() == m.saturating_mul(k)
        && a.chunks_exact(k.max(1))
            .all(|row| nonfinite::cannot_overflow((kernels.abs_max)(lv, row), smax, k))
}

/// `out = epi(A W1, A W2)` for `m` rows of A over two packed weights of the same shape, in one
/// dispatch with one prepared A, so neither product is ever written out.
///
/// One row (decode): the split's unit is the two groups' weight bytes, and each run of groups a
/// chunk takes is done [`PAIR_RUN_GROUPS`] at a time, those groups of the first weight, then
/// the same of the second, then `epi` over them. Alternating the weights group by group instead
/// measured equal on the MLP shapes alone but 8% slower per Qwen2-0.5B decode token (old
/// faster in 5 of 6 interleaved rounds); runs of 8 groups (115 KB of each weight at K=896) were
/// not slower than two separate calls alone (p10 158.9 against 158.0 us a gate + up pair
/// streamed from DRAM, 40 copies, 30 interleaved rounds).
///
/// More rows (prefill): tasks of [`task_rows`] rows x a chunk of groups, as [`run_fast`] splits
/// an M > 1 call; per group, [`PAIR_ROWS`] of its rows at a time, the task computes the first
/// weight's columns for those rows, then the second's, then `epi` over them (one call over
/// those rows for a whole group, so `epi` must be elementwise). The AMX GEMM (whole groups
/// over 256-row tiles) has no pair path: `Ok(None)` there.
///
/// Every group runs the same tile calls over the same rows as [`run_fast`], so `epi`'s inputs
/// are bit-identical to the two separate calls' outputs. `Ok(None)` when A must take the
/// separate calls instead: a non-finite value, or one large enough that an intermediate could
/// overflow (those rows get ORT's answers from [`run`]'s fix-ups, which need the plain
/// product), or the AMX route.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_pair(
    kernels: &Kernels,
    a: &[f32],
    m: usize,
    first: &PackedNBits,
    second: &PackedNBits,
    epi: &super::PairEpilogue<'_>,
    out: &mut [f32],
    par: &dyn Par,
) -> Result<Option<NBitsRoute>, String> {
    let p = first.params;
    if !super::pair_compatible(first, second) {
        return Err(format!(
            "MatMulNBits pair: the two weights differ (K={} N={} block {} level {} bits {} \
             against K={} N={} block {} level {} bits {})",
            p.k,
            p.n,
            p.block_size,
            p.accuracy_level,
            p.bits,
            second.params.k,
            second.params.n,
            second.params.block_size,
            second.params.accuracy_level,
            second.params.bits
        ));
    }
    assert!(
        Some(a.len()) == m.checked_mul(p.k) && Some(out.len()) == m.checked_mul(p.n),
        "MatMulNBits pair: A has {} elements (M={m} x K={}), output {} (N={})",
        a.len(),
        p.k,
        out.len(),
        p.n
    );
    let lv = Level::require(kernels.isa)?;
    if no_pair_path(kernels, &p, m) || !pair_rows_fit(kernels, lv, a, m, first, second) {
        return Ok(None);
    }
    let name = kernels.route(p.accuracy_level, m).paired();
    if m == 1 {
        let call =
            |from: DecodeA<'_>| decode_pair(kernels, lv, a, (first, second), epi, out, par, from);
        return decode_a(kernels, a, &p, call).map(|()| Some(name));
    }
    let (tile, gc) = (tile_for(kernels, &p), group_cols(&p));
    with_prepared(kernels, a, m, &p, |prep| {
        let g_count = groups(&p);
        let unit = group_record_bytes(&p).saturating_mul(2);
        let claims = SegmentClaims::new();
        let dst = DisjointOut::new(out);
        // M = 1 went to `decode_pair` above.
        let split = StreamSplit::new(g_count, unit, par.lanes());
        let col_chunks = split.chunks();
        let task = task_rows(&p);
        let body = |ci: usize| {
            let (rt, cc) = (ci / col_chunks, ci % col_chunks);
            let mine = rt * task..((rt + 1) * task).min(m);
            let mut res = [[0f32; NR]; MR];
            let mut v1 = [[0f32; NR]; PAIR_ROWS];
            let mut v2 = [[0f32; NR]; PAIR_ROWS];
            let mut y = [[0f32; NR]; PAIR_ROWS];
            split.run(cc, &claims, &mut |run| {
                // Per group, its task rows [`PAIR_ROWS`] at a time: both weights' groups stay
                // in cache over all of them.
                for (g, r) in run.flat_map(|g| mine.clone().step_by(PAIR_ROWS).map(move |r| (g, r)))
                {
                    let rows = r..(r + PAIR_ROWS).min(mine.end);
                    for (w, v) in [(first, &mut v1), (second, &mut v2)] {
                        let view = w.group(g);
                        // The row blocks `Ctx::group` walks for these rows.
                        let mut r0 = rows.start;
                        while r0 < rows.end {
                            let nr = (rows.end - r0).min(MR);
                            tile(lv, &view, prep, r0, nr, &mut res);
                            let at = r0 - rows.start;
                            for (vi, ri) in v[at..at + nr].iter_mut().zip(&res[..nr]) {
                                group_columns(&p, ri, &mut vi[..gc]);
                            }
                            r0 += nr;
                        }
                    }
                    let cols = g * gc..((g + 1) * gc).min(p.n);
                    let w = cols.len();
                    let nr = rows.len();
                    if w == NR {
                        // A whole group: the tile's rows are contiguous, one epilogue call
                        // (elementwise, so the same values as row by row).
                        epi(
                            v1[..nr].as_flattened(),
                            v2[..nr].as_flattened(),
                            y[..nr].as_flattened_mut(),
                        );
                    } else {
                        for i in 0..nr {
                            epi(&v1[i][..w], &v2[i][..w], &mut y[i][..w]);
                        }
                    }
                    for (i, r) in rows.clone().enumerate() {
                        // SAFETY: (row r, columns of group g) belongs to exactly one chunk:
                        // chunks partition (row tile x group range).
                        unsafe { dst.write(r * p.n + cols.start, &y[i][..w]) };
                    }
                }
            });
        };
        par.chunks(Dispatch::Task, m.div_ceil(task) * col_chunks, &body);
        Some(name)
    })
}

/// Several one-row products in one dispatch: `out[j] = A[row_j] W_j` (no bias) for packed
/// weights `W_j` of equal params, A's `a_rows` rows (K values each) prepared once on the
/// calling thread. The split runs over the groups of all the weights in turn, as if they were
/// one weight of `jobs x N` columns: each lane streams one long run (a segment may cross from
/// one weight into the next), and the call pays one dispatch and one join instead of one per
/// weight. Each group is the same tile call over the same prepared row as in a one-weight
/// decode call, so each product's values are bit-identical to [`run`]'s for that row.
/// `Ok(None)` when these rows must take separate calls (a value non-finite or large enough to
/// overflow: [`run`] answers those as ORT does).
pub(crate) fn run_rows(
    kernels: &Kernels,
    a: &[f32],
    a_rows: usize,
    jobs: &[(usize, &PackedNBits)],
    out: &mut [f32],
    par: &dyn Par,
) -> Result<Option<NBitsRoute>, String> {
    let Some(&(_, first)) = jobs.first() else {
        return Ok(None);
    };
    let p = first.params;
    if let Some((_, w)) = jobs.iter().find(|(_, w)| w.params != p) {
        return Err(format!(
            "MatMulNBits rows: the weights differ (K={} N={} against K={} N={})",
            p.k, p.n, w.params.k, w.params.n
        ));
    }
    assert!(
        Some(a.len()) == a_rows.checked_mul(p.k)
            && Some(out.len()) == jobs.len().checked_mul(p.n)
            && jobs.iter().all(|&(r, _)| r < a_rows),
        "MatMulNBits rows: A has {} elements (rows {a_rows} x K={}), output {} ({} jobs x N={})",
        a.len(),
        p.k,
        out.len(),
        jobs.len(),
        p.n
    );
    let lv = Level::require(kernels.isa)?;
    let smax = jobs.iter().map(|(_, w)| w.scale_max).fold(0f32, f32::max);
    let fits = a
        .chunks_exact(p.k.max(1))
        .all(|row| nonfinite::cannot_overflow((kernels.abs_max)(lv, row), smax, p.k));
    if !fits {
        return Ok(None);
    }
    let name = kernels.route(p.accuracy_level, 1);
    let (tile, gc, g_count) = (tile_for(kernels, &p), group_cols(&p), groups(&p));
    with_prepared(kernels, a, a_rows, &p, |prep| {
        let total = g_count * jobs.len();
        let split = StreamSplit::decode(total, group_record_bytes(&p), par.lanes());
        let claims = SegmentClaims::new();
        let dst = DisjointOut::new(out);
        let body = |cc: usize| {
            let mut res = [[0f32; NR]; MR];
            let mut v = [0f32; NR];
            split.run(cc, &claims, &mut |run| {
                for g in run {
                    let (j, lg) = (g / g_count, g % g_count);
                    let (row, w) = jobs[j];
                    tile(lv, &w.group(lg), prep, row, 1, &mut res);
                    let cols = lg * gc..((lg + 1) * gc).min(p.n);
                    let n = cols.len();
                    group_columns(&p, &res[0], &mut v[..n]);
                    // SAFETY: group `g` belongs to this chunk alone (the split's runs partition
                    // the groups of all jobs), and its columns of job `j` are written by no one
                    // else.
                    unsafe { dst.write(j * p.n + cols.start, &v[..n]) };
                }
            });
        };
        timed_decode(jobs.iter().map(|(_, w)| w.bytes()).sum(), || {
            par.chunks(Dispatch::Decode, split.chunks(), &body)
        });
        Some(name)
    })
}
