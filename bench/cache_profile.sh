#!/bin/bash
# Where each pass's time goes as the graph grows (bench/RESULTS.md, "Issue 7 after
# session 8"): callgrind with a model of this machine's per-core caches (D1 48 KiB 12-way;
# the last level modelled is the 4 MiB L2), collecting only inside the pass, at 10^3 and
# 10^5 nodes. Prints instructions, D1 misses and L2 misses per node of the benchmark's
# graph. Instruction counts do not depend on the machine's load; the run takes ~30 min.
#
#   bazel build //bench/... && bash bench/cache_profile.sh bazel-bin/bench /tmp/cache
set -u
B=${1:?usage: cache_profile.sh BENCH_BINARY_DIR OUTDIR}
O=${2:?usage: cache_profile.sh BENCH_BINARY_DIR OUTDIR}
mkdir -p "$O"
profile() {
  local tag=$1 pass=$2 bench=$3 case=$4 n=$5
  valgrind --tool=callgrind --cache-sim=yes --D1=49152,12,64 --LL=4194304,16,64 \
    --callgrind-out-file="$O/$tag.$n" --toggle-collect="fuselage::$pass*" \
    "$B/$bench" --benchmark_filter="$case/$n\$" --benchmark_min_time=0.01 > "$O/$tag.$n.log" 2>&1
  # Totals: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw; nodes from the benchmark's counter.
  local totals nodes
  totals=$(callgrind_annotate --show-percs=no "$O/$tag.$n" | grep -m1 "PROGRAM TOTALS" | tr -d ,)
  nodes=$(grep -oE "nodes=[0-9.]+k?" "$O/$tag.$n.log" | head -1 | sed 's/nodes=//')
  echo "$totals" | awk -v tag="$tag" -v n="$n" -v nodes="$nodes" '{
    N = nodes; if (nodes ~ /k$/) N = substr(nodes, 1, length(nodes) - 1) * 1000
    printf "%-8s %7d nodes  %6.0f instr/node  %5.1f D1 misses/node  %5.1f L2 misses/node (%.1f reads + %.1f writes)\n",
           tag, N, $1 / N, ($5 + $6) / N, ($8 + $9) / N, $8 / N, $9 / N }'
}
for n in 1000 100000; do
  profile fusion FusePatterns fusion_bench BM_FuseNative $n
  profile prepare Prepare quantize_bench BM_Prepare $n
  profile convert ConvertToReference quantize_bench BM_Convert $n
  profile lower LowerToNative lowering_bench BM_LowerToNative $n
done
