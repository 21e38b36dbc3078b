// The backend a fusion / quantization subcommand works with, as the user names it:
// `--backend=NAME` (a built-in config: native, fbgemm, qnnpack, x86, onednn) and/or
// `--config=FILE` (a .textproto backend config, backend_configs/config_loader.h, which
// names its own built-in base). With --config the file's config is used; --backend, if
// also given, must be the base the file extends, so the two can never silently disagree.
#ifndef FUSELAGE_TOOLS_BACKEND_FLAG_H_
#define FUSELAGE_TOOLS_BACKEND_FLAG_H_

#include <vector>

#include "absl/status/statusor.h"
#include "backend_configs/backend_config.h"
#include "graph/graph_module.h"
#include "tools/command.h"

namespace fuselage {

// The flag specs to pass to ParseArgs: --backend and --config, both taking a value.
std::vector<FlagSpec> BackendFlagSpecs();

// The config the parsed flags name. UsageError if neither flag is given or a value is
// empty; the loader's error (naming the file) if --config does not load; NotFound for an
// unknown --backend; InvalidArgument if --backend is not the base the --config file
// extends.
absl::StatusOr<BackendConfig> BackendFromFlags(const CommandContext& context,
                                               absl::string_view command,
                                               const ParsedArgs& parsed);

// The flag spec of the commands that take a model, not a backend (run, calibrate,
// convert): `--config=FILE[,FILE...]`, the backend config files that declare the fused
// module types the model holds (a flag is given once, so several files are a comma list).
FlagSpec DeclaringConfigFlagSpec();

// Loads every file of --config (LoadDeclaringConfig, pipeline/stages.h; each path resolved
// against the context, named in errors as typed); none without --config. UsageError for
// an empty value or an empty name in the list; "<command>: --config: " and the loader's
// error (naming the file, entry and field) for a file that does not load.
absl::StatusOr<std::vector<BackendConfig>> DeclaringConfigsFromFlags(
    const CommandContext& context, absl::string_view command, const ParsedArgs& parsed);

// Checks the modules of `gm` of a type one of `configs` declares against that declaration
// (CheckDeclaredModules), the error prefixed "<command>: --config: ".
absl::Status CheckAgainstDeclaringConfigs(absl::string_view command,
                                          const std::vector<BackendConfig>& configs,
                                          const GraphModule& gm);

}  // namespace fuselage

#endif  // FUSELAGE_TOOLS_BACKEND_FLAG_H_
