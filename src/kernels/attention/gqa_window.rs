//! GroupQueryAttention over a windowed KV cache (`sliding_window_cache = 1`, which
//! onnxruntime-genai's model builder writes for the sliding-window layers of Gemma, Mistral-style
//! and gpt-oss models on CPU), with ORT 1.31's CPU semantics (probed against the wheel):
//!
//! - the past / present buffers hold `C` rows (`C >= local_window_size = W`), the most recent
//!   positions of the sequence at cache rows `0..end`; `seqlens_k` stays absolute (`P + S - 1`
//!   for `P` past positions and `S` new ones), so it may exceed the buffer;
//! - `end` is a function of the absolute length alone ([`cache_end`]): up to `C` it is the length;
//!   past it, whole blocks of `gap = C - W + 1` rows are reclaimed at once, so a decode step moves
//!   memory only once every `gap` steps (rows older than the window stay resident until then;
//!   the window hides them);
//! - a step appends its `S` rows after the `kept = end(P + S) - S` latest resident rows, which it
//!   first moves to the front of the cache (nothing moves on a step that reclaims nothing);
//! - when that would drop rows the step's first query still reads (`kept < min(P, W - 1)`: a
//!   prompt longer than the cache, or several tokens at once near a reclaim), the step runs against
//!   a staging cache of all `end(P)` resident rows plus the new ones, and only the rows the
//!   post-step layout keeps are written back;
//! - attention then runs in cache-relative coordinates (the window depends only on the distance
//!   between a query and a key), while the rotary step takes absolute positions: `P + s`, or `s`
//!   when `S` equals `total_sequence_length` (ORT's first-prompt rule, which it applies here too);
//! - present is the cache after the step; with separate past and present buffers, present's rows
//!   past the written ones are zero.
//!
//! The attention itself is [`super::gqa`]'s, over the moved (or staged) rows as a present buffer
//! shared with its past.

use crate::kernels::isa::Isa;
use crate::memory::try_vec;
use crate::runtime::par::Par;

use super::gqa::{gqa_f32_prefill, GqaInputs, GqaOutputs, GqaShape, Prefill};

/// One batch's rows in a windowed step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// First resident row carried into the rows attention runs against.
    pub seed_offset: usize,
    /// Resident rows carried (to row 0 of the cache, or of the staging cache).
    pub seed_rows: usize,
    /// First staging row written back to the cache (staged steps).
    pub write_offset: usize,
    /// Staging rows written back (0 when the step runs in place).
    pub write_rows: usize,
}

/// One call's plan: per batch its [`Step`], the cache-relative `seqlens_k`, the rotary position
/// of its first new token; and the staging capacity when the step needs one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub seqlens: Vec<i32>,
    pub rope_at: Vec<usize>,
    pub staged: Option<usize>,
}

/// Where the next row is appended after `len` positions of a sequence, in a cache of `cap` rows
/// that reclaims `gap` rows at a time: `len` up to `cap`, then `len` less the whole blocks of
/// `gap` that bring it back within `cap` (so it stays in `cap - gap + 1 ..= cap`).
pub fn cache_end(len: u64, cap: u64, gap: u64) -> u64 {
    if len <= cap || gap == 0 {
        return len.min(cap);
    }
    len - gap * (len - cap).div_ceil(gap)
}

/// Plans a step of `seq` new tokens per batch into a cache of `cap` rows with a window of
/// `window` rows (`1 <= window <= cap`), the rotary positions from 0 when `first_prompt`.
pub fn plan(
    seqlens_k: &[i32],
    batch: usize,
    seq: usize,
    cap: usize,
    window: usize,
    first_prompt: bool,
) -> Result<Plan, String> {
    if seqlens_k.len() != batch {
        return Err(format!(
            "seqlens_k has {} elements, expected batch size {batch}",
            seqlens_k.len()
        ));
    }
    if window == 0 || window > cap || seq == 0 {
        return Err(format!(
            "a windowed cache of {cap} rows needs a window of 1..={cap} rows (got {window}) and \
             new tokens (got {seq})"
        ));
    }
    let (cap64, seq64) = (cap as u64, seq as u64);
    let gap = cap64 - window as u64 + 1;
    let mut raw = Vec::new();
    raw.try_reserve_exact(batch)
        .map_err(|_| format!("cannot allocate {batch} batch entries"))?;
    let mut staged = false;
    for (b, &sk) in seqlens_k.iter().enumerate() {
        let total =
            u64::try_from(sk).map_err(|_| format!("seqlens_k[{b}] = {sk} is negative"))? + 1;
        let past = total.checked_sub(seq64).ok_or_else(|| {
            format!("seqlens_k[{b}] = {sk} is too small for sequence_length {seq}")
        })?;
        let before = cache_end(past, cap64, gap);
        let after = cache_end(past + seq64, cap64, gap);
        // Signed: a step longer than the cache keeps fewer than none of its resident rows.
        let kept = after as i64 - seq64 as i64;
        staged |= kept < past.min(window as u64 - 1) as i64;
        raw.push((past, before, kept));
    }
    let resident = raw.iter().map(|&(_, before, _)| before).max().unwrap_or(0);
    let mut p = Plan {
        steps: Vec::new(),
        seqlens: Vec::new(),
        rope_at: Vec::new(),
        staged: None,
    };
    let fits = |x: u64| usize::try_from(x).map_err(|_| format!("windowed cache rows {x}"));
    if staged {
        p.staged = Some(fits(resident + seq64)?);
    }
    for &(past, before, kept) in &raw {
        // `before - kept` >= 0: a step keeps at most what was resident, plus what it drops.
        let dropped = u64::try_from(before as i64 - kept).map_err(|_| {
            format!("windowed cache: {kept} rows kept of {before} resident (inconsistent)")
        })?;
        let step = if staged {
            Step {
                seed_offset: 0,
                seed_rows: fits(before)?,
                write_offset: fits(dropped)?,
                write_rows: fits(before + seq64 - dropped)?,
            }
        } else {
            Step {
                seed_offset: fits(dropped)?,
                seed_rows: fits(before - dropped)?,
                write_offset: 0,
                write_rows: 0,
            }
        };
        let rel = i32::try_from(step.seed_rows as u64 + seq64 - 1)
            .map_err(|_| format!("windowed cache rows {}", step.seed_rows))?;
        p.steps.push(step);
        p.seqlens.push(rel);
        p.rope_at.push(if first_prompt { 0 } else { fits(past)? });
    }
    Ok(p)
}

/// Runs one call over a windowed cache on one ISA variant (`None`: the process's level). `sh`
/// describes the call as the node sees it: `past_len = present_len = C`, `first_prompt` when `S`
/// equals `total_sequence_length`, `window` the node's `local_window_size`. `inp.past` is the
/// past input (`None` when present is the past buffer, `o.shared`); `inp.rope_at` is ignored
/// (the plan places the rotary positions). Returns the variant that ran.
pub fn gqa_f32_windowed(
    isa: Option<Isa>,
    sh: &GqaShape,
    inp: &GqaInputs<'_>,
    o: GqaOutputs<'_>,
    par: &dyn Par,
) -> Result<&'static str, String> {
    let (head, cap, seq) = (sh.head, sh.present_len, sh.seq);
    let p = plan(
        inp.seqlens_k,
        sh.batch,
        seq,
        cap,
        sh.window,
        sh.first_prompt,
    )?;
    if let Some(r) = inp.rotary {
        // ORT checks the absolute lengths against the cos / sin rows, whatever the first-prompt
        // rule makes of the positions.
        let rows = r.cos.len() / (r.rot / 2).max(1);
        if let Some((b, sk)) = inp
            .seqlens_k
            .iter()
            .enumerate()
            .find(|&(_, &sk)| sk as i64 >= rows as i64)
        {
            return Err(format!(
                "seqlens_k[{b}] = {sk} is out of range for the rotary caches' {rows} rows"
            ));
        }
    }
    let units = sh.batch.checked_mul(sh.kv_heads);
    let unit = cap.checked_mul(head);
    let (units, unit) = units.zip(unit).ok_or("windowed cache sizes overflow")?;
    if unit == 0 || sh.kv_heads == 0 {
        return Err(format!(
            "a windowed cache needs rows ({cap}), a head size ({head}) and kv heads ({})",
            sh.kv_heads
        ));
    }
    let cache = units
        .checked_mul(unit)
        .ok_or("windowed cache sizes overflow")?;
    for (what, len) in [
        ("present_key", o.present_k.len()),
        ("present_value", o.present_v.len()),
    ] {
        if len != cache {
            return Err(format!("{what} has {len} elements, expected {cache}"));
        }
    }
    if let Some((pk, pv)) = inp.past {
        if pk.len() != cache || pv.len() != cache {
            return Err(format!(
                "past_key / past_value have {} / {} elements, expected {cache}",
                pk.len(),
                pv.len()
            ));
        }
    }
    let rel = GqaInputs {
        past: None,
        seqlens_k: &p.seqlens,
        rope_at: Some(&p.rope_at),
        ..*inp
    };
    let batch_of = |u: usize| u / sh.kv_heads;
    let GqaOutputs {
        out,
        present_k,
        present_v,
        shared,
    } = o;
    let mut caches = [(0usize, present_k), (1, present_v)];
    let Some(scap) = p.staged else {
        // In place: the kept rows to the front of the cache (from the past input when present is
        // a buffer of its own, whose rows after the step's are zero).
        for (which, dst) in caches.iter_mut().map(|(w, d)| (*w, &mut **d)) {
            for (u, d) in dst.chunks_exact_mut(unit).enumerate() {
                let st = p.steps[batch_of(u)];
                let from = st.seed_offset * head..(st.seed_offset + st.seed_rows) * head;
                match inp.past {
                    Some((pk, pv)) => {
                        let src = if which == 0 { pk } else { pv };
                        d[..st.seed_rows * head].copy_from_slice(&src[u * unit..][from]);
                        d[(st.seed_rows + seq) * head..].fill(0.0);
                    }
                    None if st.seed_offset > 0 => d.copy_within(from, 0),
                    None => {}
                }
            }
        }
        let [(_, pk), (_, pv)] = caches;
        return attend(isa, sh, cap, &rel, out, pk, pv, par);
    };
    // Staged: every resident row and the new ones, then the kept tail written back.
    let sunit = scap
        .checked_mul(head)
        .ok_or("staging cache sizes overflow")?;
    let slen = units
        .checked_mul(sunit)
        .ok_or("staging cache sizes overflow")?;
    let mut staged = [try_vec(slen, 0.0f32)?, try_vec(slen, 0.0f32)?];
    for ((which, src_all), st_all) in caches.iter().map(|(w, d)| (*w, &**d)).zip(&mut staged) {
        let src_all = match inp.past {
            Some((pk, pv)) if !shared => {
                if which == 0 {
                    pk
                } else {
                    pv
                }
            }
            _ => src_all,
        };
        for (u, st_rows) in st_all.chunks_exact_mut(sunit).enumerate() {
            let rows = p.steps[batch_of(u)].seed_rows * head;
            st_rows[..rows].copy_from_slice(&src_all[u * unit..u * unit + rows]);
        }
    }
    let [sk, sv] = &mut staged;
    let name = attend(isa, sh, scap, &rel, out, sk, sv, par)?;
    for ((_, dst), st_all) in caches.into_iter().zip(&staged) {
        for (u, d) in dst.chunks_exact_mut(unit).enumerate() {
            let st = p.steps[batch_of(u)];
            let from = u * sunit + st.write_offset * head;
            d[..st.write_rows * head].copy_from_slice(&st_all[from..from + st.write_rows * head]);
            if !shared {
                d[st.write_rows * head..].fill(0.0);
            }
        }
    }
    Ok(name)
}

/// The call's attention over a cache of `rows` rows (`pk`, `pv`) that already holds its resident
/// rows: the new rows appended after them, cache-relative lengths (`rel`).
#[allow(clippy::too_many_arguments)]
fn attend(
    isa: Option<Isa>,
    sh: &GqaShape,
    rows: usize,
    rel: &GqaInputs<'_>,
    out: &mut [f32],
    pk: &mut [f32],
    pv: &mut [f32],
    par: &dyn Par,
) -> Result<&'static str, String> {
    let inner = GqaShape {
        past_len: rows,
        present_len: rows,
        first_prompt: false,
        ..*sh
    };
    let outs = GqaOutputs {
        out,
        present_k: pk,
        present_v: pv,
        shared: true,
    };
    gqa_f32_prefill(isa, Prefill::Grouped, &inner, rel, outs, par)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reclaim rule: filling up to the capacity, then back by whole gaps.
    #[test]
    fn cache_end_reclaims_whole_gaps() {
        // C = 8, W = 5: gap 4.
        let ends: Vec<u64> = (0..=17).map(|n| cache_end(n, 8, 4)).collect();
        assert_eq!(ends, [0, 1, 2, 3, 4, 5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7, 8, 5]);
        // C = W: every step past the capacity reclaims one row.
        assert!((8..40).all(|n| cache_end(n, 8, 1) == 8));
    }

    /// A decode step that reclaims nothing moves nothing; one that reclaims moves the kept rows
    /// to the front; a prompt longer than the cache is staged and its tail written back.
    #[test]
    fn plans_in_place_and_staged_steps() {
        // C = 8, W = 5, decode at past 6: no reclaim.
        let p = plan(&[6], 1, 1, 8, 5, false).unwrap();
        assert_eq!(p.staged, None);
        assert_eq!(p.steps[0].seed_offset, 0);
        assert_eq!(
            (p.steps[0].seed_rows, p.seqlens[0], p.rope_at[0]),
            (6, 6, 6)
        );
        // Past 8 (cache full): end(9) = 5, kept 4 = window - 1, moved from row 4.
        let p = plan(&[8], 1, 1, 8, 5, false).unwrap();
        assert_eq!(p.staged, None);
        assert_eq!((p.steps[0].seed_offset, p.steps[0].seed_rows), (4, 4));
        assert_eq!((p.seqlens[0], p.rope_at[0]), (4, 8));
        // A first prompt of 11 into 8 rows: staged (11 rows), the last end(11) = 7 written back.
        let p = plan(&[10], 1, 11, 8, 5, true).unwrap();
        assert_eq!(p.staged, Some(11));
        assert_eq!(p.steps[0].write_offset, 4);
        assert_eq!(p.steps[0].write_rows, 7);
        assert_eq!((p.seqlens[0], p.rope_at[0]), (10, 0));
        assert!(
            plan(&[1], 1, 3, 8, 5, false).is_err(),
            "seqlens_k too small"
        );
        assert!(
            plan(&[-1], 1, 1, 8, 5, false).is_err(),
            "negative seqlens_k"
        );
        assert!(
            plan(&[3], 1, 1, 4, 5, false).is_err(),
            "window wider than the cache"
        );
    }
}
