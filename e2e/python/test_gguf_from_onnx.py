"""gguf_from_onnx.py, the generated model as a GGUF of the same weights for llama.cpp: every int4 weight
read back from the file equals the ONNX weight (codes, f16-rounded scales), the fused QKV / tied
embedding / norms land where llama.cpp's qwen2 and llama loaders look, and layouts Q4_0 cannot hold (or
graphs with nodes the GGUF would leave out) are refused with a message."""

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
