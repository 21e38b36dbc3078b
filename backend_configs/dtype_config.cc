#include "backend_configs/dtype_config.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fuselage {
namespace {

// Python's repr of a float for the bounds (0.000244140625, 1.0), so our rendering equals
// the one of the PyTorch dump script.
std::string PythonFloat(double value) {
  // The shortest %g form that reads back as the same double, as Python's repr.
  char buffer[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  std::string text = buffer;
  if (text.find_first_of(".e") == std::string::npos) absl::StrAppend(&text, ".0");
  return text;
}

std::string DTypeOrDash(const std::optional<DType>& dtype) {
  return dtype.has_value() ? std::string(DTypeName(*dtype)) : "-";
}

}  // namespace

absl::string_view ObservationTypeName(ObservationType type) {
  switch (type) {
    case ObservationType::kOutputUseDifferentObserverAsInput:
      return "OUTPUT_USE_DIFFERENT_OBSERVER_AS_INPUT";
    case ObservationType::kOutputShareObserverWithInput:
      return "OUTPUT_SHARE_OBSERVER_WITH_INPUT";
    case ObservationType::kInputOutputNotObserved:
      return "INPUT_OUTPUT_NOT_OBSERVED";
  }
  return "<invalid observation type>";
}

std::optional<ObservationType> ObservationTypeFromName(absl::string_view name) {
  for (ObservationType type : {ObservationType::kOutputUseDifferentObserverAsInput,
                               ObservationType::kOutputShareObserverWithInput,
                               ObservationType::kInputOutputNotObserved}) {
    if (name == ObservationTypeName(type)) return type;
  }
  return std::nullopt;
}

absl::Status DTypeWithConstraints::Validate(absl::string_view what) const {
  const bool any_bound = quant_min_lower_bound || quant_max_upper_bound ||
                         scale_min_lower_bound || scale_max_upper_bound ||
                         scale_exact_match || zero_point_exact_match;
  if (!dtype.has_value()) {
    if (any_bound) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": constraints given without a dtype; expected a dtype"));
    }
    return absl::OkStatus();
  }
  const bool integer_range = IsQuantized(*dtype) || *dtype == DType::kQUInt4x2;
  if ((quant_min_lower_bound || quant_max_upper_bound || zero_point_exact_match) &&
      !integer_range) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": quant_min / quant_max / zero_point constraints on ", DTypeName(*dtype),
        "; expected a quantized dtype"));
  }
  const int64_t lo = *dtype == DType::kQUInt4x2 ? 0 : DTypeMin(*dtype);
  const int64_t hi = *dtype == DType::kQUInt4x2 ? 15 : DTypeMax(*dtype);
  if (quant_min_lower_bound && (*quant_min_lower_bound < lo || *quant_min_lower_bound > hi)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ".quant_min_lower_bound: ", *quant_min_lower_bound, " is outside ",
        DTypeName(*dtype), "'s range [", lo, ", ", hi, "]"));
  }
  if (quant_max_upper_bound && (*quant_max_upper_bound < lo || *quant_max_upper_bound > hi)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ".quant_max_upper_bound: ", *quant_max_upper_bound, " is outside ",
        DTypeName(*dtype), "'s range [", lo, ", ", hi, "]"));
  }
  if (quant_min_lower_bound && quant_max_upper_bound &&
      *quant_min_lower_bound > *quant_max_upper_bound) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": quant_min_lower_bound ", *quant_min_lower_bound,
        " exceeds quant_max_upper_bound ", *quant_max_upper_bound));
  }
  for (const auto& [field, value] :
       std::vector<std::pair<absl::string_view, std::optional<double>>>{
           {"scale_min_lower_bound", scale_min_lower_bound},
           {"scale_max_upper_bound", scale_max_upper_bound},
           {"scale_exact_match", scale_exact_match}}) {
    if (value.has_value() && !(*value > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ".", field, ": ", *value, "; expected a positive scale"));
    }
  }
  if (scale_min_lower_bound && scale_max_upper_bound &&
      *scale_min_lower_bound > *scale_max_upper_bound) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": scale_min_lower_bound ", *scale_min_lower_bound,
        " exceeds scale_max_upper_bound ", *scale_max_upper_bound));
  }
  return absl::OkStatus();
}

std::string DTypeWithConstraints::ToString() const {
  std::vector<std::string> parts;
  if (quant_min_lower_bound) parts.push_back(absl::StrCat("quant_min_lower_bound=", *quant_min_lower_bound));
  if (quant_max_upper_bound) parts.push_back(absl::StrCat("quant_max_upper_bound=", *quant_max_upper_bound));
  if (scale_min_lower_bound) parts.push_back(absl::StrCat("scale_min_lower_bound=", PythonFloat(*scale_min_lower_bound)));
  if (scale_max_upper_bound) parts.push_back(absl::StrCat("scale_max_upper_bound=", PythonFloat(*scale_max_upper_bound)));
  if (scale_exact_match) parts.push_back(absl::StrCat("scale_exact_match=", PythonFloat(*scale_exact_match)));
  if (zero_point_exact_match) parts.push_back(absl::StrCat("zero_point_exact_match=", *zero_point_exact_match));
  std::string text = DTypeOrDash(dtype);
  if (!parts.empty()) absl::StrAppend(&text, "[", absl::StrJoin(parts, ","), "]");
  return text;
}

bool operator==(const DTypeWithConstraints& a, const DTypeWithConstraints& b) {
  return a.dtype == b.dtype && a.quant_min_lower_bound == b.quant_min_lower_bound &&
         a.quant_max_upper_bound == b.quant_max_upper_bound &&
         a.scale_min_lower_bound == b.scale_min_lower_bound &&
         a.scale_max_upper_bound == b.scale_max_upper_bound &&
         a.scale_exact_match == b.scale_exact_match &&
         a.zero_point_exact_match == b.zero_point_exact_match;
}

DTypeConfig DTypeConfig::Of(std::optional<DType> input, std::optional<DType> output,
                            std::optional<DType> weight, std::optional<DType> bias,
                            bool is_dynamic) {
  DTypeConfig config;
  config.input.dtype = input;
  config.output.dtype = output;
  config.weight.dtype = weight;
  config.bias = bias;
  config.is_dynamic = is_dynamic;
  return config;
}

absl::Status DTypeConfig::Validate(absl::string_view what) const {
  if (auto s = input.Validate(absl::StrCat(what, ".input_dtype")); !s.ok()) return s;
  if (auto s = output.Validate(absl::StrCat(what, ".output_dtype")); !s.ok()) return s;
  if (auto s = weight.Validate(absl::StrCat(what, ".weight_dtype")); !s.ok()) return s;
  return absl::OkStatus();
}

std::string DTypeConfig::ToString() const {
  return absl::StrCat("in=", input.ToString(), " out=", output.ToString(),
                      " weight=", weight.ToString(), " bias=", DTypeOrDash(bias),
                      " dynamic=", is_dynamic ? "true" : "false");
}

bool operator==(const DTypeConfig& a, const DTypeConfig& b) {
  return a.input == b.input && a.output == b.output && a.weight == b.weight &&
         a.bias == b.bias && a.is_dynamic == b.is_dynamic;
}

}  // namespace fuselage
