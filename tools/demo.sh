#!/usr/bin/env bash
# The README's main job: install what is missing, then run `fuselage demo` on the
# built-in residual example: load, verify, print, then fuse -> prepare -> calibrate ->
# convert -> lower with the conv-bn-add-relu config, printing the code at each stage.
# It also builds the Python extension and puts it into python/fuselage/, so that
# `PYTHONPATH=python /usr/bin/python3 -c "import fuselage._core"` works afterwards (the
# extension's pybind11 headers come from the PyTorch 2 environment, made here if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
bash tools/pytorch2_env.sh >/dev/null
bash tools/build_extension.sh
bazel run //tools:fuselage -- demo "$@"
