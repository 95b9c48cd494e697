"""Parity of rcpu's com.microsoft.RotaryEmbedding and GroupQueryAttention with ORT's CPU EP, their
claim rules, and clean errors for bad inputs.

Tolerances: RotaryEmbedding elementwise rtol 1e-5 / atol 1e-6 (same products, one rounding each);
GQA relative L2 of every output <= 1e-5 (ORT sums QK and PV through its sgemm, rcpu per row with
FMA: the order of the sums differs, not the math). present_key/present_value are copies plus the
rotary (rtol 1e-5) and compare at rel L2 <= 1e-6.

Every positive test asserts the node ran on RcpuExecutionProvider.
"""

from __future__ import annotations

import numpy as np
import pytest

import models
from conftest import assert_error_names_node, assert_on_cpu, assert_on_rcpu, rel_l2

TOL = 1e-5


def rope_feeds(rng, x_shape, pos, max_pos, half):
    cos, sin = models.rope_caches(max_pos, half)
    return {"X": rng.standard_normal(x_shape).astype(np.float32), "pos": pos, "cos": cos, "sin": sin}


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("layout", ["bsd", "bnsh"])
def test_rotary_embedding(make_sessions, interleaved, layout):
    rng = np.random.default_rng(11 + interleaved)
    b, s, n, h, max_pos = 2, 5, 3, 64, 40
    shape = [b, s, n * h] if layout == "bsd" else [b, n, s, h]
    model = models.rotary_embedding(shape, [b, s], max_pos, h // 2, interleaved=interleaved,
                                    num_heads=n if layout == "bsd" else None)
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, "rope0")
    pos = rng.integers(0, max_pos, (b, s)).astype(np.int64)
    feeds = rope_feeds(rng, shape, pos, max_pos, h // 2)
    want, got = cpu.run(None, feeds)[0], rc.run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_rotary_embedding_offset_and_partial(make_sessions):
    rng = np.random.default_rng(3)
    b, s, n, h, rot, max_pos = 1, 7, 2, 64, 32, 64
    model = models.rotary_embedding([b, s, n * h], [1], max_pos, rot // 2, num_heads=n, rotary_embedding_dim=rot)
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, "rope0")
    feeds = rope_feeds(rng, [b, s, n * h], np.array([9], np.int64), max_pos, rot // 2)
    want, got = cpu.run(None, feeds)[0], rc.run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_rotary_embedding_bad_position_names_node(make_sessions):
    rng = np.random.default_rng(4)
    model = models.rotary_embedding([1, 2, 64], [1, 2], 8, 32, num_heads=1)
    _, rc = make_sessions(model, {"threads": 2})
    feeds = rope_feeds(rng, [1, 2, 64], np.array([[0, 8]], np.int64), 8, 32)
    with pytest.raises(Exception) as e:
        rc.run(None, feeds)
    assert_error_names_node(e.value, "rope0")


def run_both(cpu, rc, feeds):
    """(ORT's outputs, rcpu's) where ORT computes; None where ORT refuses, after checking that rcpu
    refuses too, naming the node."""
    try:
        want = cpu.run(None, feeds)
    except Exception:
        with pytest.raises(Exception) as e:
            rc.run(None, feeds)
        assert_error_names_node(e.value, "gqa0")
        return None
    return want, rc.run(None, feeds)


def gqa_feeds(rng, b, s, nh, nkv, h, seqlens, total, past_len=None, packed=False, max_pos=0):
    f = {}
    if packed:
        f["q"] = rng.standard_normal((b, s, (nh + 2 * nkv) * h)).astype(np.float32)
    else:
        f["q"] = rng.standard_normal((b, s, nh * h)).astype(np.float32)
        f["k"] = rng.standard_normal((b, s, nkv * h)).astype(np.float32)
        f["v"] = rng.standard_normal((b, s, nkv * h)).astype(np.float32)
    if past_len is not None:
        f["past_k"] = rng.standard_normal((b, nkv, past_len, h)).astype(np.float32)
        f["past_v"] = rng.standard_normal((b, nkv, past_len, h)).astype(np.float32)
    f["seqlens_k"] = np.asarray(seqlens, np.int32)
    f["total_seq_len"] = np.array(total, np.int32)
    if max_pos:
        f["cos"], f["sin"] = models.rope_caches(max_pos, h // 2)
    return f


def assert_gqa_parity(cpu, rc, feeds, what):
    want, got = cpu.run(None, feeds), rc.run(None, feeds)
    for name, w, g in zip(("out", "present_k", "present_v"), want, got):
        assert g.shape == w.shape, f"{what} {name}: shape {g.shape} vs {w.shape}"
        e = rel_l2(g, w)
        assert e <= (TOL if name == "out" else 1e-6), f"{what} {name}: rel_l2 {e:.3g}"


@pytest.mark.parametrize("rotary,interleaved", [(False, 0), (True, 0), (True, 1)])
@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("nh,nkv", [(4, 4), (4, 2), (14, 2)])
def test_gqa_decode_with_past(make_sessions, rotary, interleaved, packed, nh, nkv):
    rng = np.random.default_rng(nh * 7 + nkv + packed + 2 * rotary + interleaved)
    h, max_pos = 64, 128
    model = models.gqa(nh, nkv, h, packed=packed, rotary=rotary, interleaved=interleaved, max_pos=max_pos)
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, "gqa0")
    for b, past_lens in ((1, [0]), (1, [1]), (1, [37]), (2, [5, 16]), (1, [100])):
        # past buffer of max(past) rows; batch b has past_lens[b] valid rows, total = past + 1
        p = max(past_lens)
        total = p + 1
        feeds = gqa_feeds(rng, b, 1, nh, nkv, h, [q for q in past_lens], total, past_len=p, packed=packed,
                          max_pos=max_pos if rotary else 0)
        assert_gqa_parity(cpu, rc, feeds, f"decode b={b} past={past_lens}")


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("nh,nkv,h,half", [(8, 2, 128, 48), (4, 2, 64, 24), (4, 4, 96, 8)])
def test_gqa_partial_rotary(make_sessions, interleaved, nh, nkv, h, half):
    """Caches narrower than half the head (partial_rotary_factor < 1: Phi-4-mini's 0.75 at head
    128 gives 48 columns): only the first 2 * half dims of each head rotate, as in ORT."""
    max_pos = 64
    model = models.gqa(nh, nkv, h, rotary=True, interleaved=interleaved, max_pos=max_pos)
    for i in model.graph.input:
        if i.name in ("cos", "sin"):
            i.type.tensor_type.shape.dim[1].dim_value = half
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, "gqa0")
    rng = np.random.default_rng(h + half + interleaved)
    for past, s in [(10, 1), (0, 5), (37, 1)]:
        feeds = gqa_feeds(rng, 1, s, nh, nkv, h, [past + s - 1], past + s, past_len=past)
        feeds["cos"], feeds["sin"] = models.rope_caches(max_pos, half)
        assert_gqa_parity(cpu, rc, feeds, f"rot {2 * half} of head {h}, past {past}, {s} tokens")


def test_gqa_rotary_caches_chosen_at_run_time(make_sessions):
    """LongRoPE models (the builder's Phi-3 / Phi-3.5 128k form): an If node hands GQA the short or
    the long cos/sin caches by the attention mask's length, so the caches are values of the run,
    not constants. rcpu takes the GQA (the If and its shape nodes stay on ORT) and rotates with
    whichever caches the step gets: ORT's answer on both sides of the switch, in either order."""
    nh, nkv, h, max_pos, original = 14, 2, 64, 160, 32
    cpu, rc = make_sessions(models.gqa_longrope(nh, nkv, h, max_pos, original), {"threads": 2})
    assert_on_rcpu(rc, "gqa0")
    assert_on_cpu(rc, "rope_if")
    rng = np.random.default_rng(31)
    for past in (5, 31, 32, 40, 100, 20, 150):
        feeds = gqa_feeds(rng, 1, 1, nh, nkv, h, [past], past + 1, past_len=past)
        feeds["attention_mask"] = np.ones((1, past + 1), np.int64)
        assert_gqa_parity(cpu, rc, feeds, f"past {past} ({'long' if past + 1 > original else 'short'} caches)")


def test_gqa_decode_long_past(make_sessions):
    """Decode after pasts of one, several and many of the 64-row key blocks rcpu's decode step
    scores at a time (hinting the next block's keys into L2): ORT's answer."""
    rng = np.random.default_rng(77)
    nh, nkv, h = 14, 2, 64
    model = models.gqa(nh, nkv, h)
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, "gqa0")
    for past in (65, 300, 1100):
        feeds = gqa_feeds(rng, 1, 1, nh, nkv, h, [past], past + 1, past_len=past)
        assert_gqa_parity(cpu, rc, feeds, f"decode past={past}")


@pytest.mark.parametrize("rotary,interleaved", [(False, 0), (True, 0), (True, 1)])
@pytest.mark.parametrize("packed", [False, True])
def test_gqa_prefill_without_past(make_sessions, rotary, interleaved, packed):
    rng = np.random.default_rng(50 + packed + 2 * rotary + interleaved)
    nh, nkv, h, max_pos = 14, 2, 64, 64
    model = models.gqa(nh, nkv, h, packed=packed, past=False, rotary=rotary, interleaved=interleaved,
                       max_pos=max_pos)
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, "gqa0")
    for b, s in ((1, 1), (1, 3), (2, 17), (1, 33)):
        feeds = gqa_feeds(rng, b, s, nh, nkv, h, [s - 1] * b, s, packed=packed, max_pos=max_pos if rotary else 0)
        assert_gqa_parity(cpu, rc, feeds, f"prefill b={b} s={s}")


def test_gqa_prefill_into_max_length_past_buffer(make_sessions):
    """First prompt with a past buffer of the cache's max length (genai's shared-buffer layout)."""
    rng = np.random.default_rng(77)
    nh, nkv, h, max_pos = 8, 2, 64, 64
    model = models.gqa(nh, nkv, h, rotary=True, max_pos=max_pos)
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, "gqa0")
    feeds = gqa_feeds(rng, 1, 9, nh, nkv, h, [8], 9, past_len=32, max_pos=max_pos)
    assert_gqa_parity(cpu, rc, feeds, "prompt into 32-row buffer")
    # then a decode step at total 10 in the same buffer size
    feeds = gqa_feeds(rng, 1, 1, nh, nkv, h, [9], 10, past_len=32, max_pos=max_pos)
    assert_gqa_parity(cpu, rc, feeds, "decode in 32-row buffer")


def test_gqa_scale_and_head_32(make_sessions):
    rng = np.random.default_rng(5)
    model = models.gqa(6, 3, 32, scale=0.3)
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, "gqa0")
    feeds = gqa_feeds(rng, 2, 1, 6, 3, 32, [3, 6], 7, past_len=6)
    assert_gqa_parity(cpu, rc, feeds, "scale 0.3 head 32")


@pytest.mark.parametrize("extra", [dict(local_window_size=0), dict(local_window_size=-2), dict(softcap=-1.0),
                                   dict(sliding_window_cache=2), dict(smooth_softmax=2)])
def test_gqa_unsupported_attributes_stay_on_ort(make_sessions, extra):
    model = models.gqa(4, 2, 64, **extra)
    _, rc = make_sessions(model, {"threads": 2})
    assert_on_cpu(rc, "gqa0")


@pytest.mark.parametrize("seqlens,total,past", [([7], 8, 4), ([-1], 1, 4), ([40], 41, 8)])
def test_gqa_bad_seqlens_names_node(make_sessions, seqlens, total, past):
    rng = np.random.default_rng(6)
    model = models.gqa(4, 2, 64)
    _, rc = make_sessions(model, {"threads": 2})
    feeds = gqa_feeds(rng, 1, 1, 4, 2, 64, seqlens, total, past_len=past)
    with pytest.raises(Exception) as e:
        rc.run(None, feeds)
    assert_error_names_node(e.value, "gqa0")


def run_bound(sess, feeds, kval, vval):
    """One run with past and present bound to the same buffers (`kval`, `vval`) through IO binding,
    as genai runs it; returns the attention output."""
    io = sess.io_binding()
    for name, arr in feeds.items():
        io.bind_cpu_input(name, arr)
    io.bind_ortvalue_input("past_k", kval)
    io.bind_ortvalue_input("past_v", vval)
    io.bind_output("out")
    io.bind_ortvalue_output("present_k", kval)
    io.bind_ortvalue_output("present_v", vval)
    sess.run_with_iobinding(io)
    return io.copy_outputs_to_cpu()[0]


def bound_generation(sess, nh, nkv, h, cap, max_pos, steps):
    """A generation on `sess` with past and present bound to one pair of `cap`-row buffers (seeded
    contents), one step per (new tokens, total length) of `steps`, each step's feeds seeded by its
    index: per step (output, key buffer, value buffer) after it."""
    import onnxruntime as ort

    r = np.random.default_rng(5)
    kbuf = r.standard_normal((1, nkv, cap, h)).astype(np.float32)
    vbuf = r.standard_normal((1, nkv, cap, h)).astype(np.float32)
    kval, vval = ort.OrtValue.ortvalue_from_numpy(kbuf), ort.OrtValue.ortvalue_from_numpy(vbuf)
    outs = []
    for step, (s, total) in enumerate(steps):
        feeds = gqa_feeds(np.random.default_rng(100 + step), 1, s, nh, nkv, h, [total - 1], total, max_pos=max_pos)
        outs.append((run_bound(sess, feeds, kval, vval), kval.numpy().copy(), vval.numpy().copy()))
    return outs


def test_gqa_present_shares_past_buffer(make_sessions):
    """genai's layout: past_key/past_value and present_key/present_value bound to the same
    max-length buffers (IO binding); only the new rows are written, by ORT and by rcpu alike."""
    nh, nkv, h, max_len = 8, 2, 64, 48
    model = models.gqa(nh, nkv, h, rotary=True, max_pos=max_len)
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, "gqa0")
    steps = ((7, 7), (1, 8), (1, 9))
    cpu_steps, rc_steps = (bound_generation(x, nh, nkv, h, max_len, max_len, steps) for x in (cpu, rc))
    for i, ((w, _, _), (g, _, _)) in enumerate(zip(cpu_steps, rc_steps)):
        assert rel_l2(g, w) <= TOL, f"step {i}: rel_l2 {rel_l2(g, w):.3g}"
    (_, ck, cv), (_, rk, rv) = cpu_steps[-1], rc_steps[-1]
    assert rel_l2(rk, ck) <= 1e-6 and rel_l2(rv, cv) <= 1e-6


@pytest.mark.parametrize("rotary,interleaved", [(False, 0), (True, 0), (True, 1)])
@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("past_len", [None, 0, 8])
def test_gqa_right_padded_first_prompt(make_sessions, rotary, interleaved, packed, past_len):
    """Batch 2, first prompt of 5 tokens, right-padded (seqlens_k = [4, 2]): the padded query rows
    of batch 1 attend to its 3 valid keys (ORT), not causally to keys 0..=s."""
    rng = np.random.default_rng(120 + packed + 2 * rotary + interleaved)
    nh, nkv, h, max_pos = 4, 2, 64, 16
    model = models.gqa(nh, nkv, h, packed=packed, past=past_len is not None, rotary=rotary,
                       interleaved=interleaved, max_pos=max_pos)
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, "gqa0")
    for seqlens in ([4, 2], [0, 4], [2, 0]):
        feeds = gqa_feeds(rng, 2, 5, nh, nkv, h, seqlens, 5, past_len=past_len, packed=packed,
                          max_pos=max_pos if rotary else 0)
        assert_gqa_parity(cpu, rc, feeds, f"padded prompt seqlens={seqlens} past={past_len}")


@pytest.mark.parametrize("s,total,seqlens,past", [
    (1, 1_000_000, [8], 8),  # ORT: neither past + new nor within the past buffer
    (1, 10, [8], 8),
    (1, 5, [4], None),
    (3, 2, [1], None),  # total shorter than the new tokens
    (0, 8, [3], 8),  # no tokens outside a first prompt
    (3, 11, [1], 8),  # seqlens_k too small for the new tokens
    (1, 9, [9], 8),  # seqlens_k past the present buffer
])
def test_gqa_inconsistent_lengths_names_node(make_sessions, s, total, seqlens, past):
    """Lengths ORT rejects: rcpu refuses too, naming the node, before sizing present buffers."""
    rng = np.random.default_rng(7)
    model = models.gqa(4, 2, 64, past=past is not None)
    cpu, rc = make_sessions(model, {"threads": 2})
    feeds = gqa_feeds(rng, 1, s, 4, 2, 64, seqlens, total, past_len=past)
    with pytest.raises(Exception):
        cpu.run(None, feeds)
    with pytest.raises(Exception) as e:
        rc.run(None, feeds)
    assert_error_names_node(e.value, "gqa0")


@pytest.mark.parametrize("rotary", [False, True])
@pytest.mark.parametrize("packed", [False, True])
def test_gqa_random_lengths_agree_with_ort(make_sessions, rotary, packed):
    """Random batch / sequence / past lengths, totals and per-batch seqlens_k (prompt, subsequent
    prompt, token phase, static and growing caches, padding): where ORT computes, rcpu gives the
    same outputs; where ORT refuses, rcpu refuses too, naming the node."""
    rng = np.random.default_rng(300 + 2 * rotary + packed)
    nh, nkv, h, max_pos = 4, 2, 32 if not rotary else 64, 24
    for past in (True, False):
        model = models.gqa(nh, nkv, h, packed=packed, past=past, rotary=rotary, max_pos=max_pos)
        cpu, rc = make_sessions(model, {"threads": 2})
        assert_on_rcpu(rc, "gqa0")
        agreed = 0
        for _ in range(40):
            b, s = int(rng.integers(1, 4)), int(rng.choice([1, 1, 2, 5]))
            p = int(rng.integers(0, 10)) if past else None
            total = int(rng.choice([s, s + (p or 0), p or s, rng.integers(1, 16)]))
            seqlens = [int(rng.integers(-1, 16)) for _ in range(b)]
            if rng.random() < 0.5:
                seqlens = [min(max(x, 0), total - 1) for x in seqlens]
            feeds = gqa_feeds(rng, b, s, nh, nkv, h, seqlens, total, past_len=p, packed=packed,
                              max_pos=max_pos if rotary else 0)
            both = run_both(cpu, rc, feeds)
            if both is None:
                continue
            want, got = both
            what = f"b={b} s={s} past={p} total={total} seqlens={seqlens}"
            for name, w, g in zip(("out", "present_k", "present_v"), want, got):
                assert g.shape == w.shape, f"{what} {name}: shape {g.shape} vs {w.shape}"
                e = rel_l2(g, w)
                assert e <= (TOL if name == "out" else 1e-6), f"{what} {name}: rel_l2 {e:.3g}"
            agreed += 1
        assert agreed >= 5, f"only {agreed} computed cases"


@pytest.mark.parametrize("window,softcap", [(1, 0.0), (3, 0.0), (2, 2.0), (-1, 1.5), (40, 30.0)])
@pytest.mark.parametrize("rotary,packed", [(False, False), (True, True)])
def test_gqa_local_window_and_softcap(make_sessions, window, softcap, rotary, packed):
    """local_window_size (a query attends to its latest `window` causal keys) and softcap
    (`cap * tanh(x / cap)` on the scaled scores), claimed by rcpu: decode after short and long
    pasts (across the decode step's 64-row key blocks), batch 2 with different lengths, a
    subsequent prompt, a first prompt and a right-padded one, a present buffer shared with the
    past: ORT's outputs (rel L2 as for every GQA case). Seen failing with the window one key wider
    (as ORT before 1.2x had it) and with the softcap left out."""
    rng = np.random.default_rng(500 + window + int(softcap * 10) + 2 * rotary + packed)
    nh, nkv, h, max_pos = 8, 2, 64, 200
    extra = {"softcap": softcap} if softcap else {}
    model = models.gqa(nh, nkv, h, packed=packed, rotary=rotary, max_pos=max_pos,
                       local_window_size=window, **extra)
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, "gqa0")
    mp = max_pos if rotary else 0
    for b, s, p, seqlens, total in ((1, 1, 0, [0], 1), (1, 1, 5, [5], 6), (1, 1, 130, [130], 131),
                                    (2, 1, 70, [70, 9], 71), (1, 4, 9, [12], 13), (1, 9, 0, [8], 9),
                                    (2, 6, 0, [5, 2], 6), (1, 1, 9, [3], 10)):
        feeds = gqa_feeds(rng, b, s, nh, nkv, h, seqlens, total, past_len=p, packed=packed, max_pos=mp)
        assert_gqa_parity(cpu, rc, feeds, f"window={window} softcap={softcap} b={b} s={s} past={p} {seqlens}")


def window_end(n: int, cap: int, window: int) -> int:
    """Rows a windowed cache of `cap` rows (window `window`) holds after `n` positions: ORT's
    reclaim rule (whole blocks of cap - window + 1 rows once past the capacity)."""
    gap = cap - window + 1
    return n if n <= cap else n - gap * -(-(n - cap) // gap)


def assert_windowed_parity(want, got, seqlens, cap, window, what):
    """Outputs within TOL; present rows the step wrote (per batch: window_end(seqlens + 1)) within
    1e-6. Rows after them are the cache's leftovers (ORT leaves a separate present's unwritten)."""
    assert got[0].shape == want[0].shape, f"{what} out: shape {got[0].shape} vs {want[0].shape}"
    e = rel_l2(got[0], want[0])
    assert e <= TOL, f"{what} out: rel_l2 {e:.3g}"
    for name, w, g in zip(("present_k", "present_v"), want[1:], got[1:]):
        assert g.shape == w.shape, f"{what} {name}: shape {g.shape} vs {w.shape}"
        for b, sk in enumerate(seqlens):
            rows = window_end(sk + 1, cap, window)
            e = rel_l2(g[b, :, :rows], w[b, :, :rows])
            assert e <= 1e-6, f"{what} {name} batch {b} ({rows} rows): rel_l2 {e:.3g}"


@pytest.mark.parametrize("cap,window", [(8, 8), (12, 5), (16, 4)])
@pytest.mark.parametrize("rotary,packed,softcap", [(False, False, 0.0), (True, True, 0.0), (True, False, 3.0)])
def test_gqa_windowed_cache_generation(make_sessions, cap, window, rotary, packed, softcap):
    """sliding_window_cache = 1 (the model builder's bounded caches for sliding-window layers): a
    prompt, then decode steps well past the capacity (through several reclaims) and steps of 3
    tokens (which stage when a reclaim would drop rows they read), each session feeding its own
    present back as the next past: ORT's outputs and written cache rows at every step. Seen
    failing with the rotary positions taken from the cache rows instead of the sequence, and with
    the staged rows written back from the wrong offset."""
    rng = np.random.default_rng(700 + cap + window + 2 * rotary + packed)
    nh, nkv, h, max_pos = 8, 2, 64, 96
    extra = {"softcap": softcap} if softcap else {}
    model = models.gqa(nh, nkv, h, packed=packed, rotary=rotary, max_pos=max_pos, local_window_size=window,
                       sliding_window_cache=1, **extra)
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, "gqa0")
    mp = max_pos if rotary else 0
    for prompt in (5, cap + 7):
        z = np.zeros((1, nkv, cap, h), np.float32)
        caches = {"cpu": (z, z), "rc": (z, z)}
        n = 0
        for s in [prompt] + [1] * 14 + [3, 3, 1, 3, 1, 1, 3]:
            n += s
            feeds = gqa_feeds(rng, 1, s, nh, nkv, h, [n - 1], n, packed=packed, max_pos=mp)
            outs = {}
            for key, sess in (("cpu", cpu), ("rc", rc)):
                f = dict(feeds, past_k=caches[key][0], past_v=caches[key][1])
                outs[key] = sess.run(None, f)
                caches[key] = (outs[key][1], outs[key][2])
            assert_windowed_parity(outs["cpu"], outs["rc"], [n - 1], cap, window,
                                   f"cap={cap} window={window} prompt={prompt} at {n} (step {s})")


def test_gqa_windowed_cache_shared_buffer(make_sessions):
    """genai binds past and present to one buffer: compaction moves rows within it, in place;
    the whole buffer (leftover rows too) matches ORT's after every step."""
    nh, nkv, h, cap, window, max_pos = 8, 2, 64, 10, 6, 64
    model = models.gqa(nh, nkv, h, rotary=True, max_pos=max_pos, local_window_size=window,
                       sliding_window_cache=1)
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, "gqa0")
    sizes = [7] + [1] * 12 + [3, 1, 3]
    steps = list(zip(sizes, np.cumsum(sizes).tolist()))
    results = [bound_generation(x, nh, nkv, h, cap, max_pos, steps) for x in (cpu, rc)]
    for i, ((co, ck, cv), (ro, rk, rv)) in enumerate(zip(*results)):
        assert rel_l2(ro, co) <= TOL, f"step {i}: out rel_l2 {rel_l2(ro, co):.3g}"
        assert rel_l2(rk, ck) <= 1e-6 and rel_l2(rv, cv) <= 1e-6, f"step {i}: cache buffers differ"


@pytest.mark.parametrize("rotary", [False, True])
def test_gqa_windowed_cache_random_calls_agree_with_ort(make_sessions, rotary):
    """Random windowed calls (batch, tokens, capacity, absolute lengths far past the cache,
    totals that are not the lengths, too-short seqlens_k): where ORT computes, rcpu gives its
    outputs and written rows; where ORT refuses, rcpu refuses too, naming the node."""
    rng = np.random.default_rng(900 + rotary)
    nh, nkv, h, max_pos, window = 4, 2, 64, 48, 4
    for cap in (4, 7):
        model = models.gqa(nh, nkv, h, rotary=rotary, max_pos=max_pos, local_window_size=window,
                           sliding_window_cache=1)
        cpu, rc = make_sessions(model, {"threads": 2})
        assert_on_rcpu(rc, "gqa0")
        agreed = 0
        for _ in range(40):
            b, s = int(rng.integers(1, 3)), int(rng.choice([1, 1, 2, 5, 9]))
            seqlens = [int(rng.integers(-1, 60)) for _ in range(b)]
            total = int(rng.choice([s, max(seqlens) + 1, rng.integers(0, 50)]))
            feeds = gqa_feeds(rng, b, s, nh, nkv, h, seqlens, total, past_len=cap,
                              max_pos=max_pos if rotary else 0)
            both = run_both(cpu, rc, feeds)
            if both is None:
                continue
            want, got = both
            assert_windowed_parity(want, got, seqlens, cap, window,
                                   f"cap={cap} b={b} s={s} total={total} seqlens={seqlens}")
            agreed += 1
        assert agreed >= 5, f"only {agreed} computed cases"


@pytest.mark.parametrize("sink,smooth", [(True, 0), (False, 1), (True, 1)])
@pytest.mark.parametrize("window", [-1, 3])
def test_gqa_sinks_and_smooth_softmax(make_sessions, sink, smooth, window):
    """head_sink (gpt-oss's attention sinks) and smooth_softmax: a sink logit per query head (0
    without head_sink) joins each softmax, its probability dropped; decode, prefill, a right-padded
    prompt, with and without a window: ORT's outputs. A head_sink of the wrong length: both refuse.
    Seen failing with the sink left out of the normaliser."""
    rng = np.random.default_rng(800 + 2 * sink + smooth + window)
    nh, nkv, h, max_pos = 8, 2, 64, 200
    extra = {"smooth_softmax": smooth} if smooth else {}
    model = models.gqa(nh, nkv, h, rotary=True, max_pos=max_pos, sink=sink, local_window_size=window, **extra)
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, "gqa0")
    for b, s, p, seqlens, total in ((1, 1, 0, [0], 1), (1, 1, 70, [70], 71), (2, 1, 9, [9, 4], 10),
                                    (1, 6, 0, [5], 6), (2, 5, 0, [4, 2], 5), (1, 3, 4, [6], 7)):
        feeds = gqa_feeds(rng, b, s, nh, nkv, h, seqlens, total, past_len=p, max_pos=max_pos)
        if sink:
            feeds["head_sink"] = (rng.standard_normal(nh) * 2).astype(np.float32)
        assert_gqa_parity(cpu, rc, feeds, f"sink={sink} smooth={smooth} window={window} b={b} s={s} past={p}")
    if sink:
        feeds = gqa_feeds(rng, 1, 1, nh, nkv, h, [3], 4, past_len=3, max_pos=max_pos)
        feeds["head_sink"] = np.zeros(nh - 1, np.float32)
        assert run_both(cpu, rc, feeds) is None, "ORT computes with a short head_sink"


def test_gqa_windowed_cache_with_sinks_generation(make_sessions):
    """gpt-oss's sliding layers as the builder writes them for CPU: window 4 over a bounded cache
    (sliding_window_cache = 1) with attention sinks: a generation loop through reclaims and
    staged steps, each session its own cache: ORT's outputs and written rows."""
    rng = np.random.default_rng(901)
    nh, nkv, h, cap, window, max_pos = 8, 2, 64, 9, 4, 64
    model = models.gqa(nh, nkv, h, rotary=True, max_pos=max_pos, sink=True, local_window_size=window,
                       sliding_window_cache=1)
    cpu, rc = make_sessions(model, {"threads": 2})
    assert_on_rcpu(rc, "gqa0")
    sinks = (rng.standard_normal(nh) * 2).astype(np.float32)
    z = np.zeros((1, nkv, cap, h), np.float32)
    caches = {"cpu": (z, z), "rc": (z, z)}
    n = 0
    for s in [6] + [1] * 10 + [3, 1, 3]:
        n += s
        feeds = gqa_feeds(rng, 1, s, nh, nkv, h, [n - 1], n, max_pos=max_pos)
        feeds["head_sink"] = sinks
        outs = {}
        for key, sess in (("cpu", cpu), ("rc", rc)):
            outs[key] = sess.run(None, dict(feeds, past_k=caches[key][0], past_v=caches[key][1]))
            caches[key] = (outs[key][1], outs[key][2])
        assert_windowed_parity(outs["cpu"], outs["rc"], [n - 1], cap, window, f"at {n} (step {s})")
