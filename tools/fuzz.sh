#!/usr/bin/env bash
# Builds fuselage's fuzz targets with clang 14 + libFuzzer (+ASan+UBSan) and runs each over
# its checked-in corpus for a bounded time. Prints executions and coverage per target and
# exits non-zero if any target found a crash or broke a property (the input is kept and
# its path printed: add it to tests/fuzz/corpus/<target>/ as a regression).
#
# usage: tools/fuzz.sh [seconds_per_target] [target ...]      (default 60 s, all targets)
# env:   FUSELAGE_FUZZ_WORKDIR  keep the grown corpora and crashes here across runs
#                               (default: a fresh temporary directory)
#        FUSELAGE_FUZZ_JOBS     targets run in parallel (default 1; the machine is shared)
#        FUSELAGE_FUZZ_SEED     libFuzzer's -seed (default 1: the short CI runs explore the
#                               same inputs every time, so CI is reproducible; use 0 for a
#                               random seed in long development runs)
#        FUSELAGE_CLANG_OUTPUT_BASE  Bazel output base of the clang builds
#        FUSELAGE_FUZZ_FLAGS    extra libFuzzer flags, e.g. "-fork=1 -ignore_crashes=1" for
#                               a long run that keeps going past a known finding (each
#                               crash is still saved under artifacts/ and fails the run)
#
# The clang builds use their own Bazel output base (and server), so they never evict the
# gcc build everyone else uses.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-60}"
shift || true
# One clang output base per checkout: two checkouts sharing one would evict each other.
output_base="${FUSELAGE_CLANG_OUTPUT_BASE:-${HOME:-/root}/.cache/bazel-clang-$(pwd | md5sum | cut -c1-12)}"
bazel_clang=(bazel "--output_base=${output_base}")
workdir="${FUSELAGE_FUZZ_WORKDIR:-$(mktemp -d /tmp/fuselage-fuzz.XXXXXX)}"
jobs="${FUSELAGE_FUZZ_JOBS:-1}"
seed="${FUSELAGE_FUZZ_SEED:-1}"
read -r -a extra_flags <<<"${FUSELAGE_FUZZ_FLAGS:-}"

if [[ $# -gt 0 ]]; then
  targets=("$@")
else
  # Every fuselage_fuzz_target (tests/fuzz/fuzz_target.bzl) carries the fuzz_target tag.
  mapfile -t labels < <("${bazel_clang[@]}" query --noshow_progress \
    'attr(tags, "fuzz_target", //tests/fuzz:*)' 2>/dev/null)
  targets=()
  for label in "${labels[@]}"; do targets+=("${label##*:}"); done
fi
[[ ${#targets[@]} -gt 0 ]] || { echo "fuzz.sh: no fuzz targets found" >&2; exit 2; }

build_labels=()
for t in "${targets[@]}"; do build_labels+=("//tests/fuzz:${t}"); done
bin_dir="$("${bazel_clang[@]}" info --config=fuzz bazel-bin 2>/dev/null)"
"${bazel_clang[@]}" build --config=fuzz "${build_labels[@]}"

# Runs one target; writes its summary line to $workdir/<target>/summary.
run_target() {
  local target="$1" dir="${workdir}/$1"
  mkdir -p "${dir}/corpus" "${dir}/artifacts"
  local log="${dir}/fuzz.log" status=0
  # New inputs go to the first (scratch) corpus dir; the checked-in corpus is read only.
  # malloc_limit_mb: no single allocation may approach what a small input could justify.
  nice -n 19 "${bin_dir}/tests/fuzz/${target}" \
    -max_total_time="${seconds}" -seed="${seed}" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 \
    -max_len=16384 -print_final_stats=1 -artifact_prefix="${dir}/artifacts/" \
    ${extra_flags[@]+"${extra_flags[@]}"} "${dir}/corpus" "tests/fuzz/corpus/${target}" >"${log}" 2>&1 || status=$?
  # With -ignore_crashes libFuzzer may exit 0 after saving crashes: a saved crash fails.
  if [[ ${status} -eq 0 && -n "$(ls -A "${dir}/artifacts")" ]]; then status=1; fi
  local execs cov ft units
  execs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "${log}" | grep -o '[0-9]*$' || true)"
  cov="$(grep -o 'cov: [0-9]*' "${log}" | tail -1 | grep -o '[0-9]*' || true)"
  ft="$(grep -o 'ft: [0-9]*' "${log}" | tail -1 | grep -o '[0-9]*' || true)"
  units="$(ls "${dir}/corpus" | wc -l)"
  if [[ ${status} -eq 0 ]]; then
    echo "${target}: OK  ${execs:-?} execs in ${seconds}s, cov ${cov:-?} edges, ft ${ft:-?}, +${units} new corpus inputs" \
      >"${dir}/summary"
  else
    echo "${target}: FAILED (exit ${status}) after ${execs:-?} execs; input(s): $(ls "${dir}/artifacts" | sed "s|^|${dir}/artifacts/|" | tr '\n' ' ')  log: ${log}" \
      >"${dir}/summary"
    grep -m1 -B2 -A25 'ERROR: \|fuzz property failed\|runtime error' "${log}" >&2 || tail -40 "${log}" >&2
  fi
  return "${status}"
}

failed=0
running=0
for t in "${targets[@]}"; do
  run_target "${t}" &
  running=$((running + 1))
  if [[ ${running} -ge ${jobs} ]]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
done
while [[ ${running} -gt 0 ]]; do
  wait -n || failed=1
  running=$((running - 1))
done

echo "---- fuzz results (${seconds}s per target, work dir ${workdir})"
for t in "${targets[@]}"; do cat "${workdir}/${t}/summary"; done
exit "${failed}"
