// quantize_per_tensor, quantize_per_channel and dequantize over fuselage::Tensor, with
// PyTorch 1.13's CPU numerics (non-fbgemm build, as Debian ships it):
//  - quantize:   q = clamp(zero_point + nearbyint(x * (1.0f / float(scale)))), float math,
//                round half to even (at::native::quantize_val);
//  - dequantize: per-tensor float(scale) * float(q - zero_point)
//                (dequantize_tensor_per_tensor_affine_cpu); per-channel
//                float(double(float(q) - zero_point) * scale) (the per-channel kernel
//                computes in double).
#ifndef FUSELAGE_RUNTIME_QUANTIZED_QUANTIZE_H_
#define FUSELAGE_RUNTIME_QUANTIZED_QUANTIZE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/dtype.h"
#include "graph/tensor.h"

namespace fuselage {
namespace quantized {

// torch.quantize_per_tensor(x, scale, zero_point, dtype). `x` must be float32, `scale`
// finite and > 0, `zero_point` in `dtype`'s range, `dtype` qint8 / quint8 / qint32.
absl::StatusOr<Tensor> QuantizePerTensor(const Tensor& x, double scale, int64_t zero_point,
                                         DType dtype);

// torch.quantize_per_channel(x, scales, zero_points, axis, dtype): one scale and zero
// point per index of dimension `axis` (negative axes count from the end, as in PyTorch).
absl::StatusOr<Tensor> QuantizePerChannel(const Tensor& x, const std::vector<double>& scales,
                                          const std::vector<int64_t>& zero_points,
                                          int64_t axis, DType dtype);

// x.dequantize(): a float32 tensor of the same shape. `x` must be quantized (per-tensor
// or per-channel) with valid parameters.
absl::StatusOr<Tensor> Dequantize(const Tensor& x);

// `value` rounded to the nearest float16 (ties to even), back in float: IEEE's
// float -> half conversion (beyond float16's range +-inf, NaN kept), as torch's
// .to(torch.float16). With `saturate`, beyond the range gives +-65504 instead, as
// PyTorch's fp16 weight prepack clamps the weight.
float RoundToFloat16(float value, bool saturate = false);

// x.to(torch.float16), the "quantize" of a float16 static qconfig: a float32 tensor of
// the same shape holding every value rounded to float16 (RoundToFloat16). The model and
// the runtime keep no float16 tensors: a float16 value is carried as float32, exactly,
// and its dequantize (PyTorch's .to(torch.float)) is the identity. `x` must be float32.
absl::StatusOr<Tensor> CastToFloat16(const Tensor& x);

}  // namespace quantized
}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_QUANTIZE_H_
