//! A QMoE node's routing: for every token the k experts with the largest router logits and the
//! weight each one's output is mixed with, as ORT's CPU kernel computes them.
//!
//! * Selection: the k largest logits; equal logits order by the larger expert index first (ORT
//!   sorts (logit, index) pairs descending, so a tie goes to the higher index).
//! * Weights without `router_weights`: a softmax over the k selected logits only,
//!   `exp(l - l_max) / sum`, in f32 (0 when the sum is 0); `normalize_routing_weights` does not
//!   change them (they already sum to one).
//! * Weights with `router_weights`: that tensor's values at the selected experts, divided by
//!   their sum when `normalize_routing_weights` is set (0 when the sum is 0).
//! * A route whose weight is not above 1e-8 (a NaN weight included, as from an infinite logit)
//!   contributes nothing: its expert does not run for that token.
//!
//! A NaN logit has no place in that order: ORT's comparison (C++20 `pair` ordering, so a NaN
//! compares unordered with everything and is never "greater") leaves the experts wherever
//! libstdc++'s `partial_sort` (a heap select, then a heap sort) happens to put them. A row with
//! a NaN therefore takes [`heap_select_top_k`], that algorithm step for step, so rcpu picks the
//! very experts ORT picks; a NaN among them makes every weight of the token NaN, and the token's
//! output row is zero.

/// Routes below or at this weight (or NaN) are dropped, as ORT drops them.
pub const MIN_ROUTE_WEIGHT: f32 = 1e-8;

/// The routes of `tokens` tokens: `k` (expert, weight) pairs a token, best first. A dropped
/// route has weight 0 (see [`Routes::live`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Routes {
    pub top_k: usize,
    pub expert: Vec<u32>,
    pub weight: Vec<f32>,
}

impl Routes {
    /// Whether route `r` (token `r / k`, rank `r % k`) runs its expert.
    pub fn live(&self, r: usize) -> bool {
        self.weight[r] > MIN_ROUTE_WEIGHT
    }
}

/// Routes `tokens` tokens whose logits are `logits` (`tokens x experts`) to their `k` best
/// experts. `router_weights`, when given, holds `tokens x experts` mixing weights (see the
/// module doc). `Err` for a NaN logit or when a buffer cannot be allocated; panics unless the
/// slices hold `tokens x experts` values and `1 <= k <= experts`.
pub fn route_tokens(
    logits: &[f32],
    router_weights: Option<&[f32]>,
    tokens: usize,
    experts: usize,
    k: usize,
    normalize: bool,
) -> Result<Routes, String> {
    assert!(k >= 1 && k <= experts, "k={k} for {experts} experts");
    assert_eq!(logits.len(), tokens * experts);
    if let Some(w) = router_weights {
        assert_eq!(w.len(), tokens * experts);
    }
    let routes = tokens
        .checked_mul(k)
        .ok_or_else(|| format!("QMoE: {tokens} tokens x k={k} routes overflow"))?;
    let alloc = |what: &str| format!("QMoE: cannot allocate {routes} route {what}");
    let mut expert = crate::memory::try_vec(routes, 0u32).map_err(|_| alloc("experts"))?;
    let mut weight = crate::memory::try_vec(routes, 0f32).map_err(|_| alloc("weights"))?;
    // The k best of one token, best first: (logit, expert).
    let mut best: Vec<(f32, u32)> = Vec::new();
    best.try_reserve_exact(k + 1)
        .map_err(|_| alloc("scratch"))?;
    // A row with a NaN: all its (logit, expert) pairs, as ORT's partial sort leaves them.
    let mut heap: Vec<(f32, u32)> = Vec::new();
    for t in 0..tokens {
        let row = &logits[t * experts..(t + 1) * experts];
        best.clear();
        if row.iter().any(|l| l.is_nan()) {
            heap_select_top_k(row, k, &mut heap).map_err(|_| alloc("scratch"))?;
            best.extend_from_slice(&heap[..k]);
        } else {
            for (e, &l) in row.iter().enumerate() {
                // Ahead of every kept entry it beats: a larger logit, or an equal one (the
                // higher index wins a tie, and `e` is the highest index seen so far).
                if best.len() == k && l < best[k - 1].0 {
                    continue;
                }
                let at = best.iter().position(|&(b, _)| l >= b).unwrap_or(best.len());
                best.insert(at, (l, e as u32));
                best.truncate(k);
            }
        }
        let (out_e, out_w) = (
            &mut expert[t * k..(t + 1) * k],
            &mut weight[t * k..(t + 1) * k],
        );
        for (j, &(_, e)) in best.iter().enumerate() {
            out_e[j] = e;
        }
        match router_weights {
            None => {
                let max = best[0].0;
                let mut sum = 0f32;
                for (j, &(l, _)) in best.iter().enumerate() {
                    out_w[j] = (l - max).exp();
                    sum += out_w[j];
                }
                let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
                out_w.iter_mut().for_each(|w| *w *= inv);
            }
            Some(rw) => {
                let row_w = &rw[t * experts..(t + 1) * experts];
                for (j, &(_, e)) in best.iter().enumerate() {
                    out_w[j] = row_w[e as usize];
                }
                if normalize {
                    let sum: f32 = out_w.iter().sum();
                    let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
                    out_w.iter_mut().for_each(|w| *w *= inv);
                }
            }
        }
        // A dropped route (NaN weights included) is weight 0 from here on.
        for w in out_w.iter_mut() {
            if w.is_nan() || *w <= MIN_ROUTE_WEIGHT {
                *w = 0.0;
            }
        }
    }
    Ok(Routes {
        top_k: k,
        expert,
        weight,
    })
}

/// `a > b` for (logit, expert) pairs as ORT's `std::greater<std::pair<float, int64_t>>` compiles
/// under C++20: the logits decide unless they are equivalent (a NaN on either side is unordered:
/// false, with no tie-break), equal logits (0.0 and -0.0 too) by the index.
fn greater(a: (f32, u32), b: (f32, u32)) -> bool {
    if a.0.is_nan() || b.0.is_nan() {
        return false;
    }
    if a.0 != b.0 {
        return a.0 > b.0;
    }
    a.1 > b.1
}

/// libstdc++'s `__adjust_heap` over `v[..len]` with `greater` as the comparison: the hole at
/// `hole` sinks to a leaf along the preferred children, then `value` rises from there.
fn adjust_heap(v: &mut [(f32, u32)], mut hole: usize, len: usize, value: (f32, u32)) {
    let top = hole;
    let mut child = hole;
    while len >= 2 && child < (len - 1) / 2 {
        child = 2 * (child + 1);
        if greater(v[child], v[child - 1]) {
            child -= 1;
        }
        v[hole] = v[child];
        hole = child;
    }
    if len.is_multiple_of(2) && len >= 2 && child == (len - 2) / 2 {
        child = 2 * (child + 1);
        v[hole] = v[child - 1];
        hole = child - 1;
    }
    // `__push_heap`: up towards `top` while the parent compares greater-than the value.
    while hole > top {
        let parent = (hole - 1) / 2;
        if !greater(v[parent], value) {
            break;
        }
        v[hole] = v[parent];
        hole = parent;
    }
    v[hole] = value;
}

/// The order `std::partial_sort(first, first + k, last, greater)` leaves the pairs of `row` in
/// (libstdc++: `__heap_select` over `[0, k)` and `[k, E)`, then `__sort_heap` of `[0, k)`), into
/// `v` (its first k are the selection, best first). Needed only where a NaN makes the order
/// depend on the algorithm. `Err` when `v` cannot hold the row.
fn heap_select_top_k(
    row: &[f32],
    k: usize,
    v: &mut Vec<(f32, u32)>,
) -> Result<(), std::collections::TryReserveError> {
    v.clear();
    v.try_reserve_exact(row.len())?;
    v.extend(row.iter().enumerate().map(|(e, &l)| (l, e as u32)));
    // make_heap over [0, k)
    if k >= 2 {
        let mut parent = (k - 2) / 2;
        loop {
            let value = v[parent];
            adjust_heap(v, parent, k, value);
            if parent == 0 {
                break;
            }
            parent -= 1;
        }
    }
    for i in k..v.len() {
        if greater(v[i], v[0]) {
            let value = v[i];
            v[i] = v[0];
            adjust_heap(v, 0, k, value);
        }
    }
    // sort_heap over [0, k)
    let mut last = k;
    while last > 1 {
        last -= 1;
        let value = v[last];
        v[last] = v[0];
        adjust_heap(v, 0, last, value);
    }
    Ok(())
}
