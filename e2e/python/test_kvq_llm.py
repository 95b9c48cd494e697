"""Generated LLMs over a quantized KV cache (`rcpu-bench gen llm:...,kvq=int8|int8c|int4c`: every layer's
GroupQueryAttention with k_quant_type / v_quant_type, kv_cache_bit_width and k_scale / v_scale, past and
present int8 [B, Nkv, L, H] or, at 4 bits, uint8 [B, Nkv, L, H/2]; gqa_quant_models.py has ORT's semantics).
rcpu must claim the whole decoder as ONE fused partition, every GroupQueryAttention included, and match
ORT's CPU EP at accuracy level 0: a prompt, then decode steps fed the previous step's presents as past
(the bench's `--kv copy`): logits within rel L2 1e-4 and every present's codes equal."""

from __future__ import annotations

import subprocess

import numpy as np
import onnx
import pytest

from conftest import REPO, rel_l2
from test_fused import rcpu_groups

BENCH = REPO / "target" / "release" / "rcpu-bench"
VOCAB = 1000


def _generate(dest, kvq: str, acc: int = 0) -> bytes:
    if not BENCH.is_file():
        pytest.fail(f"{BENCH} missing: `cargo build --release --workspace` first", pytrace=False)
    spec = f"llm:preset=qwen2-0.5b,layers=2,vocab={VOCAB},acc={acc},ctx=128,seed=7,kvq={kvq}"
    out = subprocess.run([str(BENCH), "gen", spec, "--out", str(dest / "model.onnx")], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    return (dest / "model.onnx").read_bytes()


# kvq -> (k_quant_type, bit width, cache element type, cache last dim for head 64, scale count)
FORMS = {
    "int8": ("PER_TENSOR", 8, onnx.TensorProto.INT8, 64, 1),
    "int8c": ("PER_CHANNEL", 8, onnx.TensorProto.INT8, 64, 2 * 64),
    "int4c": ("PER_CHANNEL", 4, onnx.TensorProto.UINT8, 32, 2 * 64),
}


@pytest.mark.parametrize("kvq", ["int8", "int8c", "int4c"])
def test_generated_kvq_model_layout(tmp_path, kvq):
    """What the generator writes: the attributes, the scales at inputs 12 / 13 and the cache types."""
    kind, bits, elem, width, n_scales = FORMS[kvq]
    m = onnx.load_from_string(_generate(tmp_path, kvq))
    inits = {t.name: t for t in m.graph.initializer}
    gqas = [n for n in m.graph.node if n.op_type == "GroupQueryAttention"]
    assert len(gqas) == 2
    for n in gqas:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        assert attrs["k_quant_type"] == attrs["v_quant_type"] == kind.encode()
        assert attrs["kv_cache_bit_width"] == bits
        assert len(n.input) == 14
        for scale in n.input[12:14]:
            t = inits[scale]
            assert t.data_type == onnx.TensorProto.FLOAT and int(np.prod(t.dims)) == n_scales
    for vi in list(m.graph.input[2:]) + list(m.graph.output[1:]):
        tt = vi.type.tensor_type
        assert tt.elem_type == elem, vi.name
        assert tt.shape.dim[3].dim_value == width, vi.name


def _codes(x: np.ndarray) -> np.ndarray:
    """The cache's codes: int8 as they are, a 4-bit cache's nibbles less 8 (low nibble first)."""
    if x.dtype == np.int8:
        return x.astype(np.int32)
    return np.stack([x & 15, x >> 4], axis=-1).reshape(*x.shape[:-1], -1).astype(np.int32) - 8


def _assert_codes(x: np.ndarray, y: np.ndarray, what: str, exact: bool) -> None:
    """Layer 0's codes equal ORT's (its keys and values come from the same embedding through one norm and
    one MatMulNBits); a later layer's keys and values come through the earlier layers' float32 sums, whose
    last bits differ from ORT's, so a value at a rounding tie may take the neighbouring code there: at most 1
    apart, on at most 1 in 500 codes."""
    cx, cy = _codes(x), _codes(y)
    diff = np.abs(cx - cy)
    n = int(np.count_nonzero(diff))
    if exact:
        assert n == 0, f"{what}: {n} codes differ from ORT's, first at {np.flatnonzero(diff)[:8]}"
    else:
        assert diff.max() <= 1 and n * 500 <= diff.size, f"{what}: {n} of {diff.size} codes differ, max {diff.max()}"


def _past(sess, rng, past: int) -> dict:
    f = {}
    for i in sess.get_inputs()[2:]:
        shape = (1, i.shape[1], past, i.shape[3])
        if i.type == "tensor(int8)":
            f[i.name] = rng.integers(-40, 41, shape).astype(np.int8)
        else:
            f[i.name] = rng.integers(0, 256, shape).astype(np.uint8)
    return f


@pytest.mark.parametrize("kvq", ["int8", "int8c", "int4c"])
def test_kvq_llm_one_partition_matches_ort(tmp_path, make_sessions, stats, kvq):
    model = _generate(tmp_path, kvq)
    cpu, rc = make_sessions(model)
    groups = rcpu_groups(rc)
    nodes = {n.name for n in onnx.load_from_string(model).graph.node}
    gqas = {n.name for n in onnx.load_from_string(model).graph.node if n.op_type == "GroupQueryAttention"}
    assert len(groups) == 1, f"the quantized-cache decoder must be ONE rcpu partition, got {len(groups)}: {groups}"
    assert gqas <= groups[0], f"GroupQueryAttention not claimed: {gqas - groups[0]}"
    assert len(groups[0]) > len(nodes) // 2
    rng = np.random.default_rng(11)
    # A prompt of 7 over an empty cache, one over a seeded 9-row cache, then 3 decode steps each.
    for past0, prompt in [(0, 7), (9, 5)]:
        feeds_cpu = {"input_ids": rng.integers(0, VOCAB, (1, prompt)).astype(np.int64),
                     "attention_mask": np.ones((1, past0 + prompt), np.int64), **_past(cpu, rng, past0)}
        feeds_rc = dict(feeds_cpu)
        before = sum(r["calls"] for r in stats.ledger() if r["op"] == "GroupQueryAttention")
        total = past0 + prompt
        for step in range(4):
            a, b = rc.run(None, feeds_rc), cpu.run(None, feeds_cpu)
            err = rel_l2(a[0], b[0])
            assert err <= 1e-4, f"{kvq} past {past0} step {step}: logits rel L2 {err:.3e}"
            names = [o.name for o in cpu.get_outputs()]
            for name, x, y in zip(names[1:], a[1:], b[1:]):
                assert x.dtype == y.dtype and x.shape == y.shape == (1, 2, total, y.shape[3]), name
                _assert_codes(x, y, f"{kvq} past {past0} step {step}: {name}", exact=name.startswith("present.0."))
            # The next token: ORT's greedy one, each arm fed its own presents as past.
            nxt = np.array([[int(np.argmax(b[0][0, -1]))]], np.int64)
            total += 1
            mask = np.ones((1, total), np.int64)
            feeds_rc = {"input_ids": nxt, "attention_mask": mask,
                        **{n.replace("present.", "past_key_values."): v for n, v in zip(names[1:], a[1:])}}
            feeds_cpu = {"input_ids": nxt, "attention_mask": mask,
                         **{n.replace("present.", "past_key_values."): v for n, v in zip(names[1:], b[1:])}}
        ran = sum(r["calls"] for r in stats.ledger() if r["op"] == "GroupQueryAttention") - before
        assert ran == 2 * 4, f"rcpu's ledger: GroupQueryAttention ran {ran} times over 4 runs of 2 layers"
