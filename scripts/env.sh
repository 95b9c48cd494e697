# Sourced by the scripts: paths every step agrees on.
RCPU_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export RCPU_ROOT
export RCPU_VENV="$RCPU_ROOT/.venv"
export RCPU_PLUGIN="$RCPU_ROOT/target/release/librcpu_ep.so"
if [ -f "$RCPU_VENV/ort_lib_path" ]; then
  RCPU_ORT_LIB="$(cat "$RCPU_VENV/ort_lib_path")"
  export RCPU_ORT_LIB
fi
