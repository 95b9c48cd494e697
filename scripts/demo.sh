#!/usr/bin/env bash
# The rcpu demo: set-up, build, then `rcpu-bench demo` (ORT CPU EP vs rcpu, side by side, on a
# generated 4-layer 4096x4096 int4 decode chain; see docs/benchmarking.md). Extra arguments go to
# `rcpu-bench demo` (e.g. --rounds 12 --iters 20 --json demo.json).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bash "$here/setup.sh"
# shellcheck source=env.sh
source "$here/env.sh"
cd "$RCPU_ROOT"
cargo build --release
target/release/rcpu-bench demo "$@"
