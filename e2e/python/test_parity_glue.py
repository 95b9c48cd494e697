"""Float32 parity of rcpu's glue ops (normalisations, softmax, activations) against ORT's CPU EP,
their claim rules (what must stay on ORT), and a Qwen2-0.5B-shaped decoder layer.

Tolerances, elementwise |rcpu - cpu| <= atol + rtol * |cpu| (NaN positions and infinities equal):
    LayerNormalization, SimplifiedLayerNormalization, SkipSimplifiedLayerNormalization,
    SkipLayerNormalization, Softmax, Sigmoid: rtol 1e-5, atol 1e-6;  Gelu / FastGelu: rtol 1e-5, atol 1e-5;
    Split: bit for bit (a copy).
Decoder layer (every node on rcpu, attention included): relative L2 of the output vs ORT CPU <= 2e-2
(accuracy_level 4) / 1e-4 (level 0); the decode-step variant (KV cache, rotary) also for present K/V.

Every positive test asserts the node ran on RcpuExecutionProvider.
"""

from __future__ import annotations

import numpy as np
import pytest

from onnx import TensorProto, helper, numpy_helper

import models
from conftest import assert_error_names_node, assert_on_cpu, assert_on_rcpu, assigned_to_rcpu, rcpu_session, rel_l2

TIGHT = (1e-5, 1e-6)
GELU_TOL = (1e-5, 1e-5)
SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 30.0, -30.0, 100.0, -100.0, 1e30, -1e30],
                    np.float32)


def assert_close(got, want, tol, what=""):
    rtol, atol = tol
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype == np.float32, f"{what}: dtype {got.dtype} vs {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert np.array_equal(np.isnan(got), np.isnan(want)), f"{what}: NaN positions differ"
    inf = np.isinf(want)
    assert np.array_equal(got[inf], want[inf]), f"{what}: infinities differ"
    ok = ~np.isnan(want) & ~inf
    g, w = got[ok].astype(np.float64), want[ok].astype(np.float64)
    err = np.abs(g - w)
    bad = np.flatnonzero(err > atol + rtol * np.abs(w))
    assert bad.size == 0, f"{what}: {bad.size}/{err.size} out of tolerance, e.g. got {g[bad[:4]]} want {w[bad[:4]]}"


def _x(rng, shape, specials=False, scale=3.0):
    x = np.asarray(rng.standard_normal(shape) * scale, np.float32)
    if specials and x.size:
        flat = x.reshape(-1)
        idx = rng.choice(flat.size, size=min(flat.size, len(SPECIALS)), replace=False)
        flat[idx] = SPECIALS[: idx.size]
    return x


def _parity(make_sessions, model, feeds, tol, node="glue0"):
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, node)
    want, got = cpu.run(None, feeds), rc.run(None, feeds)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, tol, f"output {i}")
    return got


# ------------------------------------------------------------------------------ normalisations

NORM_SHAPES = [((2, 5, 896), -1), ((1, 1, 17), -1), ((3, 4096), -1), ((7, 3), 1), ((2, 3, 16), 1), ((4, 100), 0),
               ((1, 1), -1), ((0, 15), -1), ((64, 1024), -1)]


def _norm_params(rng, shape, axis):
    a = axis % len(shape)
    pshape = shape[a:]
    return (1.0 + 0.2 * rng.standard_normal(pshape)).astype(np.float32), (0.1 * rng.standard_normal(pshape)).astype(
        np.float32
    )


@pytest.mark.parametrize("shape,axis", NORM_SHAPES, ids=[f"{s}-ax{a}" for s, a in NORM_SHAPES])
@pytest.mark.parametrize("inv_out", [False, True])
def test_simplified_layer_norm(make_sessions, shape, axis, inv_out):
    rng = np.random.default_rng(sum(shape) + axis + 3 + inv_out)
    scale, _ = _norm_params(rng, shape, axis)
    model = models.glue_op(
        "SimplifiedLayerNormalization", [("X", list(shape)), ("scale", scale)],
        out_names=["Y", "inv"] if inv_out else ["Y"], axis=axis, epsilon=1e-6,
    )
    _parity(make_sessions, model, {"X": _x(rng, shape)}, TIGHT)


@pytest.mark.parametrize("shape,axis", NORM_SHAPES, ids=[f"{s}-ax{a}" for s, a in NORM_SHAPES])
@pytest.mark.parametrize("with_b,stats", [(True, True), (False, False), (True, False)])
def test_layer_norm(make_sessions, shape, axis, with_b, stats):
    rng = np.random.default_rng(sum(shape) + 3 * (axis + 3) + with_b)
    scale, b = _norm_params(rng, shape, axis)
    ins = [("X", list(shape)), ("scale", scale)] + ([("B", b)] if with_b else [])
    model = models.glue_op("LayerNormalization", ins, out_names=["Y", "mean", "inv"] if stats else ["Y"],
                           axis=axis, epsilon=1e-5)
    _parity(make_sessions, model, {"X": _x(rng, shape)}, TIGHT)


def test_norms_nan_inf_rows(make_sessions):
    rng = np.random.default_rng(5)
    x = _x(rng, (6, 33))
    x[1, 3], x[2, 0], x[3, 32] = np.nan, np.inf, -np.inf
    scale, b = _norm_params(rng, (6, 33), -1)
    for op, ins in (("SimplifiedLayerNormalization", [("X", [6, 33]), ("scale", scale)]),
                    ("LayerNormalization", [("X", [6, 33]), ("scale", scale), ("B", b)])):
        got = _parity(make_sessions, models.glue_op(op, ins), {"X": x}, TIGHT)
        assert np.all(np.isfinite(got[0][0])), "a clean row stays finite"


BCAST_SHAPES = [[1], [8], [3, 8], [1, 8], [2, 3, 8], [2, 1, 8], [3, 1], [1, 1, 8], [1, 3, 8]]


@pytest.mark.parametrize("simplified", [False, True])
@pytest.mark.parametrize("axis", [-1, 1])
@pytest.mark.parametrize("pshape", BCAST_SHAPES, ids=[str(s) for s in BCAST_SHAPES])
def test_norm_params_broadcast_at_run_time(make_sessions, simplified, axis, pshape):
    """Scale (and B) fed at run time in any shape NumPy-broadcastable to X [2, 3, 8]: ORT 1.31
    computes with the broadcast values, rcpu must too (it used to refuse at Run)."""
    rng = np.random.default_rng(len(pshape) * 10 + sum(pshape) + simplified + axis)
    sym = [f"s{i}" for i in range(len(pshape))]
    ins = [("X", [2, 3, 8]), ("scale", sym)] + ([] if simplified else [("B", [f"b{i}" for i in range(len(pshape))])])
    op = "SimplifiedLayerNormalization" if simplified else "LayerNormalization"
    outs = ["Y", "inv"] if simplified else ["Y", "mean", "inv"]
    model = models.glue_op(op, ins, out_names=outs, axis=axis)
    feeds = {"X": _x(rng, (2, 3, 8)), "scale": (1.0 + 0.3 * rng.standard_normal(pshape)).astype(np.float32)}
    if not simplified:
        feeds["B"] = rng.standard_normal(pshape).astype(np.float32)
    _parity(make_sessions, model, feeds, TIGHT)


@pytest.mark.parametrize("pshape", [[4], [2, 8], [3, 8, 1]])
def test_norm_params_not_broadcastable_names_node(make_sessions, pshape):
    ins = [("X", [2, 3, 8]), ("scale", [f"s{i}" for i in range(len(pshape))])]
    cpu, rc = make_sessions(models.glue_op("SimplifiedLayerNormalization", ins), {"threads": 2})
    assert_on_rcpu(rc, "glue0")
    feeds = {"X": np.ones((2, 3, 8), np.float32), "scale": np.ones(pshape, np.float32)}
    with pytest.raises(Exception):
        cpu.run(None, feeds)
    with pytest.raises(Exception) as e:
        rc.run(None, feeds)
    assert_error_names_node(e.value, "glue0")


@pytest.mark.parametrize("n", [8, 17, 896])
def test_norms_large_finite_rows(make_sessions, n):
    """Rows of huge finite values: ORT takes the mean (in f64) first, then the variance around
    it, so LayerNorm stays finite; RMSNorm's f32 sum of squares overflows (y = 0, as ORT)."""
    rng = np.random.default_rng(n)
    rows = [np.full(n, 2e19), np.full(n, 1e37), np.full(n, -3e38), np.tile([1e37, -1e37], n)[:n],
            np.full(n, 1000.1), np.concatenate([[1e20], np.arange(1, n)])]
    x = np.stack(rows).astype(np.float32)
    scale, b = _norm_params(rng, (len(rows), n), -1)
    for op, ins, outs in (("LayerNormalization", [("X", list(x.shape)), ("scale", scale), ("B", b)],
                           ["Y", "mean", "inv"]),
                          ("SimplifiedLayerNormalization", [("X", list(x.shape)), ("scale", scale)], ["Y", "inv"])):
        got = _parity(make_sessions, models.glue_op(op, ins, out_names=outs), {"X": x}, TIGHT)
        assert np.all(np.isfinite(got[0])), f"{op}: rows of finite values stay finite"
    x3 = x[None]
    ins = [("X", list(x3.shape)), ("skip", list(x3.shape)), ("gamma", scale)]
    model = models.glue_op("SkipSimplifiedLayerNormalization", ins, domain="com.microsoft", out_names=["Y", "", "", "S"])
    _parity(make_sessions, model, {"X": x3, "skip": np.zeros_like(x3)}, TIGHT)


@pytest.mark.parametrize("rows", [1, 5, 40])
@pytest.mark.parametrize("bias,sum_out,skip_kind", [(False, False, "full"), (True, True, "full"),
                                                    (True, False, "2d"), (False, True, "batch1")])
def test_skip_simplified_layer_norm(make_sessions, rows, bias, sum_out, skip_kind):
    rng = np.random.default_rng(rows * 10 + bias * 2 + sum_out)
    b_, h = 2, 896
    xs = (b_, rows, h)
    sk = {"full": xs, "2d": (rows, h), "batch1": (1, rows, h)}[skip_kind]
    gamma = (1.0 + 0.1 * rng.standard_normal(h)).astype(np.float32)
    ins = [("X", list(xs)), ("skip", list(sk)), ("gamma", gamma)]
    if bias:
        ins.append(("bias", (0.1 * rng.standard_normal(h)).astype(np.float32)))
    outs = ["Y", "", "", "S"] if sum_out else ["Y"]
    model = models.glue_op("SkipSimplifiedLayerNormalization", ins, domain="com.microsoft", out_names=outs,
                           epsilon=1e-6)
    _parity(make_sessions, model, {"X": _x(rng, xs), "skip": _x(rng, sk)}, TIGHT)


@pytest.mark.parametrize("rows", [1, 5, 40])
@pytest.mark.parametrize("beta,bias,sum_out,skip_kind", [(False, False, False, "full"), (True, True, True, "full"),
                                                         (True, False, False, "2d"), (False, True, True, "batch1"),
                                                         (True, True, False, "batch1")])
def test_skip_layer_norm(make_sessions, rows, beta, bias, sum_out, skip_kind):
    """SkipLayerNormalization (the model builder's norm for Phi-2 / GPT-2 / OLMo-style decoders): input 3 is
    beta, input 4 bias; both optional, in every combination with the residual-sum output."""
    rng = np.random.default_rng(rows * 100 + beta * 8 + bias * 2 + sum_out)
    b_, h = 2, 2560
    xs = (b_, rows, h)
    sk = {"full": xs, "2d": (rows, h), "batch1": (1, rows, h)}[skip_kind]
    gamma = (1.0 + 0.1 * rng.standard_normal(h)).astype(np.float32)
    vec = lambda: (0.1 * rng.standard_normal(h)).astype(np.float32)  # noqa: E731
    ins = [("X", list(xs)), ("skip", list(sk)), ("gamma", gamma), ("beta", vec() if beta else None),
           ("bias", vec() if bias else None)]
    while ins[-1][1] is None:
        ins.pop()
    outs = ["Y", "", "", "S"] if sum_out else ["Y"]
    model = models.glue_op("SkipLayerNormalization", ins, domain="com.microsoft", out_names=outs, epsilon=1e-5)
    _parity(make_sessions, model, {"X": _x(rng, xs), "skip": _x(rng, sk)}, TIGHT)


def test_skip_layer_norm_default_epsilon_and_offset_rows(make_sessions):
    """No epsilon attribute (ORT fills the schema's 1e-12), and rows whose mean is large against their spread
    (offsets up to 100 on values of spread ~3: activations with a bias). ORT sums the mean and the squares
    serially in f32 and takes the variance as mean(v^2) - mean^2; rcpu sums the mean in f64 and the variance
    around it in a second pass. Against an f64 reference rcpu is within rtol 1e-5 / atol 1e-5 and no
    further from it than ORT (plus 1e-6); against ORT within atol 1e-4 (ORT's own error here ~1e-5)."""
    rng = np.random.default_rng(7)
    h = 896
    x = _x(rng, (1, 6, h))
    x += np.array([0.0, 30.0, -30.0, 100.0, 3.0, -1.0], np.float32)[None, :, None]
    skip = _x(rng, x.shape, scale=0.5)
    gamma = (1.0 + 0.1 * rng.standard_normal(h)).astype(np.float32)
    beta = (0.1 * rng.standard_normal(h)).astype(np.float32)
    ins = [("X", list(x.shape)), ("skip", list(x.shape)), ("gamma", gamma), ("beta", beta)]
    model = models.glue_op("SkipLayerNormalization", ins, domain="com.microsoft")
    got = _parity(make_sessions, model, {"X": x, "skip": skip}, (1e-4, 1e-4))[0]
    cpu, _ = make_sessions(model, {"threads": 2})
    want = cpu.run(None, {"X": x, "skip": skip})[0]
    v = (x.astype(np.float64) + skip.astype(np.float64))
    mean = v.mean(-1, keepdims=True)
    ref = (v - mean) / np.sqrt(((v - mean) ** 2).mean(-1, keepdims=True) + 1e-12) * gamma + beta
    assert_close(got, ref.astype(np.float32), (1e-5, 1e-5), "rcpu vs f64")
    assert np.abs(got - ref).max() <= np.abs(want - ref).max() + 1e-6


def test_skip_layer_norm_mean_outputs_stay_on_ort(make_sessions):
    """Outputs 1 and 2 (mean, inv_std_var) wired: ORT's CPU kernel does not produce them; the node stays
    with ORT."""
    h = 8
    ins = [("X", [1, 3, h]), ("skip", [1, 3, h]), ("gamma", np.ones(h, np.float32))]
    m = models.glue_op("SkipLayerNormalization", ins, domain="com.microsoft", out_names=["Y", "mean", "inv"],
                       epsilon=1e-5)
    _, rc = make_sessions(m, {"threads": 2})
    assert_on_cpu(rc, "glue0")


# ------------------------------------------------------------------------------ softmax

SOFTMAX_CASES = [((3, 17), -1), ((2, 5, 100), -1), ((1, 4096), -1), ((2, 3, 4), 1), ((4, 6), 0), ((2, 3, 5), -3),
                 ((5, 1), -1), ((2, 14, 7, 7), -1), ((0, 8), -1)]


@pytest.mark.parametrize("shape,axis", SOFTMAX_CASES, ids=[f"{s}-ax{a}" for s, a in SOFTMAX_CASES])
def test_softmax(make_sessions, shape, axis):
    rng = np.random.default_rng(len(shape) * 7 + axis + 3)
    model = models.glue_op("Softmax", [("X", list(shape))], axis=axis)
    _parity(make_sessions, model, {"X": _x(rng, shape, scale=4.0)}, TIGHT)


def test_softmax_special_rows(make_sessions):
    rng = np.random.default_rng(8)
    x = _x(rng, (6, 19))
    x[1, 4] = np.nan
    x[2, 7] = np.inf
    x[3, :] = -np.inf
    x[4, 0] = -np.inf
    x[5] += 1000.0
    got = _parity(make_sessions, models.glue_op("Softmax", [("X", [6, 19])]), {"X": x}, TIGHT)
    assert np.all(np.isfinite(got[0][0])) and np.all(np.isfinite(got[0][5]))


# ------------------------------------------------------------------------------ activations

ACT_SHAPES = [(1,), (3,), (15,), (16,), (17,), (2, 100), (4, 4096), (0, 5), (3, 50000)]


@pytest.mark.parametrize("shape", ACT_SHAPES, ids=str)
@pytest.mark.parametrize("opset", [6, 13, 17])
def test_sigmoid(make_sessions, shape, opset):
    rng = np.random.default_rng(len(shape) + opset)
    model = models.glue_op("Sigmoid", [("X", list(shape))], opset=opset)
    _parity(make_sessions, model, {"X": _x(rng, shape, specials=True, scale=8.0)}, TIGHT)


@pytest.mark.parametrize("shape", ACT_SHAPES, ids=str)
@pytest.mark.parametrize("op,opset", [("Relu", 6), ("Relu", 14), ("Tanh", 6), ("Tanh", 13)])
def test_relu_tanh(make_sessions, shape, op, opset):
    """Relu (exact; -0 and NaN pass as in ORT) and Tanh (ORT's MLAS tanh and rcpu's are both
    within ~3e-7 relative of the true value) on specials and a wide range."""
    rng = np.random.default_rng(len(shape) * 5 + opset)
    model = models.glue_op(op, [("X", list(shape))], opset=opset)
    x = _x(rng, shape, specials=True, scale=6.0)
    if x.size:
        x.flat[0] = -0.0
    tol = (0.0, 0.0) if op == "Relu" else (1e-6, 1e-7)
    _parity(make_sessions, model, {"X": x}, tol)


@pytest.mark.parametrize("shape", ACT_SHAPES, ids=str)
@pytest.mark.parametrize("exp", [np.array([2], np.int32), np.array(2.0, np.float32), np.array(2, np.int64)], ids=str)
@pytest.mark.parametrize("opset", [12, 13, 15])
def test_pow_square(make_sessions, shape, exp, opset):
    """Pow with a constant exponent of 2 (the model builder's `relu2` square): exactly ORT's x * x."""
    rng = np.random.default_rng(len(shape) * 7 + opset)
    model = models.glue_op("Pow", [("X", list(shape)), ("E", exp)], opset=opset)
    _parity(make_sessions, model, {"X": _x(rng, shape, specials=True, scale=6.0)}, (0.0, 0.0))


@pytest.mark.parametrize("exp", [np.array([3], np.int32), np.array(0.5, np.float32), np.array([2, 2], np.int64),
                                 np.array([[2]], np.int32)], ids=str)
def test_pow_other_exponents_stay_on_ort(make_sessions, exp):
    """Another exponent, two of them, or one of higher rank than the base: ORT's."""
    rng = np.random.default_rng(3)
    model = models.glue_op("Pow", [("X", [2]), ("E", exp)], opset=15)
    _stays_on_cpu(make_sessions, model, {"X": _x(rng, (2,))})


@pytest.mark.parametrize("shape", ACT_SHAPES, ids=str)
@pytest.mark.parametrize("variant", ["onnx-none", "onnx-tanh", "onnx-default", "ms-gelu", "fastgelu", "fastgelu-bias"])
def test_gelu(make_sessions, shape, variant):
    rng = np.random.default_rng(len(shape) * 3 + len(variant))
    ins = [("X", list(shape))]
    if variant.startswith("onnx"):
        attrs = {} if variant == "onnx-default" else {"approximate": variant.split("-")[1]}
        model = models.glue_op("Gelu", ins, opset=20, **attrs)
    elif variant == "ms-gelu":
        model = models.glue_op("Gelu", ins, domain="com.microsoft")
    else:
        if variant == "fastgelu-bias":
            ins.append(("bias", rng.standard_normal(shape[-1]).astype(np.float32)))
        model = models.glue_op("FastGelu", ins, domain="com.microsoft")
    _parity(make_sessions, model, {"X": _x(rng, shape, specials=True, scale=4.0)}, GELU_TOL)


# ------------------------------------------------------------------------------ declines


# ------------------------------------------------------------------------------ Split


def _split_model(shape, axis, outputs, split=None, num_outputs=None, opset=18, split_input=False):
    """Split (node `glue0`) of X into `outputs` pieces, then a Relu (`relu{j}`, exact on both EPs) of
    each piece, so the Split is not alone in its partition (alone it stays on ORT). `split` is an int64
    initializer, or a graph input `split` when `split_input`."""
    attrs = {"axis": axis}
    if num_outputs is not None:
        attrs["num_outputs"] = num_outputs
    ins = ["X"] + (["split"] if split is not None or split_input else [])
    pieces = [f"p{j}" for j in range(outputs)]
    nodes = [helper.make_node("Split", ins, pieces, name="glue0", **attrs)]
    nodes += [helper.make_node("Relu", [p], [f"Y{j}"], name=f"relu{j}") for j, p in enumerate(pieces)]
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(shape))]
    inits = []
    if split_input:
        inputs.append(helper.make_tensor_value_info("split", TensorProto.INT64, [outputs]))
    elif split is not None:
        inits.append(numpy_helper.from_array(np.array(split, np.int64), "split"))
    graph = helper.make_graph(nodes, "split", inputs,
                              [helper.make_tensor_value_info(f"Y{j}", TensorProto.FLOAT, None) for j in range(outputs)],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=models.IR_VERSION)


SPLITS = [
    # shape, axis, outputs, split, num_outputs, opset
    ((1, 1, 4096), -1, 3, [2048, 1024, 1024], None, 18),  # Qwen3's packed QKV, one token
    ((1, 5, 4096), 2, 3, [2048, 1024, 1024], None, 13),  # the same over a 5-token prompt
    ((2, 7, 5), 1, 3, [2, 0, 5], None, 18),  # a zero-size piece
    ((2, 7, 5), 0, 2, None, None, 13),  # equal pieces from the output count
    ((3, 7), -1, 3, None, 3, 18),  # num_outputs: 3, 3, 1
    ((3, 12), 1, 2, None, 2, 18),  # the builder's gate-up Split
    ((0, 6), 1, 2, [3, 3], None, 18),  # no rows
    ((5, 3, 17), 2, 2, [16, 1], None, 18),  # pieces not a multiple of the SIMD width
]


@pytest.mark.parametrize("shape,axis,outputs,split,num,opset", SPLITS, ids=str)
def test_split(make_sessions, shape, axis, outputs, split, num, opset):
    """Split beside another rcpu node runs on rcpu and equals ORT's bit for bit (it copies)."""
    rng = np.random.default_rng(sum(shape) + axis)
    model = _split_model(shape, axis, outputs, split, num, opset)
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, ["glue0", "relu0"])
    x = _x(rng, shape, specials=True)
    for g, w in zip(rc.run(None, {"X": x}), cpu.run(None, {"X": x})):
        np.testing.assert_array_equal(g, w)


def test_split_with_an_omitted_output(rcpu_devices):
    """A Split output left empty (an omitted output) inside a partition: rcpu computes the others and
    skips it. ORT's own Split (1.31.1) crashes the process on such a node, so the answer is numpy's."""
    nodes = [helper.make_node("Split", ["X"], ["a", "", "c"], name="glue0", axis=1),
             helper.make_node("Relu", ["a"], ["Y0"], name="relu0"),
             helper.make_node("Relu", ["c"], ["Y2"], name="relu2")]
    graph = helper.make_graph(nodes, "split_omitted", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [3, 6])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("Y0", "Y2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=models.IR_VERSION)
    rc = rcpu_session(model.SerializeToString(), rcpu_devices, {"threads": 2})
    assert_on_rcpu(rc, ["glue0", "relu0", "relu2"])
    x = _x(np.random.default_rng(6), (3, 6))
    y0, y2 = rc.run(None, {"X": x})
    np.testing.assert_array_equal(y0, np.maximum(x[:, 0:2], 0))
    np.testing.assert_array_equal(y2, np.maximum(x[:, 4:6], 0))


def test_split_sizes_at_run_time_and_their_errors(make_sessions):
    """A `split` fed at run time is read per call; sizes that do not sum to the axis are an error
    naming the node, never a crash; alone a Split stays on ORT."""
    model = _split_model((2, 9), 1, 3, split_input=True)
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, ["glue0", "relu2"])
    x = _x(np.random.default_rng(3), (2, 9))
    for sizes in ([1, 2, 6], [0, 9, 0]):
        f = {"X": x, "split": np.array(sizes, np.int64)}
        for g, w in zip(rc.run(None, f), cpu.run(None, f)):
            np.testing.assert_array_equal(g, w)
    for bad in ([1, 2, 5], [5, 5, -1], [9, 9, 9]):
        with pytest.raises(Exception) as e:
            rc.run(None, {"X": x, "split": np.array(bad, np.int64)})
        assert_error_names_node(e.value, "glue0")
    alone = helper.make_model(helper.make_graph(
        [helper.make_node("Split", ["X"], ["A", "B"], name="glue0", axis=1)], "split_alone",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "AB"]),
        opset_imports=[helper.make_opsetid("", 13)], ir_version=models.IR_VERSION)
    _stays_on_cpu(make_sessions, alone, {"X": _x(np.random.default_rng(4), (2, 8))})


def _stays_on_cpu(make_sessions, model, feeds):
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_cpu(rc, "glue0")
    for g, w in zip(rc.run(None, feeds), cpu.run(None, feeds)):
        np.testing.assert_array_equal(g, w)


def test_declines(make_sessions):
    rng = np.random.default_rng(1)
    x = _x(rng, (3, 8))
    scale = np.ones(8, np.float32)
    # stash_type other than 1 (float32 statistics)
    _stays_on_cpu(make_sessions, models.glue_op("LayerNormalization", [("X", [3, 8]), ("scale", scale)],
                                                stash_type=0), {"X": x})
    # Softmax opset 11 (flattening semantics)
    _stays_on_cpu(make_sessions, models.glue_op("Softmax", [("X", [3, 8])], opset=11), {"X": x})
    # SkipSimplifiedLayerNormalization with the mean / inv_std_var outputs wired
    m = models.glue_op("SkipSimplifiedLayerNormalization", [("X", [1, 3, 8]), ("skip", [1, 3, 8]), ("gamma", scale)],
                       domain="com.microsoft", out_names=["Y", "", "inv"])
    cpu, rc = make_sessions(m, {"threads": 2})
    assert_on_cpu(rc, "glue0")
    # double input
    m = models.glue_op("Sigmoid", [("X", [3, 8])])
    m.graph.input[0].type.tensor_type.elem_type = 11  # DOUBLE
    m.graph.output[0].type.tensor_type.elem_type = 11
    _stays_on_cpu(make_sessions, m, {"X": x.astype(np.float64)})
    # Scale that cannot broadcast to X: ORT's own error, rcpu does not claim it
    m = models.glue_op("SimplifiedLayerNormalization", [("X", [3, 8]), ("scale", np.ones(4, np.float32))])
    cpu, rc = make_sessions(m, {"threads": 2})
    assert_on_cpu(rc, "glue0")


# ------------------------------------------------------------------------------ decoder layer


@pytest.mark.parametrize("acc,tol", [(4, 2e-2), (0, 1e-4)])
def test_decoder_layer(make_sessions, acc, tol):
    rng = np.random.default_rng(2024 + acc)
    model = models.decoder_layer(rng, accuracy_level=acc)
    cpu, rc = make_sessions(model, {"threads": 2})
    all_nodes = {n.name for n in model.graph.node}
    rc_nodes = assigned_to_rcpu(rc)
    assert rc_nodes == all_nodes, f"on rcpu: {sorted(rc_nodes)}"
    for b, s in ((1, 1), (1, 7), (2, 33)):
        feeds = {
            "X": rng.standard_normal((b, s, models.QWEN2_HIDDEN)).astype(np.float32),
            "seqlens_k": np.full((b,), s - 1, np.int32),
            "total_seq_len": np.array(s, np.int32),
        }
        want, got = cpu.run(None, feeds)[0], rc.run(None, feeds)[0]
        assert got.shape == want.shape and np.all(np.isfinite(got))
        e = rel_l2(got, want)
        assert e <= tol, f"B={b} S={s} acc={acc}: rel_l2 {e:.3g} > {tol}"


@pytest.mark.parametrize("acc,tol", [(4, 2e-2), (0, 1e-4)])
def test_decoder_layer_decode_step_with_kv_cache(make_sessions, acc, tol):
    """A decode step as ORT genai's model builder shapes it: GQA with past KV, do_rotary=1 and
    cos/sin cache initializers; batch 2 with different past lengths, then a 1-token prompt."""
    rng = np.random.default_rng(77 + acc)
    model = models.decoder_layer(rng, accuracy_level=acc, kv_cache=True, rotary=True, max_pos=128)
    cpu, rc = make_sessions(model, {"threads": 2})
    assert assigned_to_rcpu(rc) == {n.name for n in model.graph.node}
    kv, h = models.QWEN2_KV_HEADS, models.QWEN2_HEAD_DIM
    for b, past_lens in ((1, [0]), (1, [40]), (2, [17, 63])):
        p = max(past_lens)
        feeds = {
            "X": rng.standard_normal((b, 1, models.QWEN2_HIDDEN)).astype(np.float32),
            "past_k": rng.standard_normal((b, kv, p, h)).astype(np.float32),
            "past_v": rng.standard_normal((b, kv, p, h)).astype(np.float32),
            "seqlens_k": np.array(past_lens, np.int32),
            "total_seq_len": np.array(p + 1, np.int32),
        }
        want, got = cpu.run(None, feeds), rc.run(None, feeds)
        for name, w, g in zip(("Y", "present_k", "present_v"), want, got):
            assert g.shape == w.shape and np.all(np.isfinite(g)), name
            e = rel_l2(g, w)
            assert e <= tol, f"B={b} past={past_lens} acc={acc} {name}: rel_l2 {e:.3g} > {tol}"
