"""Float32 parity of rcpu's claimed ops against ORT's CPU EP.

Elementwise (Add/Sub/Mul/Div): results must be BIT-EXACT to ORT CPU (these are single IEEE-754
operations per element; only NaN payloads may differ, so NaN positions are compared with
equal_nan and every other element bit-for-bit, which also checks the sign of zeros).

MatMul/Gemm tolerance (reductions, so summation order may differ): elementwise
    |rcpu - cpu| <= RTOL * |cpu| + ATOL * magnitude,   RTOL = 1e-4, ATOL = 1e-5,
where magnitude = (|A'| @ |B'|) * |alpha| (+ |beta * C|) is the sum of absolute terms that make up
each output element, i.e. the atol is relative to the size of what was summed, not absolute.

Every test asserts the node it targets was assigned to RcpuExecutionProvider.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import models
from conftest import assert_error_names_node, assert_on_rcpu

RTOL = 1e-4
ATOL = 1e-5

SPECIALS = np.array(
    [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 3.4e38, -3.4e38, 1.0, -1.0, 1e-30, 7.0], np.float32
)


def assert_bit_exact(got: np.ndarray, want: np.ndarray):
    assert got.dtype == want.dtype == np.float32
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    assert np.array_equal(np.isnan(got), np.isnan(want)), "NaN positions differ"
    assert np.array_equal(got, want, equal_nan=True)
    ok = ~np.isnan(want)
    gb, wb = got.view(np.uint32)[ok], want.view(np.uint32)[ok]
    bad = np.flatnonzero(gb != wb)
    assert bad.size == 0, f"{bad.size} elements differ in bits, e.g. got {got[ok][bad[:5]]} want {want[ok][bad[:5]]}"


def assert_matmul_close(got, want, magnitude):
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    lim = RTOL * np.abs(want.astype(np.float64)) + ATOL * magnitude
    bad = np.flatnonzero(err > lim)
    assert bad.size == 0, (
        f"{bad.size}/{err.size} elements out of tolerance, worst err {err.ravel()[bad].max():.3g} "
        f"(limit there {lim.ravel()[bad[np.argmax(err.ravel()[bad])]]:.3g})"
    )


def _data(rng, shape, specials: bool):
    x = np.asarray(rng.standard_normal(shape) * 4, dtype=np.float32)
    if specials and x.size:
        flat = x.reshape(-1)
        idx = rng.choice(flat.size, size=min(flat.size, max(1, flat.size // 3)), replace=False)
        flat[idx] = rng.choice(SPECIALS, size=idx.size)
    return x


BINARY_SHAPES = [
    ([1], [1]),
    ([], []),
    ([], [3]),
    ([5], []),
    ([1], [6]),
    ([3, 1, 5], [4, 1]),
    ([4, 1], [3, 1, 5]),
    ([2, 3, 4, 5], [5]),
    ([5], [2, 3, 4, 5]),
    ([2, 3, 4, 5], [3, 1, 1]),
    ([7], [3, 7]),
    ([3, 7], [3, 7]),
    ([1, 1, 1], [2, 1, 3]),
    ([0, 3], [3]),
    ([2, 0, 4], [1, 4]),
    ([0], []),
    ([1 << 18], [1 << 18]),
    ([1 << 18], [1]),
    ([64, 4096], [4096]),
    ([513, 511], [513, 1]),
]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("a_shape,b_shape", BINARY_SHAPES, ids=[f"{a}x{b}".replace(" ", "") for a, b in BINARY_SHAPES])
def test_binary_bit_exact(make_sessions, op, a_shape, b_shape):
    rng = np.random.default_rng(hash((op, str(a_shape), str(b_shape))) & 0xFFFF)
    cpu, rc = make_sessions(models.binary(op, a_shape, b_shape), {"threads": 2})
    assert_on_rcpu(rc, f"{op.lower()}0")
    for specials in (False, True):
        feeds = {"A": _data(rng, a_shape, specials), "B": _data(rng, b_shape, specials)}
        want = cpu.run(None, feeds)[0]
        got = rc.run(None, feeds)[0]
        assert_bit_exact(got, want)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_binary_all_special_pairs(make_sessions, op):
    """Every pair of special values (NaN, +-Inf, +-0, denormals, near-max) in one broadcast."""
    cpu, rc = make_sessions(models.binary(op, [len(SPECIALS), 1], [len(SPECIALS)]), {"threads": 2})
    assert_on_rcpu(rc, f"{op.lower()}0")
    feeds = {"A": SPECIALS.reshape(-1, 1).copy(), "B": SPECIALS.copy()}
    assert_bit_exact(rc.run(None, feeds)[0], cpu.run(None, feeds)[0])


@pytest.mark.parametrize("op", ["Add", "Div"])
def test_binary_dynamic_shapes_one_session(make_sessions, op):
    """Symbolic dims: the same session sees several runtime shapes (incl. broadcast and empty)."""
    cpu, rc = make_sessions(models.binary(op, ["a", "b"], ["c"]), {"threads": 2})
    assert_on_rcpu(rc, f"{op.lower()}0")
    rng = np.random.default_rng(3)
    for a_shape, b_shape in [((3, 5), (5,)), ((1, 9), (9,)), ((4, 1), (7,)), ((0, 2), (2,)), ((300, 301), (1,))]:
        feeds = {"A": _data(rng, a_shape, True), "B": _data(rng, b_shape, True)}
        assert_bit_exact(rc.run(None, feeds)[0], cpu.run(None, feeds)[0])


def test_binary_runtime_bad_broadcast_names_node(make_sessions):
    cpu, rc = make_sessions(models.binary("Add", ["x"], ["y"], name="add_bad_bcast"), {"threads": 2})
    assert_on_rcpu(rc, "add_bad_bcast")
    feeds = {"A": np.ones(3, np.float32), "B": np.ones(4, np.float32)}
    with pytest.raises(Exception) as ei:
        rc.run(None, feeds)
    assert_error_names_node(ei.value, "add_bad_bcast")
    # The session is still usable afterwards.
    ok = {"A": np.ones(4, np.float32), "B": np.full(4, 2.0, np.float32)}
    assert_bit_exact(rc.run(None, ok)[0], cpu.run(None, ok)[0])


# ---------------------------------------------------------------------------------------------
# MatMul
# ---------------------------------------------------------------------------------------------

DIMS = [1, 2, 3, 17, 64, 100, 257]


@pytest.fixture(scope="module")
def dyn_matmul_sessions(make_sessions):
    cpu, rc = make_sessions(models.matmul(["M", "K"], ["K", "N"]), {"threads": 2})
    assert_on_rcpu(rc, "matmul0")
    return cpu, rc


def _check_matmul(cpu, rc, a, b):
    feeds = {"A": a, "B": b}
    want = cpu.run(None, feeds)[0]
    got = rc.run(None, feeds)[0]
    mag = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    assert_matmul_close(got, want, mag)
    return got, want


@pytest.mark.parametrize("m,k,n", list(itertools.product(DIMS, DIMS, DIMS)))
def test_matmul_2d(dyn_matmul_sessions, m, k, n):
    cpu, rc = dyn_matmul_sessions
    assert_on_rcpu(rc, "matmul0")
    rng = np.random.default_rng(m * 1000003 + k * 1009 + n)
    _check_matmul(cpu, rc, rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32))


MATMUL_SHAPES = [
    ([4], [4, 3]),  # 1-D x 2-D
    ([17], [17, 5]),
    ([5, 4], [4]),  # 2-D x 1-D
    ([3, 17], [17]),
    ([4], [4]),  # 1-D x 1-D -> scalar
    ([100], [100]),
    ([2, 1, 3, 4], [5, 4, 6]),  # batched with broadcast -> [2, 5, 3, 6]
    ([3, 4, 5], [5, 2]),
    ([5, 2], [3, 2, 7]),
    ([2, 3, 4], [2, 4, 5]),
    ([1, 3, 4], [6, 4, 2]),
    ([2, 3, 4], [4]),
    ([4], [2, 4, 5]),
    ([0, 4], [4, 3]),  # M = 0
    ([2, 0, 4], [4, 3]),
    ([3, 0], [0, 4]),  # K = 0 -> zeros
    ([3, 4], [4, 0]),  # N = 0
]


@pytest.mark.parametrize("a_shape,b_shape", MATMUL_SHAPES, ids=[f"{a}x{b}".replace(" ", "") for a, b in MATMUL_SHAPES])
def test_matmul_shapes(make_sessions, a_shape, b_shape):
    cpu, rc = make_sessions(models.matmul(a_shape, b_shape), {"threads": 2})
    assert_on_rcpu(rc, "matmul0")
    rng = np.random.default_rng(len(a_shape) * 31 + len(b_shape))
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    got, want = _check_matmul(cpu, rc, a, b)
    assert got.shape == np.matmul(a, b).shape


def test_matmul_constant_weight(make_sessions):
    """B as a constant initializer (the prepack path) with dynamic M."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((100, 67)).astype(np.float32)
    cpu, rc = make_sessions(models.matmul(["M", 100], None, b_init=w), {"threads": 2})
    assert_on_rcpu(rc, "matmul0")
    for m in (1, 7, 64):
        a = rng.standard_normal((m, 100)).astype(np.float32)
        want = cpu.run(None, {"A": a})[0]
        got = rc.run(None, {"A": a})[0]
        assert_matmul_close(got, want, np.abs(a.astype(np.float64)) @ np.abs(w.astype(np.float64)))


def test_matmul_runtime_bad_k_names_node(make_sessions, rcpu_devices):
    cpu, rc = make_sessions(models.matmul(["M", "K"], [5, 3], name="matmul_bad_k"), {"threads": 2})
    assert_on_rcpu(rc, "matmul_bad_k")
    feeds = {"A": np.ones((2, 4), np.float32), "B": np.ones((5, 3), np.float32)}
    with pytest.raises(Exception) as ei:
        rc.run(None, feeds)
    assert_error_names_node(ei.value, "matmul_bad_k")
    ok = {"A": np.ones((2, 5), np.float32), "B": np.ones((5, 3), np.float32)}
    np.testing.assert_array_equal(rc.run(None, ok)[0], cpu.run(None, ok)[0])


# ---------------------------------------------------------------------------------------------
# Gemm
# ---------------------------------------------------------------------------------------------

C_SHAPES = {
    "noC": None,
    "C[]": lambda m, n: [],
    "C[1]": lambda m, n: [1],
    "C[N]": lambda m, n: [n],
    "C[1,N]": lambda m, n: [1, n],
    "C[M,1]": lambda m, n: [m, 1],
    "C[M,N]": lambda m, n: [m, n],
}
ALPHA_BETA = [(1.0, 1.0), (-0.5, 2.0), (1.5, 0.0)]


@pytest.mark.parametrize("mkn", [(3, 5, 4), (17, 33, 9)], ids=["3x5x4", "17x33x9"])
@pytest.mark.parametrize("c_key", list(C_SHAPES))
@pytest.mark.parametrize("alpha,beta", ALPHA_BETA, ids=[f"a{a}b{b}" for a, b in ALPHA_BETA])
@pytest.mark.parametrize("trans_a,trans_b", list(itertools.product([0, 1], [0, 1])), ids=lambda v: str(v))
def test_gemm(make_sessions, mkn, c_key, alpha, beta, trans_a, trans_b):
    m, k, n = mkn
    a_shape = [k, m] if trans_a else [m, k]
    b_shape = [n, k] if trans_b else [k, n]
    c_shape = None if C_SHAPES[c_key] is None else C_SHAPES[c_key](m, n)
    model = models.gemm(a_shape, b_shape, c_shape, alpha=alpha, beta=beta, transA=trans_a, transB=trans_b)
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, "gemm0")
    rng = np.random.default_rng(m + 7 * k + 31 * n + 101 * trans_a + 211 * trans_b)
    feeds = {"A": rng.standard_normal(a_shape).astype(np.float32), "B": rng.standard_normal(b_shape).astype(np.float32)}
    if c_shape is not None:
        feeds["C"] = rng.standard_normal(c_shape).astype(np.float32)
    want = cpu.run(None, feeds)[0]
    got = rc.run(None, feeds)[0]
    a = feeds["A"].astype(np.float64)
    b = feeds["B"].astype(np.float64)
    a = a.T if trans_a else a
    b = b.T if trans_b else b
    mag = abs(alpha) * (np.abs(a) @ np.abs(b))
    if c_shape is not None:
        mag = mag + np.abs(beta * feeds["C"].astype(np.float64))
    assert got.shape == (m, n)
    assert_matmul_close(got, want, mag)


def test_gemm_runtime_bad_shape_names_node(make_sessions):
    cpu, rc = make_sessions(models.gemm(["M", "K"], [6, 4], None, name="gemm_bad_k"), {"threads": 2})
    assert_on_rcpu(rc, "gemm_bad_k")
    with pytest.raises(Exception) as ei:
        rc.run(None, {"A": np.ones((2, 5), np.float32), "B": np.ones((6, 4), np.float32)})
    assert_error_names_node(ei.value, "gemm_bad_k")


def test_matmul_unknown_rank(make_sessions):
    """Inputs declared without a shape. rcpu's MatMul implements full numpy semantics (1-D, batched,
    broadcast), so it has no reason to decline an unknown rank: it must claim the node and handle
    whatever rank arrives at run time."""
    cpu, rc = make_sessions(models.matmul(None, None), {"threads": 2})
    assert_on_rcpu(rc, "matmul0")
    rng = np.random.default_rng(9)
    for a_shape, b_shape in [((3, 4), (4, 5)), ((4,), (4, 2)), ((2, 3, 4), (4, 6)), ((2, 1, 3, 4), (5, 4, 6))]:
        _check_matmul(cpu, rc, rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32))


# ---------------------------------------------------------------------------------------------
# Claim boundaries and graph plumbing
# ---------------------------------------------------------------------------------------------

DECLINED_DTYPES = [("float16", models.TensorProto.FLOAT16), ("float64", models.TensorProto.DOUBLE),
                   ("int32", models.TensorProto.INT32), ("int64", models.TensorProto.INT64)]


# (ORT's CPU EP has no integer Gemm kernel, so those two combinations are not run.)
DECLINED_CASES = [
    (op, d, e) for op in ["Add", "Div", "MatMul", "Gemm"] for d, e in DECLINED_DTYPES
    if not (op == "Gemm" and d.startswith("int"))
]


@pytest.mark.parametrize("op,dtype,elem", DECLINED_CASES, ids=[f"{o}-{d}" for o, d, _ in DECLINED_CASES])
def test_other_dtypes_stay_on_cpu(make_sessions, op, dtype, elem):
    from onnx import helper

    node = helper.make_node(op, ["A", "B"], ["Y"], name="n0")
    model = models._model(
        [node], [models._vi("A", [4, 4], elem), models._vi("B", [4, 4], elem)], [models._vi("Y", None, elem)]
    )
    cpu, rc = make_sessions(model, {"threads": 2})
    from conftest import assert_on_cpu

    assert_on_cpu(rc, "n0")
    a = (np.arange(16).reshape(4, 4) % 5 + 1).astype(dtype)
    b = (np.arange(16).reshape(4, 4) % 3 + 1).astype(dtype)
    np.testing.assert_array_equal(rc.run(None, {"A": a, "B": b})[0], cpu.run(None, {"A": a, "B": b})[0])


def test_aliased_inputs_and_chained_outputs(make_sessions):
    """Y = A + A (both inputs one tensor); Z = Y * Y, with Y also a graph output."""
    from onnx import helper

    nodes = [helper.make_node("Add", ["A", "A"], ["Y"], name="add_self"), helper.make_node("Mul", ["Y", "Y"], ["Z"], name="mul_self")]
    model = models._model(nodes, [models._vi("A", ["n"])], [models._vi("Y", None), models._vi("Z", None)])
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, {"add_self", "mul_self"})
    a = _data(np.random.default_rng(2), (1001,), True)
    for g, w in zip(rc.run(None, {"A": a}), cpu.run(None, {"A": a})):
        assert_bit_exact(g, w)


def test_gemm_runtime_bad_c_names_node(make_sessions):
    cpu, rc = make_sessions(models.gemm([2, 3], [3, 4], ["c"], name="gemm_bad_c"), {"threads": 2})
    assert_on_rcpu(rc, "gemm_bad_c")
    with pytest.raises(Exception) as ei:
        rc.run(None, {"A": np.ones((2, 3), np.float32), "B": np.ones((3, 4), np.float32), "C": np.ones(3, np.float32)})
    assert_error_names_node(ei.value, "gemm_bad_c")
