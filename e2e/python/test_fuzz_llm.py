"""A few seeded cases of the whole-model differential fuzzer (fuzz_llm.py): random generated LLMs under random
provider options, a prefill and three decode steps on rcpu against ORT's CPU EP. The seeds are fixed, so the
cases (and both answers) are the same on every run; `python e2e/python/fuzz_llm.py --cases N --seed S` draws more.
"""

from __future__ import annotations

import pathlib
import random

import pytest

import fuzz_llm

BENCH = fuzz_llm.REPO / "target" / "release" / "rcpu-bench"


@pytest.fixture(scope="module")
def bench() -> pathlib.Path:
    if not BENCH.is_file():
        pytest.fail(f"{BENCH} missing: `cargo build --release --workspace` first", pytrace=False)
    return BENCH


@pytest.mark.parametrize("seed", [1, 2])
def test_random_generated_llms_match_ort(bench, rcpu_devices, seed):
    lines: list[str] = []
    found = fuzz_llm.fuzz(5, seed, bench, rcpu_devices, log=lines.append)
    assert found == 0, "\n".join(line for line in lines if not line.startswith("ok"))
    assert len(lines) == 5 and all(line.startswith("ok") for line in lines)


def test_draws_cover_every_level_both_paths_and_both_kv_layouts():
    rng = random.Random(3)
    cases = [fuzz_llm.draw_case(rng) for _ in range(200)]
    assert {c.acc for c in cases} == {0, 1, 2, 3, 4}
    assert {c.options.get("fuse") for c in cases} == {None, "on", "off"}
    assert {c.prompt for c in cases} >= {1, 150}
    assert all(c.head % 16 == 0 for c in cases)
    assert {c.shared for c in cases} == {False, True}


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("acc", [0, 4])
def test_a_wrong_answer_is_a_finding(bench, rcpu_devices, monkeypatch, tmp_path, acc, shared):
    """The checks can fail: the rcpu session here runs the same shape with other weights."""
    case = fuzz_llm.draw_case(random.Random(5))
    case.acc, case.shared = acc, shared
    real_session = fuzz_llm.session

    def impostor(model, devices=None, options=None):
        if devices is None:
            return real_session(model)
        other = case.spec.replace("seed=", "seed=1")
        model = fuzz_llm.generate(bench, f"{other},acc={acc}", tmp_path / "other.onnx")
        return real_session(model, devices, options)

    monkeypatch.setattr(fuzz_llm, "session", impostor)
    findings, _ = fuzz_llm.run_case(case, bench, rcpu_devices, tmp_path)
    assert findings, "answers from other weights passed the fuzzer's checks"
    assert not any("claimed no node" in f for f in findings), findings


def test_a_session_rcpu_did_not_run_is_a_finding(bench, rcpu_devices, monkeypatch, tmp_path):
    """No vacuous pass: when the "rcpu" session is ORT's CPU EP alone, the case says so."""
    case = fuzz_llm.draw_case(random.Random(6))
    real_session = fuzz_llm.session
    monkeypatch.setattr(fuzz_llm, "session", lambda model, devices=None, options=None: real_session(model))
    findings, _ = fuzz_llm.run_case(case, bench, rcpu_devices, tmp_path)
    assert findings and "claimed no node" in findings[0], findings


def test_an_output_of_another_shape_is_a_finding(bench, rcpu_devices, monkeypatch, tmp_path):
    """An output whose shape differs from ORT's is named as such (not broadcast into a number)."""
    case = fuzz_llm.draw_case(random.Random(7))
    case.acc, case.shared = 0, False
    real_session = fuzz_llm.session

    class Reshaped:
        """The rcpu session, its logits given one more axis."""

        def __init__(self, sess):
            self.sess = sess

        def run(self, names, feeds):
            out = self.sess.run(names, feeds)
            out[0] = out[0][..., None]
            return out

        def __getattr__(self, name):
            return getattr(self.sess, name)

    def reshaped(model, devices=None, options=None):
        s = real_session(model, devices, options)
        return s if devices is None else Reshaped(s)

    monkeypatch.setattr(fuzz_llm, "session", reshaped)
    findings, _ = fuzz_llm.run_case(case, bench, rcpu_devices, tmp_path)
    assert findings and "shapes differ" in findings[0], findings
