"""Small ONNX model builders for the rcpu suite (onnx.helper only), and a numpy int4 block quantiser
for com.microsoft.MatMulNBits. Every node gets a name so tests can check where it was assigned."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 10  # onnxruntime 1.31.1 accepts IR <= 13; onnx 1.23 would default to a newer one
OPSET = 17
F32 = TensorProto.FLOAT


def _model(nodes, inputs, outputs, initializers=(), opset=OPSET, ms_opset=None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "rcpu_test", inputs, outputs, initializer=list(initializers))
    opsets = [helper.make_opsetid("", opset)]
    if ms_opset is not None:
        opsets.append(helper.make_opsetid("com.microsoft", ms_opset))
    m = helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION)
    # (no onnx.checker: outputs are declared with element type only, which ORT accepts)
    return m


def with_accuracy_level(m: onnx.ModelProto, level: int) -> onnx.ModelProto:
    """A copy of `m` with every MatMulNBits at `accuracy_level` (the weights unchanged)."""
    out = onnx.ModelProto()
    out.CopyFrom(m)
    for n in out.graph.node:
        if n.op_type == "MatMulNBits":
            kept = [a for a in n.attribute if a.name != "accuracy_level"]
            del n.attribute[:]
            n.attribute.extend(kept + [helper.make_attribute("accuracy_level", level)])
    return out


def _vi(name, shape, elem=F32):
    return helper.make_tensor_value_info(name, elem, shape)


def binary(op: str, a_shape, b_shape, name: str | None = None, elem=F32) -> onnx.ModelProto:
    """Y = op(A, B) with numpy broadcasting; shapes may contain symbolic dims (strings)."""
    name = name or f"{op.lower()}0"
    node = helper.make_node(op, ["A", "B"], ["Y"], name=name)
    return _model([node], [_vi("A", a_shape, elem), _vi("B", b_shape, elem)], [_vi("Y", None, elem)])


def matmul(a_shape, b_shape, name: str = "matmul0", b_init: np.ndarray | None = None) -> onnx.ModelProto:
    """Y = MatMul(A, B); B is a graph input, or a constant initializer when b_init is given."""
    node = helper.make_node("MatMul", ["A", "B"], ["Y"], name=name)
    inits, inputs = [], [_vi("A", a_shape)]
    if b_init is None:
        inputs.append(_vi("B", b_shape))
    else:
        inits.append(numpy_helper.from_array(b_init.astype(np.float32), "B"))
    return _model([node], inputs, [_vi("Y", None)], inits)


def gemm(a_shape, b_shape, c_shape=None, name: str = "gemm0", **attrs) -> onnx.ModelProto:
    """Y = Gemm(A, B[, C]) with attributes alpha, beta, transA, transB as given."""
    ins = ["A", "B"] + (["C"] if c_shape is not None else [])
    node = helper.make_node("Gemm", ins, ["Y"], name=name, **attrs)
    inputs = [_vi("A", a_shape), _vi("B", b_shape)] + ([_vi("C", c_shape)] if c_shape is not None else [])
    return _model([node], inputs, [_vi("Y", None)])


# Node names of the mixed model, by who should run them.
MIXED_RCPU_NODES = {"mm0", "add0", "gemm0", "mul0"}
MIXED_CPU_NODES = {"abs0", "softsign0"}


def mixed(rng: np.random.Generator, m: int = 5, k: int = 12, n: int = 8, p: int = 6) -> onnx.ModelProto:
    """MatMul -> Add -> Abs -> Gemm -> Softsign -> Mul: Abs and Softsign are not rcpu ops, so the
    partition alternates rcpu / CPU / rcpu / CPU / rcpu."""
    w1 = numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), "W1")
    b1 = numpy_helper.from_array(rng.standard_normal((n,)).astype(np.float32), "B1")
    w2 = numpy_helper.from_array(rng.standard_normal((p, n)).astype(np.float32), "W2")
    c2 = numpy_helper.from_array(rng.standard_normal((p,)).astype(np.float32), "C2")
    s = numpy_helper.from_array(np.array([0.5], np.float32), "S")
    nodes = [
        helper.make_node("MatMul", ["X", "W1"], ["t0"], name="mm0"),
        helper.make_node("Add", ["t0", "B1"], ["t1"], name="add0"),
        helper.make_node("Abs", ["t1"], ["t2"], name="abs0"),
        helper.make_node("Gemm", ["t2", "W2", "C2"], ["t3"], name="gemm0", transB=1, alpha=0.75),
        helper.make_node("Softsign", ["t3"], ["t4"], name="softsign0"),
        helper.make_node("Mul", ["t4", "S"], ["Y"], name="mul0"),
    ]
    return _model(nodes, [_vi("X", ["M", k])], [_vi("Y", None)], [w1, b1, w2, c2, s])


# ---------------------------------------------------------------------------------------------
# MatMulNBits (com.microsoft, opset 1)
# ---------------------------------------------------------------------------------------------


def quantize_nbits4(w: np.ndarray, block_size: int, with_zero_points: bool, rng: np.random.Generator | None = None):
    """Blockwise int4 quantisation of a float weight W[K, N] in MatMulNBits layout.

    Returns (b_packed uint8 [N, k_blocks, block_size/2], scales f32 [N*k_blocks],
    zero_points uint8 [N*ceil(k_blocks/2)] or None, w_dequant f32 [K, N]).
    Element k of column n lives in block k // block_size; two 4-bit values per byte, the even
    index in the low nibble. K is zero-padded to a multiple of block_size. Without zero points
    the implied zero point is 8 (symmetric); with them each block gets its own (asymmetric, min/max).
    """
    k, n = w.shape
    k_blocks = -(-k // block_size)
    kp = k_blocks * block_size
    wt = np.zeros((n, kp), np.float32)
    wt[:, :k] = w.T
    blocks = wt.reshape(n, k_blocks, block_size)
    if with_zero_points:
        lo = np.minimum(blocks.min(axis=2), 0.0)
        hi = np.maximum(blocks.max(axis=2), 0.0)
        scale = (hi - lo) / 15.0
        scale[scale == 0] = 1.0
        zp = np.clip(np.round(-lo / scale), 0, 15).astype(np.uint8)
    else:
        amax = np.abs(blocks).max(axis=2)
        scale = amax / 7.0
        scale[scale == 0] = 1.0
        zp = np.full((n, k_blocks), 8, np.uint8)
    if rng is not None and with_zero_points:
        # Perturb zero points a little so they are not all derived from min/max (still valid 0..15).
        zp = np.clip(zp.astype(np.int32) + rng.integers(-1, 2, zp.shape), 0, 15).astype(np.uint8)
    q = np.clip(np.round(blocks / scale[:, :, None]) + zp[:, :, None], 0, 15).astype(np.uint8)
    b_packed = (q[:, :, 0::2] | (q[:, :, 1::2] << 4)).astype(np.uint8)
    deq = (q.astype(np.float32) - zp[:, :, None].astype(np.float32)) * scale[:, :, None]
    w_deq = deq.reshape(n, kp)[:, :k].T.copy()
    zp_packed = None
    if with_zero_points:
        zpp = np.zeros((n, k_blocks + (k_blocks & 1)), np.uint8)
        zpp[:, :k_blocks] = zp
        zp_packed = (zpp[:, 0::2] | (zpp[:, 1::2] << 4)).astype(np.uint8).reshape(-1)
    return b_packed, scale.astype(np.float32).reshape(-1), zp_packed, w_deq.astype(np.float32)


def matmul_nbits(
    k: int,
    n: int,
    block_size: int,
    rng: np.random.Generator,
    zero_points: bool = False,
    bias: bool = False,
    accuracy_level: int = 0,
    name: str = "mmnb0",
    bits: int = 4,
    g_idx: bool = False,
    a_dims=None,
):
    """Y[M, N] = A[M, K] @ dequant(B) (+ bias) as one com.microsoft.MatMulNBits node with dynamic M.

    Returns (model, w_dequant [K, N] f32, bias or None). `bits=8` builds 8-bit weights (one byte a
    code); `g_idx=True` the act-order group index rcpu does not claim. `a_dims` overrides
    A's declared shape (default ["M", K]; a symbolic K lets a wrong feed reach the kernel)."""
    w = rng.standard_normal((k, n)).astype(np.float32)
    if bits == 4:
        b_packed, scales, zp_packed, w_deq = quantize_nbits4(w, block_size, zero_points, rng)
    elif bits == 8:
        b_packed, scales, zp_packed, w_deq = _quantize_nbits8(w, block_size, zero_points)
    else:
        raise ValueError(bits)
    inits = [numpy_helper.from_array(b_packed, "B"), numpy_helper.from_array(scales, "scales")]
    ins = ["A", "B", "scales"]
    if zero_points:
        inits.append(numpy_helper.from_array(zp_packed, "zero_points"))
        ins.append("zero_points")
    elif g_idx or bias:
        ins.append("")
    if g_idx:
        gi = (np.arange(k) // block_size).astype(np.int32)
        inits.append(numpy_helper.from_array(gi, "g_idx"))
        ins.append("g_idx")
    elif bias:
        ins.append("")
    bias_v = None
    if bias:
        bias_v = rng.standard_normal((n,)).astype(np.float32)
        inits.append(numpy_helper.from_array(bias_v, "bias"))
        ins.append("bias")
    node = helper.make_node(
        "MatMulNBits", ins, ["Y"], name=name, domain="com.microsoft",
        K=k, N=n, bits=bits, block_size=block_size, accuracy_level=accuracy_level,
    )
    graph = helper.make_graph([node], "mmnb", [_vi("A", a_dims or ["M", k])], [_vi("Y", ["M", n])], initializer=inits)
    m = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)],
        ir_version=IR_VERSION,
    )
    return m, w_deq, bias_v


def _quantize_nbits8(w: np.ndarray, block_size: int, with_zero_points: bool):
    """8-bit blockwise quantisation in ORT's layout (one byte per code, one byte per zero point).

    Without zero points: symmetric around the implied 128. With them: asymmetric per block
    (min..max onto 0..255), so the zero points spread over the whole byte (both nibbles vary)."""
    k, n = w.shape
    k_blocks = -(-k // block_size)
    wt = np.zeros((n, k_blocks * block_size), np.float32)
    wt[:, :k] = w.T
    blocks = wt.reshape(n, k_blocks, block_size)
    if with_zero_points:
        lo = np.minimum(blocks.min(axis=2), 0.0)
        hi = np.maximum(blocks.max(axis=2), 0.0)
        scale = (hi - lo) / 255.0
        scale[scale == 0] = 1.0
        zp = np.clip(np.round(-lo / scale), 0, 255).astype(np.uint8)
    else:
        scale = np.abs(blocks).max(axis=2) / 127.0
        scale[scale == 0] = 1.0
        zp = np.full((n, k_blocks), 128, np.uint8)
    scale = scale.astype(np.float32)
    q = np.clip(np.round(blocks / scale[:, :, None]) + zp[:, :, None], 0, 255).astype(np.uint8)
    deq = (q.astype(np.float32) - zp[:, :, None].astype(np.float32)) * scale[:, :, None]
    w_deq = deq.reshape(n, -1)[:, :k].T.copy()
    return q, scale.reshape(-1), (zp.reshape(-1) if with_zero_points else None), w_deq


def float_matmul_const(k: int, n: int, rng: np.random.Generator, name: str = "matmul_w") -> onnx.ModelProto:
    """Y = A[M, K] @ W[K, N] with W a constant initializer (input for ORT's MatMulNBitsQuantizer)."""
    w = rng.standard_normal((k, n)).astype(np.float32)
    node = helper.make_node("MatMul", ["A", "W"], ["Y"], name=name)
    return _model([node], [_vi("A", ["M", k])], [_vi("Y", ["M", n])], [numpy_helper.from_array(w, "W")])


# ---------------------------------------------------------------------------------------------
# Glue ops of a decoder layer (normalisations, softmax, activations)
# ---------------------------------------------------------------------------------------------


def glue_op(
    op: str,
    inputs,
    n_outputs: int = 1,
    domain: str = "",
    opset: int = OPSET,
    name: str = "glue0",
    out_names=None,
    **attrs,
) -> onnx.ModelProto:
    """One `op` node. `inputs` is a list of (name, shape or np.ndarray or None): a shape makes a
    float32 graph input, an array a constant initializer (its dtype kept), None an omitted
    optional input. `out_names` overrides the output names ("" leaves an optional output empty)."""
    ins, vis, inits = [], [], []
    for nm, spec in inputs:
        if spec is None:
            ins.append("")
        elif isinstance(spec, np.ndarray):
            ins.append(nm)
            inits.append(numpy_helper.from_array(spec, nm))
        else:
            ins.append(nm)
            vis.append(_vi(nm, spec))
    outs = list(out_names) if out_names is not None else [f"Y{i}" for i in range(n_outputs)]
    node = helper.make_node(op, ins, outs, name=name, domain=domain or None, **attrs)
    ms = 1 if domain == "com.microsoft" else None
    return _model([node], vis, [_vi(o, None) for o in outs if o], inits, opset=opset, ms_opset=ms)


# Qwen2-0.5B decoder-layer shapes.
QWEN2_HIDDEN = 896
QWEN2_INTER = 4864
QWEN2_HEADS = 14
QWEN2_KV_HEADS = 2
QWEN2_HEAD_DIM = 64


def _nbits_node(rng, name, inp, out, k, n, block_size, acc, bias: bool, bits: int = 4):
    """A MatMulNBits `name` (seeded weights) reading `inp` and writing `out`; its initializers. `bias`: a
    seeded bias as the node's input 5."""
    w = (rng.standard_normal((k, n)) * (1.0 / np.sqrt(k))).astype(np.float32)
    if bits == 8:
        b_packed, scales, _, _ = _quantize_nbits8(w, block_size, False)
    else:
        b_packed, scales, _, _ = quantize_nbits4(w, block_size, False)
    inits = [
        numpy_helper.from_array(b_packed, f"{name}.B"),
        numpy_helper.from_array(scales, f"{name}.scales"),
    ]
    ins = [inp, f"{name}.B", f"{name}.scales"]
    if bias:
        inits.append(numpy_helper.from_array((rng.standard_normal(n) * 0.1).astype(np.float32), f"{name}.bias"))
        ins += ["", "", f"{name}.bias"]
    node = helper.make_node(
        "MatMulNBits", ins, [out], name=name, domain="com.microsoft",
        K=k, N=n, bits=bits, block_size=block_size, accuracy_level=acc,
    )
    return node, inits


def _biased_projection(rng, name, inp, out, k, n, block_size, acc, bias_add: bool):
    """A biased MatMulNBits projection `name` as nodes, and its initializers: the seeded bias as the
    node's input 5, or with `bias_add` as a separate `Add(MatMulNBits, bias)` node `{name}_bias_add`
    writing `out` (the model builder's form since 0.18). The same seeded values either way."""
    if not bias_add:
        node, inits = _nbits_node(rng, name, inp, out, k, n, block_size, acc, bias=True)
        return [node], inits
    node, inits = _nbits_node(rng, name, inp, f"{out}_unbiased", k, n, block_size, acc, bias=False)
    inits.append(numpy_helper.from_array((rng.standard_normal(n) * 0.1).astype(np.float32), f"{name}.bias"))
    return [node, helper.make_node("Add", [f"{out}_unbiased", f"{name}.bias"], [out], name=f"{name}_bias_add")], inits


def decoder_layer(rng: np.random.Generator, accuracy_level: int = 4, block_size: int = 32,
                  hidden: int = QWEN2_HIDDEN, inter: int = QWEN2_INTER, kv_cache: bool = False,
                  rotary: bool = False, max_pos: int = 256, plain_norms: bool = False,
                  qk_norm: bool = False, relu2: bool = False, window_softcap: bool = False,
                  packed_split: bool = False, bias_add: bool = False) -> onnx.ModelProto:
    """One Qwen2-style decoder layer: RMSNorm -> q/k/v MatMulNBits (with bias) -> GroupQueryAttention
    -> o_proj -> SkipSimplifiedLayerNorm (residual sum as output 3) -> gate/up MatMulNBits -> SiLU
    (Sigmoid * x) * up -> down MatMulNBits -> Add.
    Inputs: X [B, S, hidden] f32, seqlens_k int32 [B] (= S - 1), total_seq_len int32 scalar (= S).
    kv_cache: also past_k / past_v [B, kv_heads, P, head] inputs (a decode step as ORT genai's model
    builder makes it); rotary: do_rotary=1 with cos/sin cache initializers [max_pos, head / 2];
    plain_norms: LayerNormalization and SkipLayerNormalization with a beta each (the builder's norms for
    Phi-2 / GPT-2 / OLMo-style decoders) in place of the RMSNorms; qk_norm: per-head RMSNorms of the query
    and key rows between Reshapes to [B, S * heads, head] and back (the builder's Qwen3 / Gemma3 form);
    relu2: the MLP as the builder writes it for `relu2` models (Nemotron): up -> Relu -> Pow(2) -> down, no
    gate; window_softcap: the attention with local_window_size 4 and softcap 30 (Gemma 2-style);
    packed_split: Q, K and V as one packed MatMulNBits Split in three along the last axis (the
    builder's current form for Qwen3-style decoders, with qk_norm); bias_add: the Q / K / V biases as
    Add nodes after their projections (`{name}_bias_add`), as the builder writes them since 0.18."""
    h, d = QWEN2_HEAD_DIM, hidden
    q_n, kv_n = QWEN2_HEADS * h, QWEN2_KV_HEADS * h
    inits = [
        numpy_helper.from_array((1.0 + 0.1 * rng.standard_normal(d)).astype(np.float32), "ln1.w"),
        numpy_helper.from_array((1.0 + 0.1 * rng.standard_normal(d)).astype(np.float32), "ln2.w"),
    ]
    if plain_norms:
        inits += [numpy_helper.from_array((0.1 * rng.standard_normal(d)).astype(np.float32), f"ln{i}.b")
                  for i in (1, 2)]
        nodes = [helper.make_node("LayerNormalization", ["X", "ln1.w", "ln1.b"], ["h1"], name="ln1",
                                  axis=-1, epsilon=1e-5, stash_type=1)]
    else:
        nodes = [helper.make_node("SimplifiedLayerNormalization", ["X", "ln1.w"], ["h1"], name="ln1",
                                  axis=-1, epsilon=1e-6, stash_type=1)]
    if packed_split:
        proj, ini = _biased_projection(rng, "qkv_proj", "h1", "qkv", d, q_n + 2 * kv_n, block_size,
                                       accuracy_level, bias_add)
        inits += ini + [numpy_helper.from_array(np.array([q_n, kv_n, kv_n], np.int64), "qkv_sizes")]
        nodes += proj
        nodes.append(helper.make_node("Split", ["qkv", "qkv_sizes"], ["q", "k", "v"], name="qkv_split", axis=-1))
    else:
        for nm, n, out in (("q_proj", q_n, "q"), ("k_proj", kv_n, "k"), ("v_proj", kv_n, "v")):
            proj, ini = _biased_projection(rng, nm, "h1", out, d, n, block_size, accuracy_level, bias_add)
            nodes += proj
            inits += ini
    if qk_norm:
        consts = [numpy_helper.from_array(np.array(v, np.int64), nm) for nm, v in
                  (("heads_shape", [0, -1, h]), ("q_shape", [0, -1, q_n]), ("k_shape", [0, -1, kv_n]))]
        inits += consts
        for p in ("q", "k"):
            inits.append(numpy_helper.from_array((1.0 + 0.1 * rng.standard_normal(h)).astype(np.float32),
                                                 f"{p}_norm.w"))
            nodes += [
                helper.make_node("Reshape", [p, "heads_shape"], [f"{p}_heads"], name=f"{p}_norm_reshape_1"),
                helper.make_node("SimplifiedLayerNormalization", [f"{p}_heads", f"{p}_norm.w"], [f"{p}_normed"],
                                 name=f"{p}_norm", axis=-1, epsilon=1e-6, stash_type=1),
                helper.make_node("Reshape", [f"{p}_normed", f"{p}_shape"], [f"{p}_n"], name=f"{p}_norm_reshape_2"),
            ]
        q_in, k_in = "q_n", "k_n"
    else:
        q_in, k_in = "q", "k"
    past = ["past_k", "past_v"] if kv_cache else ["", ""]
    rope = dict(do_rotary=1, rotary_interleaved=0) if rotary else {}
    if rotary:
        cos, sin = rope_caches(max_pos, h // 2)
        inits += [numpy_helper.from_array(cos, "cos_cache"), numpy_helper.from_array(sin, "sin_cache")]
    nodes.append(helper.make_node(
        "GroupQueryAttention", [q_in, k_in, "v", *past, "seqlens_k", "total_seq_len"]
        + (["cos_cache", "sin_cache"] if rotary else []),
        ["attn_out", "present_k", "present_v"], name="attn", domain="com.microsoft",
        num_heads=QWEN2_HEADS, kv_num_heads=QWEN2_KV_HEADS, **rope,
        **(dict(local_window_size=4, softcap=30.0) if window_softcap else {}),
    ))
    node, ini = _nbits_node(rng, "o_proj", "attn_out", "o", q_n, d, block_size, accuracy_level, bias=False)
    nodes.append(node)
    inits += ini
    if plain_norms:
        nodes.append(helper.make_node(
            "SkipLayerNormalization", ["o", "X", "ln2.w", "ln2.b"], ["h2", "", "", "resid"],
            name="ln2", domain="com.microsoft", epsilon=1e-5,
        ))
    else:
        nodes.append(helper.make_node(
            "SkipSimplifiedLayerNormalization", ["o", "X", "ln2.w"], ["h2", "", "", "resid"],
            name="ln2", domain="com.microsoft", epsilon=1e-6,
        ))
    for nm, out in (("up_proj", "u"),) if relu2 else (("gate_proj", "g"), ("up_proj", "u")):
        node, ini = _nbits_node(rng, nm, "h2", out, d, inter, block_size, accuracy_level, bias=False)
        nodes.append(node)
        inits += ini
    if relu2:
        inits.append(numpy_helper.from_array(np.array([2], np.int32), "pow_two"))
        nodes += [
            helper.make_node("Relu", ["u"], ["u_relu"], name="mlp_relu"),
            helper.make_node("Pow", ["u_relu", "pow_two"], ["gu"], name="mlp_square"),
        ]
    else:
        nodes += [
            helper.make_node("Sigmoid", ["g"], ["g_sig"], name="silu_sigmoid"),
            helper.make_node("Mul", ["g", "g_sig"], ["g_act"], name="silu_mul"),
            helper.make_node("Mul", ["g_act", "u"], ["gu"], name="gate_mul"),
        ]
    node, ini = _nbits_node(rng, "down_proj", "gu", "down", inter, d, block_size, accuracy_level, bias=False)
    nodes.append(node)
    inits += ini
    nodes.append(helper.make_node("Add", ["resid", "down"], ["Y"], name="residual_add"))
    inputs = [
        _vi("X", ["B", "S", d]),
        helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["B"]),
        helper.make_tensor_value_info("total_seq_len", TensorProto.INT32, []),
    ]
    if kv_cache:
        inputs += [_vi("past_k", ["B", QWEN2_KV_HEADS, "P", h]), _vi("past_v", ["B", QWEN2_KV_HEADS, "P", h])]
    return _model(nodes, inputs, [_vi("Y", ["B", "S", d]), _vi("present_k", None), _vi("present_v", None)],
                  inits, ms_opset=1)


# --- QLinearMatMul (ONNX, opsets 10 and 21) -------------------------------------------------------

U8 = TensorProto.UINT8
I8 = TensorProto.INT8


def _q8(rng: np.random.Generator, shape, signed: bool, lo=None, hi=None) -> np.ndarray:
    """Random 8-bit values over the type's range (or [lo, hi])."""
    dt = np.int8 if signed else np.uint8
    info = np.iinfo(dt)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    return rng.integers(lo, hi + 1, size=shape).astype(dt)


def _q8_mid(rng: np.random.Generator, shape, signed: bool) -> np.ndarray:
    """Zero points near the middle of the type's range."""
    mid = 0 if signed else 128
    return _q8(rng, shape, signed, mid - 20, mid + 20)


def qlinear_matmul(
    rng: np.random.Generator,
    a_shape,
    b_shape,
    a_signed: bool = False,
    b_signed: bool = False,
    b_const: bool = True,
    b_param_shape=(),
    opset: int = 21,
    name: str = "qlmm0",
):
    """y = QLinearMatMul(a, ...) with seeded parameters; returns (model, b) (b is also the
    initializer when `b_const`). a_scale / a_zero_point / y_* are scalars; b_scale and
    b_zero_point have `b_param_shape` (() per tensor, [N] or [..., 1, N] per column).

    uint8 x int8: B is drawn from [-64, 63] so ORT's AVX2 kernel (vpmaddubsw, int16 saturation on
    CPUs without VNNI) stays exact and parity can be exact on any x86 CPU."""
    at = I8 if a_signed else U8
    bt = I8 if b_signed else U8
    if b_signed and not a_signed:
        b = _q8(rng, b_shape, True, -64, 63)
    else:
        b = _q8(rng, b_shape, b_signed)
    k = b_shape[-2] if len(b_shape) >= 2 else b_shape[0]
    a_scale = np.float32(rng.uniform(0.01, 0.04))
    b_scale = rng.uniform(0.005, 0.03, size=b_param_shape).astype(np.float32)
    # typical |acc| ~ sqrt(K) * 80 * 80: land it near the output range (some values clamp).
    y_scale = np.float32(a_scale * 0.015 * np.sqrt(max(k, 1)) * 6400.0 / 90.0)
    inits = [
        numpy_helper.from_array(np.array(a_scale, np.float32), "a_scale"),
        numpy_helper.from_array(_q8_mid(rng, (), a_signed), "a_zero_point"),
        numpy_helper.from_array(b_scale, "b_scale"),
        numpy_helper.from_array(_q8_mid(rng, b_param_shape, b_signed), "b_zero_point"),
        numpy_helper.from_array(np.array(y_scale, np.float32), "y_scale"),
        numpy_helper.from_array(_q8_mid(rng, (), a_signed), "y_zero_point"),
    ]
    inputs = [_vi("a", a_shape, at)]
    if b_const:
        inits.append(numpy_helper.from_array(b, "b"))
    else:
        inputs.append(_vi("b", b_shape, bt))
    node = helper.make_node(
        "QLinearMatMul",
        ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale", "y_zero_point"],
        ["y"],
        name=name,
    )
    return _model([node], inputs, [_vi("y", None, at)], inits, opset=opset), b


def gemm_const(a_shape, w: np.ndarray, c: np.ndarray | None = None, name: str = "gemm0", **attrs) -> onnx.ModelProto:
    """Y = Gemm(A, W[, C]) with W (and C) constant initializers: the prepacked-weight path."""
    ins = ["A", "W"] + (["C"] if c is not None else [])
    inits = [numpy_helper.from_array(w.astype(np.float32), "W")]
    if c is not None:
        inits.append(numpy_helper.from_array(c.astype(np.float32), "C"))
    node = helper.make_node("Gemm", ins, ["Y"], name=name, **attrs)
    return _model([node], [_vi("A", a_shape)], [_vi("Y", None)], inits)


# ------------------------------------------------------------------------------ attention (rotary, GQA)


def rotary_embedding(x_shape, pos_shape, max_pos: int, half: int, interleaved: int = 0,
                     num_heads: int | None = None, rotary_embedding_dim: int | None = None,
                     name: str = "rope0") -> onnx.ModelProto:
    """com.microsoft.RotaryEmbedding: X, position_ids (int64), cos_cache / sin_cache [max_pos, half]."""
    attrs = {"interleaved": interleaved}
    if num_heads is not None:
        attrs["num_heads"] = num_heads
    if rotary_embedding_dim is not None:
        attrs["rotary_embedding_dim"] = rotary_embedding_dim
    node = helper.make_node("RotaryEmbedding", ["X", "pos", "cos", "sin"], ["Y"], name=name,
                            domain="com.microsoft", **attrs)
    inputs = [_vi("X", x_shape), helper.make_tensor_value_info("pos", TensorProto.INT64, pos_shape),
              _vi("cos", [max_pos, half]), _vi("sin", [max_pos, half])]
    return _model([node], inputs, [_vi("Y", None)], ms_opset=1)


def rope_caches(max_pos: int, half: int, theta: float = 10000.0):
    """(cos, sin) [max_pos, half] f32 as model builders make them."""
    inv = 1.0 / theta ** (np.arange(half, dtype=np.float64) / half)
    ang = np.outer(np.arange(max_pos, dtype=np.float64), inv)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def longrope_selector(long: dict, short: dict, original: int, prefix: str = "rope_"):
    """The subgraph onnxruntime-genai's builder writes for LongRoPE models (Phi-3 / Phi-3.5 128k) to
    pick the rotary caches per run: attention_mask -> Shape -> Gather(1) -> Greater(`original`) ->
    If, whose outputs (named as the keys of `long`) are the `long` arrays when the mask is longer
    than `original`, else the `short` ones (same keys); each branch a Constant per array. Node and
    value names start with `prefix` (the If is `{prefix}if`). Returns (nodes, initializers)."""

    def branch(name, arrays):
        names = {key: f"{prefix}{name}_{key}" for key in arrays}
        consts = [helper.make_node("Constant", [], [names[key]], value=numpy_helper.from_array(a, f"{names[key]}_v"))
                  for key, a in arrays.items()]
        outs = [_vi(names[key], list(a.shape)) for key, a in arrays.items()]
        return helper.make_graph(consts, f"{prefix}{name}", [], outs)

    assert list(long) == list(short), "both branches give the same outputs"
    nodes = [
        helper.make_node("Shape", ["attention_mask"], [f"{prefix}mask_dims"], name=f"{prefix}shape"),
        helper.make_node("Gather", [f"{prefix}mask_dims", f"{prefix}one"], [f"{prefix}total"], name=f"{prefix}gather",
                         axis=0),
        helper.make_node("Greater", [f"{prefix}total", f"{prefix}original"], [f"{prefix}long"], name=f"{prefix}greater"),
        helper.make_node("If", [f"{prefix}long"], list(long), name=f"{prefix}if",
                         then_branch=branch("long", long), else_branch=branch("short", short)),
    ]
    inits = [numpy_helper.from_array(np.array(1, np.int64), f"{prefix}one"),
             numpy_helper.from_array(np.array(original, np.int64), f"{prefix}original")]
    return nodes, inits


def gqa_longrope(num_heads: int, kv_heads: int, head: int, max_pos: int, original: int) -> onnx.ModelProto:
    """GroupQueryAttention (rotary, past) whose cos/sin caches an `If` node (rope_if) picks at run
    time (`longrope_selector`): the long caches `max_pos` rows, the short ones `original` rows, as
    the builder's span the whole and the original context. Inputs as `gqa` plus attention_mask
    [B, T] int64; the GQA node is gqa0."""
    long_cos, long_sin = rope_caches(max_pos, head // 2)
    long = {"cos": long_cos * np.float32(1.1), "sin": long_sin * np.float32(1.1)}
    short_cos, short_sin = rope_caches(original, head // 2, theta=500000.0)
    nodes, inits = longrope_selector(long, {"cos": short_cos, "sin": short_sin}, original)
    nodes.append(helper.make_node("GroupQueryAttention",
                                  ["q", "k", "v", "past_k", "past_v", "seqlens_k", "total_seq_len", "cos", "sin"],
                                  ["out", "present_k", "present_v"], name="gqa0", domain="com.microsoft",
                                  num_heads=num_heads, kv_num_heads=kv_heads, do_rotary=1))
    inputs = [_vi("q", ["B", "S", num_heads * head]), _vi("k", ["B", "S", kv_heads * head]),
              _vi("v", ["B", "S", kv_heads * head]), _vi("past_k", ["B", kv_heads, "P", head]),
              _vi("past_v", ["B", kv_heads, "P", head]),
              helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["B"]),
              helper.make_tensor_value_info("total_seq_len", TensorProto.INT32, []),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["B", "T"])]
    outs = [_vi("out", None), _vi("present_k", None), _vi("present_v", None)]
    return _model(nodes, inputs, outs, inits, ms_opset=1)


def gqa(num_heads: int, kv_heads: int, head: int, packed: bool = False, past: bool = True,
        rotary: bool = False, interleaved: int = 0, max_pos: int = 0, scale: float | None = None,
        name: str = "gqa0", sink: bool = False, **extra) -> onnx.ModelProto:
    """One com.microsoft.GroupQueryAttention node; inputs named q (k, v), past_k, past_v, seqlens_k,
    total_seq_len (cos, sin) (head_sink [num_heads] with `sink`); outputs out, present_k, present_v."""
    ins = ["q", "" if packed else "k", "" if packed else "v", "past_k" if past else "", "past_v" if past else "",
           "seqlens_k", "total_seq_len"]
    attrs = dict(num_heads=num_heads, kv_num_heads=kv_heads, **extra)
    if rotary:
        ins += ["cos", "sin"]
        attrs.update(do_rotary=1, rotary_interleaved=interleaved)
    if sink:
        ins += ([] if rotary else ["", ""]) + ["", "", "head_sink"]
    if scale is not None:
        attrs["scale"] = scale
    node = helper.make_node("GroupQueryAttention", ins, ["out", "present_k", "present_v"], name=name,
                            domain="com.microsoft", **attrs)
    qd = (num_heads + 2 * kv_heads) * head if packed else num_heads * head
    inputs = [_vi("q", ["B", "S", qd])]
    if not packed:
        inputs += [_vi("k", ["B", "S", kv_heads * head]), _vi("v", ["B", "S", kv_heads * head])]
    if past:
        inputs += [_vi("past_k", ["B", kv_heads, "P", head]), _vi("past_v", ["B", kv_heads, "P", head])]
    inputs += [helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["B"]),
               helper.make_tensor_value_info("total_seq_len", TensorProto.INT32, [])]
    if rotary:
        inputs += [_vi("cos", [max_pos, head // 2]), _vi("sin", [max_pos, head // 2])]
    if sink:
        inputs.append(_vi("head_sink", ["N"]))
    outs = [_vi("out", None), _vi("present_k", None), _vi("present_v", None)]
    return _model([node], inputs, outs, ms_opset=1)
