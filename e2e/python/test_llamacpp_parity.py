"""llamacpp_parity.py's judgement, with llama.cpp stood in for by ORT's own logits (llama-cpp-python is not part
of the test set-up) and rcpu's distance from ORT as the yardstick: the same logits pass, logits 1% apart
(far beyond rcpu's) or a moved argmax fail."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import llamacpp_parity
from test_gguf_from_onnx import _gen


@pytest.fixture(scope="module")
def small_model(tmp_path_factory, rcpu_devices):
    # rcpu_devices: the suite's one registration of the plugin comes first, whatever order the tests
    # run in (llamacpp_parity finds it there; conftest's own would fail after a second one).
    return _gen(tmp_path_factory.mktemp("parity"), "llm:preset=qwen2-0.5b,layers=1,vocab=1200,ctx=64,acc=4")


def _judge(monkeypatch, model, change, *extra, plugin) -> int:
    ref = llamacpp_parity.ort_logits(str(model), llamacpp_parity.prompt(8))
    monkeypatch.setattr(llamacpp_parity, "llama_logits", lambda gguf, ids: change(ref.copy()))
    monkeypatch.setattr(sys, "argv", ["llamacpp_parity.py", str(model), "unused.gguf", "--prompt", "8",
                                      "--plugin", str(plugin), *extra])
    return llamacpp_parity.main()


def test_the_same_logits_pass(monkeypatch, small_model, plugin_path):
    assert _judge(monkeypatch, small_model, lambda x: x, plugin=plugin_path) == 0


def test_logits_one_percent_apart_fail(monkeypatch, small_model, plugin_path):
    rng = np.random.default_rng(3)
    assert _judge(monkeypatch, small_model, lambda x: x + 0.01 * np.linalg.norm(x[-1]) / np.sqrt(x.shape[1])
                  * rng.standard_normal(x.shape), plugin=plugin_path) == 2


def test_a_moved_argmax_fails(monkeypatch, small_model, plugin_path):
    def move(x):
        x[3, (x[3].argmax() + 1) % x.shape[1]] = x[3].max() + 1e-3 * abs(x[3].max())
        return x

    # Any distance passes (--factor 1e9): only the argmax can fail it.
    assert _judge(monkeypatch, small_model, move, "--factor", "1e9", plugin=plugin_path) == 2
    assert _judge(monkeypatch, small_model, lambda x: x * 1.001, "--factor", "1e9", plugin=plugin_path) == 0
