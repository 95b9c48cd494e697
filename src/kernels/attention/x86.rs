//! AVX2 / AVX-512 attention kernels over the shared [`Simd`] lanes: scaled QK scores (`W` key
//! rows at a time, their horizontal sums in one tree; a block's rows taken by column, or by row
//! for rows already in the cache, there also two queries at a time), weighted sums of matrix
//! rows (scores along transposed keys, and probabilities times V rows), the same sums for a group of coefficient rows at once (the
//! query heads of one kv head; AVX2's here, AVX-512's in `rows_avx512` over this file's block
//! for the last columns) and the rotate-half rotary row. The interleaved rotary form needs lane
//! shuffles for a cheap op and uses the scalar row. Also the decode step's streamed present copy
//! (AVX-512 only; the other tables copy plainly).

#![cfg(target_arch = "x86_64")]

use crate::kernels::simd::{isa_entry, Avx2, Avx512, Simd};

#[inline(always)]
fn dot_generic<S: Simd>(s: S, a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let w = S::W;
    let body = n - n % w;
    let (mut acc0, mut acc1) = (s.splat(0.0), s.splat(0.0));
    let mut i = 0;
    while i + 2 * w <= body {
        acc0 = s.fma(s.load(a, i), s.load(b, i), acc0);
        acc1 = s.fma(s.load(a, i + w), s.load(b, i + w), acc1);
        i += 2 * w;
    }
    if i < body {
        acc0 = s.fma(s.load(a, i), s.load(b, i), acc0);
    }
    if body < n {
        let t = n - body;
        acc1 = s.fma(
            s.load_part(a, body, t, 0.0),
            s.load_part(b, body, t, 0.0),
            acc1,
        );
    }
    s.reduce_add(s.add(acc0, acc1))
}

/// `out[j] = scale * dot(q, k[j])`. When the row length is a multiple of `W`, `W` key rows at a
/// time: one accumulator per row, then all `W` horizontal sums in one transpose-and-add tree
/// ([`Simd::sums`]) and one vector store; the rows left over (and other row lengths) one dot
/// product each. The blocks go by column ([`score_blocks_by_column`]), for key rows that come
/// from memory; [`scores_cached_generic`] takes them by row. Every row's accumulator takes the
/// same FMA chain either way (from zero, along the row's vectors in order): the same bits.
#[inline(always)]
fn scores_generic<S: Simd>(s: S, q: &[f32], k: &[f32], scale: f32, out: &mut [f32]) {
    scores_with::<S, false>(s, q, k, scale, out)
}

/// [`scores_generic`] for key rows already in the cache (a decode unit's blocks after the first,
/// which the lane hinted into L2 while it scored the block before): the blocks by row
/// ([`score_blocks_by_row`]).
#[inline(always)]
fn scores_cached_generic<S: Simd>(s: S, q: &[f32], k: &[f32], scale: f32, out: &mut [f32]) {
    scores_with::<S, true>(s, q, k, scale, out)
}

/// The scores: the whole blocks of `W` rows (row length a multiple of `W`) by row
/// ([`score_blocks_by_row`]) or by column ([`score_blocks_by_column`]), then one dot product for
/// each row after them.
#[inline(always)]
fn scores_with<S: Simd, const BY_ROW: bool>(
    s: S,
    q: &[f32],
    k: &[f32],
    scale: f32,
    out: &mut [f32],
) {
    let (d, w) = (q.len(), S::W);
    if d == 0 {
        out.fill(0.0); // empty dot products
        return;
    }
    let rows = out.len().min(k.len() / d);
    // The order as a constant, not a function passed in: called through `FnOnce`, the block
    // function went out of line once the kernels grew, and ran without their target features.
    let r = if !d.is_multiple_of(w) {
        0
    } else if BY_ROW {
        score_blocks_by_row(s, q, k, scale, &mut out[..rows])
    } else {
        score_blocks_by_column(s, q, k, scale, &mut out[..rows])
    };
    dots_from(s, q, k, scale, &mut out[..rows], r);
}

/// `out[j] = scale * dot(q, k[j])` for the rows `r..` of `out` (rows of `q.len()`), one dot
/// product each: the rows after the whole blocks of `W`.
#[inline(always)]
fn dots_from<S: Simd>(s: S, q: &[f32], k: &[f32], scale: f32, out: &mut [f32], r: usize) {
    let d = q.len();
    for (o, kr) in out[r..].iter_mut().zip(k[r * d..].chunks_exact(d)) {
        *o = scale * dot_generic(s, q, kr);
    }
}

/// The `NV` vectors of a row of `NV * W` floats (a query held in registers).
#[inline(always)]
fn load_vectors<S: Simd, const NV: usize>(s: S, q: &[f32]) -> [S::V; NV] {
    let mut v = [s.splat(0.0); NV];
    for (t, x) in v.iter_mut().enumerate() {
        *x = s.load(q, t * S::W);
    }
    v
}

/// The scores of the whole blocks of `W` rows of `out` (`q.len()` a multiple of `W`): for rows
/// of 4 or 8 vectors the query in registers and each key row read whole, its vectors one after
/// the other (a block's rows are one ascending run of memory, every load the row's base plus a
/// constant); other lengths by column ([`score_blocks_by_column`]). Returns the rows scored.
///
/// Against [`score_blocks_by_column`] (one vector of all `W` rows at a time, rows `d` apart),
/// in one process (Zen 4, head 64, a group of 7 heads over 64 rows in L1): 0.61-0.70 against
/// 1.73-1.82 us. On rows that come from memory it was the slower one: inside the Qwen2-0.5B
/// decode at past 64 (one block, not hinted) the attention step took 1-1.5 us a call more by
/// row (docs/journal/measurements-2026-12.md, the attention's own instructions at a long past);
/// hence by column for a unit's first block, by row for the hinted ones.
#[inline(always)]
fn score_blocks_by_row<S: Simd>(s: S, q: &[f32], k: &[f32], scale: f32, out: &mut [f32]) -> usize {
    // The vector count as a constant: the row loop unrolls and the accumulators stay in
    // registers (with a run-time count they went through the stack). Two counts only (head
    // sizes 64 and 128 on AVX-512, 32 and 64 on AVX2): with a variant for every count from 1
    // to 8 the kernel grew past what the compiler inlines, and its helpers were called with
    // their arrays on the stack.
    match q.len() / S::W {
        4 => score_rows::<S, 4>(s, q, k, scale, out),
        8 => score_rows::<S, 8>(s, q, k, scale, out),
        _ => score_blocks_by_column(s, q, k, scale, out),
    }
}

/// [`score_blocks_by_row`] for rows of `NV` vectors (`q.len() == NV * W`).
#[inline(always)]
fn score_rows<S: Simd, const NV: usize>(
    s: S,
    q: &[f32],
    k: &[f32],
    scale: f32,
    out: &mut [f32],
) -> usize {
    let (d, w) = (NV * S::W, S::W);
    let qv = load_vectors::<S, NV>(s, q);
    score_blocks(
        s,
        d,
        k,
        scale,
        out,
        #[inline(always)]
        |keys| {
            let mut acc = [s.splat(0.0); 16];
            // One slice of exactly `d` per row, so the loop bounds prove every load in bounds.
            for (i, a) in acc.iter_mut().enumerate().take(w) {
                let kr = &keys[i * d..(i + 1) * d];
                let mut x = s.splat(0.0);
                for (t, qt) in qv.iter().enumerate() {
                    x = s.fma(*qt, s.load(kr, t * w), x);
                }
                *a = x;
            }
            acc
        },
    )
}

/// Two query rows' [`scores_cached_generic`] over the same key rows (`out0` for `q0`, `out1`
/// for `q1`): each output bit for bit that of its own call. For rows of four vectors on
/// 16-lane levels (head 64 on AVX-512) a block of `W` rows goes as two halves of `W / 2` rows
/// for both queries ([`score_rows_pair`]): each key vector is loaded once for two FMAs instead
/// of once per query, and one horizontal-sum tree takes both queries' half-block (the tree
/// sums every vector's lanes the same way wherever it sits, so each row's sum keeps its bits).
/// Other lengths and levels: one call per query.
#[inline(always)]
fn scores_pair_generic<S: Simd>(
    s: S,
    q: [&[f32]; 2],
    k: &[f32],
    scale: f32,
    out0: &mut [f32],
    out1: &mut [f32],
) {
    let (d, w) = (q[0].len(), S::W);
    // Outputs of different lengths go one call each: past the shorter one's rows, the longer
    // one's blocks of `W` rows would not fall where a call of its own puts them.
    if d == 0 || q[1].len() != d || w != 16 || d != PAIR_VECTORS * w || out0.len() != out1.len() {
        scores_cached_generic(s, q[0], k, scale, out0);
        scores_cached_generic(s, q[1], k, scale, out1);
        return;
    }
    let rows = out0.len().min(k.len() / d);
    let (out0, out1) = (&mut out0[..rows], &mut out1[..rows]);
    let r = score_rows_pair::<S, PAIR_VECTORS>(s, q, k, scale, out0, out1);
    dots_from(s, q[0], k, scale, out0, r);
    dots_from(s, q[1], k, scale, out1, r);
}

/// Vectors a key row has where [`scores_pair_generic`] takes two queries at once: both
/// queries (8 registers) and a half-block's accumulators for both (16) fit the 32 registers;
/// with rows of eight vectors they would not.
const PAIR_VECTORS: usize = 4;

/// The whole blocks of `W` rows of [`scores_pair_generic`] (`W` = 16, rows of `NV` vectors):
/// per half-block of 8 rows, each row's vectors feed one FMA chain per query (from zero, along
/// the row, as [`score_rows`] does), the 16 accumulators (8 rows x 2 queries) take one tree,
/// and its lanes go to the two outputs. Returns the rows scored (both outputs the same count).
#[inline(always)]
fn score_rows_pair<S: Simd, const NV: usize>(
    s: S,
    q: [&[f32]; 2],
    k: &[f32],
    scale: f32,
    out0: &mut [f32],
    out1: &mut [f32],
) -> usize {
    let (d, w) = (NV * S::W, S::W);
    let half = w / 2;
    let qv = [
        load_vectors::<S, NV>(s, q[0]),
        load_vectors::<S, NV>(s, q[1]),
    ];
    let sc = s.splat(scale);
    let rows = out0.len().min(out1.len());
    let mut sums = [0f32; 16];
    let mut r = 0;
    while r + w <= rows {
        for h in [r, r + half] {
            let keys = &k[h * d..(h + half) * d];
            let mut acc = [s.splat(0.0); 16];
            for i in 0..half {
                // One slice of exactly `d` per row, so the loop bounds prove every load in bounds.
                let kr = &keys[i * d..(i + 1) * d];
                let (mut x0, mut x1) = (s.splat(0.0), s.splat(0.0));
                for (t, (&a, &b)) in qv[0].iter().zip(&qv[1]).enumerate() {
                    let kv = s.load(kr, t * w);
                    x0 = s.fma(a, kv, x0);
                    x1 = s.fma(b, kv, x1);
                }
                acc[i] = x0;
                acc[half + i] = x1;
            }
            s.store(&mut sums[..w], 0, s.mul(sc, s.sums(&acc[..w])));
            out0[h..h + half].copy_from_slice(&sums[..half]);
            out1[h..h + half].copy_from_slice(&sums[half..w]);
        }
        r += w;
    }
    r
}

/// The scores of the whole blocks of `W` rows of `out` by column (`q.len()` any multiple of
/// `W`): one query vector at a time meets the same vector of all `W` rows of a block (one
/// accumulator per row, so `W` independent FMA chains). Returns the rows scored.
#[inline(always)]
fn score_blocks_by_column<S: Simd>(
    s: S,
    q: &[f32],
    k: &[f32],
    scale: f32,
    out: &mut [f32],
) -> usize {
    let (d, w) = (q.len(), S::W);
    score_blocks(
        s,
        d,
        k,
        scale,
        out,
        #[inline(always)]
        |keys| {
            let mut acc = [s.splat(0.0); 16];
            // One slice of exactly `d` per key row, so that the loop bound below proves every
            // load in bounds (indexing `keys` at `i * d + c` left a bounds check per load, about
            // six instructions a fused multiply-add); filled by a loop, as `array::from_fn` was no
            // longer inlined once the kernels held the row order's variants too.
            let mut row: [&[f32]; 16] = [&[]; 16];
            for (i, kr) in row.iter_mut().enumerate().take(w) {
                *kr = &keys[i * d..(i + 1) * d];
            }
            let mut c = 0;
            while c + w <= d {
                let qv = s.load(q, c);
                for (a, kr) in acc.iter_mut().zip(row).take(w) {
                    *a = s.fma(qv, s.load(kr, c), *a);
                }
                c += w;
            }
            acc
        },
    )
}

/// The block loop both orders share: for each whole block of `W` rows of `out` (key rows of `d`
/// floats in `k`), `block` gives one accumulator per row of the block's keys, whose `W`
/// horizontal sums take one transpose-and-add tree ([`Simd::sums`]), then the scale and one
/// vector store. Returns the rows scored. The callers mark their `block` closures
/// `#[inline(always)]`: left out of line, a closure is compiled without the kernel's target
/// features (the by-column one was, and was called once a block).
#[inline(always)]
fn score_blocks<S: Simd>(
    s: S,
    d: usize,
    k: &[f32],
    scale: f32,
    out: &mut [f32],
    mut block: impl FnMut(&[f32]) -> [S::V; 16],
) -> usize {
    let w = S::W;
    let sc = s.splat(scale);
    let mut r = 0;
    while r + w <= out.len() {
        let acc = block(&k[r * d..(r + w) * d]);
        s.store(out, r, s.mul(sc, s.sums(&acc[..w])));
        r += w;
    }
    r
}

/// `out[c] = scale * sum_r coef[r] * m[r * ld + c]` for `c < out.len()`, four vectors of `out`
/// held in registers: the scores from transposed keys (`coef` = query, `m` = K^T) and the
/// probabilities times V (`coef` = probabilities, `m` = V, scale 1).
#[inline(always)]
fn rows_generic<S: Simd>(s: S, coef: &[f32], m: &[f32], ld: usize, scale: f32, out: &mut [f32]) {
    let (n, w) = (out.len(), S::W);
    let sc = s.splat(scale);
    let mut c = 0;
    while c + 4 * w <= n {
        let z = s.splat(0.0);
        let (mut a0, mut a1, mut a2, mut a3) = (z, z, z, z);
        for (r, &x) in coef.iter().enumerate() {
            let (xv, at) = (s.splat(x), r * ld + c);
            a0 = s.fma(xv, s.load(m, at), a0);
            a1 = s.fma(xv, s.load(m, at + w), a1);
            a2 = s.fma(xv, s.load(m, at + 2 * w), a2);
            a3 = s.fma(xv, s.load(m, at + 3 * w), a3);
        }
        for (t, a) in [a0, a1, a2, a3].into_iter().enumerate() {
            s.store(out, c + t * w, s.mul(a, sc));
        }
        c += 4 * w;
    }
    while c < n {
        let t = w.min(n - c);
        let mut a = s.splat(0.0);
        for (r, &x) in coef.iter().enumerate() {
            a = s.fma(s.splat(x), s.load_part(m, r * ld + c, t, 0.0), a);
        }
        s.store_part(out, c, t, s.mul(a, sc));
        c += t;
    }
}

/// Most rows one block of [`rows_group_generic`] holds: `rows` x 2 vectors of accumulators, plus
/// two matrix vectors and a broadcast, within the level's registers (32 zmm, 16 ymm).
const fn group_block<S: Simd>() -> usize {
    if S::W >= 16 {
        8
    } else {
        4
    }
}

/// [`rows_generic`] for `g` coefficient rows at once over the same matrix: `coef` is `[g, r]`,
/// `out` `[g, n]` (`r = coef.len() / g`, `n = out.len() / g`), and
/// `out[i][c] = scale * sum_r coef[i][r] * m[r * ld + c]`. Each matrix vector loaded feeds one
/// FMA per row of a block of up to [`group_block`] rows; every output element gets the same FMA
/// chain as [`rows_generic`] gives it (from zero, `r` ascending, then `* scale`), so the results
/// are bit-identical to `g` calls of it.
#[inline(always)]
fn rows_group_generic<S: Simd>(
    s: S,
    g: usize,
    coef: &[f32],
    m: &[f32],
    ld: usize,
    scale: f32,
    out: &mut [f32],
) {
    if g == 0 {
        return;
    }
    let (r, n) = (coef.len() / g, out.len() / g);
    let mut i = 0;
    while i < g {
        let gb = (g - i).min(group_block::<S>());
        let cf = &coef[i * r..(i + gb) * r];
        let o = &mut out[i * n..(i + gb) * n];
        rows_block_of(s, gb, cf, m, ld, scale, o, 0);
        i += gb;
    }
}

/// [`rows_block`] for a block of `gb` rows (1 to 8), from column `c0` on.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn rows_block_of<S: Simd>(
    s: S,
    gb: usize,
    coef: &[f32],
    m: &[f32],
    ld: usize,
    scale: f32,
    out: &mut [f32],
    c0: usize,
) {
    match gb {
        1 => rows_block::<S, 1>(s, coef, m, ld, scale, out, c0),
        2 => rows_block::<S, 2>(s, coef, m, ld, scale, out, c0),
        3 => rows_block::<S, 3>(s, coef, m, ld, scale, out, c0),
        4 => rows_block::<S, 4>(s, coef, m, ld, scale, out, c0),
        5 => rows_block::<S, 5>(s, coef, m, ld, scale, out, c0),
        6 => rows_block::<S, 6>(s, coef, m, ld, scale, out, c0),
        7 => rows_block::<S, 7>(s, coef, m, ld, scale, out, c0),
        _ => rows_block::<S, 8>(s, coef, m, ld, scale, out, c0),
    }
}

/// `G` rows of [`rows_group_generic`] over columns `c0..`: columns in steps of two vectors
/// (`G x 2` accumulators), then one (partial) vector at a time.
#[inline(always)]
fn rows_block<S: Simd, const G: usize>(
    s: S,
    coef: &[f32],
    m: &[f32],
    ld: usize,
    scale: f32,
    out: &mut [f32],
    c0: usize,
) {
    let (r, n, w) = (coef.len() / G, out.len() / G, S::W);
    let mut cf: [&[f32]; G] = [&[]; G];
    for (i, c) in cf.iter_mut().enumerate() {
        *c = &coef[i * r..(i + 1) * r];
    }
    let sc = s.splat(scale);
    let mut c = c0;
    while c + 2 * w <= n {
        let z = s.splat(0.0);
        let mut acc = [[z; 2]; G];
        for j in 0..r {
            let at = j * ld + c;
            let (m0, m1) = (s.load(m, at), s.load(m, at + w));
            for (a, row) in acc.iter_mut().zip(&cf) {
                let x = s.splat(row[j]);
                a[0] = s.fma(x, m0, a[0]);
                a[1] = s.fma(x, m1, a[1]);
            }
        }
        for (i, a) in acc.iter().enumerate() {
            s.store(out, i * n + c, s.mul(a[0], sc));
            s.store(out, i * n + c + w, s.mul(a[1], sc));
        }
        c += 2 * w;
    }
    while c < n {
        let t = w.min(n - c);
        let mut acc = [s.splat(0.0); G];
        for j in 0..r {
            let mv = s.load_part(m, j * ld + c, t, 0.0);
            for (a, row) in acc.iter_mut().zip(&cf) {
                *a = s.fma(s.splat(row[j]), mv, *a);
            }
        }
        for (i, a) in acc.iter().enumerate() {
            s.store_part(out, i * n + c, t, s.mul(*a, sc));
        }
        c += t;
    }
}

#[inline(always)]
fn rope_generic<S: Simd>(
    s: S,
    x: &[f32],
    cos: &[f32],
    sin: &[f32],
    interleaved: bool,
    out: &mut [f32],
) {
    if interleaved {
        return super::scalar::rope_row(x, cos, sin, true, out);
    }
    let half = cos.len();
    let w = S::W;
    let body = half - half % w;
    let mut i = 0;
    // out[i] = x1 c - x2 s; out[i + half] = x2 c + x1 s (as two products and one rounding each).
    while i < body {
        let (c, sn) = (s.load(cos, i), s.load(sin, i));
        let (x1, x2) = (s.load(x, i), s.load(x, i + half));
        s.store(out, i, s.sub(s.mul(x1, c), s.mul(x2, sn)));
        s.store(out, i + half, s.add(s.mul(x2, c), s.mul(x1, sn)));
        i += w;
    }
    for i in body..half {
        let (x1, x2) = (x[i], x[i + half]);
        out[i] = x1 * cos[i] - x2 * sin[i];
        out[i + half] = x2 * cos[i] + x1 * sin[i];
    }
    out[2 * half..].copy_from_slice(&x[2 * half..]);
}

isa_entry!(scores_avx2, Avx2, "avx2,fma", scores_generic,
    (q: &[f32], k: &[f32], scale: f32, out: &mut [f32]));
isa_entry!(scores_avx512, Avx512, "avx512f,avx512dq,avx2,fma", scores_generic,
    (q: &[f32], k: &[f32], scale: f32, out: &mut [f32]));
isa_entry!(scores_cached_avx2, Avx2, "avx2,fma", scores_cached_generic,
    (q: &[f32], k: &[f32], scale: f32, out: &mut [f32]));
isa_entry!(scores_cached_avx512, Avx512, "avx512f,avx512dq,avx2,fma", scores_cached_generic,
    (q: &[f32], k: &[f32], scale: f32, out: &mut [f32]));
isa_entry!(scores_pair_avx2, Avx2, "avx2,fma", scores_pair_generic,
    (q: [&[f32]; 2], k: &[f32], scale: f32, out0: &mut [f32], out1: &mut [f32]));
isa_entry!(scores_pair_avx512, Avx512, "avx512f,avx512dq,avx2,fma", scores_pair_generic,
    (q: [&[f32]; 2], k: &[f32], scale: f32, out0: &mut [f32], out1: &mut [f32]));
isa_entry!(rope_avx2, Avx2, "avx2,fma", rope_generic,
    (x: &[f32], cos: &[f32], sin: &[f32], interleaved: bool, out: &mut [f32]));
isa_entry!(rope_avx512, Avx512, "avx512f,avx512dq,avx2,fma", rope_generic,
    (x: &[f32], cos: &[f32], sin: &[f32], interleaved: bool, out: &mut [f32]));
isa_entry!(rows_avx2, Avx2, "avx2,fma", rows_generic,
    (coef: &[f32], m: &[f32], ld: usize, scale: f32, out: &mut [f32]));
isa_entry!(rows_avx512, Avx512, "avx512f,avx512dq,avx2,fma", rows_generic,
    (coef: &[f32], m: &[f32], ld: usize, scale: f32, out: &mut [f32]));
isa_entry!(rows_group_avx2, Avx2, "avx2,fma", rows_group_generic,
    (g: usize, coef: &[f32], m: &[f32], ld: usize, scale: f32, out: &mut [f32]));

/// `dst = src` (equal lengths) with non-temporal stores for the 64-byte aligned body, then an
/// `sfence`: for present rows that no kernel of this call reads back (the decode step reads the
/// past input instead), so the copy neither reads the destination's lines first nor evicts the
/// rows the attention is about to read.
pub(super) fn stream_copy_avx512(dst: &mut [f32], src: &[f32]) {
    use std::arch::x86_64::{_mm512_loadu_ps, _mm512_stream_ps, _mm_sfence};
    #[target_feature(enable = "avx512f")]
    fn inner(_s: Avx512, dst: &mut [f32], src: &[f32]) {
        let n = dst.len().min(src.len());
        let head = ((64 - dst.as_ptr() as usize % 64) % 64 / 4).min(n);
        dst[..head].copy_from_slice(&src[..head]);
        let end = head + (n - head) / 16 * 16;
        for i in (head..end).step_by(16) {
            // SAFETY: `i + 16 <= end <= n` elements of both slices; `dst + i` is 64-byte
            // aligned (`head` aligns it, steps are 64 bytes), as `_mm512_stream_ps` requires.
            unsafe {
                let v = _mm512_loadu_ps(src.as_ptr().add(i));
                _mm512_stream_ps(dst.as_mut_ptr().add(i), v);
            }
        }
        dst[end..n].copy_from_slice(&src[end..n]);
        // Orders the streaming stores before whatever this thread stores next (the dispatch's
        // completion), so a reader that synchronises with it sees the rows.
        _mm_sfence();
    }
    let s = Avx512::get().expect("ISA kernel called on a CPU without the ISA");
    // SAFETY: `s` exists, so the CPU has AVX-512F.
    unsafe { inner(s, dst, src) }
}

#[cfg(test)]
mod tests {
    use super::super::tests::bits;
    use super::*;

    #[inline(always)]
    fn by_row<S: Simd>(s: S, q: &[f32], k: &[f32], out: &mut [f32]) -> usize {
        score_blocks_by_row(s, q, k, 0.375, out)
    }
    #[inline(always)]
    fn by_column<S: Simd>(s: S, q: &[f32], k: &[f32], out: &mut [f32]) -> usize {
        score_blocks_by_column(s, q, k, 0.375, out)
    }
    isa_entry!(by_row_avx2, Avx2, "avx2,fma", by_row,
        (q: &[f32], k: &[f32], out: &mut [f32]) -> usize);
    isa_entry!(by_column_avx2, Avx2, "avx2,fma", by_column,
        (q: &[f32], k: &[f32], out: &mut [f32]) -> usize);
    isa_entry!(by_row_avx512, Avx512, "avx512f,avx512dq,avx2,fma", by_row,
        (q: &[f32], k: &[f32], out: &mut [f32]) -> usize);
    isa_entry!(by_column_avx512, Avx512, "avx512f,avx512dq,avx2,fma", by_column,
        (q: &[f32], k: &[f32], out: &mut [f32]) -> usize);

    /// The two block orders of the scores give the same bits (each row's accumulator takes the
    /// same FMA chain), for rows of 1 to 8 vectors (4 and 8 go by row) and row counts around
    /// the blocks; rows past the last whole block are left to the caller by both. Seen failing
    /// with the row order's vectors taken last to first.
    #[test]
    fn row_and_column_blocks_score_the_same_bits() {
        type Blocks = fn(&[f32], &[f32], &mut [f32]) -> usize;
        let val = |i: usize| ((i * 7919) % 2003) as f32 / 91.0 - 11.0;
        let levels: [(usize, bool, Blocks, Blocks); 2] = [
            (8, Avx2::get().is_some(), by_row_avx2, by_column_avx2),
            (16, Avx512::get().is_some(), by_row_avx512, by_column_avx512),
        ];
        for (w, present, by_row_fn, by_column_fn) in levels {
            if !present {
                continue;
            }
            for nv in 1..=8 {
                let d = nv * w;
                for rows in [0usize, 1, w - 1, w, w + 1, 3 * w + 5, 64] {
                    let q: Vec<f32> = (0..d).map(val).collect();
                    let k: Vec<f32> = (0..rows * d).map(|i| val(i + 17)).collect();
                    let (mut a, mut b) = (vec![f32::NAN; rows], vec![f32::NAN; rows]);
                    let (ra, rb) = (by_row_fn(&q, &k, &mut a), by_column_fn(&q, &k, &mut b));
                    assert_eq!(
                        (ra, rb),
                        (rows / w * w, rows / w * w),
                        "w {w} d {d} rows {rows}"
                    );
                    assert_eq!(bits(&a[..ra]), bits(&b[..rb]), "w {w} d {d} rows {rows}");
                }
            }
        }
    }
}
