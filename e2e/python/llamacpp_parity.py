"""Parity of the llama.cpp arm: llama.cpp's logits on the GGUF (`gguf_from_onnx.py`) against ORT's CPU EP on
the ONNX model it came from, for one prompt, every position. llama-bench gives no logits, so this runs
llama.cpp through llama-cpp-python (built from the same sdist as llama-bench: `scripts/llamacpp_compare.sh`
with LLAMACPP_PARITY=1).

    python llamacpp_parity.py MODEL_DIR FILE.gguf [--prompt 16] [--tol 2e-3]

Prints the relative L2 distance of each position's logits and whether their argmax and top 5 agree;
exits 2 when a position is further apart than `--tol` or an argmax differs. At accuracy level 4 ORT
quantizes activations to int8 per block as llama.cpp's Q8_0 does: the generated Qwen2-0.5B and
Llama-3.2-1B models measured 1.6e-4 to 3.5e-4 here (rcpu against ORT: 3.1e-4), and a GGUF written with
the ONNX byte order taken as Q4_0's measured 2.7e-2 (random weights scramble gently), hence 2e-3.
"""
import argparse
import os
import sys

import numpy as np


def prompt(n: int) -> list[int]:
    """A fixed prompt of `n` ids (random-weight models: any ids below the vocabulary)."""
    return [(i * 7919 + 13) % 1000 + 100 for i in range(n)]


def ort_logits(model_dir: str, ids: list[int]) -> np.ndarray:
    """ORT's CPU EP on the ONNX model: the prompt from an empty cache, logits [len(ids), vocab]."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    s = ort.InferenceSession(os.path.join(model_dir, "model.onnx"), so, providers=["CPUExecutionProvider"])
    n = len(ids)
    feeds = {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, n), np.int64)}
    for i in s.get_inputs():
        if i.name.startswith("past_key_values"):
            feeds[i.name] = np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32)
    return s.run(["logits"], feeds)[0][0]


def llama_logits(gguf: str, ids: list[int]) -> np.ndarray:
    from llama_cpp import Llama

    llm = Llama(model_path=gguf, n_ctx=max(64, 2 * len(ids)), n_threads=2, logits_all=True, verbose=False)
    llm.eval(ids)
    return np.array(llm.scores[: len(ids)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument("gguf")
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--tol", type=float, default=2e-3)
    a = ap.parse_args()
    ids = prompt(a.prompt)
    ref = ort_logits(a.model_dir, ids).astype(np.float64)
    got = llama_logits(a.gguf, ids).astype(np.float64)
    worst, ok = 0.0, True
    for t in range(len(ids)):
        err = float(np.linalg.norm(got[t] - ref[t]) / max(np.linalg.norm(ref[t]), 1e-30))
        top = len(set(np.argsort(got[t])[-5:]) & set(np.argsort(ref[t])[-5:]))
        same = int(got[t].argmax()) == int(ref[t].argmax())
        worst = max(worst, err)
        ok &= err <= a.tol and same
        print(f"position {t}: rel L2 {err:.3e}, argmax {'agrees' if same else 'differs'}, top 5 share {top}")
    print(f"llamacpp_parity: llama.cpp against ORT's CPU EP, worst rel L2 {worst:.3e} (tol {a.tol:g}): "
          + ("the same model" if ok else "MISMATCH"))
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
