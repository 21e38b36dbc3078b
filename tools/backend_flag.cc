#include "tools/backend_flag.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "backend_configs/backend_config.pb.h"
#include "backend_configs/builtin_configs.h"
#include "backend_configs/config_loader.h"
#include "google/protobuf/text_format.h"
#include "graph/serialization.h"
#include "graph/status_macros.h"

namespace fuselage {
namespace {

// Backend config files are small; anything larger is not one.
constexpr int64_t kMaxConfigFileBytes = int64_t{16} << 20;

// Reads the `base` a config file's text declares ("" for none) into `base`; false if the
// text does not parse (the loader then reports the syntax error itself).
bool DeclaredBase(const std::string& text, std::string* base) {
  config::BackendConfigFile file;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(nullptr);
  if (!parser.ParseFromString(text, &file)) return false;
  *base = file.base();
  return true;
}

}  // namespace

std::vector<FlagSpec> BackendFlagSpecs() {
  return {{{"--backend"}, true}, {{"--config"}, true}};
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
  if (!has_config) return GetBackendConfig(parsed.flags.at("--backend"));

  const std::string& path = parsed.flags.at("--config");
  ASSIGN_OR_RETURN(std::string text, ReadFile(context.ResolvePath(path), kMaxConfigFileBytes));
  if (has_backend) {
    std::string base;
    const std::string& backend = parsed.flags.at("--backend");
    if (DeclaredBase(text, &base) && base != backend) {
      return absl::InvalidArgumentError(
          base.empty() ? absl::StrCat(path, " extends no built-in backend, so not --backend=",
                                      backend)
                       : absl::StrCat(path, " extends backend '", base, "', not --backend=",
                                      backend));
    }
  }
  return ParseBackendConfigText(text, path);
}

}  // namespace fuselage
