#!/usr/bin/env bash
# Builds the rcpu Python wheel (python/): the release plugin library plus the `rcpu` helpers,
# tagged py3-none-<platform>. Writes dist/rcpu-<version>-py3-none-<platform>.whl and prints its
# path on the last line. Usage: scripts/build_wheel.sh [--no-build] (skip `cargo build`).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bash "$here/setup.sh" >/dev/null
# shellcheck source=env.sh
source "$here/env.sh"
cd "$RCPU_ROOT"
if [ "${1:-}" != "--no-build" ]; then
  cargo build --release -p rcpu-ep
fi
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
# Build from a copy so the source tree never holds the library or build folders.
cp -r python "$stage/python"
cp Cargo.toml "$stage/Cargo.toml"
cp "$RCPU_PLUGIN" "$stage/python/rcpu/librcpu_ep.so"
# Debug info stays in target/; the wheel carries the stripped library.
strip --strip-debug "$stage/python/rcpu/librcpu_ep.so" 2>/dev/null || true
mkdir -p dist
"$RCPU_VENV/bin/python" -m pip wheel -q --no-deps -w dist "$stage/python" >&2
ls -t dist/rcpu-*.whl | head -n 1
