"""Tokens per second through onnxruntime-genai: the loop users run, ORT's CPU EP against rcpu.

`rcpu-bench llm` times ORT's Run on the model; this times onnxruntime-genai's own generation loop on the
same model folder (model.onnx + genai_config.json, e.g. from `rcpu-bench gen llm:...`), its KV cache
handling and search included, under docs/benchmarking.md's rules: every arm in a worker process of its
own (ORT's CPU EP, rcpu, and a null arm repeating rcpu), pinned to the same CPUs, interleaved round by
round with the order reversed every other round; after each arm's batch the next waits until that
worker's CPU time stops moving (ORT's pool spins after a run); parity first (greedy tokens, the first
step's logits); per arm the median over rounds of each round's p50 ms per generated token; the null
arm's per-round ratio gives the noise band; the steady window as in `rcpu-bench` (rule 4).

usage: python og_bench.py MODEL_DIR [--plugin SO] [--prompt 64] [--tokens 32] [--rounds 8] [--iters 2]
       [--threads 2] [--intra N] [--tol X] [--bench RCPU_BENCH] [--json FILE] [--null-plugin OLD_SO]
       [--llamacpp LLAMA_BENCH --gguf FILE]

`--null-plugin OLD_SO`: the null arm loads another build of the plugin, so its ratio to the rcpu arm
is old/new per round (printed with its median); the A/A band then needs a run without it.

After every round `RCPU_BENCH probe` (default target/release/rcpu-bench) reads a buffer the size of rcpu's
packed weights and times the CPUs' round trip (rule 8; also right before and after the rcpu arm's window),
so each round's ORT/rcpu and rcpu's share of the read are reported with the vCPUs near or apart.

`--intra N` writes `intra_op_num_threads: N` into the session options of every arm's genai config
(default: unset, what a genai app gets unless it says otherwise; with onnxruntime-genai 0.18.0 that ran
ORT's CPU EP as fast as `--intra 1`); `--threads` is rcpu's lane count (provider option `threads`; 0:
not set, the plugin's default). It also records the conditions (rule 5: the CPU model, the load average,
other processes' share of the CPUs while the arms were timed) and what ran on rcpu (rule 6: its route
ledger). Exit codes: 0 ok, 1 error, 2 parity mismatch (nothing timed), 3 steady state not reached (no
headline).

`--llamacpp LLAMA_BENCH --gguf FILE` adds llama.cpp as a fourth arm: its own `llama-bench` on a GGUF of
the same weights (`gguf_from_onnx.py`: the same codes, the scales as f16, checked when written), a
fresh process each round pinned to the same CPUs, `-t THREADS`, the prompt as `pp` at depth 0 and the
tokens as `tg` at the prompt's depth, `--iters` repetitions. llama-bench times whole runs, not tokens,
so this arm and rcpu's are compared by the mean per generated token (the other columns by the p50), and
it gives no logits: `llamacpp_parity.py` checks that arm's answers. `scripts/llamacpp_compare.sh` builds
llama-bench, writes the GGUF and runs this.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

EP_NAME = "RcpuExecutionProvider"
REPO = pathlib.Path(__file__).resolve().parents[2]
# Accuracy level 4 quantizes activations to int8 (both runtimes): the bench's tolerance for it.
LOGITS_TOL = 2e-2


def prompt_ids(n: int, vocab: int, seed: int) -> list[int]:
    """A deterministic prompt of `n` token ids below `vocab` (no tokenizer: random-weight models)."""
    x, out = seed * 2654435761 + 12345, []
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out.append(int((x >> 33) % vocab))
    return out


# ---------------------------------------------------------------- worker (one arm, one process)


def stats(plugin: str) -> dict:
    """rcpu's statistics (`RcpuEp_StatsJson`: the route ledger, memory, ...) from the plugin this process
    loaded."""
    import ctypes

    lib = ctypes.CDLL(plugin)  # the object onnxruntime loaded: the same counters
    lib.RcpuEp_StatsJson.restype = ctypes.c_size_t
    lib.RcpuEp_StatsJson.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    n = lib.RcpuEp_StatsJson(None, 0) + 4096
    buf = ctypes.create_string_buffer(n)
    m = lib.RcpuEp_StatsJson(buf, n)
    return json.loads(buf.raw[:m])


def kv_window(model_dir: str | pathlib.Path) -> int:
    """The positions a windowed KV cache must hold: genai_config's `sliding_window` (the builder's
    `sliding_window_cache` layers) size, capped at the context (genai refuses a longer max_length;
    Phi-4-mini's window is twice it); 0 without a window. ORT's CPU EP and rcpu both refuse a
    windowed cache smaller than the window, and genai sizes the caches by max_length, so a run's
    max_length must be at least this."""
    cfg = json.loads((pathlib.Path(model_dir) / "genai_config.json").read_text())["model"]
    window = int(cfg["decoder"].get("sliding_window", {}).get("window_size", 0))
    return min(window, int(cfg.get("context_length", window)))


def token_fraction(model: str | pathlib.Path) -> float:
    """The share of a model's quantized weight bytes (MatMulNBits and QMoE initializers) a decode token
    reads: all of them but, of each QMoE node's experts, k of E (a token runs k experts). 1.0 for a
    model without QMoE. Read from the graph alone (external data by its recorded length)."""
    import onnx
    from onnx import helper

    m = onnx.load(str(model), load_external_data=False)
    size, dims = {}, {t.name: list(t.dims) for t in m.graph.initializer}
    for t in m.graph.initializer:
        ext = {e.key: e.value for e in t.external_data}
        if "length" in ext:
            size[t.name] = int(ext["length"])
        else:
            size[t.name] = int(np.prod(t.dims, dtype=np.int64)) * np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
    total = token = 0.0
    for n in m.graph.node:
        if n.op_type == "MatMulNBits":
            b = sum(size.get(x, 0) for x in n.input[1:4])
            total, token = total + b, token + b
        elif n.op_type == "QMoE":
            k = next((a.i for a in n.attribute if a.name == "k"), 1)
            experts = [x for i, x in enumerate(n.input) if i in (2, 3, 4, 5, 6, 7, 11, 12, 13)]
            e = (dims.get(n.input[2]) or [1])[0]
            b = sum(size.get(x, 0) for x in experts)
            total, token = total + b, token + b * min(k, e) / max(e, 1)
    return token / total if total > 0 else 1.0


def worker(model_dir: str, provider: str, plugin: str, threads: int) -> None:
    import onnxruntime_genai as og

    config = og.Config(model_dir)
    if provider == "rcpu":
        og.register_execution_provider_library("rcpu", plugin)
        config.clear_providers()
        config.append_provider(EP_NAME)
        if threads > 0:
            config.set_provider_option(EP_NAME, "threads", str(threads))
    model = og.Model(config)
    # max_length at least the window (`kv_window`); the loop stops after the tokens asked.
    window = kv_window(model_dir)
    print("READY", flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            break
        if cmd["op"] == "stats":
            print("RESULT " + json.dumps(stats(plugin) if provider == "rcpu" else {}), flush=True)
            continue
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=max(len(cmd["prompt"]) + cmd["tokens"], window), do_sample=False)
        gen = og.Generator(model, params)
        t = time.perf_counter()
        gen.append_tokens(cmd["prompt"])
        prefill = time.perf_counter() - t
        first = np.array(gen.get_logits(), dtype=np.float32).reshape(-1) if cmd.get("logits") else None
        steps = []
        while not gen.is_done() and len(steps) < cmd["tokens"]:
            t = time.perf_counter()
            gen.generate_next_token()
            steps.append(time.perf_counter() - t)
        out = {"prefill_ms": prefill * 1e3, "step_ms": [s * 1e3 for s in steps], "tokens": [int(v) for v in gen.get_sequence(0)]}
        if first is not None:
            path = cmd["logits"]
            np.save(path, first)
            out["logits"] = path
        print("RESULT " + json.dumps(out), flush=True)


# ---------------------------------------------------------------- parent


def close_child(proc: subprocess.Popen, quit_line: str) -> None:
    """Asks a child that reads commands on stdin to quit, and kills it if it does not."""
    try:
        proc.stdin.write(quit_line + "\n")
        proc.stdin.flush()
        proc.wait(timeout=30)
    except (BrokenPipeError, subprocess.TimeoutExpired):
        proc.kill()


class Arm:
    def __init__(self, name: str, provider: str, model_dir: str, plugin: str, threads: int, cpus: set[int]):
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", model_dir, provider, plugin, str(threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        os.sched_setaffinity(self.proc.pid, cpus)
        ready = self.proc.stdout.readline().strip()
        if ready != "READY":
            raise SystemExit(f"og_bench: the {name} worker did not start ({ready!r})")

    def run(self, op: str = "gen", **cmd):
        self.proc.stdin.write(json.dumps({"op": op, **cmd}) + "\n")
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise SystemExit(f"og_bench: the {self.name} worker exited")
            if line.startswith("RESULT "):
                return json.loads(line[len("RESULT "):])

    def cpu_ticks(self) -> int:
        # utime + stime of the worker and its threads (fields 14 and 15 of /proc/PID/stat).
        fields = pathlib.Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])

    def settle(self, timeout_s: float = 2.0) -> float:
        """Waits until the worker's CPU time stops moving (rule 3); returns the seconds waited."""
        t0 = time.perf_counter()
        last = self.cpu_ticks()
        while time.perf_counter() - t0 < timeout_s:
            time.sleep(0.03)
            now = self.cpu_ticks()
            if now == last:
                break
            last = now
        return time.perf_counter() - t0

    def close(self) -> None:
        close_child(self.proc, json.dumps({"op": "quit"}))


class LlamaCpp:
    """llama.cpp's `llama-bench` on a GGUF of the same weights: one fresh process a round (it exits, so
    nothing of it runs on while the next arm is timed), pinned to `cpus`."""

    name = "llama.cpp"

    def __init__(self, bench: str, gguf: str, threads: int, cpus: set[int], prompt: int, tokens: int, iters: int):
        self.cmd = [bench, "-m", gguf, "-t", str(threads), "-p", str(prompt), "-n", str(tokens),
                    "-d", f"0,{prompt}", "-r", str(iters), "-o", "json"]
        self.cpus, self.prompt, self.tokens = cpus, prompt, tokens

    def run(self) -> dict:
        """One llama-bench run: per repetition, ms per generated token (the `tg` test at the prompt's
        depth) and the prompt's ms (`pp` at depth 0)."""
        cpus = self.cpus
        out = subprocess.run(self.cmd, capture_output=True, text=True, timeout=3600,
                             preexec_fn=lambda: os.sched_setaffinity(0, cpus))
        if out.returncode != 0:
            raise SystemExit(f"og_bench: llama-bench failed ({out.returncode}): {out.stderr.strip()[-400:]}")
        tests = json.loads(out.stdout)
        tg = [t for t in tests if t["n_gen"] == self.tokens and t["n_prompt"] == 0 and t["n_depth"] == self.prompt]
        pp = [t for t in tests if t["n_prompt"] == self.prompt and t["n_gen"] == 0 and t["n_depth"] == 0]
        if len(tg) != 1 or len(pp) != 1:
            raise SystemExit(f"og_bench: llama-bench reported no tg{self.tokens}@d{self.prompt} / pp{self.prompt} test")
        return {"token_ms": [ns / 1e6 / self.tokens for ns in tg[0]["samples_ns"]],
                "prefill_ms": [ns / 1e6 for ns in pp[0]["samples_ns"]],
                "build": f"{tg[0].get('build_commit', '?')} ({tg[0].get('build_number', '?')}), {tg[0].get('cpu_info', '')}"}


def gguf_weight_bytes(path: str) -> int:
    """The bytes of a GGUF file's tensors (a token reads them all once: the tied lm_head reads the
    embedding's)."""
    import gguf

    return sum(int(t.n_bytes) for t in gguf.GGUFReader(path).tensors)


class Probe:
    """`rcpu-bench probe` (rule 8): the read bandwidth of a buffer of `nbytes` (the weights a token
    reads), the compute probe and the CPUs' round trip, asked for after every round."""

    def __init__(self, bench: pathlib.Path, nbytes: int, threads: int, cpus: set[int]):
        self.proc = subprocess.Popen(
            [str(bench), "probe", "--bytes", str(nbytes), "--threads", str(threads),
             "--cpus", ",".join(str(c) for c in sorted(cpus))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        self.first = json.loads(self.proc.stdout.readline())

    def ask(self, what: str) -> dict:
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def now(self) -> dict:
        """The read, the compute probe and the round trip (a few hundred ms)."""
        return self.ask("round")

    def far(self) -> bool | None:
        """Whether the CPUs sit apart right now (the round trip alone, a few ms); None with one CPU."""
        rt = self.ask("rt")
        return rt["far"] if rt["lane_rt_ns"] is not None else None

    def close(self) -> None:
        close_child(self.proc, "quit")


def cpu_model() -> str:
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def busy_ticks(cpus: set[int]) -> int:
    """Busy jiffies (all but idle and iowait) of `cpus`, from /proc/stat."""
    total = 0
    for line in pathlib.Path("/proc/stat").read_text().splitlines():
        name, *v = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            total += sum(int(x) for x in v[:8]) - int(v[3]) - int(v[4])
    return total


def rel_l2(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def steady_from(per_round: list[float], k: int = 3, tol: float = 0.05, min_len: int = 5) -> int | None:
    """The start of the steady window, as `rcpu-bench` finds it (rule 4, `e2e/src/bench/steady.rs`): the
    longest suffix of at least `min_len`, `k` and half the rounds in which the rolling medians over `k`
    rounds lie within `tol` (relative) of each other; None when there is none."""
    n = len(per_round)
    need = max(min_len, k, math.ceil(n / 2))
    if n == 0 or n < need:
        return None
    for start in range(0, n - need + 1):
        w = per_round[start:]
        meds = [statistics.median(w[i + 1 - k: i + 1]) for i in range(k - 1, len(w))]
        if min(meds) > 0 and max(meds) / min(meds) - 1 < tol:
            return start
    return None


def verdict(ratio: float, band: tuple[float, float]) -> str:
    """"real" when `ratio` lies outside the null band, else "noise"."""
    return "real" if not band[0] <= ratio <= band[1] else "noise"


def null_band(ratios: list[float]) -> tuple[float, float]:
    """Symmetric in log space around 1: the spread of the null ratio (10-90% with ten or more)."""
    if len(ratios) >= 10:
        lo, hi = quantile(ratios, 0.1), quantile(ratios, 0.9)
    else:
        lo, hi = min(ratios), max(ratios)
    w = max(abs(math.log(lo)), abs(math.log(hi)))
    return math.exp(-w), math.exp(w)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("--plugin", default=os.environ.get("RCPU_PLUGIN", str(REPO / "target/release/librcpu_ep.so")))
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--intra", type=int, default=None)
    ap.add_argument("--tol", type=float, default=LOGITS_TOL)
    ap.add_argument("--bench", default=str(REPO / "target/release/rcpu-bench"))
    ap.add_argument("--json", default=None)
    ap.add_argument("--null-plugin", default=None,
                    help="the null arm loads this plugin build instead (old vs new: null/rcpu is old/new)")
    ap.add_argument("--llamacpp", default=None, help="llama-bench binary: adds llama.cpp as an arm")
    ap.add_argument("--gguf", default=None, help="the GGUF of the same weights for --llamacpp")
    a = ap.parse_args()
    if (a.llamacpp is None) != (a.gguf is None):
        print("og_bench: --llamacpp and --gguf go together", file=sys.stderr)
        return 1
    if a.prompt < 1 or a.tokens < 2 or a.rounds < 1 or a.iters < 1:
        print("og_bench: --prompt >= 1, --tokens >= 2, --rounds >= 1, --iters >= 1", file=sys.stderr)
        return 1
    # onnxruntime resolves a relative library path against its own package directory, not the
    # working directory: hand the arms an absolute one.
    plugin = pathlib.Path(a.plugin).resolve()
    if not plugin.is_file():
        print(f"og_bench: plugin {plugin} not found (build it: cargo build --release)", file=sys.stderr)
        return 1
    a.plugin = str(plugin)
    null_plugin = a.plugin
    if a.null_plugin:
        null_plugin = str(pathlib.Path(a.null_plugin).resolve())
        if not pathlib.Path(null_plugin).is_file():
            print(f"og_bench: --null-plugin {null_plugin} not found", file=sys.stderr)
            return 1

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="og_bench-"))
    try:
        # Every arm reads its own copy of the genai config (same model file), the session options set.
        model_dir = tmp / "model"
        model_dir.mkdir()
        src = pathlib.Path(a.model_dir).resolve()
        cfg = json.loads((src / "genai_config.json").read_text())
        dec = cfg["model"]["decoder"]
        (model_dir / dec["filename"]).symlink_to(src / dec["filename"])
        for extra in src.glob(dec["filename"] + ".data"):
            (model_dir / extra.name).symlink_to(extra)
        if a.intra is not None:
            dec.setdefault("session_options", {})["intra_op_num_threads"] = a.intra
        (model_dir / "genai_config.json").write_text(json.dumps(cfg, indent=2))
        vocab = int(cfg["model"]["vocab_size"])
        share = cfg["search"].get("past_present_share_buffer")

        cpus = os.sched_getaffinity(0)
        arms = [
            Arm("ort", "cpu", str(model_dir), a.plugin, a.threads, cpus),
            Arm("rcpu", "rcpu", str(model_dir), a.plugin, a.threads, cpus),
            Arm("null", "rcpu", str(model_dir), null_plugin, a.threads, cpus),
        ]
        probe = None
        llama = None
        if a.llamacpp:
            llama = LlamaCpp(a.llamacpp, a.gguf, a.threads if a.threads > 0 else len(cpus), cpus, a.prompt, a.tokens, a.iters)
        try:
            prompt = prompt_ids(a.prompt, vocab, 1)
            load0 = os.getloadavg()
            print(f"conditions: {cpu_model()}, {os.cpu_count()} CPUs; load average at start {load0[0]:.2f}")
            print(f"og_bench: {src} | genai past_present_share_buffer={share} intra_op_num_threads="
                  f"{'default' if a.intra is None else a.intra} | prompt {a.prompt} tokens {a.tokens} | "
                  f"rounds {a.rounds} x iters {a.iters} | rcpu threads {a.threads} | cpus {sorted(cpus)}")
            # Parity (rule 7): greedy tokens and the prompt's last logits against ORT's.
            ref, parity = None, {}
            for arm in arms:
                out = arm.run(prompt=prompt, tokens=a.tokens, logits=str(tmp / f"{arm.name}.npy"))
                out["first"] = np.load(out["logits"])
                if ref is None:
                    ref = out
                    continue
                err = rel_l2(out["first"], ref["first"])
                same = next((i for i, (x, y) in enumerate(zip(out["tokens"], ref["tokens"])) if x != y), len(ref["tokens"]))
                print(f"parity: {arm.name} vs ort: prompt logits rel L2 {err:.3e} (tol {a.tol:g}), greedy tokens "
                      f"agree for the first {same - a.prompt}/{a.tokens} generated")
                parity[arm.name] = {"rel_l2": err, "tokens_agree": same - a.prompt}
                if not err <= a.tol:
                    print("og_bench: parity mismatch, nothing timed", file=sys.stderr)
                    return 2
            # The bytes a token streams on rcpu (its packed weights; of a mixture of experts' only the
            # k experts a token runs, `token_fraction`), and the host probes (rule 8).
            weight_bytes = int(arms[1].run("stats")["memory"]["weight_cache"]["live_bytes"])
            weight_bytes = int(weight_bytes * token_fraction(src / dec["filename"]))
            if pathlib.Path(a.bench).is_file() and weight_bytes > 0:
                try:
                    probe = Probe(pathlib.Path(a.bench), weight_bytes, a.threads if a.threads > 0 else len(cpus), cpus)
                except json.JSONDecodeError:
                    raise SystemExit(f"og_bench: `{a.bench} probe` did not start (see its message above)")
                print(f"rcpu streams {weight_bytes / 1e6:.1f} MB of packed weights a token; a same-size buffer reads "
                      f"{probe.first['small_pages_gbs']:.1f} GB/s on 4 KiB pages, {probe.first['huge_pages_gbs']:.1f} on "
                      "huge pages (best of 5); after every round the bench reads it again (`rcpu-bench probe`)")
            else:
                print(f"no host probe ({a.bench} missing): no read bandwidth or placement per round")
            llama_bytes = gguf_weight_bytes(a.gguf) if llama else 0
            if llama:
                print(f"llama.cpp: {a.llamacpp} on {a.gguf} ({llama_bytes / 1e6:.1f} MB of tensors a token; the same int4 "
                      "and 8-bit codes, f16 scales); llama-bench gives no logits: that arm's parity is llamacpp_parity.py's")
            # Rounds (rules 1-3).
            per = {arm.name: {"p50": [], "p90": [], "prefill": [], "mean": []} for arm in arms}
            if llama:
                per[llama.name] = {"mean": [], "prefill": []}
            host = []
            waits, foreign = [], []
            print(f"{'round':>5}  {'order':14} {'ort ms/tok':>10} {'rcpu ms/tok':>11} {'null ms/tok':>11} {'ORT/rcpu':>9} "
                  f"{'null/rcpu':>9} {'read GB/s':>9} {'rcpu/read':>9} {'lane rt':>7} {'rcpu ran':>9}"
                  + (f" {'llama.cpp ms/tok':>16} {'llama.cpp/rcpu':>14}" if llama else ""))
            for r in range(a.rounds):
                everyone = arms + ([llama] if llama else [])
                order = everyone if r % 2 == 0 else everyone[::-1]
                placement = None
                for arm in order:
                    if arm is llama:
                        out = llama.run()
                        per[llama.name]["mean"].append(statistics.median(out["token_ms"]))
                        per[llama.name]["prefill"].append(statistics.median(out["prefill_ms"]))
                        llama_build = out["build"]
                        continue
                    steps, pre = [], []
                    # The rcpu arm's window counts as near or far when the CPUs sat so before and
                    # after it (the hypervisor moves them within seconds); else it is mixed.
                    before = probe.far() if probe and arm.name == "rcpu" else None
                    own0, busy0 = arm.cpu_ticks(), busy_ticks(cpus)
                    for _ in range(a.iters):
                        out = arm.run(prompt=prompt, tokens=a.tokens)
                        # Every generate_next_token counts: one token as an app sees it (genai's search,
                        # its KV cache handling and the model's run).
                        steps += out["step_ms"]
                        pre.append(out["prefill_ms"])
                    # Other processes' share of the CPUs while this arm was timed (rule 5).
                    own, busy = arm.cpu_ticks() - own0, busy_ticks(cpus) - busy0
                    timed = max(1, sum(steps) + sum(pre)) / 1e3 * os.sysconf("SC_CLK_TCK") * len(cpus)
                    foreign.append(max(0, busy - own) / timed)
                    if before is not None:
                        after = probe.far()
                        placement = ("far" if before else "near") if after == before else "mixed"
                    waits.append(arm.settle())
                    per[arm.name]["p50"].append(statistics.median(steps))
                    per[arm.name]["p90"].append(quantile(steps, 0.9))
                    per[arm.name]["prefill"].append(statistics.median(pre))
                    per[arm.name]["mean"].append(statistics.mean(steps))
                o, rc, nu = (per[n]["p50"][-1] for n in ("ort", "rcpu", "null"))
                h = probe.now() if probe else {}
                h["placement"] = placement
                h["rcpu_of_read"] = weight_bytes / rc / 1e6 / h["read_gbs"] if h.get("read_gbs") else None
                host.append(h)
                cols = (f" {h['read_gbs']:>9.1f} {h['rcpu_of_read']:>9.1%} {h['lane_rt_ns'] or float('nan'):>7.0f} "
                        f"{placement or '-':>9}" if probe else "")
                if llama:
                    lm = per[llama.name]["mean"][-1]
                    cols += f" {lm:>16.3f} {lm / per['rcpu']['mean'][-1]:>14.3f}"
                print(f"{r + 1:>5}  {','.join(x.name for x in order):14} {o:>10.3f} {rc:>11.3f} {nu:>11.3f} {o / rc:>9.3f} "
                      f"{nu / rc:>9.3f}{cols}")
            routes = arms[1].run("stats")["ledger"]
        finally:
            for arm in arms:
                arm.close()
            if probe:
                probe.close()

        ratio = [o / r for o, r in zip(per["ort"]["p50"], per["rcpu"]["p50"])]
        null = [n / r for n, r in zip(per["null"]["p50"], per["rcpu"]["p50"])]
        genai_arms = [arm.name for arm in arms]
        starts = [steady_from(per[n]["p50"]) for n in genai_arms]
        if llama:
            starts.append(steady_from(per[llama.name]["mean"]))
        steady = None if any(s is None for s in starts) else max(starts)
        window = slice(steady or 0, None)
        band = null_band(null[window])
        med = {n: statistics.median(per[n]["p50"][window]) for n in genai_arms}
        print(f"load average at end {os.getloadavg()[0]:.2f}; other processes' share of cpus {sorted(cpus)} while "
              f"arms were timed: median {statistics.median(foreign):.0%}, max {max(foreign):.0%}")
        ran = {}
        for row in routes:
            if row["calls"] > 0:
                ran.setdefault(row["op"], set()).add(f"{row['variant']} lanes={row['lanes']}")
        print("rcpu ran (route ledger of the rcpu arm): " + "; ".join(f"{op}: {', '.join(sorted(v))}" for op, v in sorted(ran.items())))
        print(f"settling after each arm's batch (rule 3): median {statistics.median(waits) * 1e3:.0f} ms, max {max(waits) * 1e3:.0f} ms")
        print(f"{'arm':6} {'p50 ms/tok':>10} {'p90 ms/tok':>10} {'tok/s':>7} {'prefill ms':>10}")
        for n in genai_arms:
            print(f"{n:6} {med[n]:>10.3f} {statistics.median(per[n]['p90'][window]):>10.3f} {1e3 / med[n]:>7.1f} "
                  f"{statistics.median(per[n]['prefill'][window]):>10.1f}")
        lr = [lm / rm for lm, rm in zip(per[llama.name]["mean"], per["rcpu"]["mean"])] if llama else []
        if probe:
            for place in ("near", "far"):
                rows = [i for i, h in enumerate(host) if h["placement"] == place and h["far"] == (place == "far")]
                if rows:
                    print(f"{place} rounds ({len(rows)} of {len(host)}: the CPUs' round trip {'over' if place == 'far' else 'under'} "
                          f"250 ns before and after the rcpu arm and at the round's read): ORT/rcpu "
                          f"{statistics.median(ratio[i] for i in rows):.3f}, rcpu at "
                          f"{statistics.median(host[i]['rcpu_of_read'] for i in rows):.1%} of the round's read"
                          + (f"; llama.cpp/rcpu {statistics.median(lr[i] for i in rows):.3f} (means), llama.cpp at "
                             f"{statistics.median(llama_bytes / per[llama.name]['mean'][i] / 1e6 / host[i]['read_gbs'] for i in rows):.1%}"
                             if llama else ""))
        if llama:
            nr = [nm / rm for nm, rm in zip(per["null"]["mean"], per["rcpu"]["mean"])]
            lband = null_band(nr[window])
            lmed = statistics.median(lr[window])
            lt = statistics.median(per[llama.name]["mean"][window])
            rt = statistics.median(per["rcpu"]["mean"][window])
            print(f"llama.cpp ({llama_build}): mean {lt:.3f} ms a generated token ({1e3 / lt:.1f} tok/s, "
                  f"{llama_bytes / lt / 1e6:.1f} GB/s), prompt {statistics.median(per[llama.name]['prefill'][window]):.1f} ms; "
                  f"rcpu mean {rt:.3f} ms ({weight_bytes / rt / 1e6:.1f} GB/s)")
            if probe:
                reads = [h["read_gbs"] for h in host[window] if h.get("read_gbs")]
                if reads:
                    rd = statistics.median(reads)
                    print(f"of the rounds' median read ({rd:.1f} GB/s): llama.cpp {llama_bytes / lt / 1e6 / rd:.1%}, "
                          f"rcpu {weight_bytes / rt / 1e6 / rd:.1%} (means per token)")
            print(f"llama.cpp/rcpu = {lmed:.3f} per generated token (means; per round {min(lr):.3f}-{max(lr):.3f}), "
                  f"null band of the means [{lband[0]:.3f}, {lband[1]:.3f}] -> {verdict(lmed, lband)}")
            pr = [lp / rp for lp, rp in zip(per[llama.name]["prefill"], per["rcpu"]["prefill"])]
            pband = null_band([np_ / rp for np_, rp in zip(per["null"]["prefill"], per["rcpu"]["prefill"])][window])
            pmed = statistics.median(pr[window])
            print(f"llama.cpp/rcpu = {pmed:.3f} for the {a.prompt}-token prompt (per round {min(pr):.3f}-{max(pr):.3f}), "
                  f"null band [{pband[0]:.3f}, {pband[1]:.3f}] -> {verdict(pmed, pband)}")
        if a.null_plugin:
            # The null arm ran another build: its ratio to rcpu is old / new, not the A/A band.
            old_new = statistics.median(null[window])
            faster = sum(r > 1 for r in null[window])
            pre = [n / r for n, r in zip(per["null"]["prefill"], per["rcpu"]["prefill"])][window]
            print(f"null arm = {null_plugin}: old/new = {old_new:.3f} per generated token (per round "
                  f"{min(null[window]):.3f}-{max(null[window]):.3f}, new faster in {faster} of {len(null[window])}), "
                  f"prompt {statistics.median(pre):.3f}; the A/A band needs a run without --null-plugin")
        head = statistics.median(ratio[window])
        report = {"model": str(src), "prompt": a.prompt, "tokens": a.tokens, "rounds": a.rounds, "iters": a.iters,
                  "threads": a.threads, "intra": a.intra, "share": share, "per_round": per,
                  "steady_from": steady, "null_band": band, "null_plugin": a.null_plugin, "ort_over_rcpu": head, "cpu": cpu_model(),
                  "foreign_share": foreign, "host": host, "weight_bytes": weight_bytes, "routes": {op: sorted(v) for op, v in ran.items()}, "parity": parity,
                  "llamacpp": {"gguf": a.gguf, "bytes": llama_bytes, "over_rcpu": lmed, "null_band_means": lband,
                               "prompt_over_rcpu": pmed, "prompt_null_band": pband} if llama else None}
        if a.json:
            pathlib.Path(a.json).write_text(json.dumps(report, indent=2))
        if steady is None:
            print(f"ORT/rcpu = {head:.3f} per generated token over all rounds, null band [{band[0]:.3f}, {band[1]:.3f}]; "
                  "steady state NOT REACHED (no headline)")
            return 3
        print(f"HEADLINE onnxruntime-genai generation (prompt {a.prompt}, {a.tokens} tokens): ORT/rcpu = {head:.3f} per "
              f"token (rcpu {med['rcpu']:.3f} ms vs ORT {med['ort']:.3f} ms), null band [{band[0]:.3f}, {band[1]:.3f}] "
              f"-> {verdict(head, band)}; steady from round {steady + 1}")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        sys.exit(main())
