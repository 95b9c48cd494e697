//! `llm:preset=qwen2-0.5b|llama-3.2-1b|qwen3-0.6b|gpt-oss-20b|phi3.5-moe[,layers=N][,vocab=V][,tied=0|1][,acc=4|0|1][,block=32]
//! [,seed=S][,ctx=C][,emb=q4|q8|f32|f16][,hidden=..,heads=..,kv=..,head=..,inter=..,qkv_bias=0|1]
//! [,window=W][,window_cache=0|1][,softcap=X][,rot=R][,lm_bits=4|8][,mix8=0|1][,packed=0|1][,bias_add=0|1]
//! [,sinks=0|1][,experts=E,topk=K,qmoe_block=B,fc3=0|1][,kvq=0|int8|int8c|int4c]`:
//! a whole decoder-only LLM laid out as onnxruntime-genai's model builder lays out
//! `-p int4 -e cpu`, with seeded weights (no download):
//!
//! ```text
//! inputs: input_ids [batch, seq] i64, attention_mask [batch, total] i64,
//!         past_key_values.{i}.key/value [batch, kv, past, head] f32
//! seqlens_k = Cast<i32>(ReduceSum(attention_mask, axis 1) - 1)
//! total_sequence_length = Cast<i32>(Gather(Shape(attention_mask), 1))
//! embeds = GatherBlockQuantized(Reshape(lm_head B), input_ids, lm_head scales)   (emb=q4|q8)
//!       or Gather(embed_tokens, input_ids)          (emb=f32; f16 table + Cast when emb=f16)
//! layer 0: SimplifiedLayerNormalization(embeds); layer i > 0: SkipSimplifiedLayerNormalization
//!          (previous down_proj, previous residual); then Decoder::layer (packed QKV MatMulNBits,
//!          bias for Qwen2; for Qwen3 a Split into Q, K and V and per-head Q / K RMSNorms between
//!          Reshapes; GQA do_rotary=1 with shared cos/sin caches of `ctx` positions,
//!          SkipSimplifiedLayerNormalization, SiLU MLP)
//! final SkipSimplifiedLayerNormalization -> lm_head MatMulNBits (N = vocab) -> logits
//! outputs: logits [batch, seq, vocab], present.{i}.key/value [batch, kv, total, head]
//! ```
//!
//! Tied embeddings (`tied=1`, both presets' real setting) default to `emb=q4`: the embedding is
//! com.microsoft GatherBlockQuantized (bits 4, gather_axis 0, quantize_axis 1, implicit zero
//! point 8) over the lm_head's own int4 weight, as onnxruntime-genai's builder ties them: the
//! lm_head's B [vocab, k_blocks, block/2] goes through a constant Reshape to [vocab, hidden/2]
//! (ORT folds it into an initializer before partitioning) and its scales, stored [vocab,
//! k_blocks], are shared as they are. No f32 table is stored. `emb=f32|f16` with `tied=1`
//! stores the lm_head's weights dequantized as a Gather table instead (the old layout; f16 adds a
//! Cast). Untied: a separate seeded f32/f16 table (`emb=q4|q8` need `tied=1`).
//! `window=W` makes every other layer (0, 2, ...) a sliding-window layer as the genai builder
//! writes one for CPU (Gemma 2 / gpt-oss alternate them): GroupQueryAttention with
//! `local_window_size = W` and `sliding_window_cache = 1` (a windowed KV cache), and a
//! `sliding_window` section in genai_config.json naming those layers (`window_cache=0`: the window
//! over an ordinary cache instead, as older builders wrote it). `softcap=X` gives every
//! layer's attention `softcap = X` (Gemma 2 writes 50). `rot=R` rotates only the first `R` dims
//! of each head (caches `[ctx, R / 2]`: the builder's `partial_rotary_factor < 1`, e.g. Phi-4-mini's
//! 0.75; a multiple of 16, at most the head size). `lm_bits=8` makes the lm_head an 8-bit
//! MatMulNBits (one byte a code, implied zero point 128, 2-D scales), as the builder writes it for
//! `int4_algo_config=k_quant_last` / `k_quant_mixed`; tied, the embedding is then `emb=q8` (the
//! default): an 8-bit GatherBlockQuantized over the lm_head's codes reshaped to [vocab, hidden],
//! as the builder ties them there. `mix8=1` makes every layer's o_proj, gate, up and down
//! projections 8-bit (Olive's mixed-precision recipes upcast those and the lm_head). `packed=0`
//! writes Q, K and V as three projections (older builders' form for Qwen3) instead of one;
//! `bias_add=1` writes the QKV bias as an Add after the projection (the builder's form since
//! 0.18) instead of the MatMulNBits bias input.
//! The rotary base is 10000 for both presets (random weights; the angle table's values do not
//! change what is computed). `ctx` (default 4096) is the rotary caches' length and the
//! genai_config's context_length.
//!
//! Mixture-of-experts presets (gen_moe.rs has the MoE layer and what of it mirrors the builder):
//!
//! - `gpt-oss-20b`: hidden 2880, 64 query heads / 8 KV heads of 64, 24 layers, vocab 201088,
//!   untied (an f32 table Gather, a separate int4 lm_head), Q / K / V and o_proj biases as Adds
//!   (`bias_add`), GroupQueryAttention with attention sinks (`head_sink`, input 11; `sinks=0`
//!   drops them) and a 128-token sliding window with a windowed cache on the even layers
//!   (builders/gptoss.py: `is_local` = layer_id % 2 == 0), and in place of the MLP a QMoE of 32
//!   experts, top 4, expert intermediate 2880 (SwiGLU, alpha 1.702, beta 1, limit 7, fc1 / fc2
//!   biases) fed by a biased int4 router.
//! - `phi3.5-moe`: hidden 4096, 32 / 8 heads of 128, 32 layers, vocab 32064, untied, LayerNorm
//!   with biases (LayerNormalization / SkipLayerNormalization, the builder's `simple = False`),
//!   Q / K / V, o_proj and lm_head biases as Adds, and a QMoE of 16 experts, top 2 (sparse
//!   mixer), intermediate 6400, SiLU-gated with the up projection as fc3 (`fc3=0`: fused into fc1,
//!   the form ORT's CPU QMoE runs; gen_moe.rs). The builder's LongRoPE `If` between a short and a
//!   long rotary cache is not written: one cache pair of `ctx` positions, as for the other presets.
//!
//! `kvq=int8|int8c|int4c` quantizes every layer's KV cache as ORT 1.31.1's CPU GroupQueryAttention
//! runs it (e2e/python/gqa_quant_models.py): `k_quant_type` / `v_quant_type` PER_TENSOR (`int8`)
//! or PER_CHANNEL (`int8c`, `int4c`), `kv_cache_bit_width` 8 or 4, float32 `k_scale` / `v_scale`
//! initializers (inputs 12 and 13; `KvQuant::scales` says how they are chosen), past / present
//! int8 `[batch, kv, len, head]` at 8 bits, uint8 `[batch, kv, len, head / 2]` at 4. `kvq=0` (the
//! default): float32 caches.
//!
//! `experts=E`, `topk=K`, `qmoe_block=B` and `fc3` change the MoE layer (MoE presets only);
//! `inter=` is then each expert's intermediate size. A MoE layer's router and QMoE stand where
//! the dense presets' MLP stands, between the post-attention skip norm and the next layer's.
//!
//! A model whose initializers pass protobuf's 2 GiB (any gpt-oss, Phi-3.5-MoE past one layer, a
//! dense preset with a large f32 table) keeps every initializer of 1 MiB or more in a side file
//! `<model file>.data` beside it, as the builder writes `model.onnx.data` (`llm_model::write`
//! writes it; [`Llm::needs_external_data`]).
//!
//! Weight bytes a token reads (the figure the bench divides by time): every initializer except
//! the embedding table and the rotary caches, plus one table row and one cos/sin row per token;
//! of each QMoE node's expert tensors `k / E` (a token runs `k` experts).

use crate::onnx::{dtype, Attr, Dim, GraphBuilder};

use super::gen::{nbits_layer, nbits_weights, Codes, Generated};
use super::gen_decoder::{
    rotary_caches, spec_int, spec_items, vec_init, Decoder, KvQuant, LayerIo,
};
use super::gen_moe::{Moe, MoeStyle};

#[derive(Debug, Clone, PartialEq)]
pub struct Llm {
    pub preset: String,
    /// The layer shape (packed QKV).
    pub layer: Decoder,
    pub layers: usize,
    pub vocab: usize,
    pub tied: bool,
    pub ctx: usize,
    /// How the embedding is stored (see the module doc).
    pub emb: Emb,
    pub seed: u64,
    /// Sliding window of the even layers (0: none; see the module doc).
    pub window: usize,
    /// The sliding-window layers' caches are windowed (`sliding_window_cache = 1`).
    pub window_cache: bool,
    /// Every layer's attention softcap (0: none).
    pub softcap: usize,
    /// Rotated dims of each head (0: the whole head; see the module doc).
    pub rot: usize,
    /// The lm_head's bits: 4, or 8 (see the module doc).
    pub lm_bits: usize,
    /// The lm_head has a bias (an Add writing the logits; Phi-3.5-MoE).
    pub lm_bias: bool,
    /// A mixture-of-experts layer in place of every MLP (the MoE presets; gen_moe.rs).
    pub moe: Option<Moe>,
    /// How every layer's KV cache is stored (`kvq=`; module doc).
    pub kvq: KvQuant,
}

/// The embedding's layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emb {
    /// GatherBlockQuantized over the lm_head's int4 weight (tied only).
    Q4,
    /// GatherBlockQuantized over the lm_head's 8-bit weight (tied, `lm_bits=8`).
    Q8,
    F32,
    /// An f16 table, Gather then Cast.
    F16,
}

impl Emb {
    pub fn name(self) -> &'static str {
        match self {
            Emb::Q4 => "q4",
            Emb::Q8 => "q8",
            Emb::F32 => "f32",
            Emb::F16 => "f16",
        }
    }

    /// Bytes per element of a stored table (none for Q4 / Q8: the lm_head's).
    fn table_elem_bytes(self) -> usize {
        match self {
            Emb::Q4 | Emb::Q8 => 0,
            Emb::F32 => 4,
            Emb::F16 => 2,
        }
    }
}

/// Bumped whenever the generator's output for a given spec changes (part of the cache key, so a
/// model cached by an older generator is not reused). 2: tied embeddings through
/// GatherBlockQuantized, lm_head scales [vocab, k_blocks]. 3: genai_config.json says
/// `past_present_share_buffer: true`, as the genai builder writes for GroupQueryAttention models.
/// 4: Qwen3's Q, K and V one packed projection Split in three before the per-head norms (the
/// builder's form since it packs them there too); `packed` in the key.
const GENERATOR_VERSION: u32 = 4;

/// The presets' names, for messages.
const PRESETS: &str = "qwen2-0.5b|llama-3.2-1b|qwen3-0.6b|gpt-oss-20b|phi3.5-moe";

/// A preset's model (accuracy_level 4, block 32): Qwen2-0.5B, Llama-3.2-1B or Qwen3-0.6B shapes
/// (tied), or a mixture-of-experts model (module doc).
fn preset(name: &str) -> Option<Llm> {
    match name {
        "gpt-oss-20b" | "phi3.5-moe" => return Some(moe_preset(name)),
        _ => {}
    }
    // (hidden, layers, heads, kv, head, inter, vocab, qkv_bias, qk_norm); all tied embeddings.
    let shape = match name {
        "qwen2-0.5b" => (896, 24, 14, 2, 64, 4864, 151936, true, false),
        "llama-3.2-1b" => (2048, 16, 32, 8, 64, 8192, 128256, false, false),
        // Qwen3-0.6B: 16 query heads of 128 (2048 wide, twice the hidden size), per-head q/k norms.
        "qwen3-0.6b" => (1024, 28, 16, 8, 128, 3072, 151936, false, true),
        _ => return None,
    };
    Some(dense_preset(name, shape))
}

/// A tied dense decoder of `shape` (hidden, layers, heads, kv, head, inter, vocab, qkv_bias,
/// qk_norm) as the builder writes it: every preset's starting point.
#[allow(clippy::type_complexity)]
fn dense_preset(
    name: &str,
    shape: (usize, usize, usize, usize, usize, usize, usize, bool, bool),
) -> Llm {
    let (hidden, layers, heads, kv, head, inter, vocab, qkv_bias, qk_norm) = shape;
    Llm {
        preset: name.into(),
        layer: Decoder {
            hidden,
            heads,
            kv,
            head,
            inter,
            block: 32,
            acc: 4,
            past: 0,
            qkv_bias,
            // The builder packs Q, K and V (and splits them where it normalises Q and K).
            packed_qkv: true,
            qk_norm,
            mix8: false,
            bias_add: false,
            o_bias: false,
            sinks: false,
            layer_norm: false,
            codes: Codes::Uniform,
        },
        layers,
        vocab,
        tied: true,
        ctx: 4096,
        emb: Emb::Q4,
        seed: 1,
        window: 0,
        window_cache: true,
        softcap: 0,
        rot: 0,
        lm_bits: 4,
        lm_bias: false,
        moe: None,
        kvq: KvQuant::F32,
    }
}

/// gpt-oss-20b or Phi-3.5-MoE (module doc): both untied, with attention biases written as Adds
/// (the builder's form since 0.18).
fn moe_preset(name: &str) -> Llm {
    let gpt = name == "gpt-oss-20b";
    let shape = if gpt {
        (2880, 24, 64, 8, 64, 2880, 201088, true, false)
    } else {
        (4096, 32, 32, 8, 128, 6400, 32064, true, false)
    };
    let base = dense_preset(name, shape);
    Llm {
        layer: Decoder {
            bias_add: true,
            o_bias: true,
            sinks: gpt,
            layer_norm: !gpt,
            // Codes averaging zero keep the routing spread through the layers (gen::Codes).
            codes: Codes::Centered,
            ..base.layer
        },
        tied: false,
        emb: Emb::F32,
        // gpt-oss: sliding_window 128 on the even layers, windowed caches.
        window: if gpt { 128 } else { 0 },
        lm_bias: !gpt,
        moe: Some(if gpt { Moe::gpt_oss() } else { Moe::phi() }),
        ..base
    }
}

impl Llm {
    /// Parses the items after `llm:`.
    pub fn parse(spec: &str, rest: &str) -> Result<Llm, String> {
        let bad = |why: String| format!("spec '{spec}': {why}");
        let items = spec_items(spec, rest)?;
        let pname = items
            .iter()
            .find(|(k, _)| *k == "preset")
            .map(|(_, v)| *v)
            .unwrap_or("qwen2-0.5b");
        let mut l =
            preset(pname).ok_or_else(|| bad(format!("unknown preset '{pname}' ({PRESETS})")))?;
        // Unless given, the embedding follows `tied`: q4 when tied, an f32 table when not.
        let mut emb = None;
        for (key, val) in items {
            if key == "preset" {
                continue;
            }
            if key == "kvq" {
                l.kvq = KvQuant::parse(val)
                    .ok_or_else(|| bad(format!("kvq='{val}' must be 0, int8, int8c or int4c")))?;
                continue;
            }
            if key == "emb" {
                emb = Some(match val {
                    "q4" => Emb::Q4,
                    "q8" => Emb::Q8,
                    "f16" => Emb::F16,
                    "f32" => Emb::F32,
                    _ => return Err(bad(format!("emb='{val}' must be q4, q8, f32 or f16"))),
                });
                continue;
            }
            let v = spec_int(spec, key, val)?;
            if l.layer.set_layer_key(key, v) {
                continue;
            }
            if Moe::is_key(key) {
                let m = l.moe.as_mut().ok_or_else(|| {
                    bad(format!(
                        "{key}= is a mixture-of-experts key: preset=gpt-oss-20b|phi3.5-moe"
                    ))
                })?;
                m.set_key(key, v);
                continue;
            }
            match key {
                "layers" => l.layers = v,
                "vocab" => l.vocab = v,
                "tied" => l.tied = v != 0,
                "ctx" => l.ctx = v,
                "seed" => l.seed = v as u64,
                "window" => l.window = v,
                "window_cache" => l.window_cache = v != 0,
                "softcap" => l.softcap = v,
                "rot" => l.rot = v,
                "lm_bits" => l.lm_bits = v,
                "packed" => l.layer.packed_qkv = v != 0,
                "sinks" => l.layer.sinks = v != 0,
                _ => return Err(bad(format!("unknown key '{key}' for llm"))),
            }
        }
        l.emb = emb.unwrap_or(match (l.tied, l.lm_bits) {
            (true, 8) => Emb::Q8,
            (true, _) => Emb::Q4,
            (false, _) => Emb::F32,
        });
        let d = &l.layer;
        d.validate_layer().map_err(bad)?;
        if [l.layers, l.vocab, l.ctx].contains(&0) {
            return Err(bad("layers, vocab and ctx must be positive".into()));
        }
        if let Some(m) = &l.moe {
            m.validate(d.hidden, d.inter).map_err(bad)?;
        }
        if l.rot > d.head || !l.rot.is_multiple_of(16) {
            return Err(bad(format!(
                "rot={} must be a multiple of 16 and at most head ({})",
                l.rot, d.head
            )));
        }
        if l.kvq.bits() == 8 && l.window > 0 && l.window_cache && !d.head.is_multiple_of(16) {
            return Err(bad(format!(
                "kvq={} with a windowed cache needs head ({}) to be a multiple of 16 (ORT's CPU \
                 GroupQueryAttention)",
                l.kvq.name(),
                d.head
            )));
        }
        if l.lm_bits != 4 && l.lm_bits != 8 {
            return Err(bad(format!("lm_bits={} must be 4 or 8", l.lm_bits)));
        }
        // A tied table is the lm_head's own codes: q4 over a 4-bit one, q8 over an 8-bit one.
        let quant = matches!(l.emb, Emb::Q4 | Emb::Q8);
        if l.tied && l.lm_bits == 8 && l.emb != Emb::Q8 {
            return Err(bad(
                "tied=1 with lm_bits=8 shares the 8-bit codes: emb=q8".into()
            ));
        }
        if l.emb == Emb::Q8 && l.lm_bits != 8 {
            return Err(bad(
                "emb=q8 shares an 8-bit lm_head's codes: it needs lm_bits=8".into(),
            ));
        }
        if l.emb == Emb::Q4 && l.lm_bits != 4 {
            return Err(bad(
                "emb=q4 shares an int4 lm_head's codes: lm_bits=8 needs emb=q8".into(),
            ));
        }
        if quant && !l.tied {
            return Err(bad(
                "emb=q4|q8 share the lm_head's weight: they need tied=1".into(),
            ));
        }
        if quant && !d.hidden.is_multiple_of(d.block) {
            return Err(bad(format!(
                "emb=q4|q8 needs hidden ({}) to be a multiple of block ({}): GatherBlockQuantized \
                 unpacks whole blocks",
                d.hidden, d.block
            )));
        }
        // Past protobuf's 2 GiB the weights go to a side file; the sizes must not overflow.
        l.init_bytes().map_err(bad)?;
        Ok(l)
    }

    /// Whether the model's initializers pass protobuf's 2 GiB (less a margin for the graph), so
    /// that the large ones go to a side file (module doc).
    pub fn needs_external_data(&self) -> bool {
        self.init_bytes()
            .map_or(true, |b| b > (2usize << 30) - (64 << 20))
    }

    /// Bytes of the embedding table and every weight and scale (upper bound with biases).
    fn init_bytes(&self) -> Result<usize, String> {
        let d = &self.layer;
        let table = self
            .vocab
            .checked_mul(d.hidden)
            .and_then(|n| n.checked_mul(self.emb.table_elem_bytes()))
            .ok_or_else(|| "vocab * hidden overflows".to_string())?;
        table
            .checked_add(self.nbits_bytes()?)
            .ok_or_else(|| "model size overflows".to_string())
    }

    /// Bytes of every int4 weight and scale (upper bound with biases); a MoE layer's experts and
    /// router in place of the MLP.
    fn nbits_bytes(&self) -> Result<usize, String> {
        let d = &self.layer;
        let kb = |k: usize| k.div_ceil(d.block);
        let w = |k: usize, n: usize| -> Option<usize> {
            n.checked_mul(kb(k))?.checked_mul(d.block / 2 + 4 + 4)
        };
        let (q, kv) = (d.heads * d.head, d.kv * d.head);
        // `mix8`: o_proj and the MLP hold twice the code bytes.
        let w8 = |k: usize, n: usize| w(k, n).and_then(|x| x.checked_mul(1 + d.mix8 as usize));
        let mlp = match &self.moe {
            Some(m) => [m.layer_bytes(d.hidden, d.inter, d.block), Some(0), Some(0)],
            None => [
                w8(d.hidden, d.inter),
                w8(d.hidden, d.inter),
                w8(d.inter, d.hidden),
            ],
        };
        let per_layer = [w(d.hidden, q + 2 * kv), w8(q, d.hidden)]
            .into_iter()
            .chain(mlp)
            .try_fold(0usize, |a, x| a.checked_add(x?));
        // An 8-bit lm_head holds twice the code bytes.
        let lm = if self.lm_bits == 8 {
            w(d.hidden, self.vocab).and_then(|x| x.checked_mul(2))
        } else {
            w(d.hidden, self.vocab)
        };
        per_layer
            .and_then(|p| p.checked_mul(self.layers))
            .and_then(|p| p.checked_add(lm?))
            .ok_or_else(|| "model size overflows".to_string())
    }

    /// A canonical spec string (every field), used as the cache key.
    pub fn canonical(&self) -> String {
        let d = &self.layer;
        format!(
            "llm:gen={GENERATOR_VERSION},preset={},layers={},vocab={},tied={},acc={},block={},\
             seed={},ctx={},emb={},hidden={},heads={},kv={},head={},inter={},qkv_bias={},\
             packed={}{}",
            self.preset,
            self.layers,
            self.vocab,
            self.tied as u8,
            d.acc,
            d.block,
            self.seed,
            self.ctx,
            self.emb.name(),
            d.hidden,
            d.heads,
            d.kv,
            d.head,
            d.inter,
            d.qkv_bias as u8,
            d.packed_qkv as u8,
            self.attn_label(",")
        ) + if d.bias_add { ",bias_add=1" } else { "" }
            + &self.arch_label(",")
    }

    /// `{sep}o_bias=1{sep}sinks=1...` for the layout options of the MoE presets that are set, and
    /// the MoE layer's shape (empty for the dense presets, whose cache keys stay as they were).
    fn arch_label(&self, sep: &str) -> String {
        let d = &self.layer;
        let flags = [
            ("o_bias", d.o_bias),
            ("sinks", d.sinks),
            ("layer_norm", d.layer_norm),
            ("lm_bias", self.lm_bias),
        ];
        let mut s: String = flags
            .iter()
            .filter(|(_, on)| *on)
            .map(|(k, _)| format!("{sep}{k}=1"))
            .collect();
        if let Some(m) = &self.moe {
            s += &m.label(sep);
        }
        s
    }

    /// `{sep}window=W{sep}softcap=X` for the attention options that are set (empty without).
    fn attn_label(&self, sep: &str) -> String {
        let mut s = String::new();
        if self.window > 0 {
            s += &format!("{sep}window={}", self.window);
            if !self.window_cache {
                s += &format!("{sep}window_cache=0");
            }
        }
        if self.softcap > 0 {
            s += &format!("{sep}softcap={}", self.softcap);
        }
        if self.rot > 0 {
            s += &format!("{sep}rot={}", self.rot);
        }
        if self.lm_bits == 8 {
            s += &format!("{sep}lm_bits=8");
        }
        if self.layer.mix8 {
            s += &format!("{sep}mix8=1");
        }
        if self.kvq != KvQuant::F32 {
            s += &format!("{sep}kvq={}", self.kvq.name());
        }
        s
    }

    /// Whether layer `i` is a sliding-window layer (`window=W`: the even ones).
    pub fn is_local(&self, i: usize) -> bool {
        self.window > 0 && i.is_multiple_of(2)
    }

    pub fn label(&self) -> String {
        let d = &self.layer;
        format!(
            "llm {} layers={} hidden={} heads={}/{} inter={} vocab={} {} emb={} b{} acc{}{}",
            self.preset,
            self.layers,
            d.hidden,
            d.heads,
            d.kv,
            d.inter,
            self.vocab,
            if self.tied { "tied" } else { "untied" },
            self.emb.name(),
            d.block,
            d.acc,
            self.attn_label(" ")
        ) + &self.arch_label(" ")
    }

    /// The model, all of it in one protobuf (for models within its 2 GiB: see
    /// [`Llm::generate_external`]).
    pub fn generate(&self) -> Generated {
        let mut g = GraphBuilder::new("rcpu_bench_llm", 17);
        let weight_bytes = self.build(&mut g);
        Generated {
            bytes: g.into_bytes(),
            weight_bytes,
        }
    }

    /// The model with every initializer of 1 MiB or more written to `data` (created or
    /// truncated; the model names it by its file name, so it must sit beside the model file).
    pub fn generate_external(&self, data: &std::path::Path) -> Result<Generated, String> {
        let mut g = GraphBuilder::new("rcpu_bench_llm", 17);
        g.external_data(data, 1 << 20)?;
        let weight_bytes = self.build(&mut g);
        g.finish_external()?;
        Ok(Generated {
            bytes: g.into_bytes(),
            weight_bytes,
        })
    }

    /// Writes the whole graph into `g` (module doc); returns the bytes a decode token reads.
    fn build(&self, g: &mut GraphBuilder) -> u64 {
        let d = &self.layer;
        let (h, seed) = (d.hidden, self.seed);
        let batch_seq = [Dim::Sym("batch_size"), Dim::Sym("sequence_length")];
        let kv_dims = |len: &'static str| {
            [
                Dim::Sym("batch_size"),
                Dim::Fixed(d.kv as i64),
                Dim::Sym(len),
                Dim::Fixed(self.kvq.width(d.head) as i64),
            ]
        };
        g.input("input_ids", dtype::INT64, &batch_seq).input(
            "attention_mask",
            dtype::INT64,
            &[Dim::Sym("batch_size"), Dim::Sym("total_sequence_length")],
        );
        for i in 0..self.layers {
            for kind in ["key", "value"] {
                let name = format!("past_key_values.{i}.{kind}");
                g.input(&name, self.kvq.elem(), &kv_dims("past_sequence_length"));
            }
        }
        let mut bytes = mask_subgraph(g);
        bytes += self.embedding(g);
        let rotated = if self.rot > 0 { self.rot } else { d.head };
        let rot = rotary_caches(g, "", rotated, self.ctx);
        // A token reads one cos and one sin row, not the whole caches.
        bytes += rot / self.ctx as u64;
        if let Some(m) = &self.moe {
            bytes += m.shared_constants(g);
        }
        let (mut prev_down, mut prev_res) = (String::new(), String::new());
        for i in 0..self.layers {
            let p = format!("layers.{i}.");
            let (h1, ln1) = (format!("{p}h1"), format!("{p}ln1"));
            let norm_seed = seed ^ (i as u64 * 31 + 11);
            let skip = if i == 0 {
                bytes += self.norm(g, &ln1, "embeds", None, &[&h1], norm_seed);
                "embeds".to_string()
            } else {
                let s = format!("{p}skip_in");
                let outs = [h1.as_str(), "", "", &s];
                bytes += self.norm(g, &ln1, &prev_down, Some(&prev_res), &outs, norm_seed);
                s
            };
            let (pk, pv) = (
                format!("past_key_values.{i}.key"),
                format!("past_key_values.{i}.value"),
            );
            let (ok, ov) = (format!("present.{i}.key"), format!("present.{i}.value"));
            let io = LayerIo {
                prefix: &p,
                input: &h1,
                skip: &skip,
                past: [&pk, &pv],
                present: [&ok, &ov],
                seqlens_k: "seqlens_k",
                total_len: "total_seq_len",
                rotary: ["cos_cache", "sin_cache"],
                window: if self.is_local(i) { self.window } else { 0 },
                window_cache: self.window_cache,
                softcap: self.softcap as f32,
                kv_quant: self.kvq,
            };
            let layer_seed = seed.wrapping_mul(7919).wrapping_add(i as u64 * 104_729);
            prev_down = match &self.moe {
                Some(m) => {
                    // Attention, then the router and QMoE where the MLP would be.
                    bytes += d.attention(g, &io, layer_seed);
                    let out = format!("{p}moe/output");
                    bytes += m.layer(g, &p, &out, d, layer_seed);
                    out
                }
                None => {
                    bytes += d.layer(g, &io, layer_seed);
                    format!("{p}down_proj")
                }
            };
            prev_res = format!("{p}residual");
        }
        bytes += self.norm(
            g,
            "final_norm",
            &prev_down,
            Some(&prev_res),
            &["final_h"],
            seed ^ 0xf1,
        );
        // With a bias (Phi-3.5-MoE), the builder's Add after the lm_head writes the logits.
        let lm_out = if self.lm_bias {
            "lm_head/MatMul"
        } else {
            "logits"
        };
        bytes += nbits_layer(
            g,
            "lm_head",
            "_lm_head",
            "final_h",
            lm_out,
            h,
            self.vocab,
            d.block,
            d.acc,
            (self.lm_bits, d.codes),
            false,
            None,
            true,
            self.lm_head_seed(),
        );
        if self.lm_bias {
            bytes += vec_init(g, "lm_head.bias", self.vocab, seed ^ 0x1b, 0.0, 0.1);
            g.node(
                "Add",
                "",
                "lm_head/Add",
                &[lm_out, "lm_head.bias"],
                &["logits"],
                &[],
            );
        }
        g.output_shaped(
            "logits",
            dtype::FLOAT,
            &[
                Dim::Sym("batch_size"),
                Dim::Sym("sequence_length"),
                Dim::Fixed(self.vocab as i64),
            ],
        );
        for i in 0..self.layers {
            for kind in ["key", "value"] {
                let name = format!("present.{i}.{kind}");
                g.output_shaped(&name, self.kvq.elem(), &kv_dims("total_sequence_length"));
            }
        }
        bytes
    }

    /// A norm `name` over `x` (with `skip`: the skip form, adding `skip` first; `outs` as the
    /// node's outputs): RMSNorm (SimplifiedLayerNormalization, SkipSimplifiedLayerNormalization)
    /// with a weight `{name}.w`, or with `layer_norm` LayerNorm (LayerNormalization,
    /// SkipLayerNormalization) with a weight and a bias `{name}.b`, as the builder writes them.
    /// Returns the bytes of its initializers.
    fn norm(
        &self,
        g: &mut GraphBuilder,
        name: &str,
        x: &str,
        skip: Option<&str>,
        outs: &[&str],
        seed: u64,
    ) -> u64 {
        let h = self.layer.hidden;
        let (w, b) = (format!("{name}.w"), format!("{name}.b"));
        let mut bytes = vec_init(g, &w, h, seed, 1.0, 0.1);
        let ln = self.layer.layer_norm;
        let mut inputs = vec![x];
        inputs.extend(skip);
        inputs.push(&w);
        if ln {
            bytes += vec_init(g, &b, h, seed ^ 0xb, 0.0, 0.1);
            inputs.push(&b);
        }
        let (op, domain, attrs) = match (ln, skip.is_some()) {
            (false, false) => (
                "SimplifiedLayerNormalization",
                "",
                vec![("axis", Attr::Int(-1)), ("epsilon", Attr::Float(1e-6))],
            ),
            (false, true) => (
                "SkipSimplifiedLayerNormalization",
                "com.microsoft",
                vec![("epsilon", Attr::Float(1e-6))],
            ),
            (true, false) => (
                "LayerNormalization",
                "",
                vec![
                    ("epsilon", Attr::Float(1e-5)),
                    ("axis", Attr::Int(-1)),
                    ("stash_type", Attr::Int(1)),
                ],
            ),
            (true, true) => (
                "SkipLayerNormalization",
                "com.microsoft",
                vec![("epsilon", Attr::Float(1e-5))],
            ),
        };
        g.node(op, domain, name, &inputs, outs, &attrs);
        bytes
    }

    fn lm_head_seed(&self) -> u64 {
        self.seed.wrapping_mul(31337).wrapping_add(0x1e4d)
    }

    /// `embeds` from `input_ids` (module doc); returns the bytes a token reads (one row).
    fn embedding(&self, g: &mut GraphBuilder) -> u64 {
        if matches!(self.emb, Emb::Q4 | Emb::Q8) {
            return self.tied_quant_embedding(g);
        }
        let (h, v) = (self.layer.hidden, self.vocab);
        let table: Vec<f32> = if self.tied {
            dequantize(
                h,
                v,
                self.layer.block,
                self.layer.codes,
                self.lm_head_seed(),
            )
        } else {
            crate::rand_f32(v * h, self.seed ^ 0xe4b)
        };
        let dims = [v as i64, h as i64];
        let f16 = self.emb == Emb::F16;
        let gathered = if f16 { "embeds_f16" } else { "embeds" };
        if f16 {
            let raw = table
                .iter()
                .flat_map(|x| f16_bits(*x).to_le_bytes())
                .collect();
            g.initializer_raw("embed_tokens", dtype::FLOAT16, &dims, raw);
        } else {
            g.initializer_f32("embed_tokens", &dims, &table);
        }
        drop(table);
        g.node(
            "Gather",
            "",
            "embed_gather",
            &["embed_tokens", "input_ids"],
            &[gathered],
            &[],
        );
        if f16 {
            g.node(
                "Cast",
                "",
                "embed_cast",
                &["embeds_f16"],
                &["embeds"],
                &[("to", Attr::Int(dtype::FLOAT as i64))],
            );
        }
        (h * self.emb.table_elem_bytes()) as u64
    }

    /// GatherBlockQuantized over the lm_head's B (`B_lm_head`, reshaped to [vocab, hidden/2]) and
    /// scales (`scales_lm_head`, [vocab, k_blocks]); the lm_head itself is made later in
    /// `generate`, under those names. Returns the bytes a token reads of it: one row (codes and scales) and the Reshape's shape.
    fn tied_quant_embedding(&self, g: &mut GraphBuilder) -> u64 {
        let (h, block) = (self.layer.hidden, self.layer.block);
        let row_bytes = h * self.lm_bits / 8;
        g.initializer_i64(
            "embed_q_shape",
            &[2],
            &[self.vocab as i64, row_bytes as i64],
        );
        g.node(
            "Reshape",
            "",
            "embed_reshape",
            &["B_lm_head", "embed_q_shape"],
            &["embed_q"],
            &[],
        )
        .node(
            "GatherBlockQuantized",
            "com.microsoft",
            "embed_gather_block_quantized",
            &["embed_q", "input_ids", "scales_lm_head"],
            &["embeds"],
            &[
                ("bits", Attr::Int(self.lm_bits as i64)),
                ("block_size", Attr::Int(block as i64)),
                ("gather_axis", Attr::Int(0)),
                ("quantize_axis", Attr::Int(1)),
            ],
        );
        // One row of codes and scales, and the Reshape's shape (two int64s).
        (row_bytes + h / block * 4 + 16) as u64
    }

    /// The `genai_config.json` onnxruntime-genai reads beside the model (`file`).
    pub fn genai_config(&self, file: &str) -> serde_json::Value {
        let d = &self.layer;
        // The type is the builder's (the architecture's name before "For", lower case).
        let (bos, eos, pad, kind) = match (self.preset.as_str(), self.moe.as_ref().map(|m| m.style))
        {
            (_, Some(MoeStyle::GptOss)) => (199998, 200002, 199999, "gptoss"),
            (_, Some(MoeStyle::PhiMoe)) => (1, 32000, 32000, "phimoe"),
            ("llama-3.2-1b", _) => (128000, 128001, 128001, "llama"),
            ("qwen3-0.6b", _) => (151643, 151645, 151643, "qwen3"),
            _ => (151643, 151645, 151643, "qwen2"),
        };
        let clamp = |t: usize| t.min(self.vocab - 1);
        let mut cfg = serde_json::json!({
            "model": {
                "bos_token_id": clamp(bos),
                "context_length": self.ctx,
                "decoder": {
                    "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                    "filename": file,
                    "head_size": d.head,
                    "hidden_size": d.hidden,
                    "inputs": {
                        "input_ids": "input_ids",
                        "attention_mask": "attention_mask",
                        "past_key_names": "past_key_values.%d.key",
                        "past_value_names": "past_key_values.%d.value"
                    },
                    "outputs": {
                        "logits": "logits",
                        "present_key_names": "present.%d.key",
                        "present_value_names": "present.%d.value"
                    },
                    "num_attention_heads": d.heads,
                    "num_hidden_layers": self.layers,
                    "num_key_value_heads": d.kv
                },
                "eos_token_id": clamp(eos),
                "pad_token_id": clamp(pad),
                "type": kind,
                "vocab_size": self.vocab
            },
            "search": {
                "diversity_penalty": 0.0,
                "do_sample": false,
                "early_stopping": true,
                "length_penalty": 1.0,
                "max_length": self.ctx,
                "min_length": 0,
                "no_repeat_ngram_size": 0,
                "num_beams": 1,
                "num_return_sequences": 1,
                // What the genai builder writes for a GroupQueryAttention model (CPU included):
                // genai then hands each layer's KV cache over as one buffer, the past input and
                // the present output at once (`rcpu-bench llm --kv shared` runs it that way).
                "past_present_share_buffer": true,
                "repetition_penalty": 1.0,
                "temperature": 1.0,
                "top_k": 1,
                "top_p": 1.0
            }
        });
        if self.window > 0 && self.window_cache {
            // What the genai builder writes beside windowed caches (`sliding_window_cache = 1`):
            // genai sizes those layers' buffers from the window.
            let layers: Vec<usize> = (0..self.layers).filter(|&i| self.is_local(i)).collect();
            cfg["model"]["decoder"]["sliding_window"] = serde_json::json!({
                "window_size": self.window,
                "slide_key_value_cache": false,
                "slide_inputs": false,
                "layers": layers,
                "cache_slack": 0
            });
        }
        cfg
    }
}

/// seqlens_k and total_seq_len from attention_mask, as genai's builder computes them; returns
/// the bytes of its (scalar) initializers.
fn mask_subgraph(g: &mut GraphBuilder) -> u64 {
    g.initializer_i64("mask_axes", &[1], &[1])
        .initializer_i64("one_i64", &[], &[1])
        .initializer_i64("index_1", &[], &[1]);
    let to_i32 = [("to", Attr::Int(dtype::INT32 as i64))];
    g.node(
        "ReduceSum",
        "",
        "mask_reduce_sum",
        &["attention_mask", "mask_axes"],
        &["mask_sum"],
        &[("keepdims", Attr::Int(0))],
    )
    .node(
        "Sub",
        "",
        "mask_sub",
        &["mask_sum", "one_i64"],
        &["seqlens_k_i64"],
        &[],
    )
    .node(
        "Cast",
        "",
        "seqlens_k_cast",
        &["seqlens_k_i64"],
        &["seqlens_k"],
        &to_i32,
    )
    .node(
        "Shape",
        "",
        "mask_shape",
        &["attention_mask"],
        &["mask_dims"],
        &[],
    )
    .node(
        "Gather",
        "",
        "mask_total",
        &["mask_dims", "index_1"],
        &["total_seq_len_i64"],
        &[("axis", Attr::Int(0))],
    )
    .node(
        "Cast",
        "",
        "total_seq_len_cast",
        &["total_seq_len_i64"],
        &["total_seq_len"],
        &to_i32,
    );
    24
}

/// The [n, k] f32 matrix an int4 weight (from `nbits_weights`, implicit zero point 8) stands for.
fn dequantize(k: usize, n: usize, block: usize, codes: Codes, seed: u64) -> Vec<f32> {
    let (b, scales) = nbits_weights(k, n, block, 4, codes, seed);
    let kb = k.div_ceil(block);
    let mut out = Vec::with_capacity(n * k);
    for row in 0..n {
        for kk in 0..k {
            let (blk, off) = (kk / block, kk % block);
            let byte = b[(row * kb + blk) * block / 2 + off / 2];
            let q = if off % 2 == 0 { byte & 15 } else { byte >> 4 };
            out.push((q as f32 - 8.0) * scales[row * kb + blk]);
        }
    }
    out
}

/// f32 -> IEEE half, round to nearest even (finite, normal-range inputs; tiny values flush to 0).
fn f16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
    if exp <= 0 {
        return sign;
    }
    if exp >= 31 {
        return sign | 0x7c00;
    }
    let mant = b & 0x7f_ffff;
    let mut h = ((exp as u32) << 10) | (mant >> 13);
    let rest = mant & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && h & 1 == 1) {
        h += 1;
    }
    sign | h as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qwen3_splits_its_packed_qkv_as_the_builder_does() {
        use prost::Message;
        // (Split nodes, MatMulNBits nodes) of a two-layer model of `spec`.
        let ops = |spec: &str| {
            let l = Llm::parse("s", spec).unwrap();
            let g = crate::onnx::ModelProto::decode(&l.generate().bytes[..])
                .unwrap()
                .graph
                .unwrap();
            let count = |op: &str| g.node.iter().filter(|n| n.op_type == op).count();
            (count("Split"), count("MatMulNBits"))
        };
        let small = "layers=2,vocab=1000";
        // Per layer qkv, o, gate, up and down; then the lm_head.
        assert_eq!(ops(&format!("preset=qwen3-0.6b,{small}")), (2, 11));
        assert_eq!(ops(&format!("preset=qwen3-0.6b,{small},packed=0")), (0, 15));
        assert_eq!(ops(&format!("preset=qwen2-0.5b,{small}")), (0, 11));
        let packed = Llm::parse("s", "preset=qwen3-0.6b").unwrap();
        let apart = Llm::parse("s", "preset=qwen3-0.6b,packed=0").unwrap();
        assert_ne!(packed.canonical(), apart.canonical());
    }

    /// `kvq=`: the GQA attributes and scale inputs, the cache types and widths, the cache key, the
    /// bench's seeded past codes; float32 caches by default with the old cache key.
    #[test]
    fn kvq_quantizes_the_kv_cache() {
        use super::super::llm_model::{step_feeds, Kv};
        use super::super::model::ModelInfo;
        use crate::onnx::dtype;
        use prost::Message;
        let small = "preset=qwen2-0.5b,layers=2,vocab=64,ctx=16";
        let plain = Llm::parse("s", small).unwrap();
        assert_eq!(plain.kvq, KvQuant::F32);
        assert!(!plain.canonical().contains("kvq"));
        let same = Llm::parse("s", &format!("{small},kvq=0")).unwrap();
        assert_eq!(plain.canonical(), same.canonical());
        for (kvq, kind, bits, elem, width, scales) in [
            ("int8", "PER_TENSOR", 8, dtype::INT8, 64, 1),
            ("int8c", "PER_CHANNEL", 8, dtype::INT8, 64, 128),
            ("int4c", "PER_CHANNEL", 4, dtype::UINT8, 32, 128),
        ] {
            let l = Llm::parse("s", &format!("{small},kvq={kvq}")).unwrap();
            assert!(l.canonical().ends_with(&format!(",kvq={kvq}")));
            assert_ne!(l.canonical(), plain.canonical());
            let gen = l.generate();
            let g = crate::onnx::ModelProto::decode(&gen.bytes[..])
                .unwrap()
                .graph
                .unwrap();
            let gqa: Vec<_> = g
                .node
                .iter()
                .filter(|n| n.op_type == "GroupQueryAttention")
                .collect();
            assert_eq!(gqa.len(), 2);
            for n in gqa {
                assert_eq!(n.input.len(), 14, "{kvq}: k_scale / v_scale at 12 / 13");
                let attr = |name: &str| n.attribute.iter().find(|a| a.name == name).unwrap();
                assert_eq!(attr("k_quant_type").s, kind.as_bytes());
                assert_eq!(attr("v_quant_type").s, kind.as_bytes());
                assert_eq!(attr("kv_cache_bit_width").i, bits);
                for s in &n.input[12..] {
                    let t = g.initializer.iter().find(|t| &t.name == s).unwrap();
                    assert_eq!(t.dims, [scales], "{kvq}: {s}");
                }
            }
            // Two scale tensors per layer, float32, counted as bytes a token reads.
            assert_eq!(
                gen.weight_bytes,
                plain.generate().weight_bytes + 2 * 2 * scales as u64 * 4
            );
            let info = ModelInfo::parse(&gen.bytes).unwrap();
            for inp in &info.inputs[2..] {
                assert_eq!((inp.elem, inp.dims[3]), (elem, Some(width)), "{}", inp.name);
            }
            let copied = step_feeds(&info, 1, 5, 64, 9, Kv::Copy).unwrap();
            let shared = step_feeds(&info, 1, 5, 64, 9, Kv::Shared { capacity: 16 }).unwrap();
            for (c, s) in copied[2..].iter().zip(&shared[2..]) {
                assert_eq!(c.shape, [1, 2, 5, width]);
                assert_eq!(s.shape, [1, 2, 16, width]);
                let bytes = |t: &crate::Tensor| -> Vec<u8> {
                    match &t.data {
                        crate::Data::I8(v) => v.iter().map(|&x| x as u8).collect(),
                        crate::Data::U8(v) => v.clone(),
                        other => panic!("{kvq}: a float past {other:?}"),
                    }
                };
                let (c, s) = (bytes(c), bytes(s));
                let w = width as usize;
                for h in 0..2 {
                    // The seeded rows at the start of each head, zero bytes after them.
                    assert_eq!(
                        &s[h * 16 * w..h * 16 * w + 5 * w],
                        &c[h * 5 * w..(h + 1) * 5 * w]
                    );
                    assert!(s[h * 16 * w + 5 * w..(h + 1) * 16 * w]
                        .iter()
                        .all(|&b| b == 0));
                }
                assert!(c.iter().any(|&b| b != 0));
            }
        }
        assert!(Llm::parse("s", &format!("{small},kvq=int2")).is_err());
        // ORT's CPU GQA: a windowed 8-bit cache needs head % 16 == 0.
        assert!(Llm::parse("s", "preset=qwen2-0.5b,head=40,window=4,kvq=int8").is_err());
        assert!(Llm::parse("s", "preset=qwen2-0.5b,head=40,window=4,kvq=int4c").is_ok());
    }

    #[test]
    fn bias_add_moves_the_qkv_bias_into_an_add() {
        use prost::Message;
        // (Add nodes, MatMulNBits nodes with a bias input) of a two-layer Qwen2 model.
        let ops = |extra: &str| {
            let l = Llm::parse("s", &format!("layers=2,vocab=1000{extra}")).unwrap();
            let g = crate::onnx::ModelProto::decode(&l.generate().bytes[..])
                .unwrap()
                .graph
                .unwrap();
            let adds = g.node.iter().filter(|n| n.op_type == "Add").count();
            let biased = g
                .node
                .iter()
                .filter(|n| {
                    n.op_type == "MatMulNBits" && n.input.get(5).is_some_and(|b| !b.is_empty())
                })
                .count();
            (adds, biased)
        };
        let (adds, biased) = ops("");
        assert_eq!(biased, 2);
        assert_eq!(ops(",bias_add=1"), (adds + 2, 0));
        let a = Llm::parse("s", "bias_add=1").unwrap();
        assert!(a.canonical().ends_with(",bias_add=1"));
        assert_ne!(a.canonical(), Llm::parse("s", "").unwrap().canonical());
    }

    #[test]
    fn presets_overrides_and_bad_specs() {
        let l = Llm::parse("s", "preset=llama-3.2-1b,layers=2,vocab=1000,acc=0").unwrap();
        assert_eq!((l.layer.hidden, l.layer.heads, l.layer.kv), (2048, 32, 8));
        assert_eq!((l.layers, l.vocab, l.layer.acc, l.tied), (2, 1000, 0, true));
        assert!(!l.layer.qkv_bias && l.layer.packed_qkv);
        // Full Llama-3.2-1B: tied, so the embedding is q4 (no table).
        let full = Llm::parse("s", "preset=llama-3.2-1b").unwrap();
        assert_eq!((full.layers, full.vocab, full.emb), (16, 128256, Emb::Q4));
        // The f32 table still fits protobuf's 2 GiB (1.05 GB); untied defaults to a table.
        let f32_table = Llm::parse("s", "preset=llama-3.2-1b,emb=f32").unwrap();
        assert!(!f32_table.needs_external_data() && !full.needs_external_data());
        // A larger one no longer does: its weights go to a side file.
        let big = Llm::parse("s", "preset=llama-3.2-1b,vocab=400000,emb=f32").unwrap();
        assert!(big.needs_external_data());
        let untied = Llm::parse("s", "tied=0").unwrap();
        assert_eq!(untied.emb, Emb::F32);
        assert!(q_canon_differs());
        let q = Llm::parse("s", "").unwrap();
        assert_eq!((q.layer.hidden, q.layers, q.vocab), (896, 24, 151936));
        assert!(q.layer.qkv_bias);
        // Partial rotary: its own cache key.
        let r = Llm::parse("s", "rot=48").unwrap();
        assert_eq!(r.rot, 48);
        assert!(r.canonical().ends_with(",rot=48") && q.canonical() != r.canonical());
        // An 8-bit lm_head: its own cache key; tied, the embedding shares its codes (q8).
        let h8 = Llm::parse("s", "tied=0,lm_bits=8").unwrap();
        assert_eq!(h8.lm_bits, 8);
        assert!(h8.canonical().ends_with(",lm_bits=8"));
        assert_ne!(h8.canonical(), untied.canonical());
        let t8 = Llm::parse("s", "lm_bits=8").unwrap();
        assert_eq!((t8.emb, t8.tied), (Emb::Q8, true));
        let m8 = Llm::parse("s", "lm_bits=8,mix8=1").unwrap();
        assert!(m8.layer.mix8 && m8.canonical().ends_with(",lm_bits=8,mix8=1"));
        for bad in [
            "lm_bits=8,emb=q4",
            "lm_bits=8,emb=f32",
            "emb=q8",
            "tied=0,lm_bits=8,emb=q8",
            "tied=0,lm_bits=2",
            "tied=0,lm_bits=16",
            "preset=gpt5",
            "layers=0",
            "emb=f8",
            "heads=3",
            "block=24",
            "foo=1",
            "tied=0,emb=q4",
            "acc=7",
            "kv=0",
            "ctx=0",
            "hidden=880",
            "rot=40",
            "rot=80",
        ] {
            assert!(Llm::parse("s", bad).is_err(), "{bad} must be rejected");
        }
    }

    /// The cache key names the generator version and the embedding layout.
    fn q_canon_differs() -> bool {
        let q4 = Llm::parse("s", "").unwrap().canonical();
        let f32 = Llm::parse("s", "emb=f32").unwrap().canonical();
        q4 != f32
            && q4.starts_with(&format!("llm:gen={GENERATOR_VERSION},"))
            && q4.contains("emb=q4")
    }

    #[test]
    fn f16_conversion_rounds_to_nearest() {
        assert_eq!(f16_bits(1.0), 0x3c00);
        assert_eq!(f16_bits(-2.0), 0xc000);
        assert_eq!(f16_bits(0.1), 0x2e66);
        assert_eq!(f16_bits(65504.0), 0x7bff);
        assert_eq!(f16_bits(1e-9), 0);
    }
}
