"""How much ORT's profiler adds to the time it records for a small node (e2e/BENCH.md, `llm`'s profiling pass).

    target/release/rcpu-bench gen glue:op=skipnorm,n=896,layers=64 --out /tmp/glue.onnx
    .venv/bin/python scripts/profiler_overhead.py /tmp/glue.onnx [iters]   # RCPU_PLUGIN: the plugin (scripts/env.sh)

For each arm (ORT's CPU EP, then rcpu), one session without and one with `enable_profiling` (one intra-op
thread each): wall time per run / nodes per run unprofiled, against the mean `dur` the profiler records per
node (`*_kernel_time` events of the timed runs). A diagnostic: one process, arms not interleaved.
"""

import json
import os
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

EP_NAME = "RcpuExecutionProvider"


def session(model, rcpu, profile_dir):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    if profile_dir:
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(profile_dir, "p")
    if rcpu:
        # The per-node path: with fusion (the default) ORT would time one fused node per run.
        so.add_provider_for_devices([d for d in ort.get_ep_devices() if d.ep_name == EP_NAME], {"fuse": "off"})
    return ort.InferenceSession(model, so)


def main():
    model = sys.argv[1]
    iters = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    ort.register_execution_provider_library("rcpu", os.environ["RCPU_PLUGIN"])
    nodes = len(__import__("onnx").load(model, load_external_data=False).graph.node)
    with tempfile.TemporaryDirectory() as tmp:
        for rcpu in (False, True):
            arm = "rcpu" if rcpu else "ort"
            for prof in (None, tmp):
                s = session(model, rcpu, prof)
                inp = s.get_inputs()[0]
                x = np.random.default_rng(1).uniform(-1, 1, (1, inp.shape[1])).astype(np.float32)
                for _ in range(100):
                    s.run(None, {inp.name: x})
                t = time.perf_counter()
                for _ in range(iters):
                    s.run(None, {inp.name: x})
                per_node = (time.perf_counter() - t) / iters / nodes * 1e6
                if prof is None:
                    print(f"{arm:4}: unprofiled {per_node:6.2f} us per node (wall per run / {nodes})")
                    continue
                with open(s.end_profiling()) as f:
                    ev = [e for e in json.load(f) if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
                durs = [e["dur"] for e in ev[-iters * nodes :]]
                print(f"{arm:4}: profiled   {per_node:6.2f} us per node (wall); the profiler records {np.mean(durs):6.2f} us")


if __name__ == "__main__":
    main()
