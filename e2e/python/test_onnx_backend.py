"""ONNX's own node test cases (onnx.backend.test.case.node.collect_testcases) for the ops rcpu claims.

Each case carries a one-node model and reference input/output tensors. The model runs with rcpu
selected (ORT's CPU EP takes whatever rcpu does not claim) and the outputs are compared with the
references: rtol 1e-4, atol 1e-6. (onnx 1.23.2 stamps every node case with the generic
rtol=1e-3/atol=1e-7; we use the stricter rtol and a floor of 1e-6 on atol; integer outputs must be exact.)

float32 cases must be assigned to rcpu; cases of other element types (int*, uint*, double) must be
assigned to ORT's CPU EP and still give the right answer (mixed partition works); Cast cases of
types numpy cannot hold run with those inputs/outputs widened from/to float32 (`_float_io`), and
casts ORT itself has no CPU kernel for must be refused for the rcpu session too. No case is
skipped. QLinearMatMul
cases with 8-bit data and float32 scales must be assigned to rcpu (float16 scales: ORT's CPU EP).
MatMulNBits is a com.microsoft op and has no ONNX cases; see test_matmul_nbits.py.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.backend.test.case.node import collect_testcases

from conftest import assert_on_cpu, assert_on_rcpu, cpu_session, rcpu_session

RCPU_OPS = (
    "Add", "Sub", "Mul", "Div", "MatMul", "Gemm",
    "LayerNormalization", "Softmax", "Sigmoid", "Gelu", "Relu", "Tanh",
    "QLinearMatMul",
)
# Quantized ops rcpu claims with 8-bit data and float32 scales (their cases are not all-float32).
RCPU_QUANT_OPS = ("QLinearMatMul",)
# Cast: rcpu claims the float32 <-> float16 pairs only (opsets 6-21, saturate at its default).
RCPU_OPS += ("Cast",)
# Reshape: float32 data (its shape input is int64 by definition); alone it stays on ORT (see
# `_expect_rcpu`), beside another rcpu node it runs on rcpu (`test_reshape_cases_beside_a_node`).
RCPU_OPS += ("Reshape",)
# Split (opset 13 on): the same, alone it stays on ORT (`test_split_cases_beside_a_node`).
RCPU_OPS += ("Split",)
RTOL = 1e-4
ATOL = 1e-6


def _cast_opset(model):
    """onnx stamps the Cast cases with its newest opset, which ORT 1.31.1 refuses to load; Cast's
    semantics for the types of opset 21 are unchanged since, so those cases are stamped 21
    (the others 26, ORT's newest)."""
    node = model.graph.node[0]
    if node.op_type != "Cast":
        return model
    newer = {getattr(TensorProto, t, -1) for t in ("FLOAT4E2M1", "FLOAT8E8M0", "INT2", "UINT2")}
    types = {vi.type.tensor_type.elem_type for vi in list(model.graph.input) + list(model.graph.output)}
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = min(o.version, 26 if types & newer else 21)
    return model


def _expect_rcpu(model, elem_types) -> bool:
    """Whether rcpu must claim the case's node: float32 inputs; the quantized ops with 8-bit data
    and float32 scales; Cast only for float32 <-> float16 (output type from `to`) below opset 23;
    never a lone Reshape."""
    node = model.graph.node[0]
    if node.op_type in RCPU_QUANT_OPS:
        return elem_types <= {TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8}
    if node.op_type in ("Reshape", "Split"):
        # rcpu takes a Reshape or a Split only beside its other nodes (alone it would only add a
        # hand-over): a case's lone node stays on ORT. The float32 cases run on rcpu in
        # `test_reshape_cases_beside_a_node` and `test_split_cases_beside_a_node`.
        return False
    if node.op_type != "Cast":
        return elem_types == {TensorProto.FLOAT}
    to = next(a.i for a in node.attribute if a.name == "to")
    sat = next((a.i for a in node.attribute if a.name == "saturate"), 1)
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    src = next(vi.type.tensor_type.elem_type for vi in model.graph.input if vi.name == node.input[0])
    pair = (src, to) in ((TensorProto.FLOAT, TensorProto.FLOAT16), (TensorProto.FLOAT16, TensorProto.FLOAT))
    return pair and sat == 1 and 6 <= opset < 23


def _cases():
    # collect_testcases() runs every case generator of onnx once per process (~20 s) and keeps a
    # module-global list, so it is called once, unfiltered (a per-op filter only works on the
    # first call), and filtered here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        all_cases = collect_testcases()
    out = []
    for c in all_cases:
        if c.kind != "node" or c.model is None or not c.data_sets:
            continue
        nodes = list(c.model.graph.node)
        # Only the plain single-node cases of an rcpu op (no expanded function bodies).
        if len(nodes) != 1 or nodes[0].op_type not in RCPU_OPS or nodes[0].domain not in ("", "ai.onnx"):
            continue
        out.append(c)
    return sorted(out, key=lambda c: c.name)


CASES = _cases()


def test_cases_were_collected():
    names = {c.name for c in CASES}
    for must in ("test_add", "test_sub_bcast", "test_mul", "test_div", "test_matmul_2d", "test_matmul_4d", "test_gemm_all_attributes"):
        assert must in names, f"{must} missing from collected ONNX cases ({len(names)} collected)"


def test_qlinear_matmul_cases_were_collected():
    names = {c.name for c in CASES}
    for must in ("test_qlinearmatmul_2D_uint8_float32", "test_qlinearmatmul_3D_int8_float32"):
        assert must in names, f"{must} missing from collected ONNX cases"


def _input_elem_types(model):
    return {vi.type.tensor_type.elem_type for vi in model.graph.input}


def _with_names(model):
    """Cases leave nodes unnamed; give the node a name so its assignment can be checked."""
    m = type(model)()
    m.CopyFrom(model)
    if not m.graph.node[0].name:
        m.graph.node[0].name = "node0"
    # Stay within what ORT 1.31.1 accepts.
    m.ir_version = min(m.ir_version, 10)
    return m


# Element types numpy (and so onnxruntime's Python `run`) cannot hold: bfloat16, the float8 / float4
# formats and the 4- and 2-bit integers (ml_dtypes arrays are refused: "Numpy_type ... can't be
# converted"). rcpu never claims a Cast that touches one; the cases still run, see `_float_io`.
EXOTIC = {TensorProto.BFLOAT16} | {
    getattr(TensorProto, t)
    for t in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT8E8M0", "FLOAT4E2M1",
              "INT4", "UINT4", "INT2", "UINT2")
    if hasattr(TensorProto, t)
}
NARROW_INTS = {getattr(TensorProto, t) for t in ("INT4", "UINT4", "INT2", "UINT2") if hasattr(TensorProto, t)}
FLOAT8 = {getattr(TensorProto, t) for t in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ")}


def _float_io(model):
    """The case's graph with every exotic-typed graph input fed as float32 through a Cast to that
    type, and every exotic-typed output cast back to float32. Both casts are exact for the case's
    data (its inputs hold values of the exotic type; each exotic type widens to float32 exactly;
    float8 targets take `saturate=0` so that an infinity stays one), the node under test and its
    name are unchanged, and neither added Cast is one rcpu claims (float32 <-> float16 only).
    Returns the new model and {name: original element type} of the widened outputs."""
    m = type(model)()
    m.CopyFrom(model)
    g = m.graph
    added = []
    for vi in g.input:
        t = vi.type.tensor_type
        if t.elem_type not in EXOTIC:
            continue
        inner = vi.name + "__exotic"
        for n in g.node:
            n.input[:] = [inner if i == vi.name else i for i in n.input]
        attrs = [helper.make_attribute("to", t.elem_type)]
        if t.elem_type in FLOAT8:
            attrs.append(helper.make_attribute("saturate", 0))
        cast = helper.make_node("Cast", [vi.name], [inner], name=vi.name + "__to_exotic")
        cast.attribute.extend(attrs)
        added.append(cast)
        t.elem_type = TensorProto.FLOAT
    nodes = added + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    widened = {}
    for vi in g.output:
        t = vi.type.tensor_type
        if t.elem_type not in EXOTIC:
            continue
        inner = vi.name + "__exotic"
        for n in g.node:
            n.output[:] = [inner if o == vi.name else o for o in n.output]
        g.node.append(helper.make_node("Cast", [inner], [vi.name], name=vi.name + "__to_float",
                                       to=TensorProto.FLOAT))
        widened[vi.name] = t.elem_type
        t.elem_type = TensorProto.FLOAT
    return m, widened


def _as_array(x):
    return numpy_helper.to_array(x) if isinstance(x, TensorProto) else x


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_onnx_node_case(rcpu_devices, case):
    model = _cast_opset(_with_names(case.model))
    node_name = model.graph.node[0].name
    elem_types = _input_elem_types(model)
    try:
        cpu_session(model.SerializeToString())
    except Exception as e:  # noqa: BLE001 - ORT's own CPU EP cannot run this case at all
        if "NOT_IMPLEMENTED" not in str(e):
            raise
        # Nothing to compare values with (ORT 1.31.1 has no CPU kernel, e.g. Cast from/to
        # float4e2m1). What rcpu must do: not claim the node either, so that the rcpu session is
        # refused by ORT in the same way (a claimed node would give a session).
        assert not _expect_rcpu(model, elem_types)
        with pytest.raises(Exception, match="NOT_IMPLEMENTED") as refused:
            rcpu_session(model.SerializeToString(), rcpu_devices, {"threads": 2})
        assert node_name in str(refused.value)
        return
    expect_rcpu = _expect_rcpu(model, elem_types)
    widened = {}
    if model.graph.node[0].op_type == "Cast":
        io = {vi.type.tensor_type.elem_type for vi in list(model.graph.input) + list(model.graph.output)}
        if io & EXOTIC:
            # The documented behaviour first, on the case's own graph: rcpu does not claim it.
            assert not expect_rcpu
            assert_on_cpu(rcpu_session(model.SerializeToString(), rcpu_devices, {"threads": 2}), node_name)
            model, widened = _float_io(model)
        case = dataclasses.replace(case, data_sets=[
            ([_as_array(x).astype(np.float32) if _as_array(x).dtype.name in _EXOTIC_NP else _as_array(x)
              for x in ins], [_as_array(y) for y in outs])
            for ins, outs in case.data_sets])
    blob = model.SerializeToString()
    # Widened outputs are checked against ORT's CPU EP on the same graph, and against onnx's
    # reference except for the 4- and 2-bit integers: for out-of-range values ORT 1.31.1 wraps
    # (float -9 -> int4 7) where onnx's reference answers 0, and rcpu's rule is ORT's answer.
    cpu = cpu_session(blob) if widened else None
    sess = rcpu_session(blob, rcpu_devices, {"threads": 2})
    if expect_rcpu:
        assert_on_rcpu(sess, node_name)
    else:
        assert_on_cpu(sess, node_name)
    for inputs, outputs in case.data_sets:
        feeds = {vi.name: np.asarray(x) for vi, x in zip(model.graph.input, inputs)}
        got = sess.run(None, feeds)
        assert len(got) == len(outputs)
        ort_cpu = cpu.run(None, feeds) if cpu else got
        for vi, g, want, cpu_out in zip(model.graph.output, got, outputs, ort_cpu):
            want = np.asarray(want)
            if vi.name in widened:
                # Exact: both sides are the same exotic values widened to float32 (NaN where NaN).
                np.testing.assert_array_equal(g, cpu_out)
                if widened[vi.name] not in NARROW_INTS:
                    np.testing.assert_array_equal(g, want.astype(np.float32))
                continue
            assert g.dtype == want.dtype, f"dtype {g.dtype} != {want.dtype}"
            assert g.shape == want.shape, f"shape {g.shape} != {want.shape}"
            if np.issubdtype(want.dtype, np.integer):
                np.testing.assert_array_equal(g, want)
            else:
                np.testing.assert_allclose(g, want, rtol=min(RTOL, case.rtol), atol=max(ATOL, case.atol))


# numpy dtype names (ml_dtypes) of the exotic element types, as onnx's numpy_helper returns them.
_EXOTIC_NP = {"bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
              "float8_e8m0fnu", "float4_e2m1fn", "int4", "uint4", "int2", "uint2"}


def test_cast_cases_were_collected():
    names = {c.name for c in CASES}
    for must in ("test_cast_FLOAT_to_FLOAT16", "test_cast_FLOAT16_to_FLOAT", "test_castlike_FLOAT_to_FLOAT16_expanded"):
        assert must in names, f"{must} missing from collected ONNX cases"


RESHAPE_CASES = [c for c in CASES if c.model.graph.node[0].op_type == "Reshape"]


@pytest.mark.parametrize("case", RESHAPE_CASES, ids=[c.name for c in RESHAPE_CASES])
def test_reshape_cases_beside_a_node(rcpu_devices, case):
    """ONNX's Reshape cases with a Sigmoid after the Reshape: rcpu takes the pair (one partition whose
    Reshape reads the partition's input, so it copies), and the Sigmoid of the reshaped data equals
    the Sigmoid of the case's reference output."""
    model = _with_names(case.model)
    g = model.graph
    out = g.output[0]
    g.node.append(helper.make_node("Sigmoid", [out.name], ["sig_out"], name="sig0"))
    out.name = "sig_out"
    assert len(RESHAPE_CASES) >= 8
    sess = rcpu_session(model.SerializeToString(), rcpu_devices, {"threads": 2})
    assert_on_rcpu(sess, [g.node[0].name, "sig0"])
    for inputs, outputs in case.data_sets:
        feeds = {vi.name: np.asarray(_as_array(x)) for vi, x in zip(g.input, inputs)}
        got = sess.run(None, feeds)[0]
        want = np.asarray(_as_array(outputs[0]), np.float64)
        assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
        np.testing.assert_allclose(got, 1.0 / (1.0 + np.exp(-want)), rtol=RTOL, atol=ATOL)


SPLIT_CASES = [c for c in CASES if c.model.graph.node[0].op_type == "Split"]


@pytest.mark.parametrize("case", SPLIT_CASES, ids=[c.name for c in SPLIT_CASES])
def test_split_cases_beside_a_node(rcpu_devices, case):
    """ONNX's Split cases (opsets 13 and 18: sizes from the `split` input, from `num_outputs`, equal,
    uneven, zero-size pieces) with a Relu after every piece: rcpu takes the group and each Relu of a
    piece equals the Relu of the case's reference piece exactly (both copy and clamp)."""
    model = _with_names(case.model)
    g = model.graph
    assert len(SPLIT_CASES) >= 14
    for j, out in enumerate(g.output):
        g.node.append(helper.make_node("Relu", [out.name], [f"relu_out{j}"], name=f"relu{j}"))
        out.name = f"relu_out{j}"
    sess = rcpu_session(model.SerializeToString(), rcpu_devices, {"threads": 2})
    assert_on_rcpu(sess, [g.node[0].name] + [f"relu{j}" for j in range(len(g.output))])
    for inputs, outputs in case.data_sets:
        feeds = {vi.name: np.asarray(_as_array(x)) for vi, x in zip(g.input, inputs)}
        for got, want in zip(sess.run(None, feeds), outputs):
            np.testing.assert_array_equal(got, np.maximum(np.asarray(_as_array(want)), 0))

