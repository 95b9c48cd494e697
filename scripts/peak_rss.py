#!/usr/bin/env python3
"""Peak RSS (VmHWM) of a fresh process that loads MODEL and runs it once: stock ORT CPU EP,
rcpu with the weight cache on (default budget), off (weight_cache_mb=0), and under a small
budget. Each arm runs in its own process; VmHWM is read from /proc/self/status at the end.

usage: .venv/bin/python scripts/peak_rss.py MODEL.onnx [--budget-mb 64] [--plugin PATH]
"""
import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, sys, numpy as np, onnxruntime as ort
model, plugin, opts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
so = ort.SessionOptions()
so.intra_op_num_threads = 2
base = hwm()
if opts is None:
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
else:
    ort.register_execution_provider_library("rcpu", plugin)
    devs = [d for d in ort.get_ep_devices() if d.ep_name == "RcpuExecutionProvider"]
    so.intra_op_num_threads = 1
    so.add_provider_for_devices(devs, opts)
    sess = ort.InferenceSession(model, so)
inp = sess.get_inputs()[0]
shape = [1 if not isinstance(d, int) else d for d in inp.shape]
sess.run(None, {inp.name: np.ones(shape, np.float32)})
print(json.dumps({"base_kb": base, "hwm_kb": hwm()}))
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--budget-mb", type=int, default=64)
    ap.add_argument("--plugin", default=os.path.join(os.path.dirname(__file__), "..", "target/release/librcpu_ep.so"))
    a = ap.parse_args()
    plugin = os.path.abspath(a.plugin)
    arms = [
        ("ort-cpu", None),
        ("rcpu cache on", {"threads": "2"}),
        ("rcpu cache off", {"threads": "2", "weight_cache_mb": "0"}),
        (f"rcpu budget {a.budget_mb} MB", {"threads": "2", "weight_cache_mb": str(a.budget_mb)}),
    ]
    size_mb = os.path.getsize(a.model) / 2**20
    print(f"model {a.model}: {size_mb:.1f} MiB on disk")
    ort_hwm = None
    for name, opts in arms:
        out = subprocess.run([sys.executable, "-c", CHILD, a.model, plugin, json.dumps(opts)],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        hwm = r["hwm_kb"] / 1024
        if ort_hwm is None:
            ort_hwm = hwm
        print(f"{name:<22} VmHWM {hwm:8.1f} MiB   (vs ORT {hwm - ort_hwm:+8.1f} MiB; before session {r['base_kb'] / 1024:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
