// Lower-to-native benchmarks: LowerToNative with the native lowering rules on the
// reference quantized graph of a synthetic network (fuse → prepare → calibrate on one
// random input → convert-to-reference, with the qnnpack config and qnnpack's default
// qconfig mapping, as `fuselage quantize --reference` makes it). Each iteration lowers a
// fresh copy; making and freeing the copy is not timed. items_per_second = nodes of the
// reference graph per second. PyTorch's counterpart is the lowering inside convert_fx.
//
//   bazel run //bench:lowering_bench -- --benchmark_repetitions=3
//       --benchmark_report_aggregates_only=true   (one command line)
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend_configs/builtin_configs.h"
#include "bench/bench_common.h"
#include "graph/check.h"
#include "lowering/lower_to_native.h"
#include "lowering/lowering_rule.h"
#include "pipeline/quantize_flow.h"
#include "quantize/calibrate.h"
#include "quantize/qconfig.h"

namespace fuselage {
namespace {

std::unique_ptr<GraphModule> BuildReferenceNetwork(int64_t nodes) {
  auto gm = SyntheticNetwork(nodes);
  const auto config = GetBackendConfig("qnnpack");
  const auto mapping = DefaultQConfigMapping("qnnpack");
  FUSELAGE_CHECK(config.ok() && mapping.ok());
  auto samples = RandomCalibrationSamples(*gm, 1, 0, {{"x", {1, 8, 8, 8}}});
  FUSELAGE_CHECK(samples.ok());
  QuantizeFlowOptions options;
  options.stop_at_reference = true;
  auto report = RunQuantizeFlow(*gm, *config, *mapping, *samples, options);
  FUSELAGE_CHECK(report.ok());
  return gm;
}

// The reference graph of a synthetic network of `nodes` nodes, built once per size and
// process: every repetition of a size lowers copies of the same graph, and the build (a
// whole quantize flow with calibration) is what made the 10^6 point take many minutes
// when each repetition rebuilt it.
const GraphModule& ReferenceNetwork(int64_t nodes) {
  // Benchmarks run one at a time, so the cache needs no lock.
  static auto* cache = new std::map<int64_t, std::unique_ptr<GraphModule>>();
  std::unique_ptr<GraphModule>& reference = (*cache)[nodes];
  if (reference == nullptr) reference = BuildReferenceNetwork(nodes);
  return *reference;
}

void BM_LowerToNative(benchmark::State& state) {
  LoweringRuleRegistry registry;
  FUSELAGE_CHECK(RegisterNativeLoweringRules(registry).ok());
  const GraphModule* const reference = &ReferenceNetwork(state.range(0));
  int lowered = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto gm = reference->Clone();
    state.ResumeTiming();
    auto report = LowerToNative(*gm, registry);
    state.PauseTiming();
    FUSELAGE_CHECK(report.ok());
    lowered = report->total_lowered();
    gm.reset();
    state.ResumeTiming();
  }
  SetNodesPerSecond(state, static_cast<int64_t>(reference->graph().size()));
  state.counters["lowered"] = static_cast<double>(lowered);
}

// 10^6 nodes: building the reference graph (fuse, prepare, calibrate, convert) takes a
// minute or two and several GB (HistogramObservers' bins while calibrating), once per
// process; filter it out for a quick run (--benchmark_filter='/1000$|/10000$').
BENCHMARK(BM_LowerToNative)
    ->RangeMultiplier(10)
    ->Range(1000, 1000000)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace fuselage

BENCHMARK_MAIN();
