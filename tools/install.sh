#!/usr/bin/env bash
# Builds fuselage and installs it into PREFIX (default /usr/local):
#   bash tools/install.sh [PREFIX]
# PREFIX/bin/fuselage (on PATH for /usr/local; every command works from any folder),
# PREFIX/lib/libfuselage.so, its headers under PREFIX/include/fuselage and
# PREFIX/lib/pkgconfig/fuselage.pc, so C++ code outside Bazel builds with
#   g++ my.cc $(pkg-config --cflags --libs fuselage)
# (for another PREFIX: PKG_CONFIG_PATH=PREFIX/lib/pkgconfig and PATH=PREFIX/bin:$PATH).
# tests/tools/install_test.sh installs into a temporary PREFIX the same way.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix="${1:-/usr/local}"
if [[ "$prefix" != /* ]]; then prefix="$(pwd -P)/$prefix"; fi
bazel run //tools:install_files -- "$prefix"
