// QuantizedPrelu: PReLU on a quantized tensor with a quantized weight, as PyTorch 1.13's
// quantized::prelu (nnq.PReLU's forward; ATen's qprelu_out_kernel in
// aten/src/ATen/native/quantized/cpu/kernels/QuantizedOpKernels.cpp, the same on every
// engine). It works on integers, not on dequantized floats:
//
//   one    = quantize_val(w_scale, w_zp, 1.0)             (the weight's "1")
//   acc    = (max(qx, x_zp) - x_zp) * (one - w_zp) + (min(qx, x_zp) - x_zp) * (qw - w_zp)
//   qy     = requantize_from_int(x_scale * w_scale * (1 / y_scale), y_zp, acc)
//
// with the multiplier computed in float, left to right, as ATen does. The weight holds 1
// or C slopes; C slopes go along the input's dimension 1 (ATen reshapes it to
// [1, C, 1, ...]).
//
//   ASSIGN_OR_RETURN(Tensor y, quantized::QuantizedPrelu(qx, qweight, 0.05, 128));
#ifndef FUSELAGE_RUNTIME_QUANTIZED_PRELU_H_
#define FUSELAGE_RUNTIME_QUANTIZED_PRELU_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "graph/tensor.h"

namespace fuselage {
namespace quantized {

// InvalidArgument naming the field if qx or weight is not per-tensor quint8 / qint8 (both
// of one dtype), qx is 0-d, the weight does not hold 1 or qx's dim-1 size of slopes, or
// the output scale / zero point is invalid.
absl::StatusOr<Tensor> QuantizedPrelu(const Tensor& qx, const Tensor& weight,
                                      double output_scale, int64_t output_zero_point);

}  // namespace quantized
}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_PRELU_H_
