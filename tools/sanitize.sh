#!/usr/bin/env bash
# Runs fuselage's test suite under AddressSanitizer (+LeakSanitizer) and then under
# UndefinedBehaviorSanitizer, both built with clang 14 (configs in .bazelrc). Exits
# non-zero if either run fails.
#
# usage: tools/sanitize.sh [asan|ubsan|asan_ubsan|tsan ...] [-- target patterns]
#        (default: asan then ubsan, //tests/...; asan_ubsan is both in one build, as CI runs it;
#        tsan is ThreadSanitizer, for the threading tests: tsan -- //tests/graph:threading_test)
# env:   FUSELAGE_CLANG_OUTPUT_BASE  Bazel output base of the clang builds
#
# The clang builds use their own Bazel output base (and server), so they never evict the
# gcc build everyone else uses. Debian's absl/protobuf/gtest stay uninstrumented.
set -euo pipefail
cd "$(dirname "$0")/.."

# One clang output base per checkout: two checkouts sharing one would evict each other.
output_base="${FUSELAGE_CLANG_OUTPUT_BASE:-${HOME:-/root}/.cache/bazel-clang-$(pwd | md5sum | cut -c1-12)}"
configs=()
patterns=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --) shift; patterns=("$@"); break ;;
    asan|ubsan|asan_ubsan|tsan) configs+=("$1"); shift ;;
    *) echo "sanitize.sh: unknown argument '$1' (expected asan, ubsan, asan_ubsan, tsan or -- patterns)" >&2; exit 2 ;;
  esac
done
[[ ${#configs[@]} -gt 0 ]] || configs=(asan ubsan)
[[ ${#patterns[@]} -gt 0 ]] || patterns=(//tests/...)

failed=()
for config in "${configs[@]}"; do
  echo "==== bazel test --config=${config} ${patterns[*]}"
  bazel "--output_base=${output_base}" test --keep_going "--config=${config}" -- "${patterns[@]}" \
    || failed+=("${config}")
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "sanitize.sh: FAILED under: ${failed[*]}" >&2
  exit 1
fi
echo "sanitize.sh: all tests clean under: ${configs[*]}"
