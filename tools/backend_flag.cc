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
          "module types (fused_module_type): the model's modules of those types are checked "
          "against their declarations",
          "FILE[,FILE...]"};
}

absl::StatusOr<std::vector<BackendConfig>> DeclaringConfigsFromFlags(
    const CommandContext& context, absl::string_view command, const ParsedArgs& parsed) {
  std::vector<BackendConfig> configs;
  if (!parsed.Has("--config")) return configs;
  const std::string& list = parsed.flags.at("--config");
  if (list.empty()) return UsageError(absl::StrCat(command, ": --config needs a file name"));
  for (absl::string_view path : absl::StrSplit(list, ',')) {
    if (path.empty()) {
      return UsageError(absl::StrCat(command, ": --config=", list,
                                     " has an empty file name (FILE[,FILE...])"));
    }
    const std::string typed(path);
    absl::StatusOr<BackendConfig> loaded = LoadDeclaringConfig(context.ResolvePath(typed), typed);
    if (!loaded.ok()) {
      return absl::Status(loaded.status().code(),
                          absl::StrCat(command, ": --config: ", loaded.status().message()));
    }
    configs.push_back(*std::move(loaded));
  }
  return configs;
}

absl::Status CheckAgainstDeclaringConfigs(absl::string_view command,
                                          const std::vector<BackendConfig>& configs,
                                          const GraphModule& gm) {
  for (const BackendConfig& config : configs) {
    if (absl::Status checked = CheckDeclaredModules(gm, config.declarations().get());
        !checked.ok()) {
      return absl::Status(checked.code(),
                          absl::StrCat(command, ": --config: ", checked.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace fuselage
