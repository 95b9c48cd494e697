"""Differential fuzzing of whole generated LLMs: random genai-builder-shaped models (`rcpu-bench gen llm:...`)
under random provider options, a prefill and three decode steps, rcpu against ORT's CPU EP.

Each case draws, from one seeded generator, a layer shape (hidden size, query and kv heads, head size,
sliding-window layers, an attention softcap and partial rotary or not,
MLP size, quantization block, accuracy level, qkv bias, tied or untied embedding, an int4 or an 8-bit
lm_head, 8-bit o_proj and MLP or not, Qwen3's per-head q/k norms (after a Split of the packed QKV
projection or after three projections) or not, the qkv bias as the MatMulNBits input or an Add after it,
vocabulary, one or two layers), a prompt length (1 to 150 tokens), the rcpu provider options (`fuse`, `threads`, `acc4_scales`,
`weight_cache_mb`, `scratch_cache_mb`, each set or left at its default), the token ids, and how the KV
cache is passed: as separate past inputs and present outputs, each decode step fed ORT's present rows (so
every step compares the same inputs), or as onnxruntime-genai passes it with `past_present_share_buffer`,
one max-length buffer per layer and kind bound through IO binding as both past and present (each session
its own buffers, so a step builds on that session's own earlier rows). Both sessions run the prompt, then
three decode steps.
Findings:
- rcpu claimed no node of the model (the comparison would be ORT against itself);
- rcpu raised where ORT computed, or an output's shape differs from ORT's;
- accuracy levels 0-3: logits or present rows beyond rel L2 1e-4 (the parity tests' MatMulNBits bound);
- accuracy level 4 (activations quantized to int8 by both, each its own way): rcpu's logits, or any of its
  present rows (they come out of the int8 qkv projection), farther from the model's f32 answer (the same
  weights at level 0, on ORT) than 1.5x as far as ORT's own level-4 outputs are with `acc4_scales=f32`
  (rcpu's arithmetic is then ORT's), 4x with the default f16 scales (a documented perturbation), plus 1e-3.

    .venv/bin/python e2e/python/fuzz_llm.py [--cases 50] [--seed 1] [--plugin target/release/librcpu_ep.so]
                                            [--bench target/release/rcpu-bench]

prints one line per case (`ok` / `FINDING`, the spec, the options and the errors, enough to rerun it) and
exits 1 when any case found something. `RCPU_ISA=avx2` (or `scalar`) in the environment fuzzes another
kernel level. test_fuzz_llm.py runs a few seeded cases in the suite.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from og_bench import rel_l2

EP_NAME = "RcpuExecutionProvider"
REPO = pathlib.Path(__file__).resolve().parents[2]
DECODE_STEPS = 3
# The generated models' context (`ctx=` in the spec): the shared buffers' length.
CTX = 1024
EXACT_TOL = 1e-4
# How much farther than ORT's a level-4 output may land from the f32 answer (per output and step), by how
# rcpu stores the scales (`acc4_scales`). With the model's f32 scales rcpu's arithmetic is ORT's: over 97
# random level-4 cases the largest ratio (worst output and step of a case) was 1.11, median 1.00. The f16
# scales (the default) move every weight block's scale by up to 2^-11, and the next layer's int8
# quantization of its input can round differently: over 203 cases median 1.13, 90th percentile 1.38,
# largest 1.97, and 3.2 at one step of a 16-wide model (one block per row) in a campaign of 1000.
ACC4_RATIO = {"f32": 1.5, "f16": 4.0}


@dataclass
class Case:
    """One fuzz case: the generator spec (without the accuracy level), the level, options, prompt, seed."""

    spec: str
    acc: int
    kv: int
    head: int
    vocab: int
    options: dict
    prompt: int
    seed: int
    # genai's past_present_share_buffer layout: past and present bound to one max-length buffer.
    shared: bool = False

    def describe(self) -> str:
        kv = " kv=shared" if self.shared else ""
        return (f"{self.spec},acc={self.acc} options={json.dumps(self.options)} prompt={self.prompt}"
                f" seed={self.seed}{kv}")


def draw_case(rng: random.Random) -> Case:
    block = rng.choice([16, 32, 64, 128])
    kv, group = rng.choice([1, 2, 3]), rng.choice([1, 2, 3, 4, 7])
    # ORT's GroupQueryAttention takes head sizes that are multiples of 16 only.
    head = rng.choice([16, 32, 48, 64, 96, 128])
    hidden = rng.choice([16, 24, 40, 64, 72, 96, 128, 200, 256, 520])
    # A tied (int4) embedding needs whole blocks per row.
    tied = rng.choice([0, 1]) if hidden % block == 0 else 0
    vocab = rng.randint(20, 700)
    spec = (
        f"llm:preset=qwen2-0.5b,layers={rng.choice([1, 2])},vocab={vocab},hidden={hidden},heads={kv * group},"
        f"kv={kv},head={head},inter={rng.randint(8, 400)},block={block},ctx={CTX},tied={tied},"
        f"qkv_bias={rng.choice([0, 1])},seed={rng.randint(1, 10**6)}"
    )
    # Sliding-window layers (every other one) over the ordinary cache, and an attention softcap.
    if rng.random() < 0.3:
        spec += f",window={rng.choice([1, 2, 7, 64, 500])},window_cache=0"
    if rng.random() < 0.2:
        spec += f",softcap={rng.choice([1, 30, 50])}"
    # Partial rotary (the builder's partial_rotary_factor < 1): the first `rot` dims of a head rotate.
    if rng.random() < 0.2:
        spec += f",rot={rng.choice(range(16, head + 1, 16))}"
    choices = {
        "fuse": ["on", "off"],
        "threads": ["1", "2", "3"],
        "acc4_scales": ["f16", "f32"],
        "weight_cache_mb": ["0", "1", "4096"],
        "scratch_cache_mb": ["0", "1", "64"],
    }
    options = {k: rng.choice(v) for k, v in choices.items() if rng.random() < 0.6}
    case = Case(spec, rng.choice([0, 1, 2, 3, 4, 4]), kv, head, vocab, options,
                rng.choice([1, 2, 5, 17, 33, 64, 150, 300, 700]), rng.randint(0, 2**31), rng.random() < 0.5)
    # An 8-bit lm_head (the builder's k_quant_last / k_quant_mixed; tied, the embedding is an 8-bit
    # GatherBlockQuantized over its codes); drawn last.
    if rng.random() < 0.3:
        case.spec += ",lm_bits=8"
    # Olive's mixed precision: o_proj and the MLP in 8 bits.
    if rng.random() < 0.2:
        case.spec += ",mix8=1"
    # Qwen3's per-head query / key norms, after a Split of the packed QKV projection (the builder's
    # form) or after three projections (`packed=0`); drawn last.
    if rng.random() < 0.25:
        case.spec = case.spec.replace("preset=qwen2-0.5b", "preset=qwen3-0.6b", 1) + f",packed={rng.choice([0, 1])}"
    # The QKV bias as an Add after the projection (the builder's form since 0.18; fused, rcpu folds it).
    if rng.random() < 0.3:
        case.spec += ",bias_add=1"
    return case


def generate(bench: pathlib.Path, spec: str, out: pathlib.Path) -> bytes:
    r = subprocess.run([str(bench), "gen", spec, "--out", str(out)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"rcpu-bench gen {spec}: {r.stderr.strip()[-400:]}")
    return out.read_bytes()


def session(model: bytes, devices=None, options: dict | None = None) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 2
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    if devices is None:
        return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    so.add_provider_for_devices(devices, options or {})
    return ort.InferenceSession(model, so, enable_fallback=0)


class Generation:
    """Feeds for one prompt and the decode steps after it, the same for every session of a case."""

    def __init__(self, case: Case, sess: ort.InferenceSession):
        self.case = case
        self.inputs = [i.name for i in sess.get_inputs()]
        self.outputs = [o.name for o in sess.get_outputs()]
        rng = np.random.default_rng(case.seed)
        self.ids = [rng.integers(0, case.vocab, (1, case.prompt)).astype(np.int64)]
        self.ids += [rng.integers(0, case.vocab, (1, 1)).astype(np.int64) for _ in range(DECODE_STEPS)]

    def feeds(self, step: int, past: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:
        c, ids = self.case, self.ids[step]
        done = 0 if step == 0 else c.prompt + step - 1
        f = {}
        for n in self.inputs:
            if n == "input_ids":
                f[n] = ids
            elif n == "attention_mask":
                f[n] = np.ones((1, done + ids.shape[1]), np.int64)
            elif n == "position_ids":
                f[n] = np.arange(done, done + ids.shape[1], dtype=np.int64)[None]
            elif n.startswith("past_key_values"):
                f[n] = np.zeros((1, c.kv, 0, c.head), np.float32) if past is None else past[n]
        return f

    def past_from(self, outs: list[np.ndarray]) -> dict[str, np.ndarray]:
        return {n: outs[self.outputs.index(n.replace("past_key_values", "present"))]
                for n in self.inputs if n.startswith("past_key_values")}


class SharedKv:
    """One session's max-length key / value buffers, bound as both past and present of every step
    (only the rows up to the step's total length are meaningful)."""

    def __init__(self, gen: Generation, sess: ort.InferenceSession):
        c = gen.case
        self.gen, self.sess = gen, sess
        self.bufs = {n: ort.OrtValue.ortvalue_from_numpy(np.zeros((1, c.kv, CTX, c.head), np.float32))
                     for n in gen.inputs if n.startswith("past_key_values")}

    def run(self, step: int) -> list[np.ndarray]:
        """Outputs of `step` in `gen.outputs` order: the logits, then each present buffer's valid rows."""
        c, g = self.gen.case, self.gen
        total = c.prompt + step
        io = self.sess.io_binding()
        for n, v in g.feeds(step, None).items():
            if n not in self.bufs:
                io.bind_cpu_input(n, v)
        # The logits first: `copy_outputs_to_cpu` lists the outputs in binding order.
        io.bind_output(g.outputs[0])
        for n, v in self.bufs.items():
            io.bind_ortvalue_input(n, v)
            io.bind_ortvalue_output(n.replace("past_key_values", "present"), v)
        self.sess.run_with_iobinding(io)
        logits = io.copy_outputs_to_cpu()[0]
        rows = {n.replace("past_key_values", "present"): v.numpy()[:, :, :total] for n, v in self.bufs.items()}
        return [logits] + [rows[n] for n in g.outputs[1:]]


def run_case(case: Case, bench: pathlib.Path, devices, work: pathlib.Path) -> tuple[list[str], str]:
    """Findings of one case (empty: none) and a summary of its errors."""
    model = generate(bench, f"{case.spec},acc={case.acc}", work / "model.onnx")
    ref = session(model)
    gen = Generation(case, ref)
    try:
        mine = session(model, devices, case.options)
    except Exception as e:  # noqa: BLE001 - any failure of rcpu's session is the finding
        return [f"rcpu's session failed: {str(e)[:300]}"], ""
    claimed = sum(len(sg.get_nodes()) for sg in mine.get_provider_graph_assignment_info() if sg.ep_name == EP_NAME)
    if claimed == 0:
        return ["rcpu claimed no node (the comparison would be ORT against itself)"], ""
    f32 = session(generate(bench, f"{case.spec},acc=0", work / "f32.onnx")) if case.acc == 4 else None
    findings, worst = [], {"logits": 0.0, "present": 0.0}
    past = None
    runners = [SharedKv(gen, s) for s in (ref, mine, f32) if s is not None] if case.shared else None
    for step in range(DECODE_STEPS + 1):
        feeds = None if runners else gen.feeds(step, past)
        want = runners[0].run(step) if runners else ref.run(None, feeds)
        try:
            got = runners[1].run(step) if runners else mine.run(None, feeds)
        except Exception as e:  # noqa: BLE001
            return findings + [f"step {step}: rcpu raised where ORT computed: {str(e)[:300]}"], ""
        shapes = [(n, g.shape, w.shape) for n, g, w in zip(gen.outputs, got, want) if g.shape != w.shape]
        if shapes:
            return findings + [f"step {step}: output shapes differ from ORT's: {shapes}"], ""
        logits = rel_l2(got[0], want[0])
        present = max((rel_l2(g, w) for g, w in zip(got[1:], want[1:])), default=0.0)
        worst["logits"] = max(worst["logits"], logits)
        worst["present"] = max(worst["present"], present)
        if not all(np.isfinite(g).all() == np.isfinite(w).all() for g, w in zip(got, want)):
            findings.append(f"step {step}: non-finite values where ORT has none (or the reverse)")
        if f32 is None:
            if logits > EXACT_TOL or present > EXACT_TOL:
                findings.append(f"step {step}: rel L2 logits {logits:.2e} present {present:.2e} > {EXACT_TOL}")
        else:
            truth = runners[2].run(step) if runners else f32.run(None, feeds)
            for k, name in enumerate(gen.outputs):
                theirs, ours = rel_l2(want[k], truth[k]), rel_l2(got[k], truth[k])
                if ours > ACC4_RATIO[case.options.get("acc4_scales", "f16")] * theirs + 1e-3:
                    findings.append(f"step {step}: level-4 {name} {ours:.2e} from the f32 answer, ORT's {theirs:.2e}")
        if not runners:
            past = gen.past_from(want)
    return findings, f"logits {worst['logits']:.2e} present {worst['present']:.2e}"


def fuzz(cases: int, seed: int, bench: pathlib.Path, devices, log=print) -> int:
    """Runs `cases` cases from `seed`; returns how many found something."""
    rng = random.Random(seed)
    found = 0
    for i in range(cases):
        case = draw_case(rng)
        with tempfile.TemporaryDirectory(prefix="rcpu-fuzz-") as d:
            findings, summary = run_case(case, bench, devices, pathlib.Path(d))
        if findings:
            found += 1
            log(f"FINDING {i} {case.describe()}: " + "; ".join(findings))
        else:
            log(f"ok {i} {case.describe()} {summary}")
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--plugin", default=str(REPO / "target/release/librcpu_ep.so"))
    ap.add_argument("--bench", default=str(REPO / "target/release/rcpu-bench"))
    a = ap.parse_args()
    plugin, bench = pathlib.Path(a.plugin).resolve(), pathlib.Path(a.bench).resolve()
    for p in (plugin, bench):
        if not p.is_file():
            print(f"fuzz_llm: {p} not found (build with `cargo build --release --workspace`)", file=sys.stderr)
            return 2
    ort.set_default_logger_severity(3)
    ort.register_execution_provider_library("rcpu", str(plugin))
    devices = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    if not devices:
        print(f"fuzz_llm: no {EP_NAME} device after registering {plugin}", file=sys.stderr)
        return 2
    found = fuzz(a.cases, a.seed, bench, devices, log=lambda s: print(s, flush=True))
    isa = os.environ.get("RCPU_ISA", "default")
    print(f"fuzz_llm: {a.cases} cases from seed {a.seed} (ISA {isa}): {found} with findings")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
