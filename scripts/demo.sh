#!/usr/bin/env bash
# The rcpu demo: set-up, build, then `rcpu-bench demo`: a generated Qwen2-0.5B-shaped int4 LLM (24 layers,
# vocab 151936, tied embeddings through GatherBlockQuantized, accuracy_level 4; seeded weights, generated
# once into /tmp/rcpu-bench-models) generating tokens on ORT's CPU EP, on rcpu and on a null arm (rcpu
# again), each in its own process, interleaved rounds: a 64-token prefill then 24 greedy decode steps per
# arm and round. Prints parity, per arm prefill and decode tokens/s, p50/p90 ms per token, CPU ms per
# token and peak RSS, then always a HEADLINE line (ORT/rcpu with its null band, the steady-state verdict
# beside it), and writes the per-token latency plot (target/demo/latency.svg). Method: docs/benchmarking.md.
# Extra arguments go to `rcpu-bench demo` (e.g. --tokens 64 --rounds 8 --svg plot.svg --json demo.json).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bash "$here/setup.sh"
# shellcheck source=env.sh
source "$here/env.sh"
cd "$RCPU_ROOT"
cargo build --release
target/release/rcpu-bench demo "$@"
