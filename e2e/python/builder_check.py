"""Check a model folder made by onnxruntime-genai's model builder (or `rcpu-bench gen llm:...`) on rcpu:
where ORT places every node with rcpu registered, and rcpu's logits against ORT's CPU EP through
onnxruntime-genai's own loop (every KV cache layout the builder writes, windowed ones included).

    .venv/bin/python e2e/python/builder_check.py MODEL_DIR [--plugin SO] [--prompt 16] [--tokens 4]

What it prints and judges (exit 0 only when every check passes, 1 otherwise):
- placement: the subgraphs ORT assigned to rcpu and the op types left to ORT's CPU EP. The model builder's
  decoders should be ONE rcpu partition; the only nodes left to ORT should be the int64 nodes that derive
  `seqlens_k` / `total_sequence_length` from the attention mask (ReduceSum, Sub, Shape, Gather, Cast), a
  float embedding's Gather, and LongRoPE's choice of rotary caches (Greater, If). Anything else on ORT
  fails the check: a node that cut the partition.
- accuracy level 0 (a copy of the model with every MatMulNBits at level 0, f32 activations): the prompt's
  logits and each generated step's within relative L2 1e-4 of ORT's, and the same greedy tokens.
- the model's own level (4: both runtimes quantize activations to int8 per block, so neither is exact):
  ORT's and rcpu's distance from the level-0 answer (ORT's), and rcpu's from ORT's. rcpu passes when its
  distance from the level-0 answer is at most twice ORT's (plus 1e-4): quantization noise of ORT's own
  size, not a different computation. Random-weight models amplify that noise (near-uniform logits), so
  the distances can be a few 1e-2 on both runtimes; the level-0 check is the exact one.

The level-0 copy is written to a temporary folder (the model file with its external data copied: genai
refuses data outside the model's folder).
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import shutil
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from models import with_accuracy_level  # noqa: E402
from og_bench import EP_NAME, REPO, kv_window, prompt_ids, rel_l2  # noqa: E402

# Nodes the builder's graphs leave to ORT by design: the mask subgraph's int64 nodes, a float
# embedding's Gather, and LongRoPE's choice of rotary caches by the sequence's length (Greater, If:
# Phi-3.5 / Phi-4-mini; the attention reads whichever caches the If hands it).
EXPECTED_ON_ORT = {"ReduceSum", "Sub", "Shape", "Gather", "Cast", "Greater", "If"}
LEVEL0_TOL = 1e-4
_GENAI_REGISTERED = set()


def placement(model_path: pathlib.Path, graph: onnx.GraphProto, plugin: str) -> tuple[list[int], collections.Counter]:
    """(node counts of the rcpu subgraphs, op types ORT's CPU EP kept) of a session on rcpu (`graph`: the
    model's, for the op types)."""
    ort.register_execution_provider_library("rcpu", plugin)
    devs = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.add_provider_for_devices(devs, {})
    s = ort.InferenceSession(str(model_path), so)
    ops = {n.name: n.op_type for n in graph.node}
    groups, kept = [], collections.Counter()
    for sg in s.get_provider_graph_assignment_info():
        names = [n.name for n in sg.get_nodes()]
        if sg.ep_name == EP_NAME:
            groups.append(len(names))
        else:
            kept.update(ops.get(n, n) for n in names)
    return groups, kept


def generate(model_dir: pathlib.Path, plugin: str | None, prompt: list[int], tokens: int) -> tuple[list, list]:
    """(logits of the prompt's last position then of each step, greedy tokens) through genai's loop."""
    import onnxruntime_genai as og

    cfg = og.Config(str(model_dir))
    if plugin:
        if plugin not in _GENAI_REGISTERED:
            og.register_execution_provider_library("rcpu", plugin)
            _GENAI_REGISTERED.add(plugin)
        cfg.clear_providers()
        cfg.append_provider(EP_NAME)
    model = og.Model(cfg)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=max(len(prompt) + tokens, kv_window(model_dir)), do_sample=False)
    gen = og.Generator(model, params)
    gen.append_tokens(prompt)
    logits, ids = [], []
    for _ in range(tokens):
        logits.append(np.array(gen.get_logits(), np.float32).reshape(-1))
        gen.generate_next_token()
        ids.append(int(gen.get_next_tokens()[0]))
        if gen.is_done():
            break
    return logits, ids


def level_copy(src: pathlib.Path, dst: pathlib.Path, level: int) -> None:
    """`src` with every MatMulNBits at accuracy_level `level`, into `dst` (data and config copied)."""
    cfg = json.loads((src / "genai_config.json").read_text())
    name = cfg["model"]["decoder"]["filename"]
    m = with_accuracy_level(onnx.load(str(src / name), load_external_data=False), level)
    dst.mkdir(parents=True, exist_ok=True)
    onnx.save(m, str(dst / name))
    for f in src.iterdir():
        if f.name != name and f.is_file():
            shutil.copy(f, dst / f.name)


def levels(m: onnx.ModelProto) -> set[int]:
    return {a.i for n in m.graph.node if n.op_type == "MatMulNBits" for a in n.attribute if a.name == "accuracy_level"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("--plugin", default=str(REPO / "target/release/librcpu_ep.so"))
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=4)
    a = ap.parse_args()
    src = pathlib.Path(a.model_dir).resolve()
    plugin = str(pathlib.Path(a.plugin).resolve())
    cfg = json.loads((src / "genai_config.json").read_text())
    model_path = src / cfg["model"]["decoder"]["filename"]
    ok = True
    m = onnx.load(str(model_path), load_external_data=False)

    groups, kept = placement(model_path, m.graph, plugin)
    stray = {op: n for op, n in kept.items() if op not in EXPECTED_ON_ORT}
    print(f"{src.name}: rcpu subgraphs {groups} ({sum(groups)} nodes); left to ORT: {dict(kept)}")
    if len(groups) != 1 or stray:
        print(f"  FAIL placement: {len(groups)} rcpu partitions, unexpected on ORT: {stray}")
        ok = False

    prompt = prompt_ids(a.prompt, int(cfg["model"]["vocab_size"]), seed=1)
    own = levels(m)
    with tempfile.TemporaryDirectory(prefix="builder_check-") as tmp:
        l0 = pathlib.Path(tmp) / "level0"
        level_copy(src, l0, 0)
        ref_logits, ref_ids = generate(l0, None, prompt, a.tokens)
        got_logits, got_ids = generate(l0, plugin, prompt, a.tokens)
    worst = max(rel_l2(g, w) for g, w in zip(got_logits, ref_logits))
    same = got_ids == ref_ids
    print(f"  level 0: worst rel L2 {worst:.2e} over the prompt and {len(ref_ids)} steps (tol {LEVEL0_TOL}), "
          f"greedy tokens {'equal' if same else f'differ: {got_ids} vs {ref_ids}'}")
    if worst > LEVEL0_TOL or not same:
        ok = False
    if own - {0}:
        ort_logits, ort_ids = generate(src, None, prompt, a.tokens)
        rc_logits, _ = generate(src, plugin, prompt, a.tokens)
        # Step 0 (the prompt) only: later steps feed each runtime's own greedy token.
        d_ort, d_rc, d_pair = (rel_l2(ort_logits[0], ref_logits[0]), rel_l2(rc_logits[0], ref_logits[0]),
                               rel_l2(rc_logits[0], ort_logits[0]))
        fine = d_rc <= 2 * d_ort + 1e-4
        print(f"  level {sorted(own)}: prompt logits from the level-0 answer: ORT {d_ort:.2e}, rcpu {d_rc:.2e} "
              f"({'within' if fine else 'BEYOND'} twice ORT's); rcpu from ORT {d_pair:.2e}")
        ok = ok and fine
    print("  PASS" if ok else "  FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
