"""rcpu: a CPU execution provider for ONNX Runtime, as a plugin library.

This package carries the plugin (``librcpu_ep.so``) and three helpers; it does not depend on, bundle
or pin ONNX Runtime (any onnxruntime >= 1.24 that the app already uses can load the plugin)::

    import onnxruntime as ort, rcpu
    so = ort.SessionOptions()
    so.add_provider_for_devices(rcpu.register(), {"threads": "4"})
    sess = ort.InferenceSession("model.onnx", sess_options=so, enable_fallback=0)
    print(rcpu.stats()["ledger"])

``enable_fallback=0`` makes a session rcpu refuses (a bad provider option) raise: by default ORT
prints an "EP Error" banner and runs the model on its CPU EP alone. ``sess.get_providers()`` and
the ledger of :func:`stats` show whether rcpu ran.

onnxruntime-genai loads it by path: ``og.register_execution_provider_library("rcpu",
rcpu.library_path())``, then the provider name ``rcpu.EP_NAME`` in ``genai_config.json`` or
``Config.append_provider``.
"""

from __future__ import annotations

import ctypes
import json
import os
import threading

__all__ = ["EP_NAME", "REGISTRATION_NAME", "library_path", "register", "stats", "reset_stats"]

from ._version import __version__  # noqa: E402  (written by the wheel build)

#: The execution provider's name (what ORT's device list and provider options use).
EP_NAME = "RcpuExecutionProvider"
#: The name :func:`register` registers the library under (ORT keys registrations by it).
REGISTRATION_NAME = "rcpu"

_LIB_FILE = "librcpu_ep.so"
_lock = threading.Lock()
_registered: dict[int, str] = {}


def library_path() -> str:
    """Absolute path of the plugin library carried by this package."""
    p = os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIB_FILE)
    if not os.path.isfile(p):
        raise FileNotFoundError(f"rcpu's plugin library is missing from the package: {p}")
    return p


def register(ort=None, name: str = REGISTRATION_NAME):
    """Registers the plugin with onnxruntime (once per process) and returns rcpu's EP devices.

    ``ort`` is the onnxruntime module (imported when not given). The returned list is what
    ``SessionOptions.add_provider_for_devices(devices, options)`` takes. Calling it again returns
    the devices without registering twice.
    """
    if ort is None:
        import onnxruntime as ort  # the app's own onnxruntime; never a dependency of this package
    with _lock:
        if _registered.get(id(ort)) is None:
            try:
                ort.register_execution_provider_library(name, library_path())
            except Exception as e:  # already registered under this name by someone else is fine
                if not any(d.ep_name == EP_NAME for d in ort.get_ep_devices()):
                    raise RuntimeError(f"registering {library_path()} as '{name}' failed: {e}") from e
            _registered[id(ort)] = name
    devices = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    if not devices:
        raise RuntimeError(f"onnxruntime lists no {EP_NAME} device after registering the plugin")
    return devices


def _lib() -> ctypes.CDLL:
    # The same path ORT loaded, so the loader hands back the same object (and its counters).
    lib = ctypes.CDLL(library_path())
    lib.RcpuEp_StatsJson.restype = ctypes.c_size_t
    lib.RcpuEp_StatsJson.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.RcpuEp_ResetStats.restype = None
    lib.RcpuEp_ResetStats.argtypes = []
    return lib


def stats() -> dict:
    """rcpu's counters, dispatch ledger and memory figures (``RcpuEp_StatsJson``) as a dict."""
    lib = _lib()
    need = lib.RcpuEp_StatsJson(None, 0)
    while True:
        buf = ctypes.create_string_buffer(need + 1)
        got = lib.RcpuEp_StatsJson(buf, len(buf))
        if got <= need:
            return json.loads(buf.value.decode("utf-8"))
        need = got  # grew between the two calls


def reset_stats() -> None:
    """Zeroes rcpu's counters and ledger (``RcpuEp_ResetStats``)."""
    _lib().RcpuEp_ResetStats()
