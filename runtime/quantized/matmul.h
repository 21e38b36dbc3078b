// QuantizedMatMul: torch.ops.quantized.matmul(qa, qb, output_scale, output_zero_point), what
// lowering writes for torch.matmul on two quantized tensors. PyTorch 1.13's x86 build has
// no integer kernel for it (aten/src/ATen/native/quantized/cpu/qmatmul.cpp without
// USE_RUY_QMATMUL): it dequantizes both operands, multiplies in float (at::matmul,
// broadcasting batch dimensions) and quantizes the product with the output's parameters
// in the first operand's dtype. Here the float product is fuselage's MatMul
// (runtime/float_ops.h), not MKL's sgemm: a product on a rounding boundary can land one
// step away from PyTorch's.
//
//   ASSIGN_OR_RETURN(Tensor y, quantized::QuantizedMatMul(qa, qb, 0.02, 128));
#ifndef FUSELAGE_RUNTIME_QUANTIZED_MATMUL_H_
#define FUSELAGE_RUNTIME_QUANTIZED_MATMUL_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "graph/tensor.h"

namespace fuselage {
namespace quantized {

// InvalidArgument naming the operand if either is not per-tensor quint8 / qint8, their
// dtypes differ (PyTorch's check_inputs), their shapes do not multiply, or the output
// scale / zero point is invalid.
absl::StatusOr<Tensor> QuantizedMatMul(const Tensor& qa, const Tensor& qb, double output_scale,
                                       int64_t output_zero_point);

}  // namespace quantized
}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_MATMUL_H_
