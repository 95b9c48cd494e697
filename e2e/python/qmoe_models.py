"""com.microsoft.QMoE model builder and float64 numpy reference (the semantics of ORT 1.31.1's CPU EP).

`build(QMoESpec(...))` makes a single-node model (opset 21 + com.microsoft 1) whose expert weights,
scales, zero points and biases are initializers, with random integer codes over the whole code range.
`qmoe_reference(case, x, router_probs, router_weights)` recomputes the node in float64 following ORT
1.31.1's CPU kernel (`contrib_ops/cpu/moe/moe_quantization_cpu.cc`). Every point below was checked
by running the 1.31.1 wheel (test_qmoe.py pins them):

inputs by index: 0 input [T, H] or [B, S, H] (tokens = T or B*S), 1 router_probs [tokens, E] (logits),
  2 fc1_experts_weights uint8 [E, fc1_out, H*bits/8], 3 fc1_scales [E, fc1_out] (no block_size) or
  [E, fc1_out, ceil(H/block)], 4 fc1_experts_bias [E, fc1_out], 5 fc2_experts_weights [E, H, I*bits/8],
  6 fc2_scales, 7 fc2_experts_bias [E, H], 8-10 fc3 (ORT CPU: NOT_IMPLEMENTED at run time),
  11 fc1_zero_points, 12 fc2_zero_points, 13 fc3_zero_points, 14 router_weights [tokens, E].
  fc1_out = 2*I for swiglu (ORT's shape check), I otherwise. E comes from router_probs' last dim; the
  weights' E must equal it (else a run-time shape error).
dequant: W[n, kk] = (q[n, kk] - zp) * scale[n, kk // block]; 2/4-bit codes 8/bits a byte along K, the
  even kk in the low bits. Default zero point 2^(bits-1) (8 for 4-bit, 128 for 8-bit). Block-wise zero
  points [E, N, ceil(blocks*bits/8)] (even block in the low nibble), also with one block a row
  ([E, N, 1]); row-wise zero points [E, ceil(N*bits/8)] (4-bit: even row n in the low nibble).
  H or I not a multiple of block_size is accepted (the last block is partial, ceil(K/block) scales).
numerics: 4-bit block-wise experts use int8 activations at accuracy_level 4 (rel L2 ~1e-2 from the f64
  reference), f32 at every other level (-1, 0..3, 5: ~3e-7); 8-bit block-wise experts use int8
  activations at EVERY level (~1e-2). Each projection decides alone: one whose K is not a multiple of
  block_size, row-wise scales, and 2-bit experts are always f32 (~3e-7).
routing (per token): (logit, index) pairs, std::partial_sort(first k, std::greater<>) - libstdc++'s
  heap_select + sort_heap with C++20 pair comparison, emulated exactly here (`ort_topk`): distinct
  non-NaN logits come out in descending order and exact ties (0.0 == -0.0 too) put the LARGER expert
  index first; a NaN compares `unordered` with everything (no index tie-break either), so where it
  ends up is whatever the heap algorithm makes of it (reproduced exactly by `ort_topk`).
  weights: softmax over the k selected logits only, in float32: exp(l_j - l_first) / sum (inv_sum = 0
  when the sum is 0). With router_weights: the router_weights gathered at the chosen experts, divided
  by their float32 sum (0 when the sum is 0) only if normalize_routing_weights == 1 (negative values
  are kept and take part in the sum).
  A route whose float32 weight is not > 1e-8 (NaN, 0, negative) is skipped entirely (no bias either).
  So without router_weights a token whose top-k holds a NaN, whose first logit is +inf, or whose k
  selected logits are all -inf gets an all-zero output row (never NaN); a -inf next to a finite
  first logit only drops that route.
  normalize_routing_weights without router_weights and use_sparse_mixer change nothing
  (use_sparse_mixer=1 with k != 2 fails session creation: "Sparse mixer only supports k=2").
fc1: C1 = x . W1^T + b1. swiglu (swiglu_fusion=1, interleaved): gate = C1[2i], lin = C1[2i+1];
  gate = std::min(gate, limit); lin = std::clamp(lin, -limit, limit) (NaN passes through both);
  a = gate * sigmoid(alpha * gate) * (lin + beta). alpha default 1.0, beta 0.0, limit +inf.
  relu std::max(0, x) (NaN -> 0); gelu 0.5x(1+tanh(0.7978845608(x+0.044715x^3))); silu x*sigmoid(x);
  identity x.
fc2: C2 = a . W2^T + b2; output[token] += weight * C2, outputs start at 0 (a token with no route is 0).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 10
OPSET = 21
F32 = TensorProto.FLOAT
ACTIVATIONS = ("swiglu", "silu", "gelu", "relu", "identity")
# Router logit rows of 8 experts with NaN where ORT's partial sort leaves it (first, second, last,
# middle, everywhere, beside infinities): the rows test_qmoe.py and adversarial.py both route.
NAN, INF = float("nan"), float("inf")
NAN_LOGITS = np.array([
    [NAN, 1, 2, 3, 4, 5, 6, 7],
    [1, NAN, 2, 3, 4, 5, 6, 7],
    [7, 6, 5, 4, 3, 2, 1, NAN],
    [1, 2, 3, NAN, 5, 6, 7, 0],
    [NAN] * 8,
    [NAN, INF, -INF, NAN, 1, 1, 1, NAN],
], np.float32)


@dataclass
class QMoESpec:
    H: int = 64
    I: int = 32  # noqa: E741 (inter size, ORT's name)
    E: int = 4
    k: int = 2
    bits: int = 4
    block: int | None = 32  # None: no block_size attribute (row-wise scales [E, N])
    act: str = "swiglu"
    fusion: int | None = None  # swiglu_fusion attribute; None: 1 for swiglu, absent otherwise
    alpha: float | None = None  # activation_alpha (absent: ORT's 1.0)
    beta: float | None = None  # activation_beta (absent: 0.0)
    limit: float | None = None  # swiglu_limit (absent: +inf)
    fc1_bias: bool = False
    fc2_bias: bool = False
    zp: bool | str = False  # True: both projections; "fc1" / "fc2": that one only
    normalize: int | None = None  # normalize_routing_weights attribute (absent: 0)
    sparse_mixer: int | None = None  # use_sparse_mixer attribute (absent: 0)
    router_weights: bool = False  # input 14
    scales_f16: bool = False  # float16 scales (what the model builder writes), float32 otherwise
    accuracy_level: int | None = None
    rank: int = 2  # input rank: 2 [T, H] or 3 [B, S, H]
    fc3: bool = False  # add fc3 weights / scales (input 8, 9): ORT CPU refuses at run time
    gain: float = 2.0  # target std of the fc1 outputs for unit-normal x
    seed: int = 0
    name: str = "qmoe0"
    extra_attrs: dict = field(default_factory=dict)

    @property
    def fusion_eff(self) -> int:
        if self.fusion is not None:
            return self.fusion
        return 1 if self.act == "swiglu" else 0

    @property
    def fc1_out(self) -> int:
        return self.I * (2 if self.fusion_eff > 0 else 1)

    def replace(self, **kw) -> "QMoESpec":
        return dataclasses.replace(self, **kw)


@dataclass
class Projection:
    """One projection's quantized experts: codes uint8 [E, N, K] (unpacked), zero points and scales
    per (expert, row, block) [E, N, blocks]; `w(e)` dequantizes expert e in float64."""

    codes: np.ndarray
    zps: np.ndarray
    scales: np.ndarray
    block: int | None

    cache: dict = field(default_factory=dict, repr=False)

    def w(self, e: int) -> np.ndarray:
        if e not in self.cache:
            q = self.codes[e].astype(np.float64)
            n, k = q.shape
            nb = self.scales.shape[2]
            zp = self.zps[e]
            sc = self.scales[e].astype(np.float64)
            if self.block is not None and k % self.block == 0:
                q = q.reshape(n, nb, self.block)
                w = ((q - zp[:, :, None]) * sc[:, :, None]).reshape(n, k)
            else:
                col_block = np.minimum(np.arange(k) // (self.block or k), nb - 1)
                w = (q - zp[:, col_block]) * sc[:, col_block]
            self.cache[e] = w
        return self.cache[e]


@dataclass
class QMoECase:
    spec: QMoESpec
    model: onnx.ModelProto
    fc1: Projection  # [E, fc1_out, H]
    fc2: Projection  # [E, H, I]
    b1: np.ndarray | None  # float64 [E, fc1_out]
    b2: np.ndarray | None  # float64 [E, H]

    @property
    def bytes(self) -> bytes:
        return self.model.SerializeToString()


# ---------------------------------------------------------------------------------------------------
# quantized expert weights


def _pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """Pack codes along the last axis, 8/bits a byte, element i at bit (i % per_byte) * bits (the
    even element in the low nibble for 4-bit); a partial last byte is zero-padded."""
    c = codes.astype(np.uint8)
    per = 8 // bits
    pad = (-c.shape[-1]) % per
    if pad:
        c = np.concatenate([c, np.zeros(c.shape[:-1] + (pad,), np.uint8)], axis=-1)
    c = c.reshape(c.shape[:-1] + (-1, per))
    out = np.zeros(c.shape[:-1], np.uint8)
    for i in range(per):
        out |= (c[..., i] << (i * bits)).astype(np.uint8)
    return out


def quantized_experts(rng, E, N, K, bits, block, zp, gain, f16=False):
    """Random codes over the full range, positive random scales sized so x . W^T has std ~ gain for
    unit-normal x. Returns (q packed uint8 [E, N, K*bits/8], scales f32 [E, N] (block None) or
    [E, N, blocks], zero points packed uint8 or None, Projection)."""
    levels = 1 << bits
    codes = rng.integers(0, levels, size=(E, N, K), dtype=np.uint8)
    nb = 1 if block is None else -(-K // block)
    if zp:
        zpv = rng.integers(0, levels, size=(E, N, nb), dtype=np.uint8)
    else:
        zpv = np.full((E, N, nb), levels // 2, np.uint8)
    code_std = math.sqrt((levels * levels - 1) / 12.0 + 0.25)  # codes uniform, about the middle
    base = gain / (code_std * math.sqrt(K))
    scales = (base * rng.uniform(0.5, 1.5, size=(E, N, nb))).astype(np.float32)
    if f16:
        # float16 scales: the reference dequantizes with their exact f32 widening
        scales = scales.astype(np.float16)
    proj = Projection(codes, zpv.astype(np.float64), scales, block)
    q = _pack(codes, bits)
    zp_out = None
    if block is None:
        scales_out = scales[:, :, 0].copy()  # [E, N]
        if zp:
            zp_out = _pack(zpv[:, :, 0], bits)  # [E, ceil(N*bits/8)]: packed along N
    else:
        scales_out = scales  # [E, N, blocks]
        if zp:
            zp_out = _pack(zpv, bits)  # [E, N, ceil(blocks*bits/8)]
    return q, scales_out, zp_out, proj


def build(spec: QMoESpec) -> QMoECase:
    rng = np.random.default_rng(spec.seed)
    E, H, I, bits = spec.E, spec.H, spec.I, spec.bits
    n1 = spec.fc1_out
    zp1, zp2 = spec.zp in (True, "fc1"), spec.zp in (True, "fc2")
    q1, s1, z1, p1 = quantized_experts(rng, E, n1, H, bits, spec.block, zp1, spec.gain, spec.scales_f16)
    # fc2's input is the activation; aim the output std at ~1
    q2, s2, z2, p2 = quantized_experts(rng, E, H, I, bits, spec.block, zp2, 1.0, spec.scales_f16)
    b1 = rng.standard_normal((E, n1)).astype(np.float32) * 0.5 if spec.fc1_bias else None
    b2 = rng.standard_normal((E, H)).astype(np.float32) * 0.5 if spec.fc2_bias else None

    arrays = {"fc1_w": q1, "fc1_s": s1, "fc2_w": q2, "fc2_s": s2}
    names = ["input", "router_probs", "fc1_w", "fc1_s", "", "fc2_w", "fc2_s", "", "", "", "", "", "", "", ""]
    if b1 is not None:
        arrays["fc1_b"] = b1
        names[4] = "fc1_b"
    if b2 is not None:
        arrays["fc2_b"] = b2
        names[7] = "fc2_b"
    if spec.fc3:
        q3, s3, _, _ = quantized_experts(rng, E, I, H, bits, spec.block, False, spec.gain)
        arrays["fc3_w"] = q3
        arrays["fc3_s"] = s3
        names[8], names[9] = "fc3_w", "fc3_s"
    if z1 is not None:
        arrays["fc1_zp"] = z1
        names[11] = "fc1_zp"
    if z2 is not None:
        arrays["fc2_zp"] = z2
        names[12] = "fc2_zp"
    if spec.router_weights:
        names[14] = "router_weights"
    while names and names[-1] == "":
        names.pop()

    attrs = {"k": spec.k, "expert_weight_bits": bits, "activation_type": spec.act}
    if spec.block is not None:
        attrs["block_size"] = spec.block
    if spec.fusion_eff or spec.fusion is not None:
        attrs["swiglu_fusion"] = spec.fusion_eff
    for key, v in (("activation_alpha", spec.alpha), ("activation_beta", spec.beta), ("swiglu_limit", spec.limit),
                   ("normalize_routing_weights", spec.normalize), ("use_sparse_mixer", spec.sparse_mixer),
                   ("accuracy_level", spec.accuracy_level)):
        if v is not None:
            attrs[key] = v
    attrs.update(spec.extra_attrs)
    node = helper.make_node("QMoE", names, ["output"], name=spec.name, domain="com.microsoft", **attrs)

    tok = ["T"] if spec.rank == 2 else ["B", "S"]
    inputs = [helper.make_tensor_value_info("input", F32, tok + [H]),
              helper.make_tensor_value_info("router_probs", F32, ["R", E])]
    if spec.router_weights:
        inputs.append(helper.make_tensor_value_info("router_weights", F32, ["R", E]))
    outputs = [helper.make_tensor_value_info("output", F32, tok + [H])]
    inits = [numpy_helper.from_array(a, n) for n, a in arrays.items()]
    graph = helper.make_graph([node], "qmoe", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET),
                                                    helper.make_opsetid("com.microsoft", 1)],
                              ir_version=IR_VERSION)
    f64 = lambda a: None if a is None else a.astype(np.float64)  # noqa: E731
    return QMoECase(spec, model, p1, p2, f64(b1), f64(b2))


def feeds(case: QMoECase, tokens, rng, router=None, router_weights=None, x=None, logit_scale=2.0) -> dict:
    """Random feeds for `tokens` (an int T for rank 2, a (B, S) pair for rank 3)."""
    s = case.spec
    shape = (tokens, s.H) if s.rank == 2 else (*tokens, s.H)
    n = int(np.prod(shape[:-1]))
    if x is None:
        x = rng.standard_normal(shape).astype(np.float32)
    if router is None:
        router = (rng.standard_normal((n, s.E)) * logit_scale).astype(np.float32)
    f = {"input": x, "router_probs": router}
    if s.router_weights:
        if router_weights is None:
            router_weights = rng.uniform(0.0, 1.0, size=(n, s.E)).astype(np.float32)
        f["router_weights"] = router_weights
    return f


# ---------------------------------------------------------------------------------------------------
# routing: libstdc++'s std::partial_sort(..., std::greater<std::pair<float, int64_t>>) emulated


def _greater(a, b) -> bool:
    """std::greater<>{}(a, b) on pair<float, int64_t> as ORT (C++20) compiles it: pair's synthesized
    operator<=> compares the floats first and returns their result whenever it is not `equivalent`,
    so a NaN on either side gives `unordered` and a > b is false (no index tie-break); equal floats
    (0.0 and -0.0 included) fall through to the index."""
    x, y = a[0], b[0]
    if x != x or y != y:
        return False
    if x != y:
        return bool(x > y)
    return a[1] > b[1]


def _push_heap(v, hole, top, value, comp):
    parent = (hole - 1) // 2
    while hole > top and comp(v[parent], value):
        v[hole] = v[parent]
        hole = parent
        parent = (hole - 1) // 2
    v[hole] = value


def _adjust_heap(v, hole, length, value, comp):
    # v is the heap range starting at 0
    top = hole
    child = hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if comp(v[child], v[child - 1]):
            child -= 1
        v[hole] = v[child]
        hole = child
    if (length & 1) == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        v[hole] = v[child - 1]
        hole = child - 1
    _push_heap(v, hole, top, value, comp)


def _make_heap(v, length, comp):
    if length < 2:
        return
    parent = (length - 2) // 2
    while True:
        _adjust_heap(v, parent, length, v[parent], comp)
        if parent == 0:
            return
        parent -= 1


def ort_topk(logits, k):
    """The first k (logit, expert) pairs in the order ORT's CPU QMoE leaves them (libstdc++
    partial_sort = heap_select on [0, k) over [k, E), then sort_heap on [0, k))."""
    v = [(np.float32(x), j) for j, x in enumerate(np.asarray(logits, np.float32))]
    comp = _greater
    # __heap_select
    _make_heap(v, k, comp)
    for i in range(k, len(v)):
        if comp(v[i], v[0]):
            # __pop_heap(first, middle, i)
            value = v[i]
            v[i] = v[0]
            _adjust_heap(v, 0, k, value, comp)
    # __sort_heap
    last = k
    while last > 1:
        last -= 1
        value = v[last]
        v[last] = v[0]
        _adjust_heap(v, 0, last, value, comp)
    return v[:k]


def route(logits, k, router_weights=None, normalize=False):
    """[(expert, float32 weight)] of the routes ORT keeps for one token (weight > 1e-8), in ORT's order."""
    top = ort_topk(logits, k)
    thr = np.float32(1e-8)
    out = []
    with np.errstate(all="ignore"):
        if router_weights is not None:
            rw = np.asarray(router_weights, np.float32)
            vals = [np.float32(rw[e]) for _, e in top]
            if normalize:
                s = np.float32(0.0)
                for v in vals:
                    s = np.float32(s + v)
                inv = np.float32(0.0) if s == np.float32(0.0) else np.float32(np.float32(1.0) / s)
                vals = [np.float32(v * inv) for v in vals]
        else:
            mx = top[0][0]
            ex = [np.float32(np.exp(np.float32(l - mx))) for l, _ in top]
            s = np.float32(0.0)
            for v in ex:
                s = np.float32(s + v)
            inv = np.float32(0.0) if s == np.float32(0.0) else np.float32(np.float32(1.0) / s)
            vals = [np.float32(v * inv) for v in ex]
    for (_, e), w in zip(top, vals):
        if w > thr:
            out.append((e, w))
    return out


# ---------------------------------------------------------------------------------------------------
# float64 reference


def _sigmoid(x):
    with np.errstate(all="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def activation(spec: QMoESpec, c1: np.ndarray) -> np.ndarray:
    """c1 [M, fc1_out] float64 -> [M, I]."""
    with np.errstate(all="ignore"):
        if spec.act == "swiglu":
            alpha = 1.0 if spec.alpha is None else float(np.float32(spec.alpha))
            beta = 0.0 if spec.beta is None else float(np.float32(spec.beta))
            limit = math.inf if spec.limit is None else float(np.float32(spec.limit))
            gate = c1[:, 0::2]
            lin = c1[:, 1::2]
            gate = np.where(limit < gate, limit, gate)  # std::min(gate, limit): NaN stays NaN
            lin = np.where(lin < -limit, -limit, np.where(limit < lin, limit, lin))  # std::clamp
            return gate * _sigmoid(alpha * gate) * (lin + beta)
        if spec.act == "relu":
            return np.where(0.0 < c1, c1, 0.0)  # std::max(0.0f, x): NaN -> 0
        if spec.act == "gelu":
            return 0.5 * c1 * (1.0 + np.tanh(0.7978845608 * (c1 + 0.044715 * c1 * c1 * c1)))
        if spec.act == "silu":
            return c1 * _sigmoid(c1)
        if spec.act == "identity":
            return c1
    raise ValueError(spec.act)


def qmoe_reference(case: QMoECase, x, router_probs, router_weights=None) -> np.ndarray:
    """ORT 1.31.1 CPU QMoE in float64 (routing weights in float32, as ORT computes them)."""
    s = case.spec
    xs = np.asarray(x, np.float64).reshape(-1, s.H)
    n = xs.shape[0]
    rp = np.asarray(router_probs, np.float32).reshape(n, s.E)
    rw = None if router_weights is None else np.asarray(router_weights, np.float32).reshape(n, s.E)
    per_expert: dict[int, list[tuple[int, float]]] = {}
    for t in range(n):
        for e, w in route(rp[t], s.k, None if rw is None else rw[t], bool(s.normalize == 1)):
            per_expert.setdefault(e, []).append((t, float(w)))
    out = np.zeros((n, s.H), np.float64)
    with np.errstate(all="ignore"):
        for e, lst in per_expert.items():
            toks = np.array([t for t, _ in lst])
            ws = np.array([w for _, w in lst])
            a = xs[toks]
            c1 = a @ case.fc1.w(e).T
            if case.b1 is not None:
                c1 = c1 + case.b1[e]
            h = activation(s, c1)
            c2 = h @ case.fc2.w(e).T
            if case.b2 is not None:
                c2 = c2 + case.b2[e]
            np.add.at(out, toks, ws[:, None] * c2)
    return out.reshape(np.asarray(x).shape)
