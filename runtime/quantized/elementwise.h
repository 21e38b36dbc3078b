// Elementwise quantized ops, reproducing PyTorch 1.13's CPU kernels
// (aten/src/ATen/native/quantized/cpu/kernels/QuantizedOpKernels.cpp):
//
//   QuantizedAdd  = torch.ops.quantized.add[_relu] (qadd_kernel): each input is
//                   dequantized as fma(scale, q, -(scale * zero_point)) in float (the
//                   AVX2 body's formula), summed, relu'd, and quantized with
//                   quantize_val(out_scale, out_zp). PyTorch's scalar tail (the last
//                   n mod 64 elements) dequantizes as scale * (q - zp) instead, which can
//                   differ by one step where the sum lands on a half.
//   QuantizedMul  = torch.ops.quantized.mul[_relu] (qmul_kernel): c = (a - a_zp) *
//                   (b - b_zp) in int32, requantize_from_int with multiplier
//                   float(a_scale) * float(b_scale) * (1.0f / float(out_scale)); relu
//                   clamps at out_zp.
//   QuantizedRelu = relu on a quantized tensor (qrelu_kernel): max(q, zp), same qparams.
//   QuantizedHardtanh = hardtanh / relu6 / clamp on a quantized tensor (qclamp_kernel):
//                   clamp(q, quantize_val(min), quantize_val(max)), same qparams.
//
// Inputs of add / mul are per-tensor quantized tensors of one dtype whose shapes
// broadcast (NumPy / PyTorch rules, either operand, any rank), as TensorIterator
// broadcasts them in PyTorch; the output has that dtype and the broadcast shape. An
// output past Tensor::kMaxElements is an error before anything is allocated.
#ifndef FUSELAGE_RUNTIME_QUANTIZED_ELEMENTWISE_H_
#define FUSELAGE_RUNTIME_QUANTIZED_ELEMENTWISE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "graph/tensor.h"

namespace fuselage {
namespace quantized {

absl::StatusOr<Tensor> QuantizedAdd(const Tensor& qa, const Tensor& qb, double output_scale,
                                    int64_t output_zero_point, bool relu);
absl::StatusOr<Tensor> QuantizedMul(const Tensor& qa, const Tensor& qb, double output_scale,
                                    int64_t output_zero_point, bool relu);
// Per-tensor quantized input; the output keeps its qparams.
absl::StatusOr<Tensor> QuantizedRelu(const Tensor& qx);
absl::StatusOr<Tensor> QuantizedHardtanh(const Tensor& qx, double min_val, double max_val);

}  // namespace quantized
}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_ELEMENTWISE_H_
