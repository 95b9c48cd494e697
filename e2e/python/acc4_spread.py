"""Diagnostic (not a test): how far rcpu's logits are from ORT's at accuracy_level 4, beside the spread
ORT itself shows when one weight moves by 1e-6 (issue 17's parity clause for level 4), and how far each is
from the answer without quantized activations.

At level 4 both runtimes quantize every MatMulNBits input to int8 per block, so a difference of one ulp
anywhere can flip an int8 rounding downstream; ORT run on the same model with one f32 weight moved by 1e-6
shows how large such flips are. For each of the first `spread_prompts` prompts the script nudges the model's
f32 weights (every 1-D f32 initializer that is not a MatMulNBits scale: the norm weights and the qkv biases)
at `positions` evenly spaced places, one at a time, runs ORT's CPU EP on each, and prints the distribution
of rel L2 against the unmoved model. Then, for `prompts` prompts, it prints rcpu's rel L2 against ORT's
unmoved run, and both runtimes' rel L2 against a reference that does not quantize activations: ORT on a
copy of the model with every MatMulNBits at accuracy_level 0 (same int4 weights, f32 activations).

    target/release/rcpu-bench gen "llm:preset=qwen2-0.5b,layers=6,vocab=4000,acc=4,ctx=256" --out /tmp/l4/model.onnx
    cd e2e/python && ../../.venv/bin/python acc4_spread.py /tmp/l4/model.onnx ../../target/release/librcpu_ep.so [positions [prompts [spread_prompts]]] [key=value ...]

Defaults: 3 positions, 1 prompt, 1 spread prompt (0 skips the spread runs, the slow part: one session per
moved weight). Prompt i (from 0) is 16 random token ids drawn with seed 5 + i.
Arguments `key=value` (anywhere after the plugin) are rcpu provider options, e.g. `acc4_scales=f32` (level 4
with the model's f32 scales instead of f16 ones; see include/rcpu_ep.h). The last column divides rcpu's distance
by the largest one-weight spread seen over the spread prompts (absent when none ran).
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
from models import with_accuracy_level

SEQ = 16


def _feeds(m: onnx.ModelProto, vocab: int, seed: int = 5) -> dict:
    ids = np.random.default_rng(seed).integers(0, vocab, size=(1, SEQ)).astype(np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones((1, SEQ), np.int64)}
    for i in m.graph.input:
        if i.name.startswith("past"):
            kv, head = (d.dim_value for d in i.type.tensor_type.shape.dim[1::2])
            feeds[i.name] = np.zeros((1, kv, 0, head), np.float32)
    return feeds


def _run(m: onnx.ModelProto, feeds: dict, devices=None, options: dict | None = None) -> np.ndarray:
    so = _session_options(ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    if devices:
        so.add_provider_for_devices(devices, options or {})
        s = ort.InferenceSession(m.SerializeToString(), so, enable_fallback=0)
    else:
        s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(["logits"], feeds)[0]


def _moved_weights(m: onnx.ModelProto) -> list:
    """The f32 weights a spread run moves: 1-D f32 initializers other than MatMulNBits scales."""
    scales = {n.input[2] for n in m.graph.node if n.op_type == "MatMulNBits" and len(n.input) > 2}
    return [t for t in m.graph.initializer if t.data_type == 1 and len(t.dims) == 1 and t.name not in scales]


def _spread(m: onnx.ModelProto, feeds: dict, base: np.ndarray, positions: int) -> list:
    """rel L2 against `base` of ORT's logits with one moved weight, per (weight, position)."""
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
    return spreads


def main() -> None:
    model, plugin = sys.argv[1], sys.argv[2]
    rest = sys.argv[3:]
    options = dict(a.split("=", 1) for a in rest if "=" in a)
    nums = [int(a) for a in rest if "=" not in a]
    positions = nums[0] if len(nums) > 0 else 3
    prompts = nums[1] if len(nums) > 1 else 1
    spread_prompts = nums[2] if len(nums) > 2 else 1
    m = onnx.load(model)
    vocab = max(t.dims[0] for t in m.graph.initializer if len(t.dims) == 2)
    feeds = {seed: _feeds(m, vocab, seed) for seed in range(5, 5 + max(prompts, spread_prompts))}
    ort4 = {seed: _run(m, f) for seed, f in feeds.items()}
    maxima = []
    for seed in range(5, 5 + spread_prompts):
        spreads = _spread(m, feeds[seed], ort4[seed], positions)
        nz = sorted(x for x in spreads if x > 0)
        print(f"prompt seed {seed}, ORT with one f32 weight +1e-6: {len(spreads)} runs, {len(nz)} changed the logits")
        if nz:
            q = np.quantile(nz, [0.5, 0.9])
            print(f"  rel L2 of those: min {nz[0]:.2e}, median {q[0]:.2e}, p90 {q[1]:.2e}, max {nz[-1]:.2e}")
            print("  all: " + ", ".join(f"{x:.2e}" for x in nz))
            maxima.append(nz[-1])
    if len(maxima) > 1:
        print(f"ORT's one-weight spread, largest over prompts: {max(maxima):.2e}")
    if prompts < 1:
        return
    ort.register_execution_provider_library("rcpu", str(pathlib.Path(plugin).resolve()))
    devs = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    m0 = with_accuracy_level(m, 0)  # same int4 weights, f32 activations
    print("rel L2 per prompt; ORT4, rcpu4: the model as given; ref0: ORT with every MatMulNBits at level 0")
    print(f"rcpu provider options: {options or 'none (defaults)'}")
    spread = max(maxima) if maxima else None
    print("  seed  rcpu4 vs ORT4  ORT4 vs ref0  rcpu4 vs ref0" + ("  rcpu4 vs ORT4 / ORT's spread" if spread else ""))
    for seed in range(5, 5 + prompts):
        rcpu4, ref0 = _run(m, feeds[seed], devs, options), _run(m0, feeds[seed])
        r = (rel_l2(rcpu4, ort4[seed]), rel_l2(ort4[seed], ref0), rel_l2(rcpu4, ref0))
        ratio = f"  {r[0] / spread:28.2f}" if spread else ""
        print(f"  {seed:4d}  {r[0]:13.2e}  {r[1]:12.2e}  {r[2]:13.2e}{ratio}")


if __name__ == "__main__":
    main()
