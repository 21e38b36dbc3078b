// The scalar arithmetic every quantized kernel shares, written to reproduce PyTorch 1.13's
// quantized CPU kernels bit for bit (checked against goldens generated with PyTorch
// 1.13.1, engine 'onednn', under tests/runtime/testdata/quantized/), plus the argument
// checks those kernels run before computing anything.
//
// Quantized tensors are handled as "int views": their stored values widened to int32,
// which keeps every kernel independent of the storage type (uint8 / int8 / int32).
#ifndef FUSELAGE_RUNTIME_QUANTIZED_QUANT_MATH_H_
#define FUSELAGE_RUNTIME_QUANTIZED_QUANT_MATH_H_

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/dtype.h"
#include "graph/tensor.h"

namespace fuselage {
namespace quantized {

// PyTorch's quantize_val (aten/src/ATen/native/quantized/AffineQuantizer.cpp, non-fbgemm
// build): inv_scale = 1.0f / float(scale); q = clamp(float(zero_point) +
// nearbyint(value * inv_scale)), all in float, rounding half to even (the default
// rounding mode). NaN maps to zero_point. `dtype` is a quantized dtype.
// Inline, as RoundAndClamp: every quantized kernel calls it per element. (The vectorized
// 8-bit loops of kernel_loops.h compute the same formula branch-free.)
inline int32_t QuantizeValue(float value, float inv_scale, int64_t zero_point, DType dtype);
inline float InverseScale(double scale) { return 1.0f / static_cast<float>(scale); }

// PyTorch's dequantize_val for per-tensor tensors: float(scale) * float(q - zero_point).
inline float DequantizeValue(int32_t q, float scale, int64_t zero_point) {
  return scale * static_cast<float>(static_cast<int64_t>(q) - zero_point);
}

// PyTorch's requantize_from_int: clamp(zero_point + lrintf(float(src) * multiplier)).
int32_t RequantizeFromInt(int64_t src, float multiplier, int64_t zero_point, DType dtype);

// Rounds `value` half to even and clamps it to [lo, hi] (saturating huge values and
// mapping NaN to lo): the final step of every requantization.
inline int32_t RoundAndClamp(float value, int64_t lo, int64_t hi) {
  if (std::isnan(value)) return static_cast<int32_t>(lo);
  // Clamp in float before converting so that huge values saturate instead of being UB.
  const float rounded = std::nearbyint(value);
  if (rounded <= static_cast<float>(lo)) return static_cast<int32_t>(lo);
  if (rounded >= static_cast<float>(hi)) return static_cast<int32_t>(hi);
  return static_cast<int32_t>(rounded);
}

inline int32_t QuantizeValue(float value, float inv_scale, int64_t zero_point, DType dtype) {
  if (std::isnan(value)) return static_cast<int32_t>(zero_point);
  // PyTorch adds the zero point to the rounded value in float (int64 + float -> float).
  const float shifted = static_cast<float>(zero_point) + std::nearbyint(value * inv_scale);
  return RoundAndClamp(shifted, DTypeMin(dtype), DTypeMax(dtype));
}

// The stored values of a quantized tensor widened to int32. CHECKs is_quantized().
std::vector<int32_t> IntValues(const Tensor& tensor);
// A quantized tensor of `dtype` holding `values` (already in the dtype's range; CHECKed).
Tensor FromIntValues(DType dtype, std::vector<int64_t> shape, QuantParams qparams,
                     const std::vector<int32_t>& values);

// ---- Checks. Each error names the op and the field and says what was expected. ----

// `tensor` is a quantized tensor (qint8 / quint8 / qint32) with per-tensor parameters.
absl::Status ExpectPerTensorQuantized(const Tensor& tensor, absl::string_view op,
                                      absl::string_view field);
// ExpectPerTensorQuantized, and 8-bit (quint8 / qint8): an activation the kernels take.
absl::Status ExpectPerTensorEightBit(const Tensor& tensor, absl::string_view op,
                                     absl::string_view field);
// `tensor` is quantized with a valid per-tensor or per-channel scheme (scales > 0, one
// scale and zero point per channel of `axis`).
absl::Status ExpectQuantized(const Tensor& tensor, absl::string_view op,
                             absl::string_view field);
// `dtype` is one of qint8 / quint8 / qint32.
absl::Status ExpectQuantizedDType(DType dtype, absl::string_view op, absl::string_view field);
// A scale is finite and > 0; a zero point lies in the range of `dtype`.
absl::Status ExpectValidScale(double scale, absl::string_view op, absl::string_view field);
absl::Status ExpectValidZeroPoint(int64_t zero_point, DType dtype, absl::string_view op,
                                  absl::string_view field);
// `tensor` is float32.
absl::Status ExpectFloat32(const Tensor& tensor, absl::string_view op,
                           absl::string_view field);

}  // namespace quantized
}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_QUANT_MATH_H_
