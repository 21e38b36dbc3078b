#include "runtime/quantized/aten_math.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

// Sleef's own entry points (Debian's libsleef-dev): sleef.h declares the vector ones only
// when the whole file is compiled for AVX, and this file is not, so that it loads on any
// x86-64; the AVX2 code below is chosen at run time. The FMA variants are the ones
// PyTorch's AVX2 / AVX-512 kernels run (the same results in every lane width).
// The vector ones carry the target they need: clang refuses an __m256 argument across a
// call unless both sides have AVX enabled (the by-value ABI differs without it).
extern "C" {
__attribute__((target("avx2,fma"))) __m256 Sleef_expf8_u10avx2(__m256 x);
__attribute__((target("avx2,fma"))) __m256 Sleef_tanhf8_u10avx2(__m256 x);
float Sleef_expf1_u10purec(float x);
float Sleef_tanhf1_u10purec(float x);
}

namespace fuselage {
namespace quantized {
namespace {

bool HasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

// The floats one iteration of ATen's vectorized loop takes: two vectors of its widest ISA.
int64_t AtenVectorBlock() {
  static const int64_t block =
      (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
          ? 32
          : 16;
  return block;
}

__attribute__((target("avx2,fma"))) void SigmoidVectorsAvx2(float* x, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 e = Sleef_expf8_u10avx2(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_loadu_ps(x + i)));
    _mm256_storeu_ps(x + i, _mm256_div_ps(one, _mm256_add_ps(e, one)));
  }
}

__attribute__((target("avx2,fma"))) void TanhVectorsAvx2(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, Sleef_tanhf8_u10avx2(_mm256_loadu_ps(x + i)));
  if (i < n) {  // the tail through one vector, as ATen's partial loads
    float lanes[8] = {};
    std::copy(x + i, x + n, lanes);
    _mm256_storeu_ps(lanes, Sleef_tanhf8_u10avx2(_mm256_loadu_ps(lanes)));
    std::copy(lanes, lanes + (n - i), x + i);
  }
}

}  // namespace

void SigmoidAsATen(float* x, int64_t n) {
  const int64_t vector_end = n - n % AtenVectorBlock();
  if (HasAvx2Fma()) {
    SigmoidVectorsAvx2(x, vector_end);
  } else {
    for (int64_t i = 0; i < vector_end; ++i) x[i] = 1.0f / (Sleef_expf1_u10purec(-x[i]) + 1.0f);
  }
  for (int64_t i = vector_end; i < n; ++i) x[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

void TanhAsATen(float* x, int64_t n) {
  if (HasAvx2Fma()) {
    TanhVectorsAvx2(x, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) x[i] = Sleef_tanhf1_u10purec(x[i]);
}

}  // namespace quantized
}  // namespace fuselage
