#include "runtime/quantized/kernel_loops.h"

#include <algorithm>

#include "runtime/quantized/quant_math.h"

namespace fuselage {
namespace quantized {

#define FUSELAGE_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))

FUSELAGE_CLONES
void QuantizeFloatsTo8Bit(const float* in, int64_t n, float inv_scale, int64_t zero_point,
                          DType dtype, uint8_t* out) {
  const int64_t lo = DTypeMin(dtype), hi = DTypeMax(dtype);
  for (int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<uint8_t>(QuantizeValueIn(in[i], inv_scale, zero_point, lo, hi));
  }
}

FUSELAGE_CLONES
void AddDequantized8Bit(const uint8_t* a, const uint8_t* b, int64_t n, const float* table_a,
                        const float* table_b, bool relu, float inv_scale, int64_t zero_point,
                        DType dtype, uint8_t* out) {
  const int64_t lo = DTypeMin(dtype), hi = DTypeMax(dtype);
  for (int64_t i = 0; i < n; ++i) {
    float c = table_a[a[i]] + table_b[b[i]];
    if (relu) c = std::max(c, 0.0f);
    out[i] = static_cast<uint8_t>(QuantizeValueIn(c, inv_scale, zero_point, lo, hi));
  }
}

FUSELAGE_CLONES
void Clamp8Bit(const uint8_t* x, int64_t n, int32_t lo, int32_t hi, DType dtype, uint8_t* out) {
  if (dtype == DType::kQInt8) {
    const int8_t* s = reinterpret_cast<const int8_t*>(x);
    for (int64_t i = 0; i < n; ++i) {
      out[i] = static_cast<uint8_t>(static_cast<int8_t>(std::min<int32_t>(std::max<int32_t>(s[i], lo), hi)));
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<uint8_t>(std::min<int32_t>(std::max<int32_t>(x[i], lo), hi));
  }
}

}  // namespace quantized
}  // namespace fuselage
