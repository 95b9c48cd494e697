"""Plugin loading, device listing, provider options, and a mixed rcpu/CPU partition."""

from __future__ import annotations

import contextlib
import io
import pathlib
import sys
import types
import warnings

import numpy as np
import onnxruntime as ort
import pytest

import models
from conftest import EP_NAME, assert_on_cpu, assert_on_rcpu, assigned_to_cpu, assigned_to_rcpu, rcpu_session


def test_device_listed_once_with_vendor(rcpu_devices, plugin_path):
    devs = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    assert len(devs) == 1, f"expected exactly one {EP_NAME} device, got {len(devs)}"
    d = devs[0]
    assert d.ep_vendor == "rcpu"
    assert d.device.type == ort.OrtHardwareDeviceType.CPU
    meta = dict(d.ep_metadata)
    assert meta.get("library_path") == str(plugin_path)
    # The factory's version string is the crate's semver version.
    ver = meta.get("version", "")
    parts = ver.split(".")
    assert len(parts) >= 3 and all(p.split("-")[0].isdigit() for p in parts[:3]), f"version {ver!r} is not semver"


@pytest.mark.parametrize("scratch_key", ["scratch_cache_mb", "accumulator_cache_mb"], ids=["scratch", "former_name"])
def test_session_with_all_options_creates(make_sessions, scratch_key):
    m = models.binary("Add", [4], [4])
    opts = {"threads": 2, "affinity": "off", "blocktime_us": 50, "weight_cache_mb": 64, scratch_key: 8, "fuse": "on", "acc4_scales": "f32",
            "step_times": "on"}
    cpu, rc = make_sessions(m, opts)
    assert rc.get_providers()[0] == EP_NAME
    assert_on_rcpu(rc, "add0")
    a = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(rc.run(None, {"A": a, "B": a})[0], cpu.run(None, {"A": a, "B": a})[0])


@pytest.mark.parametrize(
    "opt_level", [ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL], ids=["noopt", "optall"]
)
def test_mixed_partition_matches_cpu(make_sessions, opt_level):
    rng = np.random.default_rng(7)
    m = models.mixed(rng)
    cpu, rc = make_sessions(m, {"threads": 2}, opt_level=opt_level)
    on_rcpu, on_cpu = assigned_to_rcpu(rc), assigned_to_cpu(rc)
    if opt_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL:
        assert on_rcpu == models.MIXED_RCPU_NODES, f"rcpu got {on_rcpu}"
        assert on_cpu == models.MIXED_CPU_NODES, f"CPU got {on_cpu}"
    else:
        # ORT may fuse (e.g. MatMul+Add -> Gemm) and rename nodes; judge by op type.
        ops = {sg.ep_name: {n.op_type for n in sg.get_nodes()} for sg in rc.get_provider_graph_assignment_info()}
        assert ops.get(EP_NAME), f"nothing was assigned to rcpu: {ops}"
        assert ops[EP_NAME] <= {"Add", "Sub", "Mul", "Div", "MatMul", "Gemm"}, ops
        assert {"Abs", "Softsign"} & ops.get("CPUExecutionProvider", set()), ops
    for rows in (1, 5, 9):
        x = rng.standard_normal((rows, 12)).astype(np.float32)
        want = cpu.run(None, {"X": x})[0]
        got = rc.run(None, {"X": x})[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    "opts, key",
    [
        ({"bogus": "1"}, "bogus"),
        ({"threads": "abc"}, "threads"),
        ({"affinity": "banana"}, "affinity"),
        ({"threads": "-3"}, "threads"),
        ({"blocktime_us": "soon"}, "blocktime_us"),
        ({"weight_cache_mb": "1e3"}, "weight_cache_mb"),
        ({"scratch_cache_mb": ""}, "scratch_cache_mb"),
        ({"accumulator_cache_mb": ""}, "accumulator_cache_mb"),
        ({"scratch_cache_mb": "8", "accumulator_cache_mb": "8"}, "accumulator_cache_mb"),
        ({"threads": "100000"}, "threads"),
        ({"affinity": "0", "threads": "2"}, "affinity"),
        ({"fuse": "yes"}, "fuse"),
        ({"acc4_scales": "fp32"}, "acc4_scales"),
        ({"step_times": "1"}, "step_times"),
    ],
    ids=[
        "unknown_key", "threads_abc", "affinity_banana", "threads_negative", "blocktime_text",
        "weight_cache_float", "scratch_empty", "accumulator_empty", "scratch_both_names", "threads_huge", "affinity_fewer_cpus_than_threads",
        "fuse_yes", "acc4_scales_fp32", "step_times_1",
    ],
)
def test_bad_option_raises_naming_key(rcpu_devices, opts, key, capsys):
    m = models.binary("Add", [4], [4]).SerializeToString()
    with pytest.raises(Exception) as ei:
        rcpu_session(m, rcpu_devices, opts)
    msg = str(ei.value)
    assert f"'{key}'" in msg or key in msg, f"error does not name {key!r}: {msg}"
    assert "rcpu" in msg, msg
    # No silent CPU fallback happened.
    assert "Falling back" not in capsys.readouterr().out


def test_bad_option_raises_with_disable_cpu_ep_fallback(rcpu_devices, capsys):
    """The other way to stop a silent fallback, without the wrapper flag: session config
    session.disable_cpu_ep_fallback=1. The wrapper still retries on CPU, that retry is refused
    ("Conflicting session configuration"), and the original rcpu error is the chained cause."""
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.add_provider_for_devices(rcpu_devices, {"bogus": "1"})
    with pytest.raises(Exception) as ei, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ort.InferenceSession(models.binary("Add", [4], [4]).SerializeToString(), so)
    chain = [ei.value]
    while chain[-1].__cause__ is not None:
        chain.append(chain[-1].__cause__)
    assert any("'bogus'" in str(e) for e in chain), [str(e) for e in chain]


def _readme_snippet() -> str:
    """The README's first Python snippet (the wheel's `rcpu` package)."""
    text = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = next(b for b in text.split("```python\n")[1:] if "rcpu.register()" in b)
    return block.split("```", 1)[0]


def _run_readme_snippet(rcpu_devices, stats, tmp_path, monkeypatch, options: str | None = None):
    """Runs the README's snippet as written, on a one-node Mul model (the `rcpu` package's three
    helpers backed by the plugin under test); `options` replaces its provider options."""
    code = _readme_snippet()
    if options is not None:
        assert '{"threads": "4"}' in code
        code = code.replace('{"threads": "4"}', options)
    path = tmp_path / "model.onnx"
    path.write_bytes(models.binary("Mul", [2, 3], [3]).SerializeToString())
    code = code.replace('"model.onnx"', repr(str(path)))
    shim = types.ModuleType("rcpu")
    shim.register, shim.stats, shim.reset_stats = (lambda: rcpu_devices), stats.json, stats.reset
    monkeypatch.setitem(sys.modules, "rcpu", shim)
    feeds = {"A": np.ones((2, 3), np.float32), "B": np.full(3, 2.0, np.float32)}
    stats.reset()
    with contextlib.redirect_stdout(io.StringIO()) as out, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(code, "README.md", "exec"), {"feeds": feeds, "__name__": "readme"})
    return out.getvalue()


def test_readme_snippet_runs_on_rcpu(rcpu_devices, stats, tmp_path, monkeypatch):
    """The README's Python snippet as written: a session with rcpu in it, and a ledger that shows
    rcpu ran the model's node."""
    printed = _run_readme_snippet(rcpu_devices, stats, tmp_path, monkeypatch)
    assert "'op': 'Mul'" in printed, printed


def test_readme_snippet_refuses_rather_than_falls_back(rcpu_devices, stats, tmp_path, monkeypatch):
    """ORT's Python API falls back to its CPU EP alone when rcpu refuses a session (a bad provider
    option) and only prints a banner: the README's snippet must raise instead (enable_fallback=0),
    and what the README says of the default must still be ORT's behaviour."""
    with pytest.raises(Exception) as ei:
        _run_readme_snippet(rcpu_devices, stats, tmp_path, monkeypatch, '{"threads": "banana"}')
    assert "'threads'" in str(ei.value), str(ei.value)
    # The default the README warns of: a banner and a session of the CPU EP alone.
    so = ort.SessionOptions()
    so.add_provider_for_devices(rcpu_devices, {"threads": "banana"})
    with contextlib.redirect_stdout(io.StringIO()) as out, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = ort.InferenceSession(models.binary("Mul", [2, 3], [3]).SerializeToString(), so)
    assert "Falling back to ['CPUExecutionProvider']" in out.getvalue(), out.getvalue()
    assert sess.get_providers() == ["CPUExecutionProvider"]


def test_fully_claimed_model_runs_with_cpu_fallback_disabled(rcpu_devices):
    """session.disable_cpu_ep_fallback=1 must succeed when rcpu claims every node."""
    m = models.binary("Mul", [2, 3], [3])
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.add_provider_for_devices(rcpu_devices, {"threads": "1"})
    s = ort.InferenceSession(m.SerializeToString(), so, enable_fallback=0)
    assert_on_rcpu(s, "mul0")
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1.5, -2.0, 0.25], np.float32)
    np.testing.assert_array_equal(s.run(None, {"A": a, "B": b})[0], a * b)


def test_concurrent_runs_and_session_churn(make_sessions, rcpu_devices):
    """Several Python threads running one rcpu session at once (ORT allows concurrent Run), and
    sessions with different lane counts created and dropped in a loop: same results, no crash."""
    import concurrent.futures as cf

    rng = np.random.default_rng(13)
    cpu, rc = make_sessions(models.matmul([None, 96], [96, 80], name="mm_conc"), {"threads": 2})
    assert_on_rcpu(rc, "mm_conc")
    xs = [rng.standard_normal((int(rng.integers(1, 40)), 96)).astype(np.float32) for _ in range(24)]
    bs = [rng.standard_normal((96, 80)).astype(np.float32) for _ in range(24)]
    wants = [cpu.run(None, {"A": x, "B": b})[0] for x, b in zip(xs, bs)]
    with cf.ThreadPoolExecutor(4) as ex:
        gots = list(ex.map(lambda xb: rc.run(None, {"A": xb[0], "B": xb[1]})[0], zip(xs, bs)))
    for g, w in zip(gots, wants):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    blob = models.binary("Sub", [3, 5], [5]).SerializeToString()
    a = rng.standard_normal((3, 5)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    for i in range(12):
        s = rcpu_session(blob, rcpu_devices, {"threads": 1 + i % 2, "blocktime_us": (0, 1000)[i % 2]})
        assert "sub0" in assigned_to_rcpu(s)
        np.testing.assert_array_equal(s.run(None, {"A": a, "B": b})[0], a - b)
        del s


def test_threads_1_and_2_identical(make_sessions):
    rng = np.random.default_rng(11)
    m = models.mixed(rng, m=33, k=64, n=48, p=40)
    x = rng.standard_normal((33, 64)).astype(np.float32)
    outs = []
    for t in (1, 2):
        _, rc = make_sessions(m, {"threads": t})
        assert models.MIXED_RCPU_NODES <= assigned_to_rcpu(rc)
        outs.append(rc.run(None, {"X": x})[0])
    np.testing.assert_array_equal(outs[0], outs[1])
    # Also a large elementwise op and a bigger MatMul, where lanes really split the work.
    a = rng.standard_normal((257, 100)).astype(np.float32)
    b = rng.standard_normal((100, 129)).astype(np.float32)
    res = []
    for t in (1, 2):
        _, rc = make_sessions(models.matmul([257, 100], [100, 129]), {"threads": t})
        assert_on_rcpu(rc, "matmul0")
        res.append(rc.run(None, {"A": a, "B": b})[0])
    np.testing.assert_array_equal(res[0], res[1])
    big = rng.standard_normal(1 << 18).astype(np.float32)
    res = []
    for t in (1, 2):
        _, rc = make_sessions(models.binary("Div", [1 << 18], [1]), {"threads": t})
        assert_on_rcpu(rc, "div0")
        res.append(rc.run(None, {"A": big, "B": np.array([3.0], np.float32)})[0])
    np.testing.assert_array_equal(res[0], res[1])
