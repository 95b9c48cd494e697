"""Fused partitions (provider option `fuse`, default `on`): rcpu claims each maximal group of its
nodes as one fused node and runs the group itself (`abi/fused.rs`). The results must equal the
per-node path (`fuse=off`) exactly and ORT's CPU EP within each op's tolerance; a failing inner
node must be named; concurrent runs of one session must stay correct."""

from __future__ import annotations

import concurrent.futures
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import models
from conftest import EP_NAME, REPO, assert_on_cpu, assignment, rcpu_session, rel_l2

BENCH = REPO / "target" / "release" / "rcpu-bench"


def rcpu_groups(sess) -> list[set[str]]:
    """The node sets of the subgraphs ORT assigned to rcpu (one per fused node or single node)."""
    return [set(n.name for n in sg.get_nodes()) for sg in sess.get_provider_graph_assignment_info()
            if sg.ep_name == EP_NAME]


def two_partitions(rng: np.random.Generator, k: int = 16, n: int = 24) -> onnx.ModelProto:
    """mm0 -> add0 -> abs0 (ORT) -> mul1 -> sig0, with add0's output also read by mul1 and
    returned as a graph output: rcpu gets two fused partitions, {mm0, add0} and {mul1, sig0}.
    X's inner dim is symbolic so a bad feed reaches rcpu's MatMul."""
    w = numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal((n,)).astype(np.float32), "B")
    nodes = [
        helper.make_node("MatMul", ["X", "W"], ["t0"], name="mm0"),
        helper.make_node("Add", ["t0", "B"], ["T1"], name="add0"),
        helper.make_node("Abs", ["T1"], ["t2"], name="abs0"),
        helper.make_node("Mul", ["t2", "T1"], ["t3"], name="mul1"),
        helper.make_node("Sigmoid", ["t3"], ["Y"], name="sig0"),
    ]
    return models._model(nodes, [models._vi("X", ["M", "K"])], [models._vi("Y", None), models._vi("T1", None)],
                         [w, b])


@pytest.fixture(scope="module")
def small_qwen(tmp_path_factory) -> bytes:
    """A genai-builder-shaped Qwen2 decoder (2 layers, vocab 512) from rcpu-bench gen."""
    if not BENCH.is_file():
        pytest.fail(f"{BENCH} missing: `cargo build --release --workspace` first", pytrace=False)
    d = tmp_path_factory.mktemp("qwen")
    spec = "llm:preset=qwen2-0.5b,layers=2,vocab=512,acc=4,seed=5"
    out = subprocess.run([str(BENCH), "gen", spec, "--out", str(d / "model.onnx")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return (d / "model.onnx").read_bytes()


def qwen_feeds(rng, sess, past: int, seq: int) -> dict:
    f = {}
    for i in sess.get_inputs():
        if i.name == "input_ids":
            f[i.name] = rng.integers(0, 512, (1, seq)).astype(np.int64)
        elif i.name == "attention_mask":
            f[i.name] = np.ones((1, past + seq), np.int64)
        else:
            f[i.name] = rng.standard_normal((1, i.shape[1], past, i.shape[3])).astype(np.float32)
    return f


def test_qwen_is_one_partition_and_matches_per_node_path_and_ort(small_qwen, make_sessions, rcpu_devices):
    cpu, fused = make_sessions(small_qwen, {"fuse": "on"})
    per_node = rcpu_session(small_qwen, rcpu_devices, {"fuse": "off"})
    groups = rcpu_groups(fused)
    singles = rcpu_groups(per_node)
    assert len(groups) == 1, f"the decoder must be ONE fused partition, got {len(groups)}: {groups}"
    assert all(len(g) == 1 for g in singles), "fuse=off must leave every rcpu node its own node"
    assert groups[0] == set().union(*singles), "fusion must claim exactly the per-node path's nodes"
    assert len(groups[0]) > 20
    rng = np.random.default_rng(3)
    for past, seq in [(8, 1), (0, 7), (5, 3)]:
        f = qwen_feeds(rng, cpu, past, seq)
        want, got, ref = cpu.run(None, f), fused.run(None, f), per_node.run(None, f)
        for o, (w, g, r) in enumerate(zip(want, got, ref)):
            np.testing.assert_array_equal(g, r, err_msg=f"past={past} seq={seq} output {o}: fused != per-node")
            # accuracy_level 4 quantizes activations to int8: rcpu-bench's logits tolerance.
            assert rel_l2(g, w) < 2e-2, f"past={past} seq={seq} output {o} vs ORT: {rel_l2(g, w)}"


def with_longrope_caches(model_bytes: bytes, original: int) -> bytes:
    """The model with its rotary caches chosen at run time, as onnxruntime-genai's builder writes
    LongRoPE models (Phi-3 / Phi-3.5 128k): the cos_cache / sin_cache initializers become the
    outputs of `models.longrope_selector` (its If is rope_if), whose long branch holds the caches
    scaled by 1.1 and whose short branch their first `original` rows as they were (as the
    builder's, the two branches' caches differ in length)."""
    m = onnx.load_from_string(model_bytes)
    caches = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer if i.name in ("cos_cache", "sin_cache")}
    assert len(caches) == 2, "the generated model's rotary caches"
    keep = [i for i in m.graph.initializer if i.name not in caches]
    long = {c: (a * np.float32(1.1)).astype(np.float32) for c, a in caches.items()}
    short = {c: a[:original] for c, a in caches.items()}
    head, inits = models.longrope_selector(long, short, original)
    del m.graph.initializer[:]
    m.graph.initializer.extend(keep + inits)
    nodes = head + list(m.graph.node)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    return m.SerializeToString()


def test_rotary_caches_chosen_at_run_time_stay_one_partition(small_qwen, make_sessions, rcpu_devices):
    """A whole decoder whose rotary caches an If node picks per run (LongRoPE): every rcpu node
    still one fused partition (the If on ORT feeds it), equal to the per-node path, and ORT's
    answer on both sides of the switch, a prompt and decode steps, in either order."""
    model = with_longrope_caches(small_qwen, original=8)
    cpu, fused = make_sessions(model, {"fuse": "on"})
    per_node = rcpu_session(model, rcpu_devices, {"fuse": "off"})
    assert len(rcpu_groups(fused)) == 1, rcpu_groups(fused)
    assert_on_cpu(fused, "rope_if")
    rng = np.random.default_rng(11)
    for past, seq in [(4, 1), (8, 1), (0, 7), (0, 12), (5, 3), (10, 3), (3, 1)]:
        f = qwen_feeds(rng, cpu, past, seq)
        want, got, ref = cpu.run(None, f), fused.run(None, f), per_node.run(None, f)
        side = "long" if past + seq > 8 else "short"
        for o, (w, g, r) in enumerate(zip(want, got, ref)):
            np.testing.assert_array_equal(g, r, err_msg=f"past={past} seq={seq} ({side}) output {o}: fused != per-node")
            assert rel_l2(g, w) < 2e-2, f"past={past} seq={seq} ({side}) output {o} vs ORT: {rel_l2(g, w)}"


@pytest.mark.parametrize("acc", [0, 4])
@pytest.mark.parametrize("tied", [0, 1])
def test_8bit_lm_head_stays_in_the_partition(tmp_path, make_sessions, rcpu_devices, stats, acc, tied):
    """An 8-bit lm_head (onnxruntime-genai's k_quant_last / k_quant_mixed write one; `rcpu-bench gen
    llm:...,lm_bits=8`), untied or tied (the embedding an 8-bit GatherBlockQuantized over the lm_head's
    codes, as the builder ties them there): claimed, so the decoder stays ONE fused partition, equal to
    the per-node path bit for bit and within ORT's tolerance (level 0: 1e-4, level 4: 2e-2); the route
    ledger names the 8-bit route, and a tied table is read from the packed lm_head (`scalar-tied`)."""
    spec = f"llm:preset=qwen2-0.5b,layers=2,vocab=700,acc={acc},seed=8,tied={tied},lm_bits=8"
    out = subprocess.run([str(BENCH), "gen", spec, "--out", str(tmp_path / "model.onnx")], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    model = (tmp_path / "model.onnx").read_bytes()
    lm = [n for n in onnx.load_from_string(model).graph.node if n.name == "lm_head"]
    assert [a.i for a in lm[0].attribute if a.name == "bits"] == [8]
    cpu, fused = make_sessions(model, {"fuse": "on"})
    per_node = rcpu_session(model, rcpu_devices, {"fuse": "off"})
    groups = rcpu_groups(fused)
    assert len(groups) == 1 and "lm_head" in groups[0], groups
    rng = np.random.default_rng(4)
    stats.reset()
    for past, seq in [(8, 1), (0, 9)]:
        f = qwen_feeds(rng, cpu, past, seq)
        want, got, ref = cpu.run(None, f), fused.run(None, f), per_node.run(None, f)
        for o, (w, g, r) in enumerate(zip(want, got, ref)):
            np.testing.assert_array_equal(g, r, err_msg=f"past={past} seq={seq} output {o}: fused != per-node")
            tol = 2e-2 if acc == 4 else 1e-4
            assert rel_l2(g, w) < tol, f"past={past} seq={seq} output {o} vs ORT: {rel_l2(g, w)}"
    assert any(v.endswith("-gemv-bits8") for v in stats.variants("MatMulNBits")), stats.ledger()
    if tied:
        assert "embed_gather_block_quantized" in groups[0], groups
        # With ORT's basic optimizations the builder's Reshape of the lm_head's codes is folded into
        # an initializer, which the gather then shares with the packed lm_head.
        basic = rcpu_session(model, rcpu_devices, {"fuse": "on"}, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
        f = qwen_feeds(rng, cpu, 3, 2)
        stats.reset()
        got, want = basic.run(None, f), cpu.run(None, f)
        assert stats.variants("GatherBlockQuantized") == {"scalar-tied"}, stats.ledger()
        assert rel_l2(got[0], want[0]) < (2e-2 if acc == 4 else 1e-4)


@pytest.mark.parametrize("acc", [0, 4])
@pytest.mark.parametrize("form", ["plain_norms", "qk_norm", "qk_norm_split", "bias_add", "relu2", "window_softcap"])
def test_builder_layer_forms_are_one_partition(make_sessions, rcpu_devices, stats, acc, form):
    """Decoder layers in more of the model builder's forms are one fused partition each, equal to the
    per-node path and within the decoder-layer tolerance of ORT (rel L2 1e-4 at accuracy_level 0, 2e-2
    at 4): LayerNormalization and SkipLayerNormalization (Phi-2 / GPT-2 / OLMo-style norms), per-head
    query / key RMSNorms between Reshapes (Qwen3 / Gemma3-style), the `relu2` MLP (Relu, Pow 2:
    Nemotron), a sliding-window attention with a softcap (Gemma 2-style; a past of 6 rows is
    longer than the window of 4), the packed QKV projection Split in three before the q / k norms
    (Qwen3 as the builder writes it now) and the Q / K / V biases as Add nodes after their
    projections (the builder's form since 0.18; inside the partition each folds into its
    projection, node by node each is an Add). Inside the partition the four
    Reshapes hand their input's buffer on (ledger route `view`); node by node (`fuse=off`) a Reshape
    would be alone, so it stays on ORT."""
    rng = np.random.default_rng(21 + acc)
    forms = {"qk_norm_split": {"qk_norm": True, "packed_split": True}}.get(form, {form: True})
    m = models.decoder_layer(rng, accuracy_level=acc, kv_cache=True, rotary=True, **forms)
    m = m.SerializeToString()
    cpu, fused = make_sessions(m, {"fuse": "on"})
    per_node = rcpu_session(m, rcpu_devices, {"fuse": "off"})
    groups = rcpu_groups(fused)
    assert len(groups) == 1, f"the layer must be ONE fused partition, got {len(groups)}: {groups}"
    assert {"ln1", "ln2"} <= groups[0]
    if form.startswith("qk_norm"):
        assert {"q_norm", "k_norm", "q_norm_reshape_1", "k_norm_reshape_2"} <= groups[0]
    if form == "qk_norm_split":
        assert "qkv_split" in groups[0]
    if form == "bias_add":
        assert {"q_proj_bias_add", "k_proj_bias_add", "v_proj_bias_add"} <= groups[0]
    if form == "relu2":
        assert {"mlp_relu", "mlp_square"} <= groups[0]
    assert "CPUExecutionProvider" not in assignment(fused), assignment(fused)
    for past, seq in [(6, 1), (0, 5)]:
        f = {"X": rng.standard_normal((1, seq, models.QWEN2_HIDDEN)).astype(np.float32),
             "seqlens_k": np.array([past + seq - 1], np.int32), "total_seq_len": np.array(past + seq, np.int32),
             "past_k": rng.standard_normal((1, models.QWEN2_KV_HEADS, past, models.QWEN2_HEAD_DIM)).astype(np.float32),
             "past_v": rng.standard_normal((1, models.QWEN2_KV_HEADS, past, models.QWEN2_HEAD_DIM)).astype(np.float32)}
        stats.reset()
        got = fused.run(None, f)
        fused_routes = stats.variants("Reshape")
        def add_calls():
            # Adds run as steps of their own, and those folded into their projection's call.
            rows = [r for r in stats.ledger() if r["op"] == "Add"]
            folded = sum(r["calls"] for r in rows if r["variant"] == "folded-into-matmul-nbits")
            return sum(r["calls"] for r in rows) - folded, folded

        fused_adds = add_calls()
        stats.reset()
        want, ref = cpu.run(None, f), per_node.run(None, f)
        if form == "bias_add":
            # The biases fold into their projections (no Add step; the layer's residual Add still
            # runs); node by node each bias is an Add of its own.
            assert (fused_adds, add_calls()) == ((1, 3), (4, 0)), stats.ledger()
        if form.startswith("qk_norm"):
            assert fused_routes == {"view"}, stats.ledger()
            assert not stats.variants("Reshape"), stats.ledger()  # fuse=off: a lone Reshape stays on ORT
        for o, (w, g, r) in enumerate(zip(want, got, ref)):
            np.testing.assert_array_equal(g, r, err_msg=f"past={past} seq={seq} output {o}: fused != per-node")
            tol = 2e-2 if acc == 4 else 1e-4
            assert rel_l2(g, w) < tol, f"past={past} seq={seq} output {o} vs ORT: {rel_l2(g, w)}"


def test_ort_nodes_between_rcpu_nodes_give_several_partitions(make_sessions, rcpu_devices):
    rng = np.random.default_rng(11)
    m = two_partitions(rng).SerializeToString()
    cpu, fused = make_sessions(m)
    per_node = rcpu_session(m, rcpu_devices, {"fuse": "off"})
    assert sorted(map(sorted, rcpu_groups(fused))) == [["add0", "mm0"], ["mul1", "sig0"]]
    assert assignment(fused)["CPUExecutionProvider"] == {"abs0"}
    for m_rows in (1, 5, 33):
        x = rng.standard_normal((m_rows, 16)).astype(np.float32)
        want, got, ref = cpu.run(None, {"X": x}), fused.run(None, {"X": x}), per_node.run(None, {"X": x})
        for w, g, r in zip(want, got, ref):
            np.testing.assert_array_equal(g, r)
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_bad_input_inside_a_partition_names_the_inner_node(make_sessions):
    _, fused = make_sessions(two_partitions(np.random.default_rng(1)).SerializeToString())
    assert ["add0", "mm0"] in [sorted(g) for g in rcpu_groups(fused)]
    with pytest.raises(Exception) as ei:
        fused.run(None, {"X": np.ones((2, 17), np.float32)})  # K=17, W has 16 rows
    msg = str(ei.value)
    assert "MatMul node 'mm0'" in msg, msg
    # The session stays usable after the failed run (its frame went back clean).
    ok = fused.run(None, {"X": np.ones((2, 16), np.float32)})
    assert ok[0].shape == (2, 24)


def test_concurrent_runs_of_one_fused_session(small_qwen, make_sessions):
    _, fused = make_sessions(small_qwen)
    rng = np.random.default_rng(5)
    # Different shapes per job, so concurrent runs need different intermediate buffers.
    jobs = [qwen_feeds(rng, fused, past, seq) for past, seq in [(4, 1), (0, 9), (7, 2), (2, 5)] * 3]
    want = [fused.run(None, f) for f in jobs]
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        for _ in range(3):
            got = list(ex.map(lambda f: fused.run(None, f), jobs))
            for w, g in zip(want, got):
                for a, b in zip(w, g):
                    np.testing.assert_array_equal(a, b)


def swiglu_mlp(rng, k: int, n: int, acc: int, gate_escapes: bool = False, bits: int = 4) -> onnx.ModelProto:
    """norm -> gate, up (MatMulNBits over the same input) -> Sigmoid -> Mul -> Mul -> down, as the
    model builder writes an MLP (`bits` 4 or 8: the gate, up and down weights' codes). With
    `gate_escapes` the gate's output is also a graph output, so the combined step must not apply."""
    gate, gi = models._nbits_node(rng, "gate", "X", "g", k, n, 32, acc, False, bits)
    up, ui = models._nbits_node(rng, "up", "X", "u", k, n, 32, acc, False, bits)
    down, di = models._nbits_node(rng, "down", "h", "Y", n, k, 32, acc, False, bits)
    nodes = [
        gate, up,
        helper.make_node("Sigmoid", ["g"], ["s"], name="sig"),
        helper.make_node("Mul", ["g", "s"], ["silu"], name="silu"),
        helper.make_node("Mul", ["silu", "u"], ["h"], name="act"),
        down,
    ]
    outs = [models._vi("Y", None)] + ([models._vi("g", None)] if gate_escapes else [])
    return models._model(nodes, [models._vi("X", [1, "S", k])], outs, gi + ui + di, ms_opset=1)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("k,n,acc", [(96, 64, 4), (100, 37, 4), (64, 70, 0)])
def test_swiglu_mlp_runs_as_one_pair_step(make_sessions, rcpu_devices, stats, k, n, acc, bits):
    """The gate and up projections run as one pair call (ledger variant `-gemv-pair` at one row,
    `-gemm-pair` at several, `-bits8` after either for 8-bit weights, two calls; at level 0 from 16
    rows two calls of the dequantizing GEMM, which has no pair path) whose output
    equals the per-node path bit for bit; rows with a NaN (in the first or the last row) run
    node by node (no pair route) and still equal it; ORT within level 4's tolerance."""
    rng = np.random.default_rng(k + n)
    m = swiglu_mlp(rng, k, n, acc, bits=bits).SerializeToString()
    cpu, fused = make_sessions(m)
    per_node = rcpu_session(m, rcpu_devices, {"fuse": "off"})
    tol = 2e-2 if acc == 4 else 1e-4
    for seq, nan in [(1, False), (5, False), (19, False), (1, True), (5, True)]:
        x = rng.standard_normal((1, seq, k)).astype(np.float32)
        if nan:
            x[0, seq - 1, 3] = np.nan
        stats.reset()
        got = fused.run(None, {"X": x})[0]
        suffix = "-pair-bits8" if bits == 8 else "-pair"
        pair = {v for v in stats.variants("MatMulNBits") if v.endswith(suffix)}
        ref = per_node.run(None, {"X": x})[0]
        want = cpu.run(None, {"X": x})[0]
        np.testing.assert_array_equal(got, ref, err_msg=f"seq={seq} nan={nan}: fused != per-node")
        if not nan and acc != 4 and seq >= 16:
            # The f32 levels from 16 rows dequantize into the f32 GEMM's panels: no pair path
            # there, the two projections run as two calls of that route.
            assert not pair, f"seq={seq} took the pair route: {stats.ledger()}"
            dequant = "-gemm-dequant" + ("-bits8" if bits == 8 else "")
            assert all(v.endswith(dequant) for v in stats.variants("MatMulNBits")), stats.ledger()
            calls = sum(r["calls"] for r in stats.ledger() if r["op"] == "MatMulNBits")
            # Gate, up and down, in the fused and in the per-node session.
            assert calls == 6, f"seq={seq}: {stats.ledger()}"
        elif not nan:
            kind = ("-gemv" if seq == 1 else "-gemm") + suffix
            assert pair and all(v.endswith(kind) for v in pair), f"seq={seq}: {stats.ledger()}"
            calls = sum(r["calls"] for r in stats.ledger() if r["variant"] in pair)
            assert calls == 2, f"the pair counts as the two MatMulNBits calls it replaces, got {calls}"
        else:
            assert not pair, f"seq={seq} nan={nan} took the pair route"
        if nan:
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        else:
            assert rel_l2(got, want) < tol, f"seq={seq} vs ORT: {rel_l2(got, want)}"


def test_swiglu_mlp_with_an_escaping_gate_runs_node_by_node(make_sessions, stats):
    rng = np.random.default_rng(9)
    m = swiglu_mlp(rng, 96, 64, 4, gate_escapes=True).SerializeToString()
    cpu, fused = make_sessions(m)
    x = rng.standard_normal((1, 1, 96)).astype(np.float32)
    stats.reset()
    got = fused.run(None, {"X": x})
    assert not any(v.endswith("-pair") for v in stats.variants("MatMulNBits")), stats.ledger()
    want = cpu.run(None, {"X": x})
    for g, w in zip(got, want):
        assert rel_l2(g, w) < 2e-2


def test_qwen_decode_takes_the_pair_step_per_layer(small_qwen, make_sessions, stats):
    """Every layer's MLP of the builder-shaped model pairs at decode: 2 layers, 2 calls each."""
    _, fused = make_sessions(small_qwen)
    f = qwen_feeds(np.random.default_rng(4), fused, 8, 1)
    fused.run(None, f)
    stats.reset()
    fused.run(None, f)
    rows = [r for r in stats.ledger() if r["op"] == "MatMulNBits" and r["variant"].endswith("-gemv-pair")]
    assert sum(r["calls"] for r in rows) == 4, stats.ledger()


def test_step_times_count_every_step_of_a_fused_run(small_qwen, make_sessions, stats):
    """Provider option step_times=on: every step of every fused run is counted under its op type
    (the SwiGLU pair under its own label, its five nodes not), whole runs under "(fused run)",
    and the steps' time fits inside the runs'; a session without the option adds nothing."""
    _, timed = make_sessions(small_qwen, {"step_times": "on"})
    model = onnx.load_from_string(small_qwen)
    op_of = {n.name: n.op_type for n in model.graph.node}
    groups = [g for g in rcpu_groups(timed) if len(g) > 1]
    assert len(groups) == 1, groups
    per_run: dict[str, int] = {}
    for name in groups[0]:
        per_run[op_of[name]] = per_run.get(op_of[name], 0) + 1
    layers = 2
    # Each layer's MLP (2 MatMulNBits, Sigmoid, 2 Muls) is one step at decode.
    per_run["MatMulNBits"] -= 2 * layers
    per_run["Sigmoid"] -= layers
    per_run["Mul"] -= 2 * layers
    per_run = {k: v for k, v in per_run.items() if v}
    per_run["SwiGLU MLP"] = layers
    f = qwen_feeds(np.random.default_rng(6), timed, 8, 1)
    timed.run(None, f)
    stats.reset()
    runs = 3
    for _ in range(runs):
        timed.run(None, f)
    got = stats.step_times()
    whole = got.pop("(fused run)")
    assert whole["calls"] == runs, whole
    assert {k: r["calls"] for k, r in got.items()} == {k: v * runs for k, v in per_run.items()}
    assert all(r["ns"] > 0 for r in got.values()), got
    assert sum(r["ns"] for r in got.values()) <= whole["ns"], (got, whole)

    _, plain = make_sessions(small_qwen)
    stats.reset()
    plain.run(None, qwen_feeds(np.random.default_rng(6), plain, 8, 1))
    assert stats.step_times() == {}, stats.step_times()
