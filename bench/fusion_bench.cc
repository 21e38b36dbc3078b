// Fusion pass benchmarks (FusePatterns with the native config's patterns, then nothing
// else) over synthetic networks of 10^3 to 10^6 nodes. Each iteration fuses a fresh copy
// of the network; building and freeing the copy is not timed. items_per_second = nodes of
// the unfused graph per second. PyTorch's counterpart is fuse_fx.
//
//   bazel run -c opt //bench:fusion_bench
#include "bench/bench_common.h"
#include "graph/check.h"
#include "patterns/fuse.h"

namespace fuselage {
namespace {

void BM_FuseNative(benchmark::State& state) {
  const PatternMatcher& matcher = BuiltinFusionMatcher("native");
  int64_t nodes = 0;
  int fused = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto gm = SyntheticNetwork(state.range(0));
    nodes = static_cast<int64_t>(gm->graph().size());
    state.ResumeTiming();
    auto result = FusePatterns(*gm, matcher);
    state.PauseTiming();
    FUSELAGE_CHECK(result.ok());
    fused = *result;
    gm.reset();
    state.ResumeTiming();
  }
  SetNodesPerSecond(state, nodes);
  state.counters["fused"] = static_cast<double>(fused);
}

BENCHMARK(BM_FuseNative)->RangeMultiplier(10)->Range(1000, 1000000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace fuselage

BENCHMARK_MAIN();
