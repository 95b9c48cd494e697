//! `decoder:hidden=896,heads=14,kv=2,inter=4864,block=32,acc=4,past=256,m=1[,head=64][,qkv_bias=1][,packed=1]`:
//! one Llama/Qwen-style decoder layer, laid out as ORT's genai model builder lays it out:
//!
//! ```text
//! x -> SimplifiedLayerNormalization -> q/k/v MatMulNBits (+ bias when qkv_bias=1, Qwen; one
//!      packed qkv MatMulNBits when packed=1)
//!   -> GroupQueryAttention (com.microsoft, do_rotary=1, cos/sin cache initializers,
//!      past_key/past_value [1, kv, past, head] -> present_key/present_value [1, kv, past+m, head])
//!   -> o_proj MatMulNBits -> SkipSimplifiedLayerNormalization (x as the skip; output 3 = residual)
//!   -> gate/up MatMulNBits -> SiLU as Sigmoid, Mul, then Mul by up -> down MatMulNBits
//!   -> Add (residual) -> y
//! ```
//!
//! `m=1` with `past=P` is a decode step; `m=128,past=0` a 128-token prefill. Every shape is fixed
//! by the spec. The int32 inputs must hold the right values, not random ones: `seqlens_k` [1] =
//! past + m - 1 and `total_sequence_length` (scalar) = past + m are recorded in the model's
//! metadata (`rcpu_bench.feed.<input>`, see model.rs) and fed from there.

use crate::onnx::{dtype, Attr, Dim, GraphBuilder};

use super::gen::{nbits_layer, Codes, Generated};

/// Metadata key prefix of a fixed feed value (read by model.rs).
pub const FEED_PREFIX: &str = "rcpu_bench.feed.";

#[derive(Debug, Clone, PartialEq)]
pub struct Decoder {
    pub hidden: usize,
    pub heads: usize,
    pub kv: usize,
    pub head: usize,
    pub inter: usize,
    pub block: usize,
    pub acc: i64,
    pub past: usize,
    pub qkv_bias: bool,
    /// Q, K, V as one MatMulNBits (`packed=1`; genai's layout) instead of three.
    pub packed_qkv: bool,
    /// Per-head RMSNorms of the query and key rows (`qk_norm=1`; Qwen3's attention), each between
    /// Reshapes to `[B, S * heads, head]` and back, as the genai builder writes them; with
    /// `packed`, a Split of the packed projection into Q, K and V comes first (the builder's
    /// current form), otherwise three projections (older builders').
    pub qk_norm: bool,
    /// The output projection and the MLP's gate, up and down projections as 8-bit MatMulNBits
    /// (`mix8=1`), as Olive's mixed-precision recipes upcast the most sensitive weights.
    pub mix8: bool,
    /// The Q / K / V biases (with `qkv_bias`) as an Add after each projection (`bias_add=1`), as
    /// the genai builder writes them since 0.18, instead of the MatMulNBits bias input.
    pub bias_add: bool,
    /// The output projection has a bias (gpt-oss, Phi-3.5-MoE; an Add after it with `bias_add`).
    pub o_bias: bool,
    /// GroupQueryAttention gets a `head_sink` input (11): one sink logit per query head, an
    /// initializer `{prefix}attn.sinks` (gpt-oss's attention sinks).
    pub sinks: bool,
    /// The post-attention norm is a SkipLayerNormalization with a bias (`{prefix}ln2.b`), as the
    /// builder writes a LayerNorm model (Phi-3.5-MoE), instead of SkipSimplifiedLayerNormalization.
    pub layer_norm: bool,
    /// How the projections' codes are drawn (`gen::Codes`; Centered for the MoE presets).
    pub codes: Codes,
}

impl Decoder {
    /// Parses the items after `decoder:`; returns the layer and `m`, `seed`.
    pub fn parse(spec: &str, rest: &str) -> Result<(Decoder, usize, u64), String> {
        let mut d = Decoder {
            hidden: 896,
            heads: 14,
            kv: 2,
            head: 0,
            inter: 4864,
            block: 32,
            acc: 4,
            past: 0,
            qkv_bias: true,
            packed_qkv: false,
            qk_norm: false,
            mix8: false,
            bias_add: false,
            o_bias: false,
            sinks: false,
            layer_norm: false,
            codes: Codes::Uniform,
        };
        let (mut m, mut seed) = (1usize, 1u64);
        for (key, val) in spec_items(spec, rest)? {
            let v = spec_int(spec, key, val)?;
            if d.set_layer_key(key, v) {
                continue;
            }
            match key {
                "past" => d.past = v,
                "packed" => d.packed_qkv = v != 0,
                "qk_norm" => d.qk_norm = v != 0,
                "m" => m = v,
                "seed" => seed = v as u64,
                _ => return Err(format!("spec '{spec}': unknown key '{key}' for decoder")),
            }
        }
        if d.head == 0 && d.heads > 0 {
            d.head = d.hidden / d.heads;
        }
        if m == 0 {
            return Err(format!("spec '{spec}': m must be positive"));
        }
        d.validate_layer()
            .map_err(|why| format!("spec '{spec}': {why}"))?;
        Ok((d, m, seed))
    }

    /// Sets one of the layer keys decoder: and llm: specs share (hidden, heads, kv, head, inter,
    /// block, acc, qkv_bias, mix8, bias_add); false when `key` is not one of them.
    pub(super) fn set_layer_key(&mut self, key: &str, v: usize) -> bool {
        match key {
            "hidden" => self.hidden = v,
            "heads" => self.heads = v,
            "kv" => self.kv = v,
            "head" => self.head = v,
            "inter" => self.inter = v,
            "block" => self.block = v,
            "acc" => self.acc = v as i64,
            "qkv_bias" => self.qkv_bias = v != 0,
            "mix8" => self.mix8 = v != 0,
            "bias_add" => self.bias_add = v != 0,
            _ => return false,
        }
        true
    }

    /// The checks every generated layer shape must pass.
    pub(super) fn validate_layer(&self) -> Result<(), String> {
        if [self.hidden, self.heads, self.kv, self.head, self.inter].contains(&0) {
            return Err("hidden, heads, kv, head and inter must be positive".into());
        }
        if !self.heads.is_multiple_of(self.kv) {
            return Err("heads must be a multiple of kv".into());
        }
        if !self.head.is_multiple_of(2) {
            return Err("head (head size) must be even (rotary)".into());
        }
        if self.block < 16 || !self.block.is_power_of_two() {
            return Err("block must be a power of two >= 16".into());
        }
        if !(0..=4).contains(&self.acc) {
            return Err("acc must be 0..4".into());
        }
        Ok(())
    }

    pub fn label(&self, m: usize) -> String {
        format!(
            "decoder hidden={} heads={}/{} head={} inter={} b{} acc{} past={} m={}{}{}{}{}{}",
            self.hidden,
            self.heads,
            self.kv,
            self.head,
            self.inter,
            self.block,
            self.acc,
            self.past,
            m,
            if self.qkv_bias { " qkv-bias" } else { "" },
            if self.packed_qkv { " packed-qkv" } else { "" },
            if self.qk_norm { " qk-norm" } else { "" },
            if self.mix8 { " mix8" } else { "" },
            if self.bias_add { " bias-add" } else { "" }
        )
    }

    pub fn generate(&self, m: usize, seed: u64) -> Generated {
        let h = self.hidden as i64;
        let total = self.past + m;
        let mut g = GraphBuilder::new("rcpu_bench_decoder", 17);
        let past_dims = [
            Dim::Fixed(1),
            Dim::Fixed(self.kv as i64),
            Dim::Fixed(self.past as i64),
            Dim::Fixed(self.head as i64),
        ];
        g.input(
            "x",
            dtype::FLOAT,
            &[Dim::Fixed(1), Dim::Fixed(m as i64), Dim::Fixed(h)],
        )
        .input("past_key", dtype::FLOAT, &past_dims)
        .input("past_value", dtype::FLOAT, &past_dims)
        .input("seqlens_k", dtype::INT32, &[Dim::Fixed(1)])
        .input("total_sequence_length", dtype::INT32, &[]);
        g.metadata(&format!("{FEED_PREFIX}seqlens_k"), &(total - 1).to_string())
            .metadata(
                &format!("{FEED_PREFIX}total_sequence_length"),
                &total.to_string(),
            );
        let mut bytes = vec_init(&mut g, "ln1.w", self.hidden, seed ^ 11, 1.0, 0.1);
        g.node(
            "SimplifiedLayerNormalization",
            "",
            "ln1",
            &["x", "ln1.w"],
            &["h1"],
            &[("axis", Attr::Int(-1)), ("epsilon", Attr::Float(1e-6))],
        );
        bytes += rotary_caches(&mut g, "", self.head, total);
        let io = LayerIo {
            prefix: "",
            input: "h1",
            skip: "x",
            past: ["past_key", "past_value"],
            present: ["present_key", "present_value"],
            seqlens_k: "seqlens_k",
            total_len: "total_sequence_length",
            rotary: ["cos_cache", "sin_cache"],
            window: 0,
            window_cache: false,
            softcap: 0.0,
            kv_quant: KvQuant::F32,
        };
        bytes += self.layer(&mut g, &io, seed);
        g.node(
            "Add",
            "",
            "residual_add",
            &["residual", "down_proj"],
            &["y"],
            &[],
        );
        // Symbolic sequence axis: ORT's GQA shape inference assumes a shared past/present buffer.
        let present = [
            Dim::Fixed(1),
            Dim::Fixed(self.kv as i64),
            Dim::Sym("total_sequence_length"),
            Dim::Fixed(self.head as i64),
        ];
        g.output_shaped(
            "y",
            dtype::FLOAT,
            &[Dim::Fixed(1), Dim::Fixed(m as i64), Dim::Fixed(h)],
        )
        .output_shaped("present_key", dtype::FLOAT, &present)
        .output_shaped("present_value", dtype::FLOAT, &present);
        Generated {
            bytes: g.build(),
            weight_bytes: bytes,
        }
    }

    /// One decoder layer after its input norm: `io.input` (the normed hidden state) through
    /// attention, o_proj, the post-attention SkipSimplifiedLayerNormalization (skip `io.skip`) and
    /// the SiLU MLP. Writes `{prefix}down_proj` (the MLP output) and `{prefix}residual` (the
    /// residual stream after attention); the caller adds them (an Add, or the next layer's skip
    /// norm). Q, K and V are one packed MatMulNBits when `packed_qkv` (genai's layout; Split into
    /// three when `qk_norm`), three otherwise. Returns the bytes of the layer's initializers.
    pub fn layer(&self, g: &mut GraphBuilder, io: &LayerIo, seed: u64) -> u64 {
        self.attention(g, io, seed) + self.mlp(g, io.prefix, seed)
    }

    /// The attention half of [`Decoder::layer`]: `io.input` through the projections,
    /// GroupQueryAttention, o_proj and the post-attention skip norm, which writes `{prefix}h2`
    /// (the MLP's input) and `{prefix}residual`. Returns the bytes of its initializers.
    pub fn attention(&self, g: &mut GraphBuilder, io: &LayerIo, seed: u64) -> u64 {
        let p = io.prefix;
        let (q_n, kv_n, d) = (self.heads * self.head, self.kv * self.head, self.hidden);
        let name = |s: &str| format!("{p}{s}");
        let proj = |g: &mut GraphBuilder, i, node: &str, inp: &str, k, n, bias| {
            self.proj(g, p, seed, i, node, inp, [k, n], bias)
        };
        let mut bytes = vec_init(g, &name("ln2.w"), d, seed ^ 12, 1.0, 0.1);
        if self.layer_norm {
            bytes += vec_init(g, &name("ln2.b"), d, seed ^ 15, 0.0, 0.1);
        }
        let (q, k, v) = if self.packed_qkv {
            bytes += proj(g, 0, "qkv_proj", io.input, d, q_n + 2 * kv_n, self.qkv_bias);
            if self.qk_norm {
                // The builder splits the packed projection when Q and K are normalised per head.
                let sizes = name("qkv_proj.split");
                let parts = [name("qkv_proj/q"), name("qkv_proj/k"), name("qkv_proj/v")];
                g.initializer_i64(&sizes, &[3], &[q_n as i64, kv_n as i64, kv_n as i64])
                    .node(
                        "Split",
                        "",
                        &name("qkv_proj/Split"),
                        &[&name("qkv_proj"), &sizes],
                        &[&parts[0], &parts[1], &parts[2]],
                        &[("axis", Attr::Int(-1))],
                    );
                bytes += 3 * 8;
                let [q, k, v] = parts;
                (q, k, v)
            } else {
                (name("qkv_proj"), String::new(), String::new())
            }
        } else {
            bytes += proj(g, 0, "q_proj", io.input, d, q_n, self.qkv_bias);
            bytes += proj(g, 1, "k_proj", io.input, d, kv_n, self.qkv_bias);
            bytes += proj(g, 2, "v_proj", io.input, d, kv_n, self.qkv_bias);
            (name("q_proj"), name("k_proj"), name("v_proj"))
        };
        let (q, k) = if self.qk_norm {
            let (q, k) = (
                self.head_norm(g, &name("q_norm"), &q, q_n, seed ^ 13),
                self.head_norm(g, &name("k_norm"), &k, kv_n, seed ^ 14),
            );
            bytes += q.1 + k.1;
            (q.0, k.0)
        } else {
            (q, k)
        };
        let attn = name("attn_out");
        let (h2, res) = (name("h2"), name("residual"));
        let mut attrs = vec![
            ("num_heads", Attr::Int(self.heads as i64)),
            ("kv_num_heads", Attr::Int(self.kv as i64)),
            ("do_rotary", Attr::Int(1)),
        ];
        if io.window > 0 {
            attrs.push(("local_window_size", Attr::Int(io.window as i64)));
            if io.window_cache {
                attrs.push(("sliding_window_cache", Attr::Int(1)));
            }
        }
        if io.softcap > 0.0 {
            attrs.push(("softcap", Attr::Float(io.softcap)));
        }
        let mut inputs = vec![
            q.as_str(),
            &k,
            &v,
            io.past[0],
            io.past[1],
            io.seqlens_k,
            io.total_len,
            io.rotary[0],
            io.rotary[1],
        ];
        let sinks = name("attn.sinks");
        if self.sinks {
            // One sink logit per query head (gpt-oss learns them; here seeded in [-1, 1)), at
            // input 11 after the absent position_ids and attention_bias, as the builder wires it.
            bytes += vec_init(g, &sinks, self.heads, seed ^ 16, 0.0, 1.0);
            inputs.extend(["", "", &sinks]);
        }
        let scales = [name("attn.k_scale"), name("attn.v_scale")];
        let q = io.kv_quant;
        if q != KvQuant::F32 {
            // k_scale / v_scale are inputs 12 and 13 (after head_sink, 11).
            inputs.resize(12, "");
            for (which, s) in scales.iter().enumerate() {
                let v = q.scales(self.kv, self.head, which);
                g.initializer_f32(s, &[v.len() as i64], &v);
                bytes += v.len() as u64 * 4;
                inputs.push(s);
            }
            let kind = if q == KvQuant::Int8 {
                "PER_TENSOR"
            } else {
                "PER_CHANNEL"
            };
            attrs.push(("k_quant_type", Attr::Str(kind.into())));
            attrs.push(("v_quant_type", Attr::Str(kind.into())));
            attrs.push(("kv_cache_bit_width", Attr::Int(q.bits() as i64)));
        }
        g.node(
            "GroupQueryAttention",
            "com.microsoft",
            &name("attn"),
            &inputs,
            &[&attn, io.present[0], io.present[1]],
            &attrs,
        );
        bytes += proj(g, 3, "o_proj", &attn, q_n, d, self.o_bias);
        if self.layer_norm {
            g.node(
                "SkipLayerNormalization",
                "com.microsoft",
                &name("ln2"),
                &[&name("o_proj"), io.skip, &name("ln2.w"), &name("ln2.b")],
                &[&h2, "", "", &res],
                &[("epsilon", Attr::Float(1e-5))],
            );
        } else {
            g.node(
                "SkipSimplifiedLayerNormalization",
                "com.microsoft",
                &name("ln2"),
                &[&name("o_proj"), io.skip, &name("ln2.w")],
                &[&h2, "", "", &res],
                &[("epsilon", Attr::Float(1e-6))],
            );
        }
        bytes
    }

    /// The SiLU MLP of [`Decoder::layer`]: `{prefix}h2` through gate and up, SiLU as Sigmoid
    /// and Mul, the product, and down into `{prefix}down_proj`. Returns its initializers' bytes.
    pub fn mlp(&self, g: &mut GraphBuilder, p: &str, seed: u64) -> u64 {
        let d = self.hidden;
        let name = |s: &str| format!("{p}{s}");
        let proj = |g: &mut GraphBuilder, i, node: &str, inp: &str, k, n| {
            self.proj(g, p, seed, i, node, inp, [k, n], false)
        };
        let (h2, up, act) = (name("h2"), name("up_proj"), name("gate_act"));
        let (gate, sig, gu) = (name("gate_proj"), name("gate_sig"), name("gate_up"));
        let mut bytes = proj(g, 4, "gate_proj", &h2, d, self.inter);
        bytes += proj(g, 5, "up_proj", &h2, d, self.inter);
        g.node("Sigmoid", "", &name("silu_sigmoid"), &[&gate], &[&sig], &[])
            .node("Mul", "", &name("silu_mul"), &[&gate, &sig], &[&act], &[])
            .node("Mul", "", &name("gate_up_mul"), &[&act, &up], &[&gu], &[]);
        bytes + proj(g, 6, "down_proj", &gu, self.inter, d)
    }

    /// Projection `i` of a layer (0..=2 Q, K, V or the packed QKV; 3 o_proj; 4..=6 gate, up,
    /// down): a MatMulNBits `{p}{node}` from `inp`, `[k, n]`, without zero points (genai's
    /// default: symmetric), with a bias `{p}{node}.bias` where asked: the MatMulNBits bias input,
    /// or with `bias_add` an Add after the projection (which then writes `{p}{node}/MatMul`).
    /// Returns the bytes of its initializers.
    #[allow(clippy::too_many_arguments)]
    fn proj(
        &self,
        g: &mut GraphBuilder,
        p: &str,
        seed: u64,
        i: u64,
        node: &str,
        inp: &str,
        [k, n]: [usize; 2],
        bias: bool,
    ) -> u64 {
        let node = format!("{p}{node}");
        let b = bias.then(|| format!("{node}.bias"));
        let mut bytes = match &b {
            Some(b) => vec_init(g, b, n, seed ^ (100 + i), 0.0, 0.1),
            None => 0,
        };
        let (out, b, added) = match b {
            Some(b) if self.bias_add => (format!("{node}/MatMul"), None, Some(b)),
            b => (node.clone(), b, None),
        };
        let s = seed.wrapping_mul(1000).wrapping_add(i);
        // `mix8`: o_proj (3) and the MLP (4..=6) in 8 bits.
        let bits = if self.mix8 && i >= 3 { 8 } else { 4 };
        bytes += nbits_layer(
            g,
            &node,
            &format!("_{node}"),
            inp,
            &out,
            k,
            n,
            self.block,
            self.acc,
            (bits, self.codes),
            false,
            b.as_deref(),
            false,
            s,
        );
        if let Some(bias) = added {
            g.node(
                "Add",
                "",
                &format!("{node}/Add"),
                &[&out, &bias],
                &[&node],
                &[],
            );
        }
        bytes
    }
}

impl Decoder {
    /// `x` (`[B, S, n]`) through a per-head RMSNorm as the genai builder writes a query / key norm:
    /// Reshape to `[B, S * n / head, head]`, SimplifiedLayerNormalization over `head` (weight
    /// `{node}.w`), Reshape back to `[B, S, n]`. Returns the output edge and the initializer bytes.
    fn head_norm(
        &self,
        g: &mut GraphBuilder,
        node: &str,
        x: &str,
        n: usize,
        seed: u64,
    ) -> (String, u64) {
        let (heads_shape, back_shape) = (format!("{node}.heads_shape"), format!("{node}.shape"));
        g.initializer_i64(&heads_shape, &[3], &[0, -1, self.head as i64])
            .initializer_i64(&back_shape, &[3], &[0, -1, n as i64]);
        // The two shapes: 3 int64 each.
        let bytes = 2 * 3 * 8 + vec_init(g, &format!("{node}.w"), self.head, seed, 1.0, 0.1);
        let (heads, normed, out) = (
            format!("{node}/heads"),
            format!("{node}/normed"),
            format!("{node}/out"),
        );
        g.node(
            "Reshape",
            "",
            &format!("{node}/Reshape_1"),
            &[x, &heads_shape],
            &[&heads],
            &[],
        )
        .node(
            "SimplifiedLayerNormalization",
            "",
            &format!("{node}/SimplifiedLayerNormalization"),
            &[&heads, &format!("{node}.w")],
            &[&normed],
            &[
                ("epsilon", Attr::Float(1e-6)),
                ("axis", Attr::Int(-1)),
                ("stash_type", Attr::Int(1)),
            ],
        )
        .node(
            "Reshape",
            "",
            &format!("{node}/Reshape_2"),
            &[&normed, &back_shape],
            &[&out],
            &[],
        );
        (out, bytes)
    }
}

/// The graph edges one decoder layer reads and writes (see [`Decoder::layer`]).
pub struct LayerIo<'a> {
    /// Prefix of every node, edge and initializer name the layer makes.
    pub prefix: &'a str,
    /// The normed hidden state.
    pub input: &'a str,
    /// The residual stream before attention (skip input of the post-attention norm).
    pub skip: &'a str,
    pub past: [&'a str; 2],
    pub present: [&'a str; 2],
    pub seqlens_k: &'a str,
    pub total_len: &'a str,
    /// cos and sin caches.
    pub rotary: [&'a str; 2],
    /// A sliding-window layer's window (`local_window_size`; 0: a full-attention layer).
    pub window: usize,
    /// With `window`, the cache is windowed (`sliding_window_cache = 1`).
    pub window_cache: bool,
    /// The attention's `softcap` (0: none).
    pub softcap: f32,
    /// How the KV cache is stored (float32, or quantized: [`KvQuant`]).
    pub kv_quant: KvQuant,
}

/// A GroupQueryAttention KV cache's storage (`kvq=` of an `llm:` spec): float32 (`0`), or
/// quantized as ORT 1.31.1's CPU EP runs it (e2e/python/gqa_quant_models.py): `int8`
/// (PER_TENSOR, 8 bits, int8 `[B, Nkv, L, H]`), `int8c` (PER_CHANNEL, 8 bits), `int4c`
/// (PER_CHANNEL, 4 bits, uint8 `[B, Nkv, L, H / 2]`, two codes a byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvQuant {
    #[default]
    F32,
    Int8,
    Int8c,
    Int4c,
}

impl KvQuant {
    pub fn parse(v: &str) -> Option<KvQuant> {
        Some(match v {
            "0" | "f32" => KvQuant::F32,
            "int8" => KvQuant::Int8,
            "int8c" => KvQuant::Int8c,
            "int4c" => KvQuant::Int4c,
            _ => return None,
        })
    }

    /// The spec value (`0` for float32).
    pub fn name(self) -> &'static str {
        match self {
            KvQuant::F32 => "0",
            KvQuant::Int8 => "int8",
            KvQuant::Int8c => "int8c",
            KvQuant::Int4c => "int4c",
        }
    }

    /// `kv_cache_bit_width` (0: not quantized).
    pub fn bits(self) -> usize {
        match self {
            KvQuant::F32 => 0,
            KvQuant::Int8 | KvQuant::Int8c => 8,
            KvQuant::Int4c => 4,
        }
    }

    /// The ONNX element type of past / present.
    pub fn elem(self) -> i32 {
        match self {
            KvQuant::F32 => dtype::FLOAT,
            KvQuant::Int8 | KvQuant::Int8c => dtype::INT8,
            KvQuant::Int4c => dtype::UINT8,
        }
    }

    /// The last dim of past / present for head size `head` (4 bits: two codes a byte).
    pub fn width(self, head: usize) -> usize {
        if self == KvQuant::Int4c {
            head / 2
        } else {
            head
        }
    }

    /// Bytes of one cached row of `head` values (the element size times the width).
    pub fn row_bytes(self, head: usize) -> usize {
        match self {
            KvQuant::F32 => 4 * head,
            _ => self.width(head),
        }
    }

    /// The scales of one layer's keys (`which` 0) or values (1): `kv * head` of them per
    /// channel (element `n * head + c` scales channel c of kv head n), one per tensor.
    /// The generator's weights give K and V rows within about +-7 (the qwen2 preset's first two
    /// layers reach 3.8 and 6.5), so the scales cover |x| <= 8: 8 / 127 at 8 bits, 8 / 7 at 4
    /// bits; per channel each is that times a factor in [0.75, 1.25] varying with the channel
    /// (so that a channel read with another channel's scale gives other values). Larger values
    /// saturate, in ORT as in rcpu.
    pub fn scales(self, kv: usize, head: usize, which: usize) -> Vec<f32> {
        let base = if self.bits() == 4 {
            8.0 / 7.0
        } else {
            8.0 / 127.0
        };
        match self {
            KvQuant::F32 => vec![],
            KvQuant::Int8 => vec![base],
            KvQuant::Int8c | KvQuant::Int4c => (0..kv * head)
                .map(|i| base * (0.75 + 0.5 * ((i * 7 + which * 3) % 17) as f32 / 16.0))
                .collect(),
        }
    }
}

/// Rotary caches `{prefix}cos_cache`, `{prefix}sin_cache` [positions, rot/2]: cos/sin of
/// position * 10000^(-2i/rot), as genai writes them (`rot`: the rotated dims of a head, the head
/// size unless the model rotates part of it); returns their bytes.
pub fn rotary_caches(g: &mut GraphBuilder, prefix: &str, rot: usize, positions: usize) -> u64 {
    let half = rot / 2;
    let (mut cos, mut sin) = (
        Vec::with_capacity(positions * half),
        Vec::with_capacity(positions * half),
    );
    for p in 0..positions {
        for i in 0..half {
            let a = p as f64 * 10000f64.powf(-2.0 * i as f64 / rot as f64);
            cos.push(a.cos() as f32);
            sin.push(a.sin() as f32);
        }
    }
    let dims = [positions as i64, half as i64];
    g.initializer_f32(&format!("{prefix}cos_cache"), &dims, &cos)
        .initializer_f32(&format!("{prefix}sin_cache"), &dims, &sin);
    (cos.len() + sin.len()) as u64 * 4
}

/// A seeded f32 vector `base + amp * U[-1, 1)` as an initializer; returns its bytes.
pub(super) fn vec_init(
    g: &mut GraphBuilder,
    name: &str,
    n: usize,
    seed: u64,
    base: f32,
    amp: f32,
) -> u64 {
    let v: Vec<f32> = crate::rand_f32(n, seed)
        .iter()
        .map(|r| base + amp * r)
        .collect();
    g.initializer_f32(name, &[n as i64], &v);
    n as u64 * 4
}

/// The `key=value` items of a spec's rest (after `kind:`), empty items skipped.
pub(super) fn spec_items<'a>(spec: &str, rest: &'a str) -> Result<Vec<(&'a str, &'a str)>, String> {
    rest.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|item| {
            item.split_once('=')
                .ok_or_else(|| format!("bad spec item '{item}' in '{spec}'"))
        })
        .collect()
}

/// A spec value that must be a non-negative integer.
pub(super) fn spec_int(spec: &str, key: &str, val: &str) -> Result<usize, String> {
    val.parse::<usize>()
        .map_err(|_| format!("spec '{spec}': {key}='{val}' is not an integer"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::model::ModelInfo;

    #[test]
    fn parses_and_records_the_int32_feeds() {
        let (d, m, _) =
            Decoder::parse("s", "hidden=128,heads=4,kv=2,inter=256,past=7,m=3").unwrap();
        assert_eq!((d.head, d.past, m), (32, 7, 3));
        let info = ModelInfo::parse(&d.generate(m, 1).bytes).unwrap();
        let feeds = info.inputs_for(m, 1).unwrap();
        let names: Vec<&str> = info.inputs.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "x",
                "past_key",
                "past_value",
                "seqlens_k",
                "total_sequence_length"
            ]
        );
        assert_eq!(feeds[1].shape, [1, 2, 7, 32]);
        assert_eq!(feeds[3].data, crate::Data::I32(vec![9]));
        assert_eq!(feeds[4].shape, Vec::<i64>::new());
        assert_eq!(feeds[4].data, crate::Data::I32(vec![10]));
        for bad in [
            "heads=3,kv=2",
            "hidden=10,heads=2,head=5",
            "block=24",
            "foo=1",
            "m=0",
            "acc=5",
        ] {
            assert!(Decoder::parse("s", bad).is_err(), "{bad} must be rejected");
        }
    }
}
