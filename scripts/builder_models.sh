#!/usr/bin/env bash
# Real model-builder models on rcpu. For each NAME[:LAYERS] (default: every configuration in
# e2e/python/hf_random_checkpoint.py that builder 0.18.0 builds, i.e. all but phi3.5-moe, all but
# three cut to 2-4 layers), writes a Hugging Face checkpoint of that model's configuration with
# seeded random weights, runs onnxruntime-genai's own model builder on it (`-p int4 -e cpu`, the
# form users run), and checks the model on rcpu with
# e2e/python/builder_check.py (one rcpu partition, level-0 logits equal to ORT's, level-4 logits as
# close to the level-0 answer as ORT's). Exit status: 1 when any model fails its check.
#
#   scripts/builder_models.sh [NAME[:LAYERS][@OPTIONS] ...]   e.g. scripts/builder_models.sh qwen3-0.6b qwen2-0.5b:24
#
# @OPTIONS are the builder's --extra_options (space-free, e.g. @algo_config=k_quant_mixed: k-quant
# weights with zero points, 8-bit lm_head and mixed layers). Models land in
# target/builder-models/NAME[-lLAYERS][-OPTIONS] (a genai folder: og_bench.py times it). The
# builder needs torch and transformers: they go into their own environment, target/builder-venv
# (~7 GB with the CUDA libraries PyPI's torch wheel pulls in; the first run downloads them), never
# into the test environment. Not part of test.sh or demo.sh for that reason. accelerate is there for
# gpt-oss: transformers loads an MXFP4 checkpoint only with it (then dequantized to bf16 on a CPU host).
# gpt-oss-20b:4 is the heaviest: a 4.0 GB checkpoint, ~6 minutes and 18 GB of memory in the builder,
# a 4.8 GB model.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bash "$here/setup.sh"
# shellcheck source=env.sh
source "$here/env.sh"
cd "$RCPU_ROOT"
cargo build --release -p rcpu-ep
venv="$RCPU_ROOT/target/builder-venv"
stamp="$venv/.builder-v2"
if [ ! -f "$stamp" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q torch==2.9.1 transformers==5.25.0 tokenizers==0.23.3 onnx==1.23.2 \
    onnx-ir==1.1.0 onnxruntime==1.31.1 onnxruntime-genai==0.18.0 accelerate==1.16.0 numpy
  touch "$stamp"
fi
builder_dir="$("$venv/bin/python" -c 'import os, onnxruntime_genai.models as m; print(os.path.dirname(m.__file__))')"
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(qwen2-0.5b qwen3-0.6b llama-3.2-1b phi3-mini:4 phi4-mini:2 gemma2-2b:4 \
  mistral-7b:2 smollm3-3b:2 granite-2b:2 olmo-1b:2 phi2:2 nemotron-4b:2 gpt-oss-20b:4 \
  qwen2-0.5b:2@algo_config=k_quant_mixed)
failed=()
for item in "${names[@]}"; do
  spec="${item%%@*}"
  options=""
  [ "$item" != "$spec" ] && options="${item#*@}"
  name="${spec%%:*}"
  layers=""
  [ "$spec" != "$name" ] && layers="${spec#*:}"
  out="$RCPU_ROOT/target/builder-models/$name${layers:+-l$layers}${options:+-${options//[=,:]/-}}"
  if [ ! -f "$out/genai_config.json" ]; then
    ckpt="$(mktemp -d)"
    echo "[builder] $item: random-weight checkpoint"
    "$venv/bin/python" e2e/python/hf_random_checkpoint.py "$name" "$ckpt" ${layers:+--layers "$layers"}
    echo "[builder] $item: onnxruntime-genai's model builder (-p int4 -e cpu${options:+ $options})"
    (cd "$builder_dir" && "$venv/bin/python" builder.py -i "$ckpt" -o "$out.part" -p int4 -e cpu \
      -c "$ckpt/cache" ${options:+--extra_options "$options"} > "$ckpt/builder.log" 2>&1) \
      || { tail -20 "$ckpt/builder.log"; rm -rf "$ckpt" "$out.part"; exit 1; }
    rm -rf "$ckpt" "$out"
    mv "$out.part" "$out"
  fi
  "$RCPU_VENV/bin/python" e2e/python/builder_check.py "$out" --plugin "$RCPU_PLUGIN" || failed+=("$item")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "[builder] FAILED: ${failed[*]}"
  exit 1
fi
echo "[builder] every model passed"
