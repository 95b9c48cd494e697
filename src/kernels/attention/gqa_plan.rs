//! GroupQueryAttention's checks of one call's shapes and lengths, as ORT's CPU EP makes them
//! (probed on 1.31.1), before any output is sized: pure, so the fuzz smoke test reaches them.

/// The shapes (and `total_sequence_length`'s elements) of one call.
#[derive(Clone, Copy, Debug)]
pub struct GqaDims<'a> {
    pub query: &'a [usize],
    /// Key and value; `None`: packed QKV.
    pub kv: Option<(&'a [usize], &'a [usize])>,
    pub past: Option<(&'a [usize], &'a [usize])>,
    pub total: &'a [i32],
    /// cos / sin caches (`do_rotary`).
    pub rotary: Option<(&'a [usize], &'a [usize])>,
}

/// What the call computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GqaPlan {
    pub batch: usize,
    pub seq: usize,
    pub head: usize,
    pub past_len: usize,
    pub total_len: usize,
    /// Rows of present_key / present_value (`<= past_len + seq`).
    pub present_len: usize,
    pub first_prompt: bool,
    /// Rotary dimension (`2 * cos_cache.dims[1]`).
    pub rot: Option<usize>,
}

fn bsd(s: &[usize], what: &str) -> Result<(usize, usize, usize), String> {
    match *s {
        [b, q, d] => Ok((b, q, d)),
        _ => Err(format!("{what} has shape {s:?}, expected rank 3")),
    }
}

/// Checks one call of a node with `heads` query and `kv_heads` KV heads.
pub fn plan(heads: usize, kv_heads: usize, d: &GqaDims<'_>) -> Result<GqaPlan, String> {
    let (batch, seq, head, past_len) = shapes(heads, kv_heads, d)?;
    let total_len = total(d.total)?;
    check_lengths(batch, seq, past_len, total_len)?;
    // Bounded by the inputs: total <= past + seq (checked above).
    let present_len = total_len.max(past_len);
    finish((batch, seq, head, past_len), total_len, present_len, d)
}

/// Checks one call of a node with a windowed KV cache (`sliding_window_cache = 1`) of window
/// `window`, as ORT does (`super::gqa_window`): the past buffers are the cache (required, at
/// least `window` rows; present has their rows), new tokens required, `total_sequence_length`
/// positive and no longer tied to the buffers (`seqlens_k` is checked per batch when the step is
/// planned); several tokens after a past context still need batch 1.
pub fn plan_windowed(
    heads: usize,
    kv_heads: usize,
    window: usize,
    d: &GqaDims<'_>,
) -> Result<GqaPlan, String> {
    let (batch, seq, head, past_len) = shapes(heads, kv_heads, d)?;
    if d.past.is_none() {
        return Err("sliding_window_cache = 1 requires past_key and past_value".into());
    }
    if past_len < window {
        return Err(format!(
            "sliding_window_cache: the KV cache's {past_len} rows must be at least \
             local_window_size ({window})"
        ));
    }
    if seq == 0 {
        return Err("sliding_window_cache = 1 needs new tokens (sequence_length 0)".into());
    }
    let total_len = total(d.total)?;
    positive_total(total_len)?;
    one_batch_after_past(batch, seq, total_len)?;
    finish((batch, seq, head, past_len), total_len, past_len, d)
}

/// The plan of checked shapes (batch, sequence, head size, past rows) and lengths: the first
/// prompt is ORT's `S == total_sequence_length`, the rotary dimension comes from the caches.
fn finish(
    (batch, seq, head, past_len): (usize, usize, usize, usize),
    total_len: usize,
    present_len: usize,
    d: &GqaDims<'_>,
) -> Result<GqaPlan, String> {
    Ok(GqaPlan {
        batch,
        seq,
        head,
        past_len,
        total_len,
        present_len,
        first_prompt: seq == total_len,
        rot: rotary(d.rotary, head, total_len)?,
    })
}

/// The shapes' checks of [`plan`]: (batch, sequence, head size, past buffer rows).
fn shapes(
    heads: usize,
    kv_heads: usize,
    d: &GqaDims<'_>,
) -> Result<(usize, usize, usize, usize), String> {
    if heads == 0 || kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
        return Err(format!(
            "num_heads {heads} is not a positive multiple of kv_num_heads {kv_heads}"
        ));
    }
    let (batch, seq, hidden) = bsd(d.query, "query")?;
    let per = match d.kv {
        Some(_) => Some(heads),
        None => kv_heads.checked_mul(2).and_then(|x| x.checked_add(heads)),
    }
    .ok_or_else(|| format!("num_heads {heads} + 2 * kv_num_heads {kv_heads} overflows"))?;
    if !hidden.is_multiple_of(per) || hidden / per == 0 || !(hidden / per).is_multiple_of(8) {
        return Err(format!(
            "query hidden size {hidden} over {per} heads is not a head size that is a multiple of 8"
        ));
    }
    let head = hidden / per;
    let kv_hidden = kv_heads
        .checked_mul(head)
        .ok_or("kv hidden size overflows")?;
    if let Some((k, v)) = d.kv {
        for (s, what) in [(k, "key"), (v, "value")] {
            if bsd(s, what)? != (batch, seq, kv_hidden) {
                return Err(format!(
                    "{what} has shape {s:?}, expected [{batch}, {seq}, {kv_hidden}]"
                ));
            }
        }
    }
    let past_len = match d.past {
        Some((pk, pv)) => {
            let p = pk.get(2).copied().unwrap_or(0);
            for (s, what) in [(pk, "past_key"), (pv, "past_value")] {
                if s != [batch, kv_heads, p, head] {
                    return Err(format!(
                        "{what} has shape {s:?}, expected [{batch}, {kv_heads}, {p}, {head}]"
                    ));
                }
            }
            p
        }
        None => 0,
    };
    Ok((batch, seq, head, past_len))
}

/// `total_sequence_length`'s one element.
fn total(t: &[i32]) -> Result<usize, String> {
    match t {
        [t] if *t >= 0 => Ok(*t as usize),
        t => Err(format!(
            "total_sequence_length must be one non-negative element, got {t:?}"
        )),
    }
}

/// The rotary dimension of cos / sin caches that fit head size `head` and `total_len`.
fn rotary(
    caches: Option<(&[usize], &[usize])>,
    head: usize,
    total_len: usize,
) -> Result<Option<usize>, String> {
    Ok(match caches {
        None => None,
        Some((cos, sin)) => {
            if cos.len() != 2
                || sin != cos
                || !head.is_multiple_of(16)
                || cos[1] == 0
                || !cos[1].is_multiple_of(8)
                || cos[1] > head / 2
                || cos[0] < total_len
            {
                return Err(format!(
                    "cos_cache {cos:?} / sin_cache {sin:?} do not fit head size {head} \
                     (multiple of 16) and total length {total_len}"
                ));
            }
            Some(2 * cos[1])
        }
    })
}

/// ORT's rules for `total_sequence_length` against the query and past lengths: positive, at
/// least the new tokens, and either past + new (a growing cache) or within the past buffer (a
/// static, max-length cache). A prompt of several tokens after a past context needs batch 1, any
/// other call that is not the first prompt has one token.
fn check_lengths(
    batch: usize,
    seq: usize,
    past_len: usize,
    total_len: usize,
) -> Result<(), String> {
    positive_total(total_len)?;
    if total_len < seq {
        return Err(format!(
            "total_sequence_length {total_len} is shorter than sequence_length {seq}"
        ));
    }
    if past_len.checked_add(seq) != Some(total_len) && total_len > past_len {
        return Err(format!(
            "total_sequence_length {total_len} must equal past length {past_len} + sequence_length \
             {seq} (growing cache) or be at most the past length (static cache)"
        ));
    }
    one_batch_after_past(batch, seq, total_len)?;
    if seq != total_len && seq == 0 {
        return Err(
            "sequence_length 0 is only valid for a first prompt (it is not one here)".into(),
        );
    }
    Ok(())
}

/// `total_sequence_length` must be positive.
fn positive_total(total_len: usize) -> Result<(), String> {
    if total_len == 0 {
        return Err("total_sequence_length must be positive, got 0".into());
    }
    Ok(())
}

/// ORT's batch rule: several new tokens after a past context (a call that is not the first
/// prompt) need batch 1.
fn one_batch_after_past(batch: usize, seq: usize, total_len: usize) -> Result<(), String> {
    if seq != total_len && seq > 1 && batch != 1 {
        return Err(
            "batch size must be 1 when sequence_length > 1 and a past context is given".into(),
        );
    }
    Ok(())
}
