// Every pass on one model file, e.g. an exported torchvision resnet50:
//
//   PYTHONPATH=python /usr/bin/python3 -m fuselage export-torchvision resnet50 /tmp/r50.fsl
//   bazel run //bench:model_file_bench -- --model=/tmp/r50.fsl
//
// Stages (one benchmark each, items_per_second = nodes of the graph the stage reads):
//   load     ParseModel of the file's bytes (validation included)
//   save     SerializeModel
//   match    the native config's fusion matcher (read-only)
//   match_first  the same, as the CLI's `fuse --time` runs it: the first scan of a graph
//            just parsed from the file's bytes (module types not yet resolved; the
//            parse of ~100 MB has pushed the nodes out of the caches)
//   match_first_types_resolved  the same with the module types resolved untimed
//   fuse     FusePatterns with the native config, on a fresh copy each iteration
//   prepare  Prepare with qnnpack's config and default qconfig mapping, on the fused graph
//   convert  ConvertToReference of the fused graph prepared with MinMax activation
//            observers given a stand-in range (bench_common.h: StandInCalibration)
//   lower    LowerToNative of the reference graph made by the quantize flow, calibrated
//            once on one seeded random input of the shapes the exporter recorded
// And the memory floor under fuse and lower, on the model's own conv / linear weights
// (every float32 tensor named "weight" of rank >= 2):
//   floor_scale_fresh     one pass that reads each weight and writes it scaled per output
//                         channel into newly mapped memory: what the batch-norm fold
//                         does to a weight it must copy (the pass's input shares its
//                         weights copy-on-write); the new pages are faulted in and zeroed
//                         by the kernel, as the fold's are
//   floor_scale_warm      the same into buffers written before (no page faults): the
//                         machine's read + write bandwidth alone
//   floor_quantize_fresh  read float32, write one byte per element into fresh memory:
//                         the traffic of lowering's weight quantization
//   floor_quantize_warm   the same into buffers written before
// bytes_per_second counts bytes read plus bytes written.
// Copies each iteration starts from are made outside the timing. The synthetic-network
// suites (matcher_bench, fusion_bench, quantize_bench, lowering_bench) cover sizes; this
// one covers a real network, where weights dominate the cost of fuse, load and save.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <emmintrin.h>
#include <sys/mman.h>

#include "backend_configs/builtin_configs.h"
#include "bench/bench_common.h"
#include "graph/check.h"
#include "graph/file_io.h"
#include "graph/serialization.h"
#include "lowering/lower_to_native.h"
#include "lowering/lowering_rule.h"
#include "patterns/fuse.h"
#include "pipeline/quantize_flow.h"
#include "quantize/calibrate.h"
#include "quantize/convert.h"
#include "quantize/prepare.h"
#include "quantize/qconfig.h"

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
  auto bytes = ReadFileBounded(path, int64_t{4} << 30);
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

// The conv / linear weights of `module` and its children: float32 tensors named "weight"
// of rank >= 2 (batch-norm weights are rank 1).
void CollectWeights(const Module& module, std::vector<const Tensor*>& weights) {
  const Tensor* weight = module.FindTensor("weight");
  if (weight != nullptr && weight->dtype() == DType::kFloat32 && weight->dim() >= 2) {
    weights.push_back(weight);
  }
  for (const auto& [name, child] : module.children()) {
    if (child != nullptr) CollectWeights(*child, weights);
  }
}

// One pass over every weight: out = in * scale[output channel], sixteen floats per
// iteration with SSE (gcc -O2 leaves a plain loop scalar, which is not a floor).
void ScaleInto(const Tensor& weight, float* out) {
  const float* in = weight.data<float>();
  const int64_t channels = weight.shape()[0];
  const int64_t per_channel = weight.numel() / channels;
  for (int64_t c = 0; c < channels; ++c) {
    const float scale = 1.0f + static_cast<float>(c) * 0x1p-10f;
    const __m128 scale4 = _mm_set1_ps(scale);
    const float* src = in + c * per_channel;
    float* dst = out + c * per_channel;
    int64_t i = 0;
    for (; i + 16 <= per_channel; i += 16) {
      for (int k = 0; k < 16; k += 4) {
        _mm_storeu_ps(dst + i + k, _mm_mul_ps(_mm_loadu_ps(src + i + k), scale4));
      }
    }
    for (; i < per_channel; ++i) dst[i] = src[i] * scale;
  }
}

// Read float32, write one byte per value (the top byte of each value's bits), sixteen
// values per iteration with SSE: the memory traffic of the weight quantization (4 bytes
// in, 1 out) with less arithmetic than it has; not a quantization.
void QuantizeInto(const Tensor& weight, int8_t* out) {
  const float* in = weight.data<float>();
  const int64_t n = weight.numel();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i a = _mm_srai_epi32(_mm_castps_si128(_mm_loadu_ps(in + i)), 24);
    const __m128i b = _mm_srai_epi32(_mm_castps_si128(_mm_loadu_ps(in + i + 4)), 24);
    const __m128i c = _mm_srai_epi32(_mm_castps_si128(_mm_loadu_ps(in + i + 8)), 24);
    const __m128i d = _mm_srai_epi32(_mm_castps_si128(_mm_loadu_ps(in + i + 12)), 24);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm_packs_epi16(_mm_packs_epi32(a, b), _mm_packs_epi32(c, d)));
  }
  for (; i < n; ++i) {
    int32_t bits;
    std::memcpy(&bits, in + i, sizeof(bits));
    out[i] = static_cast<int8_t>(bits >> 24);
  }
}

// Memory the process has never touched, as in a fresh CLI process: mapped anonymously
// and unmapped at the end (malloc would hand back warm pages of an earlier iteration once
// its mmap threshold has grown).
class FreshPages {
 public:
  explicit FreshPages(size_t bytes) : bytes_(bytes) {
    data_ = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    FUSELAGE_CHECK(data_ != MAP_FAILED);
  }
  FreshPages(const FreshPages&) = delete;
  FreshPages& operator=(const FreshPages&) = delete;
  ~FreshPages() { munmap(data_, bytes_); }
  void* data() const { return data_; }

 private:
  size_t bytes_;
  void* data_;
};

void RegisterFloors(const Setup& setup) {
  auto* weights = new std::vector<const Tensor*>();  // lives as long as the benchmarks
  CollectWeights(setup.model->root(), *weights);
  int64_t elements = 0;
  for (const Tensor* w : *weights) elements += w->numel();
  std::fprintf(stderr, "floor: %zu weights, %.1f MB of float32\n", weights->size(),
               static_cast<double>(elements) * 4 / 1e6);
  benchmark::RegisterBenchmark("floor_scale_fresh", [weights, elements](benchmark::State& state) {
    for (auto _ : state) {
      for (const Tensor* w : *weights) {
        FreshPages out(static_cast<size_t>(w->numel()) * sizeof(float));
        ScaleInto(*w, static_cast<float*>(out.data()));
        benchmark::DoNotOptimize(out.data());
        benchmark::ClobberMemory();
      }
    }
    state.SetBytesProcessed(state.iterations() * elements * 8);
  });
  benchmark::RegisterBenchmark("floor_scale_warm", [weights, elements](benchmark::State& state) {
    std::vector<std::vector<float>> outs;
    for (const Tensor* w : *weights) outs.emplace_back(static_cast<size_t>(w->numel()), 1.0f);
    for (auto _ : state) {
      for (size_t i = 0; i < weights->size(); ++i) {
        ScaleInto(*(*weights)[i], outs[i].data());
        benchmark::DoNotOptimize(outs[i].data());
        benchmark::ClobberMemory();
      }
    }
    state.SetBytesProcessed(state.iterations() * elements * 8);
  });
  benchmark::RegisterBenchmark("floor_quantize_warm",
                               [weights, elements](benchmark::State& state) {
    std::vector<std::vector<int8_t>> outs;
    for (const Tensor* w : *weights) outs.emplace_back(static_cast<size_t>(w->numel()), 1);
    for (auto _ : state) {
      for (size_t i = 0; i < weights->size(); ++i) {
        QuantizeInto(*(*weights)[i], outs[i].data());
        benchmark::DoNotOptimize(outs[i].data());
        benchmark::ClobberMemory();
      }
    }
    state.SetBytesProcessed(state.iterations() * elements * 5);
  });
  benchmark::RegisterBenchmark("floor_quantize_fresh",
                               [weights, elements](benchmark::State& state) {
    for (auto _ : state) {
      for (const Tensor* w : *weights) {
        FreshPages out(static_cast<size_t>(w->numel()));
        QuantizeInto(*w, static_cast<int8_t*>(out.data()));
        benchmark::DoNotOptimize(out.data());
        benchmark::ClobberMemory();
      }
    }
    state.SetBytesProcessed(state.iterations() * elements * 5);
  });
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
  // resolve_untimed: ResolveModuleTypes before the timer starts, which splits the first
  // scan into resolving every call_module path and the scan proper.
  for (const bool resolve_untimed : {false, true}) {
    benchmark::RegisterBenchmark(
        resolve_untimed ? "match_first_types_resolved" : "match_first",
        [&setup, resolve_untimed](benchmark::State& state) {
          const PatternMatcher& matcher = BuiltinFusionMatcher("native");
          for (auto _ : state) {
            state.PauseTiming();
            auto gm = ParseModel(setup.bytes);
            if (!gm.ok()) return state.SkipWithError(StatusText(gm.status()).c_str());
            if (resolve_untimed) (*gm)->ResolveModuleTypes();
            state.ResumeTiming();
            benchmark::DoNotOptimize(matcher.FindMatches(**gm));
            state.PauseTiming();
            gm->reset();
            state.ResumeTiming();
          }
          SetNodes(state, *setup.model);
        })
        ->Iterations(40);  // each untimed parse takes ~1000x the timed scan
  }
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
    const QConfigMapping mapping = MinMaxActivationMapping("qnnpack");
    for (auto _ : state) {
      state.PauseTiming();
      auto gm = setup.fused->Clone();
      auto prepared = Prepare(*gm, mapping, config);
      if (!prepared.ok()) return state.SkipWithError(StatusText(prepared.status()).c_str());
      StandInCalibration(*prepared);
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
  fuselage::RegisterFloors(setup);
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
