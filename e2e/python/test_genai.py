"""onnxruntime-genai driving rcpu end to end: greedy generation on a generated genai-builder-shaped LLM
(`rcpu-bench gen llm:...`, model.onnx + genai_config.json), once on og's CPU default (ORT's CPU EP) and once
with rcpu, each in a fresh process (og_generate.py). At accuracy_level 0/1 the greedy tokens must be
identical and every step's logits within rel L2 1e-4; rcpu's ledger must show its kernels ran. Both ways
of selecting rcpu are covered: the Config API and a provider entry in genai_config.json. Both ways og hands
over the KV cache too: `past_present_share_buffer: true` (what the genai builder writes for
GroupQueryAttention models, and the generated genai_config.json: one buffer per cache, the past input and the
present output at once) and `false` (past and present apart)."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, rel_l2

pytest.importorskip("onnxruntime_genai")

BENCH = REPO / "target" / "release" / "rcpu-bench"
DRIVER = pathlib.Path(__file__).with_name("og_generate.py")
PROMPT = "17,3,250,4,99,8"
MAX_LENGTH = 20


def _generate_model(dest: pathlib.Path, acc: int, share: bool = True, extra: str = "") -> pathlib.Path:
    if not BENCH.is_file():
        pytest.fail(f"{BENCH} missing: `cargo build --release --workspace` first", pytrace=False)
    dest.mkdir(parents=True, exist_ok=True)
    spec = f"llm:preset=qwen2-0.5b,layers=2,vocab=1000,acc={acc},ctx=128,seed={7 + acc}{extra}"
    out = subprocess.run([str(BENCH), "gen", spec, "--out", str(dest / "model.onnx")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    cfg_path = dest / "genai_config.json"
    cfg = json.loads(cfg_path.read_text())
    assert cfg["search"]["past_present_share_buffer"] is True, "the builder's setting for GQA models"
    if not share:
        cfg["search"]["past_present_share_buffer"] = False
        cfg_path.write_text(json.dumps(cfg, indent=2))
    return dest


def _og(model_dir: pathlib.Path, provider: str, plugin: pathlib.Path, way: str = "api", prompt: str = PROMPT,
        max_length: int = MAX_LENGTH) -> dict:
    out = subprocess.run(
        [sys.executable, str(DRIVER), str(model_dir), provider, str(plugin), prompt, str(max_length), way],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, f"og ({provider}, {way}) failed:\n{out.stderr[-3000:]}"
    line = next(l for l in out.stdout.splitlines() if l.startswith("OG-RESULT "))
    return json.loads(line[len("OG-RESULT "):])


def _assert_same_generation(cpu: dict, rc: dict, prompt: str = PROMPT, max_length: int = MAX_LENGTH) -> None:
    assert rc["tokens"] == cpu["tokens"], f"greedy tokens differ:\nORT  {cpu['tokens']}\nrcpu {rc['tokens']}"
    assert len(rc["logits"]) == len(cpu["logits"]) == max_length - len(prompt.split(","))
    for step, (a, b) in enumerate(zip(rc["logits"], cpu["logits"])):
        err = rel_l2(np.asarray(a), np.asarray(b))
        assert err <= 1e-4, f"step {step}: logits rel L2 {err:.3e} > 1e-4"


def _assert_rcpu_ran(rc: dict) -> None:
    calls = rc["rcpu_calls"]
    steps = len(rc["logits"])
    for op in ("MatMulNBits", "GroupQueryAttention", "SkipSimplifiedLayerNormalization", "GatherBlockQuantized"):
        assert calls.get(op, 0) >= steps, f"rcpu's ledger: {op} ran {calls.get(op, 0)} times over {steps} steps: {calls}"


@pytest.mark.parametrize(("acc", "share"), [(0, True), (1, True), (0, False)])
def test_og_greedy_tokens_match_ort(tmp_path, plugin_path, acc, share):
    model = _generate_model(tmp_path / f"acc{acc}-share{int(share)}", acc, share)
    cpu = _og(model, "cpu", plugin_path)
    rc = _og(model, "rcpu", plugin_path, "api")
    _assert_same_generation(cpu, rc)
    _assert_rcpu_ran(rc)
    assert cpu["rcpu_calls"] == {}


@pytest.mark.parametrize("extra", [",lm_bits=8", ",lm_bits=8,mix8=1"], ids=["lm8", "lm8-mix8"])
def test_og_8bit_weights(tmp_path, plugin_path, extra):
    """The builder's 8-bit layouts through onnxruntime-genai: an 8-bit lm_head with the embedding tied
    to it (an 8-bit GatherBlockQuantized over its codes, k_quant_mixed / k_quant_last), and with 8-bit
    o_proj / gate / up / down too (Olive's mixed recipes): ORT's greedy tokens and logits, every 8-bit
    node on rcpu (accuracy level 0, so the logits are comparable at 1e-4)."""
    model = _generate_model(tmp_path / "w8", 0, extra=extra)
    cpu = _og(model, "cpu", plugin_path)
    rc = _og(model, "rcpu", plugin_path, "api")
    _assert_same_generation(cpu, rc)
    _assert_rcpu_ran(rc)
    routes = rc["rcpu_routes"]
    assert any(r.startswith("MatMulNBits:") and r.endswith("-gemv-bits8") for r in routes), routes
    # genai's session folds the builder's Reshape of the lm_head's codes: the table is shared.
    assert "GatherBlockQuantized:scalar-tied" in routes, routes


def test_og_provider_from_genai_config(tmp_path, plugin_path):
    """The provider entry in genai_config.json (model.decoder.session_options.provider_options) selects
    rcpu once the library is registered; provider options reach rcpu."""
    model = _generate_model(tmp_path / "cfg", 0)
    cfg_path = model / "genai_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["model"]["decoder"]["session_options"]["provider_options"] = [
        {"RcpuExecutionProvider": {"threads": "2"}}
    ]
    cfg_path.write_text(json.dumps(cfg, indent=2))
    cpu_dir = tmp_path / "cfg_cpu"
    shutil.copytree(model, cpu_dir)
    cfg["model"]["decoder"]["session_options"]["provider_options"] = []
    (cpu_dir / "genai_config.json").write_text(json.dumps(cfg, indent=2))
    cpu = _og(cpu_dir, "cpu", plugin_path)
    rc = _og(model, "rcpu", plugin_path, "config")
    _assert_same_generation(cpu, rc)
    _assert_rcpu_ran(rc)


@pytest.mark.parametrize("prompt_len", [6, 27])
def test_og_sliding_window_layers(tmp_path, plugin_path, prompt_len):
    """A model whose even layers are sliding-window layers as the genai builder writes them for CPU
    (GroupQueryAttention local_window_size = 4, sliding_window_cache = 1, a `sliding_window` section
    in genai_config.json; og then gives those layers bounded caches, 20 rows at this length) and
    every layer's attention softcap 30: greedy generation to 60 tokens, through several reclaims
    of the bounded caches, and from a prompt longer than the cache: ORT's tokens and logits."""
    model = _generate_model(tmp_path / "window", 0, extra=",window=4,softcap=30")
    prompt = ",".join(str(17 + 13 * i % 900) for i in range(prompt_len))
    cpu = _og(model, "cpu", plugin_path, prompt=prompt, max_length=60)
    rc = _og(model, "rcpu", plugin_path, "api", prompt=prompt, max_length=60)
    _assert_same_generation(cpu, rc, prompt, 60)
    _assert_rcpu_ran(rc)


@pytest.mark.parametrize("spec", [
    "preset=gpt-oss-20b,layers=2,hidden=256,inter=128,heads=4,kv=2,vocab=1000,experts=8,topk=2,acc=0,ctx=128,"
    "window=4,seed=3",
    "preset=phi3.5-moe,layers=2,hidden=256,inter=128,heads=4,kv=2,vocab=1000,experts=8,acc=0,ctx=128,fc3=0,seed=4",
], ids=["gpt-oss", "phi3.5-moe"])
def test_og_mixture_of_experts(tmp_path, plugin_path, spec):
    """Mixture-of-experts models as the genai builder writes them (one QMoE a layer with its router
    MatMulNBits; gpt-oss: SwiGLU experts with alpha / limit, attention sinks and sliding-window layers;
    Phi-3.5-MoE: the sparse mixer's top-2 and SiLU experts, ORT's CPU form without fc3) through
    onnxruntime-genai: greedy tokens and every step's logits as ORT's at level 0, every QMoE on rcpu, a
    60-token prompt whose experts' products take the many-row route and decode steps the one-row one."""
    model = tmp_path / "moe"
    model.mkdir()
    out = subprocess.run([str(BENCH), "gen", f"llm:{spec}", "--out", str(model / "model.onnx")], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    prompt = ",".join(str(17 + 13 * i % 900) for i in range(60))
    cpu = _og(model, "cpu", plugin_path, prompt=prompt, max_length=80)
    rc = _og(model, "rcpu", plugin_path, "api", prompt=prompt, max_length=80)
    _assert_same_generation(cpu, rc, prompt, 80)
    steps = len(rc["logits"])
    assert rc["rcpu_calls"].get("QMoE", 0) == 2 * steps, rc["rcpu_calls"]
    routes = rc["rcpu_routes"]
    assert "QMoE:experts-f32-gemv-packed" in routes, routes
    assert any(r.startswith("QMoE:experts-f32-gemm") for r in routes), routes


@pytest.mark.parametrize(("kvq", "acc"), [("int8c", 0), ("int4c", 0), ("int8", 1), ("int4c", 1)])
def test_og_quantized_kv_cache(tmp_path, plugin_path, kvq, acc):
    """A model whose KV caches are quantized (`kvq=`: GroupQueryAttention k/v_quant_type, kv_cache_bit_width,
    k_scale / v_scale; int8 [B, Nkv, L, H] caches, or uint8 [B, Nkv, L, H/2] at 4 bits) through
    onnxruntime-genai 0.18, which takes the cache's element type and width from the model's past inputs and
    shares past and present buffers: a 40-token prompt, greedy to 60, ORT's tokens and every step's logits
    within 1e-4, every GroupQueryAttention on rcpu."""
    model = _generate_model(tmp_path / f"{kvq}-acc{acc}", acc, extra=f",kvq={kvq}")
    prompt = ",".join(str(17 + 13 * i % 900) for i in range(40))
    cpu = _og(model, "cpu", plugin_path, prompt=prompt, max_length=60)
    rc = _og(model, "rcpu", plugin_path, "api", prompt=prompt, max_length=60)
    _assert_same_generation(cpu, rc, prompt, 60)
    _assert_rcpu_ran(rc)
    assert rc["rcpu_calls"]["GroupQueryAttention"] == 2 * len(rc["logits"]), rc["rcpu_calls"]


CONTEXT_WRITER = """
import sys, onnxruntime as ort
ort.register_execution_provider_library("rcpu", sys.argv[1])
so = ort.SessionOptions()
so.log_severity_level = 3
so.add_session_config_entry("ep.context_enable", "1")
so.add_session_config_entry("ep.context_file_path", sys.argv[3])
so.add_provider_for_devices([d for d in ort.get_ep_devices() if d.ep_name == "RcpuExecutionProvider"],
                            {"threads": "2"})
ort.InferenceSession(sys.argv[2], so, enable_fallback=0)
"""


def test_og_context_model(tmp_path, plugin_path):
    """onnxruntime-genai on rcpu's context model (src/ep/context): written once by an ORT session with
    ep.context_enable=1, named in genai_config.json in place of model.onnx; genai then loads it without the
    weights and generates ORT's greedy tokens with the original model's logits (level 0, 1e-4)."""
    model = _generate_model(tmp_path / "orig", 0)
    out = subprocess.run([sys.executable, "-c", CONTEXT_WRITER, str(plugin_path), str(model / "model.onnx"),
                          str(model / "model_ctx.onnx")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    ctx_dir = tmp_path / "ctx"
    ctx_dir.mkdir()
    for f in ("model_ctx.onnx", "model_ctx.rcpu", "genai_config.json"):
        shutil.copy(model / f, ctx_dir / f)
    cfg = json.loads((ctx_dir / "genai_config.json").read_text())
    cfg["model"]["decoder"]["filename"] = "model_ctx.onnx"
    (ctx_dir / "genai_config.json").write_text(json.dumps(cfg, indent=2))
    assert not (ctx_dir / "model.onnx").exists()
    cpu = _og(model, "cpu", plugin_path)
    rc = _og(ctx_dir, "rcpu", plugin_path, "api")
    _assert_same_generation(cpu, rc)
    _assert_rcpu_ran(rc)
