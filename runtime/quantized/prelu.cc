#include "runtime/quantized/prelu.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/quantized/quant_math.h"

namespace fuselage {
namespace quantized {
namespace {

constexpr absl::string_view kOp = "quantized prelu";

}  // namespace

absl::StatusOr<Tensor> QuantizedPrelu(const Tensor& qx, const Tensor& weight,
                                      double output_scale, int64_t output_zero_point) {
  RETURN_IF_ERROR(ExpectPerTensorEightBit(qx, kOp, "input"));
  RETURN_IF_ERROR(ExpectPerTensorEightBit(weight, kOp, "weight"));
  if (weight.dtype() != qx.dtype()) {
    // ATen iterates input and weight as one scalar type (the output's).
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": weight has dtype ", DTypeName(weight.dtype()), "; expected the input's, ",
        DTypeName(qx.dtype())));
  }
  if (qx.dim() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": input is 0-d; expected at least one dimension"));
  }
  RETURN_IF_ERROR(ExpectValidScale(output_scale, kOp, "output scale"));
  RETURN_IF_ERROR(ExpectValidZeroPoint(output_zero_point, qx.dtype(), kOp, "output zero_point"));
  const int64_t channels = qx.dim() >= 2 ? qx.shape()[1] : 1;
  const int64_t slopes = weight.numel();
  if (slopes != 1 && slopes != channels) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": weight has ", slopes, " entries; expected 1 or the input's ", channels,
        " channels (dimension 1 of ", qx.ShapeString(), ")"));
  }
  // Elements per channel step: the product of the dims after 1 (the weight broadcasts
  // along dim 1 only).
  int64_t inner = 1;
  for (int64_t d = 2; d < qx.dim(); ++d) inner *= qx.shape()[d];

  const int32_t x_zp = static_cast<int32_t>(qx.qparams().zero_points[0]);
  const float x_scale = static_cast<float>(qx.qparams().scales[0]);
  const int32_t w_zp = static_cast<int32_t>(weight.qparams().zero_points[0]);
  const float w_scale = static_cast<float>(weight.qparams().scales[0]);
  const float y_inv_scale = 1.0f / static_cast<float>(output_scale);
  const float multiplier = x_scale * w_scale * y_inv_scale;
  const int32_t one_minus_zp =
      QuantizeValue(1.0f, InverseScale(weight.qparams().scales[0]), w_zp, qx.dtype()) - w_zp;

  const std::vector<int32_t> w = IntValues(weight);
  std::vector<int32_t> q = IntValues(qx);
  for (size_t i = 0; i < q.size(); ++i) {
    const int64_t c = slopes == 1 ? 0 : (static_cast<int64_t>(i) / inner) % channels;
    const int32_t positive = std::max(q[i], x_zp) - x_zp;
    const int32_t negative = std::min(q[i], x_zp) - x_zp;
    const int64_t acc = int64_t{positive} * one_minus_zp + int64_t{negative} * (w[c] - w_zp);
    q[i] = RequantizeFromInt(acc, multiplier, output_zero_point, qx.dtype());
  }
  return FromIntValues(qx.dtype(), qx.shape(),
                       QuantParams::PerTensor(output_scale, output_zero_point), q);
}

}  // namespace quantized
}  // namespace fuselage
