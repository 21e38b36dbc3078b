#include "quantize/qconfig.h"

#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fuselage {

struct QConfigMapping::RegexEntry {
  std::string pattern;
  std::regex regex;
  OptionalQConfig qconfig;
};

absl::string_view ObserverKindName(ObserverKind kind) {
  switch (kind) {
    case ObserverKind::kMinMax: return "MinMaxObserver";
    case ObserverKind::kMovingAverageMinMax: return "MovingAverageMinMaxObserver";
    case ObserverKind::kPerChannelMinMax: return "PerChannelMinMaxObserver";
    case ObserverKind::kMovingAveragePerChannelMinMax:
      return "MovingAveragePerChannelMinMaxObserver";
    case ObserverKind::kHistogram: return "HistogramObserver";
    case ObserverKind::kPlaceholder: return "PlaceholderObserver";
    case ObserverKind::kNoop: return "NoopObserver";
    case ObserverKind::kFixedQParams: return "FixedQParamsObserver";
    case ObserverKind::kReuseInput: return "ReuseInputObserver";
  }
  return "<invalid observer kind>";
}

std::optional<ObserverKind> ObserverKindFromName(absl::string_view name) {
  for (ObserverKind k :
       {ObserverKind::kMinMax, ObserverKind::kMovingAverageMinMax,
        ObserverKind::kPerChannelMinMax, ObserverKind::kMovingAveragePerChannelMinMax,
        ObserverKind::kHistogram, ObserverKind::kPlaceholder, ObserverKind::kNoop,
        ObserverKind::kFixedQParams, ObserverKind::kReuseInput}) {
    if (ObserverKindName(k) == name) return k;
  }
  return std::nullopt;
}

absl::string_view ObserverQSchemeName(ObserverQScheme qscheme) {
  switch (qscheme) {
    case ObserverQScheme::kPerTensorAffine: return "torch.per_tensor_affine";
    case ObserverQScheme::kPerTensorSymmetric: return "torch.per_tensor_symmetric";
    case ObserverQScheme::kPerChannelAffine: return "torch.per_channel_affine";
    case ObserverQScheme::kPerChannelSymmetric: return "torch.per_channel_symmetric";
    case ObserverQScheme::kPerChannelAffineFloatQParams:
      return "torch.per_channel_affine_float_qparams";
  }
  return "<invalid qscheme>";
}

std::optional<ObserverQScheme> ObserverQSchemeFromName(absl::string_view name) {
  for (ObserverQScheme q :
       {ObserverQScheme::kPerTensorAffine, ObserverQScheme::kPerTensorSymmetric,
        ObserverQScheme::kPerChannelAffine, ObserverQScheme::kPerChannelSymmetric,
        ObserverQScheme::kPerChannelAffineFloatQParams}) {
    const absl::string_view full = ObserverQSchemeName(q);
    if (full == name || full.substr(6) == name) return q;  // with or without "torch."
  }
  return std::nullopt;
}

bool IsPerChannel(ObserverQScheme qscheme) {
  return qscheme == ObserverQScheme::kPerChannelAffine ||
         qscheme == ObserverQScheme::kPerChannelSymmetric ||
         qscheme == ObserverQScheme::kPerChannelAffineFloatQParams;
}

bool IsSymmetric(ObserverQScheme qscheme) {
  return qscheme == ObserverQScheme::kPerTensorSymmetric ||
         qscheme == ObserverQScheme::kPerChannelSymmetric;
}

absl::StatusOr<std::pair<int64_t, int64_t>> ObserverSpec::QuantRange() const {
  // Built only on the error paths: these run once per observer Prepare inserts.
  auto where = [&] { return absl::StrCat(ObserverKindName(kind), ": "); };
  if (quant_min.has_value() != quant_max.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where(), "quant_min and quant_max must be set together; got only ",
        quant_min.has_value() ? "quant_min" : "quant_max"));
  }
  if (quant_min.has_value()) {
    int64_t qmin = *quant_min, qmax = *quant_max;
    // PyTorch's _validate_qmin_qmax and calculate_qmin_qmax assertions.
    if (!(qmin <= 0 && 0 <= qmax)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), "quant_min/quant_max [", qmin, ", ", qmax, "] must include 0"));
    }
    if (qmin >= qmax) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), "quant_min ", qmin, " must be less than quant_max ", qmax));
    }
    const int64_t range_len = qmax - qmin + 1;
    if (dtype == DType::kQInt8 && range_len > 256) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), "quant range of ", range_len, " values exceeds 256 for torch.qint8"));
    }
    if (dtype == DType::kQInt32 && range_len > (int64_t{1} << 31)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), "quant range of ", range_len, " values exceeds 2^31"));
    }
    // PyTorch accepts such a range and its converted model then fails at run ("zero_point -3
    // is below lower bound"): a zero point there cannot be stored in the dtype.
    if (IsQuantized(dtype) && (qmin < DTypeMin(dtype) || qmax > DTypeMax(dtype))) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), "quant_min/quant_max [", qmin, ", ", qmax, "] lie outside ",
          DTypeName(dtype), "'s range [", DTypeMin(dtype), ", ", DTypeMax(dtype), "]"));
    }
    // PyTorch halves a customized range too (floor division).
    if (reduce_range) {
      auto floor_half = [](int64_t v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); };
      qmin = floor_half(qmin);
      qmax = floor_half(qmax);
    }
    return std::make_pair(qmin, qmax);
  }
  switch (dtype) {
    case DType::kQInt8:
      return reduce_range ? std::make_pair<int64_t, int64_t>(-64, 63)
                          : std::make_pair<int64_t, int64_t>(-128, 127);
    case DType::kQUInt8:
      return reduce_range ? std::make_pair<int64_t, int64_t>(0, 127)
                          : std::make_pair<int64_t, int64_t>(0, 255);
    case DType::kQInt32:
      return std::make_pair<int64_t, int64_t>(-(int64_t{1} << 31), (int64_t{1} << 31) - 1);
    default:
      // PyTorch's fallback (quint4x2).
      return std::make_pair<int64_t, int64_t>(0, 15);
  }
}

absl::Status ObserverSpec::Validate() const {
  // Built only on the error paths: these run once per observer Prepare inserts.
  auto where = [&] { return absl::StrCat(ObserverKindName(kind), ": "); };
  const bool per_channel_kind = kind == ObserverKind::kPerChannelMinMax ||
                                kind == ObserverKind::kMovingAveragePerChannelMinMax;
  const bool per_tensor_kind = kind == ObserverKind::kMinMax ||
                               kind == ObserverKind::kMovingAverageMinMax ||
                               kind == ObserverKind::kHistogram;
  if (per_channel_kind && !IsPerChannel(qscheme)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where(), "qscheme ", ObserverQSchemeName(qscheme),
        " is not per-channel; expected torch.per_channel_affine, "
        "torch.per_channel_symmetric or torch.per_channel_affine_float_qparams"));
  }
  if (per_tensor_kind && IsPerChannel(qscheme)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where(), "qscheme ", ObserverQSchemeName(qscheme),
        " is not per-tensor; expected torch.per_tensor_affine or torch.per_tensor_symmetric"));
  }
  if (per_channel_kind || per_tensor_kind) {
    if (dtype != DType::kQInt8 && dtype != DType::kQUInt8 && dtype != DType::kQInt32 &&
        dtype != DType::kQUInt4x2) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), "dtype ", DTypeName(dtype),
          " is not observable; expected torch.qint8, torch.quint8, torch.quint4x2 or "
          "torch.qint32"));
    }
    if (IsSymmetric(qscheme) && reduce_range && dtype == DType::kQUInt8) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), "reduce_range is not supported with symmetric torch.quint8"));
    }
    if (!(eps > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(where(), "eps ", eps, " must be > 0"));
    }
    auto range = QuantRange();
    if (!range.ok()) return range.status();
  }
  if ((kind == ObserverKind::kMovingAverageMinMax ||
       kind == ObserverKind::kMovingAveragePerChannelMinMax) &&
      !(averaging_constant > 0 && averaging_constant <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where(), "averaging_constant ", averaging_constant, " must be in (0, 1]"));
  }
  if (kind == ObserverKind::kHistogram && (bins <= 0 || upsample_rate <= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where(), "bins (", bins, ") and upsample_rate (", upsample_rate, ") must be > 0"));
  }
  if (kind == ObserverKind::kFixedQParams && !(fixed_scale > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), "scale ", fixed_scale, " must be > 0"));
  }
  return absl::OkStatus();
}

bool operator==(const ObserverSpec& a, const ObserverSpec& b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.qscheme == b.qscheme &&
         a.reduce_range == b.reduce_range && a.quant_min == b.quant_min &&
         a.quant_max == b.quant_max && a.eps == b.eps &&
         a.averaging_constant == b.averaging_constant && a.ch_axis == b.ch_axis &&
         a.bins == b.bins && a.upsample_rate == b.upsample_rate &&
         a.fixed_scale == b.fixed_scale && a.fixed_zero_point == b.fixed_zero_point &&
         a.is_dynamic == b.is_dynamic;
}

std::string ObserverSpec::ToString() const {
  std::vector<std::string> parts = {
      absl::StrCat("dtype=", DTypeName(dtype)),
      absl::StrCat("qscheme=", ObserverQSchemeName(qscheme)),
      absl::StrCat("reduce_range=", reduce_range ? "True" : "False")};
  if (quant_min.has_value()) parts.push_back(absl::StrCat("quant_min=", *quant_min));
  if (quant_max.has_value()) parts.push_back(absl::StrCat("quant_max=", *quant_max));
  parts.push_back(absl::StrCat("eps=", eps));
  if (is_dynamic) parts.push_back("is_dynamic=True");
  switch (kind) {
    case ObserverKind::kMovingAverageMinMax:
      parts.push_back(absl::StrCat("averaging_constant=", averaging_constant));
      break;
    case ObserverKind::kMovingAveragePerChannelMinMax:
      parts.push_back(absl::StrCat("averaging_constant=", averaging_constant));
      parts.push_back(absl::StrCat("ch_axis=", ch_axis));
      break;
    case ObserverKind::kPerChannelMinMax:
      parts.push_back(absl::StrCat("ch_axis=", ch_axis));
      break;
    case ObserverKind::kHistogram:
      parts.push_back(absl::StrCat("bins=", bins));
      parts.push_back(absl::StrCat("upsample_rate=", upsample_rate));
      break;
    case ObserverKind::kFixedQParams:
      parts.push_back(absl::StrCat("scale=", fixed_scale));
      parts.push_back(absl::StrCat("zero_point=", fixed_zero_point));
      break;
    default:
      break;
  }
  return absl::StrCat(ObserverKindName(kind), "(", absl::StrJoin(parts, ", "), ")");
}

ObserverSpec DefaultWeightObserver() {
  ObserverSpec s;
  s.kind = ObserverKind::kMinMax;
  s.dtype = DType::kQInt8;
  s.qscheme = ObserverQScheme::kPerTensorSymmetric;
  return s;
}

ObserverSpec DefaultPerChannelWeightObserver() {
  ObserverSpec s;
  s.kind = ObserverKind::kPerChannelMinMax;
  s.dtype = DType::kQInt8;
  s.qscheme = ObserverQScheme::kPerChannelSymmetric;
  return s;
}

ObserverSpec DefaultPlaceholderObserver() {
  ObserverSpec s;
  s.kind = ObserverKind::kPlaceholder;
  s.dtype = DType::kFloat32;
  return s;
}

namespace {

ObserverSpec HistogramActivation(bool reduce_range) {
  ObserverSpec s;
  s.kind = ObserverKind::kHistogram;
  s.dtype = DType::kQUInt8;
  s.reduce_range = reduce_range;
  return s;
}

ObserverSpec FixedQParams(double scale, int64_t zero_point) {
  ObserverSpec s;
  s.kind = ObserverKind::kFixedQParams;
  s.dtype = DType::kQUInt8;
  s.quant_min = 0;
  s.quant_max = 255;
  s.fixed_scale = scale;
  s.fixed_zero_point = zero_point;
  return s;
}

}  // namespace

absl::StatusOr<QConfig> DefaultQConfig(absl::string_view backend) {
  if (backend == "fbgemm" || backend == "x86") {
    return QConfig{HistogramActivation(true), DefaultPerChannelWeightObserver()};
  }
  if (backend == "qnnpack") {
    return QConfig{HistogramActivation(false), DefaultWeightObserver()};
  }
  if (backend == "onednn") {
    return QConfig{HistogramActivation(false), DefaultPerChannelWeightObserver()};
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown quantization backend '", backend,
      "'; expected one of fbgemm, x86, qnnpack, onednn"));
}

QConfigMapping& QConfigMapping::SetGlobal(OptionalQConfig qconfig) {
  global_ = std::move(qconfig);
  return *this;
}

QConfigMapping& QConfigMapping::SetObjectType(absl::string_view object_type,
                                              OptionalQConfig qconfig) {
  object_types_[Symbol::Intern(object_type)] = std::move(qconfig);
  return *this;
}

QConfigMapping& QConfigMapping::SetModuleName(absl::string_view module_name,
                                              OptionalQConfig qconfig) {
  module_names_[std::string(module_name)] = std::move(qconfig);
  return *this;
}

absl::Status QConfigMapping::SetModuleNameRegex(absl::string_view regex,
                                                OptionalQConfig qconfig) {
  std::regex compiled;
  try {
    compiled = std::regex(regex.begin(), regex.end(), std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("module name regex '", regex, "' does not compile: ", e.what()));
  }
  for (auto& entry : regexes_) {
    if (entry->pattern == regex) {
      entry = std::make_shared<const RegexEntry>(
          RegexEntry{entry->pattern, std::move(compiled), std::move(qconfig)});
      return absl::OkStatus();
    }
  }
  regexes_.push_back(std::make_shared<const RegexEntry>(
      RegexEntry{std::string(regex), std::move(compiled), std::move(qconfig)}));
  return absl::OkStatus();
}

const OptionalQConfig* QConfigMapping::FindObjectType(absl::string_view object_type) const {
  return FindObjectType(Symbol::Lookup(object_type));  // never interned: no entry
}

const OptionalQConfig* QConfigMapping::FindObjectType(Symbol object_type) const {
  if (object_type.empty()) return nullptr;
  auto it = object_types_.find(object_type);
  return it == object_types_.end() ? nullptr : &it->second;
}

const OptionalQConfig* QConfigMapping::FindModuleName(absl::string_view module_name) const {
  auto it = module_names_.find(std::string(module_name));
  return it == module_names_.end() ? nullptr : &it->second;
}

const OptionalQConfig& QConfigMapping::QConfigFor(absl::string_view object_type,
                                                  absl::string_view module_name) const {
  // An object type never interned has no entry; Symbol() then finds none either.
  return QConfigFor(Symbol::Lookup(object_type), module_name);
}

QConfigMapping& QConfigMapping::SetModuleNameObjectTypeOrder(absl::string_view module_name,
                                                             absl::string_view object_type,
                                                             int64_t index,
                                                             OptionalQConfig qconfig) {
  object_type_orders_[OrderKey(std::string(module_name), Symbol::Intern(object_type), index)] =
      std::move(qconfig);
  return *this;
}

const OptionalQConfig* QConfigMapping::FindModuleNameObjectTypeOrder(
    absl::string_view module_name, Symbol object_type, int64_t index) const {
  if (object_type_orders_.empty()) return nullptr;
  auto it = object_type_orders_.find(OrderKey(std::string(module_name), object_type, index));
  return it == object_type_orders_.end() ? nullptr : &it->second;
}

const OptionalQConfig& QConfigMapping::AdjustForTypeOrName(Symbol object_type,
                                                           absl::string_view module_name,
                                                           const OptionalQConfig& fallback) const {
  if (!object_type.empty()) {
    auto it = object_types_.find(object_type);
    if (it != object_types_.end()) return AdjustForName(module_name, it->second);
  }
  return AdjustForName(module_name, fallback);
}

absl::StatusOr<const OptionalQConfig*> QConfigMapping::FusedObjectType(
    absl::Span<const Symbol> parts) const {
  if (object_types_.empty() || parts.empty()) return nullptr;
  auto entry_of = [&](Symbol type) -> const OptionalQConfig* {
    auto it = object_types_.find(type);
    return it == object_types_.end() ? nullptr : &it->second;
  };
  const OptionalQConfig* first = entry_of(parts[0]);
  for (Symbol part : parts.subspan(1)) {
    const OptionalQConfig* other = entry_of(part);
    const bool same = first == nullptr ? other == nullptr : other != nullptr && *other == *first;
    if (!same) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the parts of a fused module need the same object-type qconfig (as PyTorch's "
          "update_qconfig_for_fusion requires); ", parts[0].name(), " and ", part.name(),
          " have different ones"));
    }
  }
  return first;
}

const OptionalQConfig& QConfigMapping::AdjustForName(absl::string_view module_name,
                                                     const OptionalQConfig& fallback) const {
  // Highest precedence first: module name (walking up to its ancestors), then the first
  // matching regex. (The emptiness checks skip per-node hashing and copying for mappings
  // without module-name or regex entries, such as the default ones.)
  for (absl::string_view name = module_name; !name.empty() && !module_names_.empty();) {
    if (const OptionalQConfig* q = FindModuleName(name)) return *q;
    const size_t dot = name.rfind('.');
    name = dot == absl::string_view::npos ? absl::string_view() : name.substr(0, dot);
  }
  if (!regexes_.empty()) {
    const std::string name(module_name);
    for (const auto& entry : regexes_) {
      if (std::regex_search(name, entry->regex, std::regex_constants::match_continuous)) {
        return entry->qconfig;
      }
    }
  }
  return fallback;
}

const OptionalQConfig& QConfigResolver::ApplyOrder(absl::string_view scope, Symbol object_type,
                                                   const OptionalQConfig& qconfig) {
  // Mappings without order entries (the default ones) skip the per-node counting.
  if (!mapping_.has_object_type_order_entries()) return qconfig;
  const int64_t index = next_index_[std::make_pair(std::string(scope), object_type)]++;
  const OptionalQConfig* ordered =
      mapping_.FindModuleNameObjectTypeOrder(scope, object_type, index);
  return ordered != nullptr ? *ordered : qconfig;
}

absl::StatusOr<const OptionalQConfig*> QConfigResolver::ForModuleCall(
    Symbol module_type, absl::string_view module_name, absl::Span<const Symbol> fused_parts) {
  const OptionalQConfig* by_type = mapping_.FindObjectType(module_type);
  absl::StatusOr<const OptionalQConfig*> fused = mapping_.FusedObjectType(fused_parts);
  if (!fused.ok()) return fused.status();
  if (*fused != nullptr) by_type = *fused;  // PyTorch overrides the fused type's entry
  const OptionalQConfig& qconfig =
      mapping_.AdjustForName(module_name, by_type != nullptr ? *by_type : mapping_.global());
  // PyTorch counts a module call in its parent ("layer1.0.conv1" in "layer1.0"), by the
  // type the module had before fusion (its scope was recorded by the tracer): for a fused
  // module that of its first part, the root it replaced (nn.Conv2d for nni.ConvReLU2d).
  const size_t dot = module_name.rfind('.');
  const absl::string_view parent =
      dot == absl::string_view::npos ? absl::string_view() : module_name.substr(0, dot);
  return &ApplyOrder(parent, fused_parts.empty() ? module_type : fused_parts.front(), qconfig);
}

const OptionalQConfig& QConfigResolver::ForFunctionCall(Symbol function, absl::string_view scope,
                                                        Symbol scope_type) {
  // PyTorch's _get_object_type_qconfig: only the function's object-type entry.
  const OptionalQConfig* own = mapping_.FindObjectType(function);
  const OptionalQConfig& function_qconfig = own != nullptr ? *own : mapping_.global();
  const OptionalQConfig& qconfig =
      mapping_.AdjustForTypeOrName(scope_type, scope, function_qconfig);
  return ApplyOrder(scope, function, qconfig);
}

const OptionalQConfig& QConfigResolver::ForMethodCall(Symbol method, absl::string_view scope,
                                                      Symbol scope_type) {
  const OptionalQConfig& by_method = mapping_.AdjustForTypeOrName(method, scope, mapping_.global());
  return mapping_.AdjustForTypeOrName(scope_type, scope, by_method);
}

const OptionalQConfig& QConfigMapping::QConfigFor(Symbol object_type,
                                                  absl::string_view module_name) const {
  // A call without a module name has no name or regex to match: its object type, then
  // global.
  if (module_name.empty()) {
    auto it = object_type.empty() ? object_types_.end() : object_types_.find(object_type);
    return it != object_types_.end() ? it->second : global_;
  }
  return AdjustForTypeOrName(object_type, module_name, global_);
}

absl::StatusOr<QConfigMapping> DefaultQConfigMapping(absl::string_view backend) {
  auto qconfig_or = DefaultQConfig(backend);
  if (!qconfig_or.ok()) return qconfig_or.status();
  const QConfig qconfig = *qconfig_or;
  const QConfig qconfig_transpose =
      (backend == "fbgemm" || backend == "x86")
          ? QConfig{qconfig.activation, DefaultWeightObserver()}
          : qconfig;
  const QConfig qconfig_layernorm{qconfig.activation, DefaultPlaceholderObserver()};
  ObserverSpec reuse_input;
  reuse_input.kind = ObserverKind::kReuseInput;
  ObserverSpec noop;
  noop.kind = ObserverKind::kNoop;
  noop.dtype = DType::kFloat32;

  // default_quint8_weight_qconfig: nnq.PReLU takes a quint8 weight.
  ObserverSpec quint8_weight;
  quint8_weight.kind = ObserverKind::kMinMax;
  quint8_weight.dtype = DType::kQUInt8;
  const QConfig qconfig_prelu{HistogramActivation(/*reduce_range=*/false), quint8_weight};

  // PyTorch 2.14's get_default_qconfig_mapping (1.13's also listed conv, linear, relu and
  // batch norm types with the global qconfig, which changes nothing).
  QConfigMapping m;
  m.SetGlobal(qconfig).SetObjectType("reshape", QConfig{reuse_input, noop});
  for (const char* t : {"nn.ConvTranspose1d", "nn.ConvTranspose2d", "nn.ConvTranspose3d",
                        "torch.nn.functional.conv_transpose1d",
                        "torch.nn.functional.conv_transpose2d",
                        "torch.nn.functional.conv_transpose3d"}) {
    m.SetObjectType(t, qconfig_transpose);
  }
  m.SetObjectType("torch.nn.functional.layer_norm", qconfig_layernorm)
      .SetObjectType("nn.LayerNorm", qconfig_layernorm)
      .SetObjectType("nn.PReLU", qconfig_prelu);
  SetFixedQParamsObjectTypes(m);
  return m;
}

void SetFixedQParamsObjectTypes(QConfigMapping& mapping) {
  // default_fixed_qparams_range_0to1_observer / _neg1to1_observer.
  const QConfig zero_to_one{FixedQParams(1.0 / 256.0, 0), DefaultWeightObserver()};
  const QConfig neg_one_to_one{FixedQParams(2.0 / 256.0, 128), DefaultWeightObserver()};
  for (const char* t : {"nn.Hardsigmoid", "torch.nn.functional.hardsigmoid", "hardsigmoid",
                        "hardsigmoid_", "nn.Sigmoid", "torch.sigmoid", "sigmoid", "sigmoid_",
                        "nn.Softmax"}) {
    mapping.SetObjectType(t, zero_to_one);
  }
  for (const char* t : {"nn.Tanh", "torch.tanh", "tanh", "tanh_"}) {
    mapping.SetObjectType(t, neg_one_to_one);
  }
}

}  // namespace fuselage
