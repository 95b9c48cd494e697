"""Adversarial pass over every op rcpu claims (issue 13): several hundred small models with degenerate
dims, shape mismatches, odd or invalid attributes, missing optional inputs, initializers vs feeds,
dtype mismatches, non-finite and empty feeds, int64 extremes and odd session options.

Each case runs with ORT's CPU EP (the reference) and with rcpu selected, in a CHILD process (a batch
of cases per child; when a child dies or hangs, the case it was running is rerun alone to confirm,
and the batch goes on in a fresh child). Classes:

- crash: the child died on a signal / abort while running the case alone;
- hang: the case alone ran past its timeout;
- wrong: both computed and the outputs differ beyond the op's tolerance (the ones the parity tests
  use), or NaN / infinity positions differ;
- refusal: ORT computed, rcpu failed;
- accepts: ORT refused at run time, rcpu computed (accepting what ORT rejects);
- unnamed: rcpu's own error message does not name the node.

Cases where ORT 1.31.1 itself misbehaves carry an `expect` (numpy reference outputs) that replaces
ORT's answer. QMoE's cases (`gen_qmoe`, issue 53) build their models with qmoe_models.py; where ORT's
8-bit experts use int8 activations below level 4, its float64 reference is the `expect`.
`python adversarial.py` prints a summary; test_adversarial.py asserts no findings.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import models
import qmoe_models as qm

F32, F16, I32, I64, U8, I8 = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT32, TensorProto.INT64,
                              TensorProto.UINT8, TensorProto.INT8)
NP2ONNX = {np.dtype(np.float32): F32, np.dtype(np.float16): F16, np.dtype(np.int32): I32,
           np.dtype(np.int64): I64, np.dtype(np.uint8): U8, np.dtype(np.int8): I8,
           np.dtype(np.float64): TensorProto.DOUBLE, np.dtype(np.bool_): TensorProto.BOOL}
NODE = "n0"

# Tolerances of the parity tests, by op: ("l2", max rel L2) or ("close", rtol, atol). Exact ops use atol 0.
TOLS = {
    "MatMul": ("l2", 1e-4), "Gemm": ("l2", 1e-4), "MatMulNBits": ("l2", 1e-4), "MatMulNBits4": ("l2", 2e-2),
    "QLinearMatMul": ("close", 0, 1), "GroupQueryAttention": ("l2", 1e-5), "RotaryEmbedding": ("close", 1e-5, 1e-6),
    "LayerNormalization": ("close", 1e-4, 1e-5), "SimplifiedLayerNormalization": ("close", 1e-4, 1e-5),
    "SkipSimplifiedLayerNormalization": ("close", 1e-4, 1e-5), "SkipLayerNormalization": ("close", 1e-4, 1e-5),
    "Softmax": ("close", 1e-5, 1e-6),
    "Add": ("close", 1e-6, 0), "Sub": ("close", 1e-6, 0), "Mul": ("close", 1e-6, 0), "Div": ("close", 1e-6, 0),
    "Sigmoid": ("close", 1e-5, 1e-6), "Gelu": ("close", 1e-5, 1e-5), "FastGelu": ("close", 1e-5, 1e-5),
    "Relu": ("close", 0.0, 0.0), "Tanh": ("close", 1e-6, 1e-7), "Pow": ("close", 0.0, 0.0),
    "Cast": ("close", 0, 0),
    # The Reshape cases end in a Sigmoid (`gen_reshape`): its tolerance.
    "Reshape": ("close", 1e-5, 1e-6),
    # The Split cases wrap it in a Sigmoid and Relus (`split_model`): the Sigmoid's tolerance.
    "Split": ("close", 1e-5, 1e-6), "GatherBlockQuantized": ("close", 0, 0), "options": ("l2", 1e-4),
    # QMoE with f32 products on both sides; "QMoE4": int8 activations on one side or both (level 4, and
    # ORT's 8-bit experts at every level), as MatMulNBits4.
    "QMoE": ("l2", 1e-4), "QMoE4": ("l2", 2e-2),
}


@dataclass
class Case:
    name: str
    op: str
    model: bytes
    feeds: dict
    options: dict = field(default_factory=dict)
    tol: tuple = ()
    expect: list | None = None  # numpy reference replacing ORT's answer (ORT misbehaves)
    skip_ort: bool = False  # ORT's CPU EP crashes the process on this case (`expect` holds the answer)
    refuse: str = ""  # rcpu must refuse with this in its message (ORT returns garbage or the input is invalid)
    declined: str = ""  # why rcpu leaves this node to ORT (then ORT's answer is not rcpu's to judge)
    # Output index -> mask of the elements compared (the rest: left undefined by ORT, or exact values
    # at a rounding edge that either side of is right).
    defined: dict = field(default_factory=dict)
    why: str = ""
    # Feed name -> byte offset: the feed is passed as a view that many bytes past a 64-byte aligned
    # start (ORT hands numpy's buffer over in place), in both arms.
    misalign: dict = field(default_factory=dict)
    # Outputs bound through IO binding (both arms): per output (shape, dtype, input name or None): a
    # fresh buffer `bind_offset` bytes past an aligned start, or the named input's own buffer (a
    # present that shares its past).
    bind: list | None = None
    bind_offset: int = 0
    # The reference arm runs rcpu with these provider options instead of ORT's CPU EP (two rcpu
    # configurations that must agree, e.g. fuse=on against fuse=off).
    ref_options: dict | None = None


def vi(name, shape, elem=F32):
    return helper.make_tensor_value_info(name, elem, shape)


def sym(name, arr_or_rank):
    """Symbolic dims of the input's rank (so a mismatched feed reaches the kernel)."""
    rank = arr_or_rank if isinstance(arr_or_rank, int) else np.asarray(arr_or_rank).ndim
    return [f"{name}_{i}" for i in range(rank)]


def node_model(op, inputs, attrs=None, domain="", opset=17, n_out=1, decl="sym", out_elem=None, out_names=None):
    """One node named n0. `inputs`: list of (name, value, kind): kind "feed" (graph input, value = the
    feed array), "init" (initializer), or name "" for an omitted optional input. Returns (model bytes,
    feeds)."""
    ins, vis, inits, feeds = [], [], [], {}
    for nm, val, kind in inputs:
        if nm == "":
            ins.append("")
            continue
        ins.append(nm)
        arr = np.asarray(val)
        if kind == "init":
            inits.append(numpy_helper.from_array(arr, nm))
        else:
            shape = list(arr.shape) if decl == "static" else (None if decl == "none" else sym(nm, arr))
            vis.append(vi(nm, shape, NP2ONNX[arr.dtype]))
            feeds[nm] = arr
    outs = list(out_names) if out_names else [f"Y{i}" for i in range(n_out)]
    node = helper.make_node(op, ins, outs, name=NODE, domain=domain or None, **(attrs or {}))
    first = next((np.asarray(v) for _, v, _ in inputs if _ != "" and v is not None), None)
    oe = out_elem if out_elem is not None else (NP2ONNX.get(first.dtype, F32) if first is not None else F32)
    ms = 1 if domain == "com.microsoft" else None
    m = models._model([node], vis, [vi(o, None, oe) for o in outs if o], inits, opset=opset, ms_opset=ms)
    return m.SerializeToString(), feeds


def off_by(a, k):
    """A copy of `a` as a view `k` bytes past a 64-byte aligned start (numpy allows such views; ORT
    reads and writes them in place)."""
    a = np.ascontiguousarray(a)
    raw = np.zeros(a.nbytes + 64 + k, np.uint8)
    at = (-raw.ctypes.data) % 64 + k
    v = raw[at: at + a.nbytes].view(a.dtype).reshape(a.shape)
    v[...] = a
    return v


def rn(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def specials(rng, *shape):
    x = rn(rng, *shape)
    flat = x.reshape(-1)
    if flat.size >= 4:
        idx = rng.choice(flat.size, size=min(4, flat.size), replace=False)
        flat[idx] = np.array([np.nan, np.inf, -np.inf, 1e30], np.float32)[: len(idx)]
    return x


# ------------------------------------------------------------------------------------------- generators


def gen_matmul(rng):
    out = []
    shapes = [([3, 4], [4, 5]), ([0, 4], [4, 5]), ([3, 0], [0, 5]), ([3, 4], [4, 0]), ([4], [4, 5]), ([3, 4], [4]),
              ([4], [4]), ([2, 1, 3, 4], [5, 4, 6]), ([1, 3, 4], [2, 4, 5]), ([3, 4], [5, 6]), ([2, 3, 4], [3, 4, 5]),
              ([1, 1, 1], [1, 1, 1]), ([7, 1], [1, 9]), ([2, 0, 3, 4], [1, 4, 2]), ([0], [0]), ([0], [0, 3]),
              ([1, 2049], [2049, 3]), ([33, 17], [17, 1]), ([3, 4], [2, 4, 5])]
    for i, (sa, sb) in enumerate(shapes):
        a, b = rn(rng, *sa), rn(rng, *sb)
        for kind in ("feed", "init"):
            m, f = node_model("MatMul", [("A", a, "feed"), ("B", b, kind)])
            out.append(Case(f"matmul/{sa}x{sb}/{kind}", "MatMul", m, f))
    a = specials(rng, 5, 8)
    for kind in ("feed", "init"):
        m, f = node_model("MatMul", [("A", a, "feed"), ("B", specials(rng, 8, 6), kind)])
        out.append(Case(f"matmul/nonfinite/{kind}", "MatMul", m, f))
    # f16 where f32 (rcpu must leave it to ORT or refuse cleanly)
    with np.errstate(over="ignore"):
        a16 = a.astype(np.float16)  # 1e30 becomes inf
    m, f = node_model("MatMul", [("A", a16, "feed"), ("B", rn(rng, 8, 6).astype(np.float16), "init")])
    out.append(Case("matmul/f16", "MatMul", m, f))
    # feed shape differs from the declared static shape (ORT refuses the feed)
    m, _ = node_model("MatMul", [("A", rn(rng, 3, 4), "feed"), ("B", rn(rng, 4, 5), "init")], decl="static")
    out.append(Case("matmul/feed-vs-static-decl", "MatMul", m, {"A": rn(rng, 3, 5)}))
    return out


def gen_gemm(rng):
    out = []
    m_, k_, n_ = 4, 6, 5
    for ta in (0, 1):
        for tb in (0, 1):
            a = rn(rng, *((k_, m_) if ta else (m_, k_)))
            b = rn(rng, *((n_, k_) if tb else (k_, n_)))
            for cs in (None, [], [n_], [m_, 1], [1, n_], [m_, n_], [1], [m_], [n_, m_]):
                c = None if cs is None else rn(rng, *cs)
                for kind in ("feed", "init"):
                    if kind == "init" and cs not in (None, [n_], [m_, n_], [m_]):
                        continue
                    ins = [("A", a, "feed"), ("B", b, kind)] + ([("C", c, kind)] if c is not None else [])
                    mdl, f = node_model("Gemm", ins, dict(transA=ta, transB=tb, alpha=0.5, beta=2.0))
                    out.append(Case(f"gemm/ta{ta}tb{tb}/c{cs}/{kind}", "Gemm", mdl, f))
    a, b, c = rn(rng, m_, k_), rn(rng, k_, n_), rn(rng, m_, n_)
    for alpha, beta in ((0.0, 0.0), (float("nan"), 1.0), (1.0, float("nan")), (float("inf"), 0.0), (0.0, 1.0),
                        (-1.0, -1.0), (1e30, 1e30)):
        mdl, f = node_model("Gemm", [("A", a, "feed"), ("B", b, "init"), ("C", c, "feed")], dict(alpha=alpha, beta=beta))
        out.append(Case(f"gemm/alpha{alpha}/beta{beta}", "Gemm", mdl, f))
    for sa, sb in (([0, k_], [k_, n_]), ([m_, 0], [0, n_]), ([m_, k_], [k_, 0]), ([m_, k_], [k_ + 1, n_]),
                   ([k_], [k_, n_]), ([2, m_, k_], [k_, n_]), ([1, 1], [1, 1])):
        mdl, f = node_model("Gemm", [("A", rn(rng, *sa), "feed"), ("B", rn(rng, *sb), "feed")])
        out.append(Case(f"gemm/shape{sa}x{sb}", "Gemm", mdl, f))
    mdl, f = node_model("Gemm", [("A", specials(rng, m_, k_), "feed"), ("B", specials(rng, k_, n_), "init"),
                                 ("C", specials(rng, m_, n_), "feed")], dict(beta=0.0))
    out.append(Case("gemm/nonfinite/beta0", "Gemm", mdl, f))
    return out


def _nbits_inputs(rng, k, n, bs, bits=4, zp=False, zp_float=False):
    kb = -(-k // bs)
    if bits == 4:
        w = rn(rng, k, n)
        b, scales, zpp, _ = models.quantize_nbits4(w, bs, zp, rng)
    else:
        b = rng.integers(0, 256, size=(n, kb, bs * bits // 8), dtype=np.uint8)
        scales = rng.uniform(0.01, 0.1, size=n * kb).astype(np.float32)
        zpp = rng.integers(0, 256, size=n * -(-kb * bits // 8), dtype=np.uint8) if zp else None
    if zp_float and zp:
        zpp = rng.uniform(0, 15, size=n * kb).astype(np.float32)
    return b, scales, zpp


def nbits_case(rng, name, k, n, bs, m=3, bits=4, acc=0, zp=False, bias=False, attrs=None, b=None, scales=None,
               zpp=None, bias_v=None, a=None, kinds=("init", "init", "init", "init"), zp_float=False, decl="sym"):
    bb, ss, zz = _nbits_inputs(rng, k, n, bs, 4 if bits not in (2, 3, 4, 5, 6, 7, 8) else bits, zp, zp_float)
    b = bb if b is None else b
    scales = ss if scales is None else scales
    zpp = zz if zpp is None else zpp
    if bias and bias_v is None:
        bias_v = rn(rng, n)
    a = rn(rng, m, k) if a is None else a
    ins = [("A", a, "feed"), ("B", b, kinds[0]), ("scales", scales, kinds[1])]
    ins.append(("zero_points", zpp, kinds[2]) if zp else ("", None, None))
    ins.append(("", None, None))
    if bias:
        ins.append(("bias", bias_v, kinds[3]))
    else:
        ins = ins[:3] + ([ins[3]] if zp else [])
    at = dict(K=k, N=n, bits=bits, block_size=bs, accuracy_level=acc)
    at.update(attrs or {})
    at = {kk: v for kk, v in at.items() if v is not None}
    mdl, f = node_model("MatMulNBits", ins, at, domain="com.microsoft", decl=decl)
    return Case(f"nbits/{name}", "MatMulNBits4" if acc == 4 else "MatMulNBits", mdl, f)


def _nbits_ref64(c: Case) -> np.ndarray:
    """A @ dequant(B) in float64 (no zero points, no bias), rounded to f32 once."""
    with np.errstate(over="ignore"):
        return _nbits_exact(c).astype(np.float32)


def _near_f32_max(x: np.ndarray, rel: float) -> np.ndarray:
    """Where the exact values lie within `rel` of f32's largest finite magnitude: a result within
    that tolerance may round to either side of it (finite, or infinite)."""
    mx = float(np.finfo(np.float32).max)
    return np.abs(np.abs(x) - mx) <= rel * mx


def _nbits_exact(c: Case) -> np.ndarray:
    """A @ dequant(B) in float64 (no zero points, no bias)."""
    m = onnx.load_from_string(c.model)
    init = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    at = {a.name: helper.get_attribute_value(a) for a in m.graph.node[0].attribute}
    b, sc, k = init["B"], init["scales"].astype(np.float64), at["K"]
    n, kb, _ = b.shape
    q = np.stack([b & 15, b >> 4], -1).reshape(n, kb, -1).astype(np.float64)
    w = ((q - 8) * sc.reshape(n, kb, 1)).reshape(n, -1)[:, :k].T
    return c.feeds["A"].astype(np.float64) @ w


def gen_nbits(rng):
    out = []
    for bs in (16, 32, 64, 128, 256):
        for acc in (0, 1, 2, 3, 4):
            for k, n in ((bs, 8), (bs + 7, 33), (3 * bs - 1, 1)):
                out.append(nbits_case(rng, f"bs{bs}/acc{acc}/k{k}n{n}", k, n, bs, acc=acc, zp=(k + acc) % 2 == 0,
                                      bias=(n + acc) % 3 == 0, m=1 + (k % 5)))
    for bs in (0, 8, 24, 48, 512, 1024, -32):
        out.append(nbits_case(rng, f"bad-block{bs}", 64, 8, bs if bs > 0 and bs != 24 and bs != 48 else 32,
                              attrs=dict(block_size=bs)))
    for bits in (2, 3, 5, 8, 0, 16):
        out.append(nbits_case(rng, f"bits{bits}", 64, 8, 32, bits=bits))
    for acc in (5, -1, 100):
        out.append(nbits_case(rng, f"acc{acc}", 64, 8, 32, acc=acc))
    out.append(nbits_case(rng, "m0", 64, 8, 32, m=0))
    out.append(nbits_case(rng, "m0-acc4", 64, 8, 32, m=0, acc=4))
    out.append(nbits_case(rng, "k-attr-mismatch", 64, 8, 32, attrs=dict(K=96)))
    out.append(nbits_case(rng, "n-attr-mismatch", 64, 8, 32, attrs=dict(N=16)))
    out.append(nbits_case(rng, "k-missing", 64, 8, 32, attrs=dict(K=None)))
    out.append(nbits_case(rng, "n0", 64, 8, 32, attrs=dict(N=0), b=np.zeros((0, 2, 16), np.uint8),
                          scales=np.zeros(0, np.float32)))
    c = nbits_case(rng, "k0", 64, 8, 32, attrs=dict(K=0), a=rn(rng, 3, 0), b=np.zeros((8, 0, 16), np.uint8),
                   scales=np.zeros(0, np.float32))
    c.expect = [np.zeros((3, 8), np.float32)]  # ORT 1.31.1 leaves the output uninitialised (NaN at times)
    c.declined = "rcpu does not claim K = 0 (ORT's kernel runs it, with ORT's garbage)"
    out.append(c)
    out.append(nbits_case(rng, "a-k-wrong", 64, 8, 32, a=rn(rng, 3, 63)))
    out.append(nbits_case(rng, "a-1d", 64, 8, 32, a=rn(rng, 64)))
    out.append(nbits_case(rng, "a-4d", 64, 8, 32, a=rn(rng, 2, 1, 3, 64)))
    out.append(nbits_case(rng, "a-0d", 64, 8, 32, a=np.float32(1.0)))
    out.append(nbits_case(rng, "scales-short", 64, 8, 32, scales=rng.uniform(size=15).astype(np.float32)))
    out.append(nbits_case(rng, "scales-long", 64, 8, 32, scales=rng.uniform(size=17).astype(np.float32)))
    out.append(nbits_case(rng, "scales-2d", 64, 8, 32, scales=rng.uniform(size=(8, 2)).astype(np.float32)))
    out.append(nbits_case(rng, "scales-f16", 64, 8, 32, scales=rng.uniform(size=16).astype(np.float16)))
    out.append(nbits_case(rng, "scales-nan", 64, 8, 32, scales=np.full(16, np.nan, np.float32)))
    out.append(nbits_case(rng, "scales-zero", 64, 8, 32, scales=np.zeros(16, np.float32), acc=4))
    out.append(nbits_case(rng, "scales-inf-acc4", 64, 8, 32, scales=np.full(16, np.inf, np.float32), acc=4))
    out.append(nbits_case(rng, "scales-huge-acc4", 64, 8, 32, scales=np.full(16, 1e38, np.float32), acc=4))
    out.append(nbits_case(rng, "scales-tiny-acc4", 64, 8, 32, scales=np.full(16, 1e-40, np.float32), acc=4))
    out.append(nbits_case(rng, "b-short", 64, 8, 32, b=np.zeros((8, 2, 15), np.uint8)))
    out.append(nbits_case(rng, "b-flat", 64, 8, 32, b=np.zeros(256, np.uint8)))
    out.append(nbits_case(rng, "b-swapped", 64, 8, 32, b=np.zeros((2, 8, 16), np.uint8)))
    out.append(nbits_case(rng, "b-int8", 64, 8, 32, b=np.zeros((8, 2, 16), np.int8)))
    out.append(nbits_case(rng, "zp-short", 64, 8, 32, zp=True, zpp=np.zeros(7, np.uint8)))
    out.append(nbits_case(rng, "zp-long", 64, 8, 32, zp=True, zpp=np.zeros(9, np.uint8)))
    out.append(nbits_case(rng, "zp-float", 64, 8, 32, zp=True, zp_float=True))
    out.append(nbits_case(rng, "zp-float-acc4", 64, 8, 32, zp=True, zp_float=True, acc=4))
    out.append(nbits_case(rng, "zp-float-short", 64, 8, 32, zp=True, zpp=np.zeros(15, np.float32)))
    out.append(nbits_case(rng, "bias-short", 64, 8, 32, bias=True, bias_v=rn(rng, 7)))
    out.append(nbits_case(rng, "bias-2d", 64, 8, 32, bias=True, bias_v=rn(rng, 1, 8)))
    out.append(nbits_case(rng, "bias-nan", 64, 8, 32, bias=True, bias_v=np.full(8, np.nan, np.float32)))
    for kinds in (("feed", "init", "init", "init"), ("init", "feed", "init", "init"), ("init", "init", "feed", "feed"),
                  ("feed", "feed", "feed", "feed")):
        out.append(nbits_case(rng, f"feeds{kinds}", 64, 8, 32, zp=True, bias=True, kinds=kinds))
        out.append(nbits_case(rng, f"feeds{kinds}/scales-short", 64, 8, 32, kinds=kinds,
                              scales=rng.uniform(size=15).astype(np.float32)))
        out.append(nbits_case(rng, f"feeds{kinds}/b-short", 64, 8, 32, kinds=kinds, b=np.zeros((8, 2, 15), np.uint8)))
    for acc in (0, 4):
        out.append(nbits_case(rng, f"a-nonfinite/acc{acc}", 96, 40, 32, acc=acc, a=specials(rng, 6, 96)))
        a = rn(rng, 4, 64)
        a[1] = np.inf
        a[2, 5] = -np.inf
        a[3, :] = np.nan
        out.append(nbits_case(rng, f"a-inf-rows/acc{acc}", 64, 8, 32, acc=acc, a=a, zp=True, bias=True))
        c = nbits_case(rng, f"a-huge/acc{acc}", 64, 8, 32, acc=acc, a=np.full((2, 64), 3e38, np.float32))
        # |A| at f32::MAX: the sums overflow. ORT 1.31.1's answer depends on its summation order
        # (acc 0: -inf where the exact sum is +inf; acc 4: NaN everywhere); numpy in f64 is exact.
        c.expect = [_nbits_ref64(c)]
        c.tol = ("l2", 1e-3) if acc == 0 else ()  # f32 sums of terms near f32::MAX that cancel
        out.append(c)
        out.append(nbits_case(rng, f"a-denormal/acc{acc}", 64, 8, 32, acc=acc, a=np.full((2, 64), 1e-42, np.float32)))
        out.append(nbits_case(rng, f"a-zero/acc{acc}", 64, 8, 32, acc=acc, a=np.zeros((2, 64), np.float32)))
    out.append(nbits_case(rng, "a-f16", 64, 8, 32, a=rn(rng, 3, 64).astype(np.float16),
                          scales=_nbits_inputs(rng, 64, 8, 32)[1].astype(np.float16)))
    return out


def gen_8bit(rng):
    """8-bit MatMulNBits weights (rcpu runs them as two 4-bit halves): odd sizes, every level, zero points
    of every byte value, the hostile scales either side of the split's limit (|s| > f32::MAX / 256 is
    computed literally), non-finite and huge rows, wrong sizes, inputs fed at run time. Then 8-bit
    GatherBlockQuantized tables (a tied 8-bit lm_head's embedding)."""
    out = []
    for bs in (16, 32, 128):
        for acc in (0, 1, 4):
            for k, n in ((bs + 7, 33), (3 * bs - 1, 1)):
                out.append(nbits_case(rng, f"b8/bs{bs}/acc{acc}/k{k}n{n}", k, n, bs, bits=8, acc=acc,
                                      zp=(k + acc) % 2 == 0, bias=(n + acc) % 3 == 0, m=1 + (k % 5)))
    for acc in (0, 4):
        out.append(nbits_case(rng, f"b8/m0/acc{acc}", 64, 8, 32, m=0, bits=8, acc=acc))
        out.append(nbits_case(rng, f"b8/a-nonfinite/acc{acc}", 96, 40, 32, bits=8, acc=acc, zp=True,
                              a=specials(rng, 6, 96)))
        a = rn(rng, 4, 64)
        a[1] = np.inf
        a[2, 5] = -np.inf
        a[3, :] = np.nan
        out.append(nbits_case(rng, f"b8/a-inf-rows/acc{acc}", 64, 8, 32, bits=8, acc=acc, a=a, zp=True, bias=True))
        for s in (1e36, 2e36, np.inf, np.nan, 0.0, 1e-40):
            # A small enough that no finite sum overflows (whose infinities would depend on the order
            # of the sums): 1e36 is split, 2e36 (|q - zp| s overflows) is computed literally.
            c = nbits_case(rng, f"b8/scales-{s}/acc{acc}", 64, 8, 32, bits=8, acc=acc, zp=True,
                           scales=np.full(16, s, np.float32), a=rn(rng, 3, 64) * np.float32(1e-30))
            if s == 2e36 and acc == 4:
                # Level 4 with scales whose dequantised weights overflow f32: ORT 1.31.1's int8 path
                # multiplies the scale into its integer sums, which stay finite; rcpu computes such
                # weights by the definition in f32 (each (q - zp) s an infinity where it overflows).
                c.expect = [_nbits_full_ref(c, dequant_f32=True)]
            out.append(c)
    out.append(nbits_case(rng, "b8/b-short", 64, 8, 32, bits=8, b=np.zeros((8, 2, 31), np.uint8)))
    out.append(nbits_case(rng, "b8/b-4bit-shape", 64, 8, 32, bits=8, b=np.zeros((8, 2, 16), np.uint8), zp=True))
    out.append(nbits_case(rng, "b8/zp-4bit-size", 64, 8, 32, bits=8, zp=True, zpp=np.zeros(8, np.uint8)))
    out.append(nbits_case(rng, "b8/zp-long", 64, 8, 32, bits=8, zp=True, zpp=np.zeros(17, np.uint8)))
    out.append(nbits_case(rng, "b8/zp-2d", 64, 8, 32, bits=8, zp=True, zpp=np.zeros((8, 2), np.uint8)))
    out.append(nbits_case(rng, "b8/zp-float", 64, 8, 32, bits=8, zp=True, zp_float=True))
    for kinds in (("feed", "init", "init", "init"), ("init", "feed", "feed", "init"), ("feed", "feed", "feed", "feed")):
        out.append(nbits_case(rng, f"b8/feeds{kinds}", 100, 9, 32, bits=8, zp=True, bias=True, kinds=kinds))
        out.append(nbits_case(rng, f"b8/feeds{kinds}/b-short", 64, 8, 32, bits=8, kinds=kinds,
                              b=np.zeros((8, 2, 31), np.uint8)))
    for bits in (4, 8):
        for kinds in (("init", "feed", "feed", "init"), ("init", "feed", "init", "init"), ("init", "init", "feed", "init"),
                      ("feed", "feed", "feed", "init")):
            c = nbits_case(rng, f"b{bits}/feeds{kinds}/acc4", 100, 9, 32, bits=bits, acc=4, zp=True, bias=True,
                           kinds=kinds)
            if kinds[0] == "init":
                # ORT 1.31.1 at level 4 with a constant B and scales or zero points fed at run time answers
                # garbage (relative L2 ~1 from the definition: it packs B with values it does not have);
                # rcpu computes the definition (A quantised per block as level 4 does).
                c.expect = [_nbits_full_ref(c)]
                c.tol = ("l2", 2e-2)
            out.append(c)
    for block in (16, 32, 128):
        for zp in (False, True):
            out.append(gbq_case(rng, f"b8/b{block}/zp{int(zp)}", rbytes=block * 3 - 16 * zp, block=block, zp=zp,
                                bits=8))
    out.append(gbq_case(rng, "b8/idx-oob", bits=8, idx=np.array([[8, -9, -1]])))
    out.append(gbq_case(rng, "b8/zp-4bit-size", bits=8, zp=True, zps=np.zeros((8, 1), np.uint8), rbytes=64))
    out.append(gbq_case(rng, "b8/scales-4bit-size", bits=8, scales=rng.uniform(size=(8, 1)).astype(np.float32),
                        rbytes=64))
    out.append(gbq_case(rng, "b8/data-3d", bits=8, data=rng.integers(0, 256, (2, 4, 32), dtype=np.uint8),
                        scales=rng.uniform(size=(2, 4, 1)).astype(np.float32), idx=np.array([1, 0])))
    out.append(gbq_case(rng, "b8/feeds", bits=8, kinds="feed", zp=True))
    return out


def _nbits_full_ref(c: Case, dequant_f32: bool = False) -> np.ndarray:
    """A @ dequant(B) + bias in float64 with the case's zero points, 4- or 8-bit, rounded to f32 once
    (`dequant_f32`: the weights (q - zp) s rounded to f32 first, overflowing to infinities)."""
    m = onnx.load_from_string(c.model)
    v = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    v.update(c.feeds)
    at = {a.name: helper.get_attribute_value(a) for a in m.graph.node[0].attribute}
    b, k, bits = v["B"], at["K"], at["bits"]
    n, kb, _ = b.shape
    if bits == 8:
        q, z = b.astype(np.float64), v["zero_points"].reshape(n, kb).astype(np.float64)
    else:
        q = np.stack([b & 15, b >> 4], -1).reshape(n, kb, -1).astype(np.float64)
        zz = v["zero_points"].reshape(n, -1)
        z = np.stack([zz & 15, zz >> 4], -1).reshape(n, -1)[:, :kb].astype(np.float64)
    w = (q - z[:, :, None]) * v["scales"].astype(np.float64).reshape(n, kb, 1)
    if dequant_f32:
        with np.errstate(over="ignore"):
            w = w.astype(np.float32).astype(np.float64)
    w = w.reshape(n, -1)[:, :k].T
    bias = v.get("bias", np.zeros(n, np.float32)).astype(np.float64)
    with np.errstate(invalid="ignore"):
        return (c.feeds["A"].astype(np.float64) @ w + bias).astype(np.float32)


def gen_qlinear(rng):
    out = []
    cases = [([3, 8], [8, 5], ()), ([0, 8], [8, 5], ()), ([3, 0], [0, 5], ()), ([3, 8], [8, 0], ()),
             ([2, 3, 8], [8, 5], (5,)), ([2, 3, 8], [2, 8, 5], ()), ([3, 8], [2, 8, 5], (2, 1, 5)),
             ([8], [8, 5], ()), ([3, 8], [8], ()), ([3, 8], [9, 5], ()), ([3, 8], [8, 5], (4,)),
             ([3, 8], [8, 5], (1, 5)), ([3, 8], [2, 8, 5], (2, 5)), ([1, 3, 8], [3, 8, 5], (3, 1, 5))]
    for sa, sb, ps in cases:
        for a_s, b_s in ((False, False), (True, True), (False, True)):
            for b_const in (True, False):
                for opset in (10, 21):
                    if opset == 10 and (a_s != b_s):
                        continue
                    try:
                        mdl, b = models.qlinear_matmul(rng, sa, sb, a_s, b_s, b_const, ps, opset, name=NODE)
                    except Exception:  # noqa: BLE001 (a builder refusing an odd shape is no case)
                        continue
                    dt = np.int8 if a_s else np.uint8
                    lo, hi = (-128, 127) if a_s else (0, 255)
                    feeds = {"a": rng.integers(lo, hi + 1, size=sa).astype(dt)}
                    if not b_const:
                        feeds["b"] = b
                    c = Case(f"qlinear/{sa}x{sb}/p{ps}/a{int(a_s)}b{int(b_s)}/c{int(b_const)}/op{opset}",
                             "QLinearMatMul", mdl.SerializeToString(), feeds)
                    if sa == [3, 0]:
                        # K = 0: ORT 1.31.1 returns zeros, not y_zero_point (every sum is empty, so
                        # y = saturate(round(0 * scale) + y_zero_point) = y_zero_point): numpy's answer.
                        yz = next(numpy_helper.to_array(t) for t in mdl.graph.initializer if t.name == "y_zero_point")
                        c.expect = [np.full((3, 5), yz, dt)]
                    out.append(c)
    # Odd scales / zero points as initializers.
    for what, val in (("a_scale", 0.0), ("a_scale", np.nan), ("a_scale", -0.01), ("y_scale", 0.0),
                      ("y_scale", np.inf), ("b_scale", np.nan), ("y_scale", 1e-45), ("a_scale", 1e38)):
        mdl, _ = models.qlinear_matmul(rng, [3, 8], [8, 5], name=NODE)
        for init in mdl.graph.initializer:
            if init.name == what:
                arr = numpy_helper.to_array(init)
                init.CopyFrom(numpy_helper.from_array(np.full(arr.shape, val, np.float32), what))
        out.append(Case(f"qlinear/{what}={val}", "QLinearMatMul", mdl.SerializeToString(),
                        {"a": rng.integers(0, 256, size=(3, 8)).astype(np.uint8)}))
    # Zero point with the wrong element count / rank.
    for zshape in ((2,), (1, 1), (8,)):
        mdl, _ = models.qlinear_matmul(rng, [3, 8], [8, 5], name=NODE)
        for init in mdl.graph.initializer:
            if init.name == "a_zero_point":
                init.CopyFrom(numpy_helper.from_array(np.full(zshape, 128, np.uint8), "a_zero_point"))
        out.append(Case(f"qlinear/a_zero{zshape}", "QLinearMatMul", mdl.SerializeToString(),
                        {"a": rng.integers(0, 256, size=(3, 8)).astype(np.uint8)}))
    return out


def gqa_case(rng, name, nh=4, kvh=2, hd=8, b=2, s=3, p=4, total=None, seqlens=None, packed=False, past=True,
             rotary=False, inter=0, max_pos=32, scale=None, extra=None, cos=None, sin=None, q=None, feeds_over=None,
             past_kv_heads=None, past_hd=None):
    extra = dict(extra or {})
    mdl = models.gqa(nh, kvh, hd, packed=packed, past=past, rotary=rotary, interleaved=inter, max_pos=max_pos,
                     scale=scale, name=NODE, **extra)
    qd = (nh + 2 * kvh) * hd if packed else nh * hd
    feeds = {"q": rn(rng, b, s, qd) if q is None else q}
    if not packed:
        feeds["k"] = rn(rng, b, s, kvh * hd)
        feeds["v"] = rn(rng, b, s, kvh * hd)
    if past:
        pk = past_kv_heads or kvh
        ph = past_hd or hd
        feeds["past_k"] = rn(rng, b, pk, p, ph)
        feeds["past_v"] = rn(rng, b, pk, p, ph)
    pl = p if past else 0
    tot = pl + s if total is None else total
    feeds["seqlens_k"] = (np.full(b, tot - 1, np.int32) if seqlens is None else np.asarray(seqlens, np.int32))
    feeds["total_seq_len"] = np.array(tot, np.int32)
    if rotary:
        c, sn = models.rope_caches(max_pos, hd // 2)
        feeds["cos"] = c if cos is None else cos
        feeds["sin"] = sn if sin is None else sin
    feeds.update(feeds_over or {})
    return Case(f"gqa/{name}", "GroupQueryAttention", mdl.SerializeToString(), feeds)


def windowed(c: Case, cap: int, window: int) -> Case:
    """A windowed-cache case (sliding_window_cache = 1): ORT defines a separate present's first
    rows only (per batch, the rows the cache holds after the step: the reclaim rule of
    test_attention.window_end); the rest is whatever its allocator handed out."""
    sl = c.feeds["seqlens_k"]
    if cap <= 0 or window <= 0 or window > cap or sl.min(initial=0) < 0:
        return c
    gap = cap - window + 1
    pk = c.feeds["past_k"]
    m = np.zeros(pk.shape, bool)
    for b, sk in enumerate(sl[: pk.shape[0]]):
        n = int(sk) + 1
        rows = n if n <= cap else n - gap * -(-(n - cap) // gap)
        m[b, :, :rows] = True
    c.defined = {1: m, 2: m}
    return c


def gen_gqa(rng):
    out = []
    for nh, kvh in ((4, 2), (4, 4), (4, 1), (3, 2), (4, 3), (4, 0), (0, 0), (2, 4)):
        out.append(gqa_case(rng, f"heads{nh}/{kvh}", nh=nh, kvh=max(kvh, 0)))
    for hd in (1, 2, 6, 16, 256):
        out.append(gqa_case(rng, f"hd{hd}", hd=hd))
        out.append(gqa_case(rng, f"hd{hd}/rotary", hd=hd, rotary=True))
    for b, s, p in ((1, 1, 0), (1, 1, 5), (2, 4, 0), (3, 1, 7), (1, 5, 2), (1, 0, 4), (0, 1, 4), (2, 1, 0), (0, 3, 0)):
        for rot in (False, True):
            hd = 16 if rot else 8  # ORT's rotary needs a head size multiple of 16
            c = gqa_case(rng, f"bsp{b},{s},{p}" + ("/rotary-inter" if rot else ""), b=b, s=s, p=p, rotary=rot, inter=1,
                         hd=hd)
            if b == 0:
                # ORT 1.31.1 dies of SIGFPE on an empty batch; numpy's answer is three empty outputs.
                c.skip_ort = True
                c.expect = [np.zeros((0, s, 4 * hd), np.float32)] + [np.zeros((0, 2, p + s, hd), np.float32)] * 2
            out.append(c)
    out.append(gqa_case(rng, "packed", packed=True))
    out.append(gqa_case(rng, "packed/rotary", packed=True, rotary=True))
    out.append(gqa_case(rng, "no-past", past=False, p=0))
    out.append(gqa_case(rng, "no-past/prompt-padded", past=False, p=0, b=2, s=4, seqlens=[3, 1], total=4))
    for sl in ([-1, 2], [-5, -5], [7, 6], [100, 6], [2 ** 31 - 1, 6], [6], [6, 6, 6], [0, 0]):
        out.append(gqa_case(rng, f"seqlens{sl}", seqlens=sl))
    for tot in (0, 1, 6, 8, 100, -1, 2 ** 31 - 1):
        out.append(gqa_case(rng, f"total{tot}", total=tot, seqlens=[min(max(tot - 1, -1), 6)] * 2))
    for sc in (0.0, float("nan"), float("inf"), -1.0, 1e-30):
        out.append(gqa_case(rng, f"scale{sc}", scale=sc))
    for sc in (0.0, 1.0, 30.0, -5.0, float("nan")):
        out.append(gqa_case(rng, f"softcap{sc}", extra=dict(softcap=sc)))
    for w in (-1, 0, 1, 2, 3, 100):
        out.append(gqa_case(rng, f"window{w}", extra=dict(local_window_size=w)))
        out.append(gqa_case(rng, f"window{w}/prompt", extra=dict(local_window_size=w), s=5, p=0, past=False))
    for w, p, s, sl, tot in ((4, 8, 1, [30, 2], 31), (4, 3, 1, None, None), (4, 4, 1, [9, 9], 10), (4, 8, 5, [20], 21),
                             (4, 8, 12, [11], 12), (4, 8, 3, [1], 3), (4, 8, 1, [-1, 4], 5), (4, 8, 1, [2 ** 31 - 1, 3], 4),
                             (4, 8, 0, [5, 5], 5), (4, 8, 1, [5, 5], 0), (4, 8, 2, [5, 7], 8), (1, 1, 1, [40, 0], 41)):
        b = len(sl) if sl else 2
        out.append(windowed(gqa_case(rng, f"windowed{w}/cache{p}/s{s}/{sl}/{tot}", extra=dict(local_window_size=w,
                            sliding_window_cache=1), b=b, s=s, p=p, seqlens=sl, total=tot), p, w))
    out.append(gqa_case(rng, "windowed/no-past", extra=dict(local_window_size=4, sliding_window_cache=1), past=False,
                        p=0, s=3))
    out.append(windowed(gqa_case(rng, "windowed/rotary-far", extra=dict(local_window_size=4, sliding_window_cache=1),
                                 b=1, s=1, p=8, seqlens=[31], total=32, rotary=True, hd=16), 8, 4))
    out.append(gqa_case(rng, "smooth_softmax", extra=dict(smooth_softmax=1)))
    for nm, sk in (("ok", rn(rng, 4)), ("short", rn(rng, 3)), ("2d", rn(rng, 1, 4)), ("nan", np.full(4, np.nan, np.float32)),
                   ("inf", np.array([np.inf, -np.inf, 0, 1e30], np.float32)), ("huge", np.full(4, 1e30, np.float32))):
        out.append(gqa_case(rng, f"head_sink/{nm}", extra=dict(sink=True), s=1, feeds_over={"head_sink": sk}))
        out.append(gqa_case(rng, f"head_sink/{nm}/prompt", extra=dict(sink=True, local_window_size=2), s=5, p=0,
                            past=False, feeds_over={"head_sink": sk}))
    out.append(gqa_case(rng, "qk_output", extra=dict(qk_output=1)))
    out.append(gqa_case(rng, "rotary/pos>cache", rotary=True, max_pos=4, p=4, s=3))
    out.append(gqa_case(rng, "rotary/cos-narrow", rotary=True, cos=rn(rng, 32, 3), sin=rn(rng, 32, 3)))
    out.append(gqa_case(rng, "rotary/cos-wide", rotary=True, cos=rn(rng, 32, 8), sin=rn(rng, 32, 8)))
    out.append(gqa_case(rng, "rotary/cos-sin-differ", rotary=True, cos=rn(rng, 32, 4), sin=rn(rng, 16, 4)))
    out.append(gqa_case(rng, "rotary/no-cache", rotary=True,
                        feeds_over={"cos": np.zeros((0, 4), np.float32), "sin": np.zeros((0, 4), np.float32)}))
    out.append(gqa_case(rng, "rotary/odd-hd", rotary=True, hd=6, cos=rn(rng, 32, 3), sin=rn(rng, 32, 3)))
    out.append(gqa_case(rng, "past-wrong-heads", past_kv_heads=3))
    out.append(gqa_case(rng, "past-wrong-hd", past_hd=4))
    out.append(gqa_case(rng, "q-wrong-width", q=rn(rng, 2, 3, 30)))
    out.append(gqa_case(rng, "q-2d", q=rn(rng, 6, 32)))
    out.append(gqa_case(rng, "nonfinite-q", q=specials(rng, 2, 3, 32)))
    out.append(gqa_case(rng, "nonfinite-past", feeds_over={"past_k": specials(rng, 2, 2, 4, 8)}))
    out.append(gqa_case(rng, "past-k-v-differ", feeds_over={"past_v": rn(rng, 2, 2, 5, 8)}))
    out.append(gqa_case(rng, "k-v-differ", feeds_over={"v": rn(rng, 2, 2, 16)}))
    return out


def rope_case(rng, name, x, pos, max_pos=16, half=4, inter=0, nh=None, rdim=None, cos=None, sin=None):
    c, s = models.rope_caches(max_pos, half)
    mdl = models.rotary_embedding(list(map(str, "abcdefg"[: x.ndim])), list(map(str, "pq"[: np.ndim(pos)])),
                                  "M", "H", inter, nh, rdim, name=NODE)
    feeds = {"X": x, "pos": np.asarray(pos, np.int64), "cos": c if cos is None else cos, "sin": s if sin is None else sin}
    return Case(f"rope/{name}", "RotaryEmbedding", mdl.SerializeToString(), feeds)


def gen_rope(rng):
    out = []
    for inter in (0, 1):
        out.append(rope_case(rng, f"3d/{inter}", rn(rng, 2, 3, 16), rng.integers(0, 16, (2, 3)), inter=inter, nh=2))
        out.append(rope_case(rng, f"4d/{inter}", rn(rng, 2, 2, 3, 8), rng.integers(0, 16, (2, 3)), inter=inter))
        out.append(rope_case(rng, f"pos-scalar/{inter}", rn(rng, 2, 3, 16), np.array(2), inter=inter, nh=2))
        out.append(rope_case(rng, f"pos-1d/{inter}", rn(rng, 2, 3, 16), np.array([2, 3]), inter=inter, nh=2))
        for p in (-1, 16, 2 ** 62, -(2 ** 63)):
            out.append(rope_case(rng, f"pos{p}/{inter}", rn(rng, 1, 2, 16), np.array([[0, p]]), inter=inter, nh=2))
        for rd in (2, 4, 6, 3, 0, 10, -2):
            c = rope_case(rng, f"rdim{rd}/{inter}", rn(rng, 1, 2, 16), np.array([[0, 1]]), inter=inter, nh=2,
                          rdim=rd, half=max(rd, 2) // 2)
            if rd == 3:
                # An odd rotary dimension: ORT 1.31.1 writes 0 into element 2 of every head (garbage).
                c.refuse = "RotaryEmbedding node 'n0'"
            out.append(c)
        out.append(rope_case(rng, f"nh-not-dividing/{inter}", rn(rng, 1, 2, 16), np.array([[0, 1]]), inter=inter, nh=3))
        out.append(rope_case(rng, f"nh0/{inter}", rn(rng, 1, 2, 16), np.array([[0, 1]]), inter=inter, nh=0))
        out.append(rope_case(rng, f"3d-no-nh/{inter}", rn(rng, 1, 2, 16), np.array([[0, 1]]), inter=inter))
        out.append(rope_case(rng, f"cache-narrow/{inter}", rn(rng, 1, 2, 16), np.array([[0, 1]]), inter=inter, nh=2,
                             cos=rn(rng, 16, 3), sin=rn(rng, 16, 3)))
        out.append(rope_case(rng, f"cache-differ/{inter}", rn(rng, 1, 2, 16), np.array([[0, 1]]), inter=inter, nh=2,
                             cos=rn(rng, 16, 4), sin=rn(rng, 8, 4)))
        out.append(rope_case(rng, f"empty-seq/{inter}", rn(rng, 1, 0, 16), np.zeros((1, 0), np.int64), inter=inter,
                             nh=2))
        out.append(rope_case(rng, f"empty-batch/{inter}", rn(rng, 0, 2, 16), np.zeros((0, 2), np.int64), inter=inter,
                             nh=2))
        out.append(rope_case(rng, f"nonfinite/{inter}", specials(rng, 2, 3, 16), rng.integers(0, 16, (2, 3)),
                             inter=inter, nh=2))
        out.append(rope_case(rng, f"pos-shape-wrong/{inter}", rn(rng, 2, 3, 16), rng.integers(0, 16, (3, 2)),
                             inter=inter, nh=2))
        c = rope_case(rng, f"odd-hidden/{inter}", rn(rng, 1, 2, 14), np.array([[0, 1]]), inter=inter, nh=2, half=3)
        # Head size 6 from the cache does not divide hidden 14: ORT 1.31.1 writes 0 into element 6.
        c.refuse = "RotaryEmbedding node 'n0'"
        out.append(c)
        out.append(rope_case(rng, f"2d-x/{inter}", rn(rng, 2, 16), np.array([0, 1]), inter=inter, nh=2))
    return out


def gen_norms(rng):
    out = []
    x = rn(rng, 2, 3, 8)
    for axis in (-4, -3, -2, -1, 0, 1, 2, 3):
        sh = x.shape[axis:] if -3 <= axis <= 2 else (8,)
        for op in ("LayerNormalization", "SimplifiedLayerNormalization"):
            for kind in ("init", "feed"):
                ins = [("X", x, "feed"), ("scale", rn(rng, *sh), kind)]
                if op == "LayerNormalization":
                    ins.append(("B", rn(rng, *sh), kind))
                mdl, f = node_model(op, ins, dict(axis=axis, epsilon=1e-5))
                out.append(Case(f"{op}/axis{axis}/{kind}", op, mdl, f))
    for eps in (0.0, -1.0, float("nan"), float("inf"), 1e30, -1e-5):
        for op in ("LayerNormalization", "SimplifiedLayerNormalization"):
            ins = [("X", x, "feed"), ("scale", rn(rng, 8), "init")]
            mdl, f = node_model(op, ins, dict(epsilon=eps))
            out.append(Case(f"{op}/eps{eps}", op, mdl, f))
            xz = np.zeros_like(x)
            mdl, f = node_model(op, [("X", xz, "feed"), ("scale", rn(rng, 8), "init")], dict(epsilon=eps))
            out.append(Case(f"{op}/eps{eps}/zero-x", op, mdl, f))
        mdl, f = node_model("SkipSimplifiedLayerNormalization",
                            [("X", x, "feed"), ("skip", rn(rng, 2, 3, 8), "feed"), ("gamma", rn(rng, 8), "init")],
                            dict(epsilon=eps), domain="com.microsoft")
        out.append(Case(f"skipsln/eps{eps}", "SkipSimplifiedLayerNormalization", mdl, f))
    for sshape in ((1, 8), (3, 8), (7,), (9,), (1,), (), (2, 3, 8), (0,)):
        for op in ("LayerNormalization", "SimplifiedLayerNormalization"):
            mdl, f = node_model(op, [("X", x, "feed"), ("scale", rn(rng, *sshape), "init")])
            out.append(Case(f"{op}/scale{sshape}", op, mdl, f))
    for xs in ((0, 8), (2, 0), (0, 0), (1, 1), (8,), (1, 1, 1, 1, 1, 8)):
        for op in ("LayerNormalization", "SimplifiedLayerNormalization"):
            mdl, f = node_model(op, [("X", rn(rng, *xs), "feed"), ("scale", rn(rng, xs[-1]), "init")])
            out.append(Case(f"{op}/x{xs}", op, mdl, f))
    for op in ("LayerNormalization", "SimplifiedLayerNormalization"):
        mdl, f = node_model(op, [("X", specials(rng, 4, 8), "feed"), ("scale", rn(rng, 8), "init")])
        out.append(Case(f"{op}/nonfinite", op, mdl, f))
        mdl, f = node_model(op, [("X", np.full((2, 8), 3e38, np.float32), "feed"), ("scale", rn(rng, 8), "init")])
        out.append(Case(f"{op}/huge", op, mdl, f))
        for st in (1, 0, 10):
            mdl, f = node_model(op, [("X", x, "feed"), ("scale", rn(rng, 8), "init")], dict(stash_type=st), n_out=3,
                                out_names=["Y", "mean", "inv"] if op == "LayerNormalization" else ["Y", "", "inv"])
            out.append(Case(f"{op}/stash{st}/outs", op, mdl, f))
        mdl, f = node_model(op, [("X", x.astype(np.float16), "feed"), ("scale", rn(rng, 8).astype(np.float16), "init")])
        out.append(Case(f"{op}/f16", op, mdl, f))
    # LayerNorm bias shapes
    for bshape in ((7,), (1, 8), (3, 1)):
        mdl, f = node_model("LayerNormalization", [("X", x, "feed"), ("scale", rn(rng, 8), "init"),
                                                    ("B", rn(rng, *bshape), "init")])
        out.append(Case(f"LayerNormalization/bias{bshape}", "LayerNormalization", mdl, f))
    # SkipSimplifiedLayerNormalization shapes, optional outputs and bias
    S = "SkipSimplifiedLayerNormalization"
    for xs, ss, gs in (((2, 3, 8), (2, 3, 8), (8,)), ((2, 3, 8), (3, 8), (8,)), ((2, 3, 8), (1, 3, 8), (8,)),
                       ((2, 3, 8), (8,), (8,)), ((6, 8), (6, 8), (8,)), ((2, 3, 8), (2, 3, 7), (8,)),
                       ((2, 3, 8), (2, 3, 8), (7,)), ((0, 3, 8), (0, 3, 8), (8,)), ((2, 3, 8), (2, 3, 8), (1, 8)),
                       ((8,), (8,), (8,)), ((2, 3, 0), (2, 3, 0), (0,)), ((2, 3, 8), (2, 1, 8), (8,))):
        for kind in ("init", "feed"):
            mdl, f = node_model(S, [("X", rn(rng, *xs), "feed"), ("skip", rn(rng, *ss), "feed"),
                                    ("gamma", rn(rng, *gs), kind)], domain="com.microsoft")
            out.append(Case(f"skipsln/{xs}+{ss}*{gs}/{kind}", S, mdl, f))
    for nout, names in ((4, ["Y", "", "", "sum"]), (4, ["Y", "mean", "inv", "sum"]), (2, ["Y", "mean"])):
        mdl, f = node_model(S, [("X", x, "feed"), ("skip", rn(rng, 2, 3, 8), "feed"), ("gamma", rn(rng, 8), "init")],
                            domain="com.microsoft", n_out=nout, out_names=names)
        out.append(Case(f"skipsln/outs{names}", S, mdl, f))
    for bshape in ((8,), (7,)):
        mdl, f = node_model(S, [("X", x, "feed"), ("skip", rn(rng, 2, 3, 8), "feed"), ("gamma", rn(rng, 8), "init"),
                                ("bias", rn(rng, *bshape), "init")], domain="com.microsoft")
        out.append(Case(f"skipsln/bias{bshape}", S, mdl, f))
    mdl, f = node_model(S, [("X", specials(rng, 2, 3, 8), "feed"), ("skip", specials(rng, 2, 3, 8), "feed"),
                            ("gamma", rn(rng, 8), "init")], domain="com.microsoft")
    out.append(Case("skipsln/nonfinite", S, mdl, f))
    # SkipLayerNormalization: beta at input 3, bias at input 4, each optional; bad shapes, outputs, specials
    L = "SkipLayerNormalization"
    for bshape, cshape in (((8,), None), (None, (8,)), ((8,), (8,)), ((7,), None), (None, (7,)), ((1, 8), None),
                           ((8,), (2, 8))):
        ins = [("X", x, "feed"), ("skip", rn(rng, 3, 8), "feed"), ("gamma", rn(rng, 8), "init"),
               ("beta", rn(rng, *bshape), "init") if bshape else ("", None, ""),
               ("bias", rn(rng, *cshape), "init") if cshape else ("", None, "")]
        while ins[-1][0] == "":
            ins.pop()
        mdl, f = node_model(L, ins, {"epsilon": 1e-5}, domain="com.microsoft")
        out.append(Case(f"skipln/beta{bshape}/bias{cshape}", L, mdl, f))
    for xs, ss in (((2, 3, 8), (2, 3, 7)), ((0, 3, 8), (0, 3, 8)), ((6, 8), (6, 8)), ((2, 3, 0), (2, 3, 0))):
        mdl, f = node_model(L, [("X", rn(rng, *xs), "feed"), ("skip", rn(rng, *ss), "feed"),
                                ("gamma", rn(rng, xs[-1]), "init")], domain="com.microsoft")
        out.append(Case(f"skipln/{xs}+{ss}", L, mdl, f))
    for names in (["Y", "", "", "sum"], ["Y", "mean", "inv", "sum"]):
        mdl, f = node_model(L, [("X", x, "feed"), ("skip", rn(rng, 2, 3, 8), "feed"), ("gamma", rn(rng, 8), "init")],
                            domain="com.microsoft", n_out=4, out_names=names)
        out.append(Case(f"skipln/outs{names}", L, mdl, f))
    mdl, f = node_model(L, [("X", specials(rng, 2, 3, 8), "feed"), ("skip", specials(rng, 2, 3, 8), "feed"),
                            ("gamma", rn(rng, 8), "init"), ("beta", rn(rng, 8), "init")], domain="com.microsoft")
    out.append(Case("skipln/nonfinite", L, mdl, f))
    return out


def gen_softmax(rng):
    out = []
    x = rn(rng, 2, 3, 5)
    for opset in (11, 13):
        for axis in (-4, -3, -2, -1, 0, 1, 2, 3):
            mdl, f = node_model("Softmax", [("X", x, "feed")], dict(axis=axis), opset=opset)
            out.append(Case(f"softmax/op{opset}/axis{axis}", "Softmax", mdl, f))
        for nm, xv in (("neg-inf-row", np.full((2, 5), -np.inf, np.float32)), ("nonfinite", specials(rng, 3, 5)),
                       ("empty", rn(rng, 0, 5)), ("empty-axis", rn(rng, 3, 0)), ("scalar", np.float32(1.0)),
                       ("huge", np.full((2, 5), 3e38, np.float32)), ("one", rn(rng, 1))):
            mdl, f = node_model("Softmax", [("X", xv, "feed")], dict(axis=-1), opset=opset)
            out.append(Case(f"softmax/op{opset}/{nm}", "Softmax", mdl, f))
    mdl, f = node_model("Softmax", [("X", x.astype(np.float16), "feed")])
    out.append(Case("softmax/f16", "Softmax", mdl, f))
    x = rn(rng, 3, 5)
    x[1, 2] = np.inf
    mdl, f = node_model("Softmax", [("X", x, "feed")], dict(axis=-1))
    out.append(Case("softmax/one-inf", "Softmax", mdl, f))
    return out


def gen_elementwise(rng):
    out = []
    pairs = [((2, 3), (2, 3)), ((2, 3), (3,)), ((2, 3), ()), ((), ()), ((2, 1), (1, 3)), ((0, 3), (3,)), ((2, 3), (0, 3)),
             ((2, 3), (4,)), ((2, 3), (2,)), ((1, 1, 1, 1, 1, 1, 2), (2,)), ((4, 1, 3), (2, 1)), ((0,), ()), ((3,), (1, 0)),
             ((5, 1), (1, 0))]
    for op in ("Add", "Sub", "Mul", "Div"):
        for sa, sb in pairs:
            for kind in ("feed", "init"):
                mdl, f = node_model(op, [("A", rn(rng, *sa), "feed"), ("B", rn(rng, *sb), kind)])
                out.append(Case(f"{op}/{sa}x{sb}/{kind}", op, mdl, f))
        mdl, f = node_model(op, [("A", specials(rng, 3, 4), "feed"), ("B", specials(rng, 3, 4), "feed")])
        out.append(Case(f"{op}/nonfinite", op, mdl, f))
        for dt in (np.int32, np.int64, np.float16):
            mdl, f = node_model(op, [("A", rng.integers(-5, 5, (2, 3)).astype(dt), "feed"),
                                     ("B", rng.integers(1, 5, (2, 3)).astype(dt), "feed")])
            out.append(Case(f"{op}/{np.dtype(dt).name}", op, mdl, f))
    mdl, f = node_model("Div", [("A", rn(rng, 2, 3), "feed"), ("B", np.zeros((2, 3), np.float32), "feed")])
    out.append(Case("Div/by-zero", "Div", mdl, f))
    mdl, f = node_model("Div", [("A", np.zeros((2, 3), np.float32), "feed"), ("B", np.zeros((2, 3), np.float32), "feed")])
    out.append(Case("Div/zero-by-zero", "Div", mdl, f))
    return out


def gen_activation(rng):
    out = []
    for shape in ((2, 3), (0, 3), (), (1,), (4, 1025)):
        for op, dom, attrs in (("Sigmoid", "", {}), ("Gelu", "", {}), ("Gelu", "", {"approximate": "tanh"}),
                               ("Gelu", "com.microsoft", {}), ("FastGelu", "com.microsoft", {}), ("Relu", "", {}),
                               ("Tanh", "", {})):
            opset = 20 if (op == "Gelu" and not dom) else 17
            mdl, f = node_model(op, [("X", rn(rng, *shape, scale=4.0), "feed")], attrs, domain=dom, opset=opset)
            out.append(Case(f"{op}{'/ms' if dom else ''}{attrs}/{shape}", "Gelu" if op == "Gelu" else op, mdl, f))
    for op, dom, opset in (("Sigmoid", "", 17), ("Gelu", "", 20), ("Gelu", "com.microsoft", 17), ("FastGelu", "com.microsoft", 17),
                           ("Relu", "", 14), ("Tanh", "", 13)):
        x = specials(rng, 3, 7)
        x[0, :3] = [88.0, -88.0, -104.0]
        mdl, f = node_model(op, [("X", x, "feed")], domain=dom, opset=opset)
        out.append(Case(f"{op}{'/ms' if dom else ''}/nonfinite", "Gelu" if op == "Gelu" else op, mdl, f))
    for ename, e in (("i32[1]", np.array([2], np.int32)), ("f32", np.array(2.0, np.float32)),
                     ("i64[1,1]", np.array([[2]], np.int64))):
        for shape in ((2, 3), (0, 3), (), (4, 1025)):
            x = specials(rng, 3, 7) if shape == (2, 3) else rn(rng, *shape, scale=4.0)
            mdl, f = node_model("Pow", [("X", x, "feed"), ("E", e, "init")], opset=15)
            out.append(Case(f"Pow/exp{ename}/{x.shape}", "Pow", mdl, f))
    mdl, f = node_model("Gelu", [("X", rn(rng, 2, 3), "feed")], {"approximate": "garbage"}, opset=20)
    out.append(Case("Gelu/approximate-garbage", "Gelu", mdl, f))
    for bshape in ((3,), (2,), (2, 3), (1,), ()):
        mdl, f = node_model("FastGelu", [("X", rn(rng, 2, 3), "feed"), ("bias", rn(rng, *bshape), "init")],
                            domain="com.microsoft")
        out.append(Case(f"FastGelu/bias{bshape}", "FastGelu", mdl, f))
    mdl, f = node_model("Sigmoid", [("X", rn(rng, 2, 3).astype(np.float16), "feed")])
    out.append(Case("Sigmoid/f16", "Sigmoid", mdl, f))
    return out


def _then_sigmoid(model_bytes):
    """The one-node model with a Sigmoid after its output Y0 (graph output Z): rcpu takes a Reshape only
    beside another of its nodes, so the pair makes a partition whose Reshape reads a partition input
    (the copy path)."""
    m = onnx.load_from_string(model_bytes)
    m.graph.node.append(helper.make_node("Sigmoid", ["Y0"], ["Z"], name="n1"))
    out = m.graph.output[0]
    out.name = "Z"
    return m.SerializeToString()


def gen_reshape(rng):
    """Reshape of float32 data followed by a Sigmoid (`_then_sigmoid`): 0 (copy / literal with
    allowzero), -1, empty and scalar data, and shapes ORT refuses (two -1, wrong counts, a 0 past the
    input's rank, -2, -1 with a literal 0), the shape as an initializer and as a feed."""
    out = []
    x = rn(rng, 2, 3, 4)
    for shape, az in (([0, -1], 0), ([4, 0, 2], 0), ([-1], 0), ([24, 1, 1], 0), ([2, 3, 4], 1), ([0, 3, 4], 0),
                      ([-1, -1], 0), ([5, -1], 0), ([2, 3, 5], 0), ([0, 0, 0, 0], 0), ([-2, 12], 0),
                      ([0, -1], 1), ([2, 12, 0], 1), ([], 0)):
        for kind in ("init", "feed"):
            mdl, f = node_model("Reshape", [("X", x, "feed"), ("shape", np.array(shape, np.int64), kind)],
                                {"allowzero": az} if az else None, opset=21)
            out.append(Case(f"reshape/{shape}/az{az}/{kind}", "Reshape", _then_sigmoid(mdl), f))
    for xs, shape in (((0, 3), [3, -1]), ((0, 3), [0, 3]), ((), [1, 1]), ((1,), [])):
        mdl, f = node_model("Reshape", [("X", rn(rng, *xs), "feed"), ("shape", np.array(shape, np.int64), "init")],
                            opset=21)
        out.append(Case(f"reshape/{xs}->{shape}", "Reshape", _then_sigmoid(mdl), f))
    return out


def gen_cast(rng):
    out = []
    vals = np.array([0.0, -0.0, 1.5, -1.5, 2.5, 65504.0, 65520.0, 1e10, -1e10, 3e38, np.nan, np.inf, -np.inf, 1e-8,
                     6e-8, 300.0, -300.0, 127.5, 255.5], np.float32)
    with np.errstate(over="ignore"):
        vals16 = vals.astype(np.float16)
    for to in (F16, F32, I32, I64, U8, I8, TensorProto.DOUBLE, TensorProto.BOOL):
        for src in (vals, vals16, np.zeros((0, 3), np.float32)):
            mdl, f = node_model("Cast", [("X", src, "feed")], dict(to=to), out_elem=to)
            out.append(Case(f"cast/{src.dtype}{list(src.shape)}->to{to}", "Cast", mdl, f))
    for src in (np.array([0, 1, -1, 2 ** 31 - 1, -(2 ** 31), 65505, 70000], np.int32),
                np.array([0, 1, -1, 2 ** 62, -(2 ** 63)], np.int64)):
        for to in (F16, F32):
            mdl, f = node_model("Cast", [("X", src, "feed")], dict(to=to), out_elem=to)
            out.append(Case(f"cast/{src.dtype}->to{to}", "Cast", mdl, f))
    mdl, f = node_model("Cast", [("X", vals, "feed")], dict(to=F16, saturate=0), out_elem=F16, opset=19)
    out.append(Case("cast/saturate0", "Cast", mdl, f))
    mdl, f = node_model("Cast", [("X", vals, "feed")], dict(to=999), out_elem=F16)
    out.append(Case("cast/to-garbage", "Cast", mdl, f))
    return out


def gbq_case(rng, name, rows=8, rbytes=16, block=32, idx=None, idx_dt=np.int64, attrs=None, zp=False, data=None,
             scales=None, zps=None, kinds="init", bits=4):
    per_byte = 8 // bits
    k = rbytes * per_byte
    blocks = -(-k // max(block, 1))
    data = rng.integers(0, 256, (rows, rbytes), dtype=np.uint8) if data is None else data
    scales = rng.uniform(-0.05, 0.05, (rows, blocks)).astype(np.float32) if scales is None else scales
    if zp and zps is None:
        zps = rng.integers(0, 256, (rows, -(-blocks // per_byte)), dtype=np.uint8)
    idx = np.array([[0, 3], [7, 1]]) if idx is None else idx
    at = dict(block_size=block, gather_axis=0, quantize_axis=1, bits=bits)
    at.update(attrs or {})
    at = {kk: v for kk, v in at.items() if v is not None}
    ins = [("data", data, kinds), ("indices", np.asarray(idx).astype(idx_dt), "feed"), ("scales", scales, kinds)]
    if zp:
        ins.append(("zp", zps, kinds))
    mdl, f = node_model("GatherBlockQuantized", ins, at, domain="com.microsoft", out_elem=F32)
    return Case(f"gbq/{name}", "GatherBlockQuantized", mdl, f)


def gen_gbq(rng):
    out = []
    for block in (16, 32, 64, 128):
        for zp in (False, True):
            for dt in (np.int32, np.int64):
                out.append(gbq_case(rng, f"b{block}/zp{int(zp)}/{np.dtype(dt).name}", rbytes=block // 2 * 3, block=block,
                                    zp=zp, idx_dt=dt))
    for idx in ([[-1, -8]], [[8]], [[-9]], [[2 ** 40]], [[-(2 ** 63)]], np.zeros((0,), np.int64), np.zeros((2, 0)), 5,
                [[0, 1], [2, 3]]):
        out.append(gbq_case(rng, f"idx{np.asarray(idx).tolist()}", idx=np.asarray(idx)))
    for block in (8, 15, 0, -32, 256, 48):
        out.append(gbq_case(rng, f"block{block}", block=block))
    for a in (dict(gather_axis=1), dict(quantize_axis=0), dict(gather_axis=-1), dict(gather_axis=2),
              dict(quantize_axis=-1), dict(bits=8), dict(bits=2), dict(gather_axis=-2)):
        out.append(gbq_case(rng, f"attrs{a}", attrs=a))
    out.append(gbq_case(rng, "scales-short", scales=rng.uniform(size=(8, 0)).astype(np.float32)))
    out.append(gbq_case(rng, "scales-rows", scales=rng.uniform(size=(7, 1)).astype(np.float32)))
    out.append(gbq_case(rng, "scales-f16", scales=rng.uniform(size=(8, 1)).astype(np.float16)))
    out.append(gbq_case(rng, "scales-nan", scales=np.full((8, 1), np.nan, np.float32)))
    out.append(gbq_case(rng, "zp-short", zp=True, zps=np.zeros((8, 0), np.uint8)))
    out.append(gbq_case(rng, "data-3d", data=rng.integers(0, 256, (2, 4, 16), dtype=np.uint8),
                        scales=rng.uniform(size=(2, 4, 1)).astype(np.float32), idx=np.array([1, 0])))
    out.append(gbq_case(rng, "data-1d", data=rng.integers(0, 256, (16,), dtype=np.uint8),
                        scales=rng.uniform(size=(1,)).astype(np.float32), idx=np.array([0])))
    out.append(gbq_case(rng, "data-empty", data=np.zeros((0, 16), np.uint8), scales=np.zeros((0, 1), np.float32),
                        idx=np.zeros((0,), np.int64)))
    out.append(gbq_case(rng, "data-int8", data=rng.integers(-8, 8, (8, 16), dtype=np.int8)))
    out.append(gbq_case(rng, "feeds", kinds="feed"))
    out.append(gbq_case(rng, "feeds/idx-oob", kinds="feed", idx=np.array([9])))
    return out


def gen_options(rng):
    out = []
    mdl, f = node_model("MatMul", [("A", rn(rng, 3, 4), "feed"), ("B", rn(rng, 4, 5), "init")])
    opts = [{"threads": v} for v in ("0", "1", "2", "-1", "99999999999999999999", "1e3", "", " 2", "२", "2\x00", "64",
                                     "1025", "0x2")]
    opts += [{"affinity": v} for v in ("", "0", "0-1", "1-0", "0,0", "-1", "0-99999999999", "garbage", "0,", "✓",
                                       "compact", "scatter", "none", "0-1023", "4294967296")]
    opts += [{k: v} for k in ("blocktime_us", "weight_cache_mb", "scratch_cache_mb", "accumulator_cache_mb")
             for v in ("0", "-1", "1e9", "18446744073709551616", "1073741824", "1073741825", "x", "")]
    opts += [{"unknown_option": "1"}, {"threads": "1", "affinity": "0,1"}, {"threads": "3", "affinity": "0"},
             {"THREADS": "1"}, {"threads ": "1"}]
    opts += [{"acc4_scales": v} for v in ("f16", "f32", " f32", "F32", "fp32", "f64", "")]
    valid = [{"threads": v} for v in ("0", "1", "2", " 2", "2\x00", "64")] + [{"affinity": v} for v in ("0", "0-1", "0-1023")]
    valid += [{k: v} for k in ("blocktime_us", "weight_cache_mb", "scratch_cache_mb", "accumulator_cache_mb") for v in ("0",)]
    valid += [{"acc4_scales": v} for v in ("f16", "f32", " f32")]
    valid += [{"weight_cache_mb": "1073741824"}, {"scratch_cache_mb": "1073741824"}, {"accumulator_cache_mb": "1073741824"}, {"threads": "1", "affinity": "0,1"}]
    for o in opts:
        c = Case(f"options/{json.dumps(o, ensure_ascii=True)}", "options", mdl, f, options=o)
        if o not in valid:
            # An invalid option value: a clear refusal naming the option (ORT's CPU EP has no such option).
            c.refuse = "rcpu: unknown provider option" if "unknown" in c.name or o.keys() - {
                "threads", "affinity", "blocktime_us", "weight_cache_mb", "scratch_cache_mb", "accumulator_cache_mb",
                "acc4_scales"} else \
                f"rcpu: provider option '{sorted(o)[-1] if len(o) == 1 else 'affinity'}'"
        out.append(c)
    return out


def gen_parallel(rng):
    """Sizes past the parallel thresholds, with rcpu on 2 and 3 lanes (every other case runs on one)."""
    out = []
    for lanes in ("2", "3"):
        o = {"threads": lanes}
        for sa, sb in (([130, 257], [257, 520]), ([1, 4096], [4096, 300]), ([300, 4096], [4096, 1]),
                       ([3, 67, 129], [129, 260])):
            for kind in ("feed", "init"):
                a = specials(rng, *sa) if kind == "feed" else rn(rng, *sa)
                mdl, f = node_model("MatMul", [("A", a, "feed"), ("B", rn(rng, *sb), kind)])
                out.append(Case(f"par{lanes}/matmul/{sa}x{sb}/{kind}", "MatMul", mdl, f, options=o))
        for ta, tb in ((0, 0), (1, 1)):
            a = rn(rng, *((300, 200) if ta else (200, 300)))
            b = rn(rng, *((500, 300) if tb else (300, 500)))
            mdl, f = node_model("Gemm", [("A", a, "feed"), ("B", b, "init"), ("C", rn(rng, 500), "init")],
                                dict(transA=ta, transB=tb, beta=0.5))
            out.append(Case(f"par{lanes}/gemm/ta{ta}tb{tb}", "Gemm", mdl, f, options=o))
        for acc in (0, 4):
            for m in (1, 64):
                c = nbits_case(rng, f"par{lanes}/m{m}/acc{acc}", 1024, 520, 32, m=m, acc=acc, zp=True, bias=True)
                c.options = o
                out.append(c)
            a = rn(rng, 8, 1024)
            a[2, :] = 3e38
            a[6, ::2] = -3e38
            c = nbits_case(rng, f"par{lanes}/overflow-rows/acc{acc}", 1024, 520, 32, m=8, acc=acc, a=a)
            # numpy in f64 (ORT's f32 sums overflow in an order-dependent way); the finite values
            # of an overflowing row are f32 sums of 1024 terms near f32::MAX that cancel:
            # K * eps * sum|t| / |y| ~ 2e-3 is inherent.
            c.options, c.expect, c.tol = o, [_nbits_ref64(c)], ("l2", 5e-3 if acc == 0 else 2e-2)
            # An exact value within the level's tolerance of f32::MAX may land on either side of it
            # (seen: 3.394e38 from level 4 where the exact value rounds to inf): not compared.
            c.defined = {0: ~_near_f32_max(_nbits_exact(c), c.tol[1])}
            out.append(c)
        mdl, b = models.qlinear_matmul(rng, [64, 256], [256, 260], name=NODE)
        out.append(Case(f"par{lanes}/qlinear", "QLinearMatMul", mdl.SerializeToString(),
                        {"a": rng.integers(0, 256, size=(64, 256)).astype(np.uint8)}, options=o))
        c = gqa_case(rng, f"par{lanes}/prefill", nh=8, kvh=2, hd=64, b=2, s=40, p=0, past=False)
        c.options = o
        out.append(c)
        c = gqa_case(rng, f"par{lanes}/decode", nh=8, kvh=2, hd=64, b=3, s=1, p=100, seqlens=[100, 50, 7])
        c.options = o
        out.append(c)
        for op in ("LayerNormalization", "SimplifiedLayerNormalization"):
            mdl, f = node_model(op, [("X", specials(rng, 64, 4096), "feed"), ("scale", rn(rng, 4096), "init")])
            out.append(Case(f"par{lanes}/{op}", op, mdl, f, options=o))
        mdl, f = node_model("Softmax", [("X", specials(rng, 256, 1000), "feed")], dict(axis=-1))
        out.append(Case(f"par{lanes}/softmax", "Softmax", mdl, f, options=o))
        mdl, f = node_model("Add", [("A", rn(rng, 64, 1, 4096), "feed"), ("B", rn(rng, 32, 4096), "feed")])
        out.append(Case(f"par{lanes}/add-broadcast", "Add", mdl, f, options=o))
    return out


def split_model(x, n_out, opset=18, attrs=None, split=None, kind="init", split_name="split"):
    """X -> Sigmoid -> Split (n0) -> Relu per output: rcpu takes a Split only beside another of its
    nodes (`ep::capability::worth_taking`), so the three make one partition. `split`: the sizes as an
    int64 initializer or feed (`kind`), or with `split_name=""` an omitted second input."""
    ins, inits, feeds = [vi("X", sym("X", x))], [], {"X": x}
    sin = ["S"]
    if split_name == "":
        sin.append("")
    elif split is not None:
        sp = np.asarray(split, np.int64)
        if kind == "init":
            inits.append(numpy_helper.from_array(sp, split_name))
        else:
            ins.append(vi(split_name, sym(split_name, sp), I64))
            feeds[split_name] = sp
        sin.append(split_name)
    pieces = [f"P{i}" for i in range(n_out)]
    nodes = [helper.make_node("Sigmoid", ["X"], ["S"], name="n1"),
             helper.make_node("Split", sin, pieces, name=NODE, **(attrs or {}))]
    nodes += [helper.make_node("Relu", [p], [f"Y{i}"], name=f"relu{i}") for i, p in enumerate(pieces)]
    m = models._model(nodes, ins, [vi(f"Y{i}", None) for i in range(n_out)], inits, opset=opset)
    return m.SerializeToString(), feeds


def gen_split(rng):
    """Split of float32 data (issue 57): where the sizes come from and how ORT reads the odd cases.
    An empty `split` (initializer or feed) is no `split`; `num_outputs` larger than the axis is
    refused; `num_outputs` beside a `split` input is a model ORT refuses; a `num_outputs` that
    disagrees with the outputs is ignored by ORT but for the ceil-sized pieces it selects."""
    out = []
    x62, x72, x32, x42, x02 = (rn(rng, *s) for s in ((6, 2), (7, 2), (3, 2), (4, 2), (0, 2)))
    # The plain forms.
    for kind in ("init", "feed"):
        m, f = split_model(x62, 3, 13, split=[1, 2, 3], kind=kind)
        out.append(Case(f"split/sizes[1,2,3]/{kind}", "Split", m, f))
        m, f = split_model(x62, 3, 13, split=[0, 6, 0], kind=kind)
        out.append(Case(f"split/sizes[0,6,0]/{kind}", "Split", m, f))
        m, f = split_model(x62, 3, 13, split=[4, -1, 3], kind=kind)
        out.append(Case(f"split/sizes[4,-1,3]/{kind}", "Split", m, f))
        m, f = split_model(x62, 3, 13, split=[2, 2, 3], kind=kind)
        out.append(Case(f"split/sizes[2,2,3]/{kind}", "Split", m, f))
    m, f = split_model(x62, 3, 13)
    out.append(Case("split/equal", "Split", m, f))
    m, f = split_model(x72, 3, 13)
    out.append(Case("split/equal-uneven", "Split", m, f))
    m, f = split_model(x72, 3, 18, dict(num_outputs=3))
    out.append(Case("split/num_outputs3-of-7", "Split", m, f))
    m, f = split_model(rn(rng, 2, 7), 2, 18, dict(num_outputs=2, axis=-1))
    out.append(Case("split/num_outputs2-axis-1", "Split", m, f))
    # Class 1: an empty `split` is no `split` (equal pieces), whatever the opset; one of two dims, even
    # empty, is no vector (both refuse).
    for opset in (13, 18):
        for kind in ("init", "feed"):
            for x, n in ((x62, 3), (x72, 3), (x02, 2), (x62, 1)):
                m, f = split_model(x, n, opset, split=np.zeros(0, np.int64), kind=kind)
                out.append(Case(f"split/empty-split/op{opset}/{kind}/{list(x.shape)}/{n}", "Split", m, f))
    for shape in ((0, 1), (1, 0)):
        m, f = split_model(x62, 3, 13, split=np.zeros(shape, np.int64), kind="feed")
        out.append(Case(f"split/split-shape{shape}", "Split", m, f))
    # Class 2: num_outputs larger than the axis (ORT refuses), or pieces that leave the last empty.
    for x, n in ((x32, 4), (x02, 2), (x02, 1), (x42, 3), (x62, 4)):
        m, f = split_model(x, n, 18, dict(num_outputs=n))
        out.append(Case(f"split/num_outputs{n}-of-{x.shape[0]}", "Split", m, f))
    m, f = split_model(x32, 1, 18, dict(num_outputs=4))
    out.append(Case("split/num_outputs4-of-3/1-output", "Split", m, f))
    # Class 3: num_outputs beside a `split` input, even an empty or omitted one (ORT refuses the model);
    # -1 is ORT's "not given".
    for kind in ("init", "feed"):
        m, f = split_model(x62, 3, 18, dict(num_outputs=3), split=[2, 2, 2], kind=kind)
        out.append(Case(f"split/num_outputs+split/{kind}", "Split", m, f))
        m, f = split_model(x62, 3, 18, dict(num_outputs=3), split=np.zeros(0, np.int64), kind=kind)
        out.append(Case(f"split/num_outputs+empty-split/{kind}", "Split", m, f))
    m, f = split_model(x62, 3, 18, dict(num_outputs=3), split_name="")
    out.append(Case("split/num_outputs+omitted-split", "Split", m, f))
    m, f = split_model(x62, 3, 18, dict(num_outputs=-1), split=[1, 2, 3])
    out.append(Case("split/num_outputs-1+split", "Split", m, f))
    # Class 4: num_outputs that disagrees with the outputs: ORT splits over the outputs in ceil-sized
    # pieces, refusing only a value larger than the axis.
    for num in (2, 0, -3, 5, -1, 7):
        m, f = split_model(x62, 3, 18, dict(num_outputs=num))
        out.append(Case(f"split/num_outputs{num}-vs-3-outputs", "Split", m, f))
    for num in (0, -3, 2):
        m, f = split_model(x72, 4, 18, dict(num_outputs=num))
        out.append(Case(f"split/num_outputs{num}-vs-4-outputs-of-7", "Split", m, f))
    # ORT divides by zero (SIGFPE) on an empty axis with num_outputs <= 0 (other than -1): the
    # specification has no such split (num_outputs must be positive), so a clean refusal is the answer.
    for num in (0, -3):
        m, f = split_model(x02, 2, 18, dict(num_outputs=num))
        out.append(Case(f"split/num_outputs{num}-of-0", "Split", m, f, skip_ort=True,
                        refuse="Split node 'n0': num_outputs", why="ORT 1.31.1 dies of SIGFPE"))
    return out


def swiglu_model(rng, k=64, n=48, bs=32, out_name="Y0"):
    """A SwiGLU MLP's gate (n0) and up MatMulNBits over one input X [M, k], then Sigmoid(g) * g * u: one
    fused partition whose combined step streams both weights (`ep::nodes::swiglu`)."""
    g, gi = models._nbits_node(rng, NODE, "X", "g", k, n, bs, 0, bias=False)
    u, ui = models._nbits_node(rng, "up", "X", "u", k, n, bs, 0, bias=False)
    nodes = [g, u, helper.make_node("Sigmoid", ["g"], ["gs"], name="sig"),
             helper.make_node("Mul", ["g", "gs"], ["ga"], name="silu"),
             helper.make_node("Mul", ["ga", "u"], [out_name], name="gate_mul")]
    m = models._model(nodes, [vi("X", ["M", k])], [vi(out_name, None)], gi + ui, ms_opset=1)
    return m.SerializeToString()


def gen_misaligned(rng):
    """Buffers not aligned for their element type (issue 57): numpy views a few bytes into an array
    (ORT reads them in place) and IO-binding output buffers likewise, on the per-node and the fused
    paths; ORT computes them all, through unaligned accesses."""
    out = []
    x = rn(rng, 4, 64)
    for op in ("SimplifiedLayerNormalization", "LayerNormalization"):
        mdl, f = node_model(op, [("X", x, "feed"), ("scale", rn(rng, 64), "feed")])
        out.append(Case(f"misaligned/{op}/X+2", op, mdl, f, misalign={"X": 2}))
        out.append(Case(f"misaligned/{op}/X+2/scale+1", op, mdl, f, misalign={"X": 2, "scale": 1}))
        out.append(Case(f"misaligned/{op}/out+2", op, mdl, f, bind=[((4, 64), np.float32, None)], bind_offset=2))
    mdl, f = node_model("MatMul", [("A", rn(rng, 3, 40), "feed"), ("B", rn(rng, 40, 5), "feed")])
    out.append(Case("misaligned/matmul/A+2/B+3/out+1", "MatMul", mdl, f, misalign={"A": 2, "B": 3},
                    bind=[((3, 5), np.float32, None)], bind_offset=1))
    mdl, f = node_model("Add", [("A", rn(rng, 3, 33), "feed"), ("B", rn(rng, 33), "feed")])
    out.append(Case("misaligned/add/A+1/B+2/out+3", "Add", mdl, f, misalign={"A": 1, "B": 2},
                    bind=[((3, 33), np.float32, None)], bind_offset=3))
    with np.errstate(over="ignore"):
        h = rn(rng, 5, 7).astype(np.float16)
    mdl, f = node_model("Cast", [("X", h, "feed")], dict(to=F32), out_elem=F32)
    out.append(Case("misaligned/cast-f16/X+1/out+2", "Cast", mdl, f, misalign={"X": 1},
                    bind=[((5, 7), np.float32, None)], bind_offset=2))
    # The SwiGLU step of a fused partition: its input (the partition's) and its output (bound).
    for m in (1, 5):
        mdl = swiglu_model(rng)
        f = {"X": rn(rng, m, 64)}
        out.append(Case(f"misaligned/swiglu/m{m}/X+2", "MatMulNBits", mdl, f, misalign={"X": 2}))
        out.append(Case(f"misaligned/swiglu/m{m}/out+2", "MatMulNBits", mdl, f, bind=[((m, 48), np.float32, None)],
                        bind_offset=2))
    c = nbits_case(rng, "misaligned/A+2", 64, 16, 32, m=3, bias=True)
    c.misalign = {"A": 2}
    out.append(c)
    # GatherBlockQuantized indices: int64 4 bytes off, int32 2 bytes off.
    for dt, k in ((np.int64, 4), (np.int64, 2), (np.int32, 2)):
        c = gbq_case(rng, f"misaligned/{np.dtype(dt).name}+{k}", idx_dt=dt)
        c.misalign = {"indices": k}
        out.append(c)
    # GroupQueryAttention: seqlens_k (int32) and the float inputs off; outputs bound off; and a past
    # buffer shared with present (genai's layout) that is itself off.
    for what in ({"seqlens_k": 2}, {"q": 2, "past_k": 1, "total_seq_len": 2}):
        c = gqa_case(rng, f"misaligned/decode/{'+'.join(what)}", b=2, s=1, p=4)
        c.misalign = what
        out.append(c)
    c = gqa_case(rng, "misaligned/prefill/out+2", b=1, s=3, p=0, past=False)
    c.bind, c.bind_offset = [((1, 3, 32), np.float32, None), ((1, 2, 3, 8), np.float32, None),
                             ((1, 2, 3, 8), np.float32, None)], 2
    out.append(c)
    for s_, total in ((1, 9), (1, 10), (3, 12)):
        c = gqa_case(rng, f"misaligned/shared-past/s{s_}/total{total}", b=1, s=s_, p=16, total=total,
                     seqlens=[total - 1])
        c.misalign = {"past_k": 2, "past_v": 2, "q": 2}
        c.bind, c.bind_offset = [((1, s_, 32), np.float32, None), (None, None, "past_k"),
                                 (None, None, "past_v")], 2
        out.append(c)
    return out


def gen_fuse_same(rng):
    """fuse=on against fuse=off (issue 57): the README's promise that a fused partition's results are
    the per-node path's, bit for bit; here where a MatMulNBits takes a following Add's bias into
    itself (`matmul_nbits::fold_bias`) on its literal path (hostile scales: an infinite or huge one)."""
    out = []
    for bad in (np.inf, -np.inf, np.nan, 3e37):
        for m in (1, 5):
            c = nbits_case(rng, f"fuse-same/fold-bias/scale{bad}/m{m}", 64, 40, 32, m=m)
            mdl = onnx.load_from_string(c.model)
            sc = next(t for t in mdl.graph.initializer if t.name == "scales")
            arr = numpy_helper.to_array(sc).copy()
            arr.flat[3] = bad
            sc.CopyFrom(numpy_helper.from_array(arr, "scales"))
            mdl.graph.node[0].output[0] = "Yu"
            mdl.graph.initializer.append(numpy_helper.from_array(rn(rng, 40), "bias"))
            mdl.graph.node.append(helper.make_node("Add", ["Yu", "bias"], ["Y0"], name="bias_add"))
            c.model = mdl.SerializeToString()
            c.options, c.ref_options, c.tol = {"fuse": "on"}, {"fuse": "off"}, ("close", 0.0, 0.0)
            out.append(c)
    # The same with well-behaved scales: the packed paths (decode, prefill) fold the bias too.
    for m in (1, 5, 40):
        c = nbits_case(rng, f"fuse-same/fold-bias/m{m}", 256, 72, 32, m=m)
        mdl = onnx.load_from_string(c.model)
        mdl.graph.node[0].output[0] = "Yu"
        mdl.graph.initializer.append(numpy_helper.from_array(rn(rng, 72), "bias"))
        mdl.graph.node.append(helper.make_node("Add", ["Yu", "bias"], ["Y0"], name="bias_add"))
        c.model = mdl.SerializeToString()
        c.options, c.ref_options, c.tol = {"fuse": "on"}, {"fuse": "off"}, ("close", 0.0, 0.0)
        out.append(c)
    return out


# ------------------------------------------------------------------------------------------------ QMoE

NAN, INF = np.nan, np.inf
# Router logits rows over 8 experts (`gen_qmoe`): whole-row ties, +-0, +-inf, huge, around the 1e-8 cut.
QMOE_TIES = np.array([
    [1, 1, 1, 1, 1, 1, 1, 1],  # all tied: the larger expert indices win
    [0, 3, 3, 0, 3, 0, 0, 0],
    [2, 2, 2, 1, 1, 1, 3, 3],
    [0, 0, 0, 0, 0, 0, 0, -0.0],  # 0.0 == -0.0: a tie
    [-0.0, 0, 0, 0, 0, 0, 0, 0],
    [1e30, -1e30, 3e38, -3e38, 0, 1, 2, 3],
    [3.0, 3.0 - 18.42, 3.0 - 18.43, -50, -60, -70, -80, -90],  # softmax weights around the 1e-8 cut
], np.float32)
QMOE_POSINF = np.array([
    [INF, 1, 2, 3, 4, 5, 6, 7],  # +inf first: exp(inf - inf) = NaN weights, the token gets zeros
    [1, 2, INF, 3, INF, 4, 5, 6],  # two +inf: tied
    [INF] * 8,
    [1, 2, 3, 4, 5, 6, 7, INF],
], np.float32)
QMOE_NEGINF = np.array([
    [-INF, 1, 2, 3, 4, 5, 6, 7],
    [-INF] * 8,  # all -inf: exp(-inf - -inf) = NaN, zeros
    [1, -INF, -INF, -INF, -INF, -INF, -INF, -INF],  # the -inf routes dropped (weight 0)
    [-INF, -INF, 0, -INF, -INF, -INF, -INF, -1],
], np.float32)
QMOE_NAN = qm.NAN_LOGITS
HUGE_E = 2 ** 40


def _qmoe_symbolic(m: onnx.ModelProto) -> onnx.ModelProto:
    """Every graph input's dims symbolic (so a mismatched feed reaches the kernel)."""
    for v in m.graph.input:
        for j, d in enumerate(v.type.tensor_type.shape.dim):
            d.Clear()
            d.dim_param = f"{v.name}_d{j}"
    return m


def _qmoe_set_attrs(m: onnx.ModelProto, **attrs) -> onnx.ModelProto:
    node = m.graph.node[0]
    kept = [a for a in node.attribute if a.name not in attrs]
    del node.attribute[:]
    node.attribute.extend(kept + [helper.make_attribute(k, v) for k, v in attrs.items()])
    return m


def qmoe_case(rng, name, tokens=5, router=None, x=None, rw=None, logit_scale=2.0, symbolic=False, attrs=None,
              edit=None, feeds=None, **spec_kw):
    """A single-node QMoE (`qmoe_models.build`, the node named n0) with `qmoe_models.feeds` for `tokens`
    (an int, or a (B, S) pair with rank=3). `attrs` overrides attributes after building, `edit(model)`
    changes the model in place, `feeds(f)` the feeds; `symbolic` makes every graph input's dims symbolic."""
    spec = qm.QMoESpec(name=NODE, seed=int(rng.integers(1 << 30)), **spec_kw)
    case = qm.build(spec)
    if router is not None and tokens is None:
        tokens = router.shape[0]
    f = qm.feeds(case, tokens, rng, router=router, router_weights=rw, x=x, logit_scale=logit_scale)
    m = onnx.ModelProto()
    m.CopyFrom(case.model)
    if attrs:
        _qmoe_set_attrs(m, **attrs)
    if edit is not None:
        edit(m)
    if symbolic:
        _qmoe_symbolic(m)
    if feeds is not None:
        f = feeds(f)
    lvl4 = spec.accuracy_level == 4 or (attrs or {}).get("accuracy_level") == 4
    # Both sides quantise the activations to int8 at level 4: the looser tolerance there.
    c = Case(f"qmoe/{name}", "QMoE4" if lvl4 else "QMoE", m.SerializeToString(), f)
    c.qmoe = case  # the f64 reference's weights (dropped before the case is returned: see `gen_qmoe`)
    claimable = spec.block is not None and spec.H % spec.block == 0 and spec.I % spec.block == 0
    if spec.bits == 8 and not lvl4 and claimable and edit is None and attrs is None and feeds is None:
        # ORT 1.31.1 runs block-wise 8-bit experts with int8 activations at every level (rel L2 ~1e-2
        # from the definition); rcpu keeps f32 products below level 4: the f64 reference is the answer.
        c.expect = _qmoe_ref(c)
    return c


def _qmoe_ref(c: Case) -> list:
    """qmoe_models' float64 reference of the case (ORT 1.31.1's semantics), as float32."""
    f = c.feeds
    return [qm.qmoe_reference(c.qmoe, f["input"], f["router_probs"], f.get("router_weights")).astype(np.float32)]


def _qmoe_init(m: onnx.ModelProto, name: str):
    return next(t for t in m.graph.initializer if t.name == name)


def gen_qmoe(rng):
    """com.microsoft.QMoE (issue 53): router logits with NaN / +inf / -inf / whole-row ties, k = 1 and
    k = E, experts no token picks, biases absent and present, block sizes 16..256, hidden or expert
    width not a multiple of the block (rcpu declines: ORT's answer), huge expert counts declared in
    the model file, router_probs / input / router_weights shapes that do not match the weights,
    no tokens, 3-D input, the sparse mixer, SwiGLU's limit / alpha / beta, accuracy level 4, hostile
    scales, non-finite activations, the declined forms (row-wise scales, 2-bit, fc3, experts fed at
    run time) and ORT's session-time refusals."""
    out = []
    small = dict(H=32, I=32, E=8, bits=4, block=16, fc2_bias=True)
    # routing: NaN / +inf / -inf / ties, for k = 1, 2 and E (8)
    for k in (1, 2, 8):
        for what, rows in (("ties", QMOE_TIES), ("posinf", QMOE_POSINF), ("neginf", QMOE_NEGINF), ("nan", QMOE_NAN)):
            logits = np.concatenate([rows, rn(rng, 3, 8, scale=2.0)])
            out.append(qmoe_case(rng, f"route/{what}/k{k}", tokens=None, router=logits, k=k, **small))
    for e, k in ((17, 11), (32, 31), (5, 3)):
        logits = rn(rng, 24, e, scale=2.0)
        logits[rng.random(logits.shape) < 0.25] = NAN
        logits[rng.random(logits.shape) < 0.1] = INF
        logits[rng.random(logits.shape) < 0.1] = -INF
        logits[rng.random(logits.shape) < 0.2] = 1.0
        out.append(qmoe_case(rng, f"route/mixed-nonfinite/E{e}k{k}", tokens=None, router=logits,
                             **dict(small, E=e, k=k)))
    out.append(qmoe_case(rng, "route/all-nan", tokens=None, router=np.full((4, 8), NAN, np.float32), k=2, **small))
    out.append(qmoe_case(rng, "route/all-tied", tokens=None, router=np.full((4, 8), 0.5, np.float32), k=3, **small))
    # k = 1 and k = E, one expert and many
    for e, k in ((1, 1), (4, 1), (4, 4), (32, 1), (32, 32), (64, 8)):
        # k = E with flat logits: every expert's weight counts (k = E - 1 would be another answer)
        out.append(qmoe_case(rng, f"k/E{e}k{k}", tokens=9, E=e, k=k, H=64, I=32, block=32, zp=True, fc2_bias=True,
                             logit_scale=0.3 if k == e else 3.0))
    # experts no token picks (and one every token picks)
    for bits in (4, 8):
        logits = rn(rng, 12, 8)
        logits[:, [3, 5]] = -30.0
        logits[:, 0] = 10.0
        out.append(qmoe_case(rng, f"unpicked/b{bits}", tokens=None, router=logits, E=8, k=2, bits=bits, H=64, I=64,
                             block=64 if bits == 8 else 32, zp=True, fc1_bias=True, fc2_bias=True))
    logits = rn(rng, 6, 8)
    logits[:, 7] = 50.0
    out.append(qmoe_case(rng, "unpicked/only-expert7-k1", tokens=None, router=logits, E=8, k=1, fc1_bias=True,
                         H=32, I=32, block=16))
    # biases absent and present, both widths
    for bits in (4, 8):
        for b1, b2 in ((False, False), (True, False), (False, True), (True, True)):
            out.append(qmoe_case(rng, f"bias/b{bits}/fc1{int(b1)}-fc2{int(b2)}", tokens=7, bits=bits, fc1_bias=b1,
                                 fc2_bias=b2, zp=bits == 8))
    # block sizes (hidden and expert width multiples of it), zero points on and off
    for bits in (4, 8):
        for block, h, i in ((16, 48, 80), (32, 96, 64), (64, 128, 64), (128, 128, 256), (256, 256, 256)):
            for zp in (False, True):
                out.append(qmoe_case(rng, f"block/b{bits}/bs{block}/H{h}I{i}/zp{int(zp)}", tokens=6, bits=bits,
                                     block=block, H=h, I=i, E=4 if block < 128 else 2, zp=zp, fc1_bias=zp,
                                     fc2_bias=True, act="swiglu", alpha=1.702, beta=1.0, limit=7.0, gain=4.0))
    # hidden / expert width not a multiple of the block: partial last blocks (rcpu declines: ORT's answer)
    for bits in (4, 8):
        for block, h, i in ((32, 48, 64), (64, 128, 80), (16, 40, 16), (128, 200, 128)):
            out.append(qmoe_case(rng, f"partial-block/b{bits}/bs{block}/H{h}I{i}", tokens=5, bits=bits, block=block,
                                 H=h, I=i, zp=True, fc1_bias=True))
    out.append(qmoe_case(rng, "partial-block/acc4", tokens=5, block=64, H=48, I=80, accuracy_level=4))
    # no tokens, 3-D input
    for t in (0, (0, 3), (2, 0), (1, 1), (2, 5), (3, 1)):
        rank = 2 if isinstance(t, int) else 3
        out.append(qmoe_case(rng, f"tokens/{t}", tokens=t, rank=rank, E=6, k=2, fc1_bias=True, fc2_bias=True))
        out.append(qmoe_case(rng, f"tokens/{t}/symbolic", tokens=t, rank=rank, E=6, k=2, symbolic=True))
    # the sparse mixer (ORT: k = 2 only; routes as without it), normalisation without router_weights
    out.append(qmoe_case(rng, "sparse-mixer/k2", tokens=9, sparse_mixer=1, k=2, fc2_bias=True))
    out.append(qmoe_case(rng, "sparse-mixer/k2/nan-logits", tokens=None, router=QMOE_NAN, sparse_mixer=1, k=2,
                         **small))
    out.append(qmoe_case(rng, "sparse-mixer/k3", tokens=3, sparse_mixer=1, k=3))  # ORT refuses at creation
    out.append(qmoe_case(rng, "sparse-mixer/k1", tokens=3, sparse_mixer=1, k=1))
    out.append(qmoe_case(rng, "normalize-without-router-weights", tokens=5, normalize=1, k=3))
    # router_weights: hostile values, normalised or not
    for norm in (0, 1):
        rw = rng.uniform(0, 1, (8, 6)).astype(np.float32)
        rw[0] = 0
        rw[1] = -rw[1]
        rw[2, :3] = -rw[2, :3]
        rw[3, 2] = NAN
        rw[4, 4] = INF
        rw[5] = -INF
        rw[6] = [1e-8, 1e-8, 1e-8, 0.5, 0.5, 0.5]
        rw[7] = [1e-9, 2e-9, 4e-9, 0.5, 0.5, 0.5]
        logits = rn(rng, 8, 6)
        logits[6:] = [3, 2, 1, 0, 0, 0]
        out.append(qmoe_case(rng, f"router-weights/normalize{norm}", tokens=None, router=logits, rw=rw, E=6, k=3,
                             router_weights=True, normalize=norm, fc1_bias=True, fc2_bias=True))
    # SwiGLU's limit / alpha / beta, and the other activations (the swiglu parameters ignored there)
    for nm, kw in (("gptoss", dict(alpha=1.702, beta=1.0, limit=7.0, gain=4.0)), ("limit0", dict(limit=0.0)),
                   ("limit-nan", dict(limit=float("nan"))), ("limit1e-3", dict(limit=1e-3, gain=4.0)),
                   ("limit-inf", dict(limit=float("inf"))), ("alpha0", dict(alpha=0.0)),
                   ("alpha-neg-beta-neg", dict(alpha=-1.702, beta=-3.0, limit=5.0)),
                   ("alpha-huge", dict(alpha=1e30, beta=1e30)), ("beta-inf", dict(beta=float("inf")))):
        out.append(qmoe_case(rng, f"swiglu/{nm}", tokens=9, fc1_bias=True, fc2_bias=True, **kw))
    for nm, lim in (("limit-1", -1.0), ("limit-neg-inf", float("-inf"))):
        # ORT 1.31.1 (built with _GLIBCXX_ASSERTIONS) aborts in std::clamp(lin, -limit, limit) when
        # -limit > limit: the f64 reference evaluates the clamp expression libstdc++ compiles.
        c = qmoe_case(rng, f"swiglu/{nm}", tokens=5, fc1_bias=True, limit=lim)
        c.skip_ort, c.expect = True, _qmoe_ref(c)
        out.append(c)
    for act in ("silu", "gelu", "relu", "identity"):
        out.append(qmoe_case(rng, f"act/{act}", tokens=9, act=act, alpha=3.0, beta=2.0, limit=0.5, fc1_bias=True,
                             fc2_bias=True))
    # accuracy level 4 (int8 activations) and the levels ORT treats as 0
    for bits in (4, 8):
        for zp in (False, True):
            out.append(qmoe_case(rng, f"acc4/b{bits}/zp{int(zp)}", tokens=17, bits=bits, zp=zp, accuracy_level=4,
                                 H=128, I=64, E=8, k=2, fc1_bias=True, fc2_bias=True, alpha=1.702, beta=1.0,
                                 limit=7.0, gain=4.0))
    out.append(qmoe_case(rng, "acc4/nan-logits", tokens=None, router=QMOE_NAN, accuracy_level=4, **small))
    for acc in (-1, 1, 2, 3, 5, 100):
        out.append(qmoe_case(rng, f"acc{acc}", tokens=5, accuracy_level=acc, fc1_bias=True))
    # non-finite and extreme activations
    for acc in (0, 4):
        def nonfinite(f, acc=acc):
            x = f["input"]
            # No NaN among finite values at level 4 (int8 activations): ORT 1.31.1 quantises it to a
            # code its SIMD conversion makes up, rcpu to 0; both answer finite values, neither the f32
            # answer (a NaN row), and they differ (MatMulNBits at level 4 alike): not compared.
            x[0, 3] = NAN if acc == 0 else 0.5
            x[1, 5], x[2, 7] = INF, -INF
            x[3, :], x[4, :] = 1e30, -1e30
            x[5, :] = 1e-42
            return f
        for act in ("swiglu", "relu"):
            out.append(qmoe_case(rng, f"input-nonfinite/{act}/acc{acc}", tokens=7, act=act, accuracy_level=acc,
                                 fc2_bias=True, feeds=nonfinite))
    # hostile scales (rcpu computes such an expert literally): an infinite / NaN / huge / zero scale in
    # the expert every token takes. The activations are small (1e-2) so that no f32 sum of the huge
    # weights (|w| up to 2.4e38) overflows: where one does, its infinities depend on the order of the
    # sum (seen: NaN in 20 places for rcpu, 30 for ORT), as `gen_nbits`' a-huge cases.
    for bad in (INF, NAN, 3e37, -3e37, 0.0):
        def set_scale(m, bad=bad):
            t = _qmoe_init(m, "fc1_s")
            a = numpy_helper.to_array(t).copy()
            a[1, 3, 0] = bad
            t.CopyFrom(numpy_helper.from_array(a, "fc1_s"))
        logits = rn(rng, 6, 4)
        logits[:, 1] = 10.0  # every token routes through expert 1
        out.append(qmoe_case(rng, f"scales/fc1-{bad}", tokens=None, router=logits, x=rn(rng, 6, 64, scale=1e-2),
                             E=4, k=2, edit=set_scale, fc1_bias=True))
    out.append(qmoe_case(rng, "scales/f16", tokens=7, scales_f16=True, bits=4, zp=True, fc1_bias=True))
    # shapes that do not match the weights (graph inputs symbolic so the feeds reach the kernel)
    def feed(**kw):
        def f(d):
            d.update(kw)
            return d
        return f
    E4 = dict(E=4, k=2, fc1_bias=True, symbolic=True)
    out.append(qmoe_case(rng, "shape/router-experts-5-of-4", tokens=3, feeds=feed(router_probs=rn(rng, 3, 5)), **E4))
    out.append(qmoe_case(rng, "shape/router-experts-3-of-4", tokens=3, feeds=feed(router_probs=rn(rng, 3, 3)), **E4))
    out.append(qmoe_case(rng, "shape/router-rows", tokens=3, feeds=feed(router_probs=rn(rng, 2, 4)), **E4))
    out.append(qmoe_case(rng, "shape/router-1d", tokens=1, feeds=feed(router_probs=rn(rng, 4)), **E4))
    out.append(qmoe_case(rng, "shape/router-3d", tokens=3, feeds=feed(router_probs=rn(rng, 1, 3, 4)), **E4))
    out.append(qmoe_case(rng, "shape/router-empty-experts", tokens=3, feeds=feed(router_probs=rn(rng, 3, 0)), **E4))
    out.append(qmoe_case(rng, "shape/router-huge-experts-no-tokens", tokens=0,
                         feeds=feed(router_probs=np.zeros((0, HUGE_E), np.float32)), **E4))
    out.append(qmoe_case(rng, "shape/hidden-32-of-64", tokens=3, feeds=feed(input=rn(rng, 3, 32)), **E4))
    out.append(qmoe_case(rng, "shape/input-1d", tokens=1, feeds=feed(input=rn(rng, 64)), **E4))
    out.append(qmoe_case(rng, "shape/input-4d", tokens=1, feeds=feed(input=rn(rng, 1, 1, 1, 64)), **E4))
    out.append(qmoe_case(rng, "shape/router-weights-rows", tokens=3, router_weights=True,
                         feeds=feed(router_weights=rng.uniform(size=(2, 4)).astype(np.float32)), **E4))
    out.append(qmoe_case(rng, "shape/k5-of-4", tokens=3, **dict(E4, k=5)))
    # huge expert counts declared in the model file
    def huge_dims(names, e=HUGE_E):
        def ed(m):
            for n in names:
                _qmoe_init(m, n).dims[0] = e
        return ed
    out.append(qmoe_case(rng, "huge-E/fc1-weights-dims", tokens=3, edit=huge_dims(["fc1_w"])))
    out.append(qmoe_case(rng, "huge-E/all-expert-tensors-dims", tokens=3,
                         edit=huge_dims(["fc1_w", "fc1_s", "fc2_w", "fc2_s", "fc1_b"]), fc1_bias=True))
    out.append(qmoe_case(rng, "huge-E/2^62-dims", tokens=3, edit=huge_dims(["fc1_w", "fc1_s", "fc2_w", "fc2_s"],
                                                                         2 ** 62)))

    def router_decl(e):
        def ed(m):
            m.graph.input[1].type.tensor_type.shape.dim[1].dim_value = e
        return ed
    out.append(qmoe_case(rng, "huge-E/router-declared", tokens=3, edit=router_decl(HUGE_E)))
    out.append(qmoe_case(rng, "huge-E/router-declared/no-tokens", tokens=0, edit=router_decl(HUGE_E),
                         feeds=feed(router_probs=np.zeros((0, HUGE_E), np.float32))))

    def zero_size(e, h=64):
        def ed(m):
            raw = lambda name, dims, dt: helper.make_tensor(name, dt, dims, vals=b"", raw=True)  # noqa: E731
            keep = [t for t in m.graph.initializer if t.name not in ("fc1_w", "fc1_s", "fc2_w", "fc2_s")]
            del m.graph.initializer[:]
            m.graph.initializer.extend(keep + [raw("fc1_w", [e, 0, h // 2], U8), raw("fc1_s", [e, 0, h // 32], F32),
                                               raw("fc2_w", [e, h, 0], U8), raw("fc2_s", [e, h, 0], F32)])
            m.graph.input[1].type.tensor_type.shape.dim[1].dim_value = e
        return ed
    for e in (HUGE_E, 2 ** 60):  # 2 ** 60 float32s: numpy's largest shape with a zero beside it
        out.append(qmoe_case(rng, f"huge-E/zero-size-experts/E{e}", tokens=0, edit=zero_size(e),
                             feeds=feed(router_probs=np.zeros((0, e), np.float32))))
    # many real experts (E = 512, every one a cache entry per projection), k = 1 and k = E
    for k in (1, 512):
        out.append(qmoe_case(rng, f"many-experts/E512k{k}", tokens=4, E=512, k=k, H=16, I=16, block=16,
                             logit_scale=1.0))
    # declined forms (rcpu leaves the node to ORT: ORT's answer, or ORT's error, on both sides)
    out.append(qmoe_case(rng, "declined/row-wise-scales", tokens=5, block=None, zp=True))
    out.append(qmoe_case(rng, "declined/row-wise-8bit", tokens=5, block=None, bits=8))
    out.append(qmoe_case(rng, "declined/bits2", tokens=5, bits=2, block=32, zp=True))
    out.append(qmoe_case(rng, "declined/fc3", tokens=3, fc3=True))  # ORT: NOT_IMPLEMENTED at run time

    def weights_fed(m):
        inits = {t.name: t for t in m.graph.initializer}
        for n in ("fc1_w", "fc1_s"):
            t = inits[n]
            m.graph.input.append(helper.make_tensor_value_info(n, t.data_type, ["E"] + list(t.dims[1:])))
        keep = [t for t in m.graph.initializer if t.name not in ("fc1_w", "fc1_s")]
        del m.graph.initializer[:]
        m.graph.initializer.extend(keep)
    c = qmoe_case(rng, "declined/experts-fed", tokens=5, edit=weights_fed)
    init = {t.name: numpy_helper.to_array(t) for t in c.qmoe.model.graph.initializer}
    c.feeds.update(fc1_w=init["fc1_w"], fc1_s=init["fc1_s"])
    out.append(c)

    def fc1_8bit(m):
        # fc1 8-bit, fc2 4-bit: ORT 1.31.1 fails at run time ("Mixed-width QMoE execution is not yet
        # implemented on CPU"); rcpu declines mixed widths
        c8 = qm.build(qm.QMoESpec(name=NODE, act="silu", bits=8))
        for t in m.graph.initializer:
            if t.name in ("fc1_w", "fc1_s"):
                t.CopyFrom(_qmoe_init(c8.model, t.name))
    out.append(qmoe_case(rng, "declined/mixed-widths", tokens=3, act="silu", edit=fc1_8bit,
                         attrs=dict(fc1_expert_weight_bits=8, fc2_expert_weight_bits=4)))
    out.append(qmoe_case(rng, "attrs/mixed-widths-shapes-4bit", tokens=3, act="silu",
                         attrs=dict(fc1_expert_weight_bits=8, fc2_expert_weight_bits=4)))

    def to_f16(m):
        # float16 activations (and biases): rcpu declines them
        for v in list(m.graph.input) + list(m.graph.output):
            v.type.tensor_type.elem_type = F16
        t = _qmoe_init(m, "fc1_b")
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), "fc1_b"))

    def f16_feeds(f):
        return {k: v.astype(np.float16) for k, v in f.items()}
    c = qmoe_case(rng, "declined/f16-activations", tokens=5, fc1_bias=True, edit=to_f16, feeds=f16_feeds)
    c.tol = ("l2", 1e-3)
    out.append(c)
    # attributes ORT refuses when the session is created (block512: at run time, the scales' shape)
    for nm, at in (("k0", dict(k=0)), ("k-neg", dict(k=-1)), ("block24", dict(block_size=24)),
                   ("block8", dict(block_size=8)), ("block512", dict(block_size=512)),
                   ("bits3", dict(expert_weight_bits=3)),
                   ("activation-bogus", dict(activation_type="bogus")), ("swiglu-fusion2", dict(swiglu_fusion=2)),
                   ("swiglu-fusion0", dict(swiglu_fusion=0))):
        out.append(qmoe_case(rng, f"attrs/{nm}", tokens=3, attrs=at))
    # the unpacked path (a weight budget of 0) and 2 / 3 lanes
    for o in ({"weight_cache_mb": "0"}, {"threads": "2"}, {"threads": "3"}):
        for bits in (4, 8):
            c = qmoe_case(rng, f"options/{json.dumps(o)}/b{bits}", tokens=None, router=np.concatenate(
                [QMOE_NAN, QMOE_TIES, rn(rng, 40, 8)]), E=8, k=2, bits=bits, H=128, I=64, block=32, zp=True,
                fc1_bias=True, fc2_bias=True)
            c.options = o
            out.append(c)
    for c in out:
        del c.qmoe  # the reference's weights stay here (Case is pickled for the child processes)
    return out


GENERATORS = [gen_matmul, gen_gemm, gen_nbits, gen_qlinear, gen_gqa, gen_rope, gen_norms, gen_softmax, gen_reshape,
              gen_elementwise, gen_activation, gen_cast, gen_gbq, gen_options, gen_parallel,
              # Last: the shared generator's draws for the cases above stay as they were.
              gen_8bit, gen_split, gen_misaligned, gen_fuse_same, gen_qmoe]


def all_cases(seed: int = 13) -> list[Case]:
    rng = np.random.default_rng(seed)
    cases = []
    for g in GENERATORS:
        cases += g(rng)
    names = [c.name for c in cases]
    dup = {n for n in names if names.count(n) > 1}
    assert not dup, f"duplicate case names {sorted(dup)[:5]}"
    for c in cases:
        c.tol = c.tol or TOLS[c.op]
    return cases


# ------------------------------------------------------------------------------------------------ child


def _compare(want, got, tol):
    if len(want) != len(got):
        return f"{len(got)} outputs, ORT {len(want)}"
    for i, (w, g) in enumerate(zip(want, got)):
        w, g = np.asarray(w), np.asarray(g)
        if w.shape != g.shape:
            return f"output {i}: shape {g.shape}, ORT {w.shape}"
        if w.dtype != g.dtype:
            return f"output {i}: dtype {g.dtype}, ORT {w.dtype}"
        if w.dtype.kind in "iub":
            if not np.array_equal(w, g):
                d = np.abs(w.astype(np.int64) - g.astype(np.int64))
                if tol[0] == "close" and d.max() <= tol[2]:
                    continue
                return f"output {i}: max int diff {d.max()}"
            continue
        w64, g64 = w.astype(np.float64), g.astype(np.float64)
        if not np.array_equal(np.isnan(w64), np.isnan(g64)):
            return f"output {i}: NaN positions differ ({int(np.isnan(g64).sum())} vs ORT {int(np.isnan(w64).sum())})"
        inf_w, inf_g = np.isinf(w64), np.isinf(g64)
        if not np.array_equal(inf_w, inf_g) or not np.array_equal(w64[inf_w], g64[inf_g]):
            return f"output {i}: infinities differ"
        fin = np.isfinite(w64)
        wf, gf = w64[fin], g64[fin]
        if wf.size == 0:
            continue
        if tol[0] == "l2":
            den = max(np.linalg.norm(wf), 1e-30)
            e = np.linalg.norm(wf - gf) / den
            if e > tol[1] and np.abs(wf - gf).max() > 1e-6:
                return f"output {i}: rel_l2 {e:.3g} > {tol[1]}"
        else:
            bad = np.abs(wf - gf) > tol[2] + tol[1] * np.abs(wf)
            if bad.any():
                j = int(np.flatnonzero(bad)[0])
                return f"output {i}: {int(bad.sum())} values off, e.g. {gf[j]} vs ORT {wf[j]}"
    return None


def run_case(c: Case, devices) -> dict:
    import onnxruntime as ort

    def so():
        s = ort.SessionOptions()
        s.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
        s.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        s.log_severity_level = 4
        s.intra_op_num_threads = 1
        return s

    def rcpu_session(options):
        s = so()
        opts = {"threads": "1"}
        opts.update(options)  # cases past the parallel thresholds set 2 or 3 lanes
        s.add_provider_for_devices(devices, opts)
        return ort.InferenceSession(c.model, s, enable_fallback=0)

    def run(sess):
        if not c.misalign and c.bind is None:
            return sess.run(None, c.feeds)
        # Each arm its own copies: a bound output may write into an input's buffer.
        feeds = {k: off_by(v, c.misalign.get(k, 0)) for k, v in c.feeds.items()}
        if c.bind is None:
            return sess.run(None, feeds)
        io = sess.io_binding()
        for k, v in feeds.items():
            io.bind_cpu_input(k, v)
        bufs = []
        for o, (shape, dt, share) in zip(sess.get_outputs(), c.bind):
            b = feeds[share] if share else off_by(np.zeros(shape, dt), c.bind_offset)
            io.bind_output(o.name, "cpu", 0, b.dtype.type, list(b.shape), b.ctypes.data)
            bufs.append(b)
        sess.run_with_iobinding(io)
        return [np.array(b) for b in bufs]

    res = {"name": c.name}
    outs = {}
    on_rcpu = False
    for which in ("cpu", "rcpu"):
        if which == "cpu" and c.skip_ort:
            outs["cpu"] = ("ok", c.expect)
            continue
        stage = "session"
        try:
            if which == "cpu" and c.ref_options is not None:
                sess = rcpu_session(c.ref_options)
            elif which == "cpu":
                sess = ort.InferenceSession(c.model, so(), providers=["CPUExecutionProvider"])
            else:
                sess = rcpu_session(c.options)
                for sg in sess.get_provider_graph_assignment_info():
                    if sg.ep_name == "RcpuExecutionProvider":
                        on_rcpu = on_rcpu or any(n.name == NODE for n in sg.get_nodes())
            stage = "run"
            outs[which] = ("ok", run(sess))
        except Exception as e:  # noqa: BLE001 (every error is a classified outcome)
            outs[which] = ("err", f"[{stage}] {e}")
    res["on_rcpu"] = on_rcpu
    cpu, rc = outs["cpu"], outs["rcpu"]
    if c.expect is not None:
        cpu = ("ok", c.expect)
    res["cpu"] = cpu[0] if cpu[0] == "ok" else cpu[1][:300]
    res["rcpu"] = rc[0] if rc[0] == "ok" else rc[1][:400]
    if c.declined and not on_rcpu:
        res["class"] = "declined"
        return res
    if c.refuse:
        # ORT's answer is garbage here (or the option is invalid): a clear refusal is the answer.
        res["class"] = "refuse-ok" if rc[0] == "err" and c.refuse in rc[1] else "accepts"
        return res
    if cpu[0] == "err" and rc[0] == "err" and cpu[1] == rc[1]:
        res["class"] = "both-refuse"  # ORT's own validation (feed vs declared shape), before any kernel
        return res
    if cpu[0] == "ok" and rc[0] == "ok":
        want, got = list(cpu[1]), list(rc[1])
        for i, m in c.defined.items():
            # Elements ORT leaves as it found them (uninitialized memory): not an answer.
            if i < len(want) and i < len(got) and want[i].shape == got[i].shape == m.shape:
                want[i], got[i] = want[i][m], got[i][m]
        d = _compare(want, got, c.tol)
        res["class"] = "wrong" if d else "agree"
        if d:
            res["detail"] = d
    elif cpu[0] == "ok":
        res["class"] = "refusal"
    elif rc[0] == "ok":
        res["class"] = "accepts" if cpu[1].startswith("[run]") else "accepts-invalid-model"
    else:
        res["class"] = "both-refuse"
        msg = rc[1]
        own = msg.split("Status Message:", 1)[1] if "Status Message:" in msg else msg
        if on_rcpu and msg.startswith("[run]") and NODE not in own:
            res["class"] = "unnamed"
    return res


def child_main(path: str, start: int, stop: int) -> None:
    import onnxruntime as ort

    ort.set_default_logger_severity(4)
    with open(path, "rb") as fh:
        cases = pickle.load(fh)
    ort.register_execution_provider_library("rcpu", os.environ["RCPU_PLUGIN"])
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "RcpuExecutionProvider"]
    for i in range(start, stop):
        print(json.dumps({"start": i}), flush=True)
        r = run_case(cases[i], devices)
        r["i"] = i
        print(json.dumps(r), flush=True)


# ----------------------------------------------------------------------------------------------- parent


def _child(path, start, stop, timeout, env):
    cmd = [sys.executable, os.path.abspath(__file__), "child", path, str(start), str(stop)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        return p.stdout, p.returncode, False, p.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return out, None, True, ""


def run_all(cases: list[Case], plugin: str, batch: int = 60, per_case_s: float = 20.0) -> list[dict]:
    """Runs every case in child processes; returns one result dict per case (with "class")."""
    env = dict(os.environ, RCPU_PLUGIN=plugin, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.path.dirname(os.path.abspath(__file__)) + os.pathsep + env.get("PYTHONPATH", "")
    results: dict[int, dict] = {}
    with tempfile.TemporaryDirectory() as td:
        path = os.path.join(td, "cases.pkl")
        with open(path, "wb") as fh:
            pickle.dump(cases, fh)
        i = 0
        while i < len(cases):
            stop = min(i + batch, len(cases))
            out, rc, hung, err = _child(path, i, stop, per_case_s * (stop - i) + 30, env)
            last = None
            for line in out.splitlines():
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if "start" in r:
                    last = r["start"]
                else:
                    results[r["i"]] = r
            if all(j in results for j in range(i, stop)):
                i = stop
                continue
            # The child died or hung in case `last` (or before the first one): rerun it alone.
            bad = last if last is not None and last not in results else i
            out1, rc1, hung1, err1 = _child(path, bad, bad + 1, per_case_s + 30, env)
            done = [json.loads(x) for x in out1.splitlines() if x.startswith("{") and '"class"' in x]
            if done:
                results[bad] = done[0]
                results[bad]["note"] = f"passed alone; its batch child ended with {rc} (hung={hung}) {err[-300:]}"
            else:
                cls = "hang" if hung1 else "crash"
                results[bad] = {"i": bad, "name": cases[bad].name, "class": cls,
                                "detail": f"rc {rc1}; stderr tail: {err1[-500:]}"}
            i = bad + 1
    return [results[j] for j in range(len(cases))]


FINDINGS = ("crash", "hang", "wrong", "refusal", "accepts", "unnamed", "accepts-invalid-model")


def summary(results: list[dict]) -> dict:
    counts: dict[str, int] = {}
    for r in results:
        counts[r["class"]] = counts.get(r["class"], 0) + 1
    return counts


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        sys.exit(0)
    plugin = os.environ.get("RCPU_PLUGIN") or os.path.join(models.__file__, "../../../target/release/librcpu_ep.so")
    cs = all_cases()
    only = sys.argv[1] if len(sys.argv) > 1 else ""
    cs = [c for c in cs if only in c.name]
    res = run_all(cs, os.path.abspath(plugin))
    print(json.dumps(summary(res)))
    for r in res:
        if r["class"] in FINDINGS:
            print(json.dumps(r))
