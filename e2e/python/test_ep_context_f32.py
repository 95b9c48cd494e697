"""EPContext models of f32 MatMul / Gemm weights and QLinearMatMul's B (src/ep/context): the writer stores
each packed weight (`gemm::PackedB`'s panels, `qgemm::PackedB`'s bytes and column sums) in the context file,
and a session from the context model reads them in place: it packs nothing and answers bit for bit as its
writer. It uses test_ep_context.py's `_write_context`, `_load` and `_directory`."""

from __future__ import annotations

import pathlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import EP_NAME, assignment
from test_ep_context import _directory, _load, _write_context

F32, U8, I8 = TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8
K = 64


def _model(path: pathlib.Path) -> pathlib.Path:
    """Two chains (rcpu fuses them into one partition): MatMul -> Gemm(transB=1, C) -> MatMul -> Gemm over f32
    constant weights, and QLinearMatMul (uint8 x int8, per-column B scales) -> QLinearMatMul (uint8 x uint8)."""
    rng = np.random.default_rng(11)
    w = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    inits = [numpy_helper.from_array(a, n) for a, n in [
        (w(K, 48), "W1"), (w(40, 48), "W2"), (w(40), "C2"), (w(40, 32), "W3"), (w(32, 24), "W4"),
        (rng.integers(-64, 64, (K, 48)).astype(np.int8), "B1"),
        (rng.uniform(0.005, 0.03, 48).astype(np.float32), "B1_scale"), (np.zeros(48, np.int8), "B1_zp"),
        (rng.integers(0, 256, (48, 20)).astype(np.uint8), "B2"),
        (np.array(0.02, np.float32), "B2_scale"), (np.array(128, np.uint8), "B2_zp"),
        (np.array(0.02, np.float32), "a_scale"), (np.array(128, np.uint8), "a_zp"),
        (np.array(1.5, np.float32), "q_scale"), (np.array(120, np.uint8), "q_zp"),
        (np.array(0.8, np.float32), "y_scale"), (np.array(125, np.uint8), "y_zp"),
    ]]
    nodes = [
        helper.make_node("MatMul", ["A", "W1"], ["H1"], name="mm1"),
        helper.make_node("Gemm", ["H1", "W2", "C2"], ["H2"], name="gemm_t", transB=1),
        helper.make_node("MatMul", ["H2", "W3"], ["H3"], name="mm2"),
        helper.make_node("Gemm", ["H3", "W4"], ["Y"], name="gemm_n"),
        helper.make_node("QLinearMatMul", ["a8", "a_scale", "a_zp", "B1", "B1_scale", "B1_zp", "q_scale", "q_zp"],
                         ["q1"], name="qlmm1"),
        helper.make_node("QLinearMatMul", ["q1", "q_scale", "q_zp", "B2", "B2_scale", "B2_zp", "y_scale", "y_zp"],
                         ["y8"], name="qlmm2"),
    ]
    graph = helper.make_graph(
        nodes, "ctx_f32",
        [helper.make_tensor_value_info("A", F32, ["M", K]), helper.make_tensor_value_info("a8", U8, ["M", K])],
        [helper.make_tensor_value_info("Y", F32, ["M", 24]), helper.make_tensor_value_info("y8", U8, ["M", 20])],
        initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


def _runs(sess) -> list[list[np.ndarray]]:
    """M = 1 (the panel GEMV) and M = 7 (the blocked driver): every run's outputs."""
    rng = np.random.default_rng(5)
    out = []
    for m in (1, 7):
        feeds = {"A": rng.standard_normal((m, K)).astype(np.float32),
                 "a8": rng.integers(0, 256, (m, K)).astype(np.uint8)}
        out.append(sess.run(None, feeds))
    return out


@pytest.fixture(scope="module")
def written(tmp_path_factory, rcpu_devices):
    d = tmp_path_factory.mktemp("ctx_f32")
    model = _model(d / "model.onnx")
    writer = _write_context(rcpu_devices, model)
    assert {"mm1", "gemm_t", "mm2", "gemm_n", "qlmm1", "qlmm2"} <= assignment(writer).get(EP_NAME, set())
    return d, _runs(writer)


def test_the_file_holds_every_packed_weight_and_no_raw_copy(written):
    d, _ = written
    _, directory = _directory((d / "model_ctx.rcpu").read_bytes())
    parts = directory["partitions"].values()
    exports = [x for p in parts for x in p["exports"]]
    ops = sorted(x["key"]["op"] for x in exports)
    assert ops == ["QLinearMatMul"] * 2 + ["f32-gemm-b"] * 4, ops
    for x in exports:
        if x["key"]["op"] == "f32-gemm-b":
            assert x["covers"] == [1] and len(x["sections"]) == 1, x
        else:
            assert x["covers"] == [3] and len(x["sections"]) == 2, x
    # The covered weights are not written raw as well: the only constants left are the Gemm bias and
    # QLinearMatMul's scales and zero points.
    sections = {v["name"]: v["const"]["section"] for p in parts for n in p["spec"]["nodes"]
                for v in n["inputs"] if v and v["const"]}
    for name in ("W1", "W2", "W3", "W4", "B1", "B2"):
        assert sections[name] is None, f"{name} is covered by its kernel's export, yet written raw"
    for name in ("C2", "B1_scale", "B1_zp", "a_scale", "y_zp"):
        assert sections[name] is not None, name

def test_context_model_answers_as_its_writer_and_packs_nothing(written, rcpu_devices, stats):
    d, want = written
    ctx = d / "model_ctx.onnx"
    m = onnx.load(str(ctx))
    ops = [n.op_type for n in m.graph.node]
    assert ops and set(ops) == {"EPContext"}, ops
    stats.reset()
    before = stats.json()["memory"]["weight_cache"]
    sess = _load(rcpu_devices, ctx)
    after = stats.json()["memory"]["weight_cache"]
    assert after["packs"] == before["packs"], f"a context model must pack nothing: {before} -> {after}"
    assert after["adopted"] >= before["adopted"] + 6, (before, after)
    got = _runs(sess)
    for r, (a, b) in enumerate(zip(got, want)):
        for i, (x, y) in enumerate(zip(a, b)):
            assert x.dtype == y.dtype and x.shape == y.shape
            assert np.array_equal(x, y), f"run {r} output {i}: the context model's answer differs from its writer's"
