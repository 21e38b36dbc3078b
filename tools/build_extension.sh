#!/usr/bin/env bash
# Builds the compiled Python extension (//python:fuselage_core) and copies it into
# python/fuselage/, where `import fuselage._core` finds it (gitignored). The copy goes to
# a temporary name in that folder first and is renamed over the old one, so a process
# importing it never sees half a file. tools/demo.sh and tools/test.sh call this.
set -euo pipefail
cd "$(dirname "$0")/.."
SO=_fuselage_core.cpython-311-x86_64-linux-gnu.so
bazel build //python:fuselage_core
tmp="$(mktemp python/fuselage/.${SO}.XXXXXX)"
trap 'rm -f "$tmp"' EXIT
cp "bazel-bin/python/${SO}" "$tmp"
chmod 0755 "$tmp"
mv -f "$tmp" "python/fuselage/${SO}"
trap - EXIT
echo "build_extension: python/fuselage/${SO}"
