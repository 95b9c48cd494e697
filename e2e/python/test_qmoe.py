"""com.microsoft.QMoE (mixture of experts with 2/4/8-bit integer experts) on rcpu vs ORT 1.31.1's CPU EP
and vs a float64 numpy reference (`qmoe_models.qmoe_reference`, whose docstring lists ORT's semantics as
pinned here by running the wheel).

rcpu claims float32 activations, quant_type "int", 4/8-bit experts, block-wise float32 scales
(block_size a power of two >= 16 dividing H and I), optional zero points / biases / router_weights,
no fc3, swiglu with swiglu_fusion=1 or silu/gelu/relu/identity with swiglu_fusion=0, accuracy levels
0, 1 (f32 products) and 4 (int8 activations). Every positive case asserts the node ran on rcpu and that
rcpu's route ledger counted QMoE calls.

Tolerances (relative L2 of the whole output):
    ORT vs f64 reference, where ORT computes in f32 (4-bit at level != 4, row-wise scales, 2-bit,
    K % block != 0):                                                        <= 1e-5 (measured ~3e-7)
    ORT vs f64 reference, where ORT uses int8 activations (4-bit block-wise at level 4, 8-bit
    block-wise at EVERY level):                                             <= 5e-2 (measured ~1e-2)
    rcpu vs f64 reference at level 0/1 (4- and 8-bit: rcpu keeps f32 products):      <= 1e-5
    rcpu vs ORT at level 0/1 where ORT is f32:                                       <= 1e-4
    rcpu at level 4 (int8 activations):      rcpu's error <= 2 x ORT's own error + 1e-3 (both vs f64)
Adversarial forms: if ORT answers, rcpu answers the same (NaN / inf in the same places, the rows ORT
leaves all-zero all-zero) or leaves the node to ORT; if ORT errors, rcpu errors (naming the node when it
claimed it) or leaves the node to ORT; never a crash (the huge-shape cases run in a child process).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
import zlib

import numpy as np
import onnx
import pytest
from onnx import helper

import qmoe_models as qm
from conftest import (EP_NAME, assert_error_names_node, assert_on_cpu, assert_on_rcpu, assignment, cpu_session,
                      rcpu_session, rel_l2)

NODE = "qmoe0"
OPTS = {"threads": 2}
REF_TIGHT = 1e-5  # an f32 computation vs the f64 reference
ORT_TIGHT = 1e-4  # rcpu vs ORT where both compute in f32
ORT_INT8_MAX = 5e-2  # sanity bound on ORT's own int8-activation error (measured ~1e-2)

GPT_OSS = dict(act="swiglu", alpha=1.702, beta=1.0, limit=7.0, gain=4.0)
ACTS = [
    ("gptoss", GPT_OSS),
    ("swiglu", dict(act="swiglu")),
    ("silu", dict(act="silu")),
    ("gelu", dict(act="gelu")),
    ("relu", dict(act="relu")),
    ("identity", dict(act="identity")),
]
TOKENS2 = (0, 1, 3, 17, 64)
TOKENS3 = ((0, 3), (1, 1), (1, 3), (1, 17), (4, 16))


def ort_int8(spec: qm.QMoESpec) -> bool:
    """Whether ORT 1.31.1's CPU kernel runs some projection with int8 activations (MLAS QNBit CompInt8):
    block-wise 4-bit at accuracy_level 4 and block-wise 8-bit at every level, for a projection whose K
    is a multiple of block_size."""
    if spec.block is None or spec.bits == 2:
        return False
    if spec.bits == 4 and spec.accuracy_level != 4:
        return False
    return spec.H % spec.block == 0 or spec.I % spec.block == 0


def claimed(sess) -> bool:
    return NODE in assignment(sess).get(EP_NAME, set())


def reference(case, f):
    return qm.qmoe_reference(case, f["input"], f["router_probs"], f.get("router_weights"))


def check_parity(case, cpu, rc, f, rcpu_int8: bool | None = None, label=""):
    """ORT vs the f64 reference (tight where ORT is f32, loose where it is int8), rcpu vs the reference
    (tight at level 0/1, <= 2x ORT's error + 1e-3 at level 4) and rcpu vs ORT where both are f32."""
    spec = case.spec
    if rcpu_int8 is None:
        rcpu_int8 = spec.accuracy_level == 4
    want = cpu.run(None, f)[0]
    got = rc.run(None, f)[0]
    ref = reference(case, f)
    assert got.shape == want.shape == ref.shape == f["input"].shape, (got.shape, want.shape, ref.shape)
    assert got.dtype == np.float32 and np.all(np.isfinite(got)), f"{label}: rcpu output not finite"
    e_ort = rel_l2(want, ref)
    if ort_int8(spec):
        assert e_ort <= ORT_INT8_MAX, f"{label}: ORT (int8) is {e_ort:.3g} from the reference (test bug?)"
    else:
        assert e_ort <= REF_TIGHT, f"{label}: ORT is {e_ort:.3g} from the f64 reference (test bug)"
    e_rc = rel_l2(got, ref)
    if rcpu_int8:
        bound = 2 * e_ort + 1e-3
        assert e_rc <= bound, f"{label}: rcpu is {e_rc:.3g} from the reference, ORT {e_ort:.3g} (bound {bound:.3g})"
    else:
        assert e_rc <= REF_TIGHT, f"{label}: rcpu is {e_rc:.3g} from the f64 reference (ORT: {e_ort:.3g})"
        if not ort_int8(spec):
            e = rel_l2(got, want)
            assert e <= ORT_TIGHT, f"{label}: rcpu is {e:.3g} from ORT"
    return want, got


def same_nonfinite(got, want, tol, label=""):
    """NaN and +-inf in the same places, all-zero rows of `want` all-zero in `got`, the finite rest
    within `tol` (rel L2)."""
    assert got.shape == want.shape, (got.shape, want.shape)
    assert np.array_equal(np.isnan(got), np.isnan(want)), (
        f"{label}: NaN at different places: rows got {np.flatnonzero(np.isnan(got).reshape(got.shape[0], -1).any(1))} "
        f"want {np.flatnonzero(np.isnan(want).reshape(want.shape[0], -1).any(1))}")
    assert np.array_equal(np.isposinf(got), np.isposinf(want)), f"{label}: +inf at different places"
    assert np.array_equal(np.isneginf(got), np.isneginf(want)), f"{label}: -inf at different places"
    h = want.shape[-1]
    zero_rows = ~want.reshape(-1, h).any(axis=1)
    assert not got.reshape(-1, h)[zero_rows].any(), f"{label}: rows ORT leaves zero are not zero in rcpu"
    fin = np.isfinite(want)
    g, w = np.where(fin, got, 0).reshape(-1, h), np.where(fin, want, 0).reshape(-1, h)
    e = rel_l2(g, w)
    assert e <= tol, f"{label}: finite part {e:.3g} > {tol}"
    for r in range(w.shape[0]):  # every token on its own too (a tiny row must not hide in the total)
        er = rel_l2(g[r], w[r])
        assert er <= tol, f"{label}: token {r}: {er:.3g} > {tol}"


def assert_ran_on_rcpu(stats):
    rows = [r for r in stats.ledger() if r["op"] == "QMoE" and r["calls"] > 0]
    assert rows, f"rcpu's ledger has no QMoE calls: {stats.ledger()}"


def token_list(spec):
    return TOKENS2 if spec.rank == 2 else TOKENS3


# ---------------------------------------------------------------------------------------------------
# the parity grid: bits x block x zero points x biases, activations / (E, k) / level / rank cycling

EK = [(4, 2), (1, 1), (32, 4), (4, 4), (32, 1), (4, 1)]
LEVELS = [0, 4, 1]
GRID = []
for i, (bits, block, zp, bias) in enumerate(itertools.product([4, 8], [16, 32, 64, 128], [False, True], [False, True])):
    act_name, act = ACTS[i % len(ACTS)]
    e, k = EK[(i // 2) % len(EK)]
    GRID.append(dict(bits=bits, block=block, zp=zp, bias=bias, act_name=act_name, act=act, E=e, k=k,
                     acc=LEVELS[i % 3], rank=2 + (i // 3) % 2, h_mul=1 + (i % 2), i_mul=2 - (i // 4) % 2))


def _gid(p):
    return (f"b{p['bits']}-bs{p['block']}-{'zp' if p['zp'] else 'nozp'}-{'bias' if p['bias'] else 'nobias'}-"
            f"{p['act_name']}-E{p['E']}k{p['k']}-acc{p['acc']}-{p['rank']}d")


@pytest.mark.parametrize("p", GRID, ids=[_gid(p) for p in GRID])
def test_parity_grid(make_sessions, stats, p):
    block = p["block"]
    spec = qm.QMoESpec(H=block * p["h_mul"] * (2 if block == 16 else 1), I=block * p["i_mul"], E=p["E"], k=p["k"],
                       bits=p["bits"], block=block, zp=p["zp"], fc1_bias=p["bias"], fc2_bias=p["bias"],
                       accuracy_level=p["acc"], rank=p["rank"], seed=len(_gid(p)) * 7 + block + p["bits"], **p["act"])
    case = qm.build(spec)
    cpu, rc = make_sessions(case.bytes, OPTS)
    assert_on_rcpu(rc, NODE)
    rng = np.random.default_rng(spec.seed)
    stats.reset()
    for t in token_list(spec):
        check_parity(case, cpu, rc, qm.feeds(case, t, rng), label=f"tokens={t}")
    assert_ran_on_rcpu(stats)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("act_name,act", ACTS, ids=[a for a, _ in ACTS])
def test_activations(make_sessions, stats, act_name, act, bits):
    """Every activation at level 0 with both biases; gain 4 so gpt-oss's limit 7 clamps often."""
    spec = qm.QMoESpec(H=64, I=64, E=4, k=2, bits=bits, block=32, zp=bits == 8, fc1_bias=True, fc2_bias=True,
                       seed=bits * 13 + len(act_name), **dict({"gain": 4.0}, **act))
    case = qm.build(spec)
    cpu, rc = make_sessions(case.bytes, OPTS)
    assert_on_rcpu(rc, NODE)
    rng = np.random.default_rng(spec.seed)
    stats.reset()
    for t in (1, 5, 33):
        check_parity(case, cpu, rc, qm.feeds(case, t, rng), label=f"T={t}")
    assert_ran_on_rcpu(stats)


@pytest.mark.parametrize("e,k", [(1, 1), (4, 1), (4, 2), (4, 4), (32, 1), (32, 2), (32, 4), (32, 32)],
                         ids=lambda v: str(v))
def test_routing_k_and_experts(make_sessions, stats, e, k):
    spec = qm.QMoESpec(H=64, I=32, E=e, k=k, bits=4, block=32, zp=True, fc2_bias=True, seed=e * 100 + k)
    case = qm.build(spec)
    cpu, rc = make_sessions(case.bytes, OPTS)
    assert_on_rcpu(rc, NODE)
    rng = np.random.default_rng(spec.seed)
    stats.reset()
    for t in TOKENS2:
        check_parity(case, cpu, rc, qm.feeds(case, t, rng, logit_scale=3.0), label=f"T={t}")
    assert_ran_on_rcpu(stats)


@pytest.mark.parametrize("bits", [4, 8])
def test_odd_sizes(make_sessions, bits):
    """H=48, I=80 with block 16 (3 and 5 blocks a row)."""
    spec = qm.QMoESpec(H=48, I=80, E=4, k=2, bits=bits, block=16, zp=True, fc1_bias=True, fc2_bias=True,
                       seed=48 + bits, **GPT_OSS)
    case = qm.build(spec)
    cpu, rc = make_sessions(case.bytes, OPTS)
    assert_on_rcpu(rc, NODE)
    rng = np.random.default_rng(spec.seed)
    for t in (1, 3, 17):
        check_parity(case, cpu, rc, qm.feeds(case, t, rng), label=f"T={t}")


@pytest.mark.parametrize("bits", [4, 8])
def test_float16_scales(make_sessions, stats, bits):
    """float16 scales, as the model builder writes them for CPU QMoE (float32 activations): claimed,
    widened exactly, the same answers as ORT."""
    spec = qm.QMoESpec(H=64, I=48, E=6, k=2, bits=bits, block=16, zp=bits == 8, fc1_bias=True, fc2_bias=True,
                       scales_f16=True, seed=160 + bits, **GPT_OSS)
    case = qm.build(spec)
    cpu, rc = make_sessions(case.bytes, OPTS)
    assert_on_rcpu(rc, NODE)
    rng = np.random.default_rng(spec.seed)
    stats.reset()
    for t in (1, 5, 40):
        check_parity(case, cpu, rc, qm.feeds(case, t, rng), label=f"T={t}")
    assert_ran_on_rcpu(stats)


@pytest.mark.parametrize("budget_mb", [0, 1])
@pytest.mark.parametrize("f16", [False, True])
def test_weight_budget_declines(make_sessions, stats, budget_mb, f16):
    """A weight-cache budget that holds no expert (0 MiB) or some of them (1 MiB: every fc1, 80 KiB
    packed each, and a few fc2 of 40 KiB, of 12 experts): the declined experts compute from ORT's
    tensors (their scales kept as f32 copies, float16 ones widened) with the same answers, and the
    ledger shows that path ran."""
    spec = qm.QMoESpec(H=256, I=256, E=12, k=2, bits=4, block=32, zp=True, fc1_bias=True, fc2_bias=True,
                       scales_f16=f16, seed=170 + budget_mb + 2 * f16, **GPT_OSS)
    case = qm.build(spec)
    cpu, rc = make_sessions(case.bytes, {**OPTS, "weight_cache_mb": budget_mb})
    assert_on_rcpu(rc, NODE)
    rng = np.random.default_rng(spec.seed)
    stats.reset()
    for t in (1, 3, 40):
        check_parity(case, cpu, rc, qm.feeds(case, t, rng), label=f"T={t}")
    assert "experts-unpacked" in stats.variants("QMoE"), stats.variants("QMoE")


def test_gpt_oss_size(make_sessions, stats):
    """gpt-oss-20b's expert shape (H = I = 2880, block 32, SwiGLU alpha 1.702 / beta 1 / limit 7, biases),
    4 experts of it, decode and a short prefill."""
    spec = qm.QMoESpec(H=2880, I=2880, E=4, k=2, bits=4, block=32, fc1_bias=True, fc2_bias=True, seed=2880, **GPT_OSS)
    case = qm.build(spec)
    cpu, rc = make_sessions(case.bytes, OPTS)
    assert_on_rcpu(rc, NODE)
    rng = np.random.default_rng(1)
    stats.reset()
    for t in (1, 17):
        check_parity(case, cpu, rc, qm.feeds(case, t, rng), label=f"T={t}")
    assert_ran_on_rcpu(stats)


@pytest.mark.parametrize("bits", [4, 8])
def test_one_block_per_row(make_sessions, bits):
    """H = I = block_size: one scale and one zero point a row, scales [E, N, 1] and zero points
    [E, N, 1] (ORT 1.31.1 reads them block-wise)."""
    spec = qm.QMoESpec(H=32, I=32, E=4, k=2, bits=bits, block=32, zp=True, fc1_bias=True, seed=321 + bits)
    case = qm.build(spec)
    cpu, rc = make_sessions(case.bytes, OPTS)
    assert_on_rcpu(rc, NODE)
    rng = np.random.default_rng(spec.seed)
    for t in (1, 9):
        check_parity(case, cpu, rc, qm.feeds(case, t, rng), label=f"T={t}")


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("which", ["fc1", "fc2"])
def test_zero_points_on_one_projection(make_sessions, which, bits):
    spec = qm.QMoESpec(H=64, I=64, E=4, k=2, bits=bits, block=16, zp=which, fc2_bias=True, seed=17 + bits,
                       **GPT_OSS)
    case = qm.build(spec)
    cpu, rc = make_sessions(case.bytes, OPTS)
    assert_on_rcpu(rc, NODE)
    rng = np.random.default_rng(spec.seed)
    for t in (1, 9):
        check_parity(case, cpu, rc, qm.feeds(case, t, rng), label=f"T={t}")


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("zp", [False, True], ids=["nozp", "zp"])
def test_accuracy_level4(make_sessions, bits, zp):
    """Level 4 on a wider hidden size: rcpu's int8 error stays within 2x ORT's own + 1e-3, and at level 0
    the same weights are exact for rcpu (8-bit: ORT is int8 at level 0 too)."""
    spec = qm.QMoESpec(H=512, I=256, E=8, k=2, bits=bits, block=32, zp=zp, fc1_bias=True, fc2_bias=True,
                       accuracy_level=4, seed=400 + bits + zp, **GPT_OSS)
    case = qm.build(spec)
    cpu, rc = make_sessions(case.bytes, OPTS)
    assert_on_rcpu(rc, NODE)
    case0 = qm.build(spec.replace(accuracy_level=0))
    cpu0, rc0 = make_sessions(case0.bytes, OPTS)
    assert_on_rcpu(rc0, NODE)
    rng = np.random.default_rng(spec.seed)
    for t in (1, 17, 64):
        f = qm.feeds(case, t, rng)
        check_parity(case, cpu, rc, f, label=f"level4 T={t}")
        check_parity(case0, cpu0, rc0, f, label=f"level0 T={t}")


# ---------------------------------------------------------------------------------------------------
# routing edge cases

NAN, INF = np.nan, np.inf
TIES_AND_INF = np.array([
    [1, 1, 1, 1, 1, 1, 1, 1],  # all tied: the largest indices win
    [0, 3, 3, 0, 3, 0, 0, 0],
    [5, 5, 0, 0, 0, 0, 0, 0],
    [2, 2, 2, 1, 1, 1, 3, 3],
    [0, 0, 0, 0, 0, 0, 0, -0.0],  # 0.0 == -0.0: a tie
    [-0.0, 0, 0, 0, 0, 0, 0, 0],
    [INF, 1, 2, 3, 4, 5, 6, 7],  # +inf first: exp(inf - inf) = NaN weights, the token gets zeros
    [1, 2, INF, 3, INF, 4, 5, 6],  # two +inf: a tie between them, zeros again
    [-INF, 1, 2, 3, 4, 5, 6, 7],
    [-INF] * 8,  # all -inf: exp(-inf - -inf) = NaN, zeros
    [1, -INF, -INF, -INF, -INF, -INF, -INF, -INF],  # -inf routes dropped (weight 0)
    [1e30, -1e30, 3e38, -3e38, 0, 1, 2, 3],
    [3.0, 3.0 - 18.42, 3.0 - 18.43, -50, -60, -70, -80, -90],  # softmax weights around the 1e-8 cut
], np.float32)
NAN_ROWS = qm.NAN_LOGITS


def _random_logits(rng, n, e, nan=True):
    rp = rng.standard_normal((n, e)).astype(np.float32)
    if nan:
        rp[rng.random((n, e)) < 0.25] = NAN
    rp[rng.random((n, e)) < 0.1] = INF
    rp[rng.random((n, e)) < 0.1] = -INF
    rp[rng.random((n, e)) < 0.2] = 1.0
    return rp


def _logits_case(make_sessions, e, k, seed, router_weights=False):
    spec = qm.QMoESpec(H=32, I=32, E=e, k=k, bits=4, block=16, fc2_bias=True, router_weights=router_weights, seed=seed)
    case = qm.build(spec)
    cpu, rc = make_sessions(case.bytes, OPTS)
    assert_on_rcpu(rc, NODE)
    return case, cpu, rc, np.random.default_rng(seed)


def _check_logits(case, cpu, rc, rng, logits):
    f = qm.feeds(case, logits.shape[0], rng, router=logits)
    want = cpu.run(None, f)[0]
    ref = reference(case, f)
    same_nonfinite(want, ref.astype(np.float32), REF_TIGHT, "ORT vs reference (test bug)")
    got = rc.run(None, f)[0]
    same_nonfinite(got, want, ORT_TIGHT, "rcpu vs ORT")
    assert rel_l2(got, ref) <= REF_TIGHT


@pytest.mark.parametrize("k", [1, 2, 3, 8])
def test_router_logits_ties_and_infinities(make_sessions, k):
    """Exact ties (the larger expert index first), +-inf and huge logits, weights at the 1e-8 cut: ORT's
    answer (tokens whose first logit is +inf or whose k logits are all -inf get zeros) and rcpu's agree."""
    case, cpu, rc, rng = _logits_case(make_sessions, 8, k, 77 + k)
    _check_logits(case, cpu, rc, rng, np.concatenate([TIES_AND_INF, _random_logits(rng, 24, 8, nan=False)]))


@pytest.mark.parametrize("e,k", [(8, 1), (8, 2), (8, 8), (2, 1), (5, 3), (17, 11), (32, 4), (32, 31)],
                         ids=lambda v: str(v))
def test_router_logits_nan(make_sessions, e, k):
    """NaN logits: ORT answers (no error). A NaN is `unordered` in its std::partial_sort, so which experts
    win is what libstdc++'s heap_select + sort_heap make of it (`qm.ort_topk` reproduces it exactly), and
    a token whose top k holds the NaN gets an all-zero row. rcpu must give that answer (or leave the
    node to ORT), not an error."""
    case, cpu, rc, rng = _logits_case(make_sessions, e, k, e * 31 + k)
    rows = NAN_ROWS if e == 8 else np.zeros((0, e), np.float32)
    _check_logits(case, cpu, rc, rng, np.concatenate([rows, _random_logits(rng, 32, e)]))


@pytest.mark.parametrize("normalize", [0, 1])
def test_router_weights(make_sessions, stats, normalize):
    """router_weights (input 14) select nothing, they weight: gathered at router_probs' top-k, normalized
    to sum 1 only with normalize_routing_weights=1; weights not > 1e-8 drop the route."""
    spec = qm.QMoESpec(H=64, I=32, E=6, k=3, bits=4, block=32, zp=True, fc1_bias=True, fc2_bias=True,
                       router_weights=True, normalize=normalize, seed=600 + normalize, **GPT_OSS)
    case = qm.build(spec)
    cpu, rc = make_sessions(case.bytes, OPTS)
    assert_on_rcpu(rc, NODE)
    rng = np.random.default_rng(spec.seed)
    stats.reset()
    for t in (0, 1, 7, 20):
        check_parity(case, cpu, rc, qm.feeds(case, t, rng), label=f"T={t}")
    # zero-sum, negative, NaN and inf weights, weights at the 1e-8 cut (routes 0, 1, 2 chosen for those)
    n = 10
    rw = rng.uniform(0, 1, (n, 6)).astype(np.float32)
    logits = rng.standard_normal((n, 6)).astype(np.float32)
    rw[0] = 0
    rw[1] = -rw[1]
    rw[2, :3] = -rw[2, :3]
    rw[3, 2] = NAN
    rw[4, 4] = INF
    rw[5] = -INF
    logits[6:] = [3, 2, 1, 0, 0, 0]
    rw[6] = [1e-8, 1e-8, 1e-8, 0.5, 0.5, 0.5]  # not > 1e-8: all three dropped without normalization
    rw[7] = [1.5e-8, 1e-8, 1e-9, 0.5, 0.5, 0.5]  # only expert 0 kept (weight 1.5e-8)
    rw[8] = [1e-9, 2e-9, 4e-9, 0.5, 0.5, 0.5]  # normalized: 1/7, 2/7, 4/7
    rw[9] = [0.25, -0.25, 1.0, 0.5, 0.5, 0.5]  # normalized by 1.0 (negative weight dropped)
    f = qm.feeds(case, n, rng, router=logits, router_weights=rw)
    want = cpu.run(None, f)[0]
    same_nonfinite(want, reference(case, f).astype(np.float32), REF_TIGHT, "ORT vs reference (test bug)")
    same_nonfinite(rc.run(None, f)[0], want, ORT_TIGHT, "rcpu vs ORT")
    assert_ran_on_rcpu(stats)


def test_unpicked_and_popular_experts(make_sessions):
    """Experts 3 and 5 never win a route; expert 0 is in every token's top 2."""
    spec = qm.QMoESpec(H=64, I=64, E=8, k=2, bits=8, block=64, zp=True, fc1_bias=True, fc2_bias=True, seed=808)
    case = qm.build(spec)
    cpu, rc = make_sessions(case.bytes, OPTS)
    assert_on_rcpu(rc, NODE)
    rng = np.random.default_rng(808)
    for t in (1, 4, 40):
        logits = rng.standard_normal((t, 8)).astype(np.float32)
        logits[:, [3, 5]] = -30.0
        logits[:, 0] = 10.0
        check_parity(case, cpu, rc, qm.feeds(case, t, rng, router=logits), label=f"T={t}")


@pytest.mark.parametrize("act_name,act", ACTS, ids=[a for a, _ in ACTS])
def test_input_nonfinite(make_sessions, act_name, act):
    """A NaN / +inf / -inf element in a token (every fc1 output of it non-finite: relu maps NaN to 0,
    swiglu's limit clamps +inf) and +-1e30 tokens (f32 overflow inside the experts): rcpu's NaN / inf
    where ORT's are; the single-element rows also against the f64 reference."""
    spec = qm.QMoESpec(H=64, I=32, E=4, k=2, bits=4, block=32, fc2_bias=True, seed=900 + len(act_name), **act)
    case = qm.build(spec)
    cpu, rc = make_sessions(case.bytes, OPTS)
    assert_on_rcpu(rc, NODE)
    rng = np.random.default_rng(spec.seed)
    f = qm.feeds(case, 7, rng)
    x = f["input"]
    x[0, 3], x[1, 5], x[2, 7] = NAN, INF, -INF
    want = cpu.run(None, f)[0]
    got = rc.run(None, f)[0]
    same_nonfinite(got, want, ORT_TIGHT, "rcpu vs ORT")
    same_nonfinite(want[:3], reference(case, f)[:3].astype(np.float32), REF_TIGHT, "ORT vs reference (test bug)")
    x[3, :], x[4, :] = 1e30, -1e30
    same_nonfinite(rc.run(None, f)[0], cpu.run(None, f)[0], ORT_TIGHT, "rcpu vs ORT, +-1e30 tokens")


SWIGLU_EDGES = {
    "limit-nan": dict(limit=float("nan")),  # std::min / std::clamp with NaN bounds: no clamping
    "limit-0": dict(limit=0.0),  # every activation 0: the output is exactly 0
    "limit-1e-3": dict(limit=1e-3, gain=4.0),
    "limit-inf": dict(limit=float("inf")),
    "alpha-0": dict(alpha=0.0),
    "alpha-neg-beta-neg": dict(alpha=-1.702, beta=-3.0, limit=5.0),
}


@pytest.mark.parametrize("name", list(SWIGLU_EDGES))
def test_swiglu_attribute_edges(make_sessions, name):
    """Odd swiglu attribute values ORT computes with: rcpu matches them or leaves the node to ORT."""
    spec = qm.QMoESpec(fc1_bias=True, fc2_bias=name != "limit-0", seed=zlib.crc32(name.encode()) % 1000,
                       **SWIGLU_EDGES[name])
    case = qm.build(spec)
    cpu, rc = make_sessions(case.bytes, OPTS)
    rng = np.random.default_rng(spec.seed)
    for t in (1, 9):
        f = qm.feeds(case, t, rng)
        if claimed(rc):
            check_parity(case, cpu, rc, f, label=f"{name} T={t}")
        else:
            assert rel_l2(rc.run(None, f)[0], cpu.run(None, f)[0]) <= 1e-6


def test_activation_params_ignored_without_swiglu(make_sessions):
    """activation_alpha / activation_beta / swiglu_limit change nothing for silu/gelu/relu/identity."""
    rng = np.random.default_rng(10)
    for act in ("silu", "gelu", "relu", "identity"):
        case = qm.build(qm.QMoESpec(act=act, alpha=3.0, beta=2.0, limit=0.5, fc1_bias=True, seed=11))
        cpu, rc = make_sessions(case.bytes, OPTS)
        assert_on_rcpu(rc, NODE)
        check_parity(case, cpu, rc, qm.feeds(case, 9, rng), label=act)


_ARM_CHILD = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {here!r})
    import numpy as np, onnxruntime as ort
    import qmoe_models as qm
    ort.set_default_logger_severity(4)
    spec = qm.QMoESpec(**json.loads({spec!r}))
    case = qm.build(spec)
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    row = {{}}
    try:
        if {arm!r} == "ort":
            s = ort.InferenceSession(case.bytes, so, providers=["CPUExecutionProvider"])
        else:
            ort.register_execution_provider_library("rcpu", {plugin!r})
            so.add_provider_for_devices([d for d in ort.get_ep_devices() if d.ep_name == "RcpuExecutionProvider"],
                                        {{"threads": "2"}})
            s = ort.InferenceSession(case.bytes, so, enable_fallback=0)
        row["claimed"] = any(sg.ep_name == "RcpuExecutionProvider" for sg in s.get_provider_graph_assignment_info())
        f = qm.feeds(case, {tokens!r}, np.random.default_rng(spec.seed))
        row["out"] = s.run(None, f)[0].tolist()
    except Exception as e:
        row["error"] = str(e)[:500]
    print("ROW " + json.dumps(row), flush=True)
""")


def _run_arm_in_child(plugin_path, spec_kw: dict, tokens: int, arm: str):
    here = os.path.dirname(os.path.abspath(__file__))
    code = _ARM_CHILD.format(here=here, spec=json.dumps(spec_kw), tokens=tokens, arm=arm, plugin=str(plugin_path))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    rows = [json.loads(line[4:]) for line in proc.stdout.splitlines() if line.startswith("ROW ")]
    return proc.returncode, (rows[0] if rows else None), proc.stderr[-1500:]


@pytest.mark.parametrize("limit", [-1.0, float("-inf")], ids=["minus1", "minus_inf"])
def test_swiglu_negative_limit(plugin_path, limit):
    """swiglu_limit < 0: ORT 1.31.1 (built with _GLIBCXX_ASSERTIONS) aborts the process in
    std::clamp(lin, -limit, limit) ("Assertion '!(__hi < __lo)' failed") as soon as a token is routed.
    rcpu must not crash: a clean error, or (claimed) the answer of the clamp expression libstdc++
    evaluates, (v < lo) ? lo : (hi < v) ? hi : v, which the f64 reference follows. Child processes."""
    spec_kw = dict(limit=limit, fc1_bias=True, seed=12)
    rc_ort, _, _ = _run_arm_in_child(plugin_path, spec_kw, 5, "ort")
    code, row, err = _run_arm_in_child(plugin_path, spec_kw, 5, "rcpu")
    assert code == 0 and row is not None, f"the rcpu session crashed (rc {code}; ORT's rc {rc_ort}): {err}"
    if "error" in row:
        return
    assert row["claimed"], "rcpu left the node to ORT's kernel, and it ran?"
    case = qm.build(qm.QMoESpec(**spec_kw))
    f = qm.feeds(case, 5, np.random.default_rng(12))
    same_nonfinite(np.asarray(row["out"], np.float32), reference(case, f).astype(np.float32), REF_TIGHT, "rcpu vs reference")


# ---------------------------------------------------------------------------------------------------
# forms rcpu may leave to ORT (then the answer is ORT's), forms it must leave, errors


def _set_attrs(model: onnx.ModelProto, **attrs) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    node = m.graph.node[0]
    kept = [a for a in node.attribute if a.name not in attrs]
    del node.attribute[:]
    node.attribute.extend(kept + [helper.make_attribute(k, v) for k, v in attrs.items()])
    return m


DECLINE_OR_MATCH = {
    # ORT computes these; rcpu may take them (then it must match) or leave them to ORT
    "rowwise-4bit-zp": dict(block=None, zp=True),
    "rowwise-8bit-zp": dict(block=None, zp=True, bits=8),
    "rowwise-4bit-acc4": dict(block=None, accuracy_level=4),
    "partial-block-4bit": dict(H=48, I=80, block=32, zp=True),
    "partial-block-8bit": dict(H=48, I=80, block=32, zp=True, bits=8),
    "partial-block-acc4": dict(H=48, I=80, block=64, accuracy_level=4),
    "bits2": dict(bits=2, block=32, zp=True),
    "bits2-rowwise": dict(bits=2, block=None),
    "weights_prepacked0": dict(extra_attrs={"weights_prepacked": 0}),
    "weights_prepacked1": dict(extra_attrs={"weights_prepacked": 1}),
    "quant_type-int": dict(extra_attrs={"quant_type": "int"}),
    "quant_type-bogus": dict(extra_attrs={"quant_type": "bogus"}),  # ORT 1.31.1 runs it as "int"
    "sparse_mixer-k2": dict(sparse_mixer=1),
    "normalize-without-router_weights": dict(normalize=1),
    "acc2": dict(accuracy_level=2),
    "acc3": dict(accuracy_level=3),
    "acc5": dict(accuracy_level=5),
    "acc-1": dict(accuracy_level=-1),
    "block256": dict(H=256, I=256, block=256),
}


@pytest.mark.parametrize("name", list(DECLINE_OR_MATCH))
def test_decline_or_match(make_sessions, name):
    spec = qm.QMoESpec(E=4, k=2, fc1_bias=True, seed=zlib.crc32(name.encode()) % 1000, **DECLINE_OR_MATCH[name])
    case = qm.build(spec)
    cpu, rc = make_sessions(case.bytes, OPTS)
    rng = np.random.default_rng(spec.seed)
    if claimed(rc):
        for t in (0, 1, 9):
            check_parity(case, cpu, rc, qm.feeds(case, t, rng), label=f"{name} T={t}")
    else:
        assert_on_cpu(rc, NODE)
        for t in (1, 9):
            f = qm.feeds(case, t, rng)
            want = cpu.run(None, f)[0]
            assert rel_l2(rc.run(None, f)[0], want) <= 1e-6
            assert rel_l2(want, reference(case, f)) <= (ORT_INT8_MAX if ort_int8(spec) else REF_TIGHT)


SESSION_ERRORS = {
    # ORT's CPU kernel refuses these when the session is created
    "swiglu_fusion2": (dict(), dict(swiglu_fusion=2)),  # "CPU QMoE only supports interleaved SwiGLU format"
    "swiglu-fusion0": (dict(), dict(swiglu_fusion=0)),
    "k0": (dict(), dict(k=0)),  # "MoE attribute 'k' must be >= 1"
    "sparse_mixer-k3": (dict(k=3), dict(use_sparse_mixer=1)),  # "Sparse mixer only supports k=2"
    "block24": (dict(), dict(block_size=24)),  # "block_size must be a power of 2."
    "block8": (dict(), dict(block_size=8)),  # "block_size must be >= 16 when provided."
    "bits3": (dict(), dict(expert_weight_bits=3)),
    "activation-bogus": (dict(), dict(activation_type="bogus")),  # "Unsupported MoE activation type: bogus"
    "fc1-bits-override-swiglu": (dict(), dict(fc1_expert_weight_bits=8)),  # fused SwiGLU needs fc1 bits == fc3 bits
}


@pytest.mark.parametrize("name", list(SESSION_ERRORS))
def test_session_errors(rcpu_devices, name):
    """ORT refuses these at session creation; so does the rcpu session (rcpu refusing, or leaving the node
    to ORT's kernel, which refuses)."""
    spec_kw, attrs = SESSION_ERRORS[name]
    model = _set_attrs(qm.build(qm.QMoESpec(**spec_kw)).model, **attrs).SerializeToString()
    with pytest.raises(Exception):
        cpu_session(model)
    with pytest.raises(Exception):
        rcpu_session(model, rcpu_devices, OPTS)


def test_fc3_left_to_ort(make_sessions):
    """fc3 weights present: ORT's CPU kernel fails at run time (NOT_IMPLEMENTED); rcpu leaves the node."""
    case = qm.build(qm.QMoESpec(fc3=True))
    cpu, rc = make_sessions(case.bytes, OPTS)
    assert_on_cpu(rc, NODE)
    f = qm.feeds(case, 3, np.random.default_rng(3))
    with pytest.raises(Exception, match="FC3 gating is not yet implemented"):
        cpu.run(None, f)
    with pytest.raises(Exception, match="FC3 gating is not yet implemented"):
        rc.run(None, f)


def test_non_swiglu_with_fusion_left_to_ort(make_sessions):
    """silu with swiglu_fusion=1 and [E, I, H/2] fc1 weights passes ORT's shape check, but its kernel
    then reads 2*I rows (out of bounds: NaN / garbage that changes from run to run). rcpu must leave the
    node (it is not run here). With [E, 2I, H/2] weights ORT fails the shape check at run time; rcpu
    errors or leaves it too."""
    model = _set_attrs(qm.build(qm.QMoESpec(act="silu")).model, swiglu_fusion=1)
    _, rc = make_sessions(model, OPTS)
    assert_on_cpu(rc, NODE)
    case = qm.build(qm.QMoESpec(act="relu", fusion=1))
    cpu, rc = make_sessions(case.bytes, OPTS)
    _expect_run_error(cpu, rc, qm.feeds(case, 3, np.random.default_rng(4)), "is expected to have shape")


def test_mixed_bit_widths(make_sessions):
    """fc1 8-bit, fc2 4-bit (fc*_expert_weight_bits): ORT 1.31.1 fails at run time ("Mixed-width QMoE
    execution is not yet implemented on CPU"); rcpu errors or leaves the node."""
    spec = qm.QMoESpec(act="silu", bits=4, block=32)
    c8 = qm.build(spec.replace(bits=8))
    c4 = qm.build(spec)
    m = onnx.ModelProto()
    m.CopyFrom(c4.model)
    for init in m.graph.initializer:
        if init.name in ("fc1_w", "fc1_s"):
            init.CopyFrom(next(i for i in c8.model.graph.initializer if i.name == init.name))
    m = _set_attrs(m, fc1_expert_weight_bits=8, fc2_expert_weight_bits=4)
    cpu, rc = make_sessions(m, OPTS)
    _expect_run_error(cpu, rc, qm.feeds(c4, 3, np.random.default_rng(5)), "Mixed-width")


def _expect_run_error(cpu, rc, feeds, ort_match):
    with pytest.raises(Exception, match=ort_match):
        cpu.run(None, feeds)
    with pytest.raises(Exception) as err:
        rc.run(None, feeds)
    if claimed(rc):
        assert_error_names_node(err.value, NODE)


def _symbolic_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """input, router_probs and router_weights with every dim symbolic, so bad feeds reach the kernel."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in m.graph.input:
        for j, d in enumerate(vi.type.tensor_type.shape.dim):
            d.Clear()
            d.dim_param = f"{vi.name}_d{j}"
    return m


@pytest.mark.parametrize("name", ["k_gt_E", "router_rows", "router_experts", "router_weights_rows", "hidden"])
def test_run_time_errors(make_sessions, name):
    spec = qm.QMoESpec(E=4, k=5 if name == "k_gt_E" else 2, router_weights=name == "router_weights_rows")
    case = qm.build(spec)
    cpu, rc = make_sessions(_symbolic_inputs(case.model), OPTS)
    rng = np.random.default_rng(6)
    f = qm.feeds(case, 3, rng)
    if name == "k_gt_E":
        match = "must be <= num_experts"
    elif name == "router_rows":
        f["router_probs"] = f["router_probs"][:2].copy()
        match = "router_probs"
    elif name == "router_experts":
        f["router_probs"] = rng.standard_normal((3, 5)).astype(np.float32)
        match = "fc1_experts_weights"
    elif name == "router_weights_rows":
        f["router_weights"] = f["router_weights"][:2].copy()
        match = "router_weights"
    else:
        f["input"] = rng.standard_normal((3, 32)).astype(np.float32)
        match = "expected to have shape"
    _expect_run_error(cpu, rc, f, match)


# ---------------------------------------------------------------------------------------------------
# a huge expert count, in a child process (a crash must not take the suite down)

_HUGE_CHILD = textwrap.dedent("""
    import json, os, sys, tempfile
    sys.path.insert(0, {here!r})
    import numpy as np, onnx, onnxruntime as ort
    from onnx import helper, TensorProto
    import qmoe_models as qm
    ort.set_default_logger_severity(4)
    ort.register_execution_provider_library("rcpu", {plugin!r})
    devs = [d for d in ort.get_ep_devices() if d.ep_name == "RcpuExecutionProvider"]

    def sessions(model_bytes):
        out = {{}}
        for arm in ("ort", "rcpu"):
            so = ort.SessionOptions()
            so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            try:
                if arm == "ort":
                    s = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
                else:
                    so.add_provider_for_devices(devs, {{"threads": "2"}})
                    s = ort.InferenceSession(model_bytes, so, enable_fallback=0)
                out[arm] = s
            except Exception as e:
                out[arm] = "error: " + str(e)[:300]
        return out

    def record(name, model, feeds=None):
        ss = sessions(model.SerializeToString())
        row = {{"case": name}}
        for arm, s in ss.items():
            if isinstance(s, str):
                row[arm + "_session"] = s
                continue
            row[arm + "_session"] = "ok"
            if arm == "rcpu":
                row["rcpu_claimed"] = any(sg.ep_name == "RcpuExecutionProvider" and
                                          any(n.name == "qmoe0" for n in sg.get_nodes())
                                          for sg in s.get_provider_graph_assignment_info())
            if feeds is not None:
                try:
                    row[arm + "_run"] = s.run(None, feeds)[0].tolist()
                except Exception as e:
                    row[arm + "_run"] = "error: " + str(e)[:300]
        print(json.dumps(row), flush=True)

    HUGE = 2 ** 40
    case = qm.build(qm.QMoESpec())
    feeds = qm.feeds(case, 3, np.random.default_rng(0))

    # 1. an embedded initializer declaring [2**40, 64, 32] with 4 experts' bytes
    m = onnx.ModelProto(); m.CopyFrom(case.model)
    for i in m.graph.initializer:
        if i.name == "fc1_w":
            i.dims[0] = HUGE
    record("embedded_initializer", m, feeds)

    # 2. the same through external data (a small file)
    d = tempfile.mkdtemp()
    m = onnx.ModelProto(); m.CopyFrom(case.model)
    for i in m.graph.initializer:
        if i.name == "fc1_w":
            with open(os.path.join(d, "w.bin"), "wb") as fh:
                fh.write(i.raw_data)
            i.ClearField("raw_data")
            i.data_location = TensorProto.EXTERNAL
            i.external_data.add(key="location", value="w.bin")
            i.dims[0] = HUGE
    path = os.path.join(d, "m.onnx")
    onnx.save(m, path)
    ss = {{}}
    for arm in ("ort", "rcpu"):
        so = ort.SessionOptions()
        try:
            if arm == "ort":
                ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            else:
                so.add_provider_for_devices(devs, {{"threads": "2"}})
                ort.InferenceSession(path, so, enable_fallback=0)
            ss[arm + "_session"] = "ok"
        except Exception as e:
            ss[arm + "_session"] = "error: " + str(e)[:300]
    print(json.dumps(dict(case="external_initializer", **ss)), flush=True)

    # 3. router_probs declared [R, 2**40] (the weights hold 4 experts)
    m = onnx.ModelProto(); m.CopyFrom(case.model)
    m.graph.input[1].type.tensor_type.shape.dim[1].dim_value = HUGE
    record("router_declared_huge", m, feeds)

    # 4. every expert tensor a graph input declared with 2**40 experts (nothing to feed: session only)
    m = onnx.ModelProto(); m.CopyFrom(case.model)
    inits = {{i.name: i for i in m.graph.initializer}}
    for name in ("fc1_w", "fc1_s", "fc2_w", "fc2_s"):
        t = inits[name]
        m.graph.input.append(helper.make_tensor_value_info(name, t.data_type, [HUGE] + list(t.dims[1:])))
    keep = [i for i in m.graph.initializer if i.name not in ("fc1_w", "fc1_s", "fc2_w", "fc2_s")]
    del m.graph.initializer[:]
    m.graph.initializer.extend(keep)
    m.graph.input[1].type.tensor_type.shape.dim[1].dim_value = HUGE
    record("weights_inputs_huge", m)

    # 5. zero-element initializers with 2**40 experts (I = 0: nothing to allocate for the weights), no tokens
    raw = lambda name, dims, dt: helper.make_tensor(name, dt, dims, vals=b"", raw=True)
    inits = [raw("fc1_w", [HUGE, 0, 32], TensorProto.UINT8), raw("fc1_s", [HUGE, 0, 2], TensorProto.FLOAT),
             raw("fc2_w", [HUGE, 64, 0], TensorProto.UINT8), raw("fc2_s", [HUGE, 64, 0], TensorProto.FLOAT)]
    node = helper.make_node("QMoE", ["input", "router_probs", "fc1_w", "fc1_s", "", "fc2_w", "fc2_s"], ["output"],
                            name="qmoe0", domain="com.microsoft", k=1, expert_weight_bits=4, block_size=32,
                            activation_type="swiglu", swiglu_fusion=1)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("input", 1, ["T", 64]),
                                        helper.make_tensor_value_info("router_probs", 1, ["T", HUGE])],
                          [helper.make_tensor_value_info("output", 1, ["T", 64])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)],
                          ir_version=10)
    record("zero_size_huge_experts", m, {{"input": np.zeros((0, 64), np.float32),
                                          "router_probs": np.zeros((0, HUGE), np.float32)}})
    print("DONE", flush=True)
""")


def test_huge_expert_count(plugin_path):
    here = os.path.dirname(os.path.abspath(__file__))
    code = _HUGE_CHILD.format(here=here, plugin=str(plugin_path))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "DONE" in proc.stdout, (
        f"child died (rc {proc.returncode}):\nstdout {proc.stdout[-2000:]}\nstderr {proc.stderr[-2000:]}")
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 5, rows
    for row in rows:
        name = row["case"]
        if row["ort_session"] != "ok":
            assert row["rcpu_session"] != "ok", f"{name}: ORT refuses the model, rcpu accepts it: {row}"
            continue
        if row["rcpu_session"] != "ok":
            # rcpu may refuse a model ORT loads only if it cannot run anyway (checked by the run below)
            assert "ort_run" not in row or str(row["ort_run"]).startswith("error"), f"{name}: {row}"
            continue
        if "ort_run" in row:
            if str(row["ort_run"]).startswith("error"):
                assert str(row["rcpu_run"]).startswith("error"), f"{name}: ORT errors, rcpu answers: {row}"
            else:
                assert not str(row["rcpu_run"]).startswith("error"), f"{name}: {row}"
                assert np.allclose(row["rcpu_run"], row["ort_run"], rtol=1e-4, atol=1e-5), name
    by = {r["case"]: r for r in rows}
    # expert tensors that are not initializers are never claimed
    if by["weights_inputs_huge"]["rcpu_session"] == "ok":
        assert by["weights_inputs_huge"].get("rcpu_claimed") is False, by["weights_inputs_huge"]
