"""load_bench.py (the model-load benchmark), one sample each: the default arms (ort, rcpu, rcpu-ctx,
rcpu-ctx-null: the context model must be written) on a tiny generated decoder-shaped model; the opt-in
arms (rcpu-nocache, rcpu-budget, rcpu-old, rcpu-null) on a plain model whose input is float; an rcpu
provider option that rcpu refuses failing the run; a failed context model failing it before anything is
measured; --arms' checks; the decode step (`--past`) and the parts of the memory (rcpu's own figures).
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import load_bench
from models import _model, _nbits_node, _vi

HERE = pathlib.Path(__file__).resolve().parent
VOCAB, HIDDEN, INTER = 64, 128, 256


def tiny_decoder(d: pathlib.Path) -> pathlib.Path:
    """model.onnx (+ model.onnx.data) in `d`: input_ids [batch_size, sequence_length] -> Gather of an f32
    table, times attention_mask [batch_size, total_sequence_length], two int4 MatMulNBits (a fused
    partition on rcpu) -> logits [batch_size, sequence_length, VOCAB]."""
    rng = np.random.default_rng(3)
    table = (rng.standard_normal((VOCAB, HIDDEN)) * 0.5).astype(np.float32)
    up, up_i = _nbits_node(rng, "up", "h", "u", HIDDEN, INTER, 32, 4, bias=False)
    down, down_i = _nbits_node(rng, "down", "u", "logits", INTER, VOCAB, 32, 4, bias=False)
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["emb"], name="embed"),
        helper.make_node("Cast", ["attention_mask"], ["maskf"], name="mask_cast", to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["maskf", "axis2"], ["mask3"], name="mask_unsqueeze"),
        helper.make_node("Mul", ["emb", "mask3"], ["h"], name="mask_mul"),
        up, down,
    ]
    inits = [numpy_helper.from_array(table, "table"), numpy_helper.from_array(np.array([2], np.int64), "axis2")]
    m = _model(
        nodes,
        [_vi("input_ids", ["batch_size", "sequence_length"], TensorProto.INT64),
         _vi("attention_mask", ["batch_size", "total_sequence_length"], TensorProto.INT64)],
        [_vi("logits", ["batch_size", "sequence_length", VOCAB])],
        inits + up_i + down_i, ms_opset=1,
    )
    onnx.save(m, str(d / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="model.onnx.data", size_threshold=1024)
    return d


def plain_model(d: pathlib.Path) -> pathlib.Path:
    """d/plain.onnx, weights embedded: x [N, HIDDEN] float (N symbolic) -> int4 MatMulNBits -> Relu ->
    MatMulNBits -> y [N, VOCAB], accuracy level 0."""
    rng = np.random.default_rng(5)
    up, up_i = _nbits_node(rng, "up", "x", "u", HIDDEN, INTER, 32, 0, bias=False)
    down, down_i = _nbits_node(rng, "down", "r", "y", INTER, VOCAB, 32, 0, bias=False)
    nodes = [up, helper.make_node("Relu", ["u"], ["r"], name="relu"), down]
    m = _model(nodes, [_vi("x", ["N", HIDDEN])], [_vi("y", ["N", VOCAB])], up_i + down_i, ms_opset=1)
    onnx.save(m, str(d / "plain.onnx"))
    return d / "plain.onnx"


def run_bench(model: pathlib.Path, plugin, *args: str) -> SimpleNamespace:
    out = model.parent / f"out{len(list(model.parent.glob('out*.json')))}.json"
    p = subprocess.run(
        [sys.executable, str(HERE / "load_bench.py"), str(model), "--samples", "1", "--warm", "2",
         "--plugin", str(plugin), "--json", str(out), *args],
        capture_output=True, text=True, timeout=300,
    )
    res = json.loads(out.read_text()) if out.is_file() else None
    return SimpleNamespace(rc=p.returncode, stdout=p.stdout, stderr=p.stderr, res=res, out=out)


@pytest.fixture(scope="module")
def bench(tmp_path_factory, plugin_path):
    d = tiny_decoder(tmp_path_factory.mktemp("load_bench_model"))
    b = run_bench(d, plugin_path, "--ctx-dir", str(d / "ctx"))
    b.dir = d
    assert b.rc == 0 and b.res, f"exit {b.rc}\n{b.stdout}\n{b.stderr}"
    return b


@pytest.fixture(scope="module")
def extra(tmp_path_factory, plugin_path):
    """The opt-in arms on a plain float-input model; rcpu-old loads a copy of the plugin (added to the
    arms by --old-plugin alone)."""
    d = tmp_path_factory.mktemp("load_bench_plain")
    old = d / "old_build" / "librcpu_ep.so"
    old.parent.mkdir()
    shutil.copy2(plugin_path, old)
    b = run_bench(plain_model(d), plugin_path, "--arms", "ort,rcpu,rcpu-null,rcpu-nocache,rcpu-budget",
                  "--budget-mb", "8", "--old-plugin", str(old), "--ctx-dir", str(d / "ctx"), "--past", "8")
    b.old, b.dir = str(old), d
    assert b.rc == 0 and b.res, f"exit {b.rc}\n{b.stdout}\n{b.stderr}"
    return b


def check_sample(r: dict, warm: int = 2, past: int = 64) -> None:
    assert r["create_s"] > 0 and r["create_cpu_s"] >= 0
    assert r["base_rss"] > 0 and r["peak_hwm"] >= r["base_rss"], r
    assert r["rss_after"] > 0 and r["peak_hwm"] >= r["rss_after"], r
    assert r["first_ms"] > 0 and len(r["warm_ms"]) == warm
    assert (r["warm_med_ms"] or 0) > 0 if warm else r["warm_med_ms"] is None
    assert 0 <= r["foreign_share"] <= 1.5
    # the decode step: one token over `past` rows, once, then `warm` times
    assert r["past"] == past and r["decode_first_ms"] > 0 and len(r["decode_ms"]) == warm, r
    assert (r["decode_med_ms"] or 0) > 0 if warm else r["decode_med_ms"] is None
    assert r["base_anon"] > 0 and r["anon_end"] > 0 and set(r["mapped"]) == {"created", "end"}
    if r["arm"] == "ort":
        assert r["rcpu_memory"] is None
    else:  # rcpu's own figures after creation and after the runs
        for when in ("created", "end"):
            mem = r["rcpu_memory"][when]
            assert "entries" in mem["weight_cache"] and "live_bytes" in mem["fused_constants"], mem
            assert "slack_bytes" in mem["weight_arena"] and "live_bytes" in mem["scratch"], mem


def check_uss(u: dict) -> None:
    for who in ("first", "second"):
        base, after = u[who]["uss_base"], u[who]["uss_after"]
        assert after["USS"] == after["Private_Clean"] + after["Private_Dirty"]
        assert after["Rss"] >= after["USS"] > 0 and after["Pss"] > 0 and base["USS"] > 0


def test_ort_and_rcpu_arms(bench):
    res = bench.res
    assert res["hints"] == {"vocab": VOCAB, "head": None, "kv_heads": None, "window": 0}
    assert res["weights"]["files"] == ["model.onnx.data"] and res["weights"]["bytes"] > 0
    s = res["samples"][0]
    for arm in ("ort", "rcpu"):
        check_sample(s[arm])
    assert s["rcpu"]["providers"][0] == load_bench.EP_NAME and s["ort"]["providers"] == ["CPUExecutionProvider"]
    par = res["parity"]
    assert par["pass"] and par["levels"] == [4] and "rcpu" in par["vs_level0"], par
    assert 0 < par["ort_vs_level0"] < 0.1 and par["rel_l2_vs_ort"]["rcpu"] < 0.1
    uss = {u["arm"]: u for u in res["uss"]}
    check_uss(uss["rcpu"])
    check_uss(uss["ort"])
    summ = res["summary"]
    assert summ["per_arm"]["ort"]["create_s"] and summ["ratios"]["ort/rcpu"]["create"][0] > 0
    assert summ["null"]["create_band"] is not None
    c = res["conditions"]
    assert c["cpu_model"] and len(c["load_start"]) == 3 and len(c["load_end"]) == 3
    assert "per arm, median [min, max]" in bench.stdout and "second-process memory" in bench.stdout
    assert res["past"] == 64 and "decode ms" in bench.stdout and "decode: 1 token, past 64" in bench.stdout
    assert all(r["decode"] and r["decode"][0] > 0 for r in summ["ratios"].values()), summ["ratios"]
    assert summ["null"]["decode_band"] is not None and summ["per_arm"]["rcpu"]["decode_ms"][0] > 0
    for arm in load_bench.ARMS_DEFAULT:  # one token at position 64: the mask says 65
        assert s[arm]["decode_shapes"] == {"input_ids": [1, 1], "attention_mask": [1, 65]}, s[arm]
    assert res["arms"] == load_bench.ARMS_DEFAULT and set(s) == {"sample", "order", *load_bench.ARMS_DEFAULT}
    assert [u["arm"] for u in res["uss"]] == ["rcpu-ctx", "rcpu", "ort"]
    assert set(summ["ratios"]) == {"ort/rcpu", "ort/rcpu-ctx", "rcpu/rcpu-ctx"}
    for arm in load_bench.ARMS_DEFAULT:  # the default arms run rcpu as it comes, no extra option
        assert s[arm]["provider_options"] == (None if arm == "ort" else {"threads": "2"})


def test_context_model(bench):
    ctx = bench.res["ctx"]
    res = bench.res
    assert ctx["ok"] and (bench.dir / "ctx" / load_bench.CTX_NAME).is_file()
    assert ctx["files"].get(load_bench.CTX_NAME, 0) > 0
    assert ctx["files"].get("model_ctx.rcpu", 0) > 0, f"no model_ctx.rcpu beside the context model: {ctx['files']}"
    assert "rcpu's context file (.rcpu" in bench.stdout
    check_sample(ctx["create"], warm=0)  # the context-writing session ran once, untimed after
    s = res["samples"][0]
    for arm in ("rcpu-ctx", "rcpu-ctx-null"):
        check_sample(s[arm])
        assert arm in res["parity"]["vs_level0"] and res["parity"]["pass"]
    assert res["summary"]["null"]["pair"] == ["rcpu-ctx", "rcpu-ctx-null"]
    check_uss({u["arm"]: u for u in res["uss"]}["rcpu-ctx"])


def test_memory_parts(bench):
    """The parts: rcpu packs into the arena, rcpu-ctx maps its packed weights from model_ctx.rcpu (adopts, packs
    nothing); the parts table and every key of rcpu's memory object are printed."""
    s, per = bench.res["samples"][0], bench.res["summary"]["per_arm"]
    packed, mapped = s["rcpu"]["rcpu_memory"]["created"], s["rcpu-ctx"]["rcpu_memory"]["created"]
    assert packed["weight_cache"]["packs"] > 0 and packed["weight_arena"]["touched_bytes"] > 0, packed
    assert mapped["weight_cache"]["packs"] == 0 and mapped["weight_cache"]["adopts"] > 0, mapped
    assert mapped["weight_cache"]["adopted_bytes"] > 0 and s["rcpu-ctx"]["mapped"]["created"]["model_ctx.rcpu"] > 0
    parts = {arm: per[arm]["parts"]["created"] for arm in per}
    assert parts["rcpu"]["arena_slack"][0] > 0 and parts["rcpu-ctx"]["packed_mapped"][0] > 0
    assert parts["rcpu-ctx"]["rcpu_file"][0] > 0 and parts["ort"]["packed_arena"] == []
    for arm, p in parts.items():  # ORT+other is what the parts leave of RSS minus the baseline
        assert p["ort_other"][0] == pytest.approx(
            p["rss_over_base"][0] - sum(p[k][0] for k in load_bench.SUBTRACTED if p[k]), abs=1e-9)
    assert "parts of the memory" in bench.stdout and "ORT+other" in bench.stdout
    assert "rcpu's memory figures" in bench.stdout and "weight_cache.adopts" in bench.stdout
    assert per["rcpu-ctx"]["rcpu_memory"]["created"]["weight_cache.adopts"] > 0


def test_memory_parts_tolerates_missing_keys(tmp_path):
    """rcpu's figures as the plugin reports them: a missing key is "-" (None), never an error; ORT+other is
    RSS minus the baseline minus the parts reported; a library without RcpuEp_StatsJson gives None."""
    r = {"base_rss": 10 * load_bench.MB, "rss_after": 100 * load_bench.MB, "anon_after": 60 * load_bench.MB,
         "file_after": 40 * load_bench.MB, "mapped": {"created": {"model.onnx.data": 5 * load_bench.MB,
                                                                  "model_ctx.rcpu": 20 * load_bench.MB}},
         "rcpu_memory": {"created": {"weight_arena": {"live_bytes": 30 * load_bench.MB},
                                     "scratch": {"parked_bytes": 1 * load_bench.MB},
                                     "fused_values": {"kept_bytes": 2 * load_bench.MB}}}}
    p = load_bench.memory_parts(r, "created")
    assert p["packed_arena"] == 30 and p["arena_slack"] is None and p["constants"] is None
    assert p["scratch_pools"] == 3 and p["model_files"] == 5 and p["rcpu_file"] == 20
    assert p["ort_other"] == 90 - 30 - 3 - 5 - 20
    r["rcpu_memory"] = None  # ORT's arm
    p = load_bench.memory_parts(r, "created")
    assert p["packed_arena"] is None and p["rcpu_file"] is None and p["ort_other"] == 85
    assert load_bench.rcpu_memory("libc.so.6") is None


def test_extra_arms(extra, plugin_path):
    res, s = extra.res, extra.res["samples"][0]
    arms = ["ort", "rcpu", "rcpu-null", "rcpu-nocache", "rcpu-budget", "rcpu-old"]
    assert res["arms"] == arms and res["ctx"] is None and not (extra.dir / "ctx").exists()
    assert "context model: not made" in extra.stdout
    for arm in arms:
        check_sample(s[arm], past=8)
        assert s[arm]["peak_end"] >= s[arm]["peak_hwm"] and s[arm]["rss_end"] > 0
    opts = {arm: s[arm]["provider_options"] for arm in arms}
    assert opts == {"ort": None, "rcpu": {"threads": "2"}, "rcpu-null": {"threads": "2"},
                    "rcpu-nocache": {"threads": "2", "weight_cache_mb": "0"},
                    "rcpu-budget": {"threads": "2", "weight_cache_mb": "8"}, "rcpu-old": {"threads": "2"}}
    assert s["rcpu-old"]["plugin"] == extra.old and s["rcpu"]["plugin"] == str(plugin_path)
    assert all(s[arm]["providers"][0] == load_bench.EP_NAME for arm in arms[1:])
    par = res["parity"]  # accuracy level 0: every arm within rel L2 1e-4 of ORT
    assert par["pass"] and par["levels"] == [0] and set(par["rel_l2_vs_ort"]) == set(arms[1:]), par
    summ = res["summary"]
    assert summ["null"]["pair"] == ["rcpu", "rcpu-null"] and summ["null"]["create_band"] is not None
    assert set(summ["ratios"]) == {"ort/rcpu", "ort/rcpu-nocache", "ort/rcpu-budget", "ort/rcpu-old",
                                   "rcpu/rcpu-nocache", "rcpu/rcpu-budget", "rcpu-old/rcpu"}
    assert all(r["create_verdict"] in ("real", "noise") for r in summ["ratios"].values())
    uss = {u["arm"]: u for u in res["uss"]}
    assert list(uss) == ["rcpu", "rcpu-old", "rcpu-nocache", "rcpu-budget", "ort"]
    for u in uss.values():
        check_uss(u)
    assert uss["rcpu-old"]["second"]["plugin"] == extra.old
    assert uss["rcpu-budget"]["second"]["provider_options"]["weight_cache_mb"] == "8"
    assert "weight_cache_mb=0" in extra.stdout and f"plugin {extra.old}" in extra.stdout
    assert len(res["conditions"]["plugins"]) == 2


def test_refused_provider_option_fails(extra, plugin_path):
    """rcpu refuses weight_cache_mb=-1: the arm's child fails, the run exits 1 naming it."""
    b = run_bench(extra.dir / "plain.onnx", plugin_path, "--arms", "ort,rcpu-budget", "--budget-mb", "-1",
                  "--no-uss")
    assert b.rc == 1, f"exit {b.rc}\n{b.stdout}\n{b.stderr}"
    assert "rcpu-budget child" in b.stderr and "weight_cache_mb" in b.stderr, b.stderr


def test_failed_context_model_fails(tmp_path, plugin_path, monkeypatch, capsys):
    """Creating the context model failed: the error is reported, nothing is measured, exit 1."""
    model = plain_model(tmp_path)
    monkeypatch.setattr(load_bench, "make_ctx",
                        lambda a, m, d: {"ok": False, "reason": "boom: no EPContext node", "files": {}})
    monkeypatch.setattr(load_bench, "run_arm", lambda *a, **k: pytest.fail("an arm ran after the failure"))
    out = tmp_path / "out.json"
    rc = load_bench.main([str(model), "--plugin", str(plugin_path), "--json", str(out)])
    err = capsys.readouterr().err
    assert rc == load_bench.EXIT_ERROR and "creating the context model FAILED" in err and "boom" in err, err
    res = json.loads(out.read_text())
    assert res["ctx"]["reason"] == "boom: no EPContext node" and "samples" not in res


def test_protobuf_failure_names_ctx_compile(tmp_path, plugin_path, monkeypatch, capsys):
    """A context model over protobuf's 2 GB (the initializers rcpu leaves to ORT): the failure names
    --ctx-compile."""
    def fake_run_child(a, kind, model, label=None, config=(), **kw):
        assert label == "context-model" and "ep.context_enable=1" in config
        raise load_bench.ChildError("context-model child failed (exit 1): INVALID_PROTOBUF : Protobuf "
                                    "serialization failed when saving model to \"x\"")

    monkeypatch.setattr(load_bench, "run_child", fake_run_child)
    rc = load_bench.main([str(plain_model(tmp_path)), "--plugin", str(plugin_path), "--ctx-dir", str(tmp_path / "c")])
    assert rc == load_bench.EXIT_ERROR
    assert "--ctx-compile writes them beside it" in capsys.readouterr().err


def test_ctx_compile(tmp_path, plugin_path):
    """--ctx-compile: the context model from ORT's compile API; rcpu-ctx loads it."""
    d = tiny_decoder(tmp_path)
    b = run_bench(d, plugin_path, "--arms", "ort,rcpu-ctx", "--ctx-compile", "--no-uss", "--ctx-dir", str(d / "ctx"))
    assert b.rc == 0 and b.res, f"exit {b.rc}\n{b.stdout}\n{b.stderr}"
    ctx = b.res["ctx"]
    assert ctx["ok"] and ctx["create"]["mode"] == "compile" and ctx["create"]["create_s"] > 0
    assert ctx["files"].get(load_bench.CTX_NAME, 0) > 0 and ctx["files"].get("model_ctx.rcpu", 0) > 0, ctx["files"]
    assert "ORT's compile API" in b.stdout
    check_sample(b.res["samples"][0]["rcpu-ctx"])
    assert b.res["parity"]["pass"] and "rcpu-ctx" in b.res["parity"]["vs_level0"]


@pytest.mark.parametrize("args, said", [
    (["--arms", "rcpu,rcpu-ctx"], "must include ort"),
    (["--arms", "ort,rcpu-fast"], "unknown arm"),
    (["--arms", "ort,rcpu-ctx-null"], "measure rcpu-ctx too"),
    (["--arms", "ort,rcpu-old"], "needs --old-plugin"),
    (["--arms", "ort,rcpu,rcpu"], "named twice"),
])
def test_bad_arms(tmp_path, args, said, capsys):
    assert load_bench.main([str(tmp_path / "none.onnx"), *args]) == load_bench.EXIT_ERROR
    assert said in capsys.readouterr().err


class _In(SimpleNamespace):
    pass


def test_make_feeds_decoder_metadata():
    """A builder decoder's metadata: a 16-token prompt, empty past, symbolic dims resolved (the builder
    names the past's head dim `kv_cache_dim`: genai_config's head_size)."""
    inputs = [
        _In(name="input_ids", type="tensor(int64)", shape=["batch_size", "sequence_length"]),
        _In(name="attention_mask", type="tensor(int64)", shape=["batch_size", "total_sequence_length"]),
        _In(name="position_ids", type="tensor(int64)", shape=["batch_size", "sequence_length"]),
        _In(name="past_key_values.0.key", type="tensor(float)", shape=["batch_size", 2, "past_sequence_length", 64]),
        _In(name="past_key_values.0.value", type="tensor(float16)", shape=["batch_size", 2, None, 64]),
        _In(name="past_key_values.1.key", type="tensor(float)",
            shape=["batch_size", "kv", "past_sequence_length", "kv_cache_dim"]),
        _In(name="x", type="tensor(float)", shape=["M", 8]),
    ]
    f = load_bench.make_feeds(inputs, vocab=100, head=64, kv_heads=2)
    assert f["input_ids"].shape == (1, 16) and f["input_ids"].dtype == np.int64 and f["input_ids"].max() < 100
    assert f["attention_mask"].shape == (1, 16) and (f["attention_mask"] == 1).all()
    assert f["position_ids"].tolist() == [list(range(16))]
    assert f["past_key_values.0.key"].shape == (1, 2, 0, 64) and f["past_key_values.0.key"].dtype == np.float32
    assert f["past_key_values.0.value"].shape == (1, 2, 0, 64) and f["past_key_values.0.value"].dtype == np.float16
    assert f["past_key_values.1.key"].shape == (1, 2, 0, 64)
    assert f["x"].shape == (1, 8) and np.abs(f["x"]).max() <= 1


def test_make_feeds_decode_step():
    """The decode step's feeds: one token at position P over a past of P rows (zeros), the mask P + 1."""
    inputs = [
        _In(name="input_ids", type="tensor(int64)", shape=["batch_size", "sequence_length"]),
        _In(name="attention_mask", type="tensor(int64)", shape=["batch_size", "total_sequence_length"]),
        _In(name="position_ids", type="tensor(int64)", shape=["batch_size", "sequence_length"]),
        _In(name="past_key_values.0.key", type="tensor(float)",
            shape=["batch_size", "kv", "past_sequence_length", "kv_cache_dim"]),
    ]
    f = load_bench.make_feeds(inputs, vocab=100, seq=1, past=64, head=32, kv_heads=2)
    assert f["input_ids"].shape == (1, 1) and f["attention_mask"].shape == (1, 65)
    assert f["position_ids"].tolist() == [[64]]
    assert f["past_key_values.0.key"].shape == (1, 2, 64, 32) and not f["past_key_values.0.key"].any()


def test_make_feeds_windowed_cache(tmp_path):
    """A windowed KV cache (genai_config's sliding_window, gpt-oss): every past buffer holds the window's
    rows (both EPs refuse fewer), the attention mask still the prompt's 16."""
    (tmp_path / "genai_config.json").write_text(json.dumps({"model": {
        "vocab_size": 500, "context_length": 4096, "decoder": {
            "head_size": 64, "num_key_value_heads": 8, "sliding_window": {"window_size": 128}}}}))
    hints = load_bench.model_hints(tmp_path / "model.onnx")
    assert hints == {"vocab": 500, "head": 64, "kv_heads": 8, "window": 128}
    inputs = [
        _In(name="input_ids", type="tensor(int64)", shape=["batch_size", "sequence_length"]),
        _In(name="attention_mask", type="tensor(int64)", shape=["batch_size", "total_sequence_length"]),
        _In(name="past_key_values.0.key", type="tensor(float)",
            shape=["batch_size", 8, "past_sequence_length", "kv_cache_dim"]),
        _In(name="past_key_values.0.value", type="tensor(float)", shape=["batch_size", "kv", None, 64]),
    ]
    f = load_bench.make_feeds(inputs, **{k: v for k, v in hints.items() if k != "vocab"}, vocab=hints["vocab"])
    assert f["past_key_values.0.key"].shape == (1, 8, 128, 64) and not f["past_key_values.0.key"].any()
    assert f["past_key_values.0.value"].shape == (1, 8, 128, 64)
    assert f["attention_mask"].shape == (1, 16) and f["input_ids"].shape == (1, 16)


def test_make_feeds_plain_float_input():
    """A plain model whose first input is float: its shape with symbolic dims 1 (batch / sequence names
    resolved as for a decoder), values in [-1, 1)."""
    inputs = [_In(name="x", type="tensor(float)", shape=["N", 896]),
              _In(name="scale", type="tensor(float16)", shape=[4]),
              _In(name="idx", type="tensor(int64)", shape=["batch", "seq"])]
    f = load_bench.make_feeds(inputs, vocab=1000)
    assert f["x"].shape == (1, 896) and f["x"].dtype == np.float32 and np.abs(f["x"]).max() <= 1
    assert f["x"].std() > 0.3  # not a constant
    assert f["scale"].shape == (4,) and f["scale"].dtype == np.float16
    assert f["idx"].shape == (1, 16) and f["idx"].dtype == np.int64 and not f["idx"].any()
