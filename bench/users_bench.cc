// Cost in a node's number of users (issue #22, item 8): verify, fuse and the whole
// quantize flow on a "fan-out" network, where one placeholder has N users, next to a
// chain with the same number of nodes. Both are N conv -> relu pairs (1 channel, 1x1
// kernels, so calibration is cheap and the graph work dominates):
//
//   fan-out  x -> conv_i -> relu_i  for i < N,   output((relu_0, ..., relu_{N-1}))
//   chain    x -> conv_0 -> relu_0 -> conv_1 -> ... -> relu_{N-1},  output(relu_{N-1})
//
// Both have 2N + 2 nodes; the fan-out's x has N users and its output N inputs. A cost
// linear in users keeps each fan-out figure within 2x of the chain's.
//
//   bazel run -c opt //bench:users_bench -- --benchmark_filter=/100000
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend_configs/builtin_configs.h"
#include "benchmark/benchmark.h"
#include "graph/graph_module.h"
#include "patterns/fuse.h"
#include "pipeline/quantize_flow.h"
#include "quantize/calibrate.h"
#include "quantize/qconfig.h"

namespace fuselage {
namespace {

enum class Shape { kFanOut, kChain };

std::unique_ptr<Module> Conv(const Tensor& weight, const Tensor& bias) {
  auto m = std::make_unique<Module>("nn.Conv2d");
  m->SetTensor("weight", weight);
  m->SetTensor("bias", bias);
  m->SetAttribute("in_channels", Argument::Int(1));
  m->SetAttribute("out_channels", Argument::Int(1));
  m->SetAttribute("kernel_size", Argument::Ints({1, 1}));
  m->SetAttribute("stride", Argument::Ints({1, 1}));
  m->SetAttribute("padding", Argument::Ints({0, 0}));
  m->SetAttribute("dilation", Argument::Ints({1, 1}));
  m->SetAttribute("groups", Argument::Int(1));
  m->SetAttribute("padding_mode", Argument::String("zeros"));
  return m;
}

// N conv -> relu pairs in `shape`; aborts if the graph does not build (a bench bug).
std::unique_ptr<GraphModule> Network(Shape shape, int64_t pairs) {
  auto gm = std::make_unique<GraphModule>();
  Graph& g = gm->graph();
  const Tensor weight = Tensor::FromFloats({1, 1, 1, 1}, {0.5f});
  const Tensor bias = Tensor::FromFloats({1}, {0.25f});
  Node* x = *g.AddPlaceholder("x");
  Node* last = x;
  std::vector<Argument> outputs;
  for (int64_t i = 0; i < pairs; ++i) {
    const std::string conv = absl::StrCat("conv", i), relu = absl::StrCat("relu", i);
    if (!gm->SetModule(conv, Conv(weight, bias)).ok() ||
        !gm->SetModule(relu, std::make_unique<Module>("nn.ReLU")).ok()) {
      std::abort();
    }
    auto c = g.AddCallModule(conv, {shape == Shape::kFanOut ? x : last});
    if (!c.ok()) std::abort();
    auto r = g.AddCallModule(relu, {*c});
    if (!r.ok()) std::abort();
    last = *r;
    if (shape == Shape::kFanOut) outputs.push_back(Argument(last));
  }
  auto out = g.SetOutput(shape == Shape::kFanOut ? Argument::Tuple(std::move(outputs))
                                                  : Argument(last));
  if (!out.ok()) std::abort();
  return gm;
}

Shape ShapeOf(const benchmark::State& state) {
  return state.range(0) == 0 ? Shape::kChain : Shape::kFanOut;
}

void SetCounters(benchmark::State& state, const GraphModule& gm) {
  state.counters["nodes"] = static_cast<double>(gm.graph().size());
  state.counters["users_of_x"] = static_cast<double>(gm.graph().first()->num_users());
}

void BM_Verify(benchmark::State& state) {
  const auto gm = Network(ShapeOf(state), state.range(1));
  for (auto _ : state) {
    const absl::Status status = gm->Verify();
    if (!status.ok()) {
      state.SkipWithError(std::string(status.message()).c_str());
      break;
    }
  }
  SetCounters(state, *gm);
}

void BM_Fuse(benchmark::State& state) {
  const auto network = Network(ShapeOf(state), state.range(1));
  const auto matcher = BuildFusionMatcher(*GetBackendConfig("qnnpack"));
  if (!matcher.ok()) std::abort();
  for (auto _ : state) {
    state.PauseTiming();
    auto gm = network->Clone();
    state.ResumeTiming();
    auto fused = FusePatterns(*gm, *matcher);
    if (!fused.ok() || *fused != state.range(1)) {
      state.SkipWithError("fusion failed or fused another number of patterns");
      break;
    }
    state.PauseTiming();
    gm.reset();
    state.ResumeTiming();
  }
  SetCounters(state, *network);
}

void BM_QuantizeFlow(benchmark::State& state) {
  const auto network = Network(ShapeOf(state), state.range(1));
  const auto config = *GetBackendConfig("qnnpack");
  const auto mapping = *DefaultQConfigMapping("qnnpack");
  auto samples = RandomCalibrationSamples(*network, 1, 0, {{"x", {1, 1, 1, 1}}});
  if (!samples.ok()) std::abort();
  for (auto _ : state) {
    state.PauseTiming();
    auto gm = network->Clone();
    state.ResumeTiming();
    auto report = RunQuantizeFlow(*gm, config, mapping, *samples);
    if (!report.ok()) {
      state.SkipWithError(std::string(report.status().message()).c_str());
      break;
    }
    state.PauseTiming();
    gm.reset();
    state.ResumeTiming();
  }
  SetCounters(state, *network);
}

// shape 0 = chain, 1 = fan-out; pairs = N (the fan-out's x has N users).
#define USERS_ARGS                                                                    \
  ArgNames({"fan_out", "pairs"})                                                       \
      ->ArgsProduct({{0, 1}, {10000, 100000}})                                         \
      ->Unit(benchmark::kMillisecond)                                                  \
      ->Iterations(1)                                                                  \
      ->Repetitions(3)                                                                 \
      ->ReportAggregatesOnly(true)
BENCHMARK(BM_Verify)->USERS_ARGS;
BENCHMARK(BM_Fuse)->USERS_ARGS;
BENCHMARK(BM_QuantizeFlow)->USERS_ARGS;

}  // namespace
}  // namespace fuselage

BENCHMARK_MAIN();
