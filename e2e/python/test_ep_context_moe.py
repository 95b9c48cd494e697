"""EPContext models of a mixture-of-experts model (src/ep/nodes/qmoe.rs, src/ep/context): the QMoE node
exports every expert's packed fc1 and fc2 into the context file in place of the raw codes and scales, and a
session created from the context model adopts them as views of the mapped file, packing nothing, and answers
bit for bit as the session that wrote it, through the same routes.

The model is the generator's gpt-oss-20b cut down (hidden 256, 4 / 2 heads, 32 experts of 256, top 4, two
layers): GQA with sinks and a sliding window, biased experts, SwiGLU with gpt-oss's limit. The window runs
over an ordinary KV cache (`window_cache=0`): `_steps` feeds growing pasts, not a windowed cache's fixed ones.
The helpers are test_ep_context.py's (`_write_context`, `_load`, `_steps`)."""

from __future__ import annotations

import pathlib
import subprocess

import numpy as np
import onnx
import onnx.numpy_helper
import pytest

from conftest import EP_NAME, assignment
from test_ep_context import BENCH, VOCAB, _directory, _load, _steps, _write_context

# QMoE's inputs: fc1 codes, scales, bias; fc2 codes, scales, bias (gpt-oss has no zero points).
FC1, FC1_SCALES, FC1_BIAS, FC2, FC2_SCALES, FC2_BIAS = 2, 3, 4, 5, 6, 7
PACKED_INPUTS = (FC1, FC1_SCALES, FC2, FC2_SCALES)


def _generate(dest: pathlib.Path, acc: int) -> pathlib.Path:
    if not BENCH.is_file():
        pytest.fail(f"{BENCH} missing: `cargo build --release --workspace` first", pytrace=False)
    spec = (f"llm:preset=gpt-oss-20b,layers=2,vocab={VOCAB},hidden=256,heads=4,kv=2,inter=256,experts=32,"
            f"topk=4,acc={acc},ctx=128,seed=5,window_cache=0")
    path = dest / "model.onnx"
    out = subprocess.run([str(BENCH), "gen", spec, "--out", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return path


def _qmoe_routes(stats) -> dict[str, int]:
    """QMoE's calls per route in rcpu's ledger since the last reset."""
    calls: dict[str, int] = {}
    for r in stats.ledger():
        if r["op"] == "QMoE" and r["calls"] > 0:
            calls[r["variant"]] = calls.get(r["variant"], 0) + r["calls"]
    return calls


@pytest.fixture(scope="module", params=[0, 4], ids=["acc0", "acc4"])
def written(request, tmp_path_factory, rcpu_devices, stats):
    """(folder, original model, the writing session's outputs, its QMoE routes)."""
    d = tmp_path_factory.mktemp(f"ctx_moe_acc{request.param}")
    model = _generate(d, request.param)
    writer = _write_context(rcpu_devices, model)
    stats.reset()
    want = _steps(writer)
    return d, model, want, _qmoe_routes(stats)


def test_moe_context_model_answers_as_its_writer(written, rcpu_devices, stats):
    d, model, want, want_routes = written
    ctx = d / "model_ctx.onnx"
    assert ctx.is_file() and (d / "model_ctx.rcpu").is_file()
    stats.reset()
    before = stats.json()["memory"]["weight_cache"]
    sess = _load(rcpu_devices, ctx)
    after = stats.json()["memory"]["weight_cache"]
    # Every packed weight (the experts, the router, the attention and lm_head projections) comes from the
    # file: nothing is packed at load.
    assert after["packs"] == before["packs"], f"a context model must pack nothing: {before} -> {after}"
    # 2 layers x 32 experts x fc1 and fc2, adopted, besides the MatMulNBits weights.
    assert after["adopts"] - before["adopts"] >= 2 * 32 * 2, (before, after)
    assert after["adopted"] - before["adopted"] >= 2 * 32 * 2, (before, after)
    node = next(n for n in onnx.load(str(ctx)).graph.node if n.op_type == "EPContext")
    assert node.name in assignment(sess).get(EP_NAME, set())
    stats.reset()
    got = _steps(sess)
    for r, (a, b) in enumerate(zip(got, want)):
        for i, (x, y) in enumerate(zip(a, b)):
            assert x.dtype == y.dtype and x.shape == y.shape
            assert np.array_equal(x, y), f"run {r} output {i}: the context model's answer differs from its writer's"
    routes = _qmoe_routes(stats)
    assert routes and all(v.endswith("-packed") for v in routes), routes
    assert routes == want_routes, f"the experts ran another route than the writer's: {routes} vs {want_routes}"


def test_moe_context_file_holds_the_packed_experts_not_the_raw_ones(written):
    d, model, _, _ = written
    data = (d / "model_ctx.rcpu").read_bytes()
    _, directory = _directory(data)
    (part,) = directory["partitions"].values()
    sizes = [s[1] for s in directory["sections"]]
    qmoe = [i for i, n in enumerate(part["spec"]["nodes"]) if n["op"] == "QMoE"]
    assert len(qmoe) == 2, [n["op"] for n in part["spec"]["nodes"]]
    exports = {x["node"]: x for x in part["exports"]}
    packed = 0
    for i in qmoe:
        x = exports[i]
        assert sorted(x["covers"]) == list(PACKED_INPUTS), x["covers"]
        assert x["meta"]["experts"] == 32 and len(x["key"]["fc1"]) == 32 and len(x["key"]["fc2"]) == 32
        # Per expert: fc1's records, fc2's records (no zero points).
        assert len(x["sections"]) == 32 * 2
        packed += sum(sizes[s] for s in x["sections"])
        inputs = part["spec"]["nodes"][i]["inputs"]
        for k in PACKED_INPUTS:
            assert inputs[k]["const"]["section"] is None, f"QMoE input {k} is in the file raw"
        for k in (FC1_BIAS, FC2_BIAS):
            assert inputs[k]["const"]["section"] is not None, f"QMoE bias input {k} is not in the file"
    # The raw expert tensors of the original model.
    m = onnx.load(str(model))
    inits = {t.name: t for t in m.graph.initializer}
    raw = 0
    for n in m.graph.node:
        if n.op_type == "QMoE":
            raw += sum(onnx.numpy_helper.to_array(inits[n.input[k]]).nbytes for k in PACKED_INPUTS)
    size = len(data)
    print(f"context file {size} bytes: packed experts {packed}, raw experts {raw} (not in it), rest {size - packed}")
    # Had the raw experts stayed in the file beside the packed ones, what is left besides the packed experts
    # would be at least the raw experts: it is less than half of them.
    assert size - packed < raw // 2, (size, packed, raw)
    assert size < packed + raw, (size, packed, raw)
