// Every pass on one model file, e.g. an exported torchvision resnet50:
//
//   PYTHONPATH=python /usr/bin/python3 -m fuselage export-torchvision resnet50 /tmp/r50.fsl
//   bazel run //bench:model_file_bench -- --model=/tmp/r50.fsl
//
// Stages (one benchmark each, items_per_second = nodes of the graph the stage reads):
//   load     ParseModel of the file's bytes (validation included)
//   save     SerializeModel
//   match    the native config's fusion matcher (read-only)
//   fuse     FusePatterns with the native config, on a fresh copy each iteration
//   prepare  Prepare with qnnpack's config and default qconfig mapping, on the fused graph
//   convert  ConvertToReference of that prepared graph (uncalibrated: the cost of the
//            pass does not depend on the statistics)
//   lower    LowerToNative of the reference graph made by the quantize flow, calibrated
//            once on one seeded random input of the shapes the exporter recorded
// Copies each iteration starts from are made outside the timing. The synthetic-network
// suites (matcher_bench, fusion_bench, quantize_bench, lowering_bench) cover sizes; this
// one covers a real network, where weights dominate the cost of fuse, load and save.
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend_configs/builtin_configs.h"
#include "bench/bench_common.h"
#include "graph/serialization.h"
#include "lowering/lower_to_native.h"
#include "lowering/lowering_rule.h"
#include "patterns/fuse.h"
#include "quantize/calibrate.h"
#include "quantize/convert.h"
#include "quantize/prepare.h"
#include "quantize/qconfig.h"
#include "tools/quantize_flow.h"

namespace fuselage {
namespace {

// A failed setup step is reported by the benchmark instead of a result.
struct Setup {
  std::string bytes;
  std::unique_ptr<GraphModule> model;
  std::unique_ptr<GraphModule> fused;      // native config
  std::unique_ptr<GraphModule> reference;  // qnnpack, calibrated once
  std::string error;
};

std::string StatusText(const absl::Status& status) { return std::string(status.ToString()); }

Setup Failed(std::string error) {
  Setup setup;
  setup.error = std::move(error);
  return setup;
}

Setup Load(const std::string& path) {
  Setup setup;
  auto bytes = ReadFile(path, int64_t{4} << 30);
  if (!bytes.ok()) return Failed(StatusText(bytes.status()));
  setup.bytes = *std::move(bytes);
  auto model = ParseModel(setup.bytes);
  if (!model.ok()) return Failed(StatusText(model.status()));
  setup.model = *std::move(model);

  setup.fused = setup.model->Clone();
  if (absl::Status s = FusePatterns(*setup.fused, BuiltinFusionMatcher("native")).status();
      !s.ok()) {
    return Failed("fuse: " + StatusText(s));
  }

  setup.reference = setup.model->Clone();
  auto config = GetBackendConfig("qnnpack");
  auto mapping = DefaultQConfigMapping("qnnpack");
  if (!config.ok() || !mapping.ok()) return Failed("qnnpack config missing");
  auto samples = RandomCalibrationSamples(*setup.reference, 1, /*seed=*/0);
  if (!samples.ok()) return Failed("calibration input: " + StatusText(samples.status()));
  QuantizeFlowOptions options;
  options.stop_at_reference = true;
  auto report = RunQuantizeFlow(*setup.reference, *config, *mapping, *samples, options);
  if (!report.ok()) return Failed("quantize flow: " + StatusText(report.status()));
  return setup;
}

void SetNodes(benchmark::State& state, const GraphModule& gm) {
  SetNodesPerSecond(state, static_cast<int64_t>(gm.graph().size()));
}

// Runs `pass` on a fresh copy of `input` per iteration; the copy is not timed.
void TimeOnCopies(benchmark::State& state, const GraphModule& input,
                  const std::function<absl::Status(GraphModule&)>& pass) {
  for (auto _ : state) {
    state.PauseTiming();
    auto gm = input.Clone();
    state.ResumeTiming();
    if (absl::Status s = pass(*gm); !s.ok()) {
      state.SkipWithError(StatusText(s).c_str());
      return;
    }
    state.PauseTiming();
    gm.reset();  // freeing a copy of the weights is not the pass's cost
    state.ResumeTiming();
  }
  SetNodes(state, input);
}

void RegisterStages(const Setup& setup) {
  benchmark::RegisterBenchmark("load", [&setup](benchmark::State& state) {
    for (auto _ : state) {
      auto gm = ParseModel(setup.bytes);
      if (!gm.ok()) return state.SkipWithError(StatusText(gm.status()).c_str());
      benchmark::DoNotOptimize(gm->get());
    }
    SetNodes(state, *setup.model);
  });
  benchmark::RegisterBenchmark("save", [&setup](benchmark::State& state) {
    for (auto _ : state) benchmark::DoNotOptimize(SerializeModel(*setup.model));
    SetNodes(state, *setup.model);
  });
  benchmark::RegisterBenchmark("match", [&setup](benchmark::State& state) {
    const PatternMatcher& matcher = BuiltinFusionMatcher("native");
    for (auto _ : state) benchmark::DoNotOptimize(matcher.FindMatches(*setup.model));
    SetNodes(state, *setup.model);
  });
  benchmark::RegisterBenchmark("fuse", [&setup](benchmark::State& state) {
    TimeOnCopies(state, *setup.model, [](GraphModule& gm) {
      return FusePatterns(gm, BuiltinFusionMatcher("native")).status();
    });
  });
  benchmark::RegisterBenchmark("prepare", [&setup](benchmark::State& state) {
    const auto config = *GetBackendConfig("qnnpack");
    const auto mapping = *DefaultQConfigMapping("qnnpack");
    TimeOnCopies(state, *setup.fused, [&](GraphModule& gm) {
      return Prepare(gm, mapping, config).status();
    });
  });
  benchmark::RegisterBenchmark("convert", [&setup](benchmark::State& state) {
    const auto config = *GetBackendConfig("qnnpack");
    const auto mapping = *DefaultQConfigMapping("qnnpack");
    for (auto _ : state) {
      state.PauseTiming();
      auto gm = setup.fused->Clone();
      auto prepared = Prepare(*gm, mapping, config);
      if (!prepared.ok()) return state.SkipWithError(StatusText(prepared.status()).c_str());
      state.ResumeTiming();
      auto report = ConvertToReference(*gm, *prepared);
      if (!report.ok()) return state.SkipWithError(StatusText(report.status()).c_str());
      state.PauseTiming();
      gm.reset();
      state.ResumeTiming();
    }
    SetNodes(state, *setup.fused);
  });
  benchmark::RegisterBenchmark("lower", [&setup](benchmark::State& state) {
    LoweringRuleRegistry registry;
    if (!RegisterNativeLoweringRules(registry).ok()) return state.SkipWithError("rules");
    TimeOnCopies(state, *setup.reference, [&](GraphModule& gm) {
      return LowerToNative(gm, registry).status();
    });
  });
}

}  // namespace
}  // namespace fuselage

int main(int argc, char** argv) {
  // --model=PATH is ours; everything else goes to Google Benchmark.
  std::string model_path;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--model=", 8) == 0) {
      model_path = argv[i] + 8;
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (model_path.empty()) {
    std::fprintf(stderr,
                 "usage: model_file_bench --model=PATH [benchmark flags]\n"
                 "  e.g. PYTHONPATH=python /usr/bin/python3 -m fuselage export-torchvision "
                 "resnet50 /tmp/r50.fsl\n");
    return 2;
  }
  const fuselage::Setup setup = fuselage::Load(model_path);
  if (!setup.error.empty()) {
    std::fprintf(stderr, "model_file_bench: %s: %s\n", model_path.c_str(), setup.error.c_str());
    return 1;
  }
  std::fprintf(stderr, "%s: %zu nodes, %zu nodes fused, %zu nodes in the reference graph\n",
               model_path.c_str(), setup.model->graph().size(), setup.fused->graph().size(),
               setup.reference->graph().size());
  fuselage::RegisterStages(setup);
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
