#include "runtime/quantized/output_requantizer.h"

#include <algorithm>

namespace fuselage {
namespace quantized {

OutputRequantizer::OutputRequantizer(double input_scale, const std::vector<double>& weight_scales,
                                     const float* bias, double output_scale,
                                     int64_t output_zero_point, bool relu, DType output_dtype)
    : multiplier_(weight_scales.size()),
      bias_term_(weight_scales.size(), 0.0f),
      output_zero_point_(output_zero_point),
      lo_(static_cast<double>(relu ? std::max(output_zero_point, DTypeMin(output_dtype))
                                   : DTypeMin(output_dtype))),
      hi_(static_cast<double>(DTypeMax(output_dtype))) {
  const float act_scale = static_cast<float>(input_scale);
  const float out_scale = static_cast<float>(output_scale);
  for (size_t c = 0; c < weight_scales.size(); ++c) {
    const float act_times_w_scale = act_scale * static_cast<float>(weight_scales[c]);
    multiplier_[c] = act_times_w_scale / out_scale;
    if (bias != nullptr) bias_term_[c] = bias[c] / act_times_w_scale;
  }
}

}  // namespace quantized
}  // namespace fuselage
