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
//   QuantizedAddScalar = torch.ops.quantized.add[_relu](qx, number) and (number, qx)
//                   (ATen's add.Scalar / Scalar2, _add_scalar_out in BinaryOps.cpp): the
//                   output's parameters follow from qx's and the number c (see
//                   AddScalarOutputQParams); where the number fits the zero point the
//                   stored values are copied, else requantized by qadd_scalar_kernel:
//                   requantize_from_int(q - zp + c_q) with multiplier float(scale) *
//                   (1.0f / float(out_scale)); relu clamps at the output's zero point.
//   QuantizedMulScalar = torch.ops.quantized.mul[_relu](qx, number) and (number, qx)
//                   (_mul_scalar_out in qmul.cpp): c > 0 scales the scale (values copied,
//                   relu at qx's zero point), c == 0 gives zeros with scale 1 zero point 0,
//                   c < 0 mirrors the values (q_max + q_min - q).
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
#include "graph/dtype.h"
#include "graph/tensor.h"

namespace fuselage {
namespace quantized {

absl::StatusOr<Tensor> QuantizedAdd(const Tensor& qa, const Tensor& qb, double output_scale,
                                    int64_t output_zero_point, bool relu);
absl::StatusOr<Tensor> QuantizedMul(const Tensor& qa, const Tensor& qb, double output_scale,
                                    int64_t output_zero_point, bool relu);
// The output parameters ATen's add_scalar / mul_scalar give `qx + other` / `qx * other`
// for a per-tensor input of `scale`, `zero_point` and quantized `dtype`. Lowering calls
// these to know the parameters a lowered `x + 3` carries. InvalidArgument for a number
// that is not finite or whose quantized value overflows int32 (ATen's Scalar conversion
// refuses it).
struct ScalarOpQParams {
  double scale = 1.0;
  int64_t zero_point = 0;
};
absl::StatusOr<ScalarOpQParams> AddScalarOutputQParams(double scale, int64_t zero_point,
                                                       DType dtype, double other);
absl::StatusOr<ScalarOpQParams> MulScalarOutputQParams(double scale, int64_t zero_point,
                                                       DType dtype, double other);
// Per-tensor quantized input; the output has the parameters above and qx's shape and dtype.
absl::StatusOr<Tensor> QuantizedAddScalar(const Tensor& qx, double other, bool relu);
absl::StatusOr<Tensor> QuantizedMulScalar(const Tensor& qx, double other, bool relu);
// Per-tensor quantized input; the output keeps its qparams.
absl::StatusOr<Tensor> QuantizedRelu(const Tensor& qx);
absl::StatusOr<Tensor> QuantizedHardtanh(const Tensor& qx, double min_val, double max_val);

}  // namespace quantized
}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_ELEMENTWISE_H_
