"""Parity of the llama.cpp arm: llama.cpp's logits on the GGUF (`gguf_from_onnx.py`) against ORT's CPU EP on
the ONNX model it came from, for one prompt, every position, with rcpu's own distance from ORT as the
yardstick. llama-bench gives no logits, so this runs llama.cpp through llama-cpp-python (built from the
same sdist as llama-bench: `scripts/llamacpp_compare.sh` with LLAMACPP_PARITY=1).

    python llamacpp_parity.py MODEL_DIR FILE.gguf [--plugin SO] [--prompt 16] [--factor 3]

At accuracy level 4 ORT, rcpu and llama.cpp (Q8_0) all quantize activations to int8 per block, and rcpu
and the GGUF round the weights' scales to f16, so none of them is ORT to the bit: how far is fine
depends on the model (worst positions of a 16-token prompt: Qwen2-0.5B shapes rcpu 3.6e-4, llama.cpp
3.4e-4; Llama-3.2-1B shapes 1.8e-4 / 3.5e-4; Qwen with an 8-bit lm_head 2.6e-3 / 3.2e-3). So
llama.cpp passes when its worst position is at most `--factor` times rcpu's worst (plus 1e-5) and
every position's argmax is ORT's; a GGUF written with ORT's nibble order taken as Q4_0's measured
2.7e-2, ~75 times rcpu's. Prints each
position's distances; exits 2 on a mismatch.
"""
import argparse
import os
import pathlib
import sys

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
    ap.add_argument("--plugin", default=os.environ.get("RCPU_PLUGIN", str(REPO / "target/release/librcpu_ep.so")))
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--factor", type=float, default=3.0)
    a = ap.parse_args()
    ids = prompt(a.prompt)
    ref = ort_logits(a.model_dir, ids).astype(np.float64)
    rc = ort_logits(a.model_dir, ids, str(pathlib.Path(a.plugin).resolve())).astype(np.float64)
    got = llama_logits(a.gguf, ids).astype(np.float64)
    worst, worst_rc, same = 0.0, 0.0, True
    for t in range(len(ids)):
        err, err_rc = rel_l2(got[t], ref[t]), rel_l2(rc[t], ref[t])
        top = len(set(np.argsort(got[t])[-5:]) & set(np.argsort(ref[t])[-5:]))
        agree = int(got[t].argmax()) == int(ref[t].argmax())
        worst, worst_rc, same = max(worst, err), max(worst_rc, err_rc), same and agree
        print(f"position {t}: rel L2 from ORT: llama.cpp {err:.3e}, rcpu {err_rc:.3e}; llama.cpp's argmax "
              f"{'agrees' if agree else 'differs'}, top 5 share {top}")
    bound = a.factor * worst_rc + 1e-5
    ok = same and worst <= bound
    print(f"llamacpp_parity: worst rel L2 from ORT's CPU EP: llama.cpp {worst:.3e}, rcpu {worst_rc:.3e} (bound "
          f"{bound:.3e}): " + ("the same model" if ok else "MISMATCH"))
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
