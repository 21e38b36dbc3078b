// Fuzz target: the backend-config .textproto loader (backend_configs/config_loader.h:
// ParseBackendConfigText) on arbitrary text.
// Properties:
//  - a rejected config gets a non-empty InvalidArgument error (the only code the loader
//    documents for text in memory);
//  - an accepted config is self-consistent: every entry's pattern is found again by
//    FindByPattern and is within Pattern::kMaxPositions.
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "backend_configs/backend_config.h"
#include "backend_configs/config_loader.h"
#include "patterns/pattern.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<fuselage::BackendConfig> config =
      fuselage::ParseBackendConfigText(text, "fuzz.textproto");
  if (!config.ok()) {
    FUZZ_CHECK(!config.status().message().empty() &&
                   config.status().code() == absl::StatusCode::kInvalidArgument,
               absl::StrCat("rejection is not a clear InvalidArgument: ",
                            config.status().ToString()));
    return 0;
  }
  for (const fuselage::BackendPatternConfig& entry : config->configs()) {
    FUZZ_CHECK(entry.pattern().size() >= 1 &&
                   entry.pattern().size() <= fuselage::Pattern::kMaxPositions,
               absl::StrCat("entry '", entry.name(), "' has ", entry.pattern().size(),
                            " positions"));
    FUZZ_CHECK(config->FindByPattern(entry.pattern()) != nullptr,
               absl::StrCat("entry '", entry.name(), "' pattern ", entry.pattern().ToString(),
                            " is not found by FindByPattern"));
  }
  return 0;
}
