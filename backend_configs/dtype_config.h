// DTypeConfig and ObservationType: the quantization settings a backend attaches to each
// pattern (PyTorch's torch.ao.quantization.backend_config.DTypeConfig,
// DTypeWithConstraints and ObservationType). quantize/ reads them to decide where
// observers go and which dtypes a pattern may be quantized to.
#ifndef FUSELAGE_BACKEND_CONFIGS_DTYPE_CONFIG_H_
#define FUSELAGE_BACKEND_CONFIGS_DTYPE_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/dtype.h"

namespace fuselage {

// How the output of a pattern is observed relative to its input.
enum class ObservationType {
  // Output gets its own observer (conv, linear, add): new quantization parameters.
  kOutputUseDifferentObserverAsInput,
  // Output shares the input's observer instance (cat, maxpool, reshape): same parameters.
  kOutputShareObserverWithInput,
  // Neither input nor output is observed; the op stays float (shape, size in PyTorch 2).
  kInputOutputNotObserved,
};

// "OUTPUT_USE_DIFFERENT_OBSERVER_AS_INPUT" / "OUTPUT_SHARE_OBSERVER_WITH_INPUT", as PyTorch
// names the enum values.
absl::string_view ObservationTypeName(ObservationType type);
std::optional<ObservationType> ObservationTypeFromName(absl::string_view name);

// A dtype plus the limits a backend puts on the quantization parameters of tensors of that
// dtype. Unset bounds mean "no constraint". (PyTorch 1.13 has the four bounds; the exact
// matches come from PyTorch 2.x, for ops whose output parameters are fixed, e.g. sigmoid.)
struct DTypeWithConstraints {
  std::optional<DType> dtype;
  std::optional<int64_t> quant_min_lower_bound;
  std::optional<int64_t> quant_max_upper_bound;
  std::optional<double> scale_min_lower_bound;
  std::optional<double> scale_max_upper_bound;
  std::optional<double> scale_exact_match;
  std::optional<int64_t> zero_point_exact_match;

  // Checks the constraints are coherent: a dtype is set if any bound is, min <= max,
  // quant bounds inside the dtype's integer range, scales positive. InvalidArgument
  // naming `what` ("input_dtype") and the field.
  absl::Status Validate(absl::string_view what) const;

  // "torch.qint8[scale_min_lower_bound=0.000244140625]", "-" when no dtype.
  std::string ToString() const;

  friend bool operator==(const DTypeWithConstraints& a, const DTypeWithConstraints& b);
  friend bool operator!=(const DTypeWithConstraints& a, const DTypeWithConstraints& b) {
    return !(a == b);
  }
};

// One supported combination of input / output activation, weight and bias dtypes.
struct DTypeConfig {
  DTypeWithConstraints input;
  DTypeWithConstraints output;
  DTypeWithConstraints weight;
  std::optional<DType> bias;
  // Dynamic quantization: the input is quantized on the fly, the output stays float.
  bool is_dynamic = false;

  // A config of plain dtypes without constraints (PyTorch's DTypeConfig(input_dtype=...)).
  static DTypeConfig Of(std::optional<DType> input, std::optional<DType> output,
                        std::optional<DType> weight = std::nullopt,
                        std::optional<DType> bias = std::nullopt, bool is_dynamic = false);

  // Validates each part; errors name `what` (e.g. "dtype_configs[1]") and the field.
  absl::Status Validate(absl::string_view what) const;

  // "in=torch.quint8 out=torch.quint8 weight=torch.qint8 bias=torch.float32 dynamic=false".
  std::string ToString() const;

  friend bool operator==(const DTypeConfig& a, const DTypeConfig& b);
  friend bool operator!=(const DTypeConfig& a, const DTypeConfig& b) { return !(a == b); }
};

}  // namespace fuselage

#endif  // FUSELAGE_BACKEND_CONFIGS_DTYPE_CONFIG_H_
