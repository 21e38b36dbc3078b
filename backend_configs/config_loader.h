// Loads the declarative backend config format (backend_config.proto, as text): start from
// a built-in config named by `base`, then add (or, with `replace: true`, replace) pattern
// entries. Nothing of the result is taken on trust: each entry is validated as
// BackendConfig::Add does (backend_config.h), and an error names the file, the entry
// (`pattern[2] 'conv_bn_add_relu'`) and the field. See examples/conv_bn_add_relu.textproto.
#ifndef FUSELAGE_BACKEND_CONFIGS_CONFIG_LOADER_H_
#define FUSELAGE_BACKEND_CONFIGS_CONFIG_LOADER_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backend_configs/backend_config.h"
#include "backend_configs/known_functions.h"
#include "graph/module_schema.h"

namespace fuselage {

// Reads the file at `path`. NotFound if it cannot be read; InvalidArgument for a syntax
// error (with line and column), an unknown base, or an invalid entry.
absl::StatusOr<BackendConfig> LoadBackendConfigFile(
    absl::string_view path, const ModuleSchemaRegistry& modules = ModuleSchemaRegistry::Global(),
    const FunctionRegistry& functions = FunctionRegistry::Global());

// The same for text already in memory; `source` names it in errors.
absl::StatusOr<BackendConfig> ParseBackendConfigText(
    absl::string_view text, absl::string_view source,
    const ModuleSchemaRegistry& modules = ModuleSchemaRegistry::Global(),
    const FunctionRegistry& functions = FunctionRegistry::Global());

}  // namespace fuselage

#endif  // FUSELAGE_BACKEND_CONFIGS_CONFIG_LOADER_H_
