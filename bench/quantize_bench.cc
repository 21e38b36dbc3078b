// The quantization flow on generated residual networks (bench/synthetic_network.h):
//  - BM_QuantizeFlow: the whole `fuselage quantize` flow (fuse → prepare → calibrate on
//    one random [1, 8, 8, 8] input → convert → lower) on a fresh copy of the network,
//    with MinMax observers and with qnnpack's default HistogramObservers;
//  - BM_Prepare / BM_Convert: the two passes alone at 1k to 1M nodes, to show they are
//    linear in the number of nodes (time per node stays flat);
//  - BM_ConvertCalibrated: convert after calibration, HistogramObservers' search included.
// The copy of the float network each iteration starts from is made, and the graph and
// prepared model it ends with are freed, outside the timing.
// Results and the command: bench/RESULTS.md.
#include <map>
#include <memory>
#include <vector>

#include "backend_configs/builtin_configs.h"
#include "bench/bench_common.h"
#include "bench/synthetic_network.h"
#include "benchmark/benchmark.h"
#include "patterns/fuse.h"
#include "pipeline/quantize_flow.h"
#include "quantize/calibrate.h"
#include "quantize/convert.h"
#include "quantize/prepare.h"
#include "quantize/qconfig.h"
#include "runtime/builtin_kernels.h"

namespace fuselage {
namespace {

constexpr int64_t kChannels = 8;

std::unique_ptr<GraphModule> Network(int64_t nodes) {
  SyntheticNetworkOptions options;
  options.target_nodes = nodes;
  options.channels = kChannels;
  auto gm = BuildSyntheticNetwork(options);
  if (!gm.ok()) std::abort();
  return std::move(*gm);
}

// The network fused with the qnnpack config (what prepare runs on), built once per size
// and process: BM_Prepare and BM_Convert, and every repetition of each, share it (at
// 10^6 nodes building and fusing it takes far longer than the passes measured).
// Benchmarks run one at a time, so the cache needs no lock.
const GraphModule& FusedNetwork(int64_t nodes, const BackendConfig& config) {
  static auto* cache = new std::map<int64_t, std::unique_ptr<GraphModule>>();
  std::unique_ptr<GraphModule>& fused = (*cache)[nodes];
  if (fused == nullptr) {
    fused = Network(nodes);
    auto matcher = BuildFusionMatcher(config);
    if (!matcher.ok() || !FusePatterns(*fused, *matcher).ok()) std::abort();
  }
  return *fused;
}

std::vector<CalibrationSample> OneSample(const GraphModule& gm) {
  auto samples = RandomCalibrationSamples(gm, 1, 0, {{"x", {1, kChannels, kChannels, kChannels}}});
  if (!samples.ok()) std::abort();
  return *samples;
}

// Frees an iteration's graph and prepared model with the timer paused: what is timed is
// the pass, not tearing down ~10^6 nodes and modules (as in lowering_bench).
template <typename PreparedOr>
void FreeUntimed(benchmark::State& state, std::unique_ptr<GraphModule>& gm,
                 PreparedOr& prepared) {
  state.PauseTiming();
  gm.reset();
  prepared = PreparedOr(absl::CancelledError("freed"));
  state.ResumeTiming();
}

void SetNodes(benchmark::State& state, int64_t nodes) {
  state.SetItemsProcessed(state.iterations() * nodes);
  state.counters["nodes"] = static_cast<double>(nodes);
}

// PyTorch's default_qconfig: MinMax activations (quint8), MinMax symmetric qint8 weights.
QConfigMapping MinMaxMapping() {
  ObserverSpec activation;
  activation.kind = ObserverKind::kMinMax;
  activation.dtype = DType::kQUInt8;
  QConfigMapping mapping;
  mapping.SetGlobal(QConfig{activation, DefaultWeightObserver()});
  return mapping;
}

// range(0): nodes; range(1): 1 = qnnpack's default qconfig mapping (HistogramObserver
// activations, as `fuselage quantize --backend=qnnpack` uses), 0 = MinMax observers.
void BM_QuantizeFlow(benchmark::State& state) {
  const auto config = *GetBackendConfig("qnnpack");
  const auto mapping = state.range(1) == 1 ? *DefaultQConfigMapping("qnnpack") : MinMaxMapping();
  const auto network = Network(state.range(0));
  const auto samples = OneSample(*network);
  for (auto _ : state) {
    state.PauseTiming();
    auto gm = network->Clone();
    state.ResumeTiming();
    auto report = RunQuantizeFlow(*gm, config, mapping, samples);
    if (!report.ok()) {
      state.SkipWithError(std::string(report.status().message()).c_str());
      break;
    }
    benchmark::DoNotOptimize(report->lowering.total_lowered());
  }
  SetNodes(state, static_cast<int64_t>(network->graph().size()));
}
BENCHMARK(BM_QuantizeFlow)
    ->Args({10000, 0})
    ->Args({10000, 1})
    ->ArgNames({"nodes", "histogram"})
    ->Unit(benchmark::kMillisecond);

void BM_Prepare(benchmark::State& state) {
  const auto config = *GetBackendConfig("qnnpack");
  const auto mapping = *DefaultQConfigMapping("qnnpack");
  const GraphModule* const fused = &FusedNetwork(state.range(0), config);
  for (auto _ : state) {
    state.PauseTiming();
    auto gm = fused->Clone();
    state.ResumeTiming();
    auto prepared = Prepare(*gm, mapping, config);
    if (!prepared.ok()) {
      state.SkipWithError(std::string(prepared.status().message()).c_str());
      break;
    }
    benchmark::DoNotOptimize(prepared->report.observer_nodes);
    FreeUntimed(state, gm, prepared);
  }
  SetNodes(state, static_cast<int64_t>(fused->graph().size()));
}
BENCHMARK(BM_Prepare)
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(100000)
    ->Arg(1000000)
    ->Unit(benchmark::kMillisecond);

// ConvertToReference on a fresh prepared copy of the fused network per iteration;
// preparing (and calibrating, if asked) is untimed.
void ConvertBenchmark(benchmark::State& state, bool calibrated) {
  const auto config = *GetBackendConfig("qnnpack");
  const auto mapping =
      calibrated ? *DefaultQConfigMapping("qnnpack") : MinMaxActivationMapping("qnnpack");
  const GraphModule* const fused = &FusedNetwork(state.range(0), config);
  std::vector<CalibrationSample> samples;
  std::unique_ptr<KernelRegistry> kernels;
  if (calibrated) {
    samples = OneSample(*fused);
    auto builtin = BuiltinKernels();
    if (!builtin.ok() || !RegisterObserverKernels(**builtin).ok()) std::abort();
    kernels = *std::move(builtin);
  }
  for (auto _ : state) {
    state.PauseTiming();
    auto gm = fused->Clone();
    auto prepared = Prepare(*gm, mapping, config);
    if (!prepared.ok()) std::abort();
    if (calibrated && !Calibrate(*gm, *prepared, samples, *kernels).ok()) std::abort();
    if (!calibrated) StandInCalibration(*prepared);
    state.ResumeTiming();
    auto report = ConvertToReference(*gm, *prepared);
    if (!report.ok()) {
      state.SkipWithError(std::string(report.status().message()).c_str());
      break;
    }
    benchmark::DoNotOptimize(report->observers_replaced);
    FreeUntimed(state, gm, prepared);
  }
  SetNodes(state, static_cast<int64_t>(fused->graph().size()));
}

// Convert with MinMax activation observers given a stand-in range (bench_common.h:
// convert refuses observers that saw nothing; these were uncalibrated histograms at
// PyTorch's default parameters until issue 22): the graph rewriting alone. With calibrated HistogramObservers, computing their
// parameters (PyTorch's _non_linear_param_search) costs more than the rewriting: see
// BM_ConvertCalibrated.
void BM_Convert(benchmark::State& state) { ConvertBenchmark(state, /*calibrated=*/false); }
BENCHMARK(BM_Convert)
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(100000)
    ->Arg(1000000)
    ->Unit(benchmark::kMillisecond);

// Convert after calibration on one random input, with qnnpack's default HistogramObservers
// (what `fuselage convert` does on a calibrated model): each observer's parameter search
// is part of the cost.
void BM_ConvertCalibrated(benchmark::State& state) { ConvertBenchmark(state, /*calibrated=*/true); }
BENCHMARK(BM_ConvertCalibrated)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace fuselage

BENCHMARK_MAIN();
