"""Writes a generated rcpu-bench LLM (`rcpu-bench gen llm:...`, 4- or 8-bit weights without zero points,
block 32) as a GGUF file of the same weights for llama.cpp: every int4 weight as Q4_0 blocks and every
8-bit one (`lm_bits=8`, `mix8=1`) as Q8_0 blocks of the same codes, each block's scale rounded to f16 (as
rcpu packs level-4 weights), norms, biases and attention sinks as float32, the packed QKV projection as
llama.cpp's fused `attn_qkv`. The tokenizer is a placeholder vocabulary of the model's size (random
weights: benchmarks only). Refuses any other layout with a message naming what differs.

Two layouts:
- the dense presets (qwen2-0.5b as llama.cpp's `qwen2`, llama-3.2-1b as `llama`): tied, the quantized
  embedding (`emb=q4|q8`) written once as `token_embd`, which llama.cpp reads as the lm_head too;
- `preset=gpt-oss-20b` as llama.cpp's `gpt-oss` (`convert_gpt_oss`): per layer the QMoE's experts as
  `ffn_gate_exps` / `ffn_up_exps` (fc1's interleaved rows: even rows the gate, odd rows the linear half,
  as ORT's swiglu_fusion=1 reads them; their bias split the same way) and `ffn_down_exps` (fc2), each
  `[experts, rows, blocks]` of Q4_0; the int4 router as `ffn_gate_inp` (Q4_0) with its bias; the attention
  sinks; the sliding-window layers as an explicit `sliding_window_pattern`; plain rotary (rope scaling
  `none`); the untied f32 embedding table as an F32 `token_embd` (f16 table: F16) and the lm_head as
  `output` (Q4_0).

    python gguf_from_onnx.py MODEL_DIR OUT.gguf [--check N]

`--check N` dequantizes N weights of the written file again and compares them with the ONNX weights
(codes equal, scales within f16 rounding; gpt-oss: layer 0's gate, up and down experts first, expert by
expert, then the split expert biases bit for bit).
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

try:
    import gguf
except ImportError:  # pragma: no cover - a message, not a crash
    sys.exit("gguf_from_onnx: needs the `gguf` package (pip install gguf)")

Q4_0_BLOCK = 32
# llama.cpp's gpt-oss SwiGLU (llama-graph.cpp, build_moe_ffn, LLM_FFN_SWIGLU_OAI_MOE): alpha 1.702 and
# limit 7.0 are constants there and ggml_swiglu_oai adds 1 to the linear half (beta 1), so a QMoE node
# with other values has no gpt-oss GGUF.
OAI_ALPHA, OAI_BETA, OAI_LIMIT = np.float32(1.702), np.float32(1.0), np.float32(7.0)


class Refused(Exception):
    pass


def codes_of(b: np.ndarray, n: int, k: int, bits: int) -> np.ndarray:
    """ONNX MatMulNBits B -> codes [N, k_blocks, 32]: 8-bit B [N, k_blocks, 32] holds one code a
    byte, in order; 4-bit B [N, k_blocks, 16] holds element 2j of a block in byte j's low nibble and
    2j + 1 in its high one."""
    width = Q4_0_BLOCK if bits == 8 else Q4_0_BLOCK // 2
    if b.dtype != np.uint8 or b.ndim != 3 or b.shape[0] != n or b.shape[2] != width:
        raise Refused(f"B of shape {b.shape} / {b.dtype} is not [N, k_blocks, {width}] uint8")
    if b.shape[1] * Q4_0_BLOCK != k:
        raise Refused(f"K = {k} is not k_blocks * 32 ({b.shape[1]} blocks)")
    if bits == 8:
        return np.asarray(b)
    c = np.empty(b.shape[:2] + (Q4_0_BLOCK,), np.uint8)
    c[..., 0::2] = b & 0x0F
    c[..., 1::2] = b >> 4
    return c


def block_rows(bits: int, codes: np.ndarray, scales: np.ndarray) -> tuple[np.ndarray, object]:
    """codes [N, kb, 32], scales [N, kb] -> (rows [N, kb * block bytes], GGML type): each block its
    f16 scale d, then its codes as Q4_0 (`bits` 4: qs[j] = q[j] | q[j + 16] << 4, value (q - 8) d)
    or Q8_0 (8: 32 int8 q - 128, value (q - 128) d), the ONNX weight's values (zero point 8 / 128)."""
    n, kb, _ = codes.shape
    d = scales.astype(np.float16).reshape(n, kb, 1).view(np.uint8)
    if bits == 4:
        qs, kind = codes[..., :16] | (codes[..., 16:] << 4), gguf.GGMLQuantizationType.Q4_0
    else:
        qs, kind = (codes.astype(np.int16) - 128).astype(np.int8).view(np.uint8), gguf.GGMLQuantizationType.Q8_0
    return np.concatenate([d, qs], axis=2).reshape(n, -1), kind


def dequantized(b: np.ndarray, scales: np.ndarray, n: int, k: int, bits: int) -> np.ndarray:
    """The float32 weight [N, K] that B's codes and f16-rounded scales hold (what the GGUF must hold)."""
    codes = codes_of(np.asarray(b).reshape(n, k // Q4_0_BLOCK, -1), n, k, bits)
    s = np.asarray(scales, np.float32).reshape(n, -1).astype(np.float16).astype(np.float32)
    return ((codes.astype(np.float32) - (8 if bits == 4 else 128)) * s[..., None]).reshape(n, k)


def attrs_of(node) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def nbits_weight(node, inits):
    """(bits, B [N, kb, 16 | 32], scales [N, kb], bias or None, N, K) of a MatMulNBits node."""
    attrs = attrs_of(node)
    bits = attrs.get("bits", 4)
    if bits not in (4, 8) or attrs.get("block_size") != Q4_0_BLOCK:
        raise Refused(f"{node.name}: bits {bits} / block {attrs.get('block_size')} (needs 4 or 8 / 32)")
    ins = list(node.input) + [""] * 6
    if ins[3]:
        raise Refused(f"{node.name}: has zero points (Q4_0 / Q8_0 are symmetric around 8 / 128)")
    if ins[4]:
        raise Refused(f"{node.name}: has g_idx")
    n, k = attrs["N"], attrs["K"]
    b = inits[ins[1]]
    scales = np.asarray(inits[ins[2]], np.float32).reshape(n, -1)
    bias = inits[ins[5]] if ins[5] else None
    return bits, b, scales, bias, n, k


def rope_base(cos: np.ndarray, head: int) -> float:
    """The rotary base the cos cache [positions, head / 2] was made with: its position 1 holds
    cos(base^(-2i / head)), so pair 1's angle is base^(-2 / head)."""
    if cos.ndim != 2 or cos.shape[1] != head // 2 or cos.shape[0] < 2:
        raise Refused(f"cos_cache of shape {cos.shape} is not [positions, {head // 2}]")
    angle = float(np.arccos(np.clip(cos[1, 1], -1.0, 1.0)))
    base = angle ** (-head / 2)
    expect = np.cos(np.outer(np.arange(cos.shape[0]), base ** (-np.arange(head // 2) * 2 / head)))
    if not np.allclose(expect, cos, atol=1e-3):
        raise Refused("cos_cache is not a plain rotary table (no single base reproduces it)")
    return float(f"{base:.6g}")


def norm_epsilon(node) -> float:
    return next((float(onnx.helper.get_attribute_value(a)) for a in node.attribute if a.name == "epsilon"), 1e-5)


def load_initializers(m, model_dir: str) -> dict:
    """name -> array. An initializer kept in a side file (`model.onnx.data`: gpt-oss's) is a read-only
    memmap of it, so a model of gigabytes is neither read twice nor held in memory."""
    out = {}
    for t in m.graph.initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            out[t.name] = numpy_helper.to_array(t)
            continue
        info = {e.key: e.value for e in t.external_data}
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type))
        shape = tuple(int(d) for d in t.dims)
        if "length" in info and int(info["length"]) != math.prod(shape) * dtype.itemsize:
            raise Refused(f"{t.name}: external data length {info['length']} does not match {shape} {dtype}")
        out[t.name] = np.memmap(os.path.join(model_dir, info["location"]), dtype=dtype, mode="r",
                                offset=int(info.get("offset", 0)), shape=shape)
    return out


def census(m) -> dict:
    counts: dict = {}
    for n in m.graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return counts


def check_census(m, want: dict, what: str) -> None:
    """The graph must be the decoder mapped, node for node: anything else (the per-head q/k norms of
    Qwen3's preset, say) would be left out of the GGUF silently."""
    counts = census(m)
    if counts != want:
        extra = {k: v for k, v in counts.items() if want.get(k) != v}
        extra.update({k: 0 for k in want if k not in counts})
        raise Refused(f"the graph is not the {what} this writes (node counts {extra}, expected "
                      f"{ {k: want.get(k, 0) for k in extra} })")


def placeholder_vocab(w, vocab: int) -> None:
    """A placeholder SPM vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then numbered ones."""
    toks = [b"<unk>", b"<s>", b"</s>"] + [f"<0x{i:02X}>".encode() for i in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    toks += [f"t{i}".encode() for i in range(len(toks), vocab)]
    types += [gguf.TokenType.NORMAL] * (vocab - len(types))
    w.add_tokenizer_model("llama")
    w.add_token_list(toks[:vocab])
    w.add_token_scores([0.0] * vocab)
    w.add_token_types(types[:vocab])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(False)


class Writer:
    """The GGUF writer and, for `verify`, what each written tensor must read back as: `written[name]` =
    (slices, want, kind): `want(i)` the float32 values of slice i of a 3-D tensor (the expert; i is None
    for a 1-D or 2-D tensor, `slices` 0), `kind` "weight" (a quantized weight, counted by --check) or
    "exact" (a float tensor rearranged on the way, checked bit for bit every time)."""

    def __init__(self, out: str, arch: str):
        self.w = gguf.GGUFWriter(out, arch)
        self.written: dict = {}
        self.check_first: list = []  # verify's first weights (gpt-oss: layer 0's experts)

    def quant(self, name: str, node, inits) -> object:
        """A MatMulNBits weight as `{name}.weight` (Q4_0 / Q8_0); returns its bias (or None)."""
        bits, b, scales, bias, n, k = nbits_weight(node, inits)
        rows, kind = block_rows(bits, codes_of(np.asarray(b), n, k, bits), scales)
        self.w.add_tensor(f"{name}.weight", rows, raw_dtype=kind)
        self.written[f"{name}.weight"] = (0, lambda _: dequantized(b, scales, n, k, bits), "weight")
        return bias

    def f32(self, name: str, value) -> None:
        self.w.add_tensor(name, np.asarray(value, np.float32))

    def finish(self) -> None:
        self.w.write_header_to_file()
        self.w.write_kv_data_to_file()
        self.w.write_tensors_to_file()
        self.w.close()


def convert_dense(spec: str, fields: dict, m, inits: dict, by_name: dict, out: str) -> Writer:
    """The dense presets (module doc): llama.cpp's `qwen2` with a QKV bias, `llama` without."""
    if fields.get("tied") != "1" or fields.get("emb") not in ("q4", "q8"):
        raise Refused(f"needs tied=1 and emb=q4 or q8 (spec {spec})")
    for key in ("window", "softcap", "rot", "qk_norm"):
        if key in fields:
            raise Refused(f"spec option {key} has no GGUF mapping here")
    layers, hidden = int(fields["layers"]), int(fields["hidden"])
    heads, kv, head = int(fields["heads"]), int(fields["kv"]), int(fields["head"])
    inter, vocab, ctx = int(fields["inter"]), int(fields["vocab"]), int(fields["ctx"])
    if head * heads != hidden:
        raise Refused(f"heads * head = {heads * head} differs from hidden {hidden}")
    check_census(m, {"MatMulNBits": 5 * layers + 1, "GroupQueryAttention": layers, "SimplifiedLayerNormalization": 1,
                     "SkipSimplifiedLayerNormalization": 2 * layers, "Reshape": 1, "GatherBlockQuantized": 1,
                     "Sigmoid": layers, "Mul": 2 * layers, "ReduceSum": 1, "Sub": 1, "Cast": 2, "Shape": 1,
                     "Gather": 1}, "plain decoder")
    arch = "qwen2" if fields.get("qkv_bias") == "1" else "llama"
    for i in range(layers):
        attrs = attrs_of(by_name[f"layers.{i}.attn"])
        if attrs.get("do_rotary") != 1 or attrs.get("rotary_interleaved", 0) != 0:
            raise Refused(f"layers.{i}.attn: needs do_rotary = 1 with rotate-half (llama.cpp's {arch} rope)")
    wr = Writer(out, arch)
    w = wr.w
    common_keys(w, spec, ctx, hidden, layers, inter, heads, kv)
    w.add_rope_freq_base(rope_base(inits["cos_cache"], head))
    w.add_rope_dimension_count(head)
    w.add_layer_norm_rms_eps(norm_epsilon(by_name["layers.0.ln1"]))
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if fields.get("mix8") == "1" else gguf.LlamaFileType.MOSTLY_Q4_0)
    placeholder_vocab(w, vocab)

    def quant(name, node_name):
        bias = wr.quant(name, by_name[node_name], inits)
        if bias is not None:
            wr.f32(f"{name}.bias", bias)

    quant("token_embd", "lm_head")
    wr.f32("output_norm.weight", inits["final_norm.w"])
    for i in range(layers):
        p = f"blk.{i}"
        wr.f32(f"{p}.attn_norm.weight", inits[f"layers.{i}.ln1.w"])
        quant(f"{p}.attn_qkv", f"layers.{i}.qkv_proj")
        quant(f"{p}.attn_output", f"layers.{i}.o_proj")
        wr.f32(f"{p}.ffn_norm.weight", inits[f"layers.{i}.ln2.w"])
        quant(f"{p}.ffn_gate", f"layers.{i}.gate_proj")
        quant(f"{p}.ffn_up", f"layers.{i}.up_proj")
        quant(f"{p}.ffn_down", f"layers.{i}.down_proj")
    return wr


def gpt_oss_refusals(fields: dict) -> None:
    """Spec options of the gpt-oss preset that llama.cpp's gpt-oss graph (src/models/openai-moe.cpp)
    has no place for, each with the reason."""
    why = {
        "softcap": "llama.cpp's gpt-oss attention has no logit softcap",
        "rot": "llama.cpp's gpt-oss uses the rotary dims as the head size (n_rot): a partly rotated head "
               "has no gpt-oss GGUF",
        "kvq": "a quantized ONNX KV cache (k_scale / v_scale) is another function than llama.cpp's f16 cache",
    }
    for key, reason in why.items():
        if fields.get(key, "0") != "0":
            raise Refused(f"spec option {key}={fields[key]}: {reason}")
    if fields.get("sinks") != "1":
        raise Refused("sinks=0: llama.cpp's gpt-oss loader requires blk.N.attn_sinks (and its attention adds "
                      "them); a model without sinks has no gpt-oss GGUF")
    if fields.get("o_bias") != "1":
        raise Refused("o_bias=0: llama.cpp's gpt-oss loader requires blk.N.attn_output.bias")
    if fields.get("qmoe_block") != str(Q4_0_BLOCK):
        raise Refused(f"qmoe_block={fields.get('qmoe_block')}: Q4_0 blocks are 32 codes (the experts' codes "
                      "stay Q4_0 blocks only at block 32)")
    if fields.get("emb") not in ("f32", "f16"):
        raise Refused(f"emb={fields.get('emb')}: the gpt-oss mapping reads the embedding as a Gather table "
                      "(emb=f32|f16, the preset's untied table)")


def node_inputs(node, n: int) -> list:
    return list(node.input) + [""] * (n - len(node.input))


def convert_gpt_oss(spec: str, fields: dict, m, inits: dict, by_name: dict, out: str) -> Writer:
    """`preset=gpt-oss-20b` as llama.cpp's `gpt-oss` architecture (module doc). Every parameter of the
    graph is read from the graph and checked against what llama.cpp's gpt-oss computes; whatever it
    cannot express is refused, never approximated."""
    gpt_oss_refusals(fields)
    layers, hidden = int(fields["layers"]), int(fields["hidden"])
    heads, kv, head = int(fields["heads"]), int(fields["kv"]), int(fields["head"])
    inter, vocab, ctx = int(fields["inter"]), int(fields["vocab"]), int(fields["ctx"])
    experts, topk = int(fields["experts"]), int(fields["topk"])
    f16_table = fields["emb"] == "f16"
    check_census(m, {"MatMulNBits": 3 * layers + 1, "Add": 3 * layers, "GroupQueryAttention": layers,
                     "QMoE": layers, "Reshape": layers, "SimplifiedLayerNormalization": 1,
                     "SkipSimplifiedLayerNormalization": 2 * layers, "ReduceSum": 1, "Sub": 1,
                     "Cast": 3 if f16_table else 2, "Shape": 1, "Gather": 2}, "gpt-oss decoder")

    def node(name):
        if name not in by_name:
            raise Refused(f"no node {name}: not the gpt-oss layout this writes")
        return by_name[name]

    def biased(name):
        """(MatMulNBits node, bias initializer) of `{name}` followed by the Add `{name}/Add` of a bias."""
        add = node(f"{name}/Add")
        mm = node(name) if name in by_name else node(f"{name}/MatMul")
        if list(add.input[:1]) != [mm.output[0]] or add.input[1] not in inits:
            raise Refused(f"{add.name}: not {mm.name}'s output plus a bias initializer")
        if len(mm.input) > 5 and mm.input[5]:
            raise Refused(f"{mm.name}: a MatMulNBits bias as well as the Add")
        return mm, add

    # Embedding: the Gather table (f32; f16 with a Cast), written in its own type.
    gather = node("embed_gather")
    table = inits.get(gather.input[0])
    if table is None or table.shape != (vocab, hidden) or table.dtype != (np.float16 if f16_table else np.float32):
        raise Refused(f"{gather.name}: the table is not a [{vocab}, {hidden}] {fields['emb']} initializer")
    # Norms: one epsilon in llama.cpp (layer_norm_rms_epsilon).
    norms = [node(f"layers.{i}.ln{j}") for i in range(layers) for j in (1, 2)] + [node("final_norm")]
    embeds = node("embed_cast").output[0] if f16_table else gather.output[0]
    if norms[0].input[0] != embeds:
        raise Refused("layers.0.ln1 does not read the embedding")
    eps = {norm_epsilon(n) for n in norms}
    if len(eps) != 1:
        raise Refused(f"the RMS norms' epsilons differ ({sorted(eps)}): llama.cpp's gpt-oss has one")
    # Attention: packed QKV with a bias, GroupQueryAttention with sinks, rotate-half rotary from one cache
    # pair, the default scale 1 / sqrt(head) (llama.cpp's 1 / sqrt(n_rot)); windows on some layers.
    allowed = {"num_heads", "kv_num_heads", "do_rotary", "rotary_interleaved", "local_window_size",
               "sliding_window_cache", "scale"}
    windows, caches = [], set()
    for i in range(layers):
        a = node(f"layers.{i}.attn")
        attrs = attrs_of(a)
        other = sorted(set(attrs) - allowed)
        if other:
            raise Refused(f"{a.name}: attribute(s) {other} have no place in llama.cpp's gpt-oss attention")
        if attrs.get("do_rotary") != 1 or attrs.get("rotary_interleaved", 0) != 0:
            raise Refused(f"{a.name}: needs do_rotary = 1 with rotate-half (llama.cpp's gpt-oss ropes NeoX-style)")
        if attrs.get("num_heads") != heads or attrs.get("kv_num_heads") != kv:
            raise Refused(f"{a.name}: heads {attrs.get('num_heads')} / {attrs.get('kv_num_heads')} differ from the spec's")
        scale = float(attrs.get("scale", 0.0))
        if scale not in (0.0, float(np.float32(1 / math.sqrt(head)))):
            raise Refused(f"{a.name}: scale {scale} is not 1 / sqrt(head) (llama.cpp's gpt-oss: 1 / sqrt(n_rot))")
        ins = node_inputs(a, 12)
        _, qkv_add = biased(f"layers.{i}.qkv_proj")
        if ins[0] != qkv_add.output[0] or ins[1] or ins[2]:
            raise Refused(f"{a.name}: not fed the packed, biased QKV projection alone")
        if ins[9] or ins[10] or len(a.input) > 12:
            raise Refused(f"{a.name}: position_ids / attention_bias / quantized-cache inputs have no gpt-oss mapping")
        if ins[11] not in inits or inits[ins[11]].shape != (heads,):
            raise Refused(f"{a.name}: no head_sink initializer of [{heads}] (llama.cpp's attn_sinks)")
        caches.add((ins[7], ins[8]))
        windows.append(int(attrs.get("local_window_size", 0)))
    if len(caches) != 1:
        raise Refused(f"the layers use different rotary caches {sorted(caches)}: llama.cpp's gpt-oss has one rope")
    cos_name = caches.pop()[0]
    sizes = {w for w in windows if w > 0}
    if len(sizes) > 1:
        raise Refused(f"sliding windows of different sizes {sorted(sizes)}: llama.cpp has one sliding_window")
    if not sizes:
        # Tried: an all-false sliding_window_pattern loads, then aborts when the context is made (llama-model.cpp
        # create_memory: GGML_ASSERT(hparams.is_swa_any()) since gpt-oss's swa_type is always STANDARD).
        raise Refused("no sliding-window layer (window=0): llama.cpp's gpt-oss always makes the interleaved "
                      "sliding-window cache and asserts that some layer slides")
    window = sizes.pop()
    # MoE: the router (MatMulNBits + bias Add + Reshape) and QMoE with llama.cpp's fixed SwiGLU.
    for i in range(layers):
        q = node(f"layers.{i}.moe/QMoE")
        attrs = attrs_of(q)
        want = {"activation_type": b"swiglu", "swiglu_fusion": 1, "expert_weight_bits": 4, "block_size": 32,
                "k": topk, "use_sparse_mixer": 0}
        for key, v in want.items():
            if attrs.get(key) != v:
                raise Refused(f"{q.name}: {key} = {attrs.get(key)!r}, llama.cpp's gpt-oss MoE needs {v!r}")
        for key, v in (("activation_alpha", OAI_ALPHA), ("activation_beta", OAI_BETA), ("swiglu_limit", OAI_LIMIT)):
            if np.float32(attrs.get(key, np.nan)) != v:
                raise Refused(f"{q.name}: {key} = {attrs.get(key)}; llama.cpp's gpt-oss SwiGLU has {v} built in")
        extra = sorted(set(attrs) - set(want) - {"activation_alpha", "activation_beta", "swiglu_limit",
                                                 "normalize_routing_weights"})
        if extra:
            raise Refused(f"{q.name}: attribute(s) {extra} not mapped")
        ins = node_inputs(q, 15)
        if any(ins[8:]):
            raise Refused(f"{q.name}: fc3, zero points or router_weights (inputs 8-14) have no gpt-oss mapping")
        ln2 = node(f"layers.{i}.ln2")
        router, add = biased(f"layers.{i}.moe/router")
        reshape = node(f"layers.{i}.moe/router/Reshape")
        if ins[0] != ln2.output[0] or router.input[0] != ln2.output[0] or ins[1] != reshape.output[0] \
                or reshape.input[0] != add.output[0]:
            raise Refused(f"{q.name}: the router and the experts do not both read ln2's output")
        # normalize_routing_weights: without router_weights ORT weights the k chosen experts by the softmax
        # of their logits either way (qmoe_models.py), which is llama.cpp's SOFTMAX_WEIGHT gating.
    return write_gpt_oss(spec, inits, node, biased, table, float(eps.pop()), cos_name, window, windows,
                         (layers, hidden, heads, kv, head, inter, vocab, ctx, experts, topk), out)


def common_keys(w, spec, ctx, hidden, layers, inter, heads, kv) -> None:
    """The keys every architecture written here carries: name, context, sizes, head counts."""
    w.add_name(f"rcpu-bench {spec}")
    w.add_context_length(ctx)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(inter)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)


def write_gpt_oss(spec, inits, node, biased, table, eps, cos_name, window, windows, dims, out) -> Writer:
    layers, hidden, heads, kv, head, inter, vocab, ctx, experts, topk = dims
    wr = Writer(out, "gpt-oss")
    w = wr.w
    common_keys(w, spec, ctx, hidden, layers, inter, heads, kv)
    w.add_expert_feed_forward_length(inter)
    # heads * head (4096) is not the hidden size (2880): the head size is given, not derived.
    w.add_key_length(head)
    w.add_value_length(head)
    w.add_rope_dimension_count(head)
    w.add_rope_freq_base(rope_base(inits[cos_name], head))
    # The generated caches are plain rotary (gen_decoder.rs rotary_caches), not gpt-oss's YaRN: no scaling.
    w.add_rope_scaling_type(gguf.RopeScalingType.NONE)
    w.add_layer_norm_rms_eps(eps)
    w.add_expert_count(experts)
    w.add_expert_used_count(topk)
    w.add_sliding_window(window)
    # Which layers slide, from the graph (the builder's even layers; llama.cpp's default pattern is the same).
    w.add_sliding_window_pattern([x > 0 for x in windows])
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    placeholder_vocab(w, vocab)

    # The table in its own type (F32, or F16 for emb=f16): a memmap, written as it is.
    w.add_tensor("token_embd.weight", table)
    wr.f32("output_norm.weight", inits[node("final_norm").input[2]])
    lm = node("lm_head")
    if wr.quant("output", lm, inits) is not None:
        raise Refused("lm_head: a bias (llama.cpp's gpt-oss output has none)")
    for i in range(layers):
        p = f"blk.{i}"
        ln1, ln2 = node(f"layers.{i}.ln1"), node(f"layers.{i}.ln2")
        wr.f32(f"{p}.attn_norm.weight", inits[ln1.input[1 if i == 0 else 2]])
        wr.f32(f"{p}.post_attention_norm.weight", inits[ln2.input[2]])
        qkv, qkv_add = biased(f"layers.{i}.qkv_proj")
        wr.quant(f"{p}.attn_qkv", qkv, inits)
        wr.f32(f"{p}.attn_qkv.bias", inits[qkv_add.input[1]])
        o, o_add = biased(f"layers.{i}.o_proj")
        wr.quant(f"{p}.attn_output", o, inits)
        wr.f32(f"{p}.attn_output.bias", inits[o_add.input[1]])
        wr.f32(f"{p}.attn_sinks.weight", inits[node(f"layers.{i}.attn").input[11]])
        router, r_add = biased(f"layers.{i}.moe/router")
        wr.quant(f"{p}.ffn_gate_inp", router, inits)
        wr.f32(f"{p}.ffn_gate_inp.bias", inits[r_add.input[1]])
        q = node(f"layers.{i}.moe/QMoE")
        fc1_w, fc1_s, fc1_b, fc2_w, fc2_s, fc2_b = (inits[x] for x in q.input[2:8])
        if fc1_w.shape != (experts, 2 * inter, hidden // 2) or fc2_w.shape != (experts, hidden, inter // 2):
            raise Refused(f"{q.name}: fc1 {fc1_w.shape} / fc2 {fc2_w.shape} are not [{experts}, {2 * inter}, "
                          f"{hidden // 2}] / [{experts}, {hidden}, {inter // 2}]")
        if fc1_s.shape != (experts, 2 * inter, hidden // Q4_0_BLOCK) or \
                fc2_s.shape != (experts, hidden, inter // Q4_0_BLOCK):
            raise Refused(f"{q.name}: scales {fc1_s.shape} / {fc2_s.shape} are not one a block of 32")
        if fc1_b.shape != (experts, 2 * inter) or fc2_b.shape != (experts, hidden):
            raise Refused(f"{q.name}: biases {fc1_b.shape} / {fc2_b.shape}")
        # swiglu_fusion = 1: fc1's row 2j is gate row j and row 2j + 1 the linear (up) row j.
        for name, wt, sc, bias, rows in (("ffn_gate_exps", fc1_w, fc1_s, fc1_b, slice(0, None, 2)),
                                         ("ffn_up_exps", fc1_w, fc1_s, fc1_b, slice(1, None, 2)),
                                         ("ffn_down_exps", fc2_w, fc2_s, fc2_b, slice(None))):
            wr_experts(wr, f"{p}.{name}", wt, sc, bias, rows)
    wr.check_first = [f"blk.0.{n}.weight" for n in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")]
    return wr


def wr_experts(wr: Writer, name: str, wt, sc, bias, rows: slice) -> None:
    """One fc's rows `rows` of every expert as `{name}.weight` [experts, n, blocks] of Q4_0, expert by expert
    (a gigabyte of codes is never expanded at once), and the same rows of its bias as `{name}.bias`."""
    e_count, _, half = wt.shape
    k = 2 * half
    out, kind = [], None
    for e in range(e_count):
        b = np.asarray(wt[e, rows])
        n = b.shape[0]
        s = np.asarray(sc[e, rows], np.float32).reshape(n, -1)
        r, kind = block_rows(4, codes_of(b.reshape(n, k // Q4_0_BLOCK, Q4_0_BLOCK // 2), n, k, 4), s)
        out.append(r)
    wr.w.add_tensor(f"{name}.weight", np.stack(out), raw_dtype=kind)
    wr.written[f"{name}.weight"] = (e_count, lambda e: dequantized(wt[e, rows], sc[e, rows], wt[e, rows].shape[0],
                                                                     k, 4), "weight")
    b = np.ascontiguousarray(np.asarray(bias, np.float32)[:, rows])
    wr.w.add_tensor(f"{name}.bias", b)
    wr.written[f"{name}.bias"] = (0, lambda _: np.asarray(bias, np.float32)[:, rows], "exact")


def convert(model_dir: str, out: str, check: int) -> None:
    spec = json.load(open(os.path.join(model_dir, "rcpu_bench.json")))["spec"]
    fields = dict(kv.split("=", 1) for kv in spec.split(","))
    # The graph without its side file; large initializers are memmaps of it (load_initializers).
    m = onnx.load(os.path.join(model_dir, "model.onnx"), load_external_data=False)
    inits = load_initializers(m, model_dir)
    by_name = {n.name: n for n in m.graph.node}
    preset = fields.get("preset", "")
    if preset == "gpt-oss-20b":
        wr = convert_gpt_oss(spec, fields, m, inits, by_name, out)
    elif "experts" in fields:
        raise Refused(f"preset={preset}: only gpt-oss-20b's mixture of experts is mapped (llama.cpp's gpt-oss)")
    else:
        wr = convert_dense(spec, fields, m, inits, by_name, out)
    wr.finish()
    if check:
        verify(out, wr.written, check, wr.check_first)
    token, total = token_bytes(out)
    print(f"gguf_from_onnx: {out}: {total / 1e6:.1f} MB of tensors, {token / 1e6:.1f} MB read a decode token")


def verify(path: str, written: dict, count: int, first: list | tuple = ()) -> None:
    """Reads the file back: `count` quantized weights (`first` first, then in the order written), each
    dequantized and compared with the ONNX weight dequantized with f16-rounded scales, expert by expert
    for a 3-D tensor; and every float tensor rearranged on the way (the split expert biases) bit for
    bit. Equal, or the conversion is wrong."""
    r = gguf.GGUFReader(path)
    tensors = {t.name: t for t in r.tensors}
    order = list(first) + [n for n in written if n not in first]
    weights = exact = 0
    for name in order:
        slices, want, kind = written[name]
        if kind == "weight" and weights >= count:
            continue
        t = tensors[name]
        data, ttype = np.asarray(t.data), gguf.GGMLQuantizationType(t.tensor_type)
        for i in range(slices) if slices else [None]:
            raw = data if i is None else data[i]
            if ttype in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
                got = raw.astype(np.float32)
            else:
                got = gguf.quants.dequantize(raw, ttype)
            expect = np.asarray(want(i), np.float32).reshape(got.shape)
            if not np.array_equal(got, expect):
                where = name if i is None else f"{name} (expert {i})"
                raise SystemExit(f"gguf_from_onnx: {where} reads back differently ({np.abs(got - expect).max()})")
        if kind == "weight":
            weights += 1
        else:
            exact += 1
    print(f"gguf_from_onnx: {weights} weights dequantize to the ONNX weights (f16 scales)"
          + (f"; {exact} split biases equal the ONNX ones" if exact else ""))


def token_bytes(path: str) -> tuple[int, int]:
    """(bytes a decode token reads, bytes of all tensors) of a GGUF written here: every tensor whole but,
    with an untied `output`, one row of `token_embd`, and of each `*_exps` tensor (weights and biases) the
    `expert_used_count` of `expert_count` experts a token runs (the count rcpu-bench's model_bytes makes
    of the ONNX model)."""
    r = gguf.GGUFReader(path)
    arch = r.fields["general.architecture"].contents()
    used = r.fields.get(f"{arch}.expert_used_count")
    share = used.contents() / r.fields[f"{arch}.expert_count"].contents() if used is not None else 1.0
    names = {t.name for t in r.tensors}
    token = total = 0
    for t in r.tensors:
        n = int(t.n_bytes)
        total += n
        if t.name == "token_embd.weight" and "output.weight" in names:
            n //= int(t.shape[1])
        elif "_exps." in t.name:
            n = int(n * share)
        token += n
    return token, total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--check", type=int, default=3)
    a = ap.parse_args()
    try:
        convert(a.model_dir, a.out, a.check)
    except Refused as e:
        # Every refusal comes before the writer's first write (`write_header_to_file`, after every
        # tensor was added): no partial GGUF is left behind.
        sys.exit(f"gguf_from_onnx: {e}")


if __name__ == "__main__":
    main()
