#include "runtime/quantized/linear.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/onednn/onednn.h"
#include "runtime/quantized/kernel_loops.h"
#include "runtime/quantized/output_requantizer.h"
#include "runtime/quantized/quant_math.h"
#include "runtime/quantized/weight_utils.h"

namespace fuselage {
namespace quantized {

using dt = dnnl::memory::data_type;

absl::StatusOr<Tensor> QuantizedLinear(const Tensor& qx, const Tensor& qweight,
                                       const Tensor* bias, double output_scale,
                                       int64_t output_zero_point, bool relu,
                                       QuantizedEngine engine) {
  const absl::string_view op = relu ? "quantized linear_relu" : "quantized linear";
  RETURN_IF_ERROR(ExpectPerTensorEightBit(qx, op, "input"));
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

  // Rows: the product of the leading dims (also when in_features is 0).
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < qx.dim(); ++d) rows *= qx.shape()[d];
  // The accumulators are allocated before the output tensor: bounded like it first.
  absl::Status fits = CheckedNumel({rows, out_features}).status();
  if (!fits.ok()) return absl::InvalidArgumentError(absl::StrCat(op, ": ", fits.message()));
  const int32_t x_zero_point = static_cast<int32_t>(qx.qparams().zero_points[0]);
  const dt src_type = qx.dtype() == DType::kQUInt8 ? dt::u8 : dt::s8;
  const OutputRequantizer requantizer(
      qx.qparams().scales[0], PerOutputChannel(qweight.qparams().scales, out_features),
      qweight.qparams().scheme == QScheme::kPerChannelAffine,
      bias ? bias->data<float>() : nullptr, output_scale, output_zero_point, relu, qx.dtype(),
      engine);
  std::vector<int64_t> shape = qx.shape();
  shape.back() = out_features;
  const QuantParams out_qparams = QuantParams::PerTensor(output_scale, output_zero_point);
  const std::vector<int64_t> w_zero_points = PerOutputChannelZeroPoints(qweight, out_features);
  const bool weight_zero_points =
      std::any_of(w_zero_points.begin(), w_zero_points.end(), [](int64_t z) { return z != 0; });
  if (!weight_zero_points && requantizer.fusable_in_onednn() && rows > 0 && in_features > 0 &&
      out_features > 0) {
    // The common case (PyTorch's weights are symmetric): oneDNN requantizes in the matmul,
    // with OutputRequantizer's factors and PyTorch's onednn engine's step order.
    ASSIGN_OR_RETURN(Tensor out, Tensor::Uninitialized(qx.dtype(), std::move(shape), out_qparams));
    onednn::Int8Output output;
    output.scales = requantizer.op_scales().data();
    output.zero_point = static_cast<int32_t>(output_zero_point);
    output.relu = relu;
    RETURN_IF_ERROR(onednn::MatMul(op, rows, in_features, out_features, src_type, dt::s8,
                                   src_type, qx.raw_data(), qweight.raw_data(),
                                   bias ? requantizer.bias_terms().data() : nullptr,
                                   out.mutable_raw_data(), x_zero_point, &output));
    return out;
  }

  // Otherwise the exact accumulators acc[r, n] = sum_k (x[r, k] - x_zp) * w[n, k] from
  // oneDNN (none for an empty sum), requantized here.
  std::vector<int32_t> acc(static_cast<size_t>(rows * out_features), 0);
  if (!acc.empty() && in_features > 0) {
    RETURN_IF_ERROR(onednn::MatMul(op, rows, in_features, out_features, src_type, dt::s8,
                                   dt::s32, qx.raw_data(), qweight.raw_data(), nullptr,
                                   acc.data(), x_zero_point));
  }
  // oneDNN's matmul takes no per-channel weight zero point: subtract
  // w_zp[n] * sum_k (x - x_zp) here (PyTorch's engines only produce w_zp = 0).
  if (weight_zero_points) {
    const std::vector<int32_t> x_values = IntValues(qx);
    for (int64_t r = 0; r < rows; ++r) {
      int32_t row_sum = 0;
      for (int64_t k = 0; k < in_features; ++k) {
        row_sum += x_values[r * in_features + k] - x_zero_point;
      }
      for (int64_t n = 0; n < out_features; ++n) {
        acc[r * out_features + n] -= static_cast<int32_t>(w_zero_points[n]) * row_sum;
      }
    }
  }
  if (!requantizer.fusable_in_onednn() &&
      (qx.dtype() == DType::kQUInt8 || qx.dtype() == DType::kQInt8)) {
    ASSIGN_OR_RETURN(Tensor out, Tensor::Uninitialized(qx.dtype(), std::move(shape), out_qparams));
    uint8_t* dst = static_cast<uint8_t*>(out.mutable_raw_data());
    for (int64_t r = 0; r < rows; ++r) {
      RequantizeQnnpackRow(acc.data() + r * out_features, out_features,
                           requantizer.qnnpack_bias().data(), requantizer.op_scales().data(),
                           requantizer.zero_point(), requantizer.lo(), requantizer.hi(),
                           qx.dtype(), dst + r * out_features);
    }
    return out;
  }
  std::vector<int32_t> q(static_cast<size_t>(rows * out_features));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t n = 0; n < out_features; ++n) {
      q[r * out_features + n] = requantizer.Apply(acc[r * out_features + n], n);
    }
  }
  return FromIntValues(qx.dtype(), std::move(shape), out_qparams, q);
}

}  // namespace quantized
}  // namespace fuselage
