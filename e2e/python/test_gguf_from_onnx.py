"""gguf_from_onnx.py, the generated model as a GGUF of the same weights for llama.cpp: every int4 weight
read back from the file equals the ONNX weight (codes, f16-rounded scales), the fused QKV / tied
embedding / norms land where llama.cpp's qwen2 and llama loaders look, gpt-oss's experts, router, sinks
and windows where its gpt-oss loader looks (every tensor and key), and layouts Q4_0 or llama.cpp cannot
hold (or graphs with nodes the GGUF would leave out) are refused with a message."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import gguf_from_onnx
from test_genai import BENCH

gguf = pytest.importorskip("gguf")


def _gen(dest, spec):
    dest.mkdir(parents=True, exist_ok=True)
    out = subprocess.run([str(BENCH), "gen", spec, "--out", str(dest / "model.onnx")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return dest


# gpt-oss shapes cut down as gen_moe.rs's tests cut them (hidden 256, 4 / 2 heads of 64, 8 experts of 128, top 2).
SMALL_GPT_OSS = "preset=gpt-oss-20b,hidden=256,heads=4,kv=2,inter=128,experts=8,topk=2"


def _onnx_weight(inits, node) -> np.ndarray:
    """The MatMulNBits weight [N, K] in float, written out element by element from ORT's layout (4 bits: byte
    j of a block holds element 2j in the low nibble, 2j + 1 in the high one, zero point 8; 8 bits: a byte
    an element, zero point 128)."""
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    n, k, bits = attrs["N"], attrs["K"], attrs["bits"]
    b = inits[node.input[1]].reshape(n, -1)
    s = inits[node.input[2]].reshape(n, -1).astype(np.float16).astype(np.float32)
    w = np.empty((n, k), np.float32)
    for col in range(k):
        if bits == 8:
            q, zero = b[:, col], 128
        else:
            byte = b[:, col // 2]
            q, zero = (byte & 0x0F) if col % 2 == 0 else (byte >> 4), 8
        w[:, col] = (q.astype(np.float32) - zero) * s[:, col // 32]
    return w


@pytest.mark.parametrize("preset,arch,extra", [("qwen2-0.5b", "qwen2", ""), ("llama-3.2-1b", "llama", ""),
                                               ("qwen2-0.5b", "qwen2", ",lm_bits=8,mix8=1")])
def test_gguf_holds_the_same_weights(tmp_path, preset, arch, extra):
    # extra: the 8-bit lm_head (and so embedding) and 8-bit o_proj / MLP, as Q8_0.
    spec = f"llm:preset={preset},layers=2,vocab=300,ctx=128,acc=4,seed=5{extra}"
    model = _gen(tmp_path / "m", spec)
    out = tmp_path / "m.gguf"
    gguf_from_onnx.convert(str(model), str(out), check=0)
    m = onnx.load(str(model / "model.onnx"))
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    nodes = {n.name: n for n in m.graph.node}
    r = gguf.GGUFReader(str(out))
    field = lambda key: r.fields[key].contents()  # noqa: E731
    assert field("general.architecture") == arch
    fields = dict(kv.split("=", 1) for kv in json.loads((model / "rcpu_bench.json").read_text())["spec"].split(","))
    assert field(f"{arch}.block_count") == 2
    assert field(f"{arch}.attention.head_count") == int(fields["heads"])
    assert field(f"{arch}.attention.head_count_kv") == int(fields["kv"])
    assert field(f"{arch}.embedding_length") == int(fields["hidden"])
    assert len(field("tokenizer.ggml.tokens")) == 300
    # The generator's rotary base and norm epsilon (gen_llm.rs), read back from the graph.
    assert field(f"{arch}.rope.freq_base") == pytest.approx(10000.0)
    assert field(f"{arch}.attention.layer_norm_rms_epsilon") == pytest.approx(1e-6)
    tensors = {t.name: t for t in r.tensors}
    want = {"token_embd.weight": "lm_head", "blk.0.attn_qkv.weight": "layers.0.qkv_proj",
            "blk.1.attn_output.weight": "layers.1.o_proj", "blk.1.ffn_gate.weight": "layers.1.gate_proj",
            "blk.0.ffn_up.weight": "layers.0.up_proj", "blk.1.ffn_down.weight": "layers.1.down_proj"}
    eight = {"token_embd.weight", "blk.1.attn_output.weight", "blk.1.ffn_gate.weight", "blk.0.ffn_up.weight",
             "blk.1.ffn_down.weight"} if extra else set()
    for name, node in want.items():
        t = tensors[name]
        q = gguf.GGMLQuantizationType.Q8_0 if name in eight else gguf.GGMLQuantizationType.Q4_0
        assert t.tensor_type == q, name
        got = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
        np.testing.assert_array_equal(got, _onnx_weight(inits, nodes[node]), err_msg=name)
    for name, init in [("output_norm.weight", "final_norm.w"), ("blk.1.attn_norm.weight", "layers.1.ln1.w"),
                       ("blk.0.ffn_norm.weight", "layers.0.ln2.w")]:
        np.testing.assert_array_equal(np.asarray(tensors[name].data), inits[init], err_msg=name)
    if arch == "qwen2":
        np.testing.assert_array_equal(np.asarray(tensors["blk.1.attn_qkv.bias"].data), inits["layers.1.qkv_proj.bias"])
    else:
        assert "blk.0.attn_qkv.bias" not in tensors
    assert "output.weight" not in tensors, "tied: llama.cpp reads the embedding as the lm_head"


@pytest.mark.parametrize("spec,says", [
    ("preset=qwen2-0.5b,emb=f32", "emb=q4 or q8"), ("preset=qwen2-0.5b,tied=0", "tied=1"),
    ("preset=qwen2-0.5b,window=16", "window"),
    # Qwen3's per-head q/k norms (heads * head made equal to hidden, so only the graph check is left).
    ("preset=qwen3-0.6b,heads=8,kv=8", "not the plain decoder"),
    # gpt-oss shapes cut down: what llama.cpp's gpt-oss has no place for.
    (f"{SMALL_GPT_OSS},sinks=0", "sinks=0"), (f"{SMALL_GPT_OSS},qmoe_block=64", "qmoe_block=64"),
    (f"{SMALL_GPT_OSS},softcap=30", "softcap"), (f"{SMALL_GPT_OSS},window=0", "no sliding-window layer"),
    ("preset=phi3.5-moe,hidden=256,heads=4,kv=2,head=64,inter=128,experts=4", "only gpt-oss-20b"),
])
def test_layouts_q4_0_cannot_hold_are_refused(tmp_path, spec, says):
    model = _gen(tmp_path / "m", f"llm:{spec},layers=1,vocab=300,ctx=128,acc=4")
    out = subprocess.run([sys.executable, gguf_from_onnx.__file__, str(model), str(tmp_path / "x.gguf")],
                         capture_output=True, text=True)
    assert out.returncode != 0 and says in out.stderr, out.stderr
    assert not (tmp_path / "x.gguf").exists() or (tmp_path / "x.gguf").stat().st_size == 0


def test_check_compares_what_was_written(tmp_path):
    model = _gen(tmp_path / "m", "llm:preset=qwen2-0.5b,layers=1,vocab=300,ctx=128,acc=4")
    out = subprocess.run([sys.executable, gguf_from_onnx.__file__, str(model), str(tmp_path / "x.gguf"), "--check", "3"],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "3 weights dequantize to the ONNX weights" in out.stdout, out.stdout + out.stderr


def test_a_weight_with_zero_points_is_refused_and_leaves_no_file(tmp_path):
    # Refused while the tensors are being added: the writer has written nothing yet, so no file.
    model = _gen(tmp_path / "m", "llm:preset=qwen2-0.5b,layers=1,vocab=300,ctx=128,acc=4")
    m = onnx.load(str(model / "model.onnx"))
    node = next(n for n in m.graph.node if n.name == "layers.0.o_proj")
    zp = np.full((896 * 28 // 2,), 0x88, np.uint8)
    m.graph.initializer.append(numpy_helper.from_array(zp, "zp_o_proj"))
    while len(node.input) < 4:
        node.input.append("")
    node.input[3] = "zp_o_proj"
    onnx.save(m, str(model / "model.onnx"))
    out = tmp_path / "x.gguf"
    proc = subprocess.run([sys.executable, gguf_from_onnx.__file__, str(model), str(out)], capture_output=True, text=True)
    assert proc.returncode != 0 and "layers.0.o_proj: has zero points" in proc.stderr, proc.stderr
    assert not out.exists()


def _expert_weights(qweight: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """QMoE codes [E, N, K / 2] and scales [E, N, K / 32] as float [E, N, K], element by element (4 bits:
    byte j of a row holds element 2j in the low nibble, 2j + 1 in the high one, zero point 8), the scales
    rounded to f16 as the GGUF stores them."""
    e, n, half = qweight.shape
    s = scales.astype(np.float16).astype(np.float32)
    w = np.empty((e, n, 2 * half), np.float32)
    for col in range(2 * half):
        byte = qweight[:, :, col // 2]
        q = (byte & 0x0F) if col % 2 == 0 else (byte >> 4)
        w[:, :, col] = (q.astype(np.float32) - 8) * s[:, :, col // 32]
    return w


def test_gpt_oss_gguf_holds_the_same_model(tmp_path):
    # Two layers: layer 0 slides (window 8), layer 1 does not, as gpt-oss alternates them.
    spec = f"llm:{SMALL_GPT_OSS},layers=2,vocab=300,ctx=128,window=8,seed=7"
    model = _gen(tmp_path / "m", spec)
    out = tmp_path / "m.gguf"
    gguf_from_onnx.convert(str(model), str(out), check=0)
    m = onnx.load(str(model / "model.onnx"))
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    nodes = {n.name: n for n in m.graph.node}
    r = gguf.GGUFReader(str(out))
    field = lambda key: r.fields[key].contents()  # noqa: E731
    assert field("general.architecture") == "gpt-oss"
    # The keys llama.cpp's gpt-oss loader reads (llama-model.cpp, src/models/openai-moe.cpp): the head size
    # given apart (4 x 64 is the hidden size here, but gpt-oss-20b's 64 x 64 is not its 2880), plain rope.
    keys = {"block_count": 2, "embedding_length": 256, "feed_forward_length": 128, "expert_feed_forward_length": 128,
            "attention.head_count": 4, "attention.head_count_kv": 2, "attention.key_length": 64,
            "attention.value_length": 64, "rope.dimension_count": 64, "expert_count": 8, "expert_used_count": 2,
            "attention.sliding_window": 8, "context_length": 128, "vocab_size": 300, "rope.scaling.type": "none"}
    for key, v in keys.items():
        assert field(f"gpt-oss.{key}") == v, key
    assert field("gpt-oss.attention.sliding_window_pattern") == [True, False]
    assert field("gpt-oss.rope.freq_base") == pytest.approx(10000.0)
    assert field("gpt-oss.attention.layer_norm_rms_epsilon") == pytest.approx(1e-6)
    assert len(field("tokenizer.ggml.tokens")) == 300
    tensors = {t.name: t for t in r.tensors}
    q4, f32 = gguf.GGMLQuantizationType.Q4_0, gguf.GGMLQuantizationType.F32
    layer = {"attn_norm.weight": f32, "post_attention_norm.weight": f32, "attn_qkv.weight": q4, "attn_qkv.bias": f32,
             "attn_output.weight": q4, "attn_output.bias": f32, "attn_sinks.weight": f32,
             "ffn_gate_inp.weight": q4, "ffn_gate_inp.bias": f32}
    for fc in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"):
        layer.update({f"{fc}.weight": q4, f"{fc}.bias": f32})
    want = {"token_embd.weight": f32, "output_norm.weight": f32, "output.weight": q4}
    want.update({f"blk.{i}.{k}": v for i in range(2) for k, v in layer.items()})
    assert {n: t.tensor_type for n, t in tensors.items()} == want
    # ggml's shapes (innermost first): the experts [K, N, E], their biases [N, E].
    assert [int(x) for x in tensors["blk.1.ffn_gate_exps.weight"].shape] == [256, 128, 8]
    assert [int(x) for x in tensors["blk.1.ffn_down_exps.weight"].shape] == [128, 256, 8]
    assert [int(x) for x in tensors["blk.1.ffn_up_exps.bias"].shape] == [128, 8]

    def read(name):
        t = tensors[name]
        data = np.asarray(t.data)
        return data if t.tensor_type == f32 else gguf.quants.dequantize(data, t.tensor_type)

    for i in range(2):
        p, q = f"blk.{i}", nodes[f"layers.{i}.moe/QMoE"]
        # fc1's interleaved rows (swiglu_fusion = 1): even rows the gate, odd rows the linear half.
        fc1 = _expert_weights(inits[q.input[2]], inits[q.input[3]])
        fc2 = _expert_weights(inits[q.input[5]], inits[q.input[6]])
        np.testing.assert_array_equal(read(f"{p}.ffn_gate_exps.weight"), fc1[:, 0::2], err_msg=f"{p} gate")
        np.testing.assert_array_equal(read(f"{p}.ffn_up_exps.weight"), fc1[:, 1::2], err_msg=f"{p} up")
        np.testing.assert_array_equal(read(f"{p}.ffn_down_exps.weight"), fc2, err_msg=f"{p} down")
        b1, b2 = inits[f"layers.{i}.moe.fc1.bias"], inits[f"layers.{i}.moe.fc2.bias"]
        np.testing.assert_array_equal(read(f"{p}.ffn_gate_exps.bias"), b1[:, 0::2])
        np.testing.assert_array_equal(read(f"{p}.ffn_up_exps.bias"), b1[:, 1::2])
        np.testing.assert_array_equal(read(f"{p}.ffn_down_exps.bias"), b2)
        for name, node in [("ffn_gate_inp", f"layers.{i}.moe/router/MatMul"), ("attn_qkv", f"layers.{i}.qkv_proj"),
                           ("attn_output", f"layers.{i}.o_proj")]:
            np.testing.assert_array_equal(read(f"{p}.{name}.weight"), _onnx_weight(inits, nodes[node]), err_msg=name)
        for name, init in [("ffn_gate_inp.bias", "moe.router.bias"), ("attn_qkv.bias", "qkv_proj.bias"),
                           ("attn_output.bias", "o_proj.bias"), ("attn_sinks.weight", "attn.sinks"),
                           ("attn_norm.weight", "ln1.w"), ("post_attention_norm.weight", "ln2.w")]:
            np.testing.assert_array_equal(read(f"{p}.{name}"), inits[f"layers.{i}.{init}"], err_msg=name)
    np.testing.assert_array_equal(read("output.weight"), _onnx_weight(inits, nodes["lm_head"]))
    np.testing.assert_array_equal(read("token_embd.weight"), inits["embed_tokens"])
    np.testing.assert_array_equal(read("output_norm.weight"), inits["final_norm.w"])


def test_gpt_oss_check_reads_the_experts_back(tmp_path):
    model = _gen(tmp_path / "m", f"llm:{SMALL_GPT_OSS},layers=2,vocab=300,ctx=128")
    out = subprocess.run([sys.executable, gguf_from_onnx.__file__, str(model), str(tmp_path / "x.gguf")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    # Layer 0's gate, up and down experts, then every split bias (gate and up of fc1, down of fc2; 2 layers).
    assert "3 weights dequantize to the ONNX weights (f16 scales); 6 split biases equal" in out.stdout, out.stdout
