// OutputRequantizer: turns the int32 accumulators of a quantized conv / linear into
// output values, as fbgemm's ReQuantizeOutput does with a float bias (the formula
// PyTorch 1.13's fbgemm and onednn engines both produce; verified bit for bit against
// onednn goldens). For output channel c:
//   act_times_w_scale = float(input_scale) * float(weight_scale[c])
//   multiplier        = act_times_w_scale / float(output_scale)
//   raw               = float(acc) + float(bias[c]) / act_times_w_scale
//   out               = clamp(nearbyint(raw * multiplier) + output_zero_point)
// so the bias is "quantized" with input_scale x weight_scale but kept in float, not
// rounded to int32. (QNNPACK rounds the bias to int32 first; its results can differ
// from these by one step where raw * multiplier lands near a half.) With relu the lower
// clamp is the output zero point (a real 0).
#ifndef FUSELAGE_RUNTIME_QUANTIZED_OUTPUT_REQUANTIZER_H_
#define FUSELAGE_RUNTIME_QUANTIZED_OUTPUT_REQUANTIZER_H_

#include <cmath>
#include <cstdint>
#include <vector>

#include "graph/dtype.h"

namespace fuselage {
namespace quantized {

class OutputRequantizer {
 public:
  // `weight_scales` has one entry per output channel; `bias` is null or has as many.
  // Scales must already be validated (> 0).
  OutputRequantizer(double input_scale, const std::vector<double>& weight_scales,
                    const float* bias, double output_scale, int64_t output_zero_point,
                    bool relu, DType output_dtype);

  int32_t Apply(int32_t acc, int64_t channel) const {
    const float raw = static_cast<float>(acc) + bias_term_[channel];
    const float rounded = std::nearbyint(raw * multiplier_[channel]);
    // Add the zero point in double so that saturated values cannot wrap.
    const double q = static_cast<double>(rounded) + output_zero_point_;
    if (!(q > lo_)) return static_cast<int32_t>(lo_);  // also NaN
    if (q > hi_) return static_cast<int32_t>(hi_);
    return static_cast<int32_t>(q);
  }

 private:
  std::vector<float> multiplier_;
  std::vector<float> bias_term_;
  int64_t output_zero_point_;
  double lo_;
  double hi_;
};

}  // namespace quantized
}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_OUTPUT_REQUANTIZER_H_
