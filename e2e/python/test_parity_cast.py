"""Cast float32 <-> float16 on rcpu against ORT's CPU EP: bit-exact (NaN payloads included) over
all 65536 float16 bit patterns, float32 specials (NaN payloads, infinities, overflow to inf,
halfway cases, subnormal results, float32 subnormals), random float32 bit patterns, odd and
empty shapes, opsets 6-21; the other type pairs stay on ORT.

The bit-exact reference is ORT's CPU EP on one intra-op thread: ORT converts 16-element blocks
in blocks (8 to f16, 16 to f32) with the hardware instructions and the tail in scalar code, whose NaN
encodings differ,
and with more threads it splits large tensors at thread-dependent points (each piece with its own
tail). Against the default (multi-threaded) ORT session the values, infinities and NaN positions
must still be identical."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from conftest import assert_on_cpu, assert_on_rcpu

F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16


def cast_model(src, dst, shape, opset=21, **attrs):
    node = helper.make_node("Cast", ["X"], ["Y"], name="cast0", to=dst, **attrs)
    g = helper.make_graph([node], "cast", [helper.make_tensor_value_info("X", src, shape)],
                          [helper.make_tensor_value_info("Y", dst, shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10 if opset >= 21 else 8
    return m


def _ort_one_thread(model):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _run_both(make_sessions, model, x):
    """rcpu's output and ORT's on one thread; also checks values against the default ORT session."""
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, "cast0")
    got, want = rc.run(None, {"X": x})[0], _ort_one_thread(model).run(None, {"X": x})[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    multi = cpu.run(None, {"X": x})[0]
    assert np.array_equal(np.isnan(got), np.isnan(multi)), "NaN positions differ from multi-threaded ORT"
    ok = ~np.isnan(multi)
    _same_bits(got[ok], multi[ok], "non-NaN values vs multi-threaded ORT")
    return got, want


def _same_bits(got, want, what):
    g = got.view(np.uint16 if got.dtype == np.float16 else np.uint32).ravel()
    w = want.view(g.dtype).ravel()
    bad = np.flatnonzero(g != w)
    assert bad.size == 0, f"{what}: {bad.size} differ, e.g. at {bad[:4]}: got {[hex(v) for v in g[bad[:4]]]} " \
                          f"want {[hex(v) for v in w[bad[:4]]]}"


def _f32_specials():
    bits = [0x7FC00000, 0x7F800001, 0x7FFFFFFF, 0xFFC00000, 0xFF800001, 0x7FA00000, 0x7F802000, 0x7F801FFF,
            0x7F800000, 0xFF800000, 0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000,
            0x33000000, 0x33000001, 0x32FFFFFF, 0xB3000000, 0x387FE000, 0x387FF000, 0x38800000, 0x33C00000,
            0x477FF000, 0x477FEFFF, 0x477FE000, 0xC77FF000, 0x7F7FFFFF, 0x3F801000, 0x3F803000, 0x3F800FFF]
    # Every halfway point between consecutive float16 values (normals and subnormals), and 1 ulp around it.
    h = np.arange(0, 0x7C00, dtype=np.uint16)
    lo = h.view(np.float16).astype(np.float64)
    hi = (h + 1).view(np.float16).astype(np.float64)
    mid = ((lo + hi) / 2).astype(np.float32).view(np.uint32)
    b = np.concatenate([np.array(bits, np.uint32), mid, mid + 1, mid - 1])
    b = np.concatenate([b, b | 0x80000000])
    return b.view(np.float32)


@pytest.mark.parametrize("opset", [6, 13, 19, 21])
def test_f16_to_f32_all_values(make_sessions, opset):
    x = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    got, want = _run_both(make_sessions, cast_model(F16, F32, [65536], opset), x)
    _same_bits(got, want, f"f16->f32 opset {opset}")


@pytest.mark.parametrize("opset", [6, 13, 19, 21])
def test_f32_to_f16_specials_and_all_f16_values(make_sessions, opset):
    every_f16 = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    x = np.concatenate([_f32_specials(), every_f16])
    got, want = _run_both(make_sessions, cast_model(F32, F16, [x.size], opset), x)
    _same_bits(got, want, f"f32->f16 opset {opset}")


def test_f32_to_f16_random_bits(make_sessions):
    rng = np.random.default_rng(7)
    x = rng.integers(0, 2**32, size=1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32)
    got, want = _run_both(make_sessions, cast_model(F32, F16, [x.size]), x)
    _same_bits(got, want, "f32->f16 random bits")


@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (15,), (17,), (3, 33), (2, 0, 5), (5, 4097)], ids=str)
def test_odd_shapes_both_ways(make_sessions, shape):
    rng = np.random.default_rng(sum(shape) + len(shape))
    x = (rng.standard_normal(shape) * 1000).astype(np.float32)
    got, want = _run_both(make_sessions, cast_model(F32, F16, list(shape)), x)
    _same_bits(got, want, f"f32->f16 {shape}")
    h = rng.integers(0, 65536, size=shape, dtype=np.uint32).astype(np.uint16).view(np.float16)
    got, want = _run_both(make_sessions, cast_model(F16, F32, list(shape)), h)
    _same_bits(got, want, f"f16->f32 {shape}")


def test_saturate_on_f16_is_left_to_ort(make_sessions):
    """ORT's kernel refuses `saturate` on a non-float8 target at creation; rcpu declines the node
    so the session fails the same way rather than silently accepting it."""
    with pytest.raises(Exception, match="saturate"):
        make_sessions(cast_model(F32, F16, [4], 21, saturate=0), {"threads": 2})


@pytest.mark.parametrize("src,dst", [(F32, F32), (F16, F16), (F32, TensorProto.DOUBLE), (TensorProto.INT32, F32),
                                     (F32, TensorProto.BFLOAT16), (F32, TensorProto.FLOAT8E4M3FN)])
def test_other_pairs_stay_on_cpu(make_sessions, src, dst):
    model = cast_model(src, dst, [4])
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_cpu(rc, "cast0")
    if dst in (TensorProto.BFLOAT16, TensorProto.FLOAT8E4M3FN):
        return  # numpy cannot read these outputs; the assignment is the point
    np_t = {F32: np.float32, F16: np.float16, TensorProto.INT32: np.int32}[src]
    x = np.array([1.5, -2.0, 3.25, 0.0]).astype(np_t)
    for g, w in zip(rc.run(None, {"X": x}), cpu.run(None, {"X": x})):
        np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8))


def test_opset_23_stays_on_cpu(make_sessions):
    cpu, rc = make_sessions(cast_model(F32, F16, [4], 23), {"threads": 2})
    assert_on_cpu(rc, "cast0")
