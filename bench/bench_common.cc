#include "bench/bench_common.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend_configs/backend_config.h"
#include "backend_configs/builtin_configs.h"
#include "bench/synthetic_network.h"
#include "graph/check.h"
#include "graph/tensor.h"
#include "quantize/observers.h"

namespace fuselage {

std::unique_ptr<GraphModule> SyntheticNetwork(int64_t nodes, bool create_modules) {
  SyntheticNetworkOptions options;
  options.target_nodes = nodes;
  options.create_modules = create_modules;
  auto gm = BuildSyntheticNetwork(options);
  FUSELAGE_CHECK(gm.ok());
  return *std::move(gm);
}

void SetNodesPerSecond(benchmark::State& state, int64_t nodes) {
  state.SetItemsProcessed(state.iterations() * nodes);
  state.counters["nodes"] = static_cast<double>(nodes);
}

const PatternMatcher& BuiltinFusionMatcher(const char* backend) {
  // Benchmarks are single-threaded; the cache lives for the process.
  static auto* cache = new std::map<std::string, PatternMatcher>();
  auto it = cache->find(backend);
  if (it == cache->end()) {
    auto config = GetBackendConfig(backend);
    FUSELAGE_CHECK(config.ok());
    auto matcher = BuildFusionMatcher(*config);
    FUSELAGE_CHECK(matcher.ok());
    it = cache->emplace(backend, *std::move(matcher)).first;
  }
  return it->second;
}

const PatternMatcher& NativePlusGeneratedMatcher(int extra) {
  static auto* cache = new std::map<int, PatternMatcher>();
  auto it = cache->find(extra);
  if (it != cache->end()) return it->second;

  std::vector<FusionRule> rules;
  for (const FusionRule& rule : BuiltinFusionMatcher("native").rules()) rules.push_back(rule);
  // Outermost ops present in the synthetic networks; inner chains of ops that never
  // appear in that order there (each chain ends in an op the network lacks, or nests
  // ops the wrong way round).
  const char* outer[] = {"nn.ReLU", "operator.add", "nn.BatchNorm2d",
                         "torch.nn.functional.relu", "nn.MaxPool2d"};
  const char* inner[] = {"nn.Conv1d", "nn.Conv3d", "nn.BatchNorm1d", "nn.BatchNorm3d",
                         "nn.Linear", "nn.MaxPool2d", "nn.ReLU", "nn.Conv2d"};
  const int kOuter = 5, kInner = 8;
  for (int i = 0; i < extra; ++i) {
    // Chains of 2 and 3 inner ops; (i / kOuter) enumerates them.
    const int k = i / kOuter;
    const char* a = inner[k % kInner];
    const char* b = inner[(k / kInner + 1 + k) % kInner];
    const char* c = inner[(k * 3 + 5) % kInner];
    const std::string text =
        absl::StrCat("(", outer[i % kOuter], ", (", a, ", (", b, ", (", c, ", nn.Conv1d))))");
    auto rule = MakeFusionRule(absl::StrCat("generated_", i), text, PatternFormat::kComplex,
                               "nni.ConvReLU2d", FuserKind::kWrapInSequence);
    FUSELAGE_CHECK(rule.ok());
    rules.push_back(*std::move(rule));
  }
  auto matcher = PatternMatcher::Create(std::move(rules));
  FUSELAGE_CHECK(matcher.ok());
  return cache->emplace(extra, *std::move(matcher)).first->second;
}

QConfigMapping MinMaxActivationMapping(const char* backend) {
  absl::StatusOr<QConfig> qconfig = DefaultQConfig(backend);
  FUSELAGE_CHECK(qconfig.ok());
  qconfig->activation.kind = ObserverKind::kMinMax;
  QConfigMapping mapping;
  mapping.SetGlobal(*qconfig);
  return mapping;
}

void StandInCalibration(PreparedModel& prepared) {
  const Tensor range = Tensor::FromFloats({2}, {-1.0f, 1.0f});
  for (auto& [path, observer] : prepared.observers) {
    FUSELAGE_CHECK(observer->Update(range).ok());
  }
}

}  // namespace fuselage
