"""ONNX QLinearMatMul on rcpu vs ORT's CPU EP.

Tolerance: exact (max |diff| = 0). rcpu accumulates in int32 like MLAS and requantizes with
MLAS's float steps (f32(acc) * (a_scale * b_scale / y_scale), clamp, round half to even, add the
zero point), so every output byte must equal ORT's. For uint8 x int8 the models draw B from
[-64, 63], which keeps ORT's own AVX2 kernel (int16-saturating vpmaddubsw on CPUs without VNNI)
exact too.

Every positive case asserts the node ran on RcpuExecutionProvider.
"""

from __future__ import annotations

import numpy as np
import pytest

import models
from conftest import assert_error_names_node, assert_on_cpu, assert_on_rcpu

SIGNS = [(False, False), (False, True), (True, True)]  # (a int8, b int8): what ORT's CPU EP has
SIGN_IDS = ["u8u8", "u8s8", "s8s8"]


def _feeds(rng, a_shape, a_signed, b, b_const):
    a = models._q8(rng, a_shape, a_signed)
    return {"a": a} if b_const else {"a": a, "b": b}


def _check(make_sessions, model, feeds_list, threads=2):
    cpu, rc = make_sessions(model, {"threads": threads})
    assert_on_rcpu(rc, "qlmm0")
    for feeds in feeds_list:
        want = cpu.run(None, feeds)[0]
        got = rc.run(None, feeds)[0]
        assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.shape)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("a_signed,b_signed", SIGNS, ids=SIGN_IDS)
@pytest.mark.parametrize("opset", [10, 21])
@pytest.mark.parametrize("b_const", [True, False], ids=["bconst", "binput"])
@pytest.mark.parametrize("param", ["tensor", "col", "col2d"])
def test_qlinear_matmul_2d_parity(make_sessions, a_signed, b_signed, opset, b_const, param):
    rng = np.random.default_rng(hash((a_signed, b_signed, opset, b_const, param)) % 2**32)
    k, n = 301, 130
    pshape = {"tensor": (), "col": (n,), "col2d": (1, n)}[param]
    model, b = models.qlinear_matmul(rng, ["M", k], [k, n], a_signed, b_signed, b_const, pshape, opset)
    # One session, decode and prefill shapes (M = 0 included).
    feeds = [_feeds(rng, (m, k), a_signed, b, b_const) for m in (1, 0, 5, 128)]
    _check(make_sessions, model, feeds)


@pytest.mark.parametrize("a_signed,b_signed", SIGNS, ids=SIGN_IDS)
@pytest.mark.parametrize(
    "a_shape,b_shape,pshape",
    [
        ([2, 3, 7, 40], [40, 33], (33,)),  # N-D A, 2-D B: batch dims fold into M
        ([3, 5, 40], [3, 40, 33], (3, 1, 33)),  # batched B, per column of each batch
        ([5, 40], [2, 40, 33], ()),  # A broadcast over B's batch
        ([2, 1, 4, 40], [3, 40, 18], (3, 1, 18)),  # batch dims broadcast both ways
        ([40], [40, 33], (33,)),  # 1-D A
        ([4, 40], [40], ()),  # 1-D B
    ],
    ids=["nd-a", "batched-b", "bcast-a", "bcast-both", "1d-a", "1d-b"],
)
@pytest.mark.parametrize("b_const", [True, False], ids=["bconst", "binput"])
def test_qlinear_matmul_nd_parity(make_sessions, a_signed, b_signed, a_shape, b_shape, pshape, b_const):
    rng = np.random.default_rng(len(a_shape) * 100 + len(b_shape) * 10 + a_signed + 2 * b_signed + 4 * b_const)
    model, b = models.qlinear_matmul(rng, a_shape, b_shape, a_signed, b_signed, b_const, pshape)
    _check(make_sessions, model, [_feeds(rng, a_shape, a_signed, b, b_const) for _ in range(2)])


def test_qlinear_matmul_large_threads_1_and_2_identical(make_sessions):
    rng = np.random.default_rng(7)
    k, n = 1000, 300
    model, b = models.qlinear_matmul(rng, ["M", k], [k, n], False, True, True, (n,))
    feeds = [_feeds(rng, (m, k), False, b, True) for m in (1, 77)]
    outs = []
    for t in (1, 2):
        cpu, rc = make_sessions(model, {"threads": t})
        assert_on_rcpu(rc, "qlmm0")
        outs.append([rc.run(None, f)[0] for f in feeds])
        for f, got in zip(feeds, outs[-1]):
            np.testing.assert_array_equal(got, cpu.run(None, f)[0])
    for x, y in zip(*outs):
        np.testing.assert_array_equal(x, y)


def test_qlinear_matmul_unsupported_param_shape_stays_on_cpu(make_sessions):
    """b_scale of shape [N, 1] is no form ORT (or rcpu) implements: rcpu declines the node."""
    rng = np.random.default_rng(3)
    model, _ = models.qlinear_matmul(rng, [4, 16], [16, 8], False, False, True, (8, 1))
    _, rc = make_sessions(model)
    assert_on_cpu(rc, "qlmm0")


def test_qlinear_matmul_shape_mismatch_is_a_clean_error(make_sessions):
    """A graph whose K is only known at run time: a wrong K is an error naming the node."""
    rng = np.random.default_rng(4)
    model, _ = models.qlinear_matmul(rng, ["M", "K"], [16, 8], False, True, True, ())
    _, rc = make_sessions(model)
    assert_on_rcpu(rc, "qlmm0")
    with pytest.raises(Exception) as e:
        rc.run(None, {"a": np.zeros((3, 15), np.uint8)})
    assert_error_names_node(e.value, "qlmm0")
    assert "inner dimensions differ" in str(e.value)
    # The session stays usable.
    assert rc.run(None, {"a": np.zeros((3, 16), np.uint8)})[0].shape == (3, 8)


@pytest.mark.parametrize("pshape", [(), (24,)], ids=["pertensor", "percol"])
def test_qlinear_matmul_params_as_inputs_change_per_run(make_sessions, pshape):
    """Scales and zero points fed as graph inputs (not constants), different on every run: rcpu
    reads them per call (constant ones it copies once at kernel creation)."""
    from onnx import helper

    rng = np.random.default_rng(9)
    k, n = 40, 24
    model, b = models.qlinear_matmul(rng, ["M", k], [k, n], False, True, True, pshape)
    params = ["a_scale", "a_zero_point", "b_scale", "b_zero_point", "y_scale", "y_zero_point"]
    inits = {t.name: t for t in model.graph.initializer}
    for p in params:
        t = inits[p]
        model.graph.input.append(helper.make_tensor_value_info(p, t.data_type, list(t.dims)))
        model.graph.initializer.remove(t)
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, "qlmm0")
    for run in range(3):
        feeds = {
            "a": models._q8(rng, (3, k), False),
            "a_scale": np.array(rng.uniform(0.01, 0.04), np.float32),
            "a_zero_point": np.array(rng.integers(100, 156), np.uint8),
            "b_scale": rng.uniform(0.005, 0.03, size=pshape).astype(np.float32),
            "b_zero_point": rng.integers(-20, 20, size=pshape).astype(np.int8),
            "y_scale": np.array(rng.uniform(0.02, 0.1), np.float32),
            "y_zero_point": np.array(rng.integers(100, 156), np.uint8),
        }
        want = cpu.run(None, feeds)[0]
        got = rc.run(None, feeds)[0]
        assert len(np.unique(want)) > 20, "outputs mostly clamped: the case would test little"
        np.testing.assert_array_equal(got, want, err_msg=f"run {run}")
