#!/usr/bin/env bash
# Set-up, build, all tests: cargo tests of the library, e2e Rust tests against real ORT, pytest.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bash "$here/setup.sh"
# shellcheck source=env.sh
source "$here/env.sh"
cd "$RCPU_ROOT"
echo "[test] cargo build --release"
cargo build --release --workspace
echo "[test] cargo test (library, e2e against onnxruntime $(cat "$RCPU_VENV/ort_lib_path" | sed 's/.*libonnxruntime.so.//'))"
cargo test --release --workspace
echo "[test] python wheel (scripts/build_wheel.sh), installed into the venv for e2e/python/test_wheel.py"
wheel="$(bash scripts/build_wheel.sh --no-build | tail -n 1)"
"$RCPU_VENV/bin/python" -m pip install -q --force-reinstall --no-deps "$wheel"
echo "[test] pytest"
"$RCPU_VENV/bin/python" -m pytest -q e2e/python
