// Loads the declarative backend config format (backend_config.proto, as text): start from
// a built-in config named by `base`, then add (or, with `replace: true`, replace) pattern
// entries. Nothing of the result is taken on trust: each entry is validated as
// BackendConfig::Add does (backend_config.h), and an error names the file, the entry
// (`pattern[2] 'conv_bn_add_relu'`) and the field. See examples/conv_bn_add_relu.textproto.
//
// A file may also declare fused module types and lowering rules (fused_module_type,
// lowering_rule; declared_types.h): they are checked and belong to the returned config
// (BackendConfig::declarations, module_schemas), nothing process-wide, before the pattern
// entries, which may name them (examples/conv_add_relu_new_type.textproto).
//
// What a config gives reaches model files (entry names become the fused nodes' "pattern"
// meta), so every string of the file is held to the model file's own limits
// (graph/serialization.h ModelLimits: at most max_string_length bytes, valid UTF-8), and
// every enum field must hold one of its named values: a config that loads never makes a
// model that does not. Syntax errors come back in the Status; nothing is logged.
//
//   ASSIGN_OR_RETURN(BackendConfig config,
//                    LoadBackendConfigFile("backend_configs/examples/conv_bn_add_relu.textproto"));
#ifndef FUSELAGE_BACKEND_CONFIGS_CONFIG_LOADER_H_
#define FUSELAGE_BACKEND_CONFIGS_CONFIG_LOADER_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backend_configs/backend_config.h"
#include "backend_configs/known_functions.h"
#include "graph/module_schema.h"

namespace fuselage {

// The largest config file read: real ones are a few KB. A larger file, or one that never
// ends (/dev/zero, a pipe), is refused at this size.
inline constexpr size_t kMaxBackendConfigFileBytes = size_t{16} << 20;

// The text of the config file at `path`, read until EOF and refused past
// kMaxBackendConfigFileBytes (graph/file_io.h ReadFileBounded; errors name the path).
absl::StatusOr<std::string> ReadBackendConfigFile(const std::string& path);

// The built-in config the text's `base` field names ("" for none). InvalidArgument (with
// line and column, prefixed by `source`) if the text does not parse.
absl::StatusOr<std::string> DeclaredBackendBase(absl::string_view text, absl::string_view source);

// Reads the file at `path` (ReadBackendConfigFile). NotFound if it does not exist;
// InvalidArgument for a file over the limit, a syntax error (with line and column), an
// unknown base, or an invalid entry.
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
