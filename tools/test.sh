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
# One line per failed unit, printed again just above the summary line: CI shows only the
# tail of the log, and a failure must be readable there.
FAILURES=()

# Runs a suite (its output shown), counts its passed and failed units with a counter
# function, and adds them to the totals. A non-zero exit with no failure counted (a crash,
# a BUILD file that does not load, no torch) still counts once.
#   run_counted LABEL UNIT COUNTER COMMAND...
# COUNTER reads the log file named by its argument and prints "<passed> <failed>".
run_counted() {
  local label=$1 unit=$2 counter=$3
  shift 3
  local log
  log="$(mktemp)"
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local passed failed
  read -r passed failed < <("$counter" "$log")
  if [[ $rc -ne 0 || $failed -ne 0 ]]; then record_failures "$label" "$rc" "$log"; fi
  rm -f "$log"
  if [[ $rc -ne 0 && $failed -eq 0 ]]; then failed=1; fi
  echo "$label: $passed passed, $failed failed ($unit)"
  PASSED=$((PASSED + passed))
  FAILED=$((FAILED + failed))
}

# Adds the failure lines of a suite's log to FAILURES: Bazel targets (with the end of
# each failed target's gtest failures, or of its test.log), pytest's FAILED / ERROR lines, conformance models and
# fuzz targets; a suite that exited non-zero with none of these shows its last lines.
#   record_failures LABEL RC LOG
record_failures() {
  local label=$1 rc=$2 log=$3 line target found=0
  while IFS= read -r line; do
    found=1
    FAILURES+=("$label: $line")
    if [[ $line =~ ^//([^:]+):([^ ]+) ]]; then
      local test_log="bazel-testlogs/${BASH_REMATCH[1]}/${BASH_REMATCH[2]}/test.log"
      if [[ -f $test_log ]]; then
        while IFS= read -r target; do FAILURES+=("    $target"); done < <(
          { grep -A 4 -E ': Failure$|^\[  FAILED  \]' "$test_log" || tail -n 15 "$test_log"; } | head -n 30)
      fi
    fi
  done < <(grep -E '^//[^ ]+ +(\(cached\) )?(FAILED|FAILED TO BUILD|TIMEOUT|NO STATUS|INCOMPLETE|FLAKY)|^(FAILED|ERROR) |^CONFORMANCE [^ ]+ FAILED$|^[a-z_0-9]+: FAILED |\| FAILED: ' "$log")
  if [[ $found -eq 0 ]]; then
    FAILURES+=("$label: exit code $rc; its last lines:")
    while IFS= read -r line; do FAILURES+=("    $line"); done < <(tail -n 15 "$log")
  fi
}

# Bazel's per-target summary lines ("//tests/graph:graph_test    PASSED in 0.1s",
# "FAILED", "FAILED TO BUILD", "TIMEOUT", "NO STATUS", ...).
count_bazel_targets() {
  echo "$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$1")" \
       "$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|FAILED TO BUILD|TIMEOUT|NO STATUS|INCOMPLETE|FLAKY)' "$1")"
}

# pytest's closing line ("34 passed, 1 failed, 2 errors in 55.1s").
count_pytest_cases() {
  echo "$(grep -oE '[0-9]+ passed' "$1" | tail -1 | grep -oE '[0-9]+' || echo 0)" \
       "$(grep -oE '[0-9]+ (failed|errors?)' "$1" | awk '{s += $1} END {print s + 0}')"
}

# "CONFORMANCE <model> PASSED|FAILED", one line per model.
count_conformance_models() {
  echo "$(grep -cE '^CONFORMANCE [^ ]+ PASSED$' "$1")" "$(grep -cE '^CONFORMANCE [^ ]+ FAILED$' "$1")"
}

# tests/conformance/pytorch_fx_suite/run.py's "  percentage: ..." line, and "below the bar"
# when the share of PyTorch's passing tests that pass with fuselage is under --min-percent.
count_fx_suite() {
  local below
  below="$(grep -c '^below the bar' "$1")"
  echo "$(($(grep -cE '^ +percentage: ' "$1") - below))" "$below"
}

# tools/fuzz.sh's "<target>: OK ..." / "<target>: FAILED ..." lines.
count_fuzz_targets() {
  echo "$(grep -cE '^[a-z_0-9]+: OK ' "$1")" "$(grep -cE '^[a-z_0-9]+: FAILED ' "$1")"
}

step_bazel_tests() {
  run_counted "bazel tests" "test targets" count_bazel_targets \
    bazel test --keep_going //tests/...
}

# Debian's PyTorch 1.13 keeps a smaller suite: the residual example (docs/guide/python.md) through
# fuselage.quantize_fx and two torchvision models with per-module and per-type qconfigs,
# quantization-aware training (prepare_qat_fx), dynamic LSTM / GRU and the dynamic models,
# against 1.13's own, and the front door under hostile input.
PYTORCH_113_TESTS=(tests/python/test_quantize_fx.py tests/python/test_qat_fx.py
                   tests/python/test_dynamic_rnn_fx.py tests/python/test_dynamic_models.py
                   tests/python/test_hostile_front_door.py)
PYTORCH_113_CONFORMANCE_MODELS=residual_example,resnet18,mobilenet_v2

# The Python bridge's tests on PyTorch 2 (the reference), then the 1.13 suite, after the
# compiled extension (fuselage._core) is built and copied into python/fuselage/
# (tests/python/test_core.py imports it).
step_python() {
  if ! bash tools/build_extension.sh; then
    echo "python: the extension //python:fuselage_core does not build: 0 passed, 1 failed"
    FAILED=$((FAILED + 1))
  fi
  run_counted "python (PyTorch 2)" "test cases" count_pytest_cases \
    env PYTHONPATH=python "$PYTORCH2_PYTHON" -m pytest tests/python -q -p no:cacheprovider
  run_counted "python (PyTorch 1.13)" "test cases" count_pytest_cases \
    env PYTHONPATH=python /usr/bin/python3 -m pytest "${PYTORCH_113_TESTS[@]}" -q \
    -p no:cacheprovider
}

# Conformance against PyTorch 2's FX flow: op by op on resnet18, resnet50, mobilenet_v2,
# mobilenet_v3_large and the residual example (tests/conformance/conformance.py), and the
# reach of fuselage on twelve torchvision models (tests/conformance/reach.py), the PT2E flow
# against torchao's on six (tests/conformance/pt2e.py); each prints its figures. Then the
# residual example and two models against PyTorch 1.13, and PyTorch 1.13's own FX suite.
step_conformance() {
  run_counted "conformance (PyTorch 2)" "models" count_conformance_models \
    env PYTHONPATH=python "$PYTORCH2_PYTHON" tests/conformance/conformance.py
  run_counted "conformance reach (PyTorch 2)" "models" count_conformance_models \
    env PYTHONPATH=python "$PYTORCH2_PYTHON" tests/conformance/reach.py --no-build
  run_counted "conformance PT2E against torchao" "models" count_conformance_models \
    env PYTHONPATH=python "$PYTORCH2_PYTHON" tests/conformance/pt2e.py
  run_counted "conformance (PyTorch 1.13)" "models" count_conformance_models \
    env PYTHONPATH=python /usr/bin/python3 tests/conformance/conformance.py --no-build \
    --models "$PYTORCH_113_CONFORMANCE_MODELS"
  # PyTorch 1.13.1's own test_quantize_fx.py with fuselage's quantize_fx substituted: at
  # least 90 % of the tests that pass on PyTorch pass (issue 41; the rest, with reasons, in
  # tests/conformance/pytorch_fx_suite/KNOWN_FAILURES.md). PyTorch's own run is cached
  # outside the checkout after the first (~3 min).
  run_counted "PyTorch 1.13's FX suite with fuselage" "suite at >= 90 %" count_fx_suite \
    env PYTHONPATH=python /usr/bin/python3 tests/conformance/pytorch_fx_suite/run.py \
    --reuse-torch --min-percent 90
}

# Each fuzz target for FUSELAGE_FUZZ_SECONDS (default 30) over its checked-in corpus.
step_fuzz() {
  run_counted "fuzz" "fuzz targets" count_fuzz_targets \
    bash tools/fuzz.sh "${FUSELAGE_FUZZ_SECONDS:-30}"
}

# The tests of parsing (model files, configs), the passes (fusion, prepare, convert,
# lowering, the pipeline) and threads under AddressSanitizer + UndefinedBehaviorSanitizer in
# one clang-14 build (its own output base), then the threading tests under
# ThreadSanitizer. The kernels' and the CLI's tests are left to the full sweep,
# `bash tools/sanitize.sh asan_ubsan` (every //tests/... target; about 40 minutes cold).
SANITIZED_TESTS=(//tests/graph/... //tests/backend_configs/... //tests/patterns/...
                 //tests/quantize/... //tests/lowering/... //tests/pipeline/...)
THREADING_TESTS=(//tests/graph:threading_test)
step_sanitizers() {
  run_counted "sanitizers (asan+ubsan)" "test targets" count_bazel_targets \
    bash tools/sanitize.sh asan_ubsan -- "${SANITIZED_TESTS[@]}"
  run_counted "sanitizers (tsan)" "test targets" count_bazel_targets \
    bash tools/sanitize.sh tsan -- "${THREADING_TESTS[@]}"
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

# Debian's packages, then the PyTorch 2 environment (outside the checkout, made once per
# machine; the extension's pybind11 headers come from it). pytorch2_env.sh prints the
# environment's Python last.
if ! bash tools/install_deps.sh || ! PYTORCH2_PYTHON="$(bash tools/pytorch2_env.sh | tail -n 1)" \
    || [[ ! -x $PYTORCH2_PYTHON ]]; then
  echo "0 passed, 1 failed"
  exit 1
fi

# Each step's wall time, printed after it and again in a table at the end: CI's budget is
# the sum, and the table shows where it goes.
TIMES=()
for step in "${STEPS[@]}"; do
  echo "==== $step"
  started=$SECONDS
  "$step"
  took=$((SECONDS - started))
  TIMES+=("$(printf '%-20s %5d s' "$step" "$took")")
  echo "==== $step took $took s"
done
echo "==== wall time per step"
printf '%s\n' "${TIMES[@]}"

if [[ ${#FAILURES[@]} -gt 0 ]]; then
  echo "==== what failed"
  printf '%s\n' "${FAILURES[@]}"
fi
echo "$PASSED passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
