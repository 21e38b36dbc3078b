// Elementwise activations on quantized tensors, reproducing PyTorch 1.13's CPU kernels
// (aten/src/ATen/native/quantized/cpu/kernels/QuantizedOpKernels.cpp, the vectorized
// body used by the onednn / fbgemm engines; the QNNPACK engine's own sigmoid / hardswish
// are not modelled). Every kernel dequantizes each element as the vector body does,
// fma(scale, q, scale * -zero_point) in float, computes the activation in float and
// quantizes with quantize_val(output scale, output zero point).
//
//   QuantizedHardswish   nnq.Hardswish / quantized::hardswish: x * clamp(x + 3, 0, 6) / 6,
//                        to the module's output qparams.
//   QuantizedElu         nnq.ELU / quantized::elu: x >= 0 ? x : alpha * (exp(x) - 1).
//   QuantizedLeakyRelu   nnq.LeakyReLU / quantized::leaky_relu: x > 0 ? x : x * slope;
//                        output qparams given, or the input's (F.leaky_relu on a
//                        quantized tensor).
//   QuantizedSigmoid     torch.sigmoid on a quantized tensor: fixed output qparams
//   QuantizedHardsigmoid F.hardsigmoid:  clamp(x + 3, 0, 6) / 6      (FixedSigmoidQParams)
//   QuantizedTanh        torch.tanh:     fixed output qparams         (FixedTanhQParams)
//   QuantizedGelu        F.gelu / nn.GELU on a quantized tensor (qgelu_kernel), in the input's
//                        qparams (the scale narrowed to float, as PyTorch keeps it): x * 0.5 * (1 + erf(x / sqrt(2))), or with approximate='tanh'
//                        0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))).
//   QuantizedSoftmax     nnq.Softmax / quantized::softmax(qx, dim, scale, zero_point) off
//                        QNNPACK: Tensor.dequantize() (scale * (q - zp)), float softmax
//                        along dim, quantize_per_tensor to the given qparams. The float
//                        softmax is fuselage's (runtime/float_ops.h), not PyTorch's Sleef
//                        exp: a result on a rounding boundary can move by one step.
//
// Example:
//   ASSIGN_OR_RETURN(Tensor y, quantized::QuantizedSigmoid(qx));  // quint8: 1/256, zp 0
//
// Inputs are per-tensor quantized (quint8 / qint8); errors name the op and the field.
// PyTorch's scalar tail (the last elements of a row that do not fill a vector) uses
// dequantize_val (scale * (q - zp)), and its vector exp / tanh are Sleef's: either can
// move a result sitting on a rounding boundary by one step (tests measure how often).
#ifndef FUSELAGE_RUNTIME_QUANTIZED_ACTIVATIONS_H_
#define FUSELAGE_RUNTIME_QUANTIZED_ACTIVATIONS_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "graph/tensor.h"

namespace fuselage {
namespace quantized {

// The fixed output qparams PyTorch's quantized sigmoid / hardsigmoid (range [0, 1]) and
// tanh (range [-1, 1]) kernels give their outputs, for dtype quint8 / qint8.
QuantParams FixedSigmoidQParams(DType dtype);
QuantParams FixedTanhQParams(DType dtype);

absl::StatusOr<Tensor> QuantizedHardswish(const Tensor& qx, double output_scale,
                                          int64_t output_zero_point);
absl::StatusOr<Tensor> QuantizedElu(const Tensor& qx, double output_scale,
                                    int64_t output_zero_point, double alpha);
absl::StatusOr<Tensor> QuantizedLeakyRelu(const Tensor& qx, double negative_slope,
                                          std::optional<double> output_scale = std::nullopt,
                                          std::optional<int64_t> output_zero_point =
                                              std::nullopt);
// `output` absent: the fixed qparams above (torch.sigmoid); present: nnq.Sigmoid's.
absl::StatusOr<Tensor> QuantizedSigmoid(const Tensor& qx,
                                        std::optional<QuantParams> output = std::nullopt);
absl::StatusOr<Tensor> QuantizedHardsigmoid(const Tensor& qx);
absl::StatusOr<Tensor> QuantizedGelu(const Tensor& qx, bool tanh_approximation);
// `dim` may be negative (counts from the end).
absl::StatusOr<Tensor> QuantizedSoftmax(const Tensor& qx, int64_t dim, double output_scale,
                                        int64_t output_zero_point);
absl::StatusOr<Tensor> QuantizedTanh(const Tensor& qx);

}  // namespace quantized
}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_ACTIVATIONS_H_
