"""Greedy generation with onnxruntime-genai on a model folder (model.onnx + genai_config.json), run as a
fresh process by test_genai.py: token ids in, token ids out (no tokenizer).

usage: og_generate.py MODEL_DIR PROVIDER PLUGIN_PATH PROMPT_IDS MAX_LENGTH [WAY]
PROVIDER is `cpu` (og's default, ORT's CPU EP) or `rcpu`; WAY (rcpu only) is `api` (Config.clear_providers /
append_provider / set_provider_option) or `config` (the provider entry written in genai_config.json).
Prints one JSON line: {"tokens": [...], "logits": [[...] per step], "rcpu_calls": {op: calls},
"rcpu_routes": ["op:variant", ...]}, where the logits of each step are the last position's (those the
greedy choice was made from) and the routes those of rcpu's ledger that ran.
"""

from __future__ import annotations

import json
import sys

import onnxruntime_genai as og
from og_bench import stats

EP_NAME = "RcpuExecutionProvider"


def rcpu_calls(plugin: str) -> dict[str, int]:
    """Calls per op in rcpu's route ledger (the plugin this process loaded)."""
    out: dict[str, int] = {}
    for r in stats(plugin)["ledger"]:
        out[r["op"]] = out.get(r["op"], 0) + r["calls"]
    return out


def rcpu_routes(plugin: str) -> list[str]:
    """The ledger's routes that ran, as `op:variant`."""
    return sorted({f"{r['op']}:{r['variant']}" for r in stats(plugin)["ledger"] if r["calls"] > 0})


def main() -> None:
    model_dir, provider, plugin, prompt, max_length = sys.argv[1:6]
    way = sys.argv[6] if len(sys.argv) > 6 else "api"
    config = og.Config(model_dir)
    if provider == "rcpu":
        # The EP name, not the registration name, is what og's provider list takes.
        og.register_execution_provider_library("rcpu", plugin)
        if way == "api":
            config.clear_providers()
            config.append_provider(EP_NAME)
            config.set_provider_option(EP_NAME, "threads", "2")
    model = og.Model(config)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=int(max_length), do_sample=False)
    gen = og.Generator(model, params)
    gen.append_tokens([int(t) for t in prompt.split(",")])
    logits = []
    while not gen.is_done():
        logits.append([float(v) for v in gen.get_logits().reshape(-1)])
        gen.generate_next_token()
    tokens = [int(t) for t in gen.get_sequence(0)]
    calls = rcpu_calls(plugin) if provider == "rcpu" else {}
    routes = rcpu_routes(plugin) if provider == "rcpu" else []
    print("OG-RESULT " + json.dumps({"tokens": tokens, "logits": logits, "rcpu_calls": calls, "rcpu_routes": routes}))


if __name__ == "__main__":
    main()
