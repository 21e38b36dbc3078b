#include "quantize/qconfig_mapping_loader.h"

#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/stubs/common.h"
#include "google/protobuf/text_format.h"
#include "graph/file_io.h"
#include "graph/serialization.h"
#include "graph/status_macros.h"
#include "quantize/qconfig_mapping.pb.h"

namespace fuselage {
namespace {

// Keeps the first syntax error the text parser reports (nothing goes to the log).
class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (error_.empty())
      error_ = absl::StrCat("line ", line + 1, ", column ", column + 1, ": ", message);
  }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

// The path of a field in errors: `<source>: module_name[1] 'layer1': field 'qconfig...'`.
class Where {
 public:
  explicit Where(std::string prefix) : prefix_(std::move(prefix)) {}
  absl::Status Error(absl::string_view field, absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(prefix_, ": field '", field, "': ", message));
  }

 private:
  std::string prefix_;
};

// A string shown escaped and cut short in an error.
std::string Excerpt(absl::string_view s) {
  constexpr size_t kShown = 40;
  return absl::StrCat("\"", absl::CHexEscape(s.substr(0, kShown)), "\"",
                      s.size() > kShown ? "..." : "");
}

// protobuf's text parser checks neither length nor UTF-8 of a proto3 string.
absl::Status CheckString(const Where& where, absl::string_view field, const std::string& value) {
  const int64_t max_length = ModelLimits().max_string_length;
  if (static_cast<int64_t>(value.size()) > max_length) {
    return where.Error(field,
                       absl::StrCat(Excerpt(value), " is ", value.size(), " bytes; the limit is ",
                                    max_length, " (a model file's string limit)"));
  }
  if (!google::protobuf::internal::IsStructurallyValidUTF8(value.data(),
                                                           static_cast<int>(value.size()))) {
    return where.Error(field, absl::StrCat(Excerpt(value), " is not valid UTF-8"));
  }
  return absl::OkStatus();
}

bool IsMovingAverage(ObserverKind k) {
  return k == ObserverKind::kMovingAverageMinMax ||
         k == ObserverKind::kMovingAveragePerChannelMinMax;
}
bool IsPerChannelKind(ObserverKind k) {
  return k == ObserverKind::kPerChannelMinMax || k == ObserverKind::kMovingAveragePerChannelMinMax;
}

// One observer; `field` is its path ("qconfig.activation"). Unset fields take PyTorch
// 1.13's constructor defaults for the kind.
absl::StatusOr<ObserverSpec> ReadObserver(const Where& where, const std::string& field,
                                          const config::ObserverSpec& proto) {
  auto error = [&](absl::string_view sub, absl::string_view message) {
    return where.Error(absl::StrCat(field, ".", sub), message);
  };
  for (const auto& [name, value] :
       {std::pair<const char*, const std::string*>{"kind", &proto.kind()},
        {"dtype", &proto.dtype()},
        {"qscheme", &proto.qscheme()}}) {
    RETURN_IF_ERROR(CheckString(where, absl::StrCat(field, ".", name), *value));
  }
  if (proto.kind().empty()) {
    return error("kind", "missing; expected an observer class name such as MinMaxObserver");
  }
  const std::optional<ObserverKind> kind = ObserverKindFromName(proto.kind());
  if (!kind.has_value()) {
    return error(
        "kind",
        absl::StrCat(
            "unknown observer ", Excerpt(proto.kind()),
            "; expected MinMaxObserver, MovingAverageMinMaxObserver, PerChannelMinMaxObserver, "
            "MovingAveragePerChannelMinMaxObserver, HistogramObserver, PlaceholderObserver, "
            "NoopObserver, FixedQParamsObserver or ReuseInputObserver"));
  }
  ObserverSpec spec;
  spec.kind = *kind;
  const absl::string_view kind_name = ObserverKindName(*kind);
  auto not_taken = [&](absl::string_view sub) {
    return error(sub, absl::StrCat(kind_name, " takes no ", sub));
  };
  if (*kind == ObserverKind::kReuseInput) {
    // ReuseInputObserver() takes no arguments at all.
    if (!proto.dtype().empty()) return not_taken("dtype");
    if (!proto.qscheme().empty()) return not_taken("qscheme");
    if (proto.reduce_range()) return not_taken("reduce_range");
    if (proto.has_quant_min()) return not_taken("quant_min");
    if (proto.has_quant_max()) return not_taken("quant_max");
    if (proto.has_eps()) return not_taken("eps");
  }
  if (!IsMovingAverage(*kind) && proto.has_averaging_constant())
    return not_taken("averaging_constant");
  if (!IsPerChannelKind(*kind) && proto.has_ch_axis()) return not_taken("ch_axis");
  if (*kind != ObserverKind::kHistogram) {
    if (proto.has_bins()) return not_taken("bins");
    if (proto.has_upsample_rate()) return not_taken("upsample_rate");
  }
  if (*kind != ObserverKind::kFixedQParams) {
    if (proto.has_scale()) return not_taken("scale");
    if (proto.has_zero_point()) return not_taken("zero_point");
  } else {
    if (!proto.has_scale()) return error("scale", "missing; FixedQParamsObserver needs it");
    if (!proto.has_zero_point())
      return error("zero_point", "missing; FixedQParamsObserver needs it");
  }

  // PyTorch's defaults: quint8 (PlaceholderObserver float32, NoopObserver float16).
  spec.dtype = *kind == ObserverKind::kPlaceholder ? DType::kFloat32
               : *kind == ObserverKind::kNoop      ? DType::kFloat16
                                                   : DType::kQUInt8;
  if (!proto.dtype().empty()) {
    const std::optional<DType> dtype = DTypeFromName(proto.dtype());
    if (!dtype.has_value()) {
      return error("dtype", absl::StrCat("unknown dtype ", Excerpt(proto.dtype()),
                                         "; expected e.g. quint8, qint8, qint32, float32"));
    }
    spec.dtype = *dtype;
  }
  spec.qscheme = IsPerChannelKind(*kind) ? ObserverQScheme::kPerChannelAffine
                                         : ObserverQScheme::kPerTensorAffine;
  if (!proto.qscheme().empty()) {
    const std::optional<ObserverQScheme> qscheme = ObserverQSchemeFromName(proto.qscheme());
    if (!qscheme.has_value()) {
      return error(
          "qscheme",
          absl::StrCat("unknown qscheme ", Excerpt(proto.qscheme()),
                       "; expected per_tensor_affine, per_tensor_symmetric, per_channel_affine, "
                       "per_channel_symmetric or per_channel_affine_float_qparams"));
    }
    spec.qscheme = *qscheme;
  }
  spec.reduce_range = proto.reduce_range();
  if (proto.is_dynamic() && *kind != ObserverKind::kPlaceholder) {
    return error("is_dynamic", "only PlaceholderObserver takes is_dynamic (dynamic quantization)");
  }
  spec.is_dynamic = proto.is_dynamic();
  if (*kind == ObserverKind::kFixedQParams) {
    spec.quant_min = 0;  // FixedQParamsObserver's defaults
    spec.quant_max = 255;
  }
  if (proto.has_quant_min()) spec.quant_min = proto.quant_min();
  if (proto.has_quant_max()) spec.quant_max = proto.quant_max();
  if (proto.has_eps()) spec.eps = proto.eps();
  if (proto.has_averaging_constant()) spec.averaging_constant = proto.averaging_constant();
  if (proto.has_ch_axis()) spec.ch_axis = proto.ch_axis();
  if (proto.has_bins()) spec.bins = proto.bins();
  if (proto.has_upsample_rate()) spec.upsample_rate = proto.upsample_rate();
  if (proto.has_scale()) spec.fixed_scale = proto.scale();
  if (proto.has_zero_point()) spec.fixed_zero_point = proto.zero_point();
  if (*kind == ObserverKind::kFixedQParams) {
    // Checked here: Validate does not look at the range of a fixed-qparams observer.
    RETURN_IF_ERROR([&]() -> absl::Status {
      auto range = spec.QuantRange();
      if (!range.ok()) return error("quant_min", range.status().message());
      if (spec.fixed_zero_point < range->first || spec.fixed_zero_point > range->second) {
        return error("zero_point",
                     absl::StrCat("zero_point ", spec.fixed_zero_point, " is outside [",
                                  range->first, ", ", range->second, "]"));
      }
      return absl::OkStatus();
    }());
  }
  const absl::Status valid = spec.Validate();
  if (!valid.ok()) return where.Error(field, valid.message());
  return spec;
}

// A QConfig or None; `field` is its path ("global", "qconfig").
absl::StatusOr<OptionalQConfig> ReadQConfig(const Where& where, const std::string& field,
                                            bool present, const config::QConfigValue& proto) {
  if (!present) {
    return where.Error(field,
                       "missing; expected a qconfig { activation {...} weight {...} } "
                       "or qconfig { none: true }");
  }
  if (proto.none()) {
    if (proto.has_activation() || proto.has_weight()) {
      return where.Error(field, "none: true (keep float) cannot have observers too");
    }
    return OptionalQConfig();
  }
  if (!proto.has_activation()) return where.Error(absl::StrCat(field, ".activation"), "missing");
  if (!proto.has_weight()) return where.Error(absl::StrCat(field, ".weight"), "missing");
  ASSIGN_OR_RETURN(ObserverSpec activation,
                   ReadObserver(where, absl::StrCat(field, ".activation"), proto.activation()));
  ASSIGN_OR_RETURN(ObserverSpec weight,
                   ReadObserver(where, absl::StrCat(field, ".weight"), proto.weight()));
  return OptionalQConfig(QConfig{std::move(activation), std::move(weight)});
}

// `<source>: object_type[2] 'nn.Conv2d'`, naming the key once it is known to be sound.
Where EntryWhere(absl::string_view source, absl::string_view list, int index,
                 absl::string_view key) {
  return Where(absl::StrCat(source, ": ", list, "[", index, "]",
                            key.empty() ? "" : absl::StrCat(" '", key, "'")));
}

// Checks a key string and that it is not empty (unless `may_be_empty`) nor seen before.
absl::Status CheckKey(absl::string_view source, absl::string_view list, int index,
                      absl::string_view field, const std::string& key, bool may_be_empty) {
  const Where bare = EntryWhere(source, list, index, "");
  RETURN_IF_ERROR(CheckString(bare, field, key));
  if (key.empty() && !may_be_empty) return bare.Error(field, "missing");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<QConfigMapping> ParseQConfigMappingText(absl::string_view text,
                                                       absl::string_view source) {
  config::QConfigMappingFile file;
  google::protobuf::TextFormat::Parser parser;
  FirstErrorCollector errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &file)) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": ", errors.error().empty() ? "not a QConfigMappingFile" : errors.error()));
  }
  QConfigMapping mapping;
  const Where top(std::string{source});
  if (file.has_global()) {
    ASSIGN_OR_RETURN(OptionalQConfig global, ReadQConfig(top, "global", true, file.global()));
    mapping.SetGlobal(std::move(global));
  }

  absl::flat_hash_set<std::string> seen;
  for (int i = 0; i < file.object_type_size(); ++i) {
    const auto& e = file.object_type(i);
    RETURN_IF_ERROR(CheckKey(source, "object_type", i, "object_type", e.object_type(), false));
    const Where where = EntryWhere(source, "object_type", i, e.object_type());
    if (!seen.insert(e.object_type()).second) {
      return where.Error("object_type", "given twice; each object type takes one entry");
    }
    ASSIGN_OR_RETURN(OptionalQConfig q,
                     ReadQConfig(where, "qconfig", e.has_qconfig(), e.qconfig()));
    mapping.SetObjectType(e.object_type(), std::move(q));
  }
  seen.clear();
  for (int i = 0; i < file.module_name_regex_size(); ++i) {
    const auto& e = file.module_name_regex(i);
    RETURN_IF_ERROR(CheckKey(source, "module_name_regex", i, "regex", e.regex(), false));
    const Where where = EntryWhere(source, "module_name_regex", i, e.regex());
    if (!seen.insert(e.regex()).second) {
      return where.Error("regex", "given twice; each regex takes one entry");
    }
    ASSIGN_OR_RETURN(OptionalQConfig q,
                     ReadQConfig(where, "qconfig", e.has_qconfig(), e.qconfig()));
    const absl::Status set = mapping.SetModuleNameRegex(e.regex(), std::move(q));
    if (!set.ok()) return where.Error("regex", set.message());
  }
  seen.clear();
  for (int i = 0; i < file.module_name_size(); ++i) {
    const auto& e = file.module_name(i);
    RETURN_IF_ERROR(CheckKey(source, "module_name", i, "module_name", e.module_name(), false));
    const Where where = EntryWhere(source, "module_name", i, e.module_name());
    if (!seen.insert(e.module_name()).second) {
      return where.Error("module_name", "given twice; each module name takes one entry");
    }
    ASSIGN_OR_RETURN(OptionalQConfig q,
                     ReadQConfig(where, "qconfig", e.has_qconfig(), e.qconfig()));
    mapping.SetModuleName(e.module_name(), std::move(q));
  }
  seen.clear();
  for (int i = 0; i < file.module_name_object_type_order_size(); ++i) {
    const auto& e = file.module_name_object_type_order(i);
    constexpr absl::string_view kList = "module_name_object_type_order";
    RETURN_IF_ERROR(CheckKey(source, kList, i, "module_name", e.module_name(), true));
    RETURN_IF_ERROR(CheckKey(source, kList, i, "object_type", e.object_type(), false));
    const std::string key = absl::StrCat(e.module_name(), ", ", e.object_type(), ", ", e.index());
    const Where where = EntryWhere(source, kList, i, key);
    if (e.index() < 0) return where.Error("index", absl::StrCat(e.index(), " must be >= 0"));
    if (!seen.insert(key).second) {
      return where.Error("index",
                         "given twice; each (module_name, object_type, index) takes "
                         "one entry");
    }
    ASSIGN_OR_RETURN(OptionalQConfig q,
                     ReadQConfig(where, "qconfig", e.has_qconfig(), e.qconfig()));
    mapping.SetModuleNameObjectTypeOrder(e.module_name(), e.object_type(), e.index(), std::move(q));
  }
  return mapping;
}

absl::StatusOr<QConfigMapping> LoadQConfigMappingFile(absl::string_view path) {
  absl::StatusOr<std::string> text =
      ReadFileBounded(std::string(path), kMaxQConfigMappingFileBytes);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("qconfig mapping file: ", text.status().message()));
  }
  return ParseQConfigMappingText(*text, path);
}

}  // namespace fuselage
