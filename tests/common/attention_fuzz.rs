//! The property of the GroupQueryAttention / RotaryEmbedding parameter fuzzing, shared by the
//! stable smoke test (`tests/kernels/fuzz_attention_smoke.rs`, xorshift draws) and the cargo-fuzz target
//! (`fuzz/fuzz_targets/attention_params.rs`, draws from the fuzzer's bytes).
//!
//! Arbitrary heads, head sizes, batch / sequence / past lengths, total_sequence_length,
//! seqlens_k, position ids and cos/sin cache shapes go through the node's pure checks
//! (`gqa_plan::plan` and `plan_windowed`, `rotary_embedding::shape_of`); accepted calls whose buffers are small run
//! the kernels. Nothing may panic; an accepted GQA call's present buffer never exceeds past +
//! new rows (bounded allocation); inconsistent parameters end in `Err`.

#![allow(dead_code)]

use rcpu::ep::nodes::rotary_embedding::{shape_of, RotaryAttrs};
use rcpu::kernels::attention::gqa::{gqa_f32, GqaInputs, GqaOutputs, GqaRotary, GqaShape};
use rcpu::kernels::attention::gqa_plan::{plan, plan_windowed, GqaDims};
use rcpu::kernels::attention::gqa_window::gqa_f32_windowed;
use rcpu::kernels::attention::rotary::{rotary_f32, Positions, RotaryInputs};
use rcpu::runtime::par::Serial;

/// Elements a case may allocate per buffer before it runs the kernels.
pub(crate) const MAX_ELEMS: usize = 1 << 16;

/// A source of draws.
pub(crate) trait Draw {
    fn next(&mut self) -> u64;
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.below(v.len() as u64) as usize]
    }
    /// Mostly small, sometimes 0, sometimes huge.
    fn dim(&mut self) -> usize {
        match self.below(12) {
            0 => 0,
            1..=8 => self.below(6) as usize,
            9 => self.below(70) as usize,
            10 => 1usize << self.below(63),
            _ => usize::MAX - self.below(3) as usize,
        }
    }
}

fn elems(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

fn small(shape: &[usize]) -> bool {
    elems(shape).is_some_and(|n| n <= MAX_ELEMS)
}

fn fill(r: &mut dyn FnMut() -> u64, n: usize) -> Vec<f32> {
    (0..n).map(|_| (r() % 2001) as f32 / 1000.0 - 1.0).collect()
}

/// One GQA case. Returns whether the kernels ran.
pub(crate) fn gqa_case(d: &mut impl Draw) -> bool {
    let nkv = d.pick(&[0usize, 1, 1, 2, 2, 3, 1 << 40, usize::MAX]);
    let nh = nkv
        .saturating_mul(d.pick(&[0usize, 1, 2, 2, 3]))
        .saturating_add(d.pick(&[0usize, 0, 0, 0, 1]));
    let head = d.pick(&[0usize, 7, 8, 16, 16, 24, 32, 32, 64]);
    let packed = d.below(3) == 0;
    let (batch, seq) = (d.pick(&[0usize, 1, 1, 2, 3]), d.pick(&[0usize, 1, 1, 2, 5]));
    let per = if packed {
        nh.saturating_add(nkv.saturating_mul(2))
    } else {
        nh
    };
    let hidden = if d.below(8) == 0 {
        d.dim()
    } else {
        per.saturating_mul(head)
    };
    let kvh = nkv.saturating_mul(head);
    let q = vec![batch, seq, hidden];
    let mut k = vec![batch, seq, kvh];
    if d.below(10) == 0 {
        k[d.below(3) as usize] = d.dim();
    }
    let past_len = d.pick(&[0usize, 1, 4, 8, 9]);
    let past = (d.below(3) != 0).then(|| vec![batch, nkv, past_len, head]);
    let total = match d.below(9) {
        0 => -1,
        1 => 0,
        2 => seq as i32,
        3 | 4 => (past_len + seq) as i32,
        5 => past_len as i32,
        6 => 1_000_000,
        7 => i32::MAX,
        _ => d.below(20) as i32,
    };
    let totals = if d.below(20) == 0 {
        vec![total, total]
    } else {
        vec![total]
    };
    let rot_half = d.pick(&[0usize, 8, 16, 32, 7]);
    let max_pos = d.pick(&[0usize, 1, 8, 16, 64]);
    let cos = vec![max_pos, rot_half];
    let sin = if d.below(15) == 0 {
        vec![max_pos, rot_half + 8]
    } else {
        cos.clone()
    };
    let rotary = d.below(3) == 0;
    let dims = GqaDims {
        query: &q,
        kv: (!packed).then_some((&k[..], &k[..])),
        past: past.as_ref().map(|p| (&p[..], &p[..])),
        total: &totals,
        rotary: rotary.then_some((&cos[..], &sin[..])),
    };
    // A windowed cache (sliding_window_cache = 1) a third of the time.
    let window = (d.below(3) == 0).then(|| 1 + d.below(6) as usize);
    let pl = match window {
        Some(w) => plan_windowed(nh, nkv, w, &dims),
        None => plan(nh, nkv, &dims),
    };
    let Ok(pl) = pl else {
        return false;
    };
    // Bounded allocation: present never outgrows what the inputs hold.
    assert!(
        pl.present_len <= pl.past_len + pl.seq,
        "present {} rows from past {} + seq {}",
        pl.present_len,
        pl.past_len,
        pl.seq
    );
    let pshape = [batch, nkv, pl.present_len, head];
    let oshape = [batch, seq, nh, head];
    if ![&q[..], &k[..], &pshape[..], &oshape[..], &cos[..]]
        .iter()
        .all(|s| small(s))
        || !past.as_ref().is_none_or(|p| small(p))
    {
        return false;
    }
    let mut r = || d.next();
    let qv = fill(&mut r, elems(&q).unwrap_or(0));
    let kv = fill(&mut r, elems(&k).unwrap_or(0));
    let vv = fill(&mut r, elems(&k).unwrap_or(0));
    let pk = past.as_ref().map(|p| fill(&mut r, elems(p).unwrap_or(0)));
    let pv = past.as_ref().map(|p| fill(&mut r, elems(p).unwrap_or(0)));
    let cs = fill(&mut r, elems(&cos).unwrap_or(0));
    let n_seqlens = if r() % 10 == 0 { batch + 1 } else { batch };
    let seqlens: Vec<i32> = (0..n_seqlens).map(|_| (r() % 24) as i32 - 2).collect();
    let plen = elems(&pshape).unwrap_or(0);
    let (mut out, mut prk, mut prv) = (
        vec![0f32; elems(&oshape).unwrap_or(0)],
        vec![0f32; plen],
        vec![0f32; plen],
    );
    let sh = GqaShape {
        batch,
        seq,
        heads: nh,
        kv_heads: nkv,
        head: pl.head,
        past_len: pl.past_len,
        present_len: pl.present_len,
        first_prompt: pl.first_prompt,
        scale: 0.125,
        window: window.unwrap_or((r() % 6) as usize),
        softcap: [0.0, 0.5, 30.0][(r() % 3) as usize],
        smooth: r() % 4 == 0,
    };
    let interleaved = r() % 2 == 0;
    // A windowed call's present is sometimes the past buffer itself.
    let shared = window.is_some() && r() % 2 == 0 && pk.as_ref().is_some_and(|p| p.len() == plen);
    if let (true, Some(a), Some(b)) = (shared, &pk, &pv) {
        prk.clone_from(a);
        prv.clone_from(b);
    }
    let inputs = GqaInputs {
        q: &qv,
        kv: (!packed).then_some((&kv[..], &vv[..])),
        past: pk.as_deref().zip(pv.as_deref()).filter(|_| !shared),
        seqlens_k: &seqlens,
        rotary: pl.rot.map(|rot| GqaRotary {
            cos: &cs,
            sin: &cs,
            rot,
            interleaved,
        }),
        rope_at: None,
        sinks: None,
    };
    let outs = GqaOutputs {
        out: &mut out,
        present_k: &mut prk,
        present_v: &mut prv,
        shared,
    };
    let _ = match window {
        Some(_) => gqa_f32_windowed(None, &sh, &inputs, outs, &Serial),
        None => gqa_f32(&sh, &inputs, outs, &Serial),
    };
    true
}

/// One RotaryEmbedding case. Returns whether the kernel ran.
pub(crate) fn rotary_case(d: &mut impl Draw) -> bool {
    let attrs = RotaryAttrs {
        interleaved: d.below(2) == 0,
        num_heads: d.pick(&[0usize, 1, 2, 3, 4, usize::MAX]),
        rot: d.pick(&[0usize, 8, 16, 32, 7, 64]),
    };
    let rank = d.pick(&[3usize, 3, 4, 4, 2, 5]);
    let x: Vec<usize> = (0..rank)
        .map(|_| {
            if d.below(4) == 0 {
                d.dim()
            } else {
                d.pick(&[1usize, 2, 3, 16, 32, 64])
            }
        })
        .collect();
    let last = x.last().copied().unwrap_or(0);
    let half = match d.below(3) {
        0 => d.pick(&[0usize, 4, 8, 16, 32]),
        1 if attrs.rot != 0 => attrs.rot / 2,
        _ => last / 2,
    };
    let cos = vec![d.pick(&[0usize, 1, 4, 16, 64]), half];
    let Ok(sh) = shape_of(&attrs, &x, &cos) else {
        return false;
    };
    if !small(&x) || !small(&cos) {
        return false;
    }
    let mut r = || d.next();
    let xv = fill(&mut r, elems(&x).unwrap_or(0));
    let cs = fill(&mut r, elems(&cos).unwrap_or(0));
    let ids: Vec<i64> = (0..sh.batch.saturating_mul(sh.seq).min(MAX_ELEMS))
        .map(|_| (r() % 80) as i64 - 4)
        .collect();
    let pos = match r() % 4 {
        0 => Positions::Offset(i64::MAX - (r() % 3) as i64),
        1 => Positions::Offset((r() % 70) as i64 - 3),
        _ => Positions::PerToken(&ids),
    };
    let inputs = RotaryInputs {
        pos,
        cos: &cs,
        sin: &cs,
        x: &xv,
    };
    let mut out = vec![0f32; xv.len()];
    let _ = rotary_f32(&sh, &inputs, &mut out, &Serial);
    true
}
