#include "runtime/quantized/elementwise.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/quantized/quant_math.h"

namespace fuselage {
namespace quantized {
namespace {

absl::Status ExpectBinaryInputs(absl::string_view op, const Tensor& qa, const Tensor& qb,
                                double output_scale, int64_t output_zero_point) {
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qa, op, "input a"));
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qb, op, "input b"));
  if (qa.dtype() != qb.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": inputs have dtypes ",
                                                   DTypeName(qa.dtype()), " and ",
                                                   DTypeName(qb.dtype()),
                                                   "; expected the same dtype"));
  }
  if (qa.shape() != qb.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": inputs have shapes ", qa.ShapeString(), " and ", qb.ShapeString(),
        "; expected equal shapes (broadcasting is not supported)"));
  }
  RETURN_IF_ERROR(ExpectValidScale(output_scale, op, "output scale"));
  return ExpectValidZeroPoint(output_zero_point, qa.dtype(), op, "output zero_point");
}

// The AVX2 body of qadd_kernel: fmadd(scale, float(q), scale * -zero_point).
float DequantizeFma(int32_t q, float scale, float neg_zp_premul) {
  return std::fma(scale, static_cast<float>(q), neg_zp_premul);
}

}  // namespace

absl::StatusOr<Tensor> QuantizedAdd(const Tensor& qa, const Tensor& qb, double output_scale,
                                    int64_t output_zero_point, bool relu) {
  const absl::string_view op = relu ? "quantized add_relu" : "quantized add";
  RETURN_IF_ERROR(ExpectBinaryInputs(op, qa, qb, output_scale, output_zero_point));
  const float a_scale = static_cast<float>(qa.qparams().scales[0]);
  const float b_scale = static_cast<float>(qb.qparams().scales[0]);
  const float a_premul = a_scale * -static_cast<float>(qa.qparams().zero_points[0]);
  const float b_premul = b_scale * -static_cast<float>(qb.qparams().zero_points[0]);
  const float inv_scale = InverseScale(output_scale);
  const std::vector<int32_t> a = IntValues(qa);
  const std::vector<int32_t> b = IntValues(qb);
  std::vector<int32_t> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    float c = DequantizeFma(a[i], a_scale, a_premul) + DequantizeFma(b[i], b_scale, b_premul);
    if (relu) c = std::max(c, 0.0f);
    out[i] = QuantizeValue(c, inv_scale, output_zero_point, qa.dtype());
  }
  return FromIntValues(qa.dtype(), qa.shape(),
                       QuantParams::PerTensor(output_scale, output_zero_point), out);
}

absl::StatusOr<Tensor> QuantizedMul(const Tensor& qa, const Tensor& qb, double output_scale,
                                    int64_t output_zero_point, bool relu) {
  const absl::string_view op = relu ? "quantized mul_relu" : "quantized mul";
  RETURN_IF_ERROR(ExpectBinaryInputs(op, qa, qb, output_scale, output_zero_point));
  const float multiplier = static_cast<float>(qa.qparams().scales[0]) *
                           static_cast<float>(qb.qparams().scales[0]) *
                           InverseScale(output_scale);
  const int64_t a_zero_point = qa.qparams().zero_points[0];
  const int64_t b_zero_point = qb.qparams().zero_points[0];
  const std::vector<int32_t> a = IntValues(qa);
  const std::vector<int32_t> b = IntValues(qb);
  std::vector<int32_t> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const int64_t c = (a[i] - a_zero_point) * (b[i] - b_zero_point);
    int32_t q = RequantizeFromInt(c, multiplier, output_zero_point, qa.dtype());
    if (relu) q = std::max<int32_t>(q, static_cast<int32_t>(output_zero_point));
    out[i] = q;
  }
  return FromIntValues(qa.dtype(), qa.shape(),
                       QuantParams::PerTensor(output_scale, output_zero_point), out);
}

absl::StatusOr<Tensor> QuantizedRelu(const Tensor& qx) {
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qx, "quantized relu", "input"));
  const int32_t zero_point = static_cast<int32_t>(qx.qparams().zero_points[0]);
  std::vector<int32_t> q = IntValues(qx);
  for (int32_t& v : q) v = std::max(v, zero_point);
  return FromIntValues(qx.dtype(), qx.shape(), qx.qparams(), q);
}

absl::StatusOr<Tensor> QuantizedHardtanh(const Tensor& qx, double min_val, double max_val) {
  constexpr absl::string_view kOp = "quantized hardtanh";
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qx, kOp, "input"));
  if (!(min_val <= max_val)) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": min_val ", min_val,
                                                   " and max_val ", max_val,
                                                   "; expected min_val <= max_val"));
  }
  const float inv_scale = InverseScale(qx.qparams().scales[0]);
  const int64_t zero_point = qx.qparams().zero_points[0];
  const int32_t lo = QuantizeValue(static_cast<float>(min_val), inv_scale, zero_point, qx.dtype());
  const int32_t hi = QuantizeValue(static_cast<float>(max_val), inv_scale, zero_point, qx.dtype());
  std::vector<int32_t> q = IntValues(qx);
  for (int32_t& v : q) v = std::min(std::max(v, lo), hi);
  return FromIntValues(qx.dtype(), qx.shape(), qx.qparams(), q);
}

}  // namespace quantized
}  // namespace fuselage
