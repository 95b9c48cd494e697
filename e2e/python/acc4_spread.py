"""Diagnostic (not a test): how far rcpu's logits are from ORT's at accuracy_level 4, beside the spread
ORT itself shows when one weight moves by 1e-6 (issue 17's parity clause for level 4).

At level 4 both runtimes quantize every MatMulNBits input to int8 per block, so a difference of one ulp
anywhere can flip an int8 rounding downstream; ORT run on the same model with one f32 norm weight moved by
1e-6 shows how large such flips are. The script nudges every 1-D f32 initializer of length `hidden` at three
positions, one at a time, runs ORT's CPU EP on each, and prints the distribution of rel L2 against the
unmoved model, then rcpu's rel L2 against the same ORT run.

    target/release/rcpu-bench gen "llm:preset=qwen2-0.5b,layers=6,vocab=4000,acc=4,ctx=256" --out /tmp/l4/model.onnx
    cd e2e/python && ../../.venv/bin/python acc4_spread.py /tmp/l4/model.onnx ../../target/release/librcpu_ep.so
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


def _feeds(m: onnx.ModelProto, vocab: int) -> dict:
    ids = np.random.default_rng(5).integers(0, vocab, size=(1, SEQ)).astype(np.int64)
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


def main() -> None:
    model, plugin = sys.argv[1], sys.argv[2]
    m = onnx.load(model)
    vocab = max(t.dims[0] for t in m.graph.initializer if len(t.dims) == 2)
    feeds = _feeds(m, vocab)
    base = _run(m, feeds)
    hidden = next(t.dims[0] for t in m.graph.initializer if t.name.endswith("norm.w"))
    spreads = []
    for t in [t for t in m.graph.initializer if t.data_type == 1 and list(t.dims) == [hidden]]:
        for pos in (7, 100, 500):
            moved = onnx.ModelProto()
            moved.CopyFrom(m)
            for t2 in moved.graph.initializer:
                if t2.name == t.name:
                    a = numpy_helper.to_array(t2).copy()
                    a[pos] += 1e-6
                    t2.CopyFrom(numpy_helper.from_array(a, t2.name))
            spreads.append(rel_l2(_run(moved, feeds), base))
    nz = sorted(x for x in spreads if x > 0)
    print(f"ORT, one weight +1e-6: {len(spreads)} runs, {len(nz)} changed the logits; rel L2 of those: "
          + ", ".join(f"{x:.2e}" for x in nz))
    ort.register_execution_provider_library("rcpu", str(pathlib.Path(plugin).resolve()))
    devs = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    print(f"rcpu vs ORT: rel L2 {rel_l2(_run(m, feeds, devs), base):.2e}")


if __name__ == "__main__":
    main()
