#!/bin/bash
# Every stage's throughput in one go, as bench/RESULTS.md records it: fusion, prepare,
# convert and lower at 10^3, 10^4, 10^5 (three repetitions, aggregates) and at 10^6 (one
# run each), the matcher at 10^6, and graph bytes per node. One file per stage in OUTDIR.
# Run it on a quiet machine: the figures are CPU time, and other work moves them.
#
#   bazel build //bench/... && bash bench/run_stages.sh bazel-bin/bench /tmp/stages
set -u
B=${1:?usage: run_stages.sh BENCH_BINARY_DIR OUTDIR}
O=${2:?usage: run_stages.sh BENCH_BINARY_DIR OUTDIR}
mkdir -p "$O"
R="--benchmark_repetitions=3 --benchmark_report_aggregates_only=true"
run() {
  local name=$1; shift
  { date -u +%H:%M:%S; uptime; echo "\$ $*"; "$@"; date -u +%H:%M:%S; uptime; } > "$O/$name.txt" 2>&1
}
run fusion "$B/fusion_bench" --benchmark_filter='BM_FuseNative/(1000|10000|100000)$' $R
run prepare "$B/quantize_bench" --benchmark_filter='BM_Prepare/(1000|10000|100000)$' $R
run convert "$B/quantize_bench" --benchmark_filter='BM_Convert/(1000|10000|100000)$' $R
run lower "$B/lowering_bench" --benchmark_filter='BM_LowerToNative/(1000|10000|100000)$' $R
run m6 sh -c "'$B/fusion_bench' --benchmark_filter='BM_FuseNative/1000000\$'; \
  '$B/quantize_bench' --benchmark_filter='BM_(Prepare|Convert)/1000000\$'; \
  '$B/lowering_bench' --benchmark_filter='BM_LowerToNative/1000000\$'"
run matcher "$B/matcher_bench" --benchmark_filter='BM_Match(Native|NativePlus100)/1000000$' $R
run memory "$B/graph_bench" --benchmark_filter='BM_MemoryPerNode'
grep -h -E "_median|/1000000 |BM_Memory" "$O"/*.txt
