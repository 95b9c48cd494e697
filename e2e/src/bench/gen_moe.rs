//! The mixture-of-experts layer of the `llm:` presets `gpt-oss-20b` and `phi3.5-moe`: what the
//! onnxruntime-genai model builder (0.18) writes in place of the MLP for `-p int4 -e cpu`, one
//! com.microsoft.QMoE node per layer fed by an int4 MatMulNBits router, with seeded weights.
//!
//! ```text
//! gpt-oss (builders/gptoss.py GPTOSSModel.make_moe_router / make_moe_subgraph):
//!   h2 [B, S, hidden] -> router MatMulNBits (N = experts) -> Add (router bias)
//!      -> Reshape (constant [-1, experts]) -> router logits [B * S, experts]
//!   QMoE(h2, logits, fc1 codes, fc1 scales, fc1 bias, fc2 codes, fc2 scales, fc2 bias,
//!        "" x 6)  activation swiglu, swiglu_fusion 1 (fc1 rows interleaved gate / linear, 2 * I),
//!        alpha 1.702, beta 1.0, swiglu_limit 7.0, normalize_routing_weights 1
//! Phi-3.5-MoE (builders/phi.py Phi3MoELongRoPEModel.make_moe_router / make_moe_subgraph):
//!   h2 -> router MatMulNBits (no bias) -> Shape -> Gather(2) -> Unsqueeze([0])
//!      -> Concat([-1], ...) -> Reshape of the router output -> logits [B * S, experts]
//!   QMoE(h2, logits, fc1 (gate) codes, scales, "", fc2 codes, scales, "", fc3 (up) codes,
//!        scales, "", "" x 3)  activation silu, swiglu_fusion 0, use_sparse_mixer 1, k 2
//! ```
//!
//! Both (base.py `make_qmoe_op`, `make_qmoe_weights`, `_matmulnbits_blockwise_quantize`):
//! `expert_weight_bits` 4 and `block_size` the builder's default qmoe_block_size (32 on CPU);
//! no `quant_type` (left at 'int') and no `weights_prepacked` (written for CUDA only); expert
//! codes uint8 `[E, N, K / 2]` (ORT's MatMulNBits nibble order, implicit zero point 8), scales
//! float32 `[E, N, K / block]` (the builder rounds them to f16 and stores them in the io dtype),
//! no zero points; the QMoE input the 3-D normed hidden state, the router logits 2-D.
//!
//! Two departures, both stated where they are made: the builder's phimoe path quantizes
//! `w.weight.T` ([hidden, inter] for w1) with a quantizer that takes [N, K], which gives fc1
//! `[E, hidden, inter / 2]`, a shape the QMoE schema does not accept; the layout here is the
//! schema's (fc1 / fc3 `[E, inter, hidden / 2]`, fc2 `[E, hidden, inter / 2]`). And ORT 1.31.1's
//! CPU QMoE refuses the fc3 form at run time ("FC3 gating is not yet implemented on CPU for
//! QMoE"): `fc3=0` writes the same SiLU-gated experts as the builder writes other SiLU MoEs
//! (base.py `make_interleaved_swiglu_moe_preprocessing`, Qwen-MoE): gate and up interleaved in
//! fc1 (2 * I rows), activation swiglu with alpha 1, beta 0 and no limit, which is
//! `silu(gate) * up` exactly.
//!
//! Weights keep activations near unit size: the router as every generated int4 weight
//! (`gen::nbits_weights`: scales about `1 / sqrt(21 K)`), so a normed input gives unit-variance
//! logits that spread the tokens over the experts; the experts' codes average zero
//! (`expert_weights` says why) with scales about `1 / sqrt(17.5 K)`.
//!
//! A decode token reads `k` of the `E` experts of each layer: the bytes counted for a token are
//! the router's whole and `k / E` of every expert tensor (codes, scales, biases), as
//! `model_bytes::token_bytes` counts a QMoE node.

use crate::onnx::{dtype, Attr, GraphBuilder};

use super::gen::{nbits_layer, nbits_weights};
use super::gen_decoder::{vec_init, Decoder};

/// Which builder's MoE layer (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoeStyle {
    GptOss,
    PhiMoe,
}

/// One MoE layer's shape (the hidden and expert intermediate sizes are the decoder layer's).
#[derive(Debug, Clone, PartialEq)]
pub struct Moe {
    pub style: MoeStyle,
    pub experts: usize,
    /// Experts per token (the QMoE `k`).
    pub top_k: usize,
    /// QMoE `block_size` (the builder's `qmoe_block_size`).
    pub block: usize,
    /// Phi-3.5-MoE's up projection as fc3 (`fc3=1`, the builder's form) or interleaved with the
    /// gate in fc1 (`fc3=0`; module doc). Always false for gpt-oss (fused by the model).
    pub fc3: bool,
}

impl Moe {
    /// gpt-oss-20b's: 32 experts, top 4.
    pub fn gpt_oss() -> Moe {
        Moe {
            style: MoeStyle::GptOss,
            experts: 32,
            top_k: 4,
            block: 32,
            fc3: false,
        }
    }

    /// Phi-3.5-MoE's: 16 experts, top 2, the up projection as fc3.
    pub fn phi() -> Moe {
        Moe {
            style: MoeStyle::PhiMoe,
            experts: 16,
            top_k: 2,
            block: 32,
            fc3: true,
        }
    }

    /// Sets a MoE key (`experts`, `topk`, `qmoe_block`, `fc3`); false when `key` is not one.
    pub fn set_key(&mut self, key: &str, v: usize) -> bool {
        match key {
            "experts" => self.experts = v,
            "topk" => self.top_k = v,
            "qmoe_block" => self.block = v,
            "fc3" => self.fc3 = v != 0,
            _ => return false,
        }
        true
    }

    /// Whether `key` is a MoE key (for the message when a dense preset gets one).
    pub fn is_key(key: &str) -> bool {
        matches!(key, "experts" | "topk" | "qmoe_block" | "fc3")
    }

    /// The checks a MoE layer of `hidden` and expert intermediate `inter` must pass.
    pub fn validate(&self, hidden: usize, inter: usize) -> Result<(), String> {
        if self.experts == 0 || self.top_k == 0 || self.top_k > self.experts {
            return Err(format!(
                "topk={} must be in 1..=experts ({})",
                self.top_k, self.experts
            ));
        }
        if ![32, 64, 128].contains(&self.block) {
            return Err(format!(
                "qmoe_block={} must be 32, 64 or 128 (the builder's CPU block sizes)",
                self.block
            ));
        }
        if !hidden.is_multiple_of(self.block) || !inter.is_multiple_of(self.block) {
            return Err(format!(
                "hidden ({hidden}) and inter ({inter}) must be multiples of qmoe_block ({})",
                self.block
            ));
        }
        if self.style == MoeStyle::PhiMoe && self.top_k != 2 {
            return Err(format!(
                "topk={}: Phi-3.5-MoE's sparse mixer takes k = 2 only (ORT refuses the session \
                 otherwise)",
                self.top_k
            ));
        }
        if self.style == MoeStyle::GptOss && self.fc3 {
            return Err("fc3=1 is Phi-3.5-MoE's form; gpt-oss fuses gate and linear in fc1".into());
        }
        Ok(())
    }

    /// fc1's rows (2 * inter when gate and up share fc1).
    fn fc1_rows(&self, inter: usize) -> usize {
        if self.fc3 {
            inter
        } else {
            2 * inter
        }
    }

    /// Whether the experts have fc1 / fc2 biases (gpt-oss's).
    fn biased(&self) -> bool {
        self.style == MoeStyle::GptOss
    }

    /// Bytes of one expert's tensors (codes, scales, biases of fc1, fc2 and fc3).
    fn expert_bytes(&self, hidden: usize, inter: usize) -> Option<usize> {
        // [n, k] int4 codes and f32 block scales.
        let w = |n: usize, k: usize| n.checked_mul(k / 2 + k / self.block * 4);
        let fc1 = self.fc1_rows(inter);
        let mut b = w(fc1, hidden)?.checked_add(w(hidden, inter)?)?;
        if self.fc3 {
            b = b.checked_add(w(inter, hidden)?)?;
        }
        if self.biased() {
            b = b.checked_add((fc1 + hidden) * 4)?;
        }
        Some(b)
    }

    /// Bytes of one layer's MoE initializers (all experts and the router), for the size check.
    pub fn layer_bytes(&self, hidden: usize, inter: usize, dense_block: usize) -> Option<usize> {
        let router = self
            .experts
            .checked_mul(hidden.div_ceil(dense_block) * (dense_block / 2 + 4) + 4)?;
        self.expert_bytes(hidden, inter)?
            .checked_mul(self.experts)?
            .checked_add(router)
    }

    /// ` moe=E/k[ fc3][ qb=B]` for labels (`sep` = " ") and cache keys (`sep` = ",": every field).
    pub fn label(&self, sep: &str) -> String {
        let mut s = format!("{sep}experts={}{sep}topk={}", self.experts, self.top_k);
        if sep == "," || self.block != 32 {
            s += &format!("{sep}qmoe_block={}", self.block);
        }
        if sep == "," || self.fc3 {
            s += &format!("{sep}fc3={}", self.fc3 as u8);
        }
        s
    }

    /// The constants the layers' routers share (the builder's `/model/constants/...`); returns
    /// their bytes. Called once, before the layers.
    pub fn shared_constants(&self, g: &mut GraphBuilder) -> u64 {
        match self.style {
            MoeStyle::GptOss => {
                g.initializer_i64("moe.router.shape", &[2], &[-1, self.experts as i64]);
                16
            }
            MoeStyle::PhiMoe => {
                g.initializer_i64("moe.const.2", &[], &[2])
                    .initializer_i64("moe.const.[0]", &[1], &[0])
                    .initializer_i64("moe.const.[-1]", &[1], &[-1]);
                24
            }
        }
    }

    /// One MoE layer of decoder layer `d` (its hidden size, its `inter` as each expert's, its
    /// block, accuracy level and codes for the router MatMulNBits, its codes for the experts):
    /// `{p}h2` ([B, S, hidden], the post-attention norm's output) through the router and the
    /// QMoE node into `out` ([B, S, hidden]). Returns the bytes a decode token reads of its
    /// initializers (module doc).
    pub fn layer(&self, g: &mut GraphBuilder, p: &str, out: &str, d: &Decoder, seed: u64) -> u64 {
        let name = |s: &str| format!("{p}{s}");
        let (h2, e) = (name("h2"), self.experts);
        let (hidden, inter, codes) = (d.hidden, d.inter, d.codes);
        let logits = self.router(g, p, &h2, d, seed);
        let mut token = logits.1;
        // Expert tensors: (name, bytes) of codes and scales per fc; a token reads k of E.
        let mut whole = 0u64;
        let mut experts = |g: &mut GraphBuilder, fc: &str, n: usize, k: usize, s: u64| {
            // [E * n, k / block] blocks: the [E, n, k / 2] codes and [E, n, k / block] scales.
            let (b, scales) = nbits_weights(k, e * n, self.block, 4, codes, s);
            let (wn, sn) = (
                name(&format!("moe.{fc}.qweight")),
                name(&format!("moe.{fc}.scales")),
            );
            let dims = [e as i64, n as i64, (k / 2) as i64];
            whole += (b.len() + scales.len() * 4) as u64;
            g.initializer_raw(&wn, dtype::UINT8, &dims, b);
            let sdims = [e as i64, n as i64, (k / self.block) as i64];
            g.initializer_f32(&sn, &sdims, &scales);
            (wn, sn)
        };
        let fc1_rows = self.fc1_rows(inter);
        let fc1 = experts(g, "fc1", fc1_rows, hidden, seed ^ 0xfc1);
        let fc2 = experts(g, "fc2", hidden, inter, seed ^ 0xfc2);
        let fc3 = self
            .fc3
            .then(|| experts(g, "fc3", inter, hidden, seed ^ 0xfc3));
        let (b1, b2) = (name("moe.fc1.bias"), name("moe.fc2.bias"));
        if self.biased() {
            whole += bias_init(g, &b1, [e, fc1_rows], seed ^ 0xb1);
            whole += bias_init(g, &b2, [e, hidden], seed ^ 0xb2);
        }
        // Exact: every expert tensor holds E equal slices.
        token += whole / e as u64 * self.top_k as u64;
        let bias = |b: String| if self.biased() { b } else { String::new() };
        let (b1, b2) = (bias(b1), bias(b2));
        let (w3, s3) = fc3.unwrap_or_default();
        let inputs = [
            h2.as_str(),
            &logits.0,
            &fc1.0,
            &fc1.1,
            &b1,
            &fc2.0,
            &fc2.1,
            &b2,
            &w3,
            &s3,
            "",
            "",
            "",
            "",
        ];
        g.node(
            "QMoE",
            "com.microsoft",
            &name("moe/QMoE"),
            &inputs,
            &[out],
            &self.attrs(),
        );
        token
    }

    /// The QMoE attributes in the builder's order (`make_qmoe_op`: the node's keyword
    /// arguments, then `swiglu_limit` when the config has one, then `block_size`).
    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        let (alpha, beta, act, normalize, fusion, sparse) = match (self.style, self.fc3) {
            (MoeStyle::GptOss, _) => (1.702, 1.0, "swiglu", 1, 1, 0),
            (MoeStyle::PhiMoe, true) => (1.0, 0.0, "silu", 0, 0, 1),
            (MoeStyle::PhiMoe, false) => (1.0, 0.0, "swiglu", 0, 1, 1),
        };
        let mut a = vec![
            ("activation_alpha", Attr::Float(alpha)),
            ("activation_beta", Attr::Float(beta)),
            ("activation_type", Attr::Str(act.into())),
            ("expert_weight_bits", Attr::Int(4)),
            ("k", Attr::Int(self.top_k as i64)),
            ("normalize_routing_weights", Attr::Int(normalize)),
            ("swiglu_fusion", Attr::Int(fusion)),
            ("use_sparse_mixer", Attr::Int(sparse)),
        ];
        if self.style == MoeStyle::GptOss {
            a.push(("swiglu_limit", Attr::Float(7.0)));
        }
        a.push(("block_size", Attr::Int(self.block as i64)));
        a
    }

    /// The router from `h2`: returns the logits' edge ([B * S, experts]) and the bytes a token
    /// reads of its initializers (all of them).
    fn router(
        &self,
        g: &mut GraphBuilder,
        p: &str,
        h2: &str,
        d: &Decoder,
        seed: u64,
    ) -> (String, u64) {
        let name = |s: &str| format!("{p}{s}");
        let e = self.experts;
        let (hidden, block, acc, codes) = (d.hidden, d.block, d.acc, d.codes);
        let (mm, logits) = (name("moe/router/MatMul"), name("moe/router/Reshape"));
        let s = seed.wrapping_mul(1000).wrapping_add(7);
        // The router's MatMulNBits, the same for both styles but for its name.
        let tag = match self.style {
            MoeStyle::GptOss => format!("_{p}moe_router"),
            MoeStyle::PhiMoe => format!("_{p}moe_gate"),
        };
        let nb = nbits_layer(
            g,
            &mm,
            &tag,
            h2,
            &mm,
            hidden,
            e,
            block,
            acc,
            (4, codes),
            false,
            None,
            false,
            s,
        );
        let bytes = match self.style {
            MoeStyle::GptOss => {
                let b = name("moe.router.bias");
                let bytes = vec_init(g, &b, e, seed ^ 0x7b, 0.0, 0.1);
                let add = name("moe/router/Add");
                g.node("Add", "", &add, &[&mm, &b], &[&add], &[]).node(
                    "Reshape",
                    "",
                    &logits,
                    &[&add, "moe.router.shape"],
                    &[&logits],
                    &[],
                );
                bytes + nb
            }
            MoeStyle::PhiMoe => {
                let (shape, gather) = (name("moe/gate/Shape"), name("moe/gate/Gather"));
                let (unsq, concat) = (name("moe/gate/Unsqueeze"), name("moe/gate/Concat"));
                g.node("Shape", "", &shape, &[&mm], &[&shape], &[])
                    .node(
                        "Gather",
                        "",
                        &gather,
                        &[&shape, "moe.const.2"],
                        &[&gather],
                        &[("axis", Attr::Int(0))],
                    )
                    .node(
                        "Unsqueeze",
                        "",
                        &unsq,
                        &[&gather, "moe.const.[0]"],
                        &[&unsq],
                        &[],
                    )
                    .node(
                        "Concat",
                        "",
                        &concat,
                        &["moe.const.[-1]", &unsq],
                        &[&concat],
                        &[("axis", Attr::Int(0))],
                    )
                    .node("Reshape", "", &logits, &[&mm, &concat], &[&logits], &[]);
                nb
            }
        };
        (logits, bytes)
    }
}

/// A seeded expert bias `0.1 * U[-1, 1)` of `[experts, n]` as an initializer; returns its bytes.
fn bias_init(g: &mut GraphBuilder, name: &str, [e, n]: [usize; 2], seed: u64) -> u64 {
    let v: Vec<f32> = crate::rand_f32(e * n, seed)
        .iter()
        .map(|r| 0.1 * r)
        .collect();
    g.initializer_f32(name, &[e as i64, n as i64], &v);
    (e * n * 4) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::gen_llm::{Emb, Llm};
    use crate::onnx::{GraphProto, ModelProto, NodeProto};
    use prost::Message;

    /// gpt-oss shapes cut down (hidden 256, 4 / 2 heads of 64, experts of 128).
    const SMALL_GPT: &str = "preset=gpt-oss-20b,layers=2,vocab=300,hidden=256,heads=4,kv=2,\
                             inter=128,experts=8,topk=2";
    /// Phi-3.5-MoE shapes cut down the same way.
    const SMALL_PHI: &str =
        "preset=phi3.5-moe,layers=2,vocab=300,hidden=256,heads=4,kv=2,head=64,inter=128,experts=4";

    fn graph(rest: &str) -> GraphProto {
        let l = Llm::parse("s", rest).unwrap();
        ModelProto::decode(&l.generate().bytes[..])
            .unwrap()
            .graph
            .unwrap()
    }

    fn count(g: &GraphProto, op: &str) -> usize {
        g.node.iter().filter(|n| n.op_type == op).count()
    }

    fn node<'a>(g: &'a GraphProto, name: &str) -> &'a NodeProto {
        g.node.iter().find(|n| n.name == name).unwrap()
    }

    fn dims(g: &GraphProto, name: &str) -> Vec<i64> {
        g.initializer
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("no initializer {name}"))
            .dims
            .clone()
    }

    fn attr<'a>(n: &'a NodeProto, name: &str) -> &'a crate::onnx::AttributeProto {
        n.attribute
            .iter()
            .find(|a| a.name == name)
            .unwrap_or_else(|| panic!("{}: no attribute {name}", n.name))
    }

    #[test]
    fn moe_presets_overrides_and_bad_specs() {
        let g = Llm::parse("s", "preset=gpt-oss-20b").unwrap();
        let d = &g.layer;
        assert_eq!(
            (d.hidden, d.heads, d.kv, d.head, d.inter),
            (2880, 64, 8, 64, 2880)
        );
        assert_eq!(
            (g.layers, g.vocab, g.tied, g.emb),
            (24, 201088, false, Emb::F32)
        );
        assert_eq!((g.window, g.window_cache), (128, true));
        assert!(d.qkv_bias && d.bias_add && d.o_bias && d.sinks && !d.layer_norm && !g.lm_bias);
        assert_eq!(g.moe, Some(Moe::gpt_oss()));
        assert_eq!((Moe::gpt_oss().experts, Moe::gpt_oss().top_k), (32, 4));
        // Past protobuf's 2 GiB: the weights go to a side file.
        assert!(g.needs_external_data());
        let p = Llm::parse("s", "preset=phi3.5-moe").unwrap();
        let d = &p.layer;
        assert_eq!(
            (d.hidden, d.heads, d.kv, d.head, d.inter),
            (4096, 32, 8, 128, 6400)
        );
        assert_eq!((p.layers, p.vocab, p.tied, p.window), (32, 32064, false, 0));
        assert!(d.qkv_bias && d.o_bias && !d.sinks && d.layer_norm && p.lm_bias);
        let m = p.moe.clone().unwrap();
        assert_eq!(
            (m.style, m.experts, m.top_k, m.block, m.fc3),
            (MoeStyle::PhiMoe, 16, 2, 32, true)
        );
        // Overrides: depth, experts, k, the QMoE block, the expert width, sinks, fc3.
        let o = Llm::parse(
            "s",
            "preset=gpt-oss-20b,layers=2,experts=8,topk=2,qmoe_block=64,inter=1024,sinks=0",
        )
        .unwrap();
        let m = o.moe.clone().unwrap();
        assert_eq!(
            (o.layers, m.experts, m.top_k, m.block, o.layer.inter),
            (2, 8, 2, 64, 1024)
        );
        assert!(!o.layer.sinks);
        // Each override has its own cache key.
        let keys: std::collections::BTreeSet<String> = [
            "preset=gpt-oss-20b",
            "preset=gpt-oss-20b,experts=16",
            "preset=gpt-oss-20b,topk=2",
            "preset=gpt-oss-20b,qmoe_block=64",
            "preset=gpt-oss-20b,sinks=0",
            "preset=phi3.5-moe",
            "preset=phi3.5-moe,fc3=0",
        ]
        .iter()
        .map(|s| Llm::parse("s", s).unwrap().canonical())
        .collect();
        assert_eq!(keys.len(), 7);
        assert!(g
            .canonical()
            .ends_with(",o_bias=1,sinks=1,experts=32,topk=4,qmoe_block=32,fc3=0"));
        // The dense presets' keys do not change.
        assert!(!Llm::parse("s", "").unwrap().canonical().contains("experts"));
        assert!(g.label().contains("experts=32 topk=4"), "{}", g.label());
        for (bad, why) in [
            ("preset=qwen2-0.5b,experts=8", "mixture-of-experts"),
            ("preset=llama-3.2-1b,topk=2", "mixture-of-experts"),
            ("preset=gpt-oss-20b,topk=0", "topk=0"),
            ("preset=gpt-oss-20b,topk=33", "topk=33"),
            ("preset=gpt-oss-20b,experts=0", "topk=4"),
            ("preset=phi3.5-moe,topk=4", "sparse mixer"),
            ("preset=gpt-oss-20b,qmoe_block=16", "qmoe_block=16"),
            ("preset=gpt-oss-20b,qmoe_block=48", "qmoe_block=48"),
            ("preset=gpt-oss-20b,inter=100", "multiples of qmoe_block"),
            ("preset=gpt-oss-20b,fc3=1", "fc3=1"),
            ("preset=gpt-oss-20b,layers=0", "positive"),
            ("preset=gpt-oss-20b,experts=x", "not an integer"),
            ("preset=gpt-oss-21b", "gpt-oss-20b|phi3.5-moe"),
        ] {
            let e = Llm::parse("s", bad).expect_err(bad);
            assert!(e.contains(why), "{bad}: '{e}' should say '{why}'");
        }
    }

    /// A gpt-oss MoE layer, node by node (module doc), and the op census of a two-layer model.
    #[test]
    fn gpt_oss_layer_is_the_builders() {
        let g = graph(SMALL_GPT);
        // Per layer: packed QKV, o_proj and the router; then the lm_head.
        assert_eq!(count(&g, "MatMulNBits"), 2 * 3 + 1);
        // Per layer the QKV, o_proj and router biases.
        assert_eq!(count(&g, "Add"), 2 * 3);
        assert_eq!(count(&g, "QMoE"), 2);
        assert_eq!(count(&g, "GroupQueryAttention"), 2);
        // The router Reshapes; no MLP.
        assert_eq!(count(&g, "Reshape"), 2);
        assert_eq!(count(&g, "Sigmoid") + count(&g, "Mul"), 0);
        // ln2 of each layer, ln1 of layer 1, the final norm.
        assert_eq!(count(&g, "SkipSimplifiedLayerNormalization"), 4);
        let q = node(&g, "layers.1.moe/QMoE");
        assert_eq!(q.domain, "com.microsoft");
        assert_eq!(
            q.input,
            [
                "layers.1.h2",
                "layers.1.moe/router/Reshape",
                "layers.1.moe.fc1.qweight",
                "layers.1.moe.fc1.scales",
                "layers.1.moe.fc1.bias",
                "layers.1.moe.fc2.qweight",
                "layers.1.moe.fc2.scales",
                "layers.1.moe.fc2.bias",
                "",
                "",
                "",
                "",
                "",
                "",
            ]
        );
        let names: Vec<&str> = q.attribute.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "activation_alpha",
                "activation_beta",
                "activation_type",
                "expert_weight_bits",
                "k",
                "normalize_routing_weights",
                "swiglu_fusion",
                "use_sparse_mixer",
                "swiglu_limit",
                "block_size"
            ]
        );
        assert_eq!(attr(q, "activation_alpha").f, 1.702);
        assert_eq!(attr(q, "activation_beta").f, 1.0);
        assert_eq!(attr(q, "activation_type").s, b"swiglu");
        assert_eq!(attr(q, "swiglu_limit").f, 7.0);
        let ints = [
            "expert_weight_bits",
            "k",
            "normalize_routing_weights",
            "swiglu_fusion",
        ];
        let v: Vec<i64> = ints.iter().map(|a| attr(q, a).i).collect();
        assert_eq!(v, [4, 2, 1, 1]);
        assert_eq!(
            (attr(q, "use_sparse_mixer").i, attr(q, "block_size").i),
            (0, 32)
        );
        // fc1: 2 * inter interleaved rows of hidden / 2 bytes; fc2: hidden rows of inter / 2.
        assert_eq!(dims(&g, "layers.1.moe.fc1.qweight"), [8, 256, 128]);
        assert_eq!(dims(&g, "layers.1.moe.fc1.scales"), [8, 256, 8]);
        assert_eq!(dims(&g, "layers.1.moe.fc1.bias"), [8, 256]);
        assert_eq!(dims(&g, "layers.1.moe.fc2.qweight"), [8, 256, 64]);
        assert_eq!(dims(&g, "layers.1.moe.fc2.scales"), [8, 256, 4]);
        assert_eq!(dims(&g, "layers.1.moe.fc2.bias"), [8, 256]);
        // The router: MatMulNBits (N = experts), the bias Add, the Reshape to [-1, experts].
        let r = node(&g, "layers.1.moe/router/MatMul");
        assert_eq!((r.op_type.as_str(), attr(r, "N").i), ("MatMulNBits", 8));
        assert_eq!(r.input[0], "layers.1.h2");
        let add = node(&g, "layers.1.moe/router/Add");
        assert_eq!(
            add.input,
            ["layers.1.moe/router/MatMul", "layers.1.moe.router.bias"]
        );
        let reshape = node(&g, "layers.1.moe/router/Reshape");
        assert_eq!(
            reshape.input,
            ["layers.1.moe/router/Add", "moe.router.shape"]
        );
        let shape = g
            .initializer
            .iter()
            .find(|t| t.name == "moe.router.shape")
            .unwrap();
        assert_eq!(shape.raw_data, [-1i64, 8].map(i64::to_le_bytes).concat());
        // Attention: sinks at input 11, the window on the even layers only, o_proj's bias Add.
        for (i, window) in [(0, Some(128)), (1, None)] {
            let a = node(&g, &format!("layers.{i}.attn"));
            assert_eq!(a.input.len(), 12);
            assert_eq!(a.input[11], format!("layers.{i}.attn.sinks"));
            assert_eq!(dims(&g, &a.input[11]), [4]);
            let w = a.attribute.iter().find(|x| x.name == "local_window_size");
            assert_eq!(w.map(|x| x.i), window);
        }
        let o = node(&g, "layers.0.o_proj/Add");
        assert_eq!(o.input, ["layers.0.o_proj/MatMul", "layers.0.o_proj.bias"]);
        // The next layer's norm adds the QMoE's output to the residual.
        let ln = node(&g, "layers.1.ln1");
        assert_eq!(ln.input[..2], ["layers.0.moe/output", "layers.0.residual"]);
        // Without sinks, GroupQueryAttention's nine inputs.
        let ns = graph(&format!("{SMALL_GPT},sinks=0"));
        assert_eq!(node(&ns, "layers.0.attn").input.len(), 9);
    }

    /// A Phi-3.5-MoE layer: LayerNorms with biases, the Shape-Concat router, fc3 or fused.
    #[test]
    fn phi_moe_layer_is_the_builders() {
        let g = graph(SMALL_PHI);
        assert_eq!(count(&g, "QMoE"), 2);
        assert_eq!(count(&g, "LayerNormalization"), 1);
        // ln2 of each layer, ln1 of layer 1, the final norm.
        assert_eq!(count(&g, "SkipLayerNormalization"), 4);
        assert_eq!(count(&g, "SimplifiedLayerNormalization"), 0);
        for op in ["Unsqueeze", "Concat", "Reshape"] {
            assert_eq!(count(&g, op), 2, "{op}");
        }
        // The mask's and the routers'.
        assert_eq!(count(&g, "Shape"), 3);
        // QKV and o_proj biases per layer, then the lm_head's writing the logits.
        assert_eq!(count(&g, "Add"), 2 * 2 + 1);
        let lm = node(&g, "lm_head/Add");
        assert_eq!(
            (lm.input[0].as_str(), lm.output[0].as_str()),
            ("lm_head/MatMul", "logits")
        );
        assert_eq!(node(&g, "layers.0.attn").input.len(), 9);
        let ln = node(&g, "layers.0.ln2");
        assert_eq!(ln.input[2..], ["layers.0.ln2.w", "layers.0.ln2.b"]);
        let q = node(&g, "layers.0.moe/QMoE");
        assert_eq!(
            q.input,
            [
                "layers.0.h2",
                "layers.0.moe/router/Reshape",
                "layers.0.moe.fc1.qweight",
                "layers.0.moe.fc1.scales",
                "",
                "layers.0.moe.fc2.qweight",
                "layers.0.moe.fc2.scales",
                "",
                "layers.0.moe.fc3.qweight",
                "layers.0.moe.fc3.scales",
                "",
                "",
                "",
                "",
            ]
        );
        assert_eq!(attr(q, "activation_type").s, b"silu");
        let v: Vec<i64> = [
            "k",
            "normalize_routing_weights",
            "swiglu_fusion",
            "use_sparse_mixer",
        ]
        .iter()
        .map(|a| attr(q, a).i)
        .collect();
        assert_eq!(v, [2, 0, 0, 1]);
        assert!(q.attribute.iter().all(|a| a.name != "swiglu_limit"));
        // The schema's layout: fc1 / fc3 [E, inter, hidden / 2], fc2 [E, hidden, inter / 2].
        assert_eq!(dims(&g, "layers.0.moe.fc1.qweight"), [4, 128, 128]);
        assert_eq!(dims(&g, "layers.0.moe.fc3.qweight"), [4, 128, 128]);
        assert_eq!(dims(&g, "layers.0.moe.fc2.qweight"), [4, 256, 64]);
        let r = node(&g, "layers.0.moe/router/Reshape");
        assert_eq!(
            r.input,
            ["layers.0.moe/router/MatMul", "layers.0.moe/gate/Concat"]
        );
        // fc3=0: gate and up interleaved in fc1, SwiGLU with alpha 1, beta 0 (= SiLU-gated).
        let f = graph(&format!("{SMALL_PHI},fc3=0"));
        let q = node(&f, "layers.0.moe/QMoE");
        assert_eq!(q.input[8..11], ["", "", ""]);
        assert_eq!(dims(&f, "layers.0.moe.fc1.qweight"), [4, 256, 128]);
        assert_eq!(attr(q, "activation_type").s, b"swiglu");
        assert_eq!(
            (attr(q, "activation_alpha").f, attr(q, "activation_beta").f),
            (1.0, 0.0)
        );
        assert_eq!(
            (attr(q, "swiglu_fusion").i, attr(q, "use_sparse_mixer").i),
            (1, 1)
        );
    }

    /// The experts' codes average zero (gen::Codes::Centered): no nibble is 0.
    #[test]
    fn expert_codes_are_centered() {
        let g = graph(SMALL_GPT);
        let t = g
            .initializer
            .iter()
            .find(|t| t.name == "layers.0.moe.fc1.qweight")
            .unwrap();
        let zeros = t
            .raw_data
            .iter()
            .filter(|b| *b & 15 == 0 || *b >> 4 == 0)
            .count();
        assert_eq!(zeros, 0);
        let mean: f64 = t
            .raw_data
            .iter()
            .map(|b| ((b & 15) as f64 - 8.0) + ((b >> 4) as f64 - 8.0))
            .sum::<f64>()
            / (2 * t.raw_data.len()) as f64;
        assert!(mean.abs() < 0.02, "mean code offset {mean}");
    }

    /// With a side file, every initializer of 1 MiB or more lives there at an aligned offset,
    /// and the graph's count of what a token reads is unchanged.
    #[test]
    fn external_data_holds_the_large_initializers() {
        use crate::bench::model_bytes::{init_bytes, token_bytes};
        use crate::onnx::{EXTERNAL, EXTERNAL_ALIGN};
        let l = Llm::parse("s", &format!("{SMALL_GPT},inter=2048")).unwrap();
        let dir = std::env::temp_dir().join(format!("rcpu-moe-ext-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let data = dir.join("model.onnx.data");
        let gen = l.generate_external(&data).unwrap();
        let inline = l.generate();
        let g = ModelProto::decode(&gen.bytes[..]).unwrap().graph.unwrap();
        let full = ModelProto::decode(&inline.bytes[..])
            .unwrap()
            .graph
            .unwrap();
        let file = std::fs::read(&data).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let mut external = 0;
        for (t, whole) in g.initializer.iter().zip(&full.initializer) {
            assert_eq!(t.name, whole.name);
            assert_eq!(init_bytes(t), init_bytes(whole), "{}", t.name);
            if t.data_location != EXTERNAL {
                assert!(t.raw_data.len() < 1 << 20, "{}", t.name);
                continue;
            }
            external += 1;
            let get = |k: &str| {
                let e = t.external_data.iter().find(|e| e.key == k).unwrap();
                e.value.clone()
            };
            assert_eq!(get("location"), "model.onnx.data");
            let (off, len): (usize, usize) = (
                get("offset").parse().unwrap(),
                get("length").parse().unwrap(),
            );
            assert_eq!(off as u64 % EXTERNAL_ALIGN, 0);
            assert_eq!(file[off..off + len], whole.raw_data[..], "{}", t.name);
        }
        // fc1 (8 * 4096 rows of 128 bytes) and fc2 (8 * 256 rows of 1024) per layer.
        assert!(external >= 4, "{external} external initializers");
        assert_eq!(gen.weight_bytes, inline.weight_bytes);
        assert_eq!(token_bytes(&g), gen.weight_bytes);
    }
}
