#!/usr/bin/env python3
"""Peak RSS (VmHWM) and resident memory (VmRSS) of a fresh process that loads MODEL and runs it
three times: stock ORT CPU EP, rcpu with the weight cache on (default budget), off
(weight_cache_mb=0), and under a small budget; with --old-plugin also rcpu from that build (cache
on). Each arm runs in its own process; both figures are read from /proc/self/status at the end.

A model whose first input is float gets ones of its shape (symbolic dims 1). A decoder made by
the model builder (`rcpu-bench gen llm:...`) gets a decode step's feeds: one token id, its
position, an attention mask and past key / values of --past positions (zeros).

usage: .venv/bin/python scripts/peak_rss.py MODEL.onnx [--budget-mb 64] [--plugin PATH]
       [--old-plugin PATH] [--past 64]
"""
import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, sys, numpy as np, onnxruntime as ort
model, plugin, opts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1])
def hwm():
    return status("VmHWM:")
def rss():
    return status("VmRSS:")
so = ort.SessionOptions()
so.intra_op_num_threads = 2
base = hwm()
if opts is None:
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
else:
    ort.register_execution_provider_library("rcpu", plugin or opts.pop("plugin"))
    devs = [d for d in ort.get_ep_devices() if d.ep_name == "RcpuExecutionProvider"]
    so.intra_op_num_threads = 1
    so.add_provider_for_devices(devs, opts)
    sess = ort.InferenceSession(model, so)
past = int(sys.argv[4])
def feed(i):
    shape = [1 if not isinstance(d, int) else d for d in i.shape]
    if i.name.startswith("past_key_values"):
        shape[2] = past
        return np.zeros(shape, np.float32)
    if i.name == "attention_mask":
        return np.ones((1, past + 1), np.int64)
    if i.name == "position_ids":
        return np.full((1, 1), past, np.int64)
    if i.type == "tensor(int64)":
        return np.ones(shape, np.int64)
    return np.ones(shape, np.float32)
feeds = {i.name: feed(i) for i in sess.get_inputs()}
for _ in range(3):
    sess.run(None, feeds)
print(json.dumps({"base_kb": base, "hwm_kb": hwm(), "rss_kb": rss()}))
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--budget-mb", type=int, default=64)
    ap.add_argument("--plugin", default=os.path.join(os.path.dirname(__file__), "..", "target/release/librcpu_ep.so"))
    ap.add_argument("--old-plugin", help="also measure rcpu from this build (weight cache on)")
    ap.add_argument("--past", type=int, default=64, help="past positions of a decoder's feeds")
    a = ap.parse_args()
    plugin = os.path.abspath(a.plugin)
    arms = [
        ("ort-cpu", None),
        ("rcpu cache on", {"threads": "2"}),
        ("rcpu cache off", {"threads": "2", "weight_cache_mb": "0"}),
        (f"rcpu budget {a.budget_mb} MB", {"threads": "2", "weight_cache_mb": str(a.budget_mb)}),
    ]
    if a.old_plugin:
        arms.append(("rcpu old build", {"threads": "2", "plugin": os.path.abspath(a.old_plugin)}))
    size_mb = os.path.getsize(a.model) / 2**20
    print(f"model {a.model}: {size_mb:.1f} MiB on disk")
    ort_hwm = None
    for name, opts in arms:
        own = opts is not None and "plugin" in opts
        out = subprocess.run([sys.executable, "-c", CHILD, a.model, "" if own else plugin, json.dumps(opts),
                              str(a.past)], capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        hwm = r["hwm_kb"] / 1024
        rss = r["rss_kb"] / 1024
        if ort_hwm is None:
            ort_hwm, ort_rss = hwm, rss
        print(f"{name:<22} VmHWM {hwm:8.1f} MiB (vs ORT {hwm - ort_hwm:+8.1f})   VmRSS after 3 runs {rss:8.1f} MiB "
              f"(vs ORT {rss - ort_rss:+8.1f}; before session {r['base_kb'] / 1024:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
