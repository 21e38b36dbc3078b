// GCC's -O2 vectorizes with its "very cheap" cost model, which refuses loops with a
// remainder (and gathers); these loops are worth its full model. Set for the whole file,
// before any include, so that the inline functions the loops call share the setting and
// stay inlinable. Clang vectorizes them by default. no-trapping-math lets GCC compute both
// sides of a select (if-conversion) in vector lanes; it changes no
// value, only whether floating-point exception flags may be raised by the unused side.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic", "no-trapping-math")
#endif

#include "runtime/quantized/kernel_loops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/quantized/aten_math.h"
#include "runtime/quantized/quant_math.h"

namespace fuselage {
namespace quantized {

#define FUSELAGE_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))

// QuantizeValue, branch-free so that it vectorizes: zero_point + nearbyint(...) is a whole
// number (or infinite, or NaN exactly when the value is), so RoundAndClamp's rounding is the
// identity and only its clamp and NaN rule remain.
FUSELAGE_CLONES
void QuantizeFloatsTo8Bit(const float* __restrict in, int64_t n, float inv_scale,
                          int64_t zero_point, DType dtype, uint8_t* __restrict out) {
  const float lo = static_cast<float>(DTypeMin(dtype)), hi = static_cast<float>(DTypeMax(dtype));
  const float zp = static_cast<float>(zero_point);
  const bool is_signed = dtype == DType::kQInt8;
  for (int64_t i = 0; i < n; ++i) {
    const float v = in[i];
    const float clamped = std::min(std::max(zp + std::nearbyint(v * inv_scale), lo), hi);
    const float q = std::isnan(v) ? zp : clamped;
    out[i] = is_signed ? static_cast<uint8_t>(static_cast<int8_t>(q))
                       : static_cast<uint8_t>(static_cast<int32_t>(q));
  }
}

template <bool kFused>
inline void QuantizeFloatsDynamicBody(const float* __restrict in, int64_t n, float inv_scale,
                                      float zp, float lo, float hi, uint8_t* __restrict out) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = kFused ? std::nearbyint(std::fma(in[i], inv_scale, zp))
                           : zp + std::nearbyint(in[i] * inv_scale);
    const float clamped = std::min(std::max(v, lo), hi);
    out[i] = static_cast<uint8_t>(static_cast<int32_t>(std::isnan(v) ? lo : clamped));
  }
}

FUSELAGE_CLONES
void QuantizeFloatsDynamic(const float* in, int64_t n, float inv_scale, int32_t zero_point,
                           int32_t qmin, int32_t qmax, bool fused, uint8_t* out) {
  const float zp = static_cast<float>(zero_point);
  const float lo = static_cast<float>(qmin), hi = static_cast<float>(qmax);
  if (fused) {
    QuantizeFloatsDynamicBody<true>(in, n, inv_scale, zp, lo, hi, out);
  } else {
    QuantizeFloatsDynamicBody<false>(in, n, inv_scale, zp, lo, hi, out);
  }
}

FUSELAGE_CLONES
void DynamicLinearOutput(const int32_t* __restrict acc, int64_t rows, int64_t cols,
                         const int32_t* __restrict offsets, const float* __restrict multiplier,
                         const float* __restrict bias, float* __restrict out) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint32_t* row = reinterpret_cast<const uint32_t*>(acc + r * cols);
    float* o = out + r * cols;
    if (bias != nullptr) {
      for (int64_t n = 0; n < cols; ++n) {
        const int32_t a = static_cast<int32_t>(row[n] - static_cast<uint32_t>(offsets[n]));
        const float v = static_cast<float>(a) * multiplier[n];
        o[n] = v + bias[n];
      }
    } else {
      for (int64_t n = 0; n < cols; ++n) {
        const int32_t a = static_cast<int32_t>(row[n] - static_cast<uint32_t>(offsets[n]));
        o[n] = static_cast<float>(a) * multiplier[n];
      }
    }
  }
}

FUSELAGE_CLONES
void LstmCellRow(const float* __restrict gh, const float* __restrict gi, int64_t hidden,
                 float* __restrict c, float* __restrict h, float* __restrict out,
                 float* __restrict scratch) {
  float* __restrict gates = scratch;
  for (int64_t j = 0; j < 4 * hidden; ++j) gates[j] = gh[j] + gi[j];
  SigmoidAsATen(gates, hidden);
  SigmoidAsATen(gates + hidden, hidden);
  TanhAsATen(gates + 2 * hidden, hidden);
  SigmoidAsATen(gates + 3 * hidden, hidden);
  float* __restrict tanh_c = scratch + 4 * hidden;
  for (int64_t j = 0; j < hidden; ++j) {
    const float kept = gates[hidden + j] * c[j];
    const float added = gates[j] * gates[2 * hidden + j];
    c[j] = kept + added;
    tanh_c[j] = c[j];
  }
  TanhAsATen(tanh_c, hidden);
  for (int64_t j = 0; j < hidden; ++j) {
    h[j] = gates[3 * hidden + j] * tanh_c[j];
    out[j] = h[j];
  }
}

FUSELAGE_CLONES
void GruCellRow(const float* __restrict gh, const float* __restrict gi, int64_t hidden,
                float* __restrict h, float* __restrict out, float* __restrict scratch) {
  float* __restrict gates = scratch;  // r, z, then n
  for (int64_t j = 0; j < 2 * hidden; ++j) gates[j] = gh[j] + gi[j];
  SigmoidAsATen(gates, hidden);
  SigmoidAsATen(gates + hidden, hidden);
  float* __restrict new_gate = gates + 2 * hidden;
  for (int64_t j = 0; j < hidden; ++j) {
    const float scaled = gh[2 * hidden + j] * gates[j];
    new_gate[j] = gi[2 * hidden + j] + scaled;
  }
  TanhAsATen(new_gate, hidden);
  for (int64_t j = 0; j < hidden; ++j) {
    const float diff = h[j] - new_gate[j];
    const float mixed = diff * gates[hidden + j];
    h[j] = mixed + new_gate[j];
    out[j] = h[j];
  }
}

// Independent lanes, so that it vectorizes without reassociating a reduction (which GCC
// does for float min / max only under -ffinite-math-only): (v < m) ? v : m keeps m for a
// NaN v, as std::min does.
FUSELAGE_CLONES
void MinMaxFloats(const float* __restrict in, int64_t n, float* min_out, float* max_out) {
  constexpr int kLanes = 16;
  float lo[kLanes], hi[kLanes];
  for (int j = 0; j < kLanes; ++j) {
    lo[j] = std::numeric_limits<float>::infinity();
    hi[j] = -std::numeric_limits<float>::infinity();
  }
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const float v = in[i + j];
      lo[j] = v < lo[j] ? v : lo[j];
      hi[j] = v > hi[j] ? v : hi[j];
    }
  }
  for (; i < n; ++i) {
    lo[0] = in[i] < lo[0] ? in[i] : lo[0];
    hi[0] = in[i] > hi[0] ? in[i] : hi[0];
  }
  for (int j = 1; j < kLanes; ++j) {
    lo[0] = lo[j] < lo[0] ? lo[j] : lo[0];
    hi[0] = hi[j] > hi[0] ? hi[j] : hi[0];
  }
  *min_out = lo[0];
  *max_out = hi[0];
}

// Branch-free, so that it vectorizes: a table entry is finite (finite scales, 8-bit
// values), so the sum is never NaN, and zero_point + nearbyint(...) is already a whole
// number, so RoundAndClamp's second rounding is the identity and only its clamp remains.
template <bool kRelu>
inline void AddDequantized8BitBody(const uint8_t* __restrict a, const uint8_t* __restrict b,
                                   int64_t n, const float* __restrict table_a,
                                   const float* __restrict table_b, float inv_scale,
                                   float zero_point, float lo, float hi,
                                   uint8_t* __restrict out, bool is_signed) {
  for (int64_t i = 0; i < n; ++i) {
    float c = table_a[a[i]] + table_b[b[i]];
    if (kRelu) c = std::max(c, 0.0f);
    const float q = std::min(std::max(zero_point + std::nearbyint(c * inv_scale), lo), hi);
    out[i] = is_signed ? static_cast<uint8_t>(static_cast<int8_t>(q))
                       : static_cast<uint8_t>(static_cast<int32_t>(q));
  }
}

FUSELAGE_CLONES
void AddDequantized8BitByTable(const uint8_t* a, const uint8_t* b, int64_t n,
                               const float* table_a, const float* table_b, bool relu,
                               float inv_scale, int64_t zero_point, DType dtype, uint8_t* out) {
  const float lo = static_cast<float>(DTypeMin(dtype)), hi = static_cast<float>(DTypeMax(dtype));
  const float zp = static_cast<float>(zero_point);
  const bool is_signed = dtype == DType::kQInt8;
  if (relu) {
    AddDequantized8BitBody<true>(a, b, n, table_a, table_b, inv_scale, zp, lo, hi, out, is_signed);
  } else {
    AddDequantized8BitBody<false>(a, b, n, table_a, table_b, inv_scale, zp, lo, hi, out,
                                  is_signed);
  }
}

namespace {

#if defined(__x86_64__) && defined(__GNUC__)
#define FUSELAGE_HAVE_FMA_ADD 1

// AddDequantized8BitBody with each value's fma computed, not looked up: GCC vectorizes
// it with vfmadd, where the table's gathers cost more than the arithmetic.
template <typename Stored, bool kRelu>
__attribute__((target("arch=x86-64-v3"))) inline void AddDequantizedFmaBody(
    const Stored* __restrict a, const Stored* __restrict b, int64_t n, Dequantize8Bit dq_a,
    Dequantize8Bit dq_b, float inv_scale, float zero_point, float lo, float hi,
    Stored* __restrict out) {
  for (int64_t i = 0; i < n; ++i) {
    float c = std::fma(dq_a.scale, static_cast<float>(a[i]), dq_a.premul) +
              std::fma(dq_b.scale, static_cast<float>(b[i]), dq_b.premul);
    if (kRelu) c = std::max(c, 0.0f);
    const float q = std::min(std::max(zero_point + std::nearbyint(c * inv_scale), lo), hi);
    out[i] = static_cast<Stored>(static_cast<int32_t>(q));
  }
}

template <typename Stored>
__attribute__((target("arch=x86-64-v3"))) void AddDequantizedFma(
    const Stored* a, const Stored* b, int64_t n, const Dequantize8Bit& dq_a,
    const Dequantize8Bit& dq_b, bool relu, float inv_scale, float zero_point, float lo, float hi,
    Stored* out) {
  if (relu) {
    AddDequantizedFmaBody<Stored, true>(a, b, n, dq_a, dq_b, inv_scale, zero_point, lo, hi, out);
  } else {
    AddDequantizedFmaBody<Stored, false>(a, b, n, dq_a, dq_b, inv_scale, zero_point, lo, hi, out);
  }
}

bool CpuHasFma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
#endif

}  // namespace

void AddDequantized8Bit(const uint8_t* a, const uint8_t* b, int64_t n, const Dequantize8Bit& dq_a,
                        const Dequantize8Bit& dq_b, bool relu, float inv_scale,
                        int64_t zero_point, DType dtype, uint8_t* out) {
#if defined(FUSELAGE_HAVE_FMA_ADD)
  if (CpuHasFma()) {
    const float lo = static_cast<float>(DTypeMin(dtype));
    const float hi = static_cast<float>(DTypeMax(dtype));
    const float zp = static_cast<float>(zero_point);
    if (dtype == DType::kQInt8) {
      AddDequantizedFma(reinterpret_cast<const int8_t*>(a), reinterpret_cast<const int8_t*>(b), n,
                        dq_a, dq_b, relu, inv_scale, zp, lo, hi, reinterpret_cast<int8_t*>(out));
    } else {
      AddDequantizedFma(a, b, n, dq_a, dq_b, relu, inv_scale, zp, lo, hi, out);
    }
    return;
  }
#endif
  AddDequantized8BitByTable(a, b, n, dq_a.table, dq_b.table, relu, inv_scale, zero_point, dtype,
                            out);
}

template <typename Extra>
inline void ConvAddPlaneSumsBody(const int32_t* __restrict acc, const Extra* __restrict extra,
                                 int64_t n, double x_scale, double w_scale, double bias,
                                 float extra_scale, int32_t extra_zero_point, bool relu,
                                 float* __restrict out) {
  for (int64_t i = 0; i < n; ++i) {
    const double conv = static_cast<double>(acc[i]) * x_scale * w_scale + bias;
    const float e = extra_scale * static_cast<float>(static_cast<int32_t>(extra[i]) -
                                                     extra_zero_point);
    const float sum = static_cast<float>(conv) + e;
    out[i] = relu ? std::max(sum, 0.0f) : sum;
  }
}

FUSELAGE_CLONES
void ConvAddPlaneSums(const int32_t* acc, const uint8_t* extra, int64_t n, double x_scale,
                      double w_scale, double bias, float extra_scale, int32_t extra_zero_point,
                      DType extra_dtype, bool relu, float* out) {
  if (extra_dtype == DType::kQInt8) {
    ConvAddPlaneSumsBody(acc, reinterpret_cast<const int8_t*>(extra), n, x_scale, w_scale, bias,
                         extra_scale, extra_zero_point, relu, out);
  } else {
    ConvAddPlaneSumsBody(acc, extra, n, x_scale, w_scale, bias, extra_scale, extra_zero_point,
                         relu, out);
  }
}

// The wrap-around add in unsigned arithmetic (defined), then back to int32.
inline int32_t WrappingAdd(int32_t a, int32_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
}

inline uint8_t RequantizeQnnpack(int32_t acc, int32_t bias_q, float scale, float zero_point,
                                 float lo, float hi, bool is_signed) {
  const float v = static_cast<float>(WrappingAdd(acc, bias_q)) * scale;
  const float q = std::min(std::max(std::nearbyint(v) + zero_point, lo), hi);
  return is_signed ? static_cast<uint8_t>(static_cast<int8_t>(q))
                   : static_cast<uint8_t>(static_cast<int32_t>(q));
}

FUSELAGE_CLONES
void RequantizeQnnpackPlane(const int32_t* __restrict acc, int64_t n, int32_t bias_q,
                            float scale, int32_t zero_point, int32_t lo, int32_t hi, DType dtype,
                            uint8_t* __restrict out) {
  const bool is_signed = dtype == DType::kQInt8;
  const float zp = static_cast<float>(zero_point);
  const float flo = static_cast<float>(lo), fhi = static_cast<float>(hi);
  for (int64_t i = 0; i < n; ++i) {
    out[i] = RequantizeQnnpack(acc[i], bias_q, scale, zp, flo, fhi, is_signed);
  }
}

FUSELAGE_CLONES
void RequantizeQnnpackRow(const int32_t* __restrict acc, int64_t n,
                          const int32_t* __restrict bias_q, const float* __restrict scales,
                          int32_t zero_point, int32_t lo, int32_t hi, DType dtype,
                          uint8_t* __restrict out) {
  const bool is_signed = dtype == DType::kQInt8;
  const float zp = static_cast<float>(zero_point);
  const float flo = static_cast<float>(lo), fhi = static_cast<float>(hi);
  for (int64_t i = 0; i < n; ++i) {
    out[i] = RequantizeQnnpack(acc[i], bias_q[i], scales[i], zp, flo, fhi, is_signed);
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
