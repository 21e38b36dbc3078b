#include "tests/fuzz/pass_pipeline.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "backend_configs/backend_config.h"
#include "backend_configs/builtin_configs.h"
#include "backend_configs/config_loader.h"
#include "graph/argument.h"
#include "graph/graph_module.h"
#include "graph/node.h"
#include "graph/serialization.h"
#include "lowering/lower_to_native.h"
#include "lowering/lowering_rule.h"
#include "patterns/fuse.h"
#include "quantize/calibrate.h"
#include "quantize/convert.h"
#include "quantize/prepare.h"
#include "quantize/qconfig.h"
#include "runtime/builtin_kernels.h"
#include "runtime/kernel_registry.h"
#include "tests/fuzz/fuzz_check.h"

namespace fuselage::fuzz {
namespace {

bool Verbose() {
  static const bool verbose = [] {
    const char* v = std::getenv("FUSELAGE_FUZZ_VERBOSE");
    return v != nullptr && v[0] != '\0' && v[0] != '0';
  }();
  return verbose;
}

const LoweringRuleRegistry& NativeLoweringRules() {
  static const LoweringRuleRegistry* const registry = [] {
    auto* r = new LoweringRuleRegistry();
    const absl::Status registered = RegisterNativeLoweringRules(*r);
    FUZZ_CHECK(registered.ok(), registered.ToString());
    return r;
  }();
  return *registry;
}

// The built-in kernels plus the observers' identity kernels, as the quantize flow uses.
const KernelRegistry& CalibrationKernels() {
  static const KernelRegistry* const registry = [] {
    absl::StatusOr<std::unique_ptr<KernelRegistry>> kernels = BuiltinKernels();
    FUZZ_CHECK(kernels.ok(), kernels.status().ToString());
    const absl::Status registered = RegisterObserverKernels(**kernels);
    FUZZ_CHECK(registered.ok(), registered.ToString());
    return kernels->release();
  }();
  return *registry;
}

// A backend config with what the passes need of it. The built-in ones are built once per
// process: building a config and its matcher costs more than running the passes on a small
// model.
struct PipelineSetup {
  std::string name;
  BackendConfig config;
  std::optional<PatternMatcher> matcher;
  std::optional<QConfigMapping> mapping;         // get_default_qconfig_mapping(backend)
  std::optional<QConfigMapping> minmax_mapping;  // set_global(MinMax activations)
};

// QConfigMapping().set_global(qconfig) with PyTorch's default_qconfig-style MinMax
// activation observer (keeping the backend's reduce_range) and the backend's default weight
// observer: what many users write, and far cheaper to convert than the histogram
// observers of the default mapping (their parameter search is most of an execution).
QConfigMapping MinMaxMapping(const std::string& backend) {
  absl::StatusOr<QConfig> qconfig = DefaultQConfig(backend);
  FUZZ_CHECK(qconfig.ok(), qconfig.status().ToString());
  ObserverSpec activation;  // MinMaxObserver, quint8, per-tensor affine
  activation.reduce_range = qconfig->activation.reduce_range;
  qconfig->activation = activation;
  QConfigMapping mapping;
  mapping.SetGlobal(*qconfig);
  return mapping;
}

const PipelineSetup& SetupFor(uint8_t choice) {
  static const std::vector<std::unique_ptr<PipelineSetup>>* const setups = [] {
    auto* all = new std::vector<std::unique_ptr<PipelineSetup>>();
    for (const std::string& name : BuiltinBackendConfigNames()) {
      absl::StatusOr<BackendConfig> config = GetBackendConfig(name);
      FUZZ_CHECK(config.ok(), config.status().ToString());
      auto setup = std::make_unique<PipelineSetup>(PipelineSetup{name, *std::move(config), {}, {}, {}});
      absl::StatusOr<PatternMatcher> matcher = BuildFusionMatcher(setup->config);
      FUZZ_CHECK(matcher.ok(), absl::StrCat("built-in config '", name, "' gives no matcher: ",
                                            matcher.status().ToString()));
      setup->matcher.emplace(*std::move(matcher));
      // "native" has no default qconfig of its own in PyTorch; users pair it with fbgemm's.
      const std::string backend = name == "native" ? "fbgemm" : name;
      absl::StatusOr<QConfigMapping> mapping = DefaultQConfigMapping(backend);
      FUZZ_CHECK(mapping.ok(), absl::StrCat("no default qconfig mapping for built-in config '",
                                            name, "': ", mapping.status().ToString()));
      setup->mapping.emplace(*std::move(mapping));
      setup->minmax_mapping.emplace(MinMaxMapping(backend));
      all->push_back(std::move(setup));
    }
    return all;
  }();
  return *(*setups)[choice % setups->size()];
}

// Byte 0 = config index + count × (0: default mapping, 1: MinMax mapping), modulo 2 × count.
bool UsesMinMaxMapping(uint8_t choice) {
  const size_t count = BuiltinBackendConfigNames().size();
  return (choice / count) % 2 == 1;
}

// Random samples if every placeholder has a small enough meta "shape"; nullopt (skip
// calibration) otherwise.
std::optional<std::vector<CalibrationSample>> SmallCalibrationSamples(const GraphModule& gm) {
  for (const Node* p : gm.graph().Placeholders()) {
    const Argument* shape = p->FindMeta("shape");
    if (shape == nullptr || !shape->is_list()) return std::nullopt;
    int64_t elements = 1;
    for (const Argument& d : shape->items()) {
      if (!d.is_int() || d.as_int() < 0 || d.as_int() > kMaxSampleElements) return std::nullopt;
      elements *= d.as_int();  // each factor ≤ kMaxSampleElements and so is the product
      if (elements > kMaxSampleElements) return std::nullopt;
    }
  }
  absl::StatusOr<std::vector<CalibrationSample>> samples =
      RandomCalibrationSamples(gm, kCalibrationSamples, kCalibrationSeed);
  if (!samples.ok()) return std::nullopt;
  return *std::move(samples);
}

// Convert refuses an observer that saw no value (quantize/convert.h). So that convert and
// lower are still explored after calibration was skipped or failed, each such observer
// first sees the stand-in range [-1, 1] (observers the failed calibration did reach keep
// what they saw). An observer that cannot take it (e.g. a per-channel one) is left for
// convert to judge.
void StandInForMissingCalibration(PreparedModel& prepared) {
  const Tensor range = Tensor::FromFloats({2}, {-1.0f, 1.0f});
  for (auto& [path, observer] : prepared.observers) {
    if (ObserverSawNoValue(*observer)) observer->Update(range).IgnoreError();
  }
}

struct Pass {
  const char* name;
  std::function<absl::Status(GraphModule&)> run;
  // A failure does not stop the pipeline (the next passes are defined without it).
  bool optional = false;
};

// What the passes hand on to each other.
struct FlowState {
  std::optional<PreparedModel> prepared;
  bool calibration_skipped = false;
};

std::vector<Pass> Pipeline(const PipelineSetup& setup, const QConfigMapping& mapping,
                           FlowState& state) {
  return {
      {"fuse",
       [&setup](GraphModule& gm) { return FusePatterns(gm, *setup.matcher).status(); }},
      {"prepare",
       [&setup, &mapping, &state](GraphModule& gm) -> absl::Status {
         absl::StatusOr<PreparedModel> prepared = Prepare(gm, mapping, setup.config);
         if (!prepared.ok()) return prepared.status();
         state.prepared = *std::move(prepared);
         return absl::OkStatus();
       }},
      {"calibrate",
       [&state](GraphModule& gm) -> absl::Status {
         std::optional<std::vector<CalibrationSample>> samples = SmallCalibrationSamples(gm);
         if (!samples.has_value()) {
           if (Verbose()) std::fprintf(stderr, "  calibrate: skipped (no small input shape)\n");
           state.calibration_skipped = true;
           return absl::OkStatus();
         }
         return Calibrate(gm, *state.prepared, *samples, CalibrationKernels()).status();
       },
       /*optional=*/true},
      {"convert",
       [&state](GraphModule& gm) {
         StandInForMissingCalibration(*state.prepared);
         return ConvertToReference(gm, *state.prepared).status();
       }},
      {"lower",
       [](GraphModule& gm) { return LowerToNative(gm, NativeLoweringRules()).status(); }},
  };
}

}  // namespace

namespace {

// The passes on `gm` (result.module), checking the properties of pass_pipeline.h after
// each; with `reload_outputs`, also that each successful pass's output saves and loads
// again (ParseModel runs Verify): an output that was written must load.
void RunPasses(const PipelineSetup& setup, const QConfigMapping& mapping, bool reload_outputs,
               PipelineResult& result) {
  GraphModule& gm = *result.module;
  FlowState state;
  for (const Pass& pass : Pipeline(setup, mapping, state)) {
    const std::string before = SerializeModel(gm);
    const absl::Status status = pass.run(gm);
    result.passes.push_back({pass.name, status});
    if (Verbose()) {
      std::fprintf(stderr, "  %s (%s): %s, %zu nodes\n", pass.name, setup.name.c_str(),
                   status.ToString().c_str(), gm.graph().size());
    }
    if (!status.ok()) {
      FUZZ_CHECK(!status.message().empty(), absl::StrCat(pass.name, ": empty error"));
      FUZZ_CHECK(SerializeModel(gm) == before,
                 absl::StrCat(pass.name, " (", setup.name, ") failed with ", status.ToString(),
                              " but changed the model"));
      if (pass.optional) continue;
      break;
    }
    const absl::Status verified = gm.Verify();
    FUZZ_CHECK(verified.ok(), absl::StrCat(pass.name, " (", setup.name,
                                           ") left a model that fails Verify: ",
                                           verified.ToString()));
    if (reload_outputs) {
      const absl::Status reloaded = ParseModel(SerializeModel(gm)).status();
      FUZZ_CHECK(reloaded.ok(), absl::StrCat(pass.name, " (", setup.name,
                                             ") wrote a model that does not load: ",
                                             reloaded.ToString()));
    }
  }
  result.calibration_skipped = state.calibration_skipped;
}

}  // namespace

PipelineResult RunPassPipeline(uint8_t config_choice, absl::string_view model_bytes) {
  PipelineResult result;
  const PipelineSetup& setup = SetupFor(config_choice);
  result.config = setup.name;
  result.minmax_mapping = UsesMinMaxMapping(config_choice);
  const QConfigMapping& mapping =
      result.minmax_mapping ? *setup.minmax_mapping : *setup.mapping;
  absl::StatusOr<std::unique_ptr<GraphModule>> loaded = ParseModel(model_bytes);
  if (!loaded.ok()) {
    if (Verbose()) std::fprintf(stderr, "  load: %s\n", loaded.status().ToString().c_str());
    result.load = loaded.status();
    return result;  // The loader's own target covers rejections.
  }
  result.module = *std::move(loaded);
  // Not yet reloading here: regress-histc-inf-to-int64.bin lowers to a weight scale of
  // 2.2e35, which the loader refuses (scales above 1e30), a finding left to its owners.
  RunPasses(setup, mapping, /*reload_outputs=*/false, result);
  return result;
}

PipelineResult RunConfigPipeline(absl::string_view config_text, const GraphModule& model) {
  PipelineResult result;
  absl::StatusOr<BackendConfig> config = ParseBackendConfigText(config_text, "fuzz.textproto");
  if (!config.ok()) {
    FUZZ_CHECK(!config.status().message().empty() &&
                   config.status().code() == absl::StatusCode::kInvalidArgument,
               absl::StrCat("config rejection is not a clear InvalidArgument: ",
                            config.status().ToString()));
    result.load = config.status();
    return result;  // config_loader_fuzz covers rejections.
  }
  PipelineSetup setup{config->name(), *std::move(config), {}, {}, {}};
  result.config = setup.name;
  absl::StatusOr<PatternMatcher> matcher = BuildFusionMatcher(setup.config);
  if (!matcher.ok()) {
    FUZZ_CHECK(!matcher.status().message().empty(), "BuildFusionMatcher: empty error");
    result.load = matcher.status();
    return result;
  }
  setup.matcher.emplace(*std::move(matcher));
  // The qconfig of the built-in config the file extends ("native" and none: fbgemm's);
  // MinMax activations, the cheap mapping, so the executions go to fusion.
  const absl::StatusOr<std::string> base = DeclaredBackendBase(config_text, "fuzz.textproto");
  FUZZ_CHECK(base.ok(), "a config that loads has a base that parses");
  const std::string backend = base->empty() || *base == "native" ? "fbgemm" : *base;
  setup.minmax_mapping.emplace(MinMaxMapping(backend));
  result.minmax_mapping = true;
  result.module = model.Clone();
  RunPasses(setup, *setup.minmax_mapping, /*reload_outputs=*/true, result);
  return result;
}

}  // namespace fuselage::fuzz
