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

}  // namespace fuselage

#endif  // FUSELAGE_TOOLS_BACKEND_FLAG_H_
