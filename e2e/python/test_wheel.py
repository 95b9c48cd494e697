"""The rcpu Python package, tested as an app would use it: from the wheel installed in the venv.

scripts/test.sh builds the wheel (scripts/build_wheel.sh) and installs it before pytest runs. Each
check runs in a fresh interpreter, in a folder outside the repository, so `import rcpu` can only
find the installed package and this process's own plugin registration (conftest) is not shared.
"""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys
import zipfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]

APP = r'''
import json
import numpy as np
import onnx
from onnx import TensorProto, helper
import onnxruntime as ort
import rcpu

rng = np.random.default_rng(7)
w = rng.standard_normal((64, 24)).astype(np.float32)
x = rng.standard_normal((3, 64)).astype(np.float32)
g = helper.make_graph(
    [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
    "wheel",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 64])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 24])],
    [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.flatten())],
)
model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)

devices = rcpu.register()
again = rcpu.register()  # idempotent: no second registration
so = ort.SessionOptions()
so.add_provider_for_devices(devices, {"threads": "1"})
so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
sess = ort.InferenceSession(model.SerializeToString(), sess_options=so)
rcpu.reset_stats()
y = sess.run(None, {"x": x})[0]
ledger = rcpu.stats()["ledger"]
print("WHEEL-APP " + json.dumps({
    "file": rcpu.__file__,
    "library": rcpu.library_path(),
    "version": rcpu.__version__,
    "devices": [d.ep_name for d in devices],
    "again": len(again),
    "max_abs_err": float(np.max(np.abs(y - x @ w))),
    "matmul_calls": sum(r["calls"] for r in ledger if r["op"] == "MatMul"),
}))
'''


def _crate_version() -> str:
    cargo = (REPO / "Cargo.toml").read_text()
    return re.search(r'^version\s*=\s*"([^"]+)"', cargo.split("[workspace.package]", 1)[1], re.M).group(1)


def _installed_dist() -> pathlib.Path:
    out = subprocess.run(
        [sys.executable, "-c", "import importlib.metadata as m; print(m.distribution('rcpu')._path)"],
        capture_output=True, text=True, cwd="/",
    )
    if out.returncode != 0:
        pytest.fail("the rcpu wheel is not installed in this venv (scripts/test.sh installs it)", pytrace=False)
    return pathlib.Path(out.stdout.strip())


def test_installed_wheel_registers_runs_and_reports(tmp_path):
    _installed_dist()
    out = subprocess.run([sys.executable, "-c", APP], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, f"app failed:\n{out.stderr[-2000:]}"
    line = next(l for l in out.stdout.splitlines() if l.startswith("WHEEL-APP "))
    r = json.loads(line[len("WHEEL-APP "):])
    pkg = pathlib.Path(r["file"]).parent
    assert "site-packages" in pkg.parts, f"rcpu imported from {pkg}, not from the installed wheel"
    assert pkg != REPO / "python" / "rcpu", f"rcpu imported from the source tree: {pkg}"
    assert pathlib.Path(r["library"]) == pkg / "librcpu_ep.so"
    assert r["version"] == _crate_version()
    assert r["devices"] == ["RcpuExecutionProvider"] and r["again"] == 1
    assert r["max_abs_err"] < 1e-4
    assert r["matmul_calls"] == 1, "rcpu's ledger does not show the MatMul it ran"


def test_wheel_does_not_require_onnxruntime():
    dist = _installed_dist()
    meta = (dist / "METADATA").read_text()
    requires = [l for l in meta.splitlines() if l.startswith("Requires-Dist")]
    assert requires == [], f"the wheel pins dependencies: {requires}"
    wheels = sorted((REPO / "dist").glob("rcpu-*.whl"))
    assert wheels, "no built wheel in dist/"
    names = zipfile.ZipFile(wheels[-1]).namelist()
    assert "rcpu/librcpu_ep.so" in names
    assert not any("onnxruntime" in n for n in names), "the wheel bundles onnxruntime"
