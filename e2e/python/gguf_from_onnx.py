"""Writes a generated rcpu-bench LLM (`rcpu-bench gen llm:...`, 4- or 8-bit weights without zero points,
block 32, the tied embedding quantized) as a GGUF file of the same weights for llama.cpp: every int4
weight as Q4_0 blocks and every 8-bit one (`lm_bits=8`, `mix8=1`) as Q8_0 blocks of the same codes,
each block's scale rounded to f16 (as rcpu packs level-4 weights), norms and
biases as float32, the packed QKV projection as llama.cpp's fused `attn_qkv`, the tied lm_head as
the embedding. The tokenizer is a placeholder vocabulary of the model's size (random weights:
benchmarks only). Refuses any other layout with a message naming what differs.

    python gguf_from_onnx.py MODEL_DIR OUT.gguf [--check N]

`--check N` dequantizes N weights of the written file again and compares them with the ONNX
weights (codes equal, scales within f16 rounding).
"""
import argparse
import json
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
        return b
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


def nbits_weight(node, inits):
    """(bits, codes [N, kb, 32], scales [N, kb], bias or None) of a MatMulNBits node."""
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    bits = attrs.get("bits", 4)
    if bits not in (4, 8) or attrs.get("block_size") != Q4_0_BLOCK:
        raise Refused(f"{node.name}: bits {bits} / block {attrs.get('block_size')} (needs 4 or 8 / 32)")
    ins = list(node.input) + [""] * 6
    if ins[3]:
        raise Refused(f"{node.name}: has zero points (Q4_0 / Q8_0 are symmetric around 8 / 128)")
    if ins[4]:
        raise Refused(f"{node.name}: has g_idx")
    n, k = attrs["N"], attrs["K"]
    codes = codes_of(inits[ins[1]], n, k, bits)
    scales = inits[ins[2]].astype(np.float32).reshape(n, -1)
    bias = inits[ins[5]] if ins[5] else None
    return bits, codes, scales, bias


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


def convert(model_dir: str, out: str, check: int) -> None:
    spec = json.load(open(os.path.join(model_dir, "rcpu_bench.json")))["spec"]
    fields = dict(kv.split("=", 1) for kv in spec.split(","))
    m = onnx.load(os.path.join(model_dir, "model.onnx"))
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    by_name = {n.name: n for n in m.graph.node}
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
    # The graph must be the plain decoder mapped below, node for node: anything else (the per-head
    # q/k norms of Qwen3's preset, say) would be left out of the GGUF silently.
    counts: dict = {}
    for n in m.graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    want = {"MatMulNBits": 5 * layers + 1, "GroupQueryAttention": layers, "SimplifiedLayerNormalization": 1,
            "SkipSimplifiedLayerNormalization": 2 * layers, "Reshape": 1, "GatherBlockQuantized": 1,
            "Sigmoid": layers, "Mul": 2 * layers, "ReduceSum": 1, "Sub": 1, "Cast": 2, "Shape": 1, "Gather": 1}
    if counts != want:
        extra = {k: v for k, v in counts.items() if want.get(k) != v}
        raise Refused(f"the graph is not the plain decoder this writes (node counts {extra}, expected "
                      f"{ {k: want.get(k, 0) for k in extra} })")
    arch = "qwen2" if fields.get("qkv_bias") == "1" else "llama"
    for i in range(layers):
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in by_name[f"layers.{i}.attn"].attribute}
        if attrs.get("do_rotary") != 1 or attrs.get("rotary_interleaved", 0) != 0:
            raise Refused(f"layers.{i}.attn: needs do_rotary = 1 with rotate-half (llama.cpp's {arch} rope)")
    w = gguf.GGUFWriter(out, arch)
    w.add_name(f"rcpu-bench {spec}")
    w.add_context_length(ctx)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(inter)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_freq_base(rope_base(inits["cos_cache"], head))
    w.add_rope_dimension_count(head)
    w.add_layer_norm_rms_eps(norm_epsilon(by_name["layers.0.ln1"]))
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if fields.get("mix8") == "1" else gguf.LlamaFileType.MOSTLY_Q4_0)
    # Placeholder SPM vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then numbered ones.
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

    written = {}

    def quant(name, node_name):
        bits, codes, scales, bias = nbits_weight(by_name[node_name], inits)
        rows, kind = block_rows(bits, codes, scales)
        w.add_tensor(f"{name}.weight", rows, raw_dtype=kind)
        written[f"{name}.weight"] = (bits, codes, scales)
        if bias is not None:
            w.add_tensor(f"{name}.bias", bias.astype(np.float32))

    def f32(name, init):
        w.add_tensor(name, inits[init].astype(np.float32))

    quant("token_embd", "lm_head")
    f32("output_norm.weight", "final_norm.w")
    for i in range(layers):
        p = f"blk.{i}"
        f32(f"{p}.attn_norm.weight", f"layers.{i}.ln1.w")
        quant(f"{p}.attn_qkv", f"layers.{i}.qkv_proj")
        quant(f"{p}.attn_output", f"layers.{i}.o_proj")
        f32(f"{p}.ffn_norm.weight", f"layers.{i}.ln2.w")
        quant(f"{p}.ffn_gate", f"layers.{i}.gate_proj")
        quant(f"{p}.ffn_up", f"layers.{i}.up_proj")
        quant(f"{p}.ffn_down", f"layers.{i}.down_proj")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if check:
        verify(out, written, check)


def verify(path: str, written: dict, count: int) -> None:
    """Dequantizes `count` written weights from the file and compares them with the ONNX
    weights dequantized with f16-rounded scales: equal, or the conversion is wrong."""
    r = gguf.GGUFReader(path)
    seen = 0
    for t in r.tensors:
        if t.name not in written or seen >= count:
            continue
        bits, codes, scales = written[t.name]
        got = gguf.quants.dequantize(np.asarray(t.data), gguf.GGMLQuantizationType(t.tensor_type))
        zero = 8 if bits == 4 else 128
        want = (codes.astype(np.float32) - zero) * scales.astype(np.float16).astype(np.float32)[..., None]
        want = want.reshape(got.shape)
        if not np.array_equal(got, want):
            raise SystemExit(f"gguf_from_onnx: {t.name} dequantizes differently ({np.abs(got - want).max()})")
        seen += 1
    print(f"gguf_from_onnx: {seen} weights dequantize to the ONNX weights (f16 scales)")


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
