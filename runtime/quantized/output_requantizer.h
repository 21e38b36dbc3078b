// OutputRequantizer: turns the int32 accumulators of a quantized conv / linear into
// output values exactly as one of PyTorch 1.13's engines does (runtime/quantized_engine.h).
//
// onednn (ideep 2.6 + oneDNN 2.6:
// aten/src/ATen/native/quantized/cpu/qconv.cpp / qlinear.cpp pass reciprocal scales to
// ideep, whose conv_deconv_utils::prepare_parameters and utils::compute_scales derive
// the bias and output scales below; oneDNN's int8 post-processing then adds the f32
// bias, multiplies, applies relu and adds the destination zero point in float before
// rounding). For output channel c, every step in float32 and separately rounded:
//   src_inv    = float(1.0 / input_scale)          (divided in double)
//   w_inv[c]   = per-tensor weight: float(1.0 / weight_scale)
//                per-channel weight: 1.0f / float(weight_scale[c])
//   dst_inv    = float(1.0 / output_scale)
//   bias_scale = src_inv * w_inv[c]
//   op_scale   = dst_inv / bias_scale
//   bias_term  = bias[c] * bias_scale              (kept in f32, not rounded to int32)
//   v          = (float(acc) + bias_term) * op_scale,  relu: max(v, 0)
//   out        = saturate(nearbyint(v + float(output_zero_point)))
// Adding the zero point in float before rounding matters: it drops v's low bits, so a
// v just off a half can land on it and round half to even (v = -3.4999962 with zero
// point 112 gives 108.5 -> 108, not 109). Found and verified by experiment: 0 of 3.8 M
// adversarial conv and linear outputs on or near .5 ties differ from onednn's, while
// every variant (fbgemm's ReQuantizeOutput, zero point added after rounding, bias
// rounded to int32, FMA, per-channel reciprocals in double) misses some; a sample of
// those cases is kept as goldens (tests/runtime/gen_quantized_goldens.py, *_ties.txt).
//
// qnnpack (aten/src/ATen/native/quantized/cpu/qconv.cpp / qlinear.cpp with QNNPACK's
// fp32 requantization: quant_utils::QuantizeBias, generate_requantization_scales and the
// q8 kernels' multiply, round and add): the bias is quantized to int32 first, the
// multiplier is one float32, and the zero point is added after rounding:
//   bias_q[c]  = nearbyint(bias[c] * (1.0f / float(weight_scale[c] * input_scale)))
//   scale[c]   = (float(weight_scale[c]) * float(input_scale)) * (1.0f / float(output_scale))
//   out        = saturate(nearbyint(float(acc + bias_q[c]) * scale[c]) + output_zero_point)
// with relu as the lower bound max(zero point, dtype min). Verified against PyTorch's
// qnnpack engine at ties (tests/runtime/gen_qnnpack_goldens.py, qnnpack_*_ties.txt),
// where onednn's formula differs on 89 of their outputs.
//
// onnxruntime (ONNX Runtime 1.30's QLinearConv / QGemm on the QDQ file fuselage.to_onnx
// writes: core/providers/cpu/nn/qlinearconv.cc, MLAS's requantize output processor):
// QNNPACK's order (int32 bias in the accumulator, one float32 multiplier, round half to
// even, then the zero point), with ORT's multiplier and the int32 bias the file holds:
//   scale[c]   = (float(input_scale) * float(weight_scale[c])) / float(output_scale)
//   bias_q[c]  = nearbyint(double(bias[c]) / double(float(input_scale) * float(weight_scale[c])))
// QNNPACK's reciprocal multiplier differs from ORT's quotient in the last bit for some
// channels (14 of resnet18's 64 in layer1.0.conv2), which moves 1 in 16 K outputs one step;
// resnet18's depth makes that 3 % of its logits (tests/python/test_onnx_import_torchvision.py).
//
// The arithmetic must stay unfused: the targets that include this header compile with
// -ffp-contract=off so that "v * op_scale + zero_point" never becomes one FMA.
#ifndef FUSELAGE_RUNTIME_QUANTIZED_OUTPUT_REQUANTIZER_H_
#define FUSELAGE_RUNTIME_QUANTIZED_OUTPUT_REQUANTIZER_H_

#include <cmath>
#include <cstdint>
#include <vector>

#include "graph/dtype.h"
#include "runtime/quantized_engine.h"

namespace fuselage {
namespace quantized {

class OutputRequantizer {
 public:
  // `weight_scales` has one entry per output channel; `per_channel_weight` says whether
  // the weight was quantized per channel (PyTorch rounds the reciprocals differently);
  // `bias` is null or has one entry per output channel. Scales must already be
  // validated (> 0).
  OutputRequantizer(double input_scale, const std::vector<double>& weight_scales,
                    bool per_channel_weight, const float* bias, double output_scale,
                    int64_t output_zero_point, bool relu, DType output_dtype,
                    QuantizedEngine engine = QuantizedEngine::kOnednn);

  // True for onednn's arithmetic, which oneDNN's fused int8 post-processing
  // (runtime/onednn/onednn.h, Int8Output) computes with the factors below in the same
  // order; QNNPACK's rounds before adding the zero point, so it needs Apply.
  bool fusable_in_onednn() const { return engine_ == QuantizedEngine::kOnednn; }
  const std::vector<float>& op_scales() const { return op_scale_; }  // qnnpack: scale[c]
  const std::vector<float>& bias_terms() const { return bias_term_; }
  // QNNPACK's and ONNX Runtime's arithmetic only: bias_q[c], and the output range (relu's included), for the
  // vectorized loops of kernel_loops.h.
  const std::vector<int32_t>& qnnpack_bias() const { return bias_q_; }
  int32_t zero_point() const { return static_cast<int32_t>(zero_point_); }
  int32_t lo() const { return static_cast<int32_t>(lo_); }
  int32_t hi() const { return static_cast<int32_t>(hi_); }

  int32_t Apply(int32_t acc, int64_t channel) const {
    if (engine_ != QuantizedEngine::kOnednn) return ApplyQnnpack(acc, channel);
    const float v = (static_cast<float>(acc) + bias_term_[channel]) * op_scale_[channel];
    // relu (max(v, 0) before the zero point) is the lower bound lo_ = zero point: float
    // addition and rounding are monotonic, so v < 0 gives at most the zero point.
    const float shifted = v + zero_point_;
    // Saturate in double: the bounds of every quantized dtype are exact there.
    const double rounded = std::nearbyint(shifted);
    if (!(rounded > lo_)) return static_cast<int32_t>(lo_);  // also NaN
    if (rounded > hi_) return static_cast<int32_t>(hi_);
    return static_cast<int32_t>(rounded);
  }

 private:
  int32_t ApplyQnnpack(int32_t acc, int64_t channel) const {
    // The bias initializes QNNPACK's int32 accumulator: the sum wraps around as there.
    const int32_t sum = static_cast<int32_t>(static_cast<uint32_t>(acc) +
                                             static_cast<uint32_t>(bias_q_[channel]));
    const double rounded = std::nearbyint(static_cast<float>(sum) * op_scale_[channel]);
    const double shifted = rounded + zero_point_;
    if (!(shifted > lo_)) return static_cast<int32_t>(lo_);  // also NaN
    if (shifted > hi_) return static_cast<int32_t>(hi_);
    return static_cast<int32_t>(shifted);
  }

  QuantizedEngine engine_;
  std::vector<float> op_scale_;   // qnnpack, onnxruntime: scale[c] of the formulas above
  std::vector<float> bias_term_;  // onednn only
  std::vector<int32_t> bias_q_;   // qnnpack and onnxruntime only
  float zero_point_;
  double lo_;
  double hi_;
};

}  // namespace quantized
}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_OUTPUT_REQUANTIZER_H_
