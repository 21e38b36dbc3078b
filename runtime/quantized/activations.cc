#include "runtime/quantized/activations.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/float_ops.h"
#include "runtime/quantized/quant_math.h"
#include "runtime/quantized/quantize.h"

namespace fuselage {
namespace quantized {
namespace {

// Checks the input and output qparams, then maps every element: dequantized as the
// vector body does (fma with the premultiplied zero point), `fn` in float, quantized with
// the reciprocal PyTorch's vector quantize receives (float(1.0 / scale), divided in
// double).
template <typename Fn>
absl::StatusOr<Tensor> MapDequantized(absl::string_view op, const Tensor& qx,
                                      const QuantParams& output, Fn fn) {
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qx, op, "input"));
  if (qx.dtype() == DType::kQInt32) {
    return absl::UnimplementedError(
        absl::StrCat(op, ": input is qint32; expected quint8 or qint8"));
  }
  RETURN_IF_ERROR(ExpectValidScale(output.scales[0], op, "output scale"));
  RETURN_IF_ERROR(ExpectValidZeroPoint(output.zero_points[0], qx.dtype(), op,
                                       "output zero_point"));
  const float scale = static_cast<float>(qx.qparams().scales[0]);
  const float premul = scale * -static_cast<float>(qx.qparams().zero_points[0]);
  const float inv_scale = static_cast<float>(1.0 / output.scales[0]);
  const int64_t zero_point = output.zero_points[0];
  std::vector<int32_t> q = IntValues(qx);
  for (int32_t& v : q) {
    const float x = std::fma(scale, static_cast<float>(v), premul);
    v = QuantizeValue(fn(x), inv_scale, zero_point, qx.dtype());
  }
  return FromIntValues(qx.dtype(), qx.shape(), output, q);
}

float HardsigmoidOf(float x) { return std::min(std::max(x + 3.0f, 0.0f), 6.0f) / 6.0f; }

}  // namespace

QuantParams FixedSigmoidQParams(DType dtype) {
  // 1 / 2^8 over [0, 1): quint8 from zero point 0, qint8 from -128.
  return QuantParams::PerTensor(0.00390625, dtype == DType::kQInt8 ? -128 : 0);
}

QuantParams FixedTanhQParams(DType dtype) {
  // 2 / 2^8 over [-1, 1): quint8 centred at 128, qint8 at 0.
  return QuantParams::PerTensor(0.0078125, dtype == DType::kQUInt8 ? 128 : 0);
}

absl::StatusOr<Tensor> QuantizedHardswish(const Tensor& qx, double output_scale,
                                          int64_t output_zero_point) {
  return MapDequantized("quantized hardswish", qx,
                        QuantParams::PerTensor(output_scale, output_zero_point),
                        [](float x) { return x * std::min(std::max(x + 3.0f, 0.0f), 6.0f) / 6.0f; });
}

absl::StatusOr<Tensor> QuantizedElu(const Tensor& qx, double output_scale,
                                    int64_t output_zero_point, double alpha) {
  const float a = static_cast<float>(alpha);
  return MapDequantized("quantized elu", qx,
                        QuantParams::PerTensor(output_scale, output_zero_point),
                        [a](float x) { return x >= 0.0f ? x : (std::exp(x) - 1.0f) * a; });
}

absl::StatusOr<Tensor> QuantizedLeakyRelu(const Tensor& qx, double negative_slope,
                                          std::optional<double> output_scale,
                                          std::optional<int64_t> output_zero_point) {
  constexpr absl::string_view kOp = "quantized leaky_relu";
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qx, kOp, "input"));
  const QuantParams output =
      output_scale.has_value() && output_zero_point.has_value()
          ? QuantParams::PerTensor(*output_scale, *output_zero_point)
          : qx.qparams();
  const float slope = static_cast<float>(negative_slope);
  return MapDequantized(kOp, qx, output,
                        [slope](float x) { return x > 0.0f ? x : x * slope; });
}

absl::StatusOr<Tensor> QuantizedSigmoid(const Tensor& qx, std::optional<QuantParams> output) {
  return MapDequantized("quantized sigmoid", qx,
                        output.has_value() ? *output : FixedSigmoidQParams(qx.dtype()),
                        [](float x) { return 1.0f / (1.0f + std::exp(-x)); });
}

absl::StatusOr<Tensor> QuantizedHardsigmoid(const Tensor& qx) {
  return MapDequantized("quantized hardsigmoid", qx, FixedSigmoidQParams(qx.dtype()),
                        HardsigmoidOf);
}

absl::StatusOr<Tensor> QuantizedGelu(const Tensor& qx, bool tanh_approximation) {
  constexpr absl::string_view kOp = "quantized gelu";
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qx, kOp, "input"));
  // qgelu_kernel keeps the input's scale as a float: the output's is that float.
  const QuantParams out = QuantParams::PerTensor(
      static_cast<float>(qx.qparams().scales[0]), qx.qparams().zero_points[0]);
  if (tanh_approximation) {
    const float beta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5);
    const float kappa = 0.044715f;
    return MapDequantized(kOp, qx, out, [beta, kappa](float x) {
      return 0.5f * x * (1.0f + std::tanh(beta * (x + kappa * (x * x * x))));
    });
  }
  const float alpha = static_cast<float>(M_SQRT1_2);
  return MapDequantized(kOp, qx, out, [alpha](float x) {
    return x * 0.5f * (1.0f + std::erf(x * alpha));
  });
}

absl::StatusOr<Tensor> QuantizedSoftmax(const Tensor& qx, int64_t dim, double output_scale,
                                        int64_t output_zero_point) {
  constexpr absl::string_view kOp = "quantized softmax";
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qx, kOp, "input"));
  RETURN_IF_ERROR(ExpectValidScale(output_scale, kOp, "output scale"));
  RETURN_IF_ERROR(ExpectValidZeroPoint(output_zero_point, qx.dtype(), kOp, "output zero_point"));
  ASSIGN_OR_RETURN(Tensor x, Dequantize(qx));
  absl::StatusOr<Tensor> y = Softmax(x, dim);
  if (!y.ok()) return absl::InvalidArgumentError(absl::StrCat(kOp, ": ", y.status().message()));
  return QuantizePerTensor(*y, output_scale, output_zero_point, qx.dtype());
}

absl::StatusOr<Tensor> QuantizedTanh(const Tensor& qx) {
  return MapDequantized("quantized tanh", qx, FixedTanhQParams(qx.dtype()),
                        [](float x) { return std::tanh(x); });
}

}  // namespace quantized
}  // namespace fuselage
