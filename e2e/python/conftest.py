"""Shared fixtures for the rcpu Python end-to-end suite.

The plugin is registered with onnxruntime once per process (session-scoped fixture). Every parity
test builds two sessions from the same model bytes: one on ORT's own CPU EP (the reference) and one
with rcpu selected through `add_provider_for_devices`, both recording EP graph-assignment info so a
test can prove that the nodes it targets really ran on rcpu (not on ORT's kernel by fallback).
"""

from __future__ import annotations

import ctypes
import json
import os
import pathlib

import numpy as np
import onnxruntime as ort
import pytest

EP_NAME = "RcpuExecutionProvider"
REPO = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_PLUGIN = REPO / "target" / "release" / "librcpu_ep.so"

# Quiet ORT's "some nodes were not assigned to the preferred EP" warnings (mixed partitions are intended).
ort.set_default_logger_severity(3)


def _plugin_path() -> pathlib.Path:
    p = pathlib.Path(os.environ.get("RCPU_PLUGIN", str(DEFAULT_PLUGIN))).resolve()
    if not p.is_file():
        pytest.fail(
            f"rcpu plugin not found at {p}; build it with `cargo build --release -p rcpu-ep` "
            "or point RCPU_PLUGIN at the .so",
            pytrace=False,
        )
    return p


@pytest.fixture(scope="session")
def plugin_path() -> pathlib.Path:
    return _plugin_path()


_REGISTERED: dict[str, object] = {}


@pytest.fixture(scope="session")
def rcpu_devices(plugin_path):
    """Registers the plugin (once per process) and returns rcpu's OrtEpDevice list."""
    if "devices" not in _REGISTERED:
        ort.register_execution_provider_library("rcpu", str(plugin_path))
        _REGISTERED["devices"] = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    devs = _REGISTERED["devices"]
    assert devs, f"no OrtEpDevice with ep_name {EP_NAME} after registering {plugin_path}"
    return devs


def _session_options(opt_level) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.graph_optimization_level = opt_level
    so.log_severity_level = 3
    return so


def cpu_session(model_bytes: bytes, opt_level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL) -> ort.InferenceSession:
    so = _session_options(opt_level)
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def rcpu_session(
    model_bytes: bytes, devices, options: dict | None = None, opt_level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL
) -> ort.InferenceSession:
    """A session with rcpu selected. `enable_fallback=0` stops the Python wrapper from silently
    retrying on the CPU EP when rcpu's CreateEp fails (it would otherwise just print "EP Error")."""
    so = _session_options(opt_level)
    so.add_provider_for_devices(devices, {k: str(v) for k, v in (options or {}).items()})
    return ort.InferenceSession(model_bytes, so, enable_fallback=0)


@pytest.fixture(scope="session")
def make_sessions(rcpu_devices):
    """make_sessions(model_bytes, options={}, opt_level=DISABLE_ALL) -> (ort_cpu_session, rcpu_session).

    Graph optimizations are off by default so node names survive (ORT fusions rename/merge nodes)
    and both sessions run the very same nodes."""

    def make(model_bytes, options=None, opt_level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL):
        if not isinstance(model_bytes, bytes):
            model_bytes = model_bytes.SerializeToString()
        return cpu_session(model_bytes, opt_level), rcpu_session(model_bytes, rcpu_devices, options, opt_level)

    return make


def assignment(sess) -> dict[str, set[str]]:
    """{ep_name: set of node names} from the session's recorded graph-assignment info."""
    out: dict[str, set[str]] = {}
    for sg in sess.get_provider_graph_assignment_info():
        out.setdefault(sg.ep_name, set()).update(n.name for n in sg.get_nodes())
    return out


def assigned_to_rcpu(sess) -> set[str]:
    return assignment(sess).get(EP_NAME, set())


def assigned_to_cpu(sess) -> set[str]:
    return assignment(sess).get("CPUExecutionProvider", set())


def assert_on_rcpu(sess, names) -> None:
    names = {names} if isinstance(names, str) else set(names)
    got = assignment(sess)
    missing = names - got.get(EP_NAME, set())
    assert not missing, f"nodes {sorted(missing)} were not assigned to {EP_NAME}; assignment: {got}"


def assert_on_cpu(sess, names) -> None:
    names = {names} if isinstance(names, str) else set(names)
    got = assignment(sess)
    missing = names - got.get("CPUExecutionProvider", set())
    assert not missing, f"nodes {sorted(missing)} were expected on CPUExecutionProvider; assignment: {got}"


class RcpuStats:
    """rcpu's statistics through RcpuEp_StatsJson / RcpuEp_ResetStats (dlopen of the loaded plugin: the
    same instance ORT runs)."""

    def __init__(self, plugin_path):
        self.lib = ctypes.CDLL(str(plugin_path))
        self.lib.RcpuEp_StatsJson.restype = ctypes.c_size_t
        self.lib.RcpuEp_StatsJson.argtypes = [ctypes.c_char_p, ctypes.c_size_t]

    def reset(self):
        self.lib.RcpuEp_ResetStats()

    def json(self) -> dict:
        n = self.lib.RcpuEp_StatsJson(None, 0) + 4096
        buf = ctypes.create_string_buffer(n)
        m = self.lib.RcpuEp_StatsJson(buf, n)
        return json.loads(buf.raw[:m])

    def ledger(self) -> list[dict]:
        """The route ledger's rows ({op, variant, lanes, calls})."""
        return self.json()["ledger"]

    def step_times(self) -> dict[str, dict]:
        """Fused partitions' step times by label ({calls, ns}; provider option `step_times`)."""
        return {r["step"]: r for r in self.json()["step_times"]}

    def variants(self, op):
        return {r["variant"] for r in self.ledger() if r["op"] == op and r["calls"] > 0}


@pytest.fixture(scope="module")
def stats(plugin_path, rcpu_devices):
    return RcpuStats(plugin_path)


def rel_l2(a, b) -> float:
    """||a - b||_2 / max(||b||_2, tiny), in float64."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, f"shape mismatch {a.shape} vs {b.shape}"
    den = np.linalg.norm(b.ravel())
    return float(np.linalg.norm((a - b).ravel()) / max(den, 1e-30))


def run_both(cpu, rc, feeds):
    return cpu.run(None, feeds), rc.run(None, feeds)


def assert_error_names_node(exc: BaseException, node_name: str) -> None:
    """The error must name the node in rcpu's own status message, not only in ORT's
    "Non-zero status code returned while running X node. Name:'...'" prefix."""
    msg = str(exc)
    assert node_name in msg, f"error does not name node {node_name!r}: {msg}"
    own = msg.split("Status Message:", 1)[1] if "Status Message:" in msg else msg
    assert node_name in own, f"the EP's own message does not name node {node_name!r}: {own!r}"
