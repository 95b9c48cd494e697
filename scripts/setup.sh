#!/usr/bin/env bash
# Set-up: a venv with the pinned onnxruntime/onnx wheels, and the location of libonnxruntime.so.
# Idempotent: re-running with everything in place takes a second.
# Writes .venv/ and .venv/ort_lib_path (the absolute path of libonnxruntime.so inside the wheel).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
PY="${PYTHON:-python3}"
venv="$root/.venv"
stamp="$venv/.rcpu-setup-v3"
if [ ! -f "$stamp" ]; then
  echo "[setup] creating venv at $venv"
  "$PY" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -r "$root/scripts/requirements.txt"
  touch "$stamp"
fi
lib="$("$venv/bin/python" - <<'PY'
import glob, os, onnxruntime
d = os.path.join(os.path.dirname(onnxruntime.__file__), "capi")
libs = sorted(glob.glob(os.path.join(d, "libonnxruntime.so*")))
print(libs[-1] if libs else "")
PY
)"
if [ -z "$lib" ]; then
  echo "[setup] libonnxruntime.so not found in the onnxruntime wheel" >&2
  exit 1
fi
echo "$lib" > "$venv/ort_lib_path"
echo "[setup] onnxruntime $("$venv/bin/python" -c 'import onnxruntime; print(onnxruntime.__version__)') at $lib"
