#!/usr/bin/env bash
# Redraws the pictures of the residual example (docs/guide/cli.md), before and after lowering:
#   bash docs/images/make_images.sh
# (builds the CLI with Bazel; needs Graphviz's `dot`, which tools/install_deps.sh installs).
set -euo pipefail
cd "$(dirname "$0")/../.."
bazel build //tools:fuselage
fuselage=bazel-bin/tools/fuselage
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

$fuselage dot tools/examples/residual.textproto -o docs/images/residual_float.svg
$fuselage quantize tools/examples/residual.textproto --backend=qnnpack \
  --config=backend_configs/examples/conv_bn_add_relu.textproto --input-shape=1,4,8,8 \
  -o "$work/lowered.fsl" >/dev/null
$fuselage dot "$work/lowered.fsl" -o docs/images/residual_lowered.svg
