// Matcher-only benchmarks (PatternMatcher::FindMatches, read-only): the fusion patterns of
// a built-in backend config, and of native plus 100 generated patterns, over synthetic
// networks of 10^3 to 10^6 nodes. items_per_second = graph nodes scanned per second.
// PyTorch's counterpart is fuse_fx's `_find_matches` (bench/compare_pytorch.py).
//
//   bazel run -c opt //bench:matcher_bench
#include "bench/bench_common.h"

namespace fuselage {
namespace {

void RunMatcher(benchmark::State& state, const PatternMatcher& matcher) {
  auto gm = SyntheticNetwork(state.range(0));
  size_t matches = 0;
  for (auto _ : state) {
    std::vector<PatternMatch> found = matcher.FindMatches(*gm);
    matches = found.size();
    benchmark::DoNotOptimize(found);
  }
  SetNodesPerSecond(state, static_cast<int64_t>(gm->graph().size()));
  state.counters["matches"] = static_cast<double>(matches);
  state.counters["patterns"] = static_cast<double>(matcher.rules().size());
}

void BM_MatchNative(benchmark::State& state) {
  RunMatcher(state, BuiltinFusionMatcher("native"));
}

void BM_MatchOnednn(benchmark::State& state) {
  RunMatcher(state, BuiltinFusionMatcher("onednn"));
}

void BM_MatchNativePlus100(benchmark::State& state) {
  RunMatcher(state, NativePlusGeneratedMatcher(100));
}

BENCHMARK(BM_MatchNative)->RangeMultiplier(10)->Range(1000, 1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MatchOnednn)->RangeMultiplier(10)->Range(1000, 1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MatchNativePlus100)
    ->RangeMultiplier(10)
    ->Range(1000, 1000000)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace fuselage

BENCHMARK_MAIN();
