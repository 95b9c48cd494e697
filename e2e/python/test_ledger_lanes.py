"""The route ledger records the lanes a node's call actually ran on: a decode-sized glue node runs on the
caller alone (lanes 1) even when the session has two lanes, one past its split threshold runs on two. Before,
the ledger recorded the session's lane count for every call, so the bench's route report said "lanes=2" for
glue that never left the caller."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from conftest import rcpu_session

SMALL, LARGE = 4864, 1 << 18  # Sigmoid splits from 16K elements (kernels/activation)


def _two_sigmoids():
    ins = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [1, n]) for i, n in enumerate((SMALL, LARGE))]
    outs = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [1, n]) for i, n in enumerate((SMALL, LARGE))]
    nodes = [helper.make_node("Sigmoid", [f"x{i}"], [f"y{i}"], name=f"sig{i}") for i in range(2)]
    g = helper.make_graph(nodes, "two_sigmoids", ins, outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _lanes_of(stats, op):
    got = {}
    for r in stats.ledger():
        if r["op"] == op and r["calls"] > 0:
            got[r["lanes"]] = got.get(r["lanes"], 0) + r["calls"]
    return got


def test_ledger_records_the_lanes_a_call_ran_on(rcpu_devices, stats):
    sess = rcpu_session(_two_sigmoids().SerializeToString(), rcpu_devices, {"threads": 2})
    rng = np.random.default_rng(3)
    feeds = {f"x{i}": rng.standard_normal((1, n)).astype(np.float32) for i, n in enumerate((SMALL, LARGE))}
    stats.reset()
    y0, y1 = sess.run(None, feeds)
    np.testing.assert_allclose(y0, 1 / (1 + np.exp(-feeds["x0"])), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y1, 1 / (1 + np.exp(-feeds["x1"])), rtol=1e-5, atol=1e-6)
    assert _lanes_of(stats, "Sigmoid") == {1: 1, 2: 1}, stats.ledger()
