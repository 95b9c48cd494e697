//! Attention family (f32): the rotary embedding (`com.microsoft.RotaryEmbedding`, and the
//! `do_rotary` step of GroupQueryAttention) and grouped-query attention over a BNSH KV cache
//! (`com.microsoft.GroupQueryAttention`, decode and prefill).
//!
//! Per ISA one table: scaled QK scores (a dot product per key row; `scores` for key rows that
//! come from memory and `scores_cached`, the same bits in another order, for rows the decode
//! step hinted into L2; `scores_pair`, two query rows' `scores_cached` at once), weighted row sums (scores along transposed keys; probabilities times V
//! rows), the same weighted sums for a group of coefficient rows over one matrix
//! (`rows_group`), the rotary row; the softmax between them is the softmax family's row kernel
//! of the same ISA.
//!
//! Work is split over the lanes by output rows: (batch, kv head) for the KV cache update and
//! (batch, query position, query head) for the attention itself; a decode step (one new token)
//! over a short cache, or one whose (batch, kv head) units cover the lanes (`gqa::decode_fused`),
//! runs both in one dispatch over those units instead (`gqa_decode`): a lane copies a unit's past
//! rows into present (with non-temporal stores from `STREAM_COPY_MIN_BYTES` on) and then attends
//! the unit's query heads, reading the past rows once from memory.
//!
//! A prefill (several query positions) takes the grouped path: the query heads of one GQA group
//! at one position read the same keys and values with the same causal length, and their output
//! rows are contiguous, so the unit of work is (batch, position, kv head). Each key (transposed,
//! `[H, len]`) and value vector a lane loads then feeds one FMA per query head of the group,
//! with the group's accumulators held in registers (`rows_group`: on AVX-512 up to 7 rows of
//! four vectors, `rows_avx512`; on AVX2 4 rows of two; larger groups in blocks), instead of
//! every query head streaming the same key and value block from L2 again. `rows_group` keeps
//! every output element's FMA sequence (from zero, along the reduction index, then times the
//! scale), so the grouped path is bit-identical to the per-query-head one
//! (`gqa::Prefill::PerRow`, kept for tests and timing). The keys are transposed once per call,
//! over the lanes, and the units are claimed latest positions first (they attend to the most
//! keys).
//!
//! Sliding-window layers (`local_window_size`) attend to a query's latest `W` keys, a softcap
//! caps the scaled scores; both live in the same paths (`gqa::GqaShape::key_range`). A windowed
//! cache (`sliding_window_cache = 1`: buffers of `C >= W` rows holding the latest positions) is
//! planned and compacted by `gqa_window`, which then runs the same attention over the cache rows.

pub mod gqa;
mod gqa_decode;
pub mod gqa_plan;
pub mod gqa_quant;
pub mod gqa_window;
#[cfg(target_arch = "x86_64")]
pub mod rotary;
#[cfg(target_arch = "x86_64")]
mod rows_avx512;
mod scalar;
#[cfg(target_arch = "x86_64")]
mod x86;

use parking_lot::Mutex;
use std::sync::LazyLock;

use crate::kernels::isa::Isa;
use crate::runtime::par::{Dispatch, Par};

/// `out[j] = scale * dot(q, k_row_j)` for `j < out.len()`, key rows of `q.len()` in `k`.
type ScoresFn = fn(&[f32], &[f32], f32, &mut [f32]);
/// [`ScoresFn`] for two query rows over the same key rows: `(q, k, scale, out0, out1)`, `out0`
/// for `q[0]` and `out1` for `q[1]`.
type ScoresPairFn = fn([&[f32]; 2], &[f32], f32, &mut [f32], &mut [f32]);
/// `out[c] = scale * sum_r coef[r] * m_row_r[c]`, rows `ld` apart: `(coef, m, ld, scale, out)`.
/// Scores from keys transposed to `[H, ld]`, and probabilities times V (`ld` = head, scale 1).
type RowsFn = fn(&[f32], &[f32], usize, f32, &mut [f32]);
/// [`RowsFn`] for `g` coefficient rows over the same matrix: `(g, coef [g, r], m, ld, scale,
/// out [g, n])`, each output row bit-identical to a [`RowsFn`] call on its coefficient row.
type RowsGroupFn = fn(usize, &[f32], &[f32], usize, f32, &mut [f32]);
/// One rotary row: `(x, cos, sin, interleaved, out)`; rotates `2 * cos.len()` leading elements.
type RopeFn = fn(&[f32], &[f32], &[f32], bool, &mut [f32]);
/// `dst = src` (equal lengths): a decode step's past rows into present.
type CopyFn = fn(&mut [f32], &[f32]);

fn plain_copy(dst: &mut [f32], src: &[f32]) {
    dst.copy_from_slice(src);
}

pub(crate) struct Kernels {
    scores: ScoresFn,
    /// [`Kernels::scores`] (the same bits) for key rows already in the cache: a decode unit's
    /// key blocks after the first, hinted into L2 while the block before was scored.
    scores_cached: ScoresFn,
    /// Two query rows' [`Kernels::scores_cached`] over the same key rows, each output the bits
    /// of its own call (AVX-512, head 64: each key vector loaded once for both).
    scores_pair: ScoresPairFn,
    rows: RowsFn,
    rows_group: RowsGroupFn,
    /// Whether [`Kernels::rows`] accumulates with fused multiply-adds (one rounding a term): a
    /// term added outside it (the fused decode's new row) must then be fused too, or the
    /// two decode paths round it differently.
    fused_terms: bool,
    rope: RopeFn,
    /// Past rows into present at decode, from [`STREAM_COPY_MIN_BYTES`] on (below, a plain copy).
    stream_copy: CopyFn,
    isa: Isa,
    name: &'static str,
}

const SCALAR: Kernels = Kernels {
    scores: scalar::scores,
    scores_cached: scalar::scores,
    scores_pair: scalar::scores_pair,
    rows: scalar::rows,
    rows_group: scalar::rows_group,
    fused_terms: false,
    rope: scalar::rope_row,
    stream_copy: plain_copy,
    isa: Isa::Scalar,
    name: "scalar",
};
#[cfg(target_arch = "x86_64")]
const AVX2: Kernels = Kernels {
    scores: x86::scores_avx2,
    scores_cached: x86::scores_cached_avx2,
    scores_pair: x86::scores_pair_avx2,
    rows: x86::rows_avx2,
    rows_group: x86::rows_group_avx2,
    fused_terms: true,
    rope: x86::rope_avx2,
    stream_copy: plain_copy,
    isa: Isa::Avx2,
    name: "avx2",
};
#[cfg(target_arch = "x86_64")]
const AVX512: Kernels = Kernels {
    scores: x86::scores_avx512,
    scores_cached: x86::scores_cached_avx512,
    scores_pair: x86::scores_pair_avx512,
    rows: x86::rows_avx512,
    rows_group: rows_avx512::rows_group_avx512,
    fused_terms: true,
    rope: x86::rope_avx512,
    stream_copy: x86::stream_copy_avx512,
    isa: Isa::Avx512,
    name: "avx512",
};

/// Bytes of past rows (one kv head's keys or values) from which the fused decode step
/// (`gqa_decode`) copies them into present with non-temporal stores (`Kernels::stream_copy`):
/// nothing in the call reads present back (the step reads the past input), so the copy need not
/// read the destination's lines first nor push the rows it is about to read out of the cache.
/// Measured on the Zen 4 host (Qwen2-0.5B decode, 2 lanes, per-round medians of the
/// time per token with a temporary switch, streamed against plain in the same build): 1.4%
/// faster at past 64 (16 KiB a copy), 0.5% at 256 (noise), 2.6% and 4.0% at 1024. A page: below
/// it the copy is a few lines and the fence would be most of it.
pub(crate) const STREAM_COPY_MIN_BYTES: usize = 4096;

static TABLES: crate::kernels::isa::IsaTables<Kernels> = crate::isa_tables!(SCALAR, AVX2, AVX512);
static DISPATCH: LazyLock<&'static Kernels> = LazyLock::new(|| TABLES.active());

/// The table for `isa` (`None`: the process's level). `Err` when the CPU lacks it.
fn kernels(isa: Option<Isa>) -> Result<&'static Kernels, String> {
    match isa {
        None => Ok(*DISPATCH),
        Some(i) => TABLES.for_isa(i),
    }
}

/// Runs `f(first_row, rows)` over `out` cut into runs of whole rows of `row_len` elements: on
/// the calling thread, or on `par` (decode dispatch when `decode`, task dispatch otherwise)
/// when `parallel` and there is more than one row.
fn over_rows<T: Send>(
    out: &mut [T],
    row_len: usize,
    parallel: bool,
    decode: bool,
    par: &dyn Par,
    f: &(dyn Fn(usize, &mut [T]) + Sync),
) {
    over_rows_split(out, row_len, parallel, decode, Split::Even, par, f)
}

/// How [`over_rows_split`] cuts the rows over the lanes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Split {
    /// Four runs per lane, claimed first to last.
    Even,
    /// Eight runs per lane, claimed last to first: for rows whose cost grows along `out` (the
    /// causal prefill, where later positions attend to more keys), so the heaviest runs start
    /// first and the light ones fill the lanes' ends.
    Growing,
}

/// [`over_rows`] with the split chosen.
fn over_rows_split<T: Send>(
    out: &mut [T],
    row_len: usize,
    parallel: bool,
    decode: bool,
    split: Split,
    par: &dyn Par,
    f: &(dyn Fn(usize, &mut [T]) + Sync),
) {
    if out.is_empty() || row_len == 0 {
        return;
    }
    let rows = out.len() / row_len;
    if !parallel || par.lanes() < 2 || rows < 2 {
        return f(0, out);
    }
    let per_lane = if split == Split::Growing { 8 } else { 4 };
    let per = rows.div_ceil(par.lanes().saturating_mul(per_lane).min(rows));
    let parts: Vec<Mutex<&mut [T]>> = out.chunks_mut(per * row_len).map(Mutex::new).collect();
    let n = parts.len();
    let run = |i: usize| {
        let i = if split == Split::Growing {
            n - 1 - i
        } else {
            i
        };
        f(i * per, &mut parts[i].lock())
    };
    if decode {
        par.chunks(Dispatch::Decode, n, &run)
    } else {
        par.chunks(Dispatch::Task, n, &run)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every table this CPU has, with its level.
    fn tables() -> Vec<(Isa, &'static Kernels)> {
        [Isa::Scalar, Isa::Avx2, Isa::Avx512]
            .into_iter()
            .filter_map(|isa| Some((isa, TABLES.for_isa(isa).ok()?)))
            .collect()
    }

    /// The bit patterns of `v`, to compare results bit for bit (the attention tests here and in
    /// `x86`).
    pub(super) fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// Every table's scores (both block orders: `scores`, `scores_cached`) against the f64 dot
    /// products: row lengths that are and are not a multiple of the vector width, row counts
    /// around the blocks of `W` rows, an output shorter than the keys, and every row written (a
    /// NaN left over fails). Seen failing with the last vector of `Simd::sums` left out of its
    /// tree, with the block's store shifted by one row and with the row order's last query
    /// vector left out.
    #[test]
    fn scores_match_the_f64_dot_products() {
        let val =
            |i: usize, salt: usize| ((i * 7919 + salt * 104_729) % 2003) as f32 / 1001.0 - 1.0;
        for (isa, kern) in tables() {
            for d in [1usize, 7, 8, 16, 17, 32, 64, 128] {
                for rows in [0usize, 1, 7, 8, 9, 15, 16, 17, 31, 33, 100] {
                    let q: Vec<f32> = (0..d).map(|i| val(i, 1)).collect();
                    let k: Vec<f32> = (0..rows * d).map(|i| val(i, 2)).collect();
                    for (out_rows, f) in [
                        (rows, kern.scores),
                        (rows.saturating_sub(3), kern.scores),
                        (rows, kern.scores_cached),
                        (rows.saturating_sub(3), kern.scores_cached),
                    ] {
                        let mut out = vec![f32::NAN; out_rows];
                        f(&q, &k, 0.125, &mut out);
                        for (j, &got) in out.iter().enumerate() {
                            let kr = &k[j * d..(j + 1) * d];
                            let want: f64 =
                                q.iter().zip(kr).map(|(&a, &b)| a as f64 * b as f64).sum();
                            let mag: f64 =
                                q.iter().zip(kr).map(|(&a, &b)| (a * b).abs() as f64).sum();
                            let err = (got as f64 - 0.125 * want).abs();
                            assert!(
                                err <= 1e-6 * mag + 1e-30,
                                "{isa:?} d {d} rows {rows} out {out_rows} row {j}: {got} vs {}",
                                0.125 * want
                            );
                        }
                    }
                }
            }
        }
    }

    /// The decode step scores its past keys a block of rows at a time
    /// (`gqa_decode::SCORE_BLOCK_ROWS`), the first block with `scores` and the later (hinted)
    /// ones with `scores_cached`; each block's scores must be the bits a call over all the rows
    /// gives, for every table this CPU has, with head sizes that are and are not a multiple of
    /// the vector width (and take the row order or not) and row counts past several blocks with
    /// a remainder. Seen failing with a block of 60 rows (the tables' blocks of `W` rows then
    /// start elsewhere) and with the row order's vectors taken last to first.
    #[test]
    fn block_scores_are_the_whole_rows_scores() {
        let val = |i: usize, salt: usize| ((i * 7919 + salt * 104_729) % 2003) as f32 / 7.0 - 143.0;
        let block = gqa_decode::SCORE_BLOCK_ROWS;
        for (isa, kern) in tables() {
            for d in [8usize, 32, 40, 64, 128] {
                for rows in [block - 1, block, 3 * block + 17, 300] {
                    let q: Vec<f32> = (0..d).map(|i| val(i, 1)).collect();
                    let k: Vec<f32> = (0..rows * d).map(|i| val(i, 2)).collect();
                    let mut whole = vec![0f32; rows];
                    (kern.scores)(&q, &k, 0.125, &mut whole);
                    let mut blocked = vec![f32::NAN; rows];
                    for r0 in (0..rows).step_by(block) {
                        let r1 = (r0 + block).min(rows);
                        let f = if r0 == 0 {
                            kern.scores
                        } else {
                            kern.scores_cached
                        };
                        f(&q, &k[r0 * d..r1 * d], 0.125, &mut blocked[r0..r1]);
                    }
                    assert_eq!(bits(&blocked), bits(&whole), "{isa:?} d {d} rows {rows}");
                }
            }
        }
    }

    /// Every table's `scores_pair` gives each query the bits of its own `scores_cached` call:
    /// head sizes that take the paired rows (64 on AVX-512) and others, row counts around the
    /// half-blocks and blocks of `W` rows, no rows, a second output shorter than the first.
    /// Seen failing with the two queries' halves of a tree stored to each other's outputs, with
    /// the second half-block's rows scored from the first half's keys, and with outputs of
    /// unequal length paired over the shorter one's rows.
    #[test]
    fn paired_scores_are_each_querys_scores() {
        let val = |i: usize, salt: usize| ((i * 7919 + salt * 104_729) % 2003) as f32 / 7.0 - 143.0;
        for (isa, kern) in tables() {
            for d in [8usize, 32, 40, 64, 128] {
                for rows in [0usize, 1, 7, 8, 9, 15, 16, 17, 24, 31, 33, 64, 100] {
                    let q0: Vec<f32> = (0..d).map(|i| val(i, 1)).collect();
                    let q1: Vec<f32> = (0..d).map(|i| val(i, 3)).collect();
                    let k: Vec<f32> = (0..rows * d).map(|i| val(i, 2)).collect();
                    for n1 in [rows, rows.saturating_sub(3)] {
                        let (mut p0, mut p1) = (vec![f32::NAN; rows], vec![f32::NAN; n1]);
                        (kern.scores_pair)([&q0, &q1], &k, 0.125, &mut p0, &mut p1);
                        for (q, got) in [(&q0, &p0), (&q1, &p1)] {
                            let mut want = vec![f32::NAN; got.len()];
                            (kern.scores_cached)(q, &k, 0.125, &mut want);
                            assert_eq!(bits(got), bits(&want), "{isa:?} d {d} rows {rows} {n1}");
                        }
                    }
                }
            }
        }
    }

    /// Every table's grouped weighted sums are, bit for bit, one `rows` call of the same table
    /// per coefficient row: groups of 1 to 10 rows (the AVX-512 wide blocks of up to 7, and a
    /// group of 8 split 4 + 4), column counts around the vector widths and the wide step of 64,
    /// matrix rows `ld` apart with and without padding, no matrix rows at all. Seen failing
    /// with the wide block's last matrix row left out and with its scale left off.
    #[test]
    fn grouped_sums_are_the_per_row_sums() {
        let val = |i: usize, salt: usize| ((i * 7919 + salt * 104_729) % 2003) as f32 / 501.0 - 2.0;
        for (isa, kern) in tables() {
            for g in 1..=10usize {
                for r in [0usize, 1, 5, 64] {
                    for n in [1usize, 15, 16, 33, 64, 65, 128, 130, 200] {
                        for ld in [n, n + 3] {
                            let coef: Vec<f32> = (0..g * r).map(|i| val(i, 1)).collect();
                            let m: Vec<f32> = (0..r * ld).map(|i| val(i, 2)).collect();
                            let mut grouped = vec![f32::NAN; g * n];
                            (kern.rows_group)(g, &coef, &m, ld, 0.625, &mut grouped);
                            let mut single = vec![f32::NAN; g * n];
                            for (i, o) in single.chunks_exact_mut(n).enumerate() {
                                (kern.rows)(&coef[i * r..(i + 1) * r], &m, ld, 0.625, o);
                            }
                            assert_eq!(
                                bits(&grouped),
                                bits(&single),
                                "{isa:?} g {g} r {r} n {n} ld {ld}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// Every table this CPU has copies exactly, whatever the destination's alignment and the
    /// length (the streamed body, the unaligned head and the tail).
    #[test]
    fn stream_copy_is_a_copy() {
        let src: Vec<f32> = (0..1100).map(|i| i as f32 * 0.5 - 7.0).collect();
        for (isa, k) in tables() {
            for off in 0..17 {
                for len in [0, 1, 15, 16, 17, 100, 1024, 1083] {
                    let mut dst = vec![-1.0f32; off + len + 3];
                    (k.stream_copy)(&mut dst[off..off + len], &src[..len]);
                    assert_eq!(
                        &dst[off..off + len],
                        &src[..len],
                        "{isa:?} off {off} len {len}"
                    );
                    assert!(dst[..off]
                        .iter()
                        .chain(&dst[off + len..])
                        .all(|&x| x == -1.0));
                }
            }
        }
    }
}
