#!/usr/bin/env bash
# The GPU check in one command: python benchmarks/gpu_check.py, plus what a bare GPU machine needs.
#
#   bash benchmarks/gpu_check.sh [gpu_check.py options]
#
# - Uses .venv/bin/python when present, else python3 (the GPU image's torch/triton/transformers).
# - If thresher._native cannot be imported (no build for this Python), compiles it in place with
#   the machine's C++ compiler and torch's bundled pybind11 headers: the check runs the public
#   path (Compressor.load(..., device="cuda", backend="torch")), which packs with it.
# - Provence's sentences need nltk: carry its wheel where the GPU image lacks it.
# - Writes the JSON to $OUT/gpu_check.json when $OUT is set (device runs), else benchmarks/out/.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=python3
[ -x .venv/bin/python ] && PY=.venv/bin/python
# Not installed (a bare GPU machine): import from the source tree.
"$PY" -c "import thresher" 2>/dev/null || export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
if ! "$PY" -c "import thresher._native" 2>/dev/null; then
  suffix=$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
  incs=$("$PY" -c "import sysconfig, torch.utils.cpp_extension as c; print(' '.join('-I' + p for p in [sysconfig.get_paths()['include'], *c.include_paths()]))" 2>/dev/null || true)
  if command -v c++ >/dev/null && [ -n "$incs" ]; then
    c++ -O3 -std=c++17 -shared -fPIC $incs bindings/packer.cpp bindings/tree_packer.cpp \
      -o "src/thresher/_native$suffix" 2>/tmp/thresher_native_build.log \
      && echo "built src/thresher/_native$suffix" \
      || { echo "could not build thresher._native (see /tmp/thresher_native_build.log)"; exit 1; }
  fi
fi
out_args=()
[ -n "${OUT:-}" ] && out_args=(--out "$OUT/gpu_check.json")
exec "$PY" benchmarks/gpu_check.py ${out_args[@]+"${out_args[@]}"} "$@"
