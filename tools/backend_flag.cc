#include "tools/backend_flag.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "backend_configs/config_loader.h"
#include "graph/status_macros.h"
#include "pipeline/stages.h"

namespace fuselage {

std::vector<FlagSpec> BackendFlagSpecs() {
  return {{{"--backend"}, true,
           "built-in backend config: native, qnnpack, fbgemm, x86 or onednn (with --config: "
           "the config's base)",
           "NAME"},
          {{"--config"}, true,
           "backend config file (.textproto, backend_configs/backend_config.proto) extending "
           "a built-in one",
           "FILE"}};
}

absl::StatusOr<BackendConfig> BackendFromFlags(const CommandContext& context,
                                               absl::string_view command,
                                               const ParsedArgs& parsed) {
  const bool has_backend = parsed.Has("--backend");
  const bool has_config = parsed.Has("--config");
  if (!has_backend && !has_config) {
    return UsageError(absl::StrCat(command, ": needs --backend=NAME or --config=FILE"));
  }
  if (has_backend && parsed.flags.at("--backend").empty()) {
    return UsageError(absl::StrCat(command, ": --backend needs a name"));
  }
  if (has_config && parsed.flags.at("--config").empty()) {
    return UsageError(absl::StrCat(command, ": --config needs a file name"));
  }
  if (!has_config) return ResolveBackendConfig(parsed.flags.at("--backend"), std::nullopt, "");

  const std::string& path = parsed.flags.at("--config");
  ASSIGN_OR_RETURN(std::string text, ReadBackendConfigFile(context.ResolvePath(path)));
  return ResolveBackendConfig(has_backend ? parsed.flags.at("--backend") : "",
                              absl::string_view(text), path);
}

FlagSpec DeclaringConfigFlagSpec() {
  return {{"--config"}, true,
          "backend config files (.textproto, comma-separated) declaring the model's fused "
          "module types (fused_module_type), loaded before the model",
          "FILE[,FILE...]"};
}

absl::Status LoadDeclaringConfigsFromFlags(const CommandContext& context,
                                           absl::string_view command, const ParsedArgs& parsed) {
  if (!parsed.Has("--config")) return absl::OkStatus();
  const std::string& list = parsed.flags.at("--config");
  if (list.empty()) return UsageError(absl::StrCat(command, ": --config needs a file name"));
  for (absl::string_view path : absl::StrSplit(list, ',')) {
    if (path.empty()) {
      return UsageError(absl::StrCat(command, ": --config=", list,
                                     " has an empty file name (FILE[,FILE...])"));
    }
    const std::string typed(path);
    if (absl::Status loaded = LoadDeclaringConfig(context.ResolvePath(typed), typed);
        !loaded.ok()) {
      return absl::Status(loaded.code(),
                          absl::StrCat(command, ": --config: ", loaded.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace fuselage
