"""Parity of the llama.cpp arm: llama.cpp's logits on the GGUF (`gguf_from_onnx.py`) against ORT's CPU EP on
the ONNX model it came from, for one prompt, every position, with rcpu's own distance from ORT as the
yardstick. llama-bench gives no logits, so this runs llama.cpp through llama-cpp-python (built from the
same sdist as llama-bench: `scripts/llamacpp_compare.sh` with LLAMACPP_PARITY=1).

    python llamacpp_parity.py MODEL_DIR FILE.gguf [--plugin SO] [--prompt N] [--factor 3]

At accuracy level 4 ORT, rcpu and llama.cpp (Q8_0) all quantize activations to int8 per block, and rcpu
and the GGUF round the weights' scales to f16, so none of them is ORT to the bit: how far is fine
depends on the model (worst positions of a 16-token prompt: Qwen2-0.5B shapes rcpu 3.6e-4, llama.cpp
3.4e-4; Llama-3.2-1B shapes 1.8e-4 / 3.5e-4; Qwen with an 8-bit lm_head 2.6e-3 / 3.2e-3). So
llama.cpp passes when its worst position is at most `--factor` times rcpu's worst (plus 1e-5) and
every position's argmax is ORT's; a GGUF written with ORT's nibble order taken as Q4_0's measured
2.7e-2, ~75 times rcpu's. Prints each position's distances; exits 2 on a mismatch.

The prompt is 16 tokens, or the largest sliding window plus 16 where the model has windowed layers
(gpt-oss: 144), so that positions past the window are judged too.

A mixture of experts (a QMoE node: gpt-oss) is judged on the same weights with the routing made
continuous: every QMoE's `k` set to its expert count on ORT's and rcpu's side and llama.cpp's
`expert_used_count` overridden to the same (the experts' weights are then the softmax over all router
logits, which both define alike), because at level 4 a token whose k-th and (k+1)-th router logits
nearly tie runs different experts on different int8 roundings and attention carries that on to
later tokens (gpt-oss at 4 layers, 144 tokens, top 4 of 32: rcpu's median position 4.0e-2 from ORT,
its worst 0.53, its argmax ORT's at 121 of 144 positions; llama.cpp 5.5e-2, 0.54, 107). With every
expert running: rcpu 1.1e-2 median, 1.3e-2 worst, llama.cpp 1.35e-2 / 1.5e-2. The rule there is the
dense one but for the argmax, which this model's noise (1e-2, thirty times the dense presets') flips
at near-ties for rcpu too (6 of 144 positions): llama.cpp's argmax may differ from ORT's only where ORT
scores llama.cpp's pick within 4 sigma of its own top logit, sigma the rms of llama.cpp's difference
from ORT at that position times sqrt(2) (measured: at most 1.6 sigma; rcpu's 2.4). Calibration on a
2-layer cut-down with an 8-token window: a sliding window one key longer or shorter in the GGUF moves
the median position from 1.3e-2 to 0.19 / 0.20, inverted sliding layers to 0.70, zeroed sinks to
6e-2. The model with its own top k is then run as well and reported (median, worst, argmax agreement
for llama.cpp and rcpu), judged only against 0.9, the bound rcpu-bench's parity gate sets for a
QMoE model at level 4 (it tells garbage from routing noise).
"""
import argparse
import math
import os
import pathlib
import statistics
import sys
import tempfile

import numpy as np

from og_bench import rel_l2

REPO = pathlib.Path(__file__).resolve().parents[2]
EP_NAME = "RcpuExecutionProvider"


def prompt(n: int) -> list[int]:
    """A fixed prompt of `n` ids (random-weight models: any ids below the vocabulary)."""
    return [(i * 7919 + 13) % 1000 + 100 for i in range(n)]


def ort_logits(model_dir: str, ids: list[int], plugin: str | None = None) -> np.ndarray:
    """The prompt from an empty cache on ORT's CPU EP, or on rcpu with `plugin`: logits [len(ids), vocab]."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    path = os.path.join(model_dir, "model.onnx")
    if plugin:
        try:
            ort.register_execution_provider_library("rcpu", plugin)
        except Exception as e:  # a second call in one process (the tests): already there
            if "already registered" not in str(e):
                raise
        so.add_provider_for_devices([d for d in ort.get_ep_devices() if d.ep_name == EP_NAME], {})
        s = ort.InferenceSession(path, so)
    else:
        s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    n = len(ids)
    feeds = {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, n), np.int64)}
    capacity = windowed_caches(path)
    for i in s.get_inputs():
        if i.name.startswith("past_key_values"):
            # A windowed cache (sliding_window_cache = 1, gpt-oss's even layers) is a buffer of at least the
            # window that the step fills from row 0 (empty: seqlens_k + 1 = n new tokens); ORT refuses a
            # smaller one. Every other past is empty.
            rows = max(capacity[i.name], n) if i.name in capacity else 0
            feeds[i.name] = np.zeros((1, i.shape[1], rows, i.shape[3]), np.float32)
    return s.run(["logits"], feeds)[0][0]


def windowed_caches(path: str) -> dict:
    """past input name -> local_window_size, for the GroupQueryAttention nodes with sliding_window_cache = 1."""
    import onnx

    out = {}
    for node in onnx.load(path, load_external_data=False).graph.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "GroupQueryAttention" and attrs.get("sliding_window_cache") == 1:
            out.update({name: int(attrs["local_window_size"]) for name in node.input[3:5]})
    return out


def llama_logits(gguf: str, ids: list[int], overrides: dict | None = None) -> np.ndarray:
    from llama_cpp import Llama

    llm = Llama(model_path=gguf, n_ctx=max(64, 2 * len(ids)), n_threads=2, logits_all=True, verbose=False,
                kv_overrides=overrides)
    llm.eval(ids)
    return np.array(llm.scores[: len(ids)])


def moe_layout(model_dir: str) -> tuple[int, int] | None:
    """(experts, k) of the model's QMoE nodes (one layout for all), None without any."""
    import onnx

    m = onnx.load(os.path.join(model_dir, "model.onnx"), load_external_data=False)
    dims = {t.name: list(t.dims) for t in m.graph.initializer}
    found = set()
    for node in m.graph.node:
        if node.op_type == "QMoE":
            k = next(onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == "k")
            found.add((int(dims[node.input[2]][0]), int(k)))
    if len(found) > 1:
        raise SystemExit(f"llamacpp_parity: QMoE nodes of different layouts {sorted(found)}")
    return found.pop() if found else None


def every_expert_model(model_dir: str, dest: str, experts: int) -> str:
    """A copy of MODEL_DIR's graph in `dest` with every QMoE's k = `experts`, its side files hard-linked, not
    copied (ORT refuses external data that resolves outside the model's folder, a symlink's target included)."""
    import onnx

    m = onnx.load(os.path.join(model_dir, "model.onnx"), load_external_data=False)
    for node in m.graph.node:
        if node.op_type == "QMoE":
            next(a for a in node.attribute if a.name == "k").i = experts
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key == "location" and not os.path.exists(os.path.join(dest, e.value)):
                os.link(os.path.join(model_dir, e.value), os.path.join(dest, e.value))
    onnx.save(m, os.path.join(dest, "model.onnx"))
    return dest


def default_prompt(model_dir: str) -> int:
    """16, or the largest local window plus 16 (positions past the window judged too)."""
    import onnx

    m = onnx.load(os.path.join(model_dir, "model.onnx"), load_external_data=False)
    windows = [onnx.helper.get_attribute_value(a) for n in m.graph.node if n.op_type == "GroupQueryAttention"
               for a in n.attribute if a.name == "local_window_size"]
    return max([int(w) for w in windows if w > 0], default=0) + 16


def distances(ref: np.ndarray, rc: np.ndarray, got: np.ndarray) -> list[tuple]:
    """Per position: (llama.cpp's rel L2 from ORT, rcpu's, llama.cpp's argmax == ORT's, how many sigma below ORT's
    top logit ORT scores llama.cpp's pick (0 where they agree), top-5 overlap, rcpu's argmax == ORT's)."""
    out = []
    for t in range(len(ref)):
        pick, top = int(got[t].argmax()), int(ref[t].argmax())
        sigma = math.sqrt(2.0) * float(np.sqrt(np.mean((got[t] - ref[t]) ** 2)))
        gap = (ref[t][top] - ref[t][pick]) / sigma if pick != top and sigma > 0 else (0.0 if pick == top else math.inf)
        share = len(set(np.argsort(got[t])[-5:]) & set(np.argsort(ref[t])[-5:]))
        out.append((rel_l2(got[t], ref[t]), rel_l2(rc[t], ref[t]), pick == top, gap, share, int(rc[t].argmax()) == top))
    return out


def judge(rows: list[tuple], factor: float, near_tie: float | None) -> bool:
    """Prints each position; llama.cpp passes when its worst position is within `factor` times rcpu's worst (plus
    1e-5) and its argmax is ORT's at every position (`near_tie`: or ORT scores its pick within that many sigma)."""
    worst = worst_rc = 0.0
    argmax_ok = True
    for t, (err, err_rc, agree, gap, share, _) in enumerate(rows):
        worst, worst_rc = max(worst, err), max(worst_rc, err_rc)
        tie = not agree and near_tie is not None and gap <= near_tie
        argmax_ok = argmax_ok and (agree or tie)
        print(f"position {t}: rel L2 from ORT: llama.cpp {err:.3e}, rcpu {err_rc:.3e}; llama.cpp's argmax "
              + ("agrees" if agree else f"differs (ORT scores it {gap:.2f} sigma below its top"
                 + (", a near-tie)" if tie else ")")) + f", top 5 share {share}")
    bound = factor * worst_rc + 1e-5
    ok = argmax_ok and worst <= bound
    print(f"llamacpp_parity: worst rel L2 from ORT's CPU EP: llama.cpp {worst:.3e}, rcpu {worst_rc:.3e} (bound "
          f"{bound:.3e})" + ("" if argmax_ok else "; an argmax differs beyond a near-tie") + ": "
          + ("the same model" if ok else "MISMATCH"))
    return ok


# A QMoE model's own top-k run is judged only against this (rcpu-bench's level-4 parity gate for QMoE models).
ROUTED_BOUND = 0.9
# A differing argmax counts as a near-tie within this many sigma of llama.cpp's own difference from ORT.
NEAR_TIE_SIGMA = 4.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument("gguf")
    ap.add_argument("--plugin", default=os.environ.get("RCPU_PLUGIN", str(REPO / "target/release/librcpu_ep.so")))
    ap.add_argument("--prompt", type=int, default=None, help="16, or the largest window + 16 (module doc)")
    ap.add_argument("--factor", type=float, default=3.0)
    a = ap.parse_args()
    ids = prompt(a.prompt or default_prompt(a.model_dir))
    plugin = str(pathlib.Path(a.plugin).resolve())
    moe = moe_layout(a.model_dir)

    def run(model_dir: str, overrides: dict | None) -> list[tuple]:
        ref = ort_logits(model_dir, ids).astype(np.float64)
        rc = ort_logits(model_dir, ids, plugin).astype(np.float64)
        got = llama_logits(a.gguf, ids, overrides) if overrides else llama_logits(a.gguf, ids)
        return distances(ref, rc, got.astype(np.float64))

    if moe is None:
        return 0 if judge(run(a.model_dir, None), a.factor, None) else 2
    experts, k = moe
    arch = __import__("gguf").GGUFReader(a.gguf).fields["general.architecture"].contents()
    print(f"llamacpp_parity: a mixture of experts (top {k} of {experts}): judged with every expert running "
          f"(QMoE k = {experts}, llama.cpp's {arch}.expert_used_count = {experts}), {len(ids)} positions")
    # Beside MODEL_DIR: on its file system, so that the side file can be hard-linked.
    parent = os.path.dirname(os.path.abspath(a.model_dir))
    with tempfile.TemporaryDirectory(prefix=".llamacpp_parity_", dir=parent) as tmp:
        ok = judge(run(every_expert_model(a.model_dir, tmp, experts), {f"{arch}.expert_used_count": experts}),
                   a.factor, NEAR_TIE_SIGMA)
    rows = run(a.model_dir, None)
    for name, col, agree in (("llama.cpp", 0, 2), ("rcpu", 1, 5)):
        errs = [r[col] for r in rows]
        print(f"llamacpp_parity: top {k} of {experts} as benchmarked: {name} median rel L2 from ORT "
              f"{statistics.median(errs):.3e}, worst {max(errs):.3e}, argmax ORT's at {sum(r[agree] for r in rows)}/"
              f"{len(rows)} positions")
    worst = max(r[0] for r in rows)
    routed = worst <= ROUTED_BOUND
    print(f"llamacpp_parity: top {k}: llama.cpp's worst {worst:.3e} "
          + (f"within {ROUTED_BOUND} (routing noise, not garbage)" if routed else f"past {ROUTED_BOUND}: MISMATCH"))
    return 0 if ok and routed else 2


if __name__ == "__main__":
    sys.exit(main())
