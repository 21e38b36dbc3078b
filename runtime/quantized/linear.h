// Quantized linear: torch.ops.quantized.linear / linear_relu (nnq.Linear,
// nniq.LinearReLU). y[..., n] = requantize(sum_k (x[..., k] - x_zp) * (w[n, k] - w_zp[n]))
// with OutputRequantizer (PyTorch 1.13's onednn requantization, bit for bit; see
// output_requantizer.h). The exact int32 GEMM is oneDNN's int8 matmul (u8 / s8 x s8 -> s32
// with a run-time source zero point).
// Input: quint8 (qint8 accepted, same formula), per tensor, shape [..., in_features];
// weight: qint8 [out_features, in_features], per tensor or per channel along axis 0;
// bias: float32 [out_features] or absent. Output: [..., out_features], input's dtype.
#ifndef FUSELAGE_RUNTIME_QUANTIZED_LINEAR_H_
#define FUSELAGE_RUNTIME_QUANTIZED_LINEAR_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "graph/tensor.h"
#include "runtime/quantized_engine.h"

namespace fuselage {
namespace quantized {

absl::StatusOr<Tensor> QuantizedLinear(const Tensor& qx, const Tensor& qweight,
                                       const Tensor* bias, double output_scale,
                                       int64_t output_zero_point, bool relu,
                                       QuantizedEngine engine = QuantizedEngine::kOnednn);

}  // namespace quantized
}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_LINEAR_H_
