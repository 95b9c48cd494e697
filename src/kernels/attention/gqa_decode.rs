//! GroupQueryAttention's decode step (one new token per batch), fused per (batch, kv head):
//! the lane that takes a unit writes its present rows (past rows copied, the new key rotated,
//! zeros after) and then attends that kv head's whole query group, so each past row is read
//! from memory once, by the lane that uses it, and no lane reads rows another lane just wrote.
//! The old split (the caller writing all present rows, then both lanes attending over them)
//! measured 24.2 us per call inside the Qwen2-0.5B decode (past 64, 2 lanes) against 18.5 us
//! for this one (node time, medians of 1440 calls, the two alternating per token).
//!
//! Order inside a unit: keys, then every query head's scores over the past keys, a block of
//! key rows at a time for all the heads while the next block's keys are hinted into L2
//! (`Decode::score_past`), then each head's softmax (into one scratch row, packed into the
//! scores buffer for the sums), then values, then
//! every head's weighted sum of value rows, all heads in one pass over the rows (`rows_group`;
//! on AVX-512 each value row read once, whole, `super::rows_avx512`;
//! bit for bit the per-head sums; at past 1024 1.026x the per-head passes per token, Qwen2-0.5B
//! shapes, 10 of 10 rounds, and 1.014x at Llama-3.2-1B's group of 4). Scores and sums read the
//! past rows from the past input (the copy just brought them into this lane's cache; with
//! [`super::STREAM_COPY_MIN_BYTES`] the copy's stores bypass it) and the new row apart from them.
//! Same kernels as the general path in [`super::gqa`]; the new value row is added after the
//! past rows' sum (one rounding more than there). The subnormal flush covers the attention
//! arithmetic only, as in the general path; present rows are written in the caller's FP
//! environment.
//!
//! Before a unit starts, its lane hints the first line of every page of the unit's rows
//! (`Decode::warm_pages`). Inside a decode token the same rows come round once, after the whole
//! token's weights have streamed through; hinted together, their pages' translations are looked
//! up at once instead of one page at a time as the scores and sums reach each page. That it is
//! the pages and not the lines: inside the Qwen2-0.5B decode (past 64, 2 lanes; a temporary
//! timer around the node, the rows hinted while the step before it ran) the node took 8.7 us a
//! call without a hint, 6.6 with one line per page hinted and about the same with every line.
//! Per token, this per-unit hint against the same build without it (Qwen2-0.5B decode past 64,
//! old / new per round): 1.009 with the vCPUs near (139 rounds) and apart (21 rounds), 1.014 near
//! at past 1024 (docs/journal/measurements-2026-12.md, an attention unit's pages).

use std::ops::Range;

use parking_lot::Mutex;

use crate::kernels::fp_env::FlushSubnormals;
use crate::kernels::softmax::RowFn;
use crate::memory::scratch::try_with_scratch_f32;
use crate::os::cache::{prefetch_l2, prefetch_pages};
use crate::runtime::par::{Dispatch, Par};

use super::gqa::{softmax_rows, GqaShape, Rows};
use super::Kernels;

/// Key rows scored at a time for every query head of a group (see [`Decode::score_past`]): a
/// multiple of every table's vector width (16 floats at most), and 16 KiB of key rows at head
/// size 64, which stay in L1 while the group's heads score them.
pub(super) const SCORE_BLOCK_ROWS: usize = 64;

/// Head size from which a unit's first block of key rows (which comes from memory) is scored by
/// row, two heads at a time, as the hinted blocks are (`Kernels::scores_cached`,
/// `Kernels::scores_pair`), instead of by column (`Kernels::scores`): the same bits either way.
/// A row of 128 floats is 8 cache lines the hardware prefetcher follows; by column a block's
/// loads jump between 16 rows. `examples/gqa_timing 64 300 7 1 300 16 8 128` (Qwen3-0.6B's
/// shape, the rows evicted before every call): by row 0.87-1.01x the time per call on two lanes
/// (median ~0.92) and ~0.8x on one; at head 64 (Qwen2-0.5B's) no clear difference, and by
/// column had measured better there inside the model (by row 1-1.5 us a call slower at past 64:
/// docs/journal/measurements-2026-12.md, the attention's own instructions at a long past).
pub(super) const FIRST_BLOCK_BY_ROW_MIN_HEAD: usize = 128;

/// One dispatch chunk's output rows and present key / value rows.
type Part<'a> = (&'a mut [f32], &'a mut [f32], &'a mut [f32]);

/// One decode call's checked parts (see [`super::gqa`]): every index below is in bounds.
pub(super) struct Decode<'a, 'r> {
    pub(super) k: &'static Kernels,
    pub(super) softmax_row: RowFn,
    pub(super) sh: &'a GqaShape,
    pub(super) rows: &'a Rows<'r>,
    /// Past key and value buffers (`None`: no past, or present shares it).
    pub(super) past_kv: Option<(&'r [f32], &'r [f32])>,
    /// (past rows, total valid rows) per batch.
    pub(super) past: &'a [(usize, usize)],
    pub(super) shared: bool,
    /// Each query head's sink logit (see `GqaShape::smooth`).
    pub(super) sinks: Option<&'a [f32]>,
}

impl Decode<'_, '_> {
    /// Runs the units over `par` (one dispatch; one lane when `parallel` is false). `Err` when
    /// the attention scratch could not be allocated (outputs then unspecified).
    pub(super) fn run(
        &self,
        out: &mut [f32],
        present_k: &mut [f32],
        present_v: &mut [f32],
        parallel: bool,
        par: &dyn Par,
    ) -> Result<(), String> {
        let sh = self.sh;
        let units = sh.batch * sh.kv_heads;
        let group = sh.heads / sh.kv_heads;
        let (orow, prow) = (group * sh.head, sh.present_len * sh.head);
        if units == 0 || orow == 0 || prow == 0 {
            return Ok(());
        }
        let lanes = if parallel { par.lanes() } else { 1 };
        let per = units.div_ceil((lanes * 4).min(units));
        let parts: Vec<Mutex<Part<'_>>> = out
            .chunks_mut(per * orow)
            .zip(present_k.chunks_mut(per * prow))
            .zip(present_v.chunks_mut(per * prow))
            .map(|((o, k), v)| Mutex::new((o, k, v)))
            .collect();
        let ok = std::sync::atomic::AtomicBool::new(true);
        let run = |i: usize| {
            let mut g = parts[i].lock();
            let (o, k, v) = &mut *g;
            if !self.units(i * per, o, k, v) {
                ok.store(false, std::sync::atomic::Ordering::Relaxed);
            }
        };
        if lanes < 2 || parts.len() < 2 {
            (0..parts.len()).for_each(run);
        } else {
            par.chunks(Dispatch::Decode, parts.len(), &run);
        }
        if ok.into_inner() {
            Ok(())
        } else {
            Err(format!(
                "cannot allocate {} floats of attention scratch",
                self.scratch()
            ))
        }
    }

    /// The longest row of scores a unit takes: the most past rows of any batch, plus the new one.
    fn max_len(&self) -> usize {
        self.past.iter().map(|&(p, _)| p).max().unwrap_or(0) + 1
    }

    /// Floats of scratch one lane needs: the group's rotated query rows (`group * head`), the
    /// scores of every query head of a group (`group * (past + 1)`), one head's probabilities
    /// (`past + 1`) and each head's probability of the new row (`group`): 129 KiB at 4096 past
    /// rows and a group of 7; lent fallibly, a shortfall is the caller's clean error.
    fn scratch(&self) -> usize {
        let sh = self.sh;
        let max_len = self.max_len();
        let group = sh.heads / sh.kv_heads;
        // Saturating: an impossible size asks for more than any budget, a clean error.
        group
            .saturating_mul(sh.head)
            .saturating_add((group + 1).saturating_mul(max_len))
            .saturating_add(group)
    }

    /// Units `first..` (as many as `out` holds); false when the scratch is missing.
    fn units(&self, first: usize, out: &mut [f32], pk: &mut [f32], pv: &mut [f32]) -> bool {
        let sh = self.sh;
        let (head, group) = (sh.head, sh.heads / sh.kv_heads);
        let max_len = self.max_len();
        let prow = sh.present_len * head;
        try_with_scratch_f32(self.scratch(), |buf| {
            let (qr, rest) = buf.split_at_mut(group * head);
            let (scores, rest) = rest.split_at_mut(group * max_len);
            let (probs, new_probs) = rest.split_at_mut(max_len);
            for (i, ((o, k), v)) in out
                .chunks_exact_mut(group * head)
                .zip(pk.chunks_exact_mut(prow))
                .zip(pv.chunks_exact_mut(prow))
                .enumerate()
            {
                let u = first + i;
                let (b, n) = (u / sh.kv_heads, u % sh.kv_heads);
                let (p, total) = self.past[b];
                // The keys the new query attends to (`GqaShape::key_range`), and among them the
                // past rows `st..lim` (all but the new row).
                let Range {
                    start: st,
                    end: len,
                } = sh.key_range(p + 1, total);
                let lim = len.min(p);
                let (old, keys) = (lim - st, len - st);
                let rows = unit_rows(sh, self.shared, b, n, p);
                let first = if self.shared { st * head } else { 0 };
                self.warm_pages(&rows, first, k, v);
                let (k_old, k_new) = self.present(0, b, n, p, rows.1.as_ref(), k);
                {
                    let _ftz = FlushSubnormals::new();
                    let at = self.rows.rope_pos(b, p, 0);
                    for (j, q) in qr.chunks_exact_mut(head).enumerate() {
                        self.rows.rope(self.rows.q_row(b, 0, n * group + j), at, q);
                    }
                    self.score_past(qr, &k_old[st * head..lim * head], scores, max_len);
                    // Each head's softmax into one row of scratch (the same lines for every
                    // head, so they stay in L1), whose old rows' probabilities then go packed
                    // `[group, old]` into the scores buffer: head `j`'s land below head `j + 1`'s
                    // scores (`old < max_len`), over its own, which the softmax has read. (With
                    // a probability buffer per head, a long past's probabilities were written
                    // to lines that came from memory: 57 KiB a unit at past 2048.)
                    for (j, q) in qr.chunks_exact(head).enumerate() {
                        let sc = &mut scores[j * max_len..j * max_len + keys];
                        (self.k.scores)(q, k_new, sh.scale, &mut sc[old..]);
                        sh.cap_scores(sc);
                        let pr = &mut probs[..keys];
                        let sk = self.sinks.map(|s| &s[n * group + j..n * group + j + 1]);
                        softmax_rows(self.softmax_row, sk, sc, pr, keys);
                        new_probs[j] = pr.get(old).copied().unwrap_or(0.0);
                        scores[j * old..(j + 1) * old].copy_from_slice(&pr[..old]);
                    }
                }
                let (v_old, v_new) = self.present(1, b, n, p, rows.1.as_ref(), v);
                let _ftz = FlushSubnormals::new();
                // Every query head's sum over the past rows in one pass over them
                // (`rows_group`, bit for bit the per-head sums), then the new row's term.
                let v_old = &v_old[st * head..lim * head];
                (self.k.rows_group)(group, &scores[..group * old], v_old, head, 1.0, o);
                if len > lim {
                    // The new row's term as the per-head path's `rows` adds it (the last term of
                    // its chain): fused where that kernel fuses, so both paths give the same bits.
                    let fused = self.k.fused_terms;
                    for (orow, &x) in o.chunks_exact_mut(head).zip(&*new_probs) {
                        orow.iter_mut().zip(v_new).for_each(|(o, &y)| {
                            *o = if fused { x.mul_add(y, *o) } else { *o + x * y }
                        });
                    }
                }
            }
        })
        .is_some()
    }

    /// Every query head's scores over the unit's past key rows (`k_old`; `qr` holds the group's
    /// rotated query rows, head after head; head `j`'s scores go to `scores[j * max_len..]`),
    /// [`SCORE_BLOCK_ROWS`] key rows at a time for all the heads, so a block comes from memory
    /// once and serves the group from L1 (head by head over all the rows, each head met them in
    /// L2). A block's scores are the kernel's scores of those rows (its multiple-of-16 start
    /// keeps the kernel's row blocks where a whole-row call puts them): bit for bit the same.
    ///
    /// Between the heads of a block the lane hints a share of the next block's key rows into L2, a
    /// few lines at a time between computations, so they are on their way while the lane computes
    /// from L1 rather than fetched when it stalls on them: the hardware prefetchers alone ran
    /// little ahead of a lane that mostly computes. (Hinting this block's value rows as well, for
    /// the weighted sums after the softmax, measured no better at the model level and worse in the
    /// step's own time: 0.996 per token at past 1024, the step 5-10% slower with them;
    /// docs/journal/measurements-2026-12.md, attention at a long past.) The hinted blocks are
    /// scored row by row, two heads at a time (`Kernels::scores_pair`, each head's bits those of
    /// `scores_cached`; a group's last odd head alone), the first one, which comes from memory, by
    /// column (`Kernels::scores`): the same bits either way (the measurements:
    /// docs/journal/measurements-2026-12.md, the attention's own instructions at a long past and
    /// the scores two heads at a time; two heads at a time load each key vector once for both,
    /// where the row order alone loaded it once per head: in one process with the rows in cache the
    /// scores of a unit at past 2048 took ~31 us against ~35).
    fn score_past(&self, qr: &[f32], k_old: &[f32], scores: &mut [f32], max_len: usize) {
        let head = self.sh.head;
        let group = qr.len() / head.max(1);
        if head == 0 || group == 0 {
            return;
        }
        let row = head * std::mem::size_of::<f32>();
        let rows = k_old.len() / head;
        let k_at = k_old.as_ptr() as usize;
        let mut r0 = 0;
        while r0 < rows {
            let r1 = (r0 + SCORE_BLOCK_ROWS).min(rows);
            let keys = &k_old[r0 * head..r1 * head];
            let next = next_keys(k_at, row, r0..r1, rows);
            let mut j = 0;
            while j < group {
                // Two heads at a time on the hinted blocks (`scores_pair`), one on the first
                // block and for a group's last odd head; the hints go out per head either way.
                let by_row = r0 > 0 || head >= FIRST_BLOCK_BY_ROW_MIN_HEAD;
                let pair = by_row && j + 1 < group;
                for h in j..if pair { j + 2 } else { j + 1 } {
                    let (at, len) = share(next, h, group);
                    prefetch_l2(at, len);
                }
                let q = &qr[j * head..(j + 1) * head];
                let out = &mut scores[j * max_len..];
                if pair {
                    let (this, rest) = out.split_at_mut(max_len);
                    (self.k.scores_pair)(
                        [q, &qr[(j + 1) * head..(j + 2) * head]],
                        keys,
                        self.sh.scale,
                        &mut this[r0..r1],
                        &mut rest[r0..r1],
                    );
                    j += 2;
                } else {
                    let scores_fn = if by_row {
                        self.k.scores_cached
                    } else {
                        self.k.scores
                    };
                    scores_fn(q, keys, self.sh.scale, &mut out[r0..r1]);
                    j += 1;
                }
            }
            r0 = r1;
        }
    }

    /// Hints the pages of the rows a unit reads and writes (`rows`, from [`unit_rows`]; `k` and
    /// `v` its present chunks), all at once before it starts (`os::cache::prefetch_pages`), so
    /// their translations are looked up together rather than one page at a time as the scores
    /// and sums reach each page (see the module documentation for why the pages).
    ///
    /// `first`: the first present float the unit touches. Present is written from its start
    /// unless it is the past buffer, where the unit reads from its window's first row on (with
    /// a `local_window_size` far shorter than the cache, most of its rows are never read).
    fn warm_pages(&self, rows: &(usize, Option<Range<usize>>), first: usize, k: &[f32], v: &[f32]) {
        let (present, past) = rows;
        for d in [k, v] {
            let end = (*present).min(d.len());
            let r = &d[first.min(end)..end];
            prefetch_pages(r.as_ptr() as usize, std::mem::size_of_val(r));
        }
        if let (Some(at), Some((pk, pv))) = (past, self.past_kv) {
            for src in [pk, pv] {
                if let Some(r) = src.get(at.clone()) {
                    prefetch_pages(r.as_ptr() as usize, std::mem::size_of_val(r));
                }
            }
        }
    }

    /// Present rows of kv head `n` of batch `b` (`which` 0: keys, rotated; 1: values): the `p`
    /// past rows (unless present is the past buffer), the new row at `p`, zeros after it.
    /// `past` is where the unit's past rows lie in the past input ([`unit_rows`], the range its
    /// pages were hinted from). Returns the `p` past rows to read (the past input's when there is
    /// one) and the new row.
    fn present<'s>(
        &'s self,
        which: usize,
        b: usize,
        n: usize,
        p: usize,
        past: Option<&Range<usize>>,
        d: &'s mut [f32],
    ) -> (&'s [f32], &'s [f32]) {
        let head = self.sh.head;
        let mut old = None;
        if !self.shared {
            if let Some((pk, pv)) = self.past_kv {
                let src = if which == 0 { pk } else { pv };
                let at = past.expect("the plan bounds the past input, so its offsets fit");
                let rows = &src[at.clone()];
                if p * head * 4 >= super::STREAM_COPY_MIN_BYTES {
                    (self.k.stream_copy)(&mut d[..p * head], rows);
                } else {
                    d[..p * head].copy_from_slice(rows);
                }
                old = Some(rows);
            }
            d[(p + 1) * head..].fill(0.0);
        }
        let row = &mut d[p * head..(p + 1) * head];
        let new = self.rows.new_row(which, b, 0, n);
        if which == 0 {
            self.rows.rope(new, self.rows.rope_pos(b, p, 0), row);
        } else {
            row.copy_from_slice(new);
        }
        let d = &*d;
        (old.unwrap_or(&d[..p * head]), &d[p * head..(p + 1) * head])
    }
}

/// What a unit hints into L2 while it scores key rows `block` of its `rows` past keys (see
/// [`Decode::score_past`]), as (address, bytes): the next block's key rows (`k_at`: the address
/// of the unit's first key row, `row`: the bytes of a row).
fn next_keys(k_at: usize, row: usize, block: Range<usize>, rows: usize) -> (usize, usize) {
    let next_end = block.end.saturating_add(SCORE_BLOCK_ROWS).min(rows);
    (
        k_at.wrapping_add(block.end * row),
        next_end.saturating_sub(block.end) * row,
    )
}

/// Head `j`'s share (of `parts`) of a hinted range: the range is split between the heads of a
/// block, so a few lines go out between two heads' computations rather than all at once.
fn share((at, len): (usize, usize), j: usize, parts: usize) -> (usize, usize) {
    let (s, e) = (len * j / parts, len * (j + 1) / parts);
    (at.wrapping_add(s), e - s)
}

/// The rows unit (`b`, `n`) reads at past length `p`: the floats at the start of its present
/// chunk (its `p` past rows and the new row) and, unless present is the past buffer (`shared`),
/// where its `p` past rows lie in the past input.
fn unit_rows(
    sh: &GqaShape,
    shared: bool,
    b: usize,
    n: usize,
    p: usize,
) -> (usize, Option<Range<usize>>) {
    let present = p.saturating_add(1).saturating_mul(sh.head);
    let at = b
        .checked_mul(sh.kv_heads)
        .and_then(|x| x.checked_add(n))
        .and_then(|x| x.checked_mul(sh.past_len))
        .and_then(|x| x.checked_mul(sh.head));
    let past = at
        .filter(|_| !shared)
        .and_then(|at| Some(at..at.checked_add(p.checked_mul(sh.head)?)?));
    (present, past)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over a unit's blocks and heads, the hints name every key row after the first block, each
    /// byte once. Seen failing with each head hinting the whole range (bytes named seven times)
    /// and with this block's keys hinted instead of the next block's.
    #[test]
    fn hints_cover_the_next_keys_once() {
        let (row, group, k_at) = (256usize, 7usize, 1usize << 30);
        for rows in [0usize, 1, 63, 64, 65, 300, 1024, 1500] {
            let mut seen: Vec<(usize, usize)> = Vec::new();
            let mut r0 = 0;
            while r0 < rows {
                let r1 = (r0 + SCORE_BLOCK_ROWS).min(rows);
                let next = next_keys(k_at, row, r0..r1, rows);
                seen.extend(
                    (0..group)
                        .map(|j| share(next, j, group))
                        .filter(|&(_, len)| len > 0),
                );
                r0 = r1;
            }
            seen.sort();
            let first = SCORE_BLOCK_ROWS.min(rows);
            let mut at = k_at + first * row;
            for &(s, len) in &seen {
                assert_eq!(s, at, "rows {rows}: a gap or an overlap at {s:#x}");
                at += len;
            }
            assert_eq!(
                at,
                k_at + rows * row,
                "rows {rows}: every key row after the first block"
            );
        }
    }

    /// Seen failing with the new row left out of the present rows (`p` rows instead of `p + 1`).
    #[test]
    fn a_unit_warms_its_past_rows_and_the_new_row() {
        let sh = GqaShape {
            batch: 2,
            seq: 1,
            heads: 4,
            kv_heads: 2,
            head: 8,
            past_len: 10,
            present_len: 11,
            first_prompt: false,
            scale: 1.0,
            window: 0,
            softcap: 0.0,
            smooth: false,
        };
        // Batch 1, kv head 1 is the fourth block of past_len rows of the past input.
        assert_eq!(unit_rows(&sh, false, 1, 1, 4), (40, Some(240..272)));
        assert_eq!(unit_rows(&sh, false, 0, 0, 0), (8, Some(0..0)));
        assert_eq!(
            unit_rows(&sh, true, 1, 0, 9),
            (80, None),
            "present is the past"
        );
    }
}
