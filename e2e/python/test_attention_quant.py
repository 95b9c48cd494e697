"""GroupQueryAttention over a quantized KV cache (k_quant_type / v_quant_type PER_TENSOR or PER_CHANNEL,
kv_cache_bit_width 8: int8 cache, 4: uint8 bytes of two codes): rcpu against ORT 1.31.1's CPU EP, and
ORT against the numpy quantizer and float64 reference of gqa_quant_models.py (which pins the semantics
the module doc there lists).

Tolerances: output rel L2 <= 1e-4 (ORT dequantizes and runs its float32 attention; rcpu folds the scales
into the query and the output and reads the codes: the same math, other roundings); present_key /
present_value codes bit-identical (np.array_equal), padding rows included.

Every positive test asserts the node ran on RcpuExecutionProvider.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import gqa_quant_models as gq
import models
from conftest import assert_error_names_node, assert_on_cpu, assert_on_rcpu, rel_l2

TOL = 1e-4
KINDS = ["PER_TENSOR", "PER_CHANNEL"]


def feeds(rng, b, s, nh, nkv, h, bits, kind, seqlens, total, past_len=None, packed=False, max_pos=0,
          sink=False, mag=1.0):
    f = {}
    if packed:
        f["q"] = (rng.standard_normal((b, s, (nh + 2 * nkv) * h)) * mag).astype(np.float32)
    else:
        f["q"] = rng.standard_normal((b, s, nh * h)).astype(np.float32)
        f["k"] = (rng.standard_normal((b, s, nkv * h)) * mag).astype(np.float32)
        f["v"] = (rng.standard_normal((b, s, nkv * h)) * mag).astype(np.float32)
    if past_len is not None:
        f["past_k"] = gq.random_codes(rng, (b, nkv, past_len, h), bits)
        f["past_v"] = gq.random_codes(rng, (b, nkv, past_len, h), bits)
    f["seqlens_k"] = np.asarray(seqlens, np.int32)
    f["total_seq_len"] = np.array(total, np.int32)
    if max_pos:
        f["cos"], f["sin"] = models.rope_caches(max_pos, h // 2)
    if sink:
        f["head_sink"] = rng.standard_normal(nh).astype(np.float32)
    # scales that put the new rows' codes over the whole range, some clamped
    f["k_scale"] = gq.scales(rng, kind, nkv, h, *((0.01, 0.04) if bits == 8 else (0.15, 0.6)))
    f["v_scale"] = gq.scales(rng, kind, nkv, h, *((0.01, 0.04) if bits == 8 else (0.15, 0.6)))
    if not packed:
        # exact ties (m + 0.5) * scale in the first token's first kv head: ORT rounds x * (1 / s)
        # half to even
        lim = 120 if bits == 8 else 7
        for name, sc in (("k", f["k_scale"]), ("v", f["v_scale"])):
            m = rng.integers(-lim, lim, h)
            f[name][0, 0, :h] = ((m + 0.5) * gq.channel_scales(sc, nkv, h)[0]).astype(np.float32)
    return f


def assert_parity(cpu, rc, f, what, tol=TOL):
    want, got = cpu.run(None, f), rc.run(None, f)
    for name, w, g in zip(("out", "present_k", "present_v"), want, got):
        assert g.shape == w.shape and g.dtype == w.dtype, f"{what} {name}: {g.shape} {g.dtype} vs {w.shape} {w.dtype}"
    e = rel_l2(got[0], want[0])
    assert e <= tol, f"{what} out: rel_l2 {e:.3g}"
    for name, w, g in zip(("present_k", "present_v"), want[1:], got[1:]):
        bad = np.argwhere(w != g)
        assert bad.size == 0, f"{what} {name}: {len(bad)} codes differ, first at {bad[:3].tolist()}"
    return want


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("kind", KINDS)
def test_reference_pins_ort(make_sessions, bits, kind):
    """ORT's codes are the numpy quantizer's (multiply by the f32 inverse, half to even, clamp, the 4-bit
    packing) and its output the float64 attention over the dequantized cache: first prompt, decode and a
    later prompt, exact .5 ties included. Seen failing with rounding half away from zero, with division by
    the scale, and with the nibbles swapped."""
    nh, nkv, h = 4, 2, 16
    cpu, _ = make_sessions(gq.gqa_quant(nh, nkv, h, bits, kind))
    rng = np.random.default_rng(bits + len(kind))
    for b, s, past, seqlens, total in [(1, 6, 0, [5], 6), (2, 1, 7, [4, 7], 8), (1, 3, 5, [7], 8)]:
        f = feeds(rng, b, s, nh, nkv, h, bits, kind, seqlens, total, past_len=past)
        ks, vs = gq.channel_scales(f["k_scale"], nkv, h), gq.channel_scales(f["v_scale"], nkv, h)
        # exact ties x = (m + 0.5) * scale in the first token's first kv head
        m = rng.integers(-6, 6, h)
        f["k"][0, 0, :h] = ((m + 0.5) * ks[0]).astype(np.float32)
        want = cpu.run(None, f)
        out, pk, pv = gq.reference(f["q"], f["k"], f["v"], f["past_k"], f["past_v"], ks, vs, bits, nh, nkv, h,
                                   seqlens, total)
        assert np.array_equal(want[1], pk) and np.array_equal(want[2], pv), f"codes b={b} s={s}"
        assert rel_l2(want[0], out) <= 1e-5


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("rotary,packed", [(False, False), (True, False), (True, True)])
def test_prompt_decode_and_later_prompt(make_sessions, bits, kind, rotary, packed):
    nh, nkv, h, max_pos = 8, 2, 64, 128
    model = gq.gqa_quant(nh, nkv, h, bits, kind, packed=packed, rotary=rotary, max_pos=max_pos)
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, "gqa0")
    rng = np.random.default_rng(bits * 3 + len(kind) + 2 * rotary + packed)
    mp = max_pos if rotary else 0
    for b, s, past, seqlens, total in [
        (1, 9, 0, [8], 9),            # first prompt, empty past
        (2, 5, 0, [4, 2], 5),         # right-padded first prompt, batch 2
        (1, 1, 9, [9], 10),           # decode
        (1, 1, 1, [1], 2),            # decode after one row
        (2, 1, 40, [17, 40], 41),     # batch 2, different seqlens_k
        (1, 4, 10, [13], 14),         # later prompt after a past
        (1, 1, 100, [100], 101),      # several key blocks
    ]:
        f = feeds(rng, b, s, nh, nkv, h, bits, kind, seqlens, total, past_len=past, packed=packed, max_pos=mp)
        assert_parity(cpu, rc, f, f"b={b} s={s} past={past} seqlens={seqlens}")


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("kind", KINDS)
def test_odd_shapes(make_sessions, bits, kind):
    """Head 8 and 24 (not a multiple of the vector widths), group 1 and 7, a first prompt into a
    longer past buffer (its later rows zero bytes), then decode. (Without past inputs ORT types
    present as float: a quantized cache needs them.)"""
    for nh, nkv, h in [(7, 1, 24), (2, 2, 8)]:
        model = gq.gqa_quant(nh, nkv, h, bits, kind)
        cpu, rc = make_sessions(model, {"threads": 2})
        assert_on_rcpu(rc, "gqa0")
        rng = np.random.default_rng(nh + h)
        f = feeds(rng, 1, 5, nh, nkv, h, bits, kind, [4], 5, past_len=12)
        assert_parity(cpu, rc, f, f"prompt nh={nh} h={h}")
        f = feeds(rng, 1, 1, nh, nkv, h, bits, kind, [12], 13, past_len=12)
        assert_parity(cpu, rc, f, f"decode nh={nh} h={h}")


def run_bound(sess, f, kval, vval):
    io = sess.io_binding()
    for name, arr in f.items():
        if name not in ("past_k", "past_v"):
            io.bind_cpu_input(name, arr)
    io.bind_ortvalue_input("past_k", kval)
    io.bind_ortvalue_input("past_v", vval)
    io.bind_output("out")
    io.bind_ortvalue_output("present_k", kval)
    io.bind_ortvalue_output("present_v", vval)
    sess.run_with_iobinding(io)
    return io.copy_outputs_to_cpu()[0]


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("kind", KINDS)
def test_shared_buffers_generation(make_sessions, bits, kind):
    """genai's layout: past and present bound to one max-length buffer per K and V; a prompt, then
    decode steps: every step's output within tolerance and the buffers bit-identical to ORT's."""
    nh, nkv, h, cap = 8, 2, 64, 48
    model = gq.gqa_quant(nh, nkv, h, bits, kind, rotary=True, max_pos=cap)
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, "gqa0")
    r = np.random.default_rng(9)
    k0, v0 = (gq.random_codes(r, (1, nkv, cap, h), bits) for _ in range(2))
    bufs = {}
    for which, sess in (("cpu", cpu), ("rc", rc)):
        kval, vval = ort.OrtValue.ortvalue_from_numpy(k0.copy()), ort.OrtValue.ortvalue_from_numpy(v0.copy())
        outs = []
        for step, (s, total) in enumerate(((7, 7), (1, 8), (1, 9), (1, 10))):
            f = feeds(np.random.default_rng(100 + step), 1, s, nh, nkv, h, bits, kind, [total - 1], total,
                      max_pos=cap)
            f["k_scale"], f["v_scale"] = (gq.scales(np.random.default_rng(7), kind, nkv, h, 0.01, 0.04)
                                          for _ in range(2))
            outs.append((run_bound(sess, f, kval, vval), kval.numpy().copy(), vval.numpy().copy()))
        bufs[which] = outs
    for i, ((w, wk, wv), (g, gk, gv)) in enumerate(zip(bufs["cpu"], bufs["rc"])):
        assert rel_l2(g, w) <= TOL, f"step {i}: rel_l2 {rel_l2(g, w):.3g}"
        assert np.array_equal(gk, wk) and np.array_equal(gv, wv), f"step {i}: buffers differ"


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("extra,sink", [(dict(local_window_size=3), False), (dict(softcap=2.0), False),
                                        (dict(smooth_softmax=1), False), ({}, True),
                                        (dict(local_window_size=5, softcap=3.0), True)])
def test_window_softcap_and_sinks(make_sessions, bits, extra, sink):
    nh, nkv, h = 8, 2, 32
    for kind in KINDS:
        model = gq.gqa_quant(nh, nkv, h, bits, kind, sink=sink, **extra)
        cpu, rc = make_sessions(model, {"threads": 2})
        assert_on_rcpu(rc, "gqa0")
        rng = np.random.default_rng(bits + len(extra) + sink)
        for b, s, past, seqlens, total in [(1, 7, 0, [6], 7), (2, 4, 0, [3, 1], 4), (1, 1, 12, [12], 13),
                                           (2, 1, 20, [5, 20], 21), (1, 3, 9, [11], 12)]:
            f = feeds(rng, b, s, nh, nkv, h, bits, kind, seqlens, total, past_len=past, sink=sink)
            assert_parity(cpu, rc, f, f"{kind} {extra} sink={sink} b={b} s={s} past={past}")


def assert_same_nan_and_close(got, want, what):
    gn, wn = np.isnan(got), np.isnan(want)
    assert np.array_equal(gn, wn), f"{what}: NaN positions differ ({gn.sum()} vs {wn.sum()})"
    if (~wn).any():
        assert rel_l2(np.where(gn, 0, got), np.where(wn, 0, want)) <= TOL, f"{what}: finite values differ"


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("value", [0.0, -0.0, -0.03, 1e-40, np.inf, -np.inf, np.nan])
def test_adversarial_scales(make_sessions, bits, kind, value):
    """A scale of +-0 (quantized with 1, dequantized as 0), negative or subnormal (its inverse
    overflows: saturated codes, x = 0 -> NaN -> hi) in every K and V scale (PER_CHANNEL: in every
    other channel): ORT's codes bit for bit, ORT's outputs. New keys with 0, -0, NaN and inf
    elements, and past codes at the ends of the range (-128 / -8). A non-finite scale (ORT's output
    then depends on how its softmax treats NaN scores: zero rows next to NaN ones) is a clear error
    naming the node and the scale."""
    nh, nkv, h = 4, 2, 16
    model = gq.gqa_quant(nh, nkv, h, bits, kind)
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, "gqa0")
    rng = np.random.default_rng(int(bits + len(kind)))
    for s, past, seqlens, total in [(4, 0, [3], 4), (1, 6, [6], 7)]:
        f = feeds(rng, 1, s, nh, nkv, h, bits, kind, seqlens, total, past_len=past, mag=3.0)
        for name in ("k_scale", "v_scale"):
            if kind == "PER_TENSOR":
                f[name][:] = value
            else:
                f[name].reshape(-1)[::2] = value
        f["k"][0, 0, :4] = [0.0, -0.0, np.nan, np.inf]
        if past:
            lo = -128 if bits == 8 else 0  # stored byte 0 is code -8 at 4 bits
            f["past_k"][0, 0, 0, :] = lo
            f["past_v"][0, 1, 1, :] = lo
        if not np.isfinite(value):
            with pytest.raises(Exception) as e:
                rc.run(None, f)
            assert_error_names_node(e.value, "gqa0")
            assert "k_scale" in str(e.value) and "finite" in str(e.value)
            continue
        want, got = cpu.run(None, f), rc.run(None, f)
        assert np.array_equal(got[1], want[1]) and np.array_equal(got[2], want[2]), f"{value} s={s}: codes"
        assert_same_nan_and_close(got[0], want[0], f"{value} s={s}: out")


@pytest.mark.parametrize("kind,shape", [("PER_TENSOR", (2,)), ("PER_TENSOR", (0,)), ("PER_CHANNEL", (1,)),
                                        ("PER_CHANNEL", (16,)), ("PER_CHANNEL", (2, 2, 1, 16))])
def test_scale_of_wrong_length_names_node(make_sessions, kind, shape):
    """ORT checks the element count only (1, or kv_num_heads * head_size in any shape) and fails
    another; rcpu fails it too, naming the node and the count it expected."""
    nh, nkv, h = 4, 2, 16
    cpu, rc = make_sessions(gq.gqa_quant(nh, nkv, h, 8, kind), {"threads": 2})
    assert_on_rcpu(rc, "gqa0")
    f = feeds(np.random.default_rng(3), 1, 1, nh, nkv, h, 8, kind, [5], 6, past_len=5)
    f["k_scale"] = np.full(shape, 0.02, np.float32)
    with pytest.raises(Exception):
        cpu.run(None, f)
    with pytest.raises(Exception) as e:
        rc.run(None, f)
    assert_error_names_node(e.value, "gqa0")
    assert "k_scale" in str(e.value)


@pytest.mark.parametrize("shape", [(1, 2, 1, 16), (2, 16), (32,), (1, 2, 16, 1)])
def test_per_channel_scale_shapes(make_sessions, shape):
    """Any shape of kv_num_heads * head_size scales runs, element n * H + c for channel c of head n."""
    nh, nkv, h = 4, 2, 16
    cpu, rc = make_sessions(gq.gqa_quant(nh, nkv, h, 8, "PER_CHANNEL"), {"threads": 2})
    assert_on_rcpu(rc, "gqa0")
    rng = np.random.default_rng(4)
    f = feeds(rng, 1, 1, nh, nkv, h, 8, "PER_CHANNEL", [5], 6, past_len=5)
    f["k_scale"] = (0.01 + 0.03 * rng.random(shape)).astype(np.float32)
    assert_parity(cpu, rc, f, f"scale shape {shape}")


@pytest.mark.parametrize("kw", [
    dict(kind="PER_TENSOR", v_kind="PER_CHANNEL"),          # ORT: types must be equal
    dict(kind="PER_CHANNEL", v_kind="PER_TENSOR"),
    dict(bit_attr=None),                                     # schema default 0: ORT fails
    dict(bit_attr=2), dict(bit_attr=16),                     # other bit widths: ORT fails
    dict(bits=8, cache_elem=gq.TP.UINT8),                    # 8-bit codes in uint8: ORT's type error
    dict(bits=4, cache_elem=gq.TP.INT8),
    dict(local_window_size=16, sliding_window_cache=1),      # windowed quantized cache: not implemented
])
def test_declined_forms_stay_on_ort(make_sessions, kw):
    """Forms ORT's CPU EP fails (rcpu leaves them to it, which reports them) and the windowed cache
    with quantization, which rcpu does not implement: the node stays on ORT, and runs as ORT runs it."""
    kw = dict(kw)
    bits = kw.pop("bits", 8)
    kind = kw.pop("kind", "PER_TENSOR")
    _, rc = make_sessions(gq.gqa_quant(4, 2, 16, bits, kind, **kw), {"threads": 2})
    assert_on_cpu(rc, "gqa0")


def test_bit_width_without_quantization_stays_on_ort(make_sessions):
    model = models.gqa(4, 2, 16, kv_cache_bit_width=8)
    _, rc = make_sessions(model, {"threads": 2})
    assert_on_cpu(rc, "gqa0")


def test_float16_and_bfloat16_caches_stay_on_ort(make_sessions):
    """float16 GQA (T = float16, float16 or int8 caches: ORT's CPU EP computes them) is not implemented
    by rcpu; bfloat16 has no CPU kernel at all. Both stay on ORT."""
    model = gq.gqa_quant(4, 2, 16, 8, "PER_TENSOR")
    for i in model.graph.input:
        if i.name in ("q", "k", "v"):
            i.type.tensor_type.elem_type = gq.TP.FLOAT16
    model.graph.output[0].type.tensor_type.elem_type = gq.TP.FLOAT16
    _, rc = make_sessions(model, {"threads": 2})
    assert_on_cpu(rc, "gqa0")
