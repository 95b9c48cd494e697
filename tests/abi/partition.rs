//! Fused partitions (`ep::partition`): maximal runs of claimed nodes in a topological order that
//! takes ORT's ready nodes first; every partition convex (contracting it leaves the graph
//! acyclic), so ORT can fuse it.

use rcpu::ep::partition::{groups, order};

/// Whether contracting each group into one node leaves the graph acyclic (the condition ORT
/// puts on `AddNodesToFuse`): no path leaves a group and comes back into it.
fn convex(preds: &[Vec<usize>], gs: &[Vec<usize>]) -> bool {
    let n = preds.len();
    let mut succs = vec![Vec::new(); n];
    for (v, ps) in preds.iter().enumerate() {
        for &p in ps {
            succs[p].push(v);
        }
    }
    gs.iter().all(|g| {
        // From every node outside g reachable from g, g must not be reachable again.
        let mut seen = vec![false; n];
        let mut stack: Vec<usize> = g
            .iter()
            .flat_map(|&v| succs[v].iter().copied())
            .filter(|v| !g.contains(v))
            .collect();
        while let Some(v) = stack.pop() {
            if g.contains(&v) {
                return false;
            }
            if !std::mem::replace(&mut seen[v], true) {
                stack.extend(succs[v].iter().copied());
            }
        }
        true
    })
}

/// A decoder-shaped graph: mask arithmetic left to ORT that depends only on graph inputs
/// (nodes 0, 1) feeds the attention of every layer; the claimed nodes must form ONE partition,
/// though ORT's own order puts the mask nodes between claimed ones.
#[test]
fn mask_nodes_do_not_cut_the_decoder() {
    // 0 embed(c) 1 mask_a(o) 2 norm(c) 3 mask_b(o, <-1) 4 qkv(c, <-2) 5 attn(c, <-4,3)
    // 6 mlp(c, <-5) 7 attn2(c, <-6,3) 8 head(c, <-7)
    let preds = vec![
        vec![],
        vec![],
        vec![0],
        vec![1],
        vec![2],
        vec![4, 3],
        vec![5],
        vec![6, 3],
        vec![7],
    ];
    let claimed = [true, false, true, false, true, true, true, true, true];
    let gs = groups(&preds, &claimed);
    assert_eq!(gs, vec![vec![0, 2, 4, 5, 6, 7, 8]]);
    assert!(convex(&preds, &gs));
}

/// An ORT node between claimed nodes splits them; a group never spans a path through it.
#[test]
fn an_ort_node_on_the_path_splits_the_run() {
    // 0(c) -> 1(o) -> 2(c) -> 3(c); 0 -> 3
    let preds = vec![vec![], vec![0], vec![1], vec![2, 0]];
    let claimed = [true, false, true, true];
    let gs = groups(&preds, &claimed);
    assert_eq!(gs, vec![vec![0], vec![2, 3]]);
    assert!(convex(&preds, &gs));
    // Merging 0 with {2, 3} would not be convex (the path 0 -> 1 -> 2 leaves and re-enters).
    assert!(!convex(&preds, &[vec![0, 2, 3]]));
}

/// Independent branches with an ORT node on one: everything claimed that does not depend on
/// it runs in one group, what depends on it in another, and the order is topological.
#[test]
fn groups_are_convex_and_ordered_on_random_graphs() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..300 {
        let n = 1 + (next() % 24) as usize;
        let preds: Vec<Vec<usize>> = (0..n)
            .map(|v| (0..v).filter(|_| next() % 4 == 0).collect())
            .collect();
        let claimed: Vec<bool> = (0..n).map(|_| next() % 3 != 0).collect();
        let ord = order(&preds, &claimed).expect("acyclic");
        let pos: Vec<usize> = {
            let mut p = vec![0; n];
            for (i, &v) in ord.iter().enumerate() {
                p[v] = i;
            }
            p
        };
        for (v, ps) in preds.iter().enumerate() {
            assert!(ps.iter().all(|&p| pos[p] < pos[v]), "order not topological");
        }
        let gs = groups(&preds, &claimed);
        let mut covered: Vec<usize> = gs.iter().flatten().copied().collect();
        covered.sort_unstable();
        let want: Vec<usize> = (0..n).filter(|&v| claimed[v]).collect();
        assert_eq!(covered, want, "every claimed node in exactly one group");
        assert!(convex(&preds, &gs), "{preds:?} {claimed:?} -> {gs:?}");
    }
}

#[test]
fn a_cycle_leaves_single_nodes() {
    let preds = vec![vec![1], vec![0], vec![]];
    assert!(order(&preds, &[true, true, true]).is_none());
    assert_eq!(groups(&preds, &[true, true, false]), vec![vec![0], vec![1]]);
}
