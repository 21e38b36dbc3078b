#!/usr/bin/env bash
# Installs what fuselage needs to build and test on Debian 12, and only what is missing:
# with everything present it runs one dpkg-query and exits (no apt-get update).
# Runs as root, or through sudo when available.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap bazel-platforms bazel-skylib
  libabsl-dev libprotobuf-dev protobuf-compiler
  libgtest-dev libgmock-dev libbenchmark-dev libeigen3-dev libdnnl-dev libsleef-dev
  g++ clang-14 libclang-rt-14-dev libomp-14-dev
  python3-torch python3-torchvision python3-protobuf python3-numpy python3-pytest
  python3-dev libcli11-dev
  graphviz pkg-config
)

missing=()
for package in "${PACKAGES[@]}"; do
  status="$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)"
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$package")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install_deps: installing ${missing[*]}"
if [[ "$(id -u)" -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "install_deps: missing packages (${missing[*]}) and not root; run as root" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update
"${as_root[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
