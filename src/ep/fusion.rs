//! Patterns of nodes inside one fused partition that run as one combined step (`abi::fused`).
//!
//! Pure graph logic over names: the partition's nodes as [`NodeDesc`]s in, the node indices of
//! each match out. A match only says the nodes *may* combine; the fused plan still asks the
//! kernels (`ep::nodes::swiglu::SwiGlu::new`) and runs the nodes one by one when they decline.

use std::collections::{HashMap, HashSet};

/// One node of a partition: its op, its domain ("" for ONNX), its input and output value names
/// (`None` for an omitted optional one).
#[derive(Debug, Clone)]
pub struct NodeDesc {
    pub op: String,
    pub domain: String,
    pub inputs: Vec<Option<String>>,
    pub outputs: Vec<Option<String>>,
}

impl NodeDesc {
    fn is(&self, domain: &str, op: &str) -> bool {
        self.domain == domain && self.op == op
    }

    fn input(&self, i: usize) -> Option<&str> {
        self.inputs.get(i).and_then(|v| v.as_deref())
    }

    fn output(&self, i: usize) -> Option<&str> {
        self.outputs.get(i).and_then(|v| v.as_deref())
    }
}

/// A SwiGLU MLP: indices of its gate MatMulNBits, up MatMulNBits, Sigmoid, `g * sigmoid(g)` Mul
/// and `silu * u` Mul, in that order.
pub type SwiGluMatch = [usize; 5];

/// For every value some node reads: the nodes that read it.
fn readers_of(nodes: &[NodeDesc]) -> HashMap<&str, HashSet<usize>> {
    let mut readers: HashMap<&str, HashSet<usize>> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        for v in n.inputs.iter().flatten() {
            readers.entry(v).or_default().insert(i);
        }
    }
    readers
}

/// Every SwiGLU MLP in `nodes`: `h = Mul(Mul(g, Sigmoid(g)), u)` (either operand order of each
/// Mul) with `g` and `u` two different `com.microsoft` MatMulNBits nodes over the same input and
/// without g_idx or bias inputs, where `g`, `Sigmoid(g)`, `g * Sigmoid(g)` and `u` are read by
/// nothing else in the partition and are not among `outer_outputs` (the values the partition
/// hands back to ORT). Matches never share a node.
pub fn find_swiglus(nodes: &[NodeDesc], outer_outputs: &HashSet<String>) -> Vec<SwiGluMatch> {
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        for v in n.outputs.iter().flatten() {
            producer.insert(v, i);
        }
    }
    let readers = readers_of(nodes);
    // `v` is inner and read by exactly the nodes `want`.
    let private = |v: &str, want: &[usize]| {
        !outer_outputs.contains(v)
            && readers
                .get(v)
                .is_some_and(|r| r.len() == want.len() && want.iter().all(|w| r.contains(w)))
    };
    let made_by = |v: &str, domain: &str, op: &str| {
        producer
            .get(v)
            .copied()
            .filter(|&i| nodes[i].is(domain, op) && nodes[i].output(0) == Some(v))
    };
    // A MatMulNBits the pair path can take: A present, no g_idx (4) or bias (5).
    let plain_nbits = |i: usize| {
        let n = &nodes[i];
        n.input(0).is_some() && n.input(4).is_none() && n.input(5).is_none()
    };
    let mut used = HashSet::new();
    let mut out = Vec::new();
    for (m2, n) in nodes.iter().enumerate() {
        if !n.is("", "Mul") || n.inputs.len() != 2 || n.output(0).is_none() {
            continue;
        }
        let (Some(x), Some(y)) = (n.input(0), n.input(1)) else {
            continue;
        };
        let found = [(x, y), (y, x)].into_iter().find_map(|(silu, up)| {
            let m1 = made_by(silu, "", "Mul")?;
            let u = made_by(up, "com.microsoft", "MatMulNBits")?;
            let m1n = &nodes[m1];
            let (p, q) = (m1n.input(0)?, m1n.input(1)?);
            if m1n.inputs.len() != 2 {
                return None;
            }
            [(p, q), (q, p)].into_iter().find_map(|(g_out, s_out)| {
                let s = made_by(s_out, "", "Sigmoid")?;
                if nodes[s].input(0) != Some(g_out) {
                    return None;
                }
                let g = made_by(g_out, "com.microsoft", "MatMulNBits")?;
                let ok = g != u
                    && plain_nbits(g)
                    && plain_nbits(u)
                    && nodes[g].input(0) == nodes[u].input(0)
                    && private(g_out, &[s, m1])
                    && private(s_out, &[m1])
                    && private(silu, &[m2])
                    && private(up, &[m2]);
                ok.then_some([g, u, s, m1, m2])
            })
        });
        if let Some(m) = found {
            if m.iter().all(|i| !used.contains(i)) {
                used.extend(m);
                out.push(m);
            }
        }
    }
    out
}

/// A MatMulNBits followed by the Add of a bias: the MatMulNBits node's index, the Add's, and which
/// of the Add's two inputs is the bias (the other is the MatMulNBits output).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BiasAdd {
    pub nbits: usize,
    pub add: usize,
    pub bias_input: usize,
}

/// Every `Add(MatMulNBits(..), c)` (either operand order) where the `com.microsoft` MatMulNBits
/// has no bias input (5) and its output is read by that Add alone and is not among
/// `outer_outputs`: the model builder's form of a biased projection (Qwen2's QKV). Whether `c` is a
/// bias (a constant of N floats) is for the caller to check. The `SwiGluMatch`es' projections are
/// never matched: their outputs are read by a Sigmoid and Muls, not an Add.
pub fn find_bias_adds(nodes: &[NodeDesc], outer_outputs: &HashSet<String>) -> Vec<BiasAdd> {
    let readers = readers_of(nodes);
    let mut out = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        if !n.is("com.microsoft", "MatMulNBits") || n.input(5).is_some() {
            continue;
        }
        let Some(y) = n.output(0) else {
            continue;
        };
        if outer_outputs.contains(y) || n.outputs.iter().flatten().count() != 1 {
            continue;
        }
        let Some(&add) = readers
            .get(y)
            .filter(|r| r.len() == 1)
            .and_then(|r| r.iter().next())
        else {
            continue;
        };
        let a = &nodes[add];
        if !a.is("", "Add") || a.inputs.len() != 2 || a.output(0).is_none() {
            continue;
        }
        let bias_input = match (a.input(0), a.input(1)) {
            (Some(x), Some(c)) if x == y && c != y => 1,
            (Some(c), Some(x)) if x == y && c != y => 0,
            _ => continue,
        };
        out.push(BiasAdd {
            nbits: i,
            add,
            bias_input,
        });
    }
    out
}

/// `order` (a topological order of the nodes) with each match's first four nodes moved to just
/// before its last one, in match order: the match's nodes then run back to back. Still
/// topological: the moved nodes read only the match's shared input (produced before the gate
/// node, so before the last node) and each other, and nothing outside the match reads them.
pub fn gather(order: &[usize], matches: &[SwiGluMatch]) -> Vec<usize> {
    let moved: HashSet<usize> = matches
        .iter()
        .flat_map(|m| m[..4].iter().copied())
        .collect();
    let by_last: HashMap<usize, &SwiGluMatch> = matches.iter().map(|m| (m[4], m)).collect();
    let mut out = Vec::with_capacity(order.len());
    for &i in order {
        if moved.contains(&i) {
            continue;
        }
        if let Some(m) = by_last.get(&i) {
            out.extend_from_slice(&m[..]);
        } else {
            out.push(i);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(domain: &str, op: &str, ins: &[&str], outs: &[&str]) -> NodeDesc {
        let names = |v: &[&str]| {
            v.iter()
                .map(|s| (!s.is_empty()).then(|| s.to_string()))
                .collect()
        };
        NodeDesc {
            op: op.into(),
            domain: domain.into(),
            inputs: names(ins),
            outputs: names(outs),
        }
    }

    /// norm -> gate, up -> sigmoid -> mul -> mul -> down, in the builder's node order.
    fn mlp(swap_silu: bool, swap_out: bool) -> Vec<NodeDesc> {
        let ms = "com.microsoft";
        let silu_in: &[&str] = if swap_silu { &["s", "g"] } else { &["g", "s"] };
        let out_in: &[&str] = if swap_out {
            &["u", "silu"]
        } else {
            &["silu", "u"]
        };
        vec![
            node(
                ms,
                "SkipSimplifiedLayerNormalization",
                &["r", "a", "w"],
                &["x"],
            ),
            node(ms, "MatMulNBits", &["x", "bg", "sg"], &["g"]),
            node(ms, "MatMulNBits", &["x", "bu", "su"], &["u"]),
            node("", "Sigmoid", &["g"], &["s"]),
            node("", "Mul", silu_in, &["silu"]),
            node("", "Mul", out_in, &["h"]),
            node(ms, "MatMulNBits", &["h", "bd", "sd"], &["y"]),
        ]
    }

    #[test]
    fn finds_the_mlp_in_every_operand_order() {
        for (a, b) in [(false, false), (true, false), (false, true), (true, true)] {
            let m = find_swiglus(&mlp(a, b), &HashSet::new());
            assert_eq!(m, vec![[1, 2, 3, 4, 5]], "swap_silu={a} swap_out={b}");
        }
    }

    #[test]
    fn declines_when_an_intermediate_escapes_or_the_shape_differs() {
        let outer = |v: &str| HashSet::from([v.to_string()]);
        for v in ["g", "s", "silu", "u"] {
            assert!(
                find_swiglus(&mlp(false, false), &outer(v)).is_empty(),
                "{v} is an output"
            );
        }
        // Another reader of the gate's output.
        let mut n = mlp(false, false);
        n.push(node("", "Relu", &["g"], &["z"]));
        assert!(find_swiglus(&n, &HashSet::new()).is_empty());
        // Gate and up over different inputs.
        let mut n = mlp(false, false);
        n[2].inputs[0] = Some("other".into());
        assert!(find_swiglus(&n, &HashSet::new()).is_empty());
        // A bias input on the up projection.
        let mut n = mlp(false, false);
        n[2].inputs.extend([None, None, Some("bias".into())]);
        assert!(find_swiglus(&n, &HashSet::new()).is_empty());
        // Sigmoid of something else than the gate.
        let mut n = mlp(false, false);
        n[3].inputs[0] = Some("u".into());
        assert!(find_swiglus(&n, &HashSet::new()).is_empty());
        // The same projection as gate and up: Mul(Mul(g, Sigmoid(g)), g).
        let mut n = mlp(false, false);
        n[5].inputs[1] = Some("g".into());
        assert!(find_swiglus(&n, &HashSet::new()).is_empty());
    }

    #[test]
    fn finds_bias_adds_in_either_order_and_only_private_ones() {
        let qkv = |bias_first: bool, extra_reader: bool| {
            let mut v = vec![
                node("com.microsoft", "MatMulNBits", &["x", "b", "s"], &["y"]),
                if bias_first {
                    node("", "Add", &["c", "y"], &["z"])
                } else {
                    node("", "Add", &["y", "c"], &["z"])
                },
                node("com.microsoft", "GroupQueryAttention", &["z"], &["o"]),
            ];
            if extra_reader {
                v.push(node("", "Sigmoid", &["y"], &["w"]));
            }
            v
        };
        let none = HashSet::new();
        assert_eq!(
            find_bias_adds(&qkv(false, false), &none),
            vec![BiasAdd {
                nbits: 0,
                add: 1,
                bias_input: 1
            }]
        );
        assert_eq!(find_bias_adds(&qkv(true, false), &none)[0].bias_input, 0);
        // y read elsewhere too, or handed back to ORT: the Add stays.
        assert!(find_bias_adds(&qkv(false, true), &none).is_empty());
        let outer: HashSet<String> = ["y".to_string()].into();
        assert!(find_bias_adds(&qkv(false, false), &outer).is_empty());
        // A MatMulNBits with a bias of its own, or an Add of y with itself: none.
        let mut own = qkv(false, false);
        own[0] = node(
            "com.microsoft",
            "MatMulNBits",
            &["x", "b", "s", "", "", "c0"],
            &["y"],
        );
        assert!(find_bias_adds(&own, &none).is_empty());
        let mut twice = qkv(false, false);
        twice[1] = node("", "Add", &["y", "y"], &["z"]);
        assert!(find_bias_adds(&twice, &none).is_empty());
        // The SwiGLU MLP's projections are read by a Sigmoid and Muls: none.
        assert!(find_bias_adds(&mlp(false, false), &none).is_empty());
    }

    #[test]
    fn gather_moves_a_match_next_to_its_last_node() {
        // The up projection scheduled late, after an unrelated node 7.
        let order = [0, 1, 3, 4, 7, 2, 5, 6];
        assert_eq!(
            gather(&order, &[[1, 2, 3, 4, 5]]),
            vec![0, 7, 1, 2, 3, 4, 5, 6]
        );
        assert_eq!(gather(&order, &[]), order.to_vec());
    }
}
