#!/usr/bin/env bash
# llama.cpp against rcpu and ORT's CPU EP on the same weights. Builds llama.cpp's `llama-bench` (the
# llama.cpp sources inside the llama-cpp-python sdist on PyPI, pinned by version and sha256; CPU only,
# -march=native), writes the generated model as a GGUF of the same int4 codes and f16 scales
# (e2e/python/gguf_from_onnx.py, checked as it is written), then runs e2e/python/og_bench.py with the
# llama.cpp arm: ORT and rcpu through onnxruntime-genai's generation loop, llama.cpp through
# llama-bench, each arm in its own process, interleaved rounds (docs/benchmarking.md, "Against
# llama.cpp").
#
#   scripts/llamacpp_compare.sh [SPEC] [og_bench options...]
#
# SPEC defaults to llm:preset=qwen2-0.5b,acc=4 (int4, tied q4 embedding, block 32: what Q4_0 holds);
# llm:preset=llama-3.2-1b,acc=4 is the other dense preset, and llm:preset=gpt-oss-20b,layers=4 the
# mixture of experts (llama.cpp's gpt-oss architecture: the QMoE experts as Q4_0 ffn_*_exps, router,
# sinks, sliding-window layers; a 4.7 GB ONNX model and a 4.5 GB GGUF at 4 layers). For a QMoE model
# og_bench's parity tolerance is 0.9 (rcpu-bench's level-4 gate for QMoE models: near-tied router
# logits pick different experts under int8 rounding) unless a --tol is given. LLAMACPP_PARITY=1 first
# compares llama.cpp's logits with ORT's (e2e/python/llamacpp_parity.py, through llama-cpp-python built
# from the same sdist into the venv: another build). Not part of test.sh or demo.sh: the first run
# builds a C++ project (~10 minutes on two cores; later runs reuse target/llamacpp).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bash "$here/setup.sh"
# shellcheck source=env.sh
source "$here/env.sh"
cd "$RCPU_ROOT"
spec="${1:-llm:preset=qwen2-0.5b,acc=4}"
[ $# -gt 0 ] && shift
version=0.3.36
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
work="$RCPU_ROOT/target/llamacpp"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
bench="$src/build/bin/llama-bench"
py="$RCPU_ROOT/.venv/bin/python"
mkdir -p "$work"

tarball="$work/llama_cpp_python-$version.tar.gz"
if [ ! -x "$bench" ] || [ "${LLAMACPP_PARITY:-0}" = 1 ]; then
  if [ ! -f "$tarball" ]; then
    # The sdist's address from the package index's simple page (PEP 503; pip's index unless
    # PIP_INDEX_URL names another), its links absolute or relative to the page.
    url="$("$py" - "$version" <<'PY'
import os, re, sys, urllib.parse, urllib.request
index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
page = f"{index}/llama-cpp-python/"
html = urllib.request.urlopen(page).read().decode()
name = f"llama_cpp_python-{sys.argv[1]}.tar.gz"
hrefs = [h for h in re.findall(r'href="([^"]+)"', html) if h.split("#")[0].endswith("/" + name)]
if not hrefs:
    sys.exit(f"llamacpp_compare: {name} not listed at {page}")
print(urllib.parse.urljoin(page, hrefs[0].split("#")[0]))
PY
)"
    echo "[llamacpp] downloading $url"
    "$py" -c "import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])" "$url" "$tarball.part"
    mv "$tarball.part" "$tarball"
  fi
  echo "$sha256  $tarball" | sha256sum -c --quiet
fi
if [ ! -x "$bench" ]; then
  tar -xzf "$tarball" -C "$work"
  "$py" -m pip install -q cmake ninja
  echo "[llamacpp] building llama-bench (CPU, native ISA)"
  PATH="$RCPU_ROOT/.venv/bin:$PATH" cmake -S "$src" -B "$src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF > "$work/cmake.log"
  PATH="$RCPU_ROOT/.venv/bin:$PATH" cmake --build "$src/build" --target llama-bench -j "$(nproc)" > "$work/build.log"
fi

# RCPU_NO_BUILD=1: use target/release as it is (another checkout's build, or one being edited meanwhile).
[ "${RCPU_NO_BUILD:-0}" = 1 ] || cargo build --release
target/release/rcpu-bench gen "$spec" --out "$work/model/model.onnx" > /dev/null
"$py" e2e/python/gguf_from_onnx.py "$work/model" "$work/model.gguf"
if [ "${LLAMACPP_PARITY:-0}" = 1 ]; then
  # llama-bench gives no logits: llama-cpp-python (the same sdist, built into the venv once) does.
  if ! "$py" -c "import llama_cpp" 2> /dev/null; then
    echo "[llamacpp] building llama-cpp-python $version for the parity check"
    CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_CURL=OFF" "$py" -m pip install -q "$tarball" > "$work/pip-llama-cpp-python.log" 2>&1 ||
      { echo "[llamacpp] building llama-cpp-python failed: $work/pip-llama-cpp-python.log" >&2; exit 1; }
  fi
  "$py" e2e/python/llamacpp_parity.py "$work/model" "$work/model.gguf"
fi
tol=()
case "$spec" in
  *preset=gpt-oss-20b*) tol=(--tol 0.9) ;;  # a QMoE model; a later --tol in "$@" wins
esac
"$py" e2e/python/og_bench.py "$work/model" --llamacpp "$bench" --gguf "$work/model.gguf" ${tol[@]+"${tol[@]}"} "$@"
