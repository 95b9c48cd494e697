//! Which claimed nodes run together as one fused partition (provider option `fuse=on`).
//!
//! The nodes are put in a topological order that takes every ready node left to ORT before any
//! ready claimed node (Kahn's algorithm, ties by the graph's own node order); a partition is a
//! maximal run of claimed nodes that are consecutive in that order. A run of a topological order
//! is convex: a path between two of its nodes passes only through nodes ordered between them,
//! which are in the run, so contracting it into one node cannot create a cycle. Taking ORT's
//! ready nodes first moves nodes that only depend on graph inputs (a decoder's attention-mask
//! arithmetic) ahead of everything, so they do not cut the claimed nodes in two.

use std::collections::BTreeSet;

/// A topological order of `n` nodes whose predecessors are `preds` (indices; duplicates and
/// out-of-range entries are ignored), taking ready unclaimed nodes first; `None` on a cycle.
pub fn order(preds: &[Vec<usize>], claimed: &[bool]) -> Option<Vec<usize>> {
    let n = preds.len();
    let mut indeg = vec![0usize; n];
    let mut succs: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (v, ps) in preds.iter().enumerate() {
        let mut seen: Vec<usize> = ps.iter().copied().filter(|&p| p < n && p != v).collect();
        seen.sort_unstable();
        seen.dedup();
        indeg[v] = seen.len();
        for p in seen {
            succs[p].push(v);
        }
    }
    let is_claimed = |v: usize| claimed.get(v).copied().unwrap_or(false);
    let (mut ready_ort, mut ready_ep) = (BTreeSet::new(), BTreeSet::new());
    for v in (0..n).filter(|&v| indeg[v] == 0) {
        if is_claimed(v) {
            ready_ep.insert(v);
        } else {
            ready_ort.insert(v);
        }
    }
    let mut out = Vec::with_capacity(n);
    while let Some(v) = ready_ort.pop_first().or_else(|| ready_ep.pop_first()) {
        out.push(v);
        for &s in &succs[v] {
            indeg[s] -= 1;
            if indeg[s] == 0 {
                if is_claimed(s) {
                    ready_ep.insert(s);
                } else {
                    ready_ort.insert(s);
                }
            }
        }
    }
    (out.len() == n).then_some(out)
}

/// The partitions: maximal runs of claimed nodes consecutive in [`order`], each in that order
/// (a valid execution order of the partition). On a cycle (not a valid graph), every claimed
/// node is its own partition.
pub fn groups(preds: &[Vec<usize>], claimed: &[bool]) -> Vec<Vec<usize>> {
    let Some(order) = order(preds, claimed) else {
        return (0..preds.len())
            .filter(|&v| claimed.get(v).copied().unwrap_or(false))
            .map(|v| vec![v])
            .collect();
    };
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut run: Vec<usize> = Vec::new();
    for v in order {
        if claimed.get(v).copied().unwrap_or(false) {
            run.push(v);
        } else if !run.is_empty() {
            out.push(std::mem::take(&mut run));
        }
    }
    if !run.is_empty() {
        out.push(run);
    }
    out
}
