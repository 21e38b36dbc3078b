#include "backend_configs/config_loader.h"

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "backend_configs/backend_config.pb.h"
#include "backend_configs/builtin_configs.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "graph/status_macros.h"

namespace fuselage {
namespace {

// Keeps the first syntax error the text parser reports.
class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (error_.empty()) error_ = absl::StrCat("line ", line + 1, ", column ", column + 1, ": ", message);
  }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

// Names one entry in errors: `<source>: pattern[2] 'conv_bn_add_relu'`.
class EntryContext {
 public:
  EntryContext(absl::string_view source, int index, absl::string_view name)
      : prefix_(absl::StrCat(source, ": pattern[", index, "]",
                             name.empty() ? "" : absl::StrCat(" '", name, "'"))) {}
  absl::Status Error(absl::string_view field, absl::string_view message) const {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix_, ": field '", field, "': ", message));
  }

 private:
  std::string prefix_;
};

// "Conv2d" -> "<default_namespace>.Conv2d"; dotted names are kept.
Symbol ModuleTypeName(absl::string_view name, absl::string_view default_namespace) {
  if (name.empty()) return Symbol();
  if (absl::StrContains(name, '.')) return Symbol::Intern(name);
  return Symbol::Intern(absl::StrCat(default_namespace, ".", name));
}

absl::StatusOr<std::optional<DType>> ReadDType(const EntryContext& entry,
                                               absl::string_view field,
                                               const std::string& name) {
  if (name.empty()) return std::optional<DType>();
  std::optional<DType> dtype = DTypeFromName(name);
  if (!dtype.has_value()) {
    return entry.Error(field, absl::StrCat("unknown dtype '", name,
                                           "'; expected e.g. quint8, qint8, float32"));
  }
  return dtype;
}

absl::StatusOr<DTypeWithConstraints> ReadConstrained(
    const EntryContext& entry, absl::string_view field,
    const config::DTypeWithConstraints& proto) {
  DTypeWithConstraints c;
  ASSIGN_OR_RETURN(c.dtype, ReadDType(entry, field, proto.dtype()));
  if (proto.has_quant_min_lower_bound()) c.quant_min_lower_bound = proto.quant_min_lower_bound();
  if (proto.has_quant_max_upper_bound()) c.quant_max_upper_bound = proto.quant_max_upper_bound();
  if (proto.has_scale_min_lower_bound()) c.scale_min_lower_bound = proto.scale_min_lower_bound();
  if (proto.has_scale_max_upper_bound()) c.scale_max_upper_bound = proto.scale_max_upper_bound();
  if (proto.has_scale_exact_match()) c.scale_exact_match = proto.scale_exact_match();
  if (proto.has_zero_point_exact_match()) c.zero_point_exact_match = proto.zero_point_exact_match();
  return c;
}

absl::StatusOr<BackendPatternConfig> ReadEntry(const EntryContext& entry,
                                               const config::PatternConfig& proto) {
  BackendPatternConfig config;
  config.rule.name = proto.name().empty() ? proto.pattern() : proto.name();
  if (proto.pattern().empty()) return entry.Error("pattern", "must not be empty");
  const PatternFormat format = proto.format() == config::SEQUENCE ? PatternFormat::kSequence
                                                                   : PatternFormat::kComplex;
  absl::StatusOr<Pattern> pattern = Pattern::Parse(proto.pattern(), format);
  if (!pattern.ok()) return entry.Error("pattern", pattern.status().message());
  config.rule.pattern = *std::move(pattern);

  config.observation_type = proto.observation_type() == config::OUTPUT_SHARE_OBSERVER_WITH_INPUT
                                ? ObservationType::kOutputShareObserverWithInput
                                : ObservationType::kOutputUseDifferentObserverAsInput;
  for (int i = 0; i < proto.dtype_config_size(); ++i) {
    const config::DTypeConfig& d = proto.dtype_config(i);
    const std::string field = absl::StrCat("dtype_config[", i, "]");
    DTypeConfig dtype_config;
    ASSIGN_OR_RETURN(dtype_config.input, ReadConstrained(entry, field + ".input", d.input()));
    ASSIGN_OR_RETURN(dtype_config.output, ReadConstrained(entry, field + ".output", d.output()));
    ASSIGN_OR_RETURN(dtype_config.weight, ReadConstrained(entry, field + ".weight", d.weight()));
    ASSIGN_OR_RETURN(dtype_config.bias, ReadDType(entry, field + ".bias", d.bias()));
    dtype_config.is_dynamic = d.is_dynamic();
    config.dtype_configs.push_back(std::move(dtype_config));
  }
  config.root_module = ModuleTypeName(proto.root_module(), "nn");
  config.reference_quantized_module = ModuleTypeName(proto.reference_quantized_module(), "nnqr");
  if (proto.has_weight_arg_index()) config.weight_arg_index = proto.weight_arg_index();
  if (proto.has_bias_arg_index()) config.bias_arg_index = proto.bias_arg_index();

  const bool fusion_fields = !proto.fused_module().empty() || proto.has_root() ||
                             proto.extra_input_size() > 0;
  if (proto.fuser() == config::NO_FUSION) {
    if (fusion_fields) {
      return entry.Error("fuser", "fused_module / root / extra_input given without a fuser; "
                                  "expected WRAP_IN_SEQUENCE or FOLD_BN_THEN_WRAP");
    }
    return config;
  }
  config.fuses = true;
  config.rule.fuser_kind = proto.fuser() == config::FOLD_BN_THEN_WRAP
                               ? FuserKind::kFoldBatchNormThenWrap
                               : FuserKind::kWrapInSequence;
  config.rule.fused_module_type = ModuleTypeName(proto.fused_module(), "nni");
  const Pattern& p = config.rule.pattern;
  if (proto.has_root()) {
    absl::StatusOr<int> root = p.PositionAtPath(proto.root());
    if (!root.ok()) return entry.Error("root", root.status().message());
    config.rule.root_position = *root;
  }
  if (proto.extra_input_size() > 0) {
    std::vector<int> extras;
    for (const std::string& path : proto.extra_input()) {
      absl::StatusOr<int> extra = p.PositionAtPath(path);
      if (!extra.ok()) return entry.Error("extra_input", extra.status().message());
      extras.push_back(*extra);
    }
    config.rule.extra_input_positions = std::move(extras);
  }
  return config;
}

}  // namespace

absl::StatusOr<BackendConfig> ParseBackendConfigText(absl::string_view text,
                                                     absl::string_view source,
                                                     const ModuleSchemaRegistry& modules,
                                                     const FunctionRegistry& functions) {
  config::BackendConfigFile file;
  google::protobuf::TextFormat::Parser parser;
  FirstErrorCollector errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &file)) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": ", errors.error().empty() ? "not a BackendConfigFile" : errors.error()));
  }
  BackendConfig config;
  if (!file.base().empty()) {
    absl::StatusOr<BackendConfig> base = GetBackendConfig(file.base());
    if (!base.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": field 'base': ", base.status().message()));
    }
    config = *std::move(base);
  }
  if (!file.name().empty()) {
    config.set_name(file.name());
  } else if (file.base().empty()) {
    // No name and no base: the file's stem ("dir/my_backend.textproto" -> "my_backend").
    absl::string_view stem = source;
    if (size_t slash = stem.rfind('/'); slash != absl::string_view::npos) stem.remove_prefix(slash + 1);
    if (size_t dot = stem.find('.'); dot != absl::string_view::npos) stem = stem.substr(0, dot);
    config.set_name(std::string(stem));
  }
  for (int i = 0; i < file.pattern_size(); ++i) {
    const config::PatternConfig& proto = file.pattern(i);
    const EntryContext entry(source, i, proto.name().empty() ? proto.pattern() : proto.name());
    ASSIGN_OR_RETURN(BackendPatternConfig pattern_config, ReadEntry(entry, proto));
    const absl::Status added = proto.replace()
                                   ? config.SetOrReplace(std::move(pattern_config), modules, functions)
                                   : config.Add(std::move(pattern_config), modules, functions);
    if (!added.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": pattern[", i, "]: ", added.message()));
    }
  }
  return config;
}

absl::StatusOr<BackendConfig> LoadBackendConfigFile(absl::string_view path,
                                                    const ModuleSchemaRegistry& modules,
                                                    const FunctionRegistry& functions) {
  std::ifstream in{std::string(path)};
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read backend config file '", path, "'"));
  std::stringstream text;
  text << in.rdbuf();
  return ParseBackendConfigText(text.str(), path, modules, functions);
}

}  // namespace fuselage
