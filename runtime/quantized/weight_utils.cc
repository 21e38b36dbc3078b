#include "runtime/quantized/weight_utils.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/quantized/quant_math.h"

namespace fuselage {
namespace quantized {

absl::Status ExpectQInt8Weight(const Tensor& weight, absl::string_view op, int64_t dims) {
  RETURN_IF_ERROR(ExpectQuantized(weight, op, "weight"));
  if (weight.dtype() != DType::kQInt8) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": weight has dtype ",
                                                   DTypeName(weight.dtype()),
                                                   "; expected torch.qint8"));
  }
  if (weight.dim() != dims) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": weight has shape ",
                                                   weight.ShapeString(), "; expected ", dims,
                                                   " dimensions"));
  }
  if (weight.qparams().scheme == QScheme::kPerChannelAffine && weight.qparams().axis != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": weight is per-channel quantized along axis ", weight.qparams().axis,
        "; expected axis 0 (output channels)"));
  }
  return absl::OkStatus();
}

absl::Status ExpectBias(const Tensor* bias, int64_t out_channels, absl::string_view op) {
  if (bias == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(ExpectFloat32(*bias, op, "bias"));
  if (bias->dim() != 1 || bias->shape()[0] != out_channels) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": bias has shape ", bias->ShapeString(),
                                                   "; expected [", out_channels, "]"));
  }
  return absl::OkStatus();
}

absl::Status ExpectAccumulatorFits(int64_t depth, absl::string_view op) {
  constexpr int64_t kMaxProduct = 255 * 255;
  if (depth <= std::numeric_limits<int32_t>::max() / kMaxProduct) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(
      op, ": reduction length ", depth, " could overflow the int32 accumulator; expected <= ",
      std::numeric_limits<int32_t>::max() / kMaxProduct));
}

std::vector<double> PerOutputChannel(const std::vector<double>& scales, int64_t out_channels) {
  if (scales.size() == 1) return std::vector<double>(out_channels, scales[0]);
  return scales;
}

std::vector<int64_t> PerOutputChannelZeroPoints(const Tensor& weight, int64_t out_channels) {
  const std::vector<int64_t>& zero_points = weight.qparams().zero_points;
  if (zero_points.size() == 1) return std::vector<int64_t>(out_channels, zero_points[0]);
  return zero_points;
}

}  // namespace quantized
}  // namespace fuselage
