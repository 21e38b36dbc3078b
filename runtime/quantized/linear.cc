#include "runtime/quantized/linear.h"

#include <vector>

#include <eigen3/Eigen/Core>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/quantized/output_requantizer.h"
#include "runtime/quantized/quant_math.h"
#include "runtime/quantized/weight_utils.h"

namespace fuselage {
namespace quantized {

using IntMatrix = Eigen::Matrix<int32_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

absl::StatusOr<Tensor> QuantizedLinear(const Tensor& qx, const Tensor& qweight,
                                       const Tensor* bias, double output_scale,
                                       int64_t output_zero_point, bool relu) {
  const absl::string_view op = relu ? "quantized linear_relu" : "quantized linear";
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qx, op, "input"));
  if (qx.dtype() != DType::kQUInt8 && qx.dtype() != DType::kQInt8) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": input has dtype ",
                                                   DTypeName(qx.dtype()),
                                                   "; expected torch.quint8 or torch.qint8"));
  }
  if (qx.dim() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": input is 0-d; expected shape [..., in_features]"));
  }
  RETURN_IF_ERROR(ExpectQInt8Weight(qweight, op, 2));
  const int64_t out_features = qweight.shape()[0], in_features = qweight.shape()[1];
  if (qx.shape().back() != in_features) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": input has shape ", qx.ShapeString(), " and weight ", qweight.ShapeString(),
        "; expected the input's last dimension to be in_features = ", in_features));
  }
  RETURN_IF_ERROR(ExpectBias(bias, out_features, op));
  RETURN_IF_ERROR(ExpectAccumulatorFits(in_features, op));
  RETURN_IF_ERROR(ExpectValidScale(output_scale, op, "output scale"));
  RETURN_IF_ERROR(ExpectValidZeroPoint(output_zero_point, qx.dtype(), op, "output zero_point"));

  const int64_t rows = in_features == 0 ? 0 : qx.numel() / in_features;
  // The accumulators are allocated before the output tensor: bounded like it first.
  absl::Status fits = CheckedNumel({rows, out_features}).status();
  if (!fits.ok()) return absl::InvalidArgumentError(absl::StrCat(op, ": ", fits.message()));
  const std::vector<int32_t> x_values = IntValues(qx);
  const int32_t x_zero_point = static_cast<int32_t>(qx.qparams().zero_points[0]);
  IntMatrix x(rows, in_features);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < in_features; ++k) {
      x(r, k) = x_values[r * in_features + k] - x_zero_point;
    }
  }
  const std::vector<int32_t> w_values = IntValues(qweight);
  const std::vector<int64_t> w_zero_points = PerOutputChannelZeroPoints(qweight, out_features);
  IntMatrix w(out_features, in_features);
  for (int64_t n = 0; n < out_features; ++n) {
    for (int64_t k = 0; k < in_features; ++k) {
      w(n, k) = w_values[n * in_features + k] - static_cast<int32_t>(w_zero_points[n]);
    }
  }
  const IntMatrix acc = x * w.transpose();

  const OutputRequantizer requantizer(
      qx.qparams().scales[0], PerOutputChannel(qweight.qparams().scales, out_features),
      qweight.qparams().scheme == QScheme::kPerChannelAffine,
      bias ? bias->data<float>() : nullptr, output_scale, output_zero_point, relu, qx.dtype());
  std::vector<int32_t> q(static_cast<size_t>(rows * out_features));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t n = 0; n < out_features; ++n) {
      q[r * out_features + n] = requantizer.Apply(acc(r, n), n);
    }
  }
  std::vector<int64_t> shape = qx.shape();
  shape.back() = out_features;
  return FromIntValues(qx.dtype(), std::move(shape),
                       QuantParams::PerTensor(output_scale, output_zero_point), q);
}

}  // namespace quantized
}  // namespace fuselage
