"""Constant-weight f32 MatMul and Gemm (B an initializer, prepacked through rcpu's weight cache)
against ORT's CPU EP, and the packed path against the unpacked one (weight_cache_mb=0).

Tolerance vs ORT (reductions in another order): as in test_parity_f32.py, elementwise
    |rcpu - cpu| <= 1e-4 * |cpu| + 1e-5 * magnitude,
magnitude = |alpha| * (|A'| @ |B'|) (+ |beta * C|). Packed vs unpacked rcpu: bit-identical (the
same kernels in the same order; only where B is read from differs).
"""

from __future__ import annotations

import numpy as np
import pytest

import models
from conftest import assert_on_rcpu, rcpu_session
from test_parity_f32 import assert_matmul_close

# (K, N): odd sizes (not multiples of the 8/16/32-wide panels), one past a KC block, and a
# Linear-sized one.
KN = [(1, 2), (17, 33), (100, 67), (257, 300), (1024, 96)]
MS = [1, 7, 64, 130]


# The weight budget is process-wide and the last configured value wins, so every session here
# names its budget: packed sessions a generous one, unpacked ones zero.
PACKED = {"threads": 2, "weight_cache_mb": 1024}


def _f32(rng, shape):
    return rng.standard_normal(shape).astype(np.float32)


def _unpacked(model, rcpu_devices, threads=2):
    return rcpu_session(model.SerializeToString(), rcpu_devices, {"threads": threads, "weight_cache_mb": 0})


def _assert_route(stats, op, form):
    v = stats.variants(op)
    assert v and all(s.endswith(form) for s in v), f"{op}: expected only {form} routes, got {v}"


@pytest.mark.parametrize("k,n", KN, ids=[f"k{k}n{n}" for k, n in KN])
def test_matmul_const_weight(make_sessions, rcpu_devices, stats, k, n):
    rng = np.random.default_rng(k * 1009 + n)
    w = _f32(rng, (k, n))
    model = models.matmul(["M", k], None, b_init=w)
    cpu, rc = make_sessions(model, PACKED)
    assert_on_rcpu(rc, "matmul0")
    outs = []
    stats.reset()
    for m in MS:
        a = _f32(rng, (m, k))
        got, want = rc.run(None, {"A": a})[0], cpu.run(None, {"A": a})[0]
        assert_matmul_close(got, want, np.abs(a.astype(np.float64)) @ np.abs(w.astype(np.float64)))
        outs.append((a, got))
    _assert_route(stats, "MatMul", "prepacked")
    # Declined by a zero budget: the same results, bit for bit. The packed session goes first (a
    # live packed copy would be shared with the new session instead of declined).
    del rc
    un = _unpacked(model, rcpu_devices)
    stats.reset()
    for a, got in outs:
        np.testing.assert_array_equal(un.run(None, {"A": a})[0], got)
    _assert_route(stats, "MatMul", "unpacked")


@pytest.mark.parametrize("a_shape", [[5], [2, 3, 5], [2, 1, 4, 5], [0, 5], [3, 0, 5]], ids=str)
def test_matmul_const_weight_batched_a(make_sessions, a_shape):
    """A [..., M, K] flattens into rows of one product when B is 2-D; 1-D A gives [N]."""
    rng = np.random.default_rng(len(a_shape))
    w = _f32(rng, (5, 9))
    cpu, rc = make_sessions(models.matmul(a_shape, None, b_init=w), PACKED)
    assert_on_rcpu(rc, "matmul0")
    a = _f32(rng, a_shape)
    got, want = rc.run(None, {"A": a})[0], cpu.run(None, {"A": a})[0]
    assert got.shape == want.shape == np.matmul(a, w).shape
    mag = np.abs(a.astype(np.float64)) @ np.abs(w.astype(np.float64))
    assert_matmul_close(got, want, mag)


GEMM_CASES = [
    # (m, k, n, transA, transB, alpha, beta, C shape or None)
    (1, 257, 300, 0, 1, 1.0, 1.0, "N"),
    (1, 100, 67, 0, 0, 1.0, 1.0, None),
    (7, 100, 67, 0, 1, 0.5, 2.0, "MN"),
    (7, 17, 33, 1, 0, -1.5, 0.25, "1N"),
    (1, 17, 33, 1, 1, 2.0, 0.0, "N"),
    (64, 1024, 96, 0, 1, 1.0, 1.0, "N"),
    (130, 257, 300, 0, 0, 1.0, 0.0, None),
    (130, 257, 300, 1, 1, 0.75, -1.0, "M1"),
    (0, 17, 33, 0, 1, 1.0, 1.0, "N"),
]


def _c_shape(key, m, n):
    return {"N": (n,), "MN": (m, n), "1N": (1, n), "M1": (m, 1)}[key]


@pytest.mark.parametrize("case", GEMM_CASES, ids=lambda c: "m{}k{}n{}tA{}tB{}a{}b{}C{}".format(*c))
def test_gemm_const_weight(make_sessions, rcpu_devices, stats, case):
    m, k, n, ta, tb, alpha, beta, c_key = case
    rng = np.random.default_rng(m * 7 + k * 13 + n + ta * 3 + tb * 5)
    w = _f32(rng, (n, k) if tb else (k, n))
    c = None if c_key is None else _f32(rng, _c_shape(c_key, m, n))
    a_shape = [k, "M"] if ta else ["M", k]
    model = models.gemm_const(a_shape, w, c, alpha=alpha, beta=beta, transA=ta, transB=tb)
    cpu, rc = make_sessions(model, PACKED)
    assert_on_rcpu(rc, "gemm0")
    a = _f32(rng, (k, m) if ta else (m, k))
    stats.reset()
    got, want = rc.run(None, {"A": a})[0], cpu.run(None, {"A": a})[0]
    if m > 0:
        _assert_route(stats, "Gemm", "prepacked")
    a64, w64 = a.astype(np.float64), w.astype(np.float64)
    a64, w64 = (a64.T if ta else a64), (w64.T if tb else w64)
    mag = abs(alpha) * (np.abs(a64) @ np.abs(w64))
    if c is not None:
        mag = mag + np.abs(beta * c.astype(np.float64))
    assert got.shape == (m, n)
    assert_matmul_close(got, want, mag)
    del rc
    stats.reset()
    np.testing.assert_array_equal(_unpacked(model, rcpu_devices, threads=1).run(None, {"A": a})[0], got)
    if m > 0:
        _assert_route(stats, "Gemm", "unpacked")


def test_const_weight_bad_k_names_node(make_sessions):
    """A run-time A whose K does not match the prepacked weight: an error naming the node, and the
    session stays usable."""
    from conftest import assert_error_names_node

    w = np.ones((5, 3), np.float32)
    cpu, rc = make_sessions(models.matmul(["M", "K"], None, name="matmul_w_bad_k", b_init=w), PACKED)
    assert_on_rcpu(rc, "matmul_w_bad_k")
    with pytest.raises(Exception) as ei:
        rc.run(None, {"A": np.ones((2, 4), np.float32)})
    assert_error_names_node(ei.value, "matmul_w_bad_k")
    ok = {"A": np.ones((2, 5), np.float32)}
    np.testing.assert_array_equal(rc.run(None, ok)[0], cpu.run(None, ok)[0])
