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

# Conformance against PyTorch 1.13 (tests/conformance/conformance.py): one case per model
# (resnet18, resnet50, mobilenet_v2, the residual example), counted from its
# "CONFORMANCE <model> PASSED|FAILED" lines; it prints the table of figures.
step_conformance() {
  local log
  log="$(mktemp)"
  PYTHONPATH=python /usr/bin/python3 tests/conformance/conformance.py 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local passed failed
  passed=$(grep -cE '^CONFORMANCE [^ ]+ PASSED$' "$log")
  failed=$(grep -cE '^CONFORMANCE [^ ]+ FAILED$' "$log")
  rm -f "$log"
  # A crash before any model ran (no torch, a build failure) still counts once.
  if [[ $rc -ne 0 && $failed -eq 0 ]]; then failed=1; fi
  echo "conformance: $passed passed, $failed failed (models)"
  PASSED=$((PASSED + passed))
  FAILED=$((FAILED + failed))
}

# The Python bridge's tests (pytest): one count per test case.
step_python() {
  local log
  log="$(mktemp)"
  PYTHONPATH=python /usr/bin/python3 -m pytest tests/python -q -p no:cacheprovider 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local passed failed
  passed=$(grep -oE '[0-9]+ passed' "$log" | tail -1 | grep -oE '[0-9]+' || echo 0)
  failed=$(grep -oE '[0-9]+ (failed|error)' "$log" | awk '{s += $1} END {print s + 0}')
  rm -f "$log"
  if [[ $rc -ne 0 && $failed -eq 0 ]]; then failed=1; fi
  echo "python: $passed passed, $failed failed (test cases)"
  PASSED=$((PASSED + passed))
  FAILED=$((FAILED + failed))
}

# Fuzz targets: each runs FUSELAGE_FUZZ_SECONDS (default 30) over its checked-in corpus;
# one count per target.
step_fuzz() {
  local log
  log="$(mktemp)"
  bash tools/fuzz.sh "${FUSELAGE_FUZZ_SECONDS:-30}" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local passed failed
  passed=$(grep -cE '^[a-z_0-9]+: OK ' "$log")
  failed=$(grep -cE '^[a-z_0-9]+: FAILED ' "$log")
  rm -f "$log"
  if [[ $rc -ne 0 && $failed -eq 0 ]]; then failed=1; fi
  echo "fuzz: $passed passed, $failed failed (fuzz targets)"
  PASSED=$((PASSED + passed))
  FAILED=$((FAILED + failed))
}

# //tests/... under AddressSanitizer + UndefinedBehaviorSanitizer in one clang-14 build
# (its own output base); one count per test target.
step_sanitizers() {
  local log
  log="$(mktemp)"
  bash tools/sanitize.sh asan_ubsan 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local passed failed
  passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
  failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|FAILED TO BUILD|TIMEOUT|NO STATUS|INCOMPLETE|FLAKY)' "$log")
  rm -f "$log"
  if [[ $rc -ne 0 && $failed -eq 0 ]]; then failed=1; fi
  echo "sanitizers (asan+ubsan): $passed passed, $failed failed (test targets)"
  PASSED=$((PASSED + passed))
  FAILED=$((FAILED + failed))
}

# ---- Steps --------------------------------------------------------------------------
# A step is a function that runs its suite and adds to PASSED and FAILED; add new ones
# to STEPS.
STEPS=(
  step_bazel_tests
  step_python
  step_conformance
  step_fuzz
  step_sanitizers
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
