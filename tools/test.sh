#!/usr/bin/env bash
# Installs what is missing, runs every test suite, and ends with one summary line
# `N passed, N failed`. Exits non-zero if anything failed.
#
# Each step adds to the two counters; a step counts whatever unit it runs (Bazel test
# targets, Python test cases, fuzz targets, sanitizer builds) and says so in its output.
set -uo pipefail
cd "$(dirname "$0")/.."

PASSED=0
FAILED=0

# Bazel test targets under //tests/...: counted from Bazel's per-target summary lines
# ("//tests/graph:graph_test    PASSED in 0.1s", "FAILED", "FAILED TO BUILD",
# "TIMEOUT", "NO STATUS", ...).
step_bazel_tests() {
  local log
  log="$(mktemp)"
  bazel test --keep_going //tests/... 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local passed failed
  passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
  failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|FAILED TO BUILD|TIMEOUT|NO STATUS|INCOMPLETE|FLAKY)' "$log")
  rm -f "$log"
  # A failure Bazel reports without per-target lines (e.g. a BUILD file that does not
  # load) still counts once.
  if [[ $rc -ne 0 && $failed -eq 0 ]]; then failed=1; fi
  echo "bazel tests: $passed passed, $failed failed (test targets)"
  PASSED=$((PASSED + passed))
  FAILED=$((FAILED + failed))
}

# ---- Steps --------------------------------------------------------------------------
# Later work adds its step here: a function that runs its suite and adds to PASSED and
# FAILED, then its name in STEPS.
#   step_python_conformance   python/ bridge and conformance against PyTorch (pytest)
#   step_fuzz                 short libFuzzer runs of the model loader and parsers
#   step_sanitizers           //tests/... under ASan/UBSan (clang-14)
STEPS=(
  step_bazel_tests
)

if ! bash tools/install_deps.sh; then
  echo "0 passed, 1 failed"
  exit 1
fi

for step in "${STEPS[@]}"; do
  echo "==== $step"
  "$step"
done

echo "$PASSED passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
