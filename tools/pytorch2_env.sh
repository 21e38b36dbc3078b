#!/usr/bin/env bash
# Creates the PyTorch 2 environment fuselage is tested against, if it is missing, and
# prints the path of its Python as its last line:
#
#   py="$(bash tools/pytorch2_env.sh | tail -n 1)"; "$py" -c "import torch, fuselage"
#
# It is a virtual environment outside the checkout, so every clone on the machine (CI's
# fresh ones included) shares one 5.5 GB install:
#   $FUSELAGE_PYTORCH2_ENV, else ${XDG_CACHE_HOME:-$HOME/.cache}/fuselage/pytorch2
# (third_party/pybind11/pybind11.bzl looks there too: change both together).
# It holds torch and torchvision (the pair whose wheels are on this machine's disk),
# torchao (PT2E), onnx and onnxruntime, pytest, and pybind11 >= 2.12 (the extension's
# headers: earlier pybind11 reads NumPy 2's dtypes wrongly; see third_party/pybind11).
# An environment whose packages are not the pinned ones is completed by pip, not rebuilt.
# The C++ library and the CLI never need it; Debian's PyTorch 1.13 (/usr/bin/python3)
# stays as it is.
set -euo pipefail

env_dir="${FUSELAGE_PYTORCH2_ENV:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/fuselage/pytorch2}"
# The wheels of torch 2.14.1 + torchvision 0.29.1 lie on this machine's disk for CPython 3.11,
# and the extension is built for 3.11 (python/BUILD.bazel names its suffix).
REQUIREMENTS=(
  torch==2.14.1 torchvision==0.29.1 torchao==0.18.0
  onnx==1.23.1 onnxruntime==1.30.0
  pytest==9.1.1 pybind11==3.1.0 protobuf==6.33.6
)
stamp="$env_dir/.fuselage-requirements"
wanted="${REQUIREMENTS[*]}"

if [[ -x "$env_dir/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$wanted" ]]; then
  echo "pytorch2_env: present at $env_dir" >&2
  echo "$env_dir/bin/python"
  exit 0
fi

base_python=""
for candidate in python3.11 python3; do
  path="$(command -v "$candidate" || true)"
  [[ -n "$path" && "$path" != /usr/bin/* ]] || continue
  if "$path" -c 'import sys, venv; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
    base_python="$path"
    break
  fi
done
if [[ -z "$base_python" ]]; then
  echo "pytorch2_env: no CPython 3.11 with venv on PATH besides Debian's /usr/bin/python3" \
       "(which keeps PyTorch 1.13); install one (e.g. pyenv 3.11) and run again" >&2
  exit 1
fi

# A venv is not relocatable, so it is made in place; the stamp, written only after pip
# succeeded, is what marks it complete (an interrupted run is completed by the next).
if [[ ! -x "$env_dir/bin/python" ]]; then
  echo "pytorch2_env: creating $env_dir with $base_python" >&2
  mkdir -p "$(dirname "$env_dir")"
  "$base_python" -m venv "$env_dir"
fi

echo "pytorch2_env: installing ${wanted}" >&2
"$env_dir/bin/python" -m pip install --quiet "${REQUIREMENTS[@]}" >&2
"$env_dir/bin/python" -c 'import torch, torchvision, torchao, onnx, onnxruntime, pybind11' >&2
echo "$wanted" > "$stamp"
echo "$env_dir/bin/python"
