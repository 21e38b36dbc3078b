// The hot loops of the 8-bit quantized kernels, over raw bytes (no int32 widening), each
// compiled twice by GCC's target_clones — for baseline x86-64 and for x86-64-v3 (AVX2,
// FMA, SSE4.1 rounding) — and picked when the program loads by what the CPU has, so a
// baseline build still gets vector code where the machine allows. Both clones compute the
// same bits: x86-64-v3's FMA instruction is the fused multiply-add std::fma computes in
// software otherwise, and nearbyint rounds half to even in both (quant_math.h's formulas).
//
// `dtype` is kQUInt8 or kQInt8; int8 values travel as their uint8 bit patterns.
#ifndef FUSELAGE_RUNTIME_QUANTIZED_KERNEL_LOOPS_H_
#define FUSELAGE_RUNTIME_QUANTIZED_KERNEL_LOOPS_H_

#include <cstdint>

#include "graph/dtype.h"

namespace fuselage {
namespace quantized {

// out[i] = QuantizeValue(in[i], inv_scale, zero_point, dtype).
void QuantizeFloatsTo8Bit(const float* in, int64_t n, float inv_scale, int64_t zero_point,
                          DType dtype, uint8_t* out);

// Dynamic quantization's input step (DynamicQuantizedLinear): out[i] = the stored value of
// in[i] into [qmin, qmax] (uint8) with zero point `zero_point`, as the engine rounds it:
// `fused` (fbgemm / x86 / onednn) nearbyint(fma(in, inv_scale, zero_point)), otherwise
// (QNNPACK) zero_point + nearbyint(in * inv_scale); NaN becomes qmin (RoundAndClamp).
void QuantizeFloatsDynamic(const float* in, int64_t n, float inv_scale, int32_t zero_point,
                           int32_t qmin, int32_t qmax, bool fused, uint8_t* out);

// Dynamic Linear's output from oneDNN's accumulators without zero point: for row r and
// column n, a = acc[r, n] - offsets[n] (int32, wrapping: the true accumulator fits, the
// terms may not) and out[r, n] = float(a) * multiplier[n] (+ bias[n]), each float rounded
// on its own.
void DynamicLinearOutput(const int32_t* acc, int64_t rows, int64_t cols, const int32_t* offsets,
                         const float* multiplier, const float* bias, float* out);

// One step of a recurrent cell for one batch row, from the hidden and input projections
// gh, gi ([G * hidden] each, gates in PyTorch's order), each float step rounded on its own
// in PyTorch's order and sigmoid / tanh as ATen's (aten_math.h), so that the row is
// PyTorch's bit for bit. `scratch` holds [(G + 1) * hidden] floats.
//   LSTM (G = 4: i, f, g, o): c = f * c + i * g; h = o * tanh(c); out = h.
//   GRU (G = 3: r, z, n): n = tanh(gi_n + gh_n * r); h = (h - n) * z + n; out = h.
void LstmCellRow(const float* gh, const float* gi, int64_t hidden, float* c, float* h,
                 float* out, float* scratch);
void GruCellRow(const float* gh, const float* gi, int64_t hidden, float* h, float* out,
                float* scratch);

// The smallest and largest of in[0..n) with NaNs skipped; (+inf, -inf) when there is none.
void MinMaxFloats(const float* in, int64_t n, float* min_out, float* max_out);

// How an 8-bit input of an add is dequantized (QuantizedAdd's formula): stored value q
// as fma(scale, float(q), premul), and `table`[byte] that value for each of the 256 bytes.
struct Dequantize8Bit {
  float scale = 1.0f;
  float premul = 0.0f;  // scale * -zero_point
  const float* table = nullptr;
};

// out[i] = QuantizeValue(relu?(dq_a(a[i]) + dq_b(b[i])), inv_scale, zero_point). On a CPU
// with FMA (x86-64-v3) each dequantized value is computed by its fma, in vector lanes;
// elsewhere it is looked up in the table (a libm fma per element would be slower). Both
// give the same float: the table holds the same correctly rounded fma.
void AddDequantized8Bit(const uint8_t* a, const uint8_t* b, int64_t n, const Dequantize8Bit& dq_a,
                        const Dequantize8Bit& dq_b, bool relu, float inv_scale,
                        int64_t zero_point, DType dtype, uint8_t* out);

// The table form of AddDequantized8Bit, whatever the CPU (what CPUs without FMA run;
// public so that tests compare the two forms on every pair of bytes).
void AddDequantized8BitByTable(const uint8_t* a, const uint8_t* b, int64_t n,
                               const float* table_a, const float* table_b, bool relu,
                               float inv_scale, int64_t zero_point, DType dtype, uint8_t* out);

// QNNPACK's requantization (output_requantizer.h) of int32 accumulators, as its kernels
// compute it: the int32 bias added to the accumulator with int32 wrap-around, times the
// float scale, rounded half to even, plus the zero point, clamped to [lo, hi].
// One conv output plane: n accumulators of one channel.
void RequantizeQnnpackPlane(const int32_t* acc, int64_t n, int32_t bias_q, float scale,
                            int32_t zero_point, int32_t lo, int32_t hi, DType dtype,
                            uint8_t* out);
// One linear output row: n accumulators of channels 0..n-1.
void RequantizeQnnpackRow(const int32_t* acc, int64_t n, const int32_t* bias_q,
                          const float* scales, int32_t zero_point, int32_t lo, int32_t hi,
                          DType dtype, uint8_t* out);

// quantized conv2d_add[_relu]'s float sum for one output plane (one image, one channel):
// out[i] = relu?(float(double(acc[i]) * x_scale * w_scale + bias) +
// DequantizeValue(extra[i], extra_scale, extra_zero_point)), in that order of operations
// (QuantizedConvAdd2d's reference arithmetic), extra 8-bit of `extra_dtype`.
void ConvAddPlaneSums(const int32_t* acc, const uint8_t* extra, int64_t n, double x_scale,
                      double w_scale, double bias, float extra_scale, int32_t extra_zero_point,
                      DType extra_dtype, bool relu, float* out);

// out[i] = min(max(x[i], lo), hi) on the stored values (relu, hardtanh, clamp).
void Clamp8Bit(const uint8_t* x, int64_t n, int32_t lo, int32_t hi, DType dtype, uint8_t* out);

}  // namespace quantized
}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_KERNEL_LOOPS_H_
