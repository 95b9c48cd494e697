"""GatherBlockQuantized (com.microsoft, uint8 4- and 8-bit codes, float32 scales) on rcpu against ORT's CPU EP:
bit-identical outputs for the tied-embedding shapes genai models use and odd ones (rows not a multiple of
the block, odd block counts, rank-3 data, negative and out-of-range indices, int32/int64 indices, with
and without zero points), and the attribute combinations rcpu leaves to ORT."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import models
from conftest import assert_on_cpu, assert_on_rcpu


def gbq_model(data, scales, zps, idx_shape, idx_type, attrs, name="gbq0", const=True, out_type=TensorProto.FLOAT):
    ins = ["data", "indices", "scales"] + (["zp"] if zps is not None else [])
    node = helper.make_node("GatherBlockQuantized", ins, ["y"], name=name, domain="com.microsoft", **attrs)
    inits = []
    vis = [helper.make_tensor_value_info("indices", idx_type, idx_shape)]
    scale_type = TensorProto.FLOAT16 if scales.dtype == np.float16 else TensorProto.FLOAT
    arrays = [("data", data, TensorProto.UINT8), ("scales", scales, scale_type)]
    if zps is not None:
        arrays.append(("zp", zps, TensorProto.UINT8))
    for n, a, t in arrays:
        if const:
            inits.append(numpy_helper.from_array(a, n))
        else:
            vis.append(helper.make_tensor_value_info(n, t, ["rows"] + [f"{n}{i}" for i in range(1, a.ndim)]))
    return models._model([node], vis, [helper.make_tensor_value_info("y", out_type, None)], inits, ms_opset=1)


def table(rng, lead, row_bytes, block, with_zp, bits=4):
    per_byte = 8 // bits
    k = row_bytes * per_byte
    blocks = -(-k // block)
    data = rng.integers(0, 256, size=(*lead, row_bytes), dtype=np.uint8)
    scales = rng.uniform(-0.05, 0.05, size=(*lead, blocks)).astype(np.float32)
    zps = rng.integers(0, 256, size=(*lead, -(-blocks // per_byte)), dtype=np.uint8) if with_zp else None
    return data, scales, zps


CASES = [
    # (lead dims, row_bytes, block): tied embedding (vocab x hidden/2), K % block != 0, odd block counts,
    # rank-3 data (several rows per entry)
    ((97, ), 448, 32),
    ((50, ), 20, 16),
    ((33, ), 224, 128),
    ((11, ), 8, 16),
    ((6, 3), 24, 16),
]


@pytest.mark.parametrize("lead,row_bytes,block", CASES, ids=[f"{l}x{r}b{b}" for l, r, b in CASES])
@pytest.mark.parametrize("with_zp", [False, True], ids=["nozp", "zp"])
@pytest.mark.parametrize("idx_type", [TensorProto.INT64, TensorProto.INT32], ids=["i64", "i32"])
@pytest.mark.parametrize("bits", [4, 8])
def test_parity(make_sessions, lead, row_bytes, block, with_zp, idx_type, bits):
    rng = np.random.default_rng(row_bytes * 131 + block + with_zp + bits)
    data, scales, zps = table(rng, lead, row_bytes, block, with_zp, bits)
    n = lead[0]
    attrs = {"block_size": block, "quantize_axis": len(lead), "bits": bits}
    model = gbq_model(data, scales, zps, ["b", "s"], idx_type, attrs)
    cpu, rc = make_sessions(model)
    assert_on_rcpu(rc, "gbq0")
    np_t = np.int64 if idx_type == TensorProto.INT64 else np.int32
    for idx in ([[0, n - 1, 3 % n]], [[-1, -n, n // 2]], [[n, -n - 1, 1]], np.zeros((0, 4)), [[5 % n]]):
        feeds = {"indices": np.asarray(idx, dtype=np_t)}
        want = cpu.run(None, feeds)[0]
        got = rc.run(None, feeds)[0]
        assert got.shape == want.shape
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_runtime_inputs_and_bad_shapes(make_sessions):
    """data/scales as graph inputs: a scales tensor of the wrong shape is an error naming the node."""
    rng = np.random.default_rng(5)
    # (no zero points: ORT's shape inference cannot match symbolic zero-point and scale dims)
    data, scales, _ = table(rng, (9,), 32, 16, False)
    model = gbq_model(data, scales, None, [1, 2], TensorProto.INT64, {"block_size": 16}, const=False)
    cpu, rc = make_sessions(model)
    assert_on_rcpu(rc, "gbq0")
    feeds = {"data": data, "scales": scales, "indices": np.array([[2, 7]], dtype=np.int64)}
    np.testing.assert_array_equal(rc.run(None, feeds)[0], cpu.run(None, feeds)[0])
    bad = dict(feeds, scales=scales[:, :3].copy())
    with pytest.raises(Exception) as cpu_err:
        cpu.run(None, bad)
    with pytest.raises(Exception) as rc_err:
        rc.run(None, bad)
    assert "gbq0" in str(rc_err.value) and "scales" in str(rc_err.value), str(rc_err.value)
    assert cpu_err.value is not None


@pytest.mark.parametrize("case", ["f16_scales"])
def test_left_to_ort(make_sessions, case):
    """Forms ORT's CPU EP runs and rcpu does not claim: they stay on ORT, with ORT's answer."""
    rng = np.random.default_rng(9)
    data, scales, _ = table(rng, (8,), 16, 16, False)
    attrs = {"block_size": 16}
    scales = scales.astype(np.float16)
    out_type = TensorProto.FLOAT16
    model = gbq_model(data, scales, None, [2], TensorProto.INT64, attrs, out_type=out_type)
    cpu, rc = make_sessions(model)
    assert_on_cpu(rc, "gbq0")
    feeds = {"indices": np.array([1, 6], dtype=np.int64)}
    np.testing.assert_array_equal(rc.run(None, feeds)[0], cpu.run(None, feeds)[0])
