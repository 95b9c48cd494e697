"""`RCPU_DECLINE=Op1,Op2` (a diagnostic: bisecting a difference from ORT by op family) leaves nodes of
those op types to ORT's CPU EP and claims the rest as usual; the results stay ORT's."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from conftest import assert_on_cpu, assert_on_rcpu, rcpu_session, run_both


def _sigmoid_mul():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
        helper.make_node("Mul", ["x", "s"], ["y"], name="mul"),
    ]
    g = helper.make_graph(nodes, "sigmoid_mul", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def test_listed_ops_stay_with_ort(rcpu_devices, make_sessions, monkeypatch):
    model = _sigmoid_mul()
    feeds = {"x": np.random.default_rng(3).standard_normal((2, 64)).astype(np.float32)}
    monkeypatch.setenv("RCPU_DECLINE", "Gemm, Sigmoid")
    cpu, rc = make_sessions(model)
    assert_on_cpu(rc, "sig")
    assert_on_rcpu(rc, "mul")
    a, b = run_both(cpu, rc, feeds)
    np.testing.assert_allclose(b[0], a[0], rtol=1e-6, atol=1e-7)
    monkeypatch.delenv("RCPU_DECLINE")
    assert_on_rcpu(rcpu_session(model, rcpu_devices), {"sig", "mul"})
