"""og_bench.py, tokens per second through onnxruntime-genai: its rules (parity first, the steady window, the
null band) and a short run on a small generated model, end to end (three worker processes)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

import og_bench
from test_genai import _generate_model

pytest.importorskip("onnxruntime_genai")


def test_prompt_ids_are_deterministic_and_in_range():
    a, b = og_bench.prompt_ids(64, 1000, 1), og_bench.prompt_ids(64, 1000, 1)
    assert a == b and len(a) == 64 and all(0 <= t < 1000 for t in a)
    assert og_bench.prompt_ids(64, 1000, 2) != a
    assert len(set(a)) > 32, "a prompt of mostly one token"


def test_steady_window_is_the_longest_steady_suffix():
    # Drifting first rounds, then flat: steady from the first suffix whose rolling medians (over three
    # rounds, inside the suffix) agree within 5% (rcpu-bench's rule 4).
    assert og_bench.steady_from([20, 15, 11, 10, 10.1, 10, 10.2, 10, 10.1, 10]) == 2
    assert og_bench.steady_from([10.0] * 8) == 0
    # Fewer than five rounds, or a drift to the end: none.
    assert og_bench.steady_from([10.0] * 4) is None
    assert og_bench.steady_from([10, 11, 12, 13, 14, 15, 16, 17, 18, 19]) is None


def test_null_band_is_symmetric_in_log_space():
    lo, hi = og_bench.null_band([0.9, 1.0, 1.05])
    assert math.isclose(lo * hi, 1.0) and math.isclose(lo, 0.9)
    # Ten or more rounds: the 10-90% range, so one outlier does not set it.
    lo, hi = og_bench.null_band([1.0] * 9 + [2.0, 0.99])
    assert hi < 1.05


def _run(model, tmp_path, *extra, cwd=None):
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, og_bench.__file__, str(model), "--rounds", "5", "--iters", "2", "--prompt", "4",
         "--tokens", "4", "--json", str(out), *extra],
        capture_output=True, text=True, timeout=600, cwd=cwd,
    )
    return proc, out


def test_og_bench_runs_genai_on_ort_and_rcpu(tmp_path, plugin_path):
    model = _generate_model(tmp_path / "m", 0)
    # The plugin named relative to the working directory (onnxruntime alone would look for it
    # in its own package directory).
    proc, out = _run(model, tmp_path, "--plugin", plugin_path.name, cwd=plugin_path.parent)
    # 3: a short run on a busy host may not settle; the report is written either way.
    assert proc.returncode in (0, 3), proc.stdout + proc.stderr
    rep = json.loads(out.read_text())
    for arm in ("ort", "rcpu", "null"):
        p50 = rep["per_round"][arm]["p50"]
        assert len(p50) == 5 and all(t > 0 for t in p50), (arm, p50)
    # Accuracy level 0: rcpu's answers are ORT's (the gates of test_genai), the null arm's too.
    for arm in ("rcpu", "null"):
        assert rep["parity"][arm]["rel_l2"] <= 1e-4, rep["parity"]
        assert rep["parity"][arm]["tokens_agree"] == 4, rep["parity"]
    # The host probe (`rcpu-bench probe`) read a buffer of rcpu's packed weights after every round.
    assert rep["weight_bytes"] > 0
    assert len(rep["host"]) == 5 and all(h["read_gbs"] > 0 and h["rcpu_of_read"] > 0 for h in rep["host"]), rep["host"]
    # The rcpu arm really ran on rcpu.
    for op in ("MatMulNBits", "GroupQueryAttention", "GatherBlockQuantized"):
        assert op in rep["routes"], rep["routes"]
    assert "HEADLINE" in proc.stdout or "NOT REACHED" in proc.stdout


def test_og_bench_names_a_missing_plugin(tmp_path):
    proc, out = _run(tmp_path, tmp_path, "--plugin", str(tmp_path / "no_such_plugin.so"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "no_such_plugin.so not found" in proc.stderr
    assert not out.exists()


def test_og_bench_stops_before_timing_on_a_parity_mismatch(tmp_path, plugin_path):
    model = _generate_model(tmp_path / "m", 0)
    # No runtime matches another to zero: with a zero tolerance the parity gate must close.
    proc, out = _run(model, tmp_path, "--plugin", str(plugin_path), "--tol", "0")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "parity mismatch, nothing timed" in proc.stderr
    assert "round  order" not in proc.stdout and not out.exists()


FAKE_LLAMA_BENCH = r'''
import json, sys
args = sys.argv[1:]
want = ["-t", "2", "-p", "4", "-n", "4", "-d", "0,4", "-r", "2", "-o", "json"]
if args[2:] != want or args[0] != "-m":
    sys.exit(f"fake llama-bench: unexpected arguments {args}")
def test(p, n, d, ns):
    return {"n_prompt": p, "n_gen": n, "n_depth": d, "samples_ns": ns, "build_commit": "fake", "build_number": 0}
# The generation at the prompt's depth is 2 ms a token (8 ms for 4 tokens, twice); the decoys differ.
print(json.dumps([test(4, 0, 0, [30e6, 30e6]), test(0, 4, 0, [400e6, 400e6]),
                  test(4, 0, 4, [500e6, 500e6]), test(0, 4, 4, [8e6, 8e6])]))
'''


def test_og_bench_llamacpp_arm_reads_the_generation_at_the_prompts_depth(tmp_path, plugin_path):
    # A stand-in llama-bench checks the command line it gets and answers llama-bench's JSON; the arm
    # must take the tg test at the prompt's depth (2 ms a token), not the decoys.
    import gguf_from_onnx

    pytest.importorskip("gguf")
    model = _generate_model(tmp_path / "m", 4)
    gguf_file = tmp_path / "m.gguf"
    gguf_from_onnx.convert(str(model), str(gguf_file), check=0)
    fake = tmp_path / "llama-bench"
    fake.write_text(f"#!{sys.executable}\n{FAKE_LLAMA_BENCH}")
    fake.chmod(0o755)
    proc, out = _run(model, tmp_path, "--plugin", str(plugin_path), "--llamacpp", str(fake), "--gguf", str(gguf_file))
    assert proc.returncode in (0, 3), proc.stdout + proc.stderr
    rep = json.loads(out.read_text())
    assert rep["per_round"]["llama.cpp"]["mean"] == [2.0] * 5
    assert rep["per_round"]["llama.cpp"]["prefill"] == [30.0] * 5
    ratios = [2.0 / r for r in rep["per_round"]["rcpu"]["mean"]]
    window = ratios[rep["steady_from"] or 0:]
    assert math.isclose(rep["llamacpp"]["over_rcpu"], sorted(window)[(len(window) - 1) // 2]) or math.isclose(
        rep["llamacpp"]["over_rcpu"], (sorted(window)[len(window) // 2 - 1] + sorted(window)[len(window) // 2]) / 2)
    prompt = sorted(30.0 / r for r in rep["per_round"]["rcpu"]["prefill"][rep["steady_from"] or 0:])
    mid = len(prompt) // 2
    assert math.isclose(rep["llamacpp"]["prompt_over_rcpu"], prompt[mid] if len(prompt) % 2 else (prompt[mid - 1] + prompt[mid]) / 2)
    assert rep["llamacpp"]["bytes"] > 0 and "llama.cpp/rcpu = " in proc.stdout


def test_og_bench_wants_llamacpp_and_gguf_together(tmp_path):
    proc, _ = _run(tmp_path, tmp_path, "--llamacpp", "x")
    assert proc.returncode == 1 and "--llamacpp and --gguf go together" in proc.stderr


def test_token_fraction_counts_k_of_e_experts(tmp_path):
    """A token reads k of a QMoE node's E experts: a model of one QMoE with 4 experts, top 2, reads
    half its expert bytes; a model without QMoE reads all of its weights."""
    import qmoe_models as qm

    case = qm.build(qm.QMoESpec(H=64, I=32, E=4, k=2, bits=4, block=32, fc1_bias=True, fc2_bias=True))
    path = tmp_path / "qmoe.onnx"
    path.write_bytes(case.bytes)
    assert og_bench.token_fraction(path) == pytest.approx(0.5)
    case = qm.build(qm.QMoESpec(H=64, I=32, E=4, k=4, bits=4, block=32))
    path.write_bytes(case.bytes)
    assert og_bench.token_fraction(path) == pytest.approx(1.0)
