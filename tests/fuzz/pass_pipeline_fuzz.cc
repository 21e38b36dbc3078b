// Fuzz target: the passes on a hostile model. The first byte picks a built-in backend
// config; the rest is a binary model file. A model that loads goes through the pipeline
// (fuse → lower to native; prepare and convert join as they land, see README.md), and
// after every pass:
//  - success: the GraphModule passes Verify();
//  - failure: a non-empty error, and the GraphModule saves to exactly the bytes it saved
//    to before the pass (a failing pass leaves the graph as it was); the pipeline stops.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "backend_configs/backend_config.h"
#include "backend_configs/builtin_configs.h"
#include "graph/graph_module.h"
#include "graph/serialization.h"
#include "lowering/lower_to_native.h"
#include "lowering/lowering_rule.h"
#include "patterns/fuse.h"
#include "tests/fuzz/fuzz_check.h"

namespace fuselage::fuzz {
namespace {

struct Pass {
  const char* name;
  std::function<absl::Status(GraphModule&)> run;
};

const LoweringRuleRegistry& NativeLoweringRules() {
  static const LoweringRuleRegistry* const registry = [] {
    auto* r = new LoweringRuleRegistry();
    const absl::Status registered = RegisterNativeLoweringRules(*r);
    FUZZ_CHECK(registered.ok(), registered.ToString());
    return r;
  }();
  return *registry;
}

std::vector<Pass> Pipeline(const BackendConfig& config) {
  return {
      {"fuse",
       [&config](GraphModule& gm) -> absl::Status {
         absl::StatusOr<PatternMatcher> matcher = BuildFusionMatcher(config);
         FUZZ_CHECK(matcher.ok(), absl::StrCat("built-in config '", config.name(),
                                               "' gives no matcher: ", matcher.status().ToString()));
         return FusePatterns(gm, *matcher).status();
       }},
      {"lower",
       [](GraphModule& gm) { return LowerToNative(gm, NativeLoweringRules()).status(); }},
  };
}

void RunPipeline(uint8_t config_choice, absl::string_view model_bytes) {
  absl::StatusOr<std::unique_ptr<GraphModule>> loaded = ParseModel(model_bytes);
  if (!loaded.ok()) return;  // The loader's own target covers rejections.
  GraphModule& gm = **loaded;

  const std::vector<std::string> names = BuiltinBackendConfigNames();
  const std::string& config_name = names[config_choice % names.size()];
  absl::StatusOr<BackendConfig> config = GetBackendConfig(config_name);
  FUZZ_CHECK(config.ok(), config.status().ToString());

  for (const Pass& pass : Pipeline(*config)) {
    const std::string before = SerializeModel(gm);
    const absl::Status status = pass.run(gm);
    if (!status.ok()) {
      FUZZ_CHECK(!status.message().empty(), absl::StrCat(pass.name, ": empty error"));
      FUZZ_CHECK(SerializeModel(gm) == before,
                 absl::StrCat(pass.name, " (", config_name, ") failed with ", status.ToString(),
                              " but changed the model"));
      return;
    }
    const absl::Status verified = gm.Verify();
    FUZZ_CHECK(verified.ok(), absl::StrCat(pass.name, " (", config_name,
                                           ") left a model that fails Verify: ",
                                           verified.ToString()));
  }
}

}  // namespace
}  // namespace fuselage::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  fuselage::fuzz::RunPipeline(data[0],
                              absl::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
  return 0;
}
