"""builder_check.py, the check of a model-builder folder on rcpu, run on generated models in the builder's
forms (the real builder needs torch: scripts/builder_models.sh): a Qwen3-style decoder (packed QKV Split
before the per-head norms), a sliding-window one and a gpt-oss mixture of experts pass; with the Split left
to ORT the placement check fails and names it."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from test_genai import BENCH

pytest.importorskip("onnxruntime_genai")
CHECK = pathlib.Path(__file__).with_name("builder_check.py")


def _model(dest: pathlib.Path, spec: str) -> pathlib.Path:
    dest.mkdir(parents=True, exist_ok=True)
    out = subprocess.run([str(BENCH), "gen", spec, "--out", str(dest / "model.onnx")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return dest


def _check(model: pathlib.Path, plugin: pathlib.Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECK), str(model), "--plugin", str(plugin)], capture_output=True,
                          text=True, timeout=600, env={**os.environ, **env})


def test_builder_forms_pass(tmp_path, plugin_path):
    for name, spec in [
        ("qwen3", "llm:preset=qwen3-0.6b,layers=2,vocab=1000,ctx=128,seed=3"),
        # A window longer than the prompt and tokens: genai's windowed caches must hold it on both EPs.
        ("window", "llm:preset=qwen2-0.5b,layers=2,vocab=1000,ctx=128,window=64,softcap=30"),
        # gpt-oss's QMoE form (experts with biases, fused SwiGLU with a limit, attention sinks, windowed
        # and full layers): the router's MatMulNBits and the QMoE stay in the one partition.
        ("gpt-oss", "llm:preset=gpt-oss-20b,layers=2,experts=8,topk=4,vocab=1000,ctx=256,seed=3"),
    ]:
        out = _check(_model(tmp_path / name, spec), plugin_path)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "rcpu subgraphs [" in out.stdout and "PASS" in out.stdout, out.stdout
        assert "level 0: worst rel L2" in out.stdout and "level [4]" in out.stdout, out.stdout


def test_a_node_left_to_ort_fails_the_placement(tmp_path, plugin_path):
    model = _model(tmp_path / "qwen3", "llm:preset=qwen3-0.6b,layers=2,vocab=1000,ctx=128,seed=3")
    out = _check(model, plugin_path, RCPU_DECLINE="Split")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FAIL placement" in out.stdout and "'Split': 2" in out.stdout, out.stdout
