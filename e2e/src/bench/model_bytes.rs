//! What a model's initializers weigh, and what one decode token of an LLM reads of them.
//!
//! An initializer's bytes are its raw bytes, the `length` of its external data (a model written
//! with its weights in a side file, as onnxruntime-genai's builder writes them), or, for values held
//! in a typed field, its element count times the element size.
//!
//! A decode token reads every initializer once, whole, except the ones a node reads a row at a
//! time: the table of a Gather (axis 0), the data, scales and zero points of a GatherBlockQuantized
//! (gather axis 0; the builder's tied int4 embedding gathers from the lm_head's own weights, seen
//! through a Reshape) and the cos / sin caches of a GroupQueryAttention. Those count one row each
//! (their bytes over the rows of the gathered table), on top of their whole bytes when another
//! node also reads them whole (the tied lm_head). A token runs `k` of the `E` experts of a
//! com.microsoft QMoE (or MoE) node, so of each expert tensor of one (the weights, scales, biases
//! and zero points of fc1, fc2 and fc3: QMoE inputs 2..=13, MoE inputs 2..=7, each `[E, ...]`)
//! it reads `k / E`. This is the count `gen_llm.rs` makes for the models it writes (a test holds
//! the two equal), so a model from any writer is measured against the same bytes.

use std::collections::{BTreeMap, HashMap};

use crate::onnx::{dtype, GraphProto, NodeProto, TensorProto, EXTERNAL};

/// Bits of one element of ONNX type `elem` (int4 / uint4: 4); 0 for types the bench does not
/// size.
fn elem_bits(elem: i32) -> u64 {
    match elem {
        dtype::UINT8 | dtype::INT8 | 9 => 8,
        4 | 5 | dtype::FLOAT16 | 16 => 16,
        dtype::FLOAT | dtype::INT32 | 12 => 32,
        dtype::INT64 | 11 | 13 => 64,
        21 | 22 => 4,
        _ => 0,
    }
}

/// The bytes of initializer `t` (module doc).
pub fn init_bytes(t: &TensorProto) -> u64 {
    if !t.raw_data.is_empty() {
        return t.raw_data.len() as u64;
    }
    if t.data_location == EXTERNAL {
        let length = t.external_data.iter().find(|e| e.key == "length");
        if let Some(n) = length.and_then(|e| e.value.parse::<u64>().ok()) {
            return n;
        }
    }
    let count = t
        .dims
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(u64::try_from(d).ok()?));
    count
        .and_then(|n| n.checked_mul(elem_bits(t.data_type)))
        .map_or(0, |bits| bits.div_ceil(8))
}

/// Whether graph `g` keeps any initializer's bytes in another file.
pub fn has_external_data(g: &GraphProto) -> bool {
    g.initializer.iter().any(|t| t.data_location == EXTERNAL)
}

/// The inputs of `n` a token reads one row of (module doc), as (input index, index of the input
/// whose first dimension counts the rows).
fn row_inputs(n: &NodeProto) -> &'static [(usize, usize)] {
    let axis = |name: &str| {
        n.attribute
            .iter()
            .find(|a| a.name == name)
            .map_or(0, |a| a.i)
    };
    match (n.op_type.as_str(), n.domain.as_str()) {
        ("Gather", "" | "ai.onnx") if axis("axis") == 0 => &[(0, 0)],
        ("GatherBlockQuantized", "com.microsoft") if axis("gather_axis") == 0 => {
            &[(0, 0), (2, 0), (3, 0)]
        }
        ("GroupQueryAttention", "com.microsoft") => &[(7, 7), (8, 8)],
        _ => &[],
    }
}

/// For a QMoE or MoE node (com.microsoft), the inputs holding its experts' tensors and the
/// experts a token runs (its `k`, schema default 1).
fn expert_inputs(n: &NodeProto) -> Option<(std::ops::RangeInclusive<usize>, u64)> {
    let inputs = match (n.op_type.as_str(), n.domain.as_str()) {
        ("QMoE", "com.microsoft") => 2..=13,
        ("MoE", "com.microsoft") => 2..=7,
        _ => return None,
    };
    let k = n
        .attribute
        .iter()
        .find(|a| a.name == "k")
        .map_or(1, |a| a.i);
    Some((inputs, u64::try_from(k).unwrap_or(1).max(1)))
}

/// The QMoE expert tensors an EP packs (the codes, scales and zero points of fc1, fc2 and fc3:
/// inputs 2, 3, 5, 6, 8, 9, 11, 12, 13; not the biases), each initializer once: `[all experts'
/// bytes, the share a decode token reads (k / E)]`.
pub fn qmoe_packable_bytes(g: &GraphProto) -> [u64; 2] {
    let inits: HashMap<&str, &TensorProto> =
        g.initializer.iter().map(|t| (t.name.as_str(), t)).collect();
    let mut seen = BTreeMap::new();
    for n in g.node.iter().filter(|n| n.op_type == "QMoE") {
        let Some((_, k)) = expert_inputs(n) else {
            continue;
        };
        for i in [2, 3, 5, 6, 8, 9, 11, 12, 13] {
            let Some(t) = n.input.get(i).and_then(|x| inits.get(x.as_str())) else {
                continue;
            };
            seen.insert(t.name.as_str(), [init_bytes(t), expert_share(t, k)]);
        }
    }
    seen.values().fold([0u64; 2], |[w, t], [b, r]| {
        [w.saturating_add(*b), t.saturating_add(*r)]
    })
}

/// The bytes of expert tensor `t` that `k` of its experts span: its first dimension counts the
/// experts (E equal slices), of which a token reads `min(k, E)`.
fn expert_share(t: &TensorProto, k: u64) -> u64 {
    let e = t
        .dims
        .first()
        .and_then(|&d| u64::try_from(d).ok())
        .filter(|&d| d > 0)
        .unwrap_or(1);
    init_bytes(t) / e * k.min(e)
}

/// Bytes one decode token reads of `g`'s initializers (module doc).
pub fn token_bytes(g: &GraphProto) -> u64 {
    let inits: HashMap<&str, &TensorProto> =
        g.initializer.iter().map(|t| (t.name.as_str(), t)).collect();
    // A Reshape of an initializer passes it on: its readers read the initializer.
    let mut source: HashMap<&str, &str> = inits.keys().map(|k| (*k, *k)).collect();
    for n in g.node.iter().filter(|n| n.op_type == "Reshape") {
        if let (Some(data), Some(out)) = (n.input.first(), n.output.first()) {
            if let Some(s) = source.get(data.as_str()).copied() {
                source.insert(out.as_str(), s);
            }
        }
    }
    let of = |name: &str| source.get(name).map(|s| inits[s]);
    // Each initializer's whole bytes once, and one row once (BTreeMaps: a fixed order).
    let (mut whole, mut rows) = (BTreeMap::new(), BTreeMap::new());
    for n in &g.node {
        let row = row_inputs(n);
        let experts = expert_inputs(n);
        for (i, input) in n.input.iter().enumerate() {
            let Some(t) = of(input) else { continue };
            if n.op_type == "Reshape" && i == 0 {
                continue; // passed on, read by the Reshape's readers
            }
            if let Some((_, k)) = experts.as_ref().filter(|(at, _)| at.contains(&i)) {
                rows.insert(t.name.as_str(), expert_share(t, *k));
                continue;
            }
            match row.iter().find(|(at, _)| *at == i) {
                Some(&(_, table)) => {
                    let count = n
                        .input
                        .get(table)
                        .and_then(|name| of(name))
                        .and_then(|t| t.dims.first())
                        .and_then(|&d| u64::try_from(d).ok())
                        .filter(|&d| d > 0)
                        .unwrap_or(1);
                    rows.insert(t.name.as_str(), init_bytes(t) / count);
                }
                None => {
                    whole.insert(t.name.as_str(), init_bytes(t));
                }
            }
        }
    }
    // Saturating: external lengths come from the model file.
    whole
        .values()
        .chain(rows.values())
        .fold(0u64, |t, b| t.saturating_add(*b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::gen_llm::Llm;
    use crate::onnx::{ModelProto, StringStringEntryProto};
    use prost::Message;

    fn graph(l: &Llm) -> (GraphProto, u64) {
        let g = l.generate();
        let m = ModelProto::decode(&g.bytes[..]).unwrap();
        (m.graph.unwrap(), g.weight_bytes)
    }

    /// The graph's count is the generator's own, whatever form the embedding and lm_head take.
    #[test]
    fn token_bytes_are_the_generators_count() {
        for rest in [
            "preset=qwen2-0.5b,layers=2,vocab=512",
            "preset=qwen2-0.5b,layers=1,vocab=512,tied=0",
            "preset=qwen2-0.5b,layers=1,vocab=512,emb=f16",
            "preset=qwen2-0.5b,layers=1,vocab=512,emb=q4",
            "preset=qwen2-0.5b,layers=1,vocab=512,emb=q8,lm_bits=8",
            "preset=qwen3-0.6b,layers=2,vocab=256",
            "preset=llama-3.2-1b,layers=1,vocab=256,bias_add=1",
            // Mixture of experts (gen_moe.rs): k of the E experts' tensors.
            "preset=gpt-oss-20b,layers=2,vocab=300,hidden=256,heads=4,kv=2,inter=128,experts=8,\
             topk=2",
            "preset=gpt-oss-20b,layers=1,vocab=300,hidden=256,heads=4,kv=2,inter=256,experts=4,\
             topk=3,sinks=0",
            "preset=phi3.5-moe,layers=2,vocab=300,hidden=256,heads=4,kv=2,head=64,inter=128,\
             experts=4",
            "preset=phi3.5-moe,layers=1,vocab=300,hidden=256,heads=4,kv=2,head=64,inter=128,\
             experts=6,fc3=0",
        ] {
            let l = Llm::parse("s", rest).unwrap();
            let (g, expected) = graph(&l);
            assert_eq!(token_bytes(&g), expected, "{rest}");
        }
    }

    /// A token reads `k / E` of each QMoE expert tensor and the router whole: with `k` raised
    /// to `E` the count grows by exactly the experts' other `E - k` shares.
    #[test]
    fn qmoe_counts_k_of_e_experts() {
        let l = Llm::parse(
            "s",
            "preset=gpt-oss-20b,layers=2,vocab=300,hidden=256,heads=4,kv=2,inter=128,experts=8,\
             topk=2",
        )
        .unwrap();
        let (mut g, expected) = graph(&l);
        assert_eq!(token_bytes(&g), expected);
        let sizes: HashMap<String, u64> = g
            .initializer
            .iter()
            .map(|t| (t.name.clone(), init_bytes(t)))
            .collect();
        let mut experts = 0;
        for n in g.node.iter_mut().filter(|n| n.op_type == "QMoE") {
            experts += n.input[2..]
                .iter()
                .filter_map(|i| sizes.get(i))
                .sum::<u64>();
            n.attribute.iter_mut().find(|a| a.name == "k").unwrap().i = 8;
        }
        // fc1 codes, scales and bias, fc2 the same, per layer.
        let per_layer = 8 * (256 * 128 + 256 * 8 * 4 + 256 * 4 + 256 * 64 + 256 * 4 * 4 + 256 * 4);
        assert_eq!(experts, 2 * per_layer);
        assert_eq!(token_bytes(&g), expected + experts - experts * 2 / 8);
        // A MoE node (float experts) counts the same way.
        for n in g.node.iter_mut().filter(|n| n.op_type == "QMoE") {
            n.op_type = "MoE".into();
            n.input.truncate(8);
        }
        let fc = |i: usize| -> u64 {
            g.node
                .iter()
                .filter(|n| n.op_type == "MoE")
                .filter_map(|n| sizes.get(&n.input[i]))
                .sum()
        };
        // MoE's inputs 2..=7 are fc1 weight, bias, fc2 weight, bias, fc3: the scales (3, 6)
        // read as a bias and a weight there, so the same initializers count k / E.
        let moe_experts: u64 = (2..8).map(fc).sum();
        assert_eq!(moe_experts, experts);
        assert_eq!(token_bytes(&g), expected + experts - experts * 2 / 8);
    }

    /// Sizes come from external data and typed fields when there are no raw bytes; a table read
    /// only by a Gather counts one row.
    #[test]
    fn external_and_typed_sizes_and_gathered_rows() {
        let l = Llm::parse("s", "preset=qwen2-0.5b,layers=1,vocab=512,tied=0").unwrap();
        let (mut g, expected) = graph(&l);
        let t = g
            .initializer
            .iter_mut()
            .find(|t| t.name == "embed_tokens")
            .unwrap();
        let (rows, bytes) = (t.dims[0] as u64, init_bytes(t));
        assert_eq!(bytes, t.dims.iter().product::<i64>() as u64 * 4);
        t.raw_data.clear();
        assert_eq!(init_bytes(t), bytes, "typed: dims times the element size");
        t.data_location = EXTERNAL;
        t.external_data = vec![StringStringEntryProto {
            key: "length".into(),
            value: "96".into(),
        }];
        assert_eq!(init_bytes(t), 96);
        assert_eq!(token_bytes(&g), expected - bytes / rows + 96 / rows);
        assert!(has_external_data(&g));
        // Read whole by another node too: whole plus a row.
        g.node[0].input.push("embed_tokens".into());
        assert_eq!(token_bytes(&g), expected - bytes / rows + 96 + 96 / rows);
    }

    #[test]
    fn element_sizes() {
        let t = |elem, dims: &[i64]| TensorProto {
            dims: dims.to_vec(),
            data_type: elem,
            ..Default::default()
        };
        assert_eq!(init_bytes(&t(dtype::FLOAT16, &[3, 5])), 30);
        assert_eq!(init_bytes(&t(21, &[3, 5])), 8);
        assert_eq!(init_bytes(&t(dtype::INT64, &[])), 8);
        assert_eq!(init_bytes(&t(dtype::FLOAT, &[-1, 4])), 0);
        assert_eq!(init_bytes(&t(999, &[4])), 0);
    }
}
