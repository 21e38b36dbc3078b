#include "backend_configs/config_loader.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backend_configs/backend_config.pb.h"
#include "backend_configs/builtin_configs.h"
#include "backend_configs/declared_types.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/stubs/common.h"
#include "google/protobuf/text_format.h"
#include "graph/file_io.h"
#include "graph/serialization.h"
#include "graph/status_macros.h"
#include "graph/symbol.h"

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

// Parses `text` into `file`. The errors go to the Status (line and column of the first),
// never to the log.
absl::Status ParseConfigProto(absl::string_view text, absl::string_view source,
                              config::BackendConfigFile* file) {
  google::protobuf::TextFormat::Parser parser;
  FirstErrorCollector errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), file)) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": ", errors.error().empty() ? "not a BackendConfigFile" : errors.error()));
  }
  return absl::OkStatus();
}

// A string that failed its check, shown escaped and cut short in an error.
std::string Excerpt(const std::string& s) {
  constexpr size_t kShown = 40;
  return absl::StrCat("\"", absl::CHexEscape(absl::string_view(s).substr(0, kShown)), "\"",
                      s.size() > kShown ? "..." : "");
}

// At most `max_length` bytes of valid UTF-8.
bool IsSoundString(const std::string& s, int64_t max_length) {
  return static_cast<int64_t>(s.size()) <= max_length &&
         google::protobuf::internal::IsStructurallyValidUTF8(s.data(), static_cast<int>(s.size()));
}

// Holds the strings and enums of `message` and of every message in it to what a model
// file can carry: strings of at most `max_length` bytes and valid UTF-8 (protobuf's text
// parser checks neither), enums one of their named values (proto3 keeps any number).
// `prefix` is the dotted path of `message` ("" at the top, "dtype_config[0].input.");
// `skip`, if set, a field of `message` left out (checked separately).
// InvalidArgument "field 'PATH': ...".
absl::Status CheckFields(const google::protobuf::Message& message, const std::string& prefix,
                         int64_t max_length,
                         const google::protobuf::FieldDescriptor* skip = nullptr) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* reflection = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    if (field == skip) continue;
    const int count = field->is_repeated() ? reflection->FieldSize(message, field) : 1;
    for (int i = 0; i < count; ++i) {
      const std::string path = field->is_repeated()
                                   ? absl::StrCat(prefix, field->name(), "[", i, "]")
                                   : absl::StrCat(prefix, field->name());
      switch (field->cpp_type()) {
        case FieldDescriptor::CPPTYPE_STRING: {
          const std::string value = field->is_repeated()
                                        ? reflection->GetRepeatedString(message, field, i)
                                        : reflection->GetString(message, field);
          if (IsSoundString(value, max_length)) break;
          if (static_cast<int64_t>(value.size()) > max_length) {
            return absl::InvalidArgumentError(absl::StrCat(
                "field '", path, "': ", Excerpt(value), " is ", value.size(),
                " bytes; the limit is ", max_length, " (a model file's string limit)"));
          }
          return absl::InvalidArgumentError(
              absl::StrCat("field '", path, "': ", Excerpt(value), " is not valid UTF-8"));
        }
        case FieldDescriptor::CPPTYPE_ENUM: {
          const int value = field->is_repeated()
                                ? reflection->GetRepeatedEnumValue(message, field, i)
                                : reflection->GetEnumValue(message, field);
          const google::protobuf::EnumDescriptor* type = field->enum_type();
          if (type->FindValueByNumber(value) == nullptr) {
            std::vector<std::string> names;
            for (int v = 0; v < type->value_count(); ++v) names.push_back(type->value(v)->name());
            return absl::InvalidArgumentError(absl::StrCat(
                "field '", path, "': ", value, " is not a value of enum ", type->name(),
                "; expected one of ",
                absl::StrJoin(names, ", ")));
          }
          break;
        }
        case FieldDescriptor::CPPTYPE_MESSAGE:
          RETURN_IF_ERROR(CheckFields(field->is_repeated()
                                          ? reflection->GetRepeatedMessage(message, field, i)
                                          : reflection->GetMessage(message, field),
                                      absl::StrCat(path, "."), max_length));
          break;
        default:
          break;
      }
    }
  }
  return absl::OkStatus();
}

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

// The loader validates enum values before this (an unknown value is an error there).
ObservationType FromProto(config::ObservationType type) {
  switch (type) {
    case config::OUTPUT_SHARE_OBSERVER_WITH_INPUT:
      return ObservationType::kOutputShareObserverWithInput;
    case config::INPUT_OUTPUT_NOT_OBSERVED:
      return ObservationType::kInputOutputNotObserved;
    default:
      return ObservationType::kOutputUseDifferentObserverAsInput;
  }
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

  config.observation_type = FromProto(proto.observation_type());
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
  for (int i = 0; i < proto.num_tensor_args_observation_size(); ++i) {
    const config::TensorArgsObservation& t = proto.num_tensor_args_observation(i);
    for (const auto& [count, unused] : config.num_tensor_args_to_observation_type) {
      if (count == t.num_tensor_args()) {
        return entry.Error(absl::StrCat("num_tensor_args_observation[", i, "]"),
                           absl::StrCat("num_tensor_args ", count, " given twice"));
      }
    }
    if (t.num_tensor_args() < 0) {
      return entry.Error(absl::StrCat("num_tensor_args_observation[", i, "]"),
                         absl::StrCat("num_tensor_args ", t.num_tensor_args(), " must be >= 0"));
    }
    config.num_tensor_args_to_observation_type.emplace_back(t.num_tensor_args(),
                                                            FromProto(t.observation_type()));
  }
  if (proto.has_input_output_observed()) config.input_output_observed = proto.input_output_observed();
  if (proto.has_fixed_output_qparams()) {
    config.fixed_output_qparams =
        FixedQParams{proto.fixed_output_qparams().scale(), proto.fixed_output_qparams().zero_point()};
  }

  const bool fusion_fields = !proto.fused_module().empty() || proto.has_root() ||
                             proto.extra_input_size() > 0 || proto.has_benefit();
  if (proto.fuser() == config::NO_FUSION) {
    if (fusion_fields) {
      return entry.Error("fuser", "fused_module / root / extra_input / benefit given without a "
                                  "fuser; "
                                  "expected WRAP_IN_SEQUENCE or FOLD_BN_THEN_WRAP");
    }
    return config;
  }
  config.fuses = true;
  if (proto.has_benefit()) config.rule.benefit = proto.benefit();
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
  RETURN_IF_ERROR(ParseConfigProto(text, source, &file));
  // Every string and enum, before any is used: the file's own fields, then each entry's,
  // naming the entry by index (and by name once its name is known to be sound).
  const int64_t max_length = ModelLimits().max_string_length;
  const absl::Status top = CheckFields(
      file, "", max_length,
      config::BackendConfigFile::descriptor()->FindFieldByNumber(
          config::BackendConfigFile::kPatternFieldNumber));
  if (!top.ok()) return absl::InvalidArgumentError(absl::StrCat(source, ": ", top.message()));
  for (int i = 0; i < file.pattern_size(); ++i) {
    const absl::Status status = CheckFields(file.pattern(i), "", max_length);
    if (!status.ok()) {
      const std::string& name = file.pattern(i).name();
      const bool named = !name.empty() && IsSoundString(name, max_length);
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": pattern[", i, "]", named ? absl::StrCat(" '", name, "'") : "",
                       ": ", status.message()));
    }
  }
  // Declared fused module types and lowering rules (issue 21 item 4,
  // declared_types.h): checked, and known to this config before the entries that name them.
  ASSIGN_OR_RETURN(std::shared_ptr<const Declarations> declarations,
                   ReadDeclarations(file, source, modules));
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
  if (declarations != nullptr) config.set_declarations(std::move(declarations));
  const ModuleSchemaRegistry& known = config.declarations() != nullptr
                                          ? config.module_schemas()
                                          : modules;
  for (int i = 0; i < file.pattern_size(); ++i) {
    const config::PatternConfig& proto = file.pattern(i);
    const EntryContext entry(source, i, proto.name().empty() ? proto.pattern() : proto.name());
    ASSIGN_OR_RETURN(BackendPatternConfig pattern_config, ReadEntry(entry, proto));
    const absl::Status added = proto.replace()
                                   ? config.SetOrReplace(std::move(pattern_config), known, functions)
                                   : config.Add(std::move(pattern_config), known, functions);
    if (!added.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": pattern[", i, "]: ", added.message()));
    }
  }
  return config;
}

absl::StatusOr<std::string> ReadBackendConfigFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileBounded(path, kMaxBackendConfigFileBytes);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("backend config file: ", text.status().message()));
  }
  return text;
}

absl::StatusOr<std::string> DeclaredBackendBase(absl::string_view text, absl::string_view source) {
  config::BackendConfigFile file;
  RETURN_IF_ERROR(ParseConfigProto(text, source, &file));
  return file.base();
}

absl::StatusOr<BackendConfig> LoadBackendConfigFile(absl::string_view path,
                                                    const ModuleSchemaRegistry& modules,
                                                    const FunctionRegistry& functions) {
  ASSIGN_OR_RETURN(std::string text, ReadBackendConfigFile(std::string(path)));
  return ParseBackendConfigText(text, path, modules, functions);
}

}  // namespace fuselage
