"""com.microsoft.MatMulNBits with bits=8 on rcpu vs ORT's CPU EP.

rcpu runs an 8-bit weight as two 4-bit halves (q = 16 h + l) in one pair call
(`src/kernels/matmul_nbits/bits8.rs`). Model builders write 8-bit MatMulNBits for the lm_head and
some layers (onnxruntime-genai's k_quant_mixed / k_quant_last, `-p int8`, Olive's mixed recipes).

Tolerances, relative L2 of the whole output vs ORT CPU on the same model:
    accuracy_level 0 / 1 (f32 compute):                     <= 1e-4 (ORT itself checked against
                                                               A @ dequant(B) in float64: <= 1e-5)
    accuracy_level 4, default (f16 scales in the pack):     <= 2e-2 (as 4-bit; measured ~5e-4)
    accuracy_level 4, acc4_scales=f32:                      <= 1e-5 (the same int8 A and integer
                                                               dot products as ORT: measured ~3e-7)
Every positive case asserts the node ran on rcpu, and the route ledger names the 8-bit route. Rows of A
with NaN / infinities: test_matmul_nbits.py::test_matmul_nbits_nonfinite_rows_match_ort (bits 4 and 8).
"""

from __future__ import annotations

import itertools
import logging

import numpy as np
import pytest

import models
from conftest import assert_on_rcpu, rel_l2

TOL = {0: 1e-4, 1: 1e-4, 4: 2e-2}
MS = (1, 5, 33)

_FLAGS = list(itertools.product([False, True], [False, True], [0, 1, 4]))  # (zero points, bias, level)
GRID = [
    (bs, k, n, *_FLAGS[(i + j) % len(_FLAGS)])
    for i, (bs, k, n) in enumerate(
        itertools.product([16, 32, 64, 128, 256], [32, 100, 1000], [1, 17, 64])
    )
    for j in (0, 7)
]


def _gid(p):
    bs, k, n, zp, bias, acc = p
    return f"bs{bs}-K{k}-N{n}-{'zp' if zp else 'nozp'}-{'bias' if bias else 'nobias'}-acc{acc}"


def _variants(stats):
    return stats.variants("MatMulNBits")


@pytest.mark.parametrize("bs,k,n,zp,bias,acc", GRID, ids=[_gid(p) for p in GRID])
def test_matmul_nbits8_parity(make_sessions, stats, bs, k, n, zp, bias, acc):
    rng = np.random.default_rng(bs * 7919 + k * 31 + n + 2 * zp + 4 * bias + acc)
    model, w_deq, bias_v = models.matmul_nbits(k, n, bs, rng, zero_points=zp, bias=bias, accuracy_level=acc, bits=8)
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, "mmnb0")
    exact = None
    if acc == 4:
        _, exact = make_sessions(model, {"threads": 2, "acc4_scales": "f32"})
    stats.reset()
    for m in MS:
        a = rng.standard_normal((m, k)).astype(np.float32)
        want = cpu.run(None, {"A": a})[0]
        got = rc.run(None, {"A": a})[0]
        assert got.shape == (m, n) and got.dtype == np.float32 and np.all(np.isfinite(got))
        if acc != 4:
            ref = a.astype(np.float64) @ w_deq.astype(np.float64) + (0 if bias_v is None else bias_v)
            assert rel_l2(want, ref) <= 1e-5, "ORT CPU disagrees with the numpy quantiser (test bug)"
        e = rel_l2(got, want)
        assert e <= TOL[acc], f"M={m}: rel_l2 {e:.3g} > {TOL[acc]}"
        if exact is not None:
            e32 = rel_l2(exact.run(None, {"A": a})[0], want)
            assert e32 <= 1e-5, f"M={m}: acc4_scales=f32 is {e32:.3g} from ORT"
    assert any(v.endswith("-bits8") for v in _variants(stats)), _variants(stats)


def test_matmul_nbits8_unpacked_equals_packed(make_sessions, stats):
    """With no weight cache (weight_cache_mb=0) the weight is split on every call: the same halves and
    kernels as the packed path, so the same bits."""
    rng = np.random.default_rng(8)
    model, _, _ = models.matmul_nbits(1000, 70, 32, rng, zero_points=True, bias=True, accuracy_level=4, bits=8)
    _, packed = make_sessions(model, {"threads": 2})
    _, unpacked = make_sessions(model, {"threads": 2, "weight_cache_mb": 0})
    for m in (1, 7):
        a = rng.standard_normal((m, 1000)).astype(np.float32)
        np.testing.assert_array_equal(unpacked.run(None, {"A": a})[0], packed.run(None, {"A": a})[0])


QGRID = list(itertools.product([True, False], [32, 128], [0, 4]))


@pytest.mark.parametrize("symmetric,bs,acc", QGRID, ids=[f"{'sym' if s else 'asym'}-bs{b}-acc{a}" for s, b, a in QGRID])
def test_ort_quantizer_8bit_models(make_sessions, symmetric, bs, acc):
    """ORT's own quantizer with bits=8 (its packing, its 2-D initializers)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    from onnxruntime.quantization.quant_utils import QuantFormat

    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    rng = np.random.default_rng(bs + 2 * acc + symmetric)
    fm = models.float_matmul_const(300, 96, rng)
    q = MatMulNBitsQuantizer(fm, bits=8, block_size=bs, is_symmetric=symmetric, accuracy_level=acc,
                             quant_format=QuantFormat.QOperator)
    q.process()
    qm = q.model.model
    qm.ir_version = min(qm.ir_version, models.IR_VERSION)
    nb = [nd for nd in qm.graph.node if nd.op_type == "MatMulNBits"]
    assert len(nb) == 1 and any(a.name == "bits" and a.i == 8 for a in nb[0].attribute), qm.graph.node
    cpu, rc = make_sessions(qm, {"threads": 2})
    assert_on_rcpu(rc, nb[0].name)
    for m in MS:
        a = rng.standard_normal((m, 300)).astype(np.float32)
        e = rel_l2(rc.run(None, {"A": a})[0], cpu.run(None, {"A": a})[0])
        assert e <= TOL[acc], f"M={m}: rel_l2 {e:.3g} > {TOL[acc]}"
