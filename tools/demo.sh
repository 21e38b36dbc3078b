#!/usr/bin/env bash
# The README's main job: install what is missing, then run `fuselage demo` on the
# built-in residual example: load, verify, print, then fuse -> prepare -> calibrate ->
# convert -> lower with the conv-bn-add-relu config, printing the code at each stage.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
bazel run //tools:fuselage -- demo "$@"
