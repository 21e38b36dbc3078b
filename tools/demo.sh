#!/usr/bin/env bash
# The README's main job: install what is missing, then run `fuselage demo` on the
# built-in residual example (load -> verify -> print; later fuse -> quantize -> lower).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
bazel run //tools:fuselage -- demo "$@"
