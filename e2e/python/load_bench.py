"""What loading a model costs: ORT's CPU EP, rcpu, and rcpu from an EPContext model (issue 55).

usage: python load_bench.py MODEL [--samples 5] [--threads 2] [--ctx-dir DIR] [--json OUT] [--plugin SO]
       [--warm 5] [--past 64] [--no-uss] [--arms ort,rcpu,rcpu-ctx,rcpu-ctx-null] [--budget-mb 64]
       [--old-plugin SO] [--ctx-compile]

MODEL is an .onnx file or a folder holding model.onnx (an onnxruntime-genai builder folder such as
target/builder-models/qwen2-0.5b). Cold start is measured as docs/benchmarking.md rule 4 asks: a fresh
process per sample, every arm in its own process, run one after another.

Arms (`--arms`, a comma list; default `ort,rcpu,rcpu-ctx,rcpu-ctx-null`; `ort` is always needed: parity's
reference):
  ort            ORT's CPU EP, `intra_op_num_threads=T`
  rcpu           rcpu on the original model (provider option `threads=T`, ORT intra-op 1 for fallback
                 nodes, as `rcpu-bench` runs it)
  rcpu-ctx       rcpu on the context model (step 1)
  rcpu-ctx-null  rcpu-ctx again: its per-sample ratio to rcpu-ctx is the null band
  rcpu-null      rcpu again: the null band when rcpu-ctx is not measured
  rcpu-nocache   rcpu with provider option `weight_cache_mb=0` (the weight cache declines everything)
  rcpu-budget    rcpu with `weight_cache_mb=N` (`--budget-mb N`, default 64)
  rcpu-old       rcpu from another build (`--old-plugin SO`, which adds this arm when --arms omits it) on
                 the original model: a change's effect on loading against the build before it
The null band comes from rcpu-ctx-null / rcpu-ctx, else rcpu-null / rcpu; with neither there are no verdicts.

1. Context model (once, in a child; only when an rcpu-ctx arm is measured): an rcpu session created with
   `ep.context_enable=1` and `ep.context_file_path=<ctx-dir>/model_ctx.onnx` writes the context model
   (and rcpu's packed-weight file beside it, model_ctx.rcpu); its creation time and the files it wrote
   are reported. ORT writes the initializers of the nodes rcpu leaves to it into the context model itself,
   which a protobuf cannot hold past 2 GB (gpt-oss-20b's f32 embedding table, 2.2 GB, stays on ORT): with
   `--ctx-compile` the context model is written through ORT's compile API instead (`ort.ModelCompiler`, the
   same EPContext nodes; initializers of 1 KiB or more go to model_ctx.onnx.data beside it: the session
   config key ep.context_model_external_initializers_file_name would move every one, and ORT then cannot
   infer the shapes of the leftover nodes that read small constants); the compile time is reported. When
   the creation fails (it fails or crashes, or no context model or no EPContext node comes out) the script
   reports the error and exits 1 without measuring anything.
2. Samples: per sample one child per arm, the order reversed every other sample. A child imports
   onnxruntime (and registers the plugin) before the clock starts, resets its peak RSS
   (`/proc/self/clear_refs` 5, where the kernel allows it) and reads VmHWM/VmRSS (baseline), times the
   session's creation, reads VmHWM (peak during creation) and VmRSS (RssAnon / RssFile), and, untimed, the
   parts of the memory: an rcpu child reads rcpu's own figures, the "memory" object of `RcpuEp_StatsJson`
   through the plugin ORT loaded (ctypes on the same path: the same instance), as the plugin writes it (no
   key is required), and every child the resident pages of the mappings of its model's folder
   (/proc/self/smaps: the external data ORT maps, rcpu's model_ctx.rcpu). It then runs a 16-token prompt
   with an empty past once (first run) and `--warm` times more (their median: warm), then the decode step:
   one token over a past of `--past P` rows (default 64; zeros, position P, attention mask P + 1; a windowed
   cache's buffers the window's rows as for the prompt) once and `--warm` times more (their median: decode
   ms), reads VmHWM and VmRSS again (end: the peak over creation and runs, what is resident after them;
   weights a declining cache packs per run show here) and rcpu's figures and the mappings again, and prints
   one JSON line. The first sample's children save their first output; parity is
   judged as builder_check.py does (level 0: rel L2 1e-4 from ORT; level 4: distance from ORT's answer on
   a level-0 copy at most twice ORT's own, plus 1e-4) before the other samples run (exit 2 on a mismatch,
   no report).
3. Second-process USS (`--no-uss` skips it), per measured arm but the null arms (rcpu-ctx, rcpu, then the
   other rcpu arms, ort): a holder child creates its session, runs once, says it is ready and waits; a
   second child then does the same and reads its own /proc/self/smaps_rollup after importing onnxruntime
   and again after the run: USS (Private_Clean + Private_Dirty), Rss and Pss, the USS minus its baseline
   being what the model costs a second process. The holder's own USS over its baseline is printed beside it.

Feeds come from the session's input metadata (`make_feeds`): decoder inputs (input_ids, attention_mask,
position_ids, past_key_values.* zeros) for a 16-token prompt with past length 0, symbolic dims resolved as
batch 1, sequence 16, past 0, total 16, the past's head and KV-head dims from genai_config.json (the builder
names the head dim `kv_cache_dim`; with a windowed KV cache, genai_config's sliding_window, every past
buffer holds the window's rows, the attention mask still 16, as genai's shared buffers do); other symbolic
dims 1; float inputs uniform [-1, 1) (a plain model whose input is float, e.g. [N, K] with N symbolic, gets a
[1, K] tensor), other integer inputs zeros.

The report: per arm median [min, max] of create s, baseline / peak (VmHWM) / after-creation RSS MB,
first-run ms, warm ms and first/warm, the medians of the end peak and end RSS, and decode ms; ratios of create
time, of the peak over the baseline and of decode ms (ORT/arm for every arm, rcpu/arm for rcpu-ctx,
rcpu-nocache and rcpu-budget, rcpu-old/rcpu: rcpu/rcpu-ctx says whether packed weights mapped from the
context file decode as fast as those packed into anonymous huge pages), with the null band (at least +-1%)
and a verdict; the parts of the memory per arm after creation and at the end (MB, medians; PARTS): RSS minus
the baseline, RssAnon / RssFile, the model files' resident pages, model_ctx.rcpu's resident pages, rcpu's
packed weights in its arena, the arena's slack, the packed weights mapped from the context file, rcpu's
constant copies, its scratch and value pools, and the rest (ORT's initializers and allocations, libraries:
"ORT+other"; ORT's arm has the anon / file split and the model files), then every number in rcpu's memory
object per rcpu arm (keys zero everywhere on one line); the weight bytes (external data) and the
context files; the USS table; CPU model, clock, load average at start and end, the share of the CPUs that
other processes took while the children ran, the plugins' mtimes (a note when one changed during the run).
`--json OUT` writes every raw sample. Page cache: with rcpu-ctx the weight file is read by the context step
first; without it, by sample 0's first arm (every later child loads from a warm page cache).

Exit codes: 0 ok, 1 error (a bad argument, a child that failed, creating the context model failed: the
error is reported, and the JSON holds what was measured before it), 2 parity mismatch (no samples after the
first).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from og_bench import busy_ticks, cpu_model, kv_window, null_band, prompt_ids, verdict

EP_NAME = "RcpuExecutionProvider"
REPO = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_PLUGIN = REPO / "target" / "release" / "librcpu_ep.so"
CTX_NAME = "model_ctx.onnx"
CTX_DATA = "model_ctx.onnx.data"  # --ctx-compile: the leftover initializers (relative to the context model)
PROMPT = 16
ARMS_DEFAULT = ["ort", "rcpu", "rcpu-ctx", "rcpu-ctx-null"]
ARMS_ALL = ARMS_DEFAULT + ["rcpu-null", "rcpu-nocache", "rcpu-budget", "rcpu-old"]
NULL_PAIRS = [("rcpu-ctx", "rcpu-ctx-null"), ("rcpu", "rcpu-null")]
USS_ORDER = ["rcpu-ctx", "rcpu", "rcpu-old", "rcpu-nocache", "rcpu-budget", "ort"]
EXIT_OK, EXIT_ERROR, EXIT_PARITY = 0, 1, 2
MB = 1 << 20


# ---------------------------------------------------------------- /proc readers (KiB -> bytes)


def proc_status() -> dict[str, int]:
    """VmHWM, VmRSS, RssAnon, RssFile of this process in bytes."""
    out = {}
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        k, _, v = line.partition(":")
        if k in ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem"):
            out[k] = int(v.split()[0]) * 1024
    return out


def smaps_rollup() -> dict[str, int]:
    """Rss, Pss, Private_Clean, Private_Dirty, Shared_* and USS (Private_Clean + Private_Dirty) in bytes."""
    out = {}
    for line in pathlib.Path("/proc/self/smaps_rollup").read_text().splitlines()[1:]:
        k, _, v = line.partition(":")
        parts = v.split()
        if len(parts) == 2 and parts[1] == "kB":
            out[k.strip()] = int(parts[0]) * 1024
    out["USS"] = out.get("Private_Clean", 0) + out.get("Private_Dirty", 0)
    return out


def mapped_files(folder: str | pathlib.Path) -> dict[str, int]:
    """Resident bytes (Rss, /proc/self/smaps) of the file mappings of files in `folder` (the model's own:
    the model file, its external data, a context model's model_ctx.rcpu), by file name; {} where smaps
    cannot be read."""
    root = str(pathlib.Path(folder).resolve()).rstrip("/") + "/"
    out: dict[str, int] = {}
    cur = None
    try:
        text = pathlib.Path("/proc/self/smaps").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if not parts[0].endswith(":"):  # a mapping's header: range perms offset dev inode [path]
            path = " ".join(parts[5:]) if len(parts) > 5 else ""
            cur = path[len(root):] if path.startswith(root) else None
        elif cur is not None and parts[0] == "Rss:" and len(parts) >= 2:
            out[cur] = out.get(cur, 0) + int(parts[1]) * 1024
    return out


def rcpu_memory(plugin: str) -> dict | None:
    """rcpu's own memory figures: the "memory" object of `RcpuEp_StatsJson` from `plugin` (dlopen of the
    path ORT loaded: the same instance, the same counters), as the plugin writes it; None where the
    plugin has no such export or its answer is not JSON with a "memory" object (an older build)."""
    import ctypes

    try:
        fn = ctypes.CDLL(plugin).RcpuEp_StatsJson
        fn.restype = ctypes.c_size_t
        fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        n = fn(None, 0) + 4096
        buf = ctypes.create_string_buffer(n)
        m = fn(buf, n)
        mem = json.loads(buf.raw[:min(m, n - 1)]).get("memory")
    except (OSError, AttributeError, ValueError):
        return None
    return mem if isinstance(mem, dict) else None


def reset_hwm() -> bool:
    """Resets VmHWM to the current RSS (clear_refs 5, Linux 4.0+); False where that is refused."""
    try:
        pathlib.Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


# ---------------------------------------------------------------- feeds


def model_file(model: str | pathlib.Path) -> pathlib.Path:
    p = pathlib.Path(model)
    return p / "model.onnx" if p.is_dir() else p


def model_hints(model: pathlib.Path) -> dict:
    """What the metadata may leave symbolic, read once by the parent so every arm gets the same feeds:
    `vocab` (input ids are drawn below it: genai_config.json's vocab_size beside the model, else the
    static last dim of a `logits` output, else 1000), `head` and `kv_heads` (the past KV's dims 3 and 1,
    which the builder may name `kv_cache_dim`: genai_config's head_size / num_key_value_heads, else
    None), `window` (the rows a windowed KV cache must hold: og_bench.kv_window, genai_config's
    sliding_window size; 0 without one)."""
    hints = {"vocab": None, "head": None, "kv_heads": None, "window": 0}
    cfg = model.parent / "genai_config.json"
    if cfg.is_file():
        try:
            hints["window"] = kv_window(model.parent)
        except (KeyError, ValueError, TypeError, AttributeError):
            pass
        try:
            m = json.loads(cfg.read_text())["model"]
            dec = m.get("decoder", {})
            hints["vocab"] = int(m["vocab_size"]) if "vocab_size" in m else None
            if "head_size" in dec:
                hints["head"] = int(dec["head_size"])
            elif "hidden_size" in dec and "num_attention_heads" in dec:
                hints["head"] = int(dec["hidden_size"]) // int(dec["num_attention_heads"])
            if "num_key_value_heads" in dec:
                hints["kv_heads"] = int(dec["num_key_value_heads"])
        except (KeyError, ValueError, TypeError, AttributeError):
            pass
    if hints["vocab"] is None:
        import onnx

        hints["vocab"] = 1000
        for o in onnx.load(str(model), load_external_data=False).graph.output:
            dims = o.type.tensor_type.shape.dim
            if o.name == "logits" and dims and dims[-1].HasField("dim_value") and dims[-1].dim_value > 0:
                hints["vocab"] = dims[-1].dim_value
    return hints


_DTYPES = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int8)": "int8", "tensor(uint8)": "uint8",
    "tensor(bool)": "bool",
}


def make_feeds(inputs, vocab: int, batch: int = 1, seq: int = PROMPT, past: int = 0, seed: int = 7,
               head: int | None = None, kv_heads: int | None = None, window: int = 0) -> dict:
    """Feeds from input metadata (`sess.get_inputs()`): a `seq`-token prompt with `past` cached positions.

    The decoder inputs of onnxruntime-genai's builder models by name (input_ids [batch, seq] from
    og_bench.prompt_ids, attention_mask [batch, past+seq] ones, position_ids past..past+seq-1,
    past_key_values.* zeros with the past dim = `past`, a symbolic dim 1 = `kv_heads` and dim 3 = `head`
    where given). With a windowed KV cache (`window` > 0: the builder's sliding_window_cache layers, which
    ORT's CPU EP and rcpu refuse below the window) every past buffer holds max(past, window) rows, as
    genai's shared buffers do (sized by max_length, at least the window: og_bench), the attention mask
    still saying past+seq. Other inputs by shape, symbolic dims resolved by
    name (batch -> batch, past -> past, total -> past+seq, sequence -> seq, anything else 1); float inputs
    uniform [-1, 1), integer inputs zeros."""
    import numpy as np

    rng = np.random.default_rng(seed)

    def dim(d, i: int, name: str):
        if isinstance(d, int) and d >= 0:
            return d
        s = str(d or "").lower()
        if "batch" in s:
            return batch
        if "past" in s:
            return max(past, window) if name.startswith("past") else past
        if "total" in s:
            return past + seq
        if "seq" in s or "len" in s:
            return seq
        if name.startswith("past"):
            if i == 2:
                return max(past, window)
            if i == 1 and kv_heads:
                return kv_heads
            if i == 3 and head:
                return head
        return 1

    feeds = {}
    for inp in inputs:
        n = inp.name
        dt = np.dtype(_DTYPES.get(inp.type, "float32"))
        if n == "input_ids":
            feeds[n] = np.array([prompt_ids(seq, vocab, seed)] * batch, dt)
        elif n == "attention_mask":
            feeds[n] = np.ones((batch, past + seq), dt)
        elif n == "position_ids":
            feeds[n] = np.tile(np.arange(past, past + seq, dtype=dt), (batch, 1))
        else:
            shape = tuple(dim(d, i, n) for i, d in enumerate(inp.shape or []))
            if dt.kind == "f" and not n.startswith("past_key_values"):
                feeds[n] = rng.uniform(-1, 1, shape).astype(dt)
            else:
                feeds[n] = np.zeros(shape, dt)
    return feeds


# ---------------------------------------------------------------- child (one arm, one process)


def provider_options(a) -> dict[str, str]:
    """rcpu's provider options in a child: threads=T and the arm's own (`--provider-option K=V`)."""
    opts = {"threads": str(a.threads)}
    for kv in a.provider_option or []:
        k, _, v = kv.partition("=")
        opts[k] = v
    return opts


def child(a) -> int:
    """One arm in this fresh process; prints `@@ {json}` lines (see the module doc)."""
    import numpy as np
    import onnxruntime as ort

    ort.set_default_logger_severity(3)
    devices = None
    if a.arm != "ort":
        ort.register_execution_provider_library("rcpu", a.plugin)
        devices = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
        if not devices:
            raise RuntimeError(f"no OrtEpDevice {EP_NAME} after registering {a.plugin}")
    uss_base = smaps_rollup() if a.mode in ("uss", "hold") else None
    hwm_reset = reset_hwm()
    base = proc_status()

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if a.mode == "compile":  # make_ctx with --ctx-compile: the context model through ORT's compile API
        so.intra_op_num_threads = 1
        so.add_provider_for_devices(devices, provider_options(a))
        cpu0, t0 = time.process_time(), time.perf_counter()
        ort.ModelCompiler(so, a.model, external_initializers_file_path=CTX_DATA).compile_to_file(a.compile_to)
        create_s, create_cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
        after = proc_status()
        print("@@ " + json.dumps({
            "arm": a.arm, "mode": "compile", "model": a.model, "pid": os.getpid(), "hwm_reset": hwm_reset,
            "create_s": create_s, "create_cpu_s": create_cpu_s, "base_rss": base["VmRSS"],
            "peak_hwm": after["VmHWM"], "rss_after": after["VmRSS"]}), flush=True)
        return 0
    for kv in a.config or []:
        k, _, v = kv.partition("=")
        so.add_session_config_entry(k, v)
    src = a.model
    if a.data_dir:  # (parity's level-0 reference only: untimed)
        so.add_session_config_entry("session.model_external_initializers_file_folder_path", a.data_dir)
        src = pathlib.Path(a.model).read_bytes()
    cpu0, t0 = time.process_time(), time.perf_counter()
    if a.arm == "ort":
        so.intra_op_num_threads = a.threads
        sess = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    else:
        so.intra_op_num_threads = 1
        so.add_provider_for_devices(devices, provider_options(a))
        sess = ort.InferenceSession(src, so, enable_fallback=0)
    create_s, create_cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
    after = proc_status()
    # the parts (untimed): rcpu's own figures and the model files' resident pages
    model_dir = pathlib.Path(a.data_dir or pathlib.Path(a.model).parent)
    mem_created = None if a.arm == "ort" else rcpu_memory(a.plugin)
    mapped_created = mapped_files(model_dir)

    hints = json.loads(a.hints)
    kv = {"head": hints["head"], "kv_heads": hints["kv_heads"], "window": hints.get("window", 0)}
    feeds = make_feeds(sess.get_inputs(), hints["vocab"], **kv)
    t = time.perf_counter()
    out = sess.run(None, feeds)
    first_ms = (time.perf_counter() - t) * 1e3
    warm = []
    for _ in range(a.warm):
        t = time.perf_counter()
        sess.run(None, feeds)
        warm.append((time.perf_counter() - t) * 1e3)
    # decode: one token over a past of `a.past` rows (zeros), once, then --warm times (sample mode only: the
    # USS children run the prompt once, as before)
    decode_first_ms, decode, decode_shapes = None, [], None
    if a.mode == "sample" and a.past >= 0:
        dfeeds = make_feeds(sess.get_inputs(), hints["vocab"], seq=1, past=a.past, **kv)
        decode_shapes = {n: list(v.shape) for n, v in dfeeds.items()}
        t = time.perf_counter()
        sess.run(None, dfeeds)
        decode_first_ms = (time.perf_counter() - t) * 1e3
        for _ in range(a.warm):
            t = time.perf_counter()
            sess.run(None, dfeeds)
            decode.append((time.perf_counter() - t) * 1e3)
    end = proc_status()
    rec = {
        "arm": a.arm, "model": a.model, "pid": os.getpid(), "threads": a.threads, "hwm_reset": hwm_reset,
        "create_s": create_s, "create_cpu_s": create_cpu_s,
        "base_hwm": base["VmHWM"], "base_rss": base["VmRSS"], "base_anon": base.get("RssAnon"),
        "base_file": base.get("RssFile"), "peak_hwm": after["VmHWM"],
        "rss_after": after["VmRSS"], "anon_after": after.get("RssAnon"), "file_after": after.get("RssFile"),
        "peak_end": end["VmHWM"], "rss_end": end["VmRSS"], "anon_end": end.get("RssAnon"),
        "file_end": end.get("RssFile"),
        "plugin": None if a.arm == "ort" else a.plugin,
        "provider_options": None if a.arm == "ort" else provider_options(a),
        "first_ms": first_ms, "warm_ms": warm, "warm_med_ms": statistics.median(warm) if warm else None,
        "past": a.past, "decode_first_ms": decode_first_ms, "decode_ms": decode,
        "decode_med_ms": statistics.median(decode) if decode else None, "decode_shapes": decode_shapes,
        "rcpu_memory": None if a.arm == "ort" else {"created": mem_created, "end": rcpu_memory(a.plugin)},
        "mapped": {"created": mapped_created, "end": mapped_files(model_dir)},
        "providers": sess.get_providers(),
    }
    if a.save_out:
        np.save(a.save_out, np.asarray(out[0], np.float32))
    if a.mode == "sample":
        print("@@ " + json.dumps(rec), flush=True)
    elif a.mode == "hold":
        rec["uss_base"], rec["uss_after"] = uss_base, smaps_rollup()
        print("@@ " + json.dumps(rec), flush=True)
        sys.stdin.read()  # hold the session until the parent closes stdin
    else:  # uss
        rec["uss_base"], rec["uss_after"] = uss_base, smaps_rollup()
        print("@@ " + json.dumps(rec), flush=True)
    return 0


# ---------------------------------------------------------------- parent


class ChildError(RuntimeError):
    pass


def arm_spec(a, arm: str, model: pathlib.Path, ctx_path: pathlib.Path) -> dict:
    """How a child runs `arm`: the child's kind (ort / rcpu / rcpu-ctx), the model it loads, the plugin it
    registers and its extra provider options (see the module doc's arm list)."""
    base = {"rcpu-ctx-null": "rcpu-ctx", "rcpu-null": "rcpu"}.get(arm, arm)
    spec = {"kind": "ort" if base == "ort" else "rcpu-ctx" if base == "rcpu-ctx" else "rcpu",
            "model": str(ctx_path if base == "rcpu-ctx" else model),
            "plugin": a.old_plugin if base == "rcpu-old" else a.plugin, "options": {}}
    if base == "rcpu-nocache":
        spec["options"] = {"weight_cache_mb": "0"}
    elif base == "rcpu-budget":
        spec["options"] = {"weight_cache_mb": str(a.budget_mb)}
    return spec


def child_cmd(a, arm: str, model: str, mode: str = "sample", config=(), save_out: str | None = None,
              warm: int | None = None, data_dir: str | None = None, plugin: str | None = None,
              options: dict | None = None, compile_to: str | None = None) -> list[str]:
    cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "__child", "--arm", arm, "--model", model,
           "--mode", mode, "--threads", str(a.threads), "--plugin", plugin or a.plugin,
           "--warm", str(a.warm if warm is None else warm), "--past", str(a.past), "--hints", json.dumps(a.hints)]
    for kv in config:
        cmd += ["--config", kv]
    for k, v in (options or {}).items():
        cmd += ["--provider-option", f"{k}={v}"]
    if save_out:
        cmd += ["--save-out", save_out]
    if data_dir:
        cmd += ["--data-dir", data_dir]
    if compile_to:
        cmd += ["--compile-to", compile_to]
    return cmd


def parse_child(stdout: str, stderr: str, rc: int, what: str) -> dict:
    for line in stdout.splitlines():
        if line.startswith("@@ "):
            return json.loads(line[3:])
    tail = (stderr.strip().splitlines() or ["(no output)"])[-8:]
    raise ChildError(f"{what} failed (exit {rc}): " + "\n".join(tail))


def run_child(a, arm: str, model: str, label: str | None = None, **kw) -> dict:
    """Runs one child (kind `arm`) to the end; adds its wall time and the CPU share other processes took
    meanwhile. `label` names it in errors (default: `arm`)."""
    label = label or arm
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy0, t0 = busy_ticks(ALL_CPUS), time.perf_counter()
    p = subprocess.run(child_cmd(a, arm, model, **kw), capture_output=True, text=True, timeout=a.child_timeout)
    wall = time.perf_counter() - t0
    busy = (busy_ticks(ALL_CPUS) - busy0) / HZ
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    rec = parse_child(p.stdout, p.stderr, p.returncode, f"{label} child")
    if p.returncode != 0:
        raise ChildError(f"{label} child exited {p.returncode}: {p.stderr.strip()[-2000:]}")
    rec["wall_s"] = wall
    rec["child_cpu_s"] = own
    rec["foreign_share"] = max(0.0, busy - own) / max(wall * len(ALL_CPUS), 1e-9)
    return rec


def run_arm(a, arm: str, spec: dict, **kw) -> dict:
    """One sample child of `arm` (spec: arm_spec's)."""
    rec = run_child(a, spec["kind"], spec["model"], label=arm, plugin=spec["plugin"], options=spec["options"], **kw)
    rec["arm"] = arm
    return rec


def uss_pair(a, arm: str, spec: dict) -> dict:
    """A holder child with the session loaded, then a second child measuring its own smaps_rollup."""
    kw = {"plugin": spec["plugin"], "options": spec["options"], "warm": 0}
    holder = subprocess.Popen(child_cmd(a, spec["kind"], spec["model"], mode="hold", **kw), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = holder.stdout.readline()
        if not line.startswith("@@ "):
            holder.stdin.close()
            err = holder.stderr.read()
            holder.wait(timeout=60)
            raise ChildError(f"{arm} holder failed: {err.strip()[-2000:]}")
        first = json.loads(line[3:])
        p = subprocess.run(child_cmd(a, spec["kind"], spec["model"], mode="uss", **kw), capture_output=True,
                           text=True, timeout=a.child_timeout)
        second = parse_child(p.stdout, p.stderr, p.returncode, f"{arm} second process")
    finally:
        if holder.poll() is None:
            holder.stdin.close()
            try:
                holder.wait(timeout=60)
            except subprocess.TimeoutExpired:
                holder.kill()
                holder.wait()
    return {"arm": arm, "first": first, "second": second}


def external_bytes(model: pathlib.Path) -> tuple[int, list[str]]:
    """The bytes of the model's external data files (their sizes on disk), and their names; the model
    file's own size when every initializer is embedded."""
    import onnx

    m = onnx.load(str(model), load_external_data=False)
    locs = sorted({e.value for t in m.graph.initializer for e in t.external_data if e.key == "location"})
    if not locs:
        return model.stat().st_size, []
    return sum((model.parent / l).stat().st_size for l in locs if (model.parent / l).is_file()), locs


def ctx_nodes(path: pathlib.Path) -> int:
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    return sum(1 for n in m.graph.node if n.op_type == "EPContext")


def make_ctx(a, model: pathlib.Path, ctx_dir: pathlib.Path) -> dict:
    """Step 1: creates the context model (an rcpu session with ep.context_enable=1, or with --ctx-compile
    ORT's compile API). Returns {"ok", "reason", "files", ...}: ok False (with the reason, and the child's
    output in "detail") when that failed or crashed, or wrote no context model, or one without an
    EPContext node."""
    ctx = ctx_dir / CTX_NAME
    if ctx.exists():
        ctx.unlink()  # ORT refuses to overwrite an existing context model
    before = {p.name: p.stat().st_mtime_ns for p in ctx_dir.iterdir()}

    def written() -> dict:
        return {p.name: p.stat().st_size for p in ctx_dir.iterdir()
                if p.is_file() and before.get(p.name) != p.stat().st_mtime_ns}

    if a.ctx_compile:
        kw = {"mode": "compile", "compile_to": str(ctx)}
    else:
        kw = {"config": ["ep.context_enable=1", f"ep.context_file_path={ctx}"], "warm": 0}
    t0 = time.perf_counter()
    try:
        rec = run_child(a, "rcpu", str(model), label="context-model", **kw)
    except (ChildError, subprocess.TimeoutExpired) as e:
        msg = str(e)
        last = ([line for line in msg.strip().splitlines() if line.strip()] or [msg])[-1].strip()
        return {"ok": False, "reason": last, "detail": msg, "files": written(), "wall_s": time.perf_counter() - t0}
    out = {"ok": True, "path": str(ctx), "create": rec, "files": written()}
    if not ctx.is_file():
        out.update(ok=False, reason=f"the session was created but {ctx} was not written")
    elif ctx_nodes(ctx) == 0:
        out.update(ok=False, reason=f"{ctx} has no EPContext node")
    return out


def level0_graph(model: pathlib.Path, dst: pathlib.Path) -> pathlib.Path:
    """`model` with every MatMulNBits at accuracy level 0 (f32 activations): the graph alone, written to
    `dst`; a child loads it from memory with its external data read from `model`'s folder (ORT refuses
    external data outside a model file's folder, symlinks resolved)."""
    import onnx

    from models import with_accuracy_level

    onnx.save(with_accuracy_level(onnx.load(str(model), load_external_data=False), 0), str(dst))
    return dst


def parity(a, model: pathlib.Path, arms: list[str], work: pathlib.Path) -> dict:
    """The first output of sample 0's arms (saved as work/ARM.npy) judged as builder_check.py judges a
    model: at accuracy level 0 every arm within rel L2 1e-4 of ORT's; at level 4 (both runtimes quantize
    activations, random-weight models amplify that noise) an arm passes when its distance from ORT's
    answer on a level-0 copy is at most twice ORT's own distance from it, plus 1e-4."""
    import numpy as np
    import onnx

    from builder_check import LEVEL0_TOL, levels

    load = lambda name: np.load(work / f"{name}.npy").astype(np.float64)  # noqa: E731
    rel = lambda x, y: float(np.linalg.norm(x - y) / max(np.linalg.norm(y), 1e-30))  # noqa: E731
    ref = load("ort")
    own = levels(onnx.load(str(model), load_external_data=False))
    out = {"levels": sorted(own), "rel_l2_vs_ort": {arm: rel(load(arm), ref) for arm in arms if arm != "ort"}}
    if own - {0}:
        l0 = level0_graph(model, work / "level0.onnx")
        run_child(a, "ort", str(l0), save_out=str(work / "level0.npy"), warm=0, data_dir=str(model.parent))
        ref0 = load("level0")
        d_ort = rel(ref, ref0)
        out["ort_vs_level0"] = d_ort
        out["vs_level0"] = {arm: rel(load(arm), ref0) for arm in arms if arm != "ort"}
        out["limit"] = 2 * d_ort + 1e-4
        out["rule"] = "rel L2 from ORT's level-0 answer <= 2 x ORT's own + 1e-4"
        out["fail"] = {k: v for k, v in out["vs_level0"].items() if not v <= out["limit"]}
    else:
        out["limit"] = LEVEL0_TOL
        out["rule"] = "rel L2 from ORT's answer <= 1e-4"
        out["fail"] = {k: v for k, v in out["rel_l2_vs_ort"].items() if not v <= LEVEL0_TOL}
    out["pass"] = not out["fail"]
    return out


# ---------------------------------------------------------------- report


def fmt_bytes(n: int) -> str:
    return f"{n / MB:.1f} MB" if n >= MB else f"{n / 1024:.1f} KiB"


def fmt_range(xs: list[float], f: str = "{:.3f}") -> str:
    if not xs:
        return "-"
    return f"{f.format(statistics.median(xs))} [{f.format(min(xs))}, {f.format(max(xs))}]"


def paired(samples: list[dict], num: str, den: str, key) -> list[float]:
    """Per-sample ratio key(num arm) / key(den arm) (samples where either is None skipped)."""
    out = []
    for s in samples:
        if num in s and den in s:
            n, d = key(s[num]), key(s[den])
            if n is not None and d is not None and d > 0:
                out.append(n / d)
    return out


# The parts of the memory (MB): (key, heading). RSS-base = RSS minus the baseline; anon / file = RssAnon /
# RssFile; model files = resident pages of the model's own files (smaps: the model, its external data, a
# context model's leftovers) but the .rcpu; .rcpu = those of rcpu's context file (mapped packed weights and
# the constants rcpu reads from it); then rcpu's own figures (RCPU_PARTS); ORT+other = RSS-base minus
# SUBTRACTED (ORT's initializers and allocations, the libraries paged in, the interpreter...).
PARTS = [("rss_over_base", "RSS-base"), ("anon", "anon"), ("file", "file"), ("model_files", "model files"),
         ("rcpu_file", ".rcpu RSS"), ("packed_arena", "packed arena"), ("arena_slack", "arena slack"),
         ("packed_mapped", "mapped packed"), ("constants", "const copies"), ("scratch_pools", "scratch/pools"),
         ("ort_other", "ORT+other")]
# rcpu's figure for a part: alternatives (the first whose keys all exist), each a sum of (section, key) of
# RcpuEp_StatsJson's "memory"; a part none of whose alternatives exists is None ("-"), never an error.
RCPU_PARTS = {
    "packed_arena": [[("weight_arena", "live_bytes")]],  # packed weights in the huge-page arena
    "arena_slack": [[("weight_arena", "slack_bytes")]],  # touched arena pages beyond the live pieces
    "packed_mapped": [[("weight_cache", "adopted_bytes")]],  # packed weights mapped from model_ctx.rcpu
    "constants": [[("fused_constants", "live_bytes")]],  # constants rcpu copied
    # the scratch governor's grants (parked scratch, prepared activations, fused partitions' value pools)
    "scratch_pools": [[("scratch", "live_bytes")], [("scratch", "parked_bytes"), ("fused_values", "kept_bytes")]],
}
# the parts taken off RSS-base for ORT+other (mapped packed weights are counted by their resident pages, .rcpu)
SUBTRACTED = ("model_files", "rcpu_file", "packed_arena", "arena_slack", "constants", "scratch_pools")


def dig(d, *keys):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def rcpu_part(mem: dict | None, alts) -> int | None:
    for alt in alts:
        vals = [dig(mem, *k) for k in alt]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
            return sum(vals)
    return None


def memory_parts(r: dict, when: str) -> dict[str, float | None]:
    """A sample's parts of the memory (PARTS, MB) after creation (`when` "created") or after the runs
    ("end"); rcpu's parts are None for ORT's arm and where the plugin did not report them."""
    end = when == "end"
    rss = r["rss_end" if end else "rss_after"]
    files = dig(r, "mapped", when) or {}
    mem = dig(r, "rcpu_memory", when)
    rcpu = r.get("rcpu_memory") is not None
    p = {"rss_over_base": rss - r["base_rss"], "anon": r.get("anon_end" if end else "anon_after"),
         "file": r.get("file_end" if end else "file_after"),
         "model_files": sum(v for n, v in files.items() if not n.endswith(".rcpu")),
         "rcpu_file": sum(v for n, v in files.items() if n.endswith(".rcpu")) if rcpu else None}
    for k, alts in RCPU_PARTS.items():
        p[k] = rcpu_part(mem, alts) if mem else None
    p["ort_other"] = p["rss_over_base"] - sum(p[k] or 0 for k in SUBTRACTED)
    return {k: None if v is None else v / MB for k, v in p.items()}


def flat_numbers(d, prefix: str = "") -> dict[str, float]:
    """Every number of a nested dict, by dotted key (lists and strings left out)."""
    out = {}
    for k, v in (d or {}).items():
        if isinstance(v, dict):
            out.update(flat_numbers(v, f"{prefix}{k}."))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[f"{prefix}{k}"] = v
    return out


BAND_FLOOR = 0.01


def band_floor(band: tuple[float, float]) -> tuple[float, float]:
    """The null band, at least +-1% wide: peak RSS repeats to the page in A/A pairs, and a zero-width band
    would call a 0.3% difference real."""
    w = max(math.log(band[1]), math.log1p(BAND_FLOOR))
    return math.exp(-w), math.exp(w)


def ratio_pairs(arms: list[str]) -> list[tuple[str, str]]:
    """(numerator, denominator) arms of the ratios: ORT over every measured arm but the null arms, rcpu
    over rcpu-ctx / rcpu-nocache / rcpu-budget, rcpu-old over rcpu."""
    nulls = {n for _, n in NULL_PAIRS}
    pairs = [("ort", arm) for arm in arms if arm != "ort" and arm not in nulls]
    if "rcpu" in arms:
        pairs += [("rcpu", arm) for arm in ("rcpu-ctx", "rcpu-nocache", "rcpu-budget") if arm in arms]
        if "rcpu-old" in arms:
            pairs.append(("rcpu-old", "rcpu"))
    return pairs


def summarize(samples: list[dict], arms: list[str], null_pair: tuple[str, str] | None) -> dict:
    per_arm = {}
    for arm in arms:
        rs = [s[arm] for s in samples if arm in s]
        per_arm[arm] = {
            "create_s": [r["create_s"] for r in rs],
            "create_cpu_s": [r["create_cpu_s"] for r in rs],
            "base_mb": [r["base_rss"] / MB for r in rs],
            "peak_mb": [r["peak_hwm"] / MB for r in rs],
            "peak_over_base_mb": [(r["peak_hwm"] - r["base_rss"]) / MB for r in rs],
            "rss_after_mb": [r["rss_after"] / MB for r in rs],
            "anon_after_mb": [(r["anon_after"] or 0) / MB for r in rs],
            "file_after_mb": [(r["file_after"] or 0) / MB for r in rs],
            "peak_end_mb": [r["peak_end"] / MB for r in rs],
            "rss_end_mb": [r["rss_end"] / MB for r in rs],
            "first_ms": [r["first_ms"] for r in rs],
            "warm_ms": [r["warm_med_ms"] for r in rs],
            "first_over_warm": [r["first_ms"] / r["warm_med_ms"] for r in rs if r["warm_med_ms"]],
            "decode_first_ms": [r["decode_first_ms"] for r in rs if r.get("decode_first_ms") is not None],
            "decode_ms": [r["decode_med_ms"] for r in rs if r.get("decode_med_ms") is not None],
            "parts": {when: {k: [x for x in (memory_parts(r, when)[k] for r in rs) if x is not None]
                             for k, _ in PARTS} for when in ("created", "end")},
        }
        if any(r.get("rcpu_memory") is not None for r in rs):  # rcpu's every figure, medians
            per_arm[arm]["rcpu_memory"] = {}
            for when in ("created", "end"):
                flats = [flat_numbers(dig(r, "rcpu_memory", when)) for r in rs]
                keys = list(dict.fromkeys(k for f in flats for k in f))
                per_arm[arm]["rcpu_memory"][when] = {
                    k: statistics.median([f[k] for f in flats if k in f]) for k in keys}
    create = lambda r: r["create_s"]  # noqa: E731
    peak = lambda r: r["peak_hwm"] - r["base_rss"]  # noqa: E731
    decode = lambda r: r.get("decode_med_ms")  # noqa: E731
    null = {k: paired(samples, null_pair[1], null_pair[0], f) if null_pair else []
            for k, f in (("create", create), ("peak_over_base", peak), ("decode", decode))}
    band = {k: band_floor(null_band(v)) if v else None for k, v in null.items()}
    ratios = {}
    for ref, arm in ratio_pairs(arms):
        rc, rp, rd = (paired(samples, ref, arm, f) for f in (create, peak, decode))
        ratios[f"{ref}/{arm}"] = {
            "create": rc, "peak_over_base": rp, "decode": rd,
            "create_verdict": verdict(statistics.median(rc), band["create"]) if rc and band["create"] else None,
            "peak_verdict": verdict(statistics.median(rp), band["peak_over_base"])
            if rp and band["peak_over_base"] else None,
            "decode_verdict": verdict(statistics.median(rd), band["decode"]) if rd and band["decode"] else None,
        }
    return {"per_arm": per_arm, "ratios": ratios, "null": {
        "pair": list(null_pair or ()), "create": null["create"], "peak_over_base": null["peak_over_base"],
        "decode": null["decode"], "create_band": band["create"], "peak_band": band["peak_over_base"],
        "decode_band": band["decode"]}}


def print_report(res: dict) -> None:
    c = res["conditions"]
    summ = res["summary"]
    print(f"\nload_bench: {res['model']}  threads={res['threads']}  samples={res['samples_n']}  "
          f"warm runs={res['warm']}  prompt={PROMPT} tokens, past 0; decode: 1 token, past {res.get('past')}")
    print(f"CPU: {c['cpu_model']} ({c['ncpu']} CPUs), clock {c['clock']}; load average start {c['load_start']}, "
          f"end {c['load_end']}; other processes' share of the CPUs while children ran: median "
          f"{c['foreign_share_med']:.1%}, max {c['foreign_share_max']:.1%}")
    print("plugin: " + "; ".join(c["plugins"]) if c["plugins"] else "plugin: none (ort only)")
    w = res["weights"]
    print(f"weights: {fmt_bytes(w['bytes'])} ({', '.join(w['files']) or 'embedded in the model file'})")
    ctx = res.get("ctx")
    if ctx is None:
        print("context model: not made (no rcpu-ctx arm)")
    elif ctx.get("ok"):
        cr = ctx["create"]
        files = ", ".join(f"{n} {fmt_bytes(v)}" for n, v in sorted(ctx["files"].items()))
        how = ("ORT's compile API, ort.ModelCompiler" if res.get("ctx_compile") else
               "session creation with ep.context_enable=1")
        print(f"context model: written in {cr['create_s']:.3f} s ({how}, "
              f"peak {cr['peak_hwm'] / MB:.0f} MB); files: {files}")
        packed = sum(v for n, v in ctx["files"].items() if n.endswith(".rcpu"))
        print(f"rcpu's context file (.rcpu: packed weights and the constants its kernels read): {fmt_bytes(packed)}, "
              f"{packed / max(w['bytes'], 1):.2f}x the weight bytes")
    else:
        files = ", ".join(f"{n} {fmt_bytes(v)}" for n, v in sorted(ctx.get("files", {}).items())) or "none"
        print(f"context model: FAILED: {ctx.get('reason', '')}; files written: {files}")
    for arm, sp in res.get("arm_specs", {}).items():  # the opt-in arms' settings
        said = [f"{k}={v}" for k, v in sp["options"].items()]
        said += [f"plugin {sp['plugin']}"] if sp["kind"] != "ort" and sp["plugin"] != res["plugin"] else []
        if said:
            print(f"{arm}: " + ", ".join(said))
    hdr = f"{'arm':<15}{'create s':>28}{'base MB':>10}{'peak MB (VmHWM)':>26}{'RSS after MB':>26}" \
          f"{'anon/file MB':>14}{'first ms':>28}{'warm ms':>28}{'first/warm':>12}{'end peak/RSS MB':>17}" \
          f"{'decode ms':>28}"
    print("\nper arm, median [min, max] over samples (base: RSS after importing onnxruntime (+ plugin); peak: VmHWM "
          "reset at the baseline; anon/file: RssAnon/RssFile after creation, medians; end: VmHWM and VmRSS after "
          "the runs, medians; decode: the median of the --warm runs of one token over the past, after the prompt "
          "runs and one decode run):")
    print(hdr)
    for arm, s in summ["per_arm"].items():
        print(f"{arm:<15}{fmt_range(s['create_s']):>28}{statistics.median(s['base_mb']):>10.0f}"
              f"{fmt_range(s['peak_mb'], '{:.0f}'):>26}{fmt_range(s['rss_after_mb'], '{:.0f}'):>26}"
              f"{statistics.median(s['anon_after_mb']):>8.0f}/{statistics.median(s['file_after_mb']):<5.0f}"
              f"{fmt_range(s['first_ms'], '{:.2f}'):>28}{fmt_range(s['warm_ms'], '{:.2f}'):>28}"
              f"{statistics.median(s['first_over_warm']) if s['first_over_warm'] else float('nan'):>12.2f}"
              f"{statistics.median(s['peak_end_mb']):>11.0f}/{statistics.median(s['rss_end_mb']):<5.0f}"
              f"{fmt_range(s.get('decode_ms', []), '{:.2f}'):>28}")
    n = summ["null"]
    bc, bp, bd = n["create_band"], n["peak_band"], n.get("decode_band")
    band = lambda b: f"[{b[0]:.3f}, {b[1]:.3f}]" if b else "unavailable"  # noqa: E731
    if n["pair"]:
        print(f"\nnull band ({n['pair'][1]} / {n['pair'][0]} per sample): create {band(bc)}, peak over baseline "
              f"{band(bp)}, decode {band(bd)}" + (" (min/max of the A/A ratios: fewer than 10 samples"
                                                  if len(n["create"]) < 10 else " (10-90% of the A/A ratios")
              + f"; at least +-{BAND_FLOOR:.0%})")
    else:
        print("\nnull band: none (no null arm measured: add rcpu-ctx-null or rcpu-null to --arms), so no verdicts")
    print("ratios, median [min, max] of per-sample ratios (above 1: the denominator arm is faster / smaller); "
          "peak = VmHWM minus the baseline RSS; decode = decode ms:")
    for name, r in summ["ratios"].items():
        print(f"  {name:<22} create {fmt_range(r['create']):<28} {r['create_verdict'] or '':<6}  "
              f"peak {fmt_range(r['peak_over_base']):<28} {r['peak_verdict'] or '':<6}  "
              f"decode {fmt_range(r.get('decode', [])):<28} {r.get('decode_verdict') or ''}")
    par = res.get("parity")
    if par:
        line = "parity (first output of sample 0): rel L2 from ORT " + ", ".join(
            f"{k} {v:.2e}" for k, v in par["rel_l2_vs_ort"].items())
        if "vs_level0" in par:
            line += (f"; accuracy level {par['levels']}: from ORT's level-0 answer ORT {par['ort_vs_level0']:.2e}, " +
                     ", ".join(f"{k} {v:.2e}" for k, v in par["vs_level0"].items()) + f" (limit {par['limit']:.2e})")
        print(line + (" PASS" if par["pass"] else " FAIL"))
    print_parts(summ)
    if res.get("uss"):
        print("\nsecond-process memory: a holder process keeps the session loaded; a second process creates the "
              "same session and runs once (MB; 'model' = after minus its baseline after importing onnxruntime)")
        print(f"{'arm':<12}{'2nd USS model':>15}{'2nd USS':>10}{'2nd Rss':>10}{'2nd Pss':>10}"
              f"{'2nd Rss model':>15}{'1st USS model':>15}")
        for u in res["uss"]:
            f, s = u["first"], u["second"]
            d = lambda r, k: (r["uss_after"][k] - r["uss_base"][k]) / MB  # noqa: E731
            print(f"{u['arm']:<12}{d(s, 'USS'):>15.1f}{s['uss_after']['USS'] / MB:>10.1f}"
                  f"{s['uss_after']['Rss'] / MB:>10.1f}{s['uss_after']['Pss'] / MB:>10.1f}{d(s, 'Rss'):>15.1f}"
                  f"{d(f, 'USS'):>15.1f}")
    for note in res.get("notes", []):
        print("note: " + note)


def print_parts(summ: dict) -> None:
    """The parts of the memory per arm (PARTS, medians) and every figure of rcpu's "memory" object."""
    print("\nparts of the memory (MB, medians over samples; created: after creation, end: after the prompt and "
          "decode runs). RSS-base: RSS minus the baseline; anon/file: RssAnon/RssFile; model files: resident pages "
          "of the model's own files (smaps) but the .rcpu; .rcpu RSS: resident pages of rcpu's context file (the "
          "mapped packed weights and the constants rcpu reads from it); from RcpuEp_StatsJson's memory: packed "
          "arena (weight_arena.live_bytes: packed weights in huge-page regions), arena slack "
          "(weight_arena.slack_bytes), mapped packed (weight_cache.adopted_bytes: counted by .rcpu RSS, not taken "
          "off again), const copies (fused_constants.live_bytes), scratch/pools (scratch.live_bytes: the scratch "
          "budget's grants, parked scratch and fused value pools); ORT+other = RSS-base minus model files, .rcpu "
          "RSS, packed arena, arena slack, const copies and scratch/pools ('-': not reported)")
    print(f"{'arm':<15}{'when':<9}" + "".join(f"{h:>{max(len(h) + 2, 9)}}" for _, h in PARTS))
    med = lambda xs: f"{statistics.median(xs):.1f}" if xs else "-"  # noqa: E731
    for arm, s in summ["per_arm"].items():
        for when in ("created", "end"):
            row = s["parts"][when]
            print(f"{arm:<15}{when:<9}" + "".join(f"{med(row[k]):>{max(len(h) + 2, 9)}}" for k, h in PARTS))
    mem = {arm: s["rcpu_memory"] for arm, s in summ["per_arm"].items() if s.get("rcpu_memory")}
    if not mem:
        return
    keys = list(dict.fromkeys(k for m in mem.values() for when in ("created", "end") for k in m[when]))
    fmt = lambda k, v: "-" if v is None else (  # noqa: E731
        f"{v / MB:.1f}" if k.endswith("bytes") else f"{v:.0f}" if float(v).is_integer() else f"{v:.3g}")

    def cell(m: dict, k: str) -> str:
        c, e = m["created"].get(k), m["end"].get(k)
        return fmt(k, c) if c == e else f"{fmt(k, c)} -> {fmt(k, e)}"

    zero = [k for k in keys if all(not m[w].get(k) for m in mem.values() for w in ("created", "end"))]
    shown = [k for k in keys if k not in zero]
    print("\nrcpu's memory figures (RcpuEp_StatsJson \"memory\", every key it reports; medians; *bytes in MB; "
          "'a -> b': after creation -> after the runs):")
    w = max([len(k) for k in shown] + [10]) + 2
    print(f"{'':<{w}}" + "".join(f"{arm:>22}" for arm in mem))
    for k in shown:
        print(f"{k:<{w}}" + "".join(f"{cell(m, k):>22}" for m in mem.values()))
    if zero:
        print("zero in every rcpu arm: " + ", ".join(zero))


def clock() -> str:
    f = pathlib.Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq")
    try:
        return f"{int(f.read_text()) / 1e6:.2f} GHz (cpu0)"
    except (OSError, ValueError):
        return "unavailable"


def stamp(path: str) -> dict:
    """The plugin's size and mtime: someone may rebuild it while the bench runs."""
    try:
        st = pathlib.Path(path).stat()
        return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "mtime": time.ctime(st.st_mtime)}
    except OSError:
        return {"size": None, "mtime_ns": None, "mtime": None}


def wait_for(path: pathlib.Path, seconds: float = 180) -> bool:
    """The plugin may be rebuilt by someone else meanwhile: waits for it to reappear."""
    end = time.time() + seconds
    while not path.is_file():
        if time.time() > end:
            return False
        time.sleep(2)
    return True


ALL_CPUS = set(range(os.cpu_count() or 1))
HZ = os.sysconf("SC_CLK_TCK")


def parse_arms(a) -> list[str]:
    """--arms as a list (an error names what is wrong); --old-plugin adds rcpu-old when it is missing."""
    arms = [x.strip() for x in a.arms.split(",") if x.strip()]
    if a.old_plugin and "rcpu-old" not in arms:
        arms.append("rcpu-old")
    unknown = [x for x in arms if x not in ARMS_ALL]
    if unknown:
        raise ValueError(f"unknown arm(s) {unknown}; known: {', '.join(ARMS_ALL)}")
    if len(set(arms)) != len(arms):
        raise ValueError(f"an arm is named twice in {arms}")
    if "ort" not in arms:
        raise ValueError("--arms must include ort (parity's reference and the ratios' numerator)")
    for arm, null in NULL_PAIRS:
        if null in arms and arm not in arms:
            raise ValueError(f"{null} repeats {arm}: measure {arm} too")
    if "rcpu-old" in arms and not a.old_plugin:
        raise ValueError("rcpu-old needs --old-plugin SO")
    return arms


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help=".onnx file or a folder holding model.onnx")
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx-dir", help="where the context model is written (default: a temp dir, removed after)")
    ap.add_argument("--json", help="write every raw sample here")
    ap.add_argument("--plugin", default=os.environ.get("RCPU_PLUGIN", str(DEFAULT_PLUGIN)))
    ap.add_argument("--warm", type=int, default=5, help="warm runs after the first (their median: warm ms)")
    ap.add_argument("--past", type=int, default=64,
                    help="the decode step's past rows (one token over P cached positions, zeros; default 64)")
    ap.add_argument("--no-uss", action="store_true", help="skip the second-process USS pairs")
    ap.add_argument("--arms", default=",".join(ARMS_DEFAULT),
                    help=f"comma list of arms to measure, of {', '.join(ARMS_ALL)} (default: %(default)s)")
    ap.add_argument("--budget-mb", type=int, default=64, help="rcpu-budget's weight_cache_mb (default 64)")
    ap.add_argument("--old-plugin", help="arm rcpu-old: rcpu from this build on the original model (adds the arm)")
    ap.add_argument("--ctx-compile", action="store_true",
                    help=f"write the context model with ORT's compile API, leftover initializers in {CTX_DATA} "
                         "(a context model whose leftovers pass protobuf's 2 GB)")
    ap.add_argument("--child-timeout", type=float, default=900)
    a = ap.parse_args(argv)
    try:
        arms = parse_arms(a)
        if a.past < 0:
            raise ValueError(f"--past must be 0 or more, not {a.past}")
    except ValueError as e:
        print(f"load_bench: {e}", file=sys.stderr)
        return EXIT_ERROR
    a.plugin = str(pathlib.Path(a.plugin).resolve())
    a.old_plugin = str(pathlib.Path(a.old_plugin).resolve()) if a.old_plugin else None
    model = model_file(a.model).resolve()
    if not model.is_file():
        print(f"load_bench: no model at {model}", file=sys.stderr)
        return EXIT_ERROR
    for plugin in filter(None, (a.plugin, a.old_plugin)):
        if not wait_for(pathlib.Path(plugin)):
            print(f"load_bench: plugin not found at {plugin}", file=sys.stderr)
            return EXIT_ERROR
    with_ctx = "rcpu-ctx" in arms
    null_pair = next((pair for pair in NULL_PAIRS if pair[0] in arms and pair[1] in arms), None)
    own_tmp = a.ctx_dir is None
    ctx_dir = pathlib.Path(tempfile.mkdtemp(prefix="load_bench_ctx_") if own_tmp else a.ctx_dir).resolve()
    if with_ctx:
        ctx_dir.mkdir(parents=True, exist_ok=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix="load_bench_out_"))
    load_start = pathlib.Path("/proc/loadavg").read_text().split()[:3]
    wbytes, wfiles = external_bytes(model)
    a.hints = model_hints(model)
    specs = {arm: arm_spec(a, arm, model, ctx_dir / CTX_NAME) for arm in arms}
    plugins = list(dict.fromkeys(sp["plugin"] for sp in specs.values() if sp["kind"] != "ort"))
    plugin_start = {p: stamp(p) for p in plugins}
    res = {"model": str(model), "threads": a.threads, "samples_n": a.samples, "warm": a.warm, "past": a.past,
           "arms": arms,
           "ctx_compile": a.ctx_compile,
           "arm_specs": specs, "plugin_start": plugin_start, "plugin": a.plugin, "old_plugin": a.old_plugin,
           "budget_mb": a.budget_mb, "hints": a.hints, "weights": {"bytes": wbytes, "files": wfiles},
           "ctx": None, "notes": []}
    try:
        # 1. the context model
        if with_ctx:
            print(f"load_bench: writing the context model into {ctx_dir} ...", file=sys.stderr, flush=True)
            res["ctx"] = make_ctx(a, model, ctx_dir)
            if not res["ctx"]["ok"]:
                ctx = res["ctx"]
                detail = ctx.get("detail", "").strip()
                how = ("ORT's compile API" if a.ctx_compile else "an rcpu session with ep.context_enable=1 and "
                       f"ep.context_file_path={ctx_dir / CTX_NAME}")
                print(f"load_bench: creating the context model FAILED ({how}): {ctx['reason']}"
                      + (f"\n{detail[-3000:]}" if detail and detail != ctx["reason"] else "")
                      + ("\n(the initializers rcpu leaves to ORT make the context model pass protobuf's 2 GB: "
                         "--ctx-compile writes them beside it)"
                         if "protobuf serialization failed" in ctx["reason"].lower() and not a.ctx_compile else "")
                      + "\n(nothing measured; exit 1)", file=sys.stderr)
                write_json(a, res)
                return EXIT_ERROR

        # 2. samples
        samples: list[dict] = []
        for i in range(a.samples):
            order = arms if i % 2 == 0 else arms[::-1]
            s = {"sample": i, "order": list(order)}
            for arm in order:
                save = str(work / f"{arm}.npy") if i == 0 else None
                rec = run_arm(a, arm, specs[arm], save_out=save)
                s[arm] = rec
                print(f"  sample {i} {arm:<14} create {rec['create_s']:.3f} s  peak {rec['peak_hwm'] / MB:.0f} MB  "
                      f"first {rec['first_ms']:.1f} ms  warm {rec['warm_med_ms'] or float('nan'):.1f} ms  "
                      f"decode {rec['decode_med_ms'] or float('nan'):.2f} ms",
                      file=sys.stderr, flush=True)
            samples.append(s)
            if i == 0:
                res["parity"] = parity(a, model, arms, work)
                if not res["parity"]["pass"]:
                    res["samples"] = samples
                    print(f"load_bench: PARITY MISMATCH ({res['parity']['rule']}: {res['parity']['fail']}); "
                          "nothing more timed", file=sys.stderr)
                    write_json(a, res)
                    return EXIT_PARITY
        res["samples"] = samples
        res["summary"] = summarize(samples, arms, null_pair)

        # 3. second-process USS
        res["uss"] = []
        if not a.no_uss:
            for arm in (x for x in USS_ORDER if x in arms):
                print(f"load_bench: second-process USS, {arm} ...", file=sys.stderr, flush=True)
                res["uss"].append(uss_pair(a, arm, specs[arm]))

        shares = [s[arm]["foreign_share"] for s in samples for arm in arms]
        res["conditions"] = {
            "cpu_model": cpu_model(), "ncpu": len(ALL_CPUS), "clock": clock(), "load_start": load_start,
            "load_end": pathlib.Path("/proc/loadavg").read_text().split()[:3],
            "foreign_share_med": statistics.median(shares), "foreign_share_max": max(shares),
            "hwm_reset": all(s[arm]["hwm_reset"] for s in samples for arm in arms),
            "plugins": [f"{p} ({st['mtime']}, {st['size']} bytes)" for p, st in plugin_start.items()],
        }
        res["plugin_end"] = {p: stamp(p) for p in plugins}
        for p in plugins:
            if res["plugin_end"][p] != plugin_start[p]:
                res["notes"].append(f"THE PLUGIN {p} CHANGED DURING THE RUN ({plugin_start[p]['mtime']} -> "
                                    f"{res['plugin_end'][p]['mtime']}): its arms may have loaded different builds")
        if not res["conditions"]["hwm_reset"]:
            res["notes"].append("VmHWM could not be reset after the imports: peak includes the import's own peak")
        print_report(res)
        write_json(a, res)
        return EXIT_OK
    except (ChildError, subprocess.TimeoutExpired) as e:
        print(f"load_bench: {e}", file=sys.stderr)
        write_json(a, res)
        return EXIT_ERROR
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if own_tmp:
            shutil.rmtree(ctx_dir, ignore_errors=True)


def write_json(a, res: dict) -> None:
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(res, indent=1, default=str))


def child_main(argv) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arm", required=True, choices=["ort", "rcpu", "rcpu-ctx"])
    ap.add_argument("--model", required=True)
    ap.add_argument("--mode", default="sample", choices=["sample", "hold", "uss", "compile"])
    ap.add_argument("--compile-to", help="--mode compile: the context model to write")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--plugin", default=str(DEFAULT_PLUGIN))
    ap.add_argument("--warm", type=int, default=5)
    ap.add_argument("--past", type=int, default=64)
    ap.add_argument("--config", action="append")
    ap.add_argument("--provider-option", action="append", help="K=V: an rcpu provider option beside threads")
    ap.add_argument("--save-out")
    ap.add_argument("--data-dir", help="load MODEL from memory, its external data from this folder")
    ap.add_argument("--hints", default='{"vocab": 1000, "head": null, "kv_heads": null, "window": 0}')
    return child(ap.parse_args(argv))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "__child":
        sys.exit(child_main(sys.argv[2:]))
    sys.exit(main())
