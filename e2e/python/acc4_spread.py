"""Diagnostic (not a test): how far rcpu's logits are from ORT's at accuracy_level 4, beside the spread
ORT itself shows when one weight moves by 1e-6 (issue 17's parity clause for level 4).

At level 4 both runtimes quantize every MatMulNBits input to int8 per block, so a difference of one ulp
anywhere can flip an int8 rounding downstream; ORT run on the same model with one f32 weight moved by 1e-6
shows how large such flips are. The script nudges the model's f32 weights (every 1-D f32 initializer that is
not a MatMulNBits scale: the norm weights and the qkv biases) at `positions` evenly spaced places, one at a
time, runs ORT's CPU EP on each, and prints the distribution of rel L2 against the unmoved model; then, for
`prompts` prompts, rcpu's rel L2 against ORT's unmoved run of the same prompt.

    target/release/rcpu-bench gen "llm:preset=qwen2-0.5b,layers=6,vocab=4000,acc=4,ctx=256" --out /tmp/l4/model.onnx
    cd e2e/python && ../../.venv/bin/python acc4_spread.py /tmp/l4/model.onnx ../../target/release/librcpu_ep.so [positions [prompts]]

With `RCPU_DECLINE=Op1,..` in the environment rcpu leaves those op types to ORT, which shows how much of
rcpu's distance one op family causes on its own.
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from conftest import EP_NAME, _session_options, rel_l2

SEQ = 16


def _feeds(m: onnx.ModelProto, vocab: int, seed: int = 5) -> dict:
    ids = np.random.default_rng(seed).integers(0, vocab, size=(1, SEQ)).astype(np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones((1, SEQ), np.int64)}
    for i in m.graph.input:
        if i.name.startswith("past"):
            kv, head = (d.dim_value for d in i.type.tensor_type.shape.dim[1::2])
            feeds[i.name] = np.zeros((1, kv, 0, head), np.float32)
    return feeds


def _run(m: onnx.ModelProto, feeds: dict, devices=None) -> np.ndarray:
    so = _session_options(ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    if devices:
        so.add_provider_for_devices(devices, {})
        s = ort.InferenceSession(m.SerializeToString(), so, enable_fallback=0)
    else:
        s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(["logits"], feeds)[0]


def _moved_weights(m: onnx.ModelProto) -> list:
    """The f32 weights a spread run moves: 1-D f32 initializers other than MatMulNBits scales."""
    scales = {n.input[2] for n in m.graph.node if n.op_type == "MatMulNBits" and len(n.input) > 2}
    return [t for t in m.graph.initializer if t.data_type == 1 and len(t.dims) == 1 and t.name not in scales]


def main() -> None:
    model, plugin = sys.argv[1], sys.argv[2]
    positions = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    prompts = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    m = onnx.load(model)
    vocab = max(t.dims[0] for t in m.graph.initializer if len(t.dims) == 2)
    feeds = _feeds(m, vocab)
    base = _run(m, feeds)
    spreads = []
    for t in _moved_weights(m):
        n = t.dims[0]
        for pos in sorted({(k * n) // positions + 7 for k in range(positions)} & set(range(n))):
            moved = onnx.ModelProto()
            moved.CopyFrom(m)
            for t2 in moved.graph.initializer:
                if t2.name == t.name:
                    a = numpy_helper.to_array(t2).copy()
                    a[pos] += 1e-6
                    t2.CopyFrom(numpy_helper.from_array(a, t2.name))
            spreads.append(rel_l2(_run(moved, feeds), base))
    nz = sorted(x for x in spreads if x > 0)
    print(f"ORT, one f32 weight +1e-6: {len(spreads)} runs, {len(nz)} changed the logits")
    if nz:
        q = np.quantile(nz, [0.5, 0.9])
        print(f"  rel L2 of those: min {nz[0]:.2e}, median {q[0]:.2e}, p90 {q[1]:.2e}, max {nz[-1]:.2e}")
        print("  all: " + ", ".join(f"{x:.2e}" for x in nz))
    ort.register_execution_provider_library("rcpu", str(pathlib.Path(plugin).resolve()))
    devs = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    for seed in range(5, 5 + prompts):
        f = _feeds(m, vocab, seed)
        ref = base if seed == 5 else _run(m, f)
        print(f"prompt seed {seed}: rcpu vs ORT rel L2 {rel_l2(_run(m, f, devs), ref):.2e}")


if __name__ == "__main__":
    main()
