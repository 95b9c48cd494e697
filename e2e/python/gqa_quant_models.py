"""com.microsoft.GroupQueryAttention over a quantized KV cache: model builder, ORT 1.31.1's quantizer in
numpy, and a float64 reference over the dequantized cache. Every point below was checked by running the
1.31.1 wheel (test_attention_quant.py pins them):

kernels: the CPU EP registers GQA for T=float with T_CACHE float / int8 / uint8 and for T=float16 with
  T_CACHE float16 / int8 / uint8 (T_KV_SCALE float); no bfloat16 kernel (NOT_IMPLEMENTED at session
  creation), and T=float with a float16 cache is a type error.
attributes: k_quant_type / v_quant_type "NONE" | "PER_TENSOR" | "PER_CHANNEL"; the CPU EP fails at run time
  when they differ ("requires k_quant_type == v_quant_type"), when quantized with kv_cache_bit_width other
  than 4 or 8 (the schema default is 0: "must be 4 or 8 when quantization is enabled, got 0"), and when not
  quantized with a bit width other than 0. 8 bits: int8 past/present [B, Nkv, L, H]; 4 bits: uint8
  [B, Nkv, L, H/2] (an int8 4-bit cache or a uint8 8-bit one is a tensor type error at run time).
scales (inputs 12 k_scale, 13 v_scale, float32): only the element count is checked: PER_TENSOR 1,
  PER_CHANNEL kv_num_heads * head_size, any shape ([1, Nkv, 1, H], [Nkv, H], [Nkv*H], [1, Nkv, H, 1] all
  run); element n*H + c scales channel c of kv head n. Another count fails ("k_scale shape mismatch:
  expected 16 elements, got 8").
quantizing a new row (keys after the rotary step): inv = 1/scale in float32 (1 where the scale is +-0),
  code = max(lo, min(hi, nearbyint(x * inv))) in float32, round half to even (dividing by the scale, or
  rounding half away from zero, gives other codes on exact ties); a NaN product becomes hi. lo/hi: -128/127
  at 8 bits (-128 occurs), -8/7 at 4 bits. 4 bits: stored code + 8, element 2i in the low nibble, 2i+1 in
  the high one. A subnormal scale is not zero: its inverse overflows to inf (codes saturate, x = 0 -> NaN
  -> hi); an infinite scale gives inv 0 (codes 0); NaN scale: every code hi.
present: past rows copied, new rows at past .. past + S, later rows zero BYTES (also at 4 bits: 0x00, not
  0x88), first prompt into a longer buffer likewise; with shared past/present buffers only the new rows.
dequantizing: code * scale as is (a zero scale gives zeros, not the quantizer's 1).
attention: exactly ORT's float32 attention (causal, seqlens_k, local_window_size, softcap, smooth_softmax,
  head_sink) over the dequantized present, the new rows included AS QUANTIZED (rel L2 ~1e-7 against ORT's
  float32 GQA fed the dequantized cache).
sliding_window_cache = 1 with a quantized cache: the CPU EP requires head_size % 16 == 0 at 8 bits
  ("must be a multiple of 16 for an 8-bit KV cache").
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper

from models import _model, _vi


def cache_type(bits: int) -> int:
    return TP.INT8 if bits == 8 else TP.UINT8


def cache_width(head: int, bits: int) -> int:
    return head if bits == 8 else head // 2


def gqa_quant(num_heads: int, kv_heads: int, head: int, bits: int = 8, kind: str = "PER_TENSOR",
              v_kind: str | None = None, packed: bool = False, past: bool = True, rotary: bool = False,
              interleaved: int = 0, max_pos: int = 0, sink: bool = False, name: str = "gqa0",
              bit_attr: int | None = -1, cache_elem: int | None = None, **extra) -> onnx.ModelProto:
    """One GroupQueryAttention node over a quantized cache: inputs q (k, v), past_k, past_v, seqlens_k,
    total_seq_len (cos, sin) (head_sink), k_scale, v_scale; outputs out, present_k, present_v.
    `bit_attr` -1: kv_cache_bit_width = bits; None: attribute left out; other: that value."""
    v_kind = v_kind or kind
    ins = ["q", "" if packed else "k", "" if packed else "v", "past_k" if past else "", "past_v" if past else "",
           "seqlens_k", "total_seq_len", "cos" if rotary else "", "sin" if rotary else "", "", "",
           "head_sink" if sink else "", "k_scale", "v_scale"]
    attrs = dict(num_heads=num_heads, kv_num_heads=kv_heads, k_quant_type=kind, v_quant_type=v_kind, **extra)
    if bit_attr == -1:
        attrs["kv_cache_bit_width"] = bits
    elif bit_attr is not None:
        attrs["kv_cache_bit_width"] = bit_attr
    if rotary:
        attrs.update(do_rotary=1, rotary_interleaved=interleaved)
    node = helper.make_node("GroupQueryAttention", ins, ["out", "present_k", "present_v"], name=name,
                            domain="com.microsoft", **attrs)
    ct = cache_elem if cache_elem is not None else cache_type(bits)
    w = cache_width(head, bits)
    qd = (num_heads + 2 * kv_heads) * head if packed else num_heads * head
    inputs = [_vi("q", ["B", "S", qd])]
    if not packed:
        inputs += [_vi("k", ["B", "S", kv_heads * head]), _vi("v", ["B", "S", kv_heads * head])]
    if past:
        inputs += [helper.make_tensor_value_info("past_k", ct, ["B", kv_heads, "P", w]),
                   helper.make_tensor_value_info("past_v", ct, ["B", kv_heads, "P", w])]
    inputs += [helper.make_tensor_value_info("seqlens_k", TP.INT32, ["B"]),
               helper.make_tensor_value_info("total_seq_len", TP.INT32, [])]
    if rotary:
        inputs += [_vi("cos", [max_pos, head // 2]), _vi("sin", [max_pos, head // 2])]
    if sink:
        inputs.append(_vi("head_sink", [num_heads]))
    inputs += [_vi("k_scale", None), _vi("v_scale", None)]
    outs = [_vi("out", None), helper.make_tensor_value_info("present_k", ct, None),
            helper.make_tensor_value_info("present_v", ct, None)]
    return _model([node], inputs, outs, ms_opset=1)


def scales(rng, kind: str, kv_heads: int, head: int, lo: float = 0.005, hi: float = 0.06) -> np.ndarray:
    """Positive random scales: [1] (PER_TENSOR) or [1, Nkv, 1, H] (PER_CHANNEL)."""
    shape = (1,) if kind == "PER_TENSOR" else (1, kv_heads, 1, head)
    return (lo + (hi - lo) * rng.random(shape)).astype(np.float32)


def channel_scales(s: np.ndarray, kv_heads: int, head: int) -> np.ndarray:
    """A scale tensor as [Nkv, H] (one scale per channel)."""
    flat = np.asarray(s, np.float32).ravel()
    return np.broadcast_to(flat if flat.size != 1 else flat[0], (kv_heads * head,)).reshape(kv_heads, head)


def quantize(x: np.ndarray, s: np.ndarray, bits: int) -> np.ndarray:
    """ORT's codes (int) of x [..., Nkv, L, H] with per-channel scales s [Nkv, H] (see the module doc)."""
    s = np.asarray(s, np.float32)[:, None, :]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        inv = np.where(s == 0, np.float32(1), np.float32(1) / s).astype(np.float32)
        y = np.rint(x.astype(np.float32) * inv)
    lo, hi = (-128, 127) if bits == 8 else (-8, 7)
    y = np.where(np.isnan(y), hi, np.clip(y, lo, hi))
    return y.astype(np.int32)


def pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """Codes [..., H] as stored: int8, or uint8 bytes of two (code + 8, even element in the low nibble)."""
    if bits == 8:
        return codes.astype(np.int8)
    u = (codes + 8).astype(np.uint8)
    return (u[..., 0::2] | (u[..., 1::2] << 4)).astype(np.uint8)


def unpack(stored: np.ndarray, bits: int) -> np.ndarray:
    """Stored cache -> codes [..., H] (int32)."""
    if bits == 8:
        return stored.astype(np.int32)
    lo, hi = (stored & 15).astype(np.int32) - 8, (stored >> 4).astype(np.int32) - 8
    out = np.empty(stored.shape[:-1] + (2 * stored.shape[-1],), np.int32)
    out[..., 0::2], out[..., 1::2] = lo, hi
    return out


def dequantize(stored: np.ndarray, s: np.ndarray, bits: int) -> np.ndarray:
    """Stored cache [B, Nkv, L, w] -> float64 [B, Nkv, L, H] with per-channel scales s [Nkv, H]."""
    return unpack(stored, bits).astype(np.float64) * np.asarray(s, np.float64)[None, :, None, :]


def random_codes(rng, shape_codes, bits: int) -> np.ndarray:
    """A stored cache of random codes over the whole range (shape in codes: [B, Nkv, L, H])."""
    lo, hi = (-128, 127) if bits == 8 else (-8, 7)
    return pack(rng.integers(lo, hi + 1, shape_codes), bits)


def reference(q, new_k, new_v, past_k, past_v, ks, vs, bits, nh, nkv, h, seqlens, total, scale=None):
    """float64 output and present codes of one call without rotary, window, softcap or sinks: q [B,S,N*H],
    new_k/new_v [B,S,Nkv*H] float32, past [B,Nkv,P,w] stored codes (non-shared), ks/vs [Nkv,H]."""
    b, s = q.shape[0], q.shape[1]
    present_len = max(past_k.shape[2], total)
    first = s == total
    pk = np.zeros((b, nkv, present_len, h), np.int32)
    pv = np.zeros_like(pk)
    kn = new_k.reshape(b, s, nkv, h).transpose(0, 2, 1, 3)
    vn = new_v.reshape(b, s, nkv, h).transpose(0, 2, 1, 3)
    ck, cv = quantize(kn, ks, bits), quantize(vn, vs, bits)
    out = np.zeros((b, s, nh * h))
    g = nh // nkv
    sc = scale or 1.0 / np.sqrt(h)
    for bi in range(b):
        t = seqlens[bi] + 1
        p = 0 if first else t - s
        pk[bi, :, :p] = unpack(past_k[bi, :, :p], bits)
        pv[bi, :, :p] = unpack(past_v[bi, :, :p], bits)
        pk[bi, :, p:p + s] = ck[bi]
        pv[bi, :, p:p + s] = cv[bi]
        kd = pk[bi].astype(np.float64) * np.asarray(ks, np.float64)[:, None, :]
        vd = pv[bi].astype(np.float64) * np.asarray(vs, np.float64)[:, None, :]
        for si in range(s):
            n_keys = min(p + si + 1, t)
            for hh in range(nh):
                x = kd[hh // g, :n_keys] @ q[bi, si, hh * h:(hh + 1) * h].astype(np.float64) * sc
                x = np.exp(x - x.max())
                out[bi, si, hh * h:(hh + 1) * h] = (x / x.sum()) @ vd[hh // g, :n_keys]
    # padding rows of a longer present stay zero codes, stored as zero bytes
    pk_s, pv_s = pack(pk, bits), pack(pv, bits)
    for bi in range(b):
        t = seqlens[bi] + 1
        p = 0 if first else t - s
        pk_s[bi, :, p + s:] = 0
        pv_s[bi, :, p + s:] = 0
    return out, pk_s, pv_s
