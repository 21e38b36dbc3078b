#ifndef FUSELAGE_RUNTIME_QUANTIZED_ATEN_MATH_H_
#define FUSELAGE_RUNTIME_QUANTIZED_ATEN_MATH_H_

// Sigmoid and tanh computed bit for bit as PyTorch's CPU kernels compute them, for the
// recurrent cells (runtime/quantized/dynamic_rnn.h). There an ulp matters: a dynamic
// LSTM requantizes its hidden state at every step, and a value one ulp off a rounding
// boundary moves a whole quantization step and every later output with it.
//
// ATen's float sigmoid is 1 / (exp(-x) + 1) with Sleef's expf (u10) in its vector loop,
// which covers the whole blocks of two vectors of each contiguous run (32 floats where
// ATen dispatches to AVX-512, else 16) and libm's expf on the rest. Its tanh is Sleef's
// tanhf (u10) on every element; a PyTorch built with MKL (the PyPI wheels) calls MKL's
// vsTanh instead, which differs in the last bit for about 1 % of values.
//
//   float gates[64] = ...;
//   SigmoidAsATen(gates, 64);   // as torch.sigmoid_ on a contiguous [64] row

#include <cstdint>

namespace fuselage {
namespace quantized {

// x[i] = sigmoid(x[i]) for a contiguous run of n floats, in place.
void SigmoidAsATen(float* x, int64_t n);

// x[i] = tanh(x[i]) for n floats, in place.
void TanhAsATen(float* x, int64_t n);

}  // namespace quantized
}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_ATEN_MATH_H_
