#include "quantize/observer_module.h"

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"

namespace fuselage {
namespace {

bool IsMovingAverage(ObserverKind kind) {
  return kind == ObserverKind::kMovingAverageMinMax ||
         kind == ObserverKind::kMovingAveragePerChannelMinMax;
}

absl::Status AttributeError(const Module& m, absl::string_view name,
                            absl::string_view expected) {
  const Argument* a = m.FindAttribute(name);
  return absl::InvalidArgumentError(
      absl::StrCat(m.type().name(), ": attribute '", name, "' is ",
                   a == nullptr ? std::string("missing") : a->ToString(), "; expected ",
                   expected));
}

// A float32 tensor's values; InvalidArgument naming it otherwise.
absl::StatusOr<std::vector<float>> FloatValues(const Module& m, absl::string_view name) {
  const Tensor* t = m.FindTensor(name);
  if (t == nullptr || t->dtype() != DType::kFloat32) {
    return absl::InvalidArgumentError(absl::StrCat(
        m.type().name(), ": tensor '", name, "' is ",
        t == nullptr ? std::string("missing") : std::string(DTypeName(t->dtype())),
        "; expected float32 statistics"));
  }
  const float* data = t->data<float>();
  return std::vector<float>(data, data + t->numel());
}

}  // namespace

absl::StatusOr<std::unique_ptr<Module>> MakeObserverModule(const ObserverSpec& spec) {
  ASSIGN_OR_RETURN(auto range, spec.QuantRange());
  auto module = std::make_unique<Module>(ObserverKindName(spec.kind));
  module->SetAttribute("dtype", Argument::Dtype(spec.dtype));
  module->SetAttribute("qscheme", Argument::String(ObserverQSchemeName(spec.qscheme)));
  module->SetAttribute("quant_min", Argument::Int(range.first));
  module->SetAttribute("quant_max", Argument::Int(range.second));
  module->SetAttribute("reduce_range", Argument::Bool(spec.reduce_range));
  module->SetAttribute("eps", Argument::Float(spec.eps));
  module->SetAttribute("ch_axis", Argument::Int(spec.ch_axis));
  module->SetAttribute("has_customized_qrange", Argument::Bool(spec.quant_min.has_value()));
  if (spec.kind == ObserverKind::kPlaceholder) {
    module->SetAttribute("is_dynamic", Argument::Bool(spec.is_dynamic));
  }
  if (IsMovingAverage(spec.kind)) {
    module->SetAttribute("averaging_constant", Argument::Float(spec.averaging_constant));
  }
  if (spec.kind == ObserverKind::kHistogram) {
    module->SetAttribute("bins", Argument::Int(spec.bins));
    module->SetAttribute("upsample_rate", Argument::Int(spec.upsample_rate));
  }
  if (spec.kind == ObserverKind::kFixedQParams) {
    // PyTorch's FixedQParamsObserver buffers.
    module->SetAttribute("scale", Argument::Float(spec.fixed_scale));
    module->SetAttribute("zero_point", Argument::Int(spec.fixed_zero_point));
  }
  const float inf = std::numeric_limits<float>::infinity();
  module->SetTensor("min_val", Tensor::FromFloats({}, {inf}));
  module->SetTensor("max_val", Tensor::FromFloats({}, {-inf}));
  return module;
}

void StoreObserverState(const Observer& observer, Module& module) {
  const std::vector<float> lo = observer.min_val();
  const std::vector<float> hi = observer.max_val();
  const bool scalar = lo.size() == 1;
  const std::vector<int64_t> shape =
      scalar ? std::vector<int64_t>{} : std::vector<int64_t>{static_cast<int64_t>(lo.size())};
  module.SetTensor("min_val", Tensor::FromFloats(shape, lo));
  module.SetTensor("max_val", Tensor::FromFloats(shape, hi));
  if (const auto* histogram = dynamic_cast<const HistogramObserver*>(&observer);
      histogram != nullptr && !histogram->histogram().empty()) {
    const std::vector<float>& bins = histogram->histogram();
    module.SetTensor("histogram",
                     Tensor::FromFloats({static_cast<int64_t>(bins.size())}, bins));
  }
}

absl::StatusOr<ObserverSpec> ObserverSpecFromModule(const Module& m) {
  ObserverSpec spec;
  const std::optional<ObserverKind> kind = ObserverKindFromName(m.type().name());
  if (!kind.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("module type '", m.type().name(), "' is not an observer class"));
  }
  spec.kind = *kind;
  const Argument* dtype = m.FindAttribute("dtype");
  if (dtype == nullptr || !dtype->is_dtype()) return AttributeError(m, "dtype", "a dtype");
  spec.dtype = dtype->as_dtype();
  const Argument* qscheme = m.FindAttribute("qscheme");
  std::optional<ObserverQScheme> scheme;
  if (qscheme != nullptr && qscheme->is_string()) {
    scheme = ObserverQSchemeFromName(qscheme->as_string());
  }
  if (!scheme.has_value()) return AttributeError(m, "qscheme", "a torch.per_* qscheme name");
  spec.qscheme = *scheme;
  auto read_int = [&m](absl::string_view name, int64_t* out) -> absl::Status {
    auto v = m.GetInt(name);
    if (!v.ok()) return AttributeError(m, name, "an int");
    *out = *v;
    return absl::OkStatus();
  };
  auto read_float = [&m](absl::string_view name, double* out) -> absl::Status {
    auto v = m.GetFloat(name);
    if (!v.ok()) return AttributeError(m, name, "a float");
    *out = *v;
    return absl::OkStatus();
  };
  auto read_bool = [&m](absl::string_view name, bool* out) -> absl::Status {
    auto v = m.GetBool(name);
    if (!v.ok()) return AttributeError(m, name, "a bool");
    *out = *v;
    return absl::OkStatus();
  };
  int64_t quant_min = 0, quant_max = 0;
  RETURN_IF_ERROR(read_int("quant_min", &quant_min));
  RETURN_IF_ERROR(read_int("quant_max", &quant_max));
  RETURN_IF_ERROR(read_bool("reduce_range", &spec.reduce_range));
  RETURN_IF_ERROR(read_float("eps", &spec.eps));
  if (m.FindAttribute("ch_axis") != nullptr) RETURN_IF_ERROR(read_int("ch_axis", &spec.ch_axis));
  if (spec.kind == ObserverKind::kPlaceholder && m.FindAttribute("is_dynamic") != nullptr) {
    RETURN_IF_ERROR(read_bool("is_dynamic", &spec.is_dynamic));
  }
  bool customized = false;
  if (m.FindAttribute("has_customized_qrange") != nullptr) {
    RETURN_IF_ERROR(read_bool("has_customized_qrange", &customized));
  }
  if (IsMovingAverage(spec.kind)) {
    RETURN_IF_ERROR(read_float("averaging_constant", &spec.averaging_constant));
  }
  if (spec.kind == ObserverKind::kHistogram) {
    RETURN_IF_ERROR(read_int("bins", &spec.bins));
    RETURN_IF_ERROR(read_int("upsample_rate", &spec.upsample_rate));
  }
  if (spec.kind == ObserverKind::kFixedQParams) {
    RETURN_IF_ERROR(read_float("scale", &spec.fixed_scale));
    RETURN_IF_ERROR(read_int("zero_point", &spec.fixed_zero_point));
  }
  if (customized) {
    // The stored range is the effective one (already halved by reduce_range).
    spec.quant_min = quant_min;
    spec.quant_max = quant_max;
    spec.reduce_range = false;
  }
  RETURN_IF_ERROR(spec.Validate());
  ASSIGN_OR_RETURN(auto range, spec.QuantRange());
  if (range.first != quant_min || range.second != quant_max) {
    return absl::InvalidArgumentError(absl::StrCat(
        m.type().name(), ": quant_min/quant_max [", quant_min, ", ", quant_max, "] are not the ",
        DTypeName(spec.dtype), " range [", range.first, ", ", range.second,
        "] for reduce_range ", spec.reduce_range ? "True" : "False",
        "; expected that range or has_customized_qrange True"));
  }
  return spec;
}

absl::StatusOr<std::unique_ptr<Observer>> ObserverFromModule(const Module& m) {
  ASSIGN_OR_RETURN(ObserverSpec spec, ObserverSpecFromModule(m));
  ASSIGN_OR_RETURN(std::unique_ptr<Observer> observer, MakeObserver(spec));
  ASSIGN_OR_RETURN(std::vector<float> min_val, FloatValues(m, "min_val"));
  ASSIGN_OR_RETURN(std::vector<float> max_val, FloatValues(m, "max_val"));
  std::vector<float> histogram;
  if (m.FindTensor("histogram") != nullptr) {
    ASSIGN_OR_RETURN(histogram, FloatValues(m, "histogram"));
    // PyTorch's buffer is all zeros before the first update; ours is then absent.
    bool all_zero = true;
    for (float h : histogram) all_zero = all_zero && h == 0.0f;
    if (all_zero && min_val.size() == 1 && min_val[0] == std::numeric_limits<float>::infinity()) {
      histogram.clear();
    }
  }
  // A per-channel observer's module starts with the scalar +inf / -inf of every observer
  // module; the observer itself then has no channels yet.
  const float inf = std::numeric_limits<float>::infinity();
  if (IsPerChannel(spec.qscheme) && min_val.size() == 1 && max_val.size() == 1 &&
      min_val[0] == inf && max_val[0] == -inf) {
    min_val.clear();
    max_val.clear();
  }
  RETURN_IF_ERROR(observer->SetState(min_val, max_val, histogram));
  return observer;
}

}  // namespace fuselage
