#include "runtime/quantized/output_requantizer.h"

#include <algorithm>
#include <cmath>

namespace fuselage {
namespace quantized {

OutputRequantizer::OutputRequantizer(double input_scale, const std::vector<double>& weight_scales,
                                     bool per_channel_weight, const float* bias,
                                     double output_scale, int64_t output_zero_point, bool relu,
                                     DType output_dtype, QuantizedEngine engine)
    : engine_(engine),
      op_scale_(weight_scales.size()),
      bias_term_(weight_scales.size(), 0.0f),
      zero_point_(static_cast<float>(output_zero_point)),
      lo_(static_cast<double>(relu ? std::max(output_zero_point, DTypeMin(output_dtype))
                                  : DTypeMin(output_dtype))),
      hi_(static_cast<double>(DTypeMax(output_dtype))) {
  if (engine == QuantizedEngine::kOnnxruntime) {
    bias_term_.clear();
    bias_q_.assign(weight_scales.size(), 0);
    const float input = static_cast<float>(input_scale);
    const float output = static_cast<float>(output_scale);
    for (size_t c = 0; c < weight_scales.size(); ++c) {
      const float bias_scale = input * static_cast<float>(weight_scales[c]);
      op_scale_[c] = bias_scale / output;
      if (bias != nullptr) {
        const double q = std::nearbyint(static_cast<double>(bias[c]) /
                                        static_cast<double>(bias_scale));
        bias_q_[c] = static_cast<int32_t>(std::clamp(q, -2147483648.0, 2147483647.0));
      }
    }
    return;
  }
  if (engine == QuantizedEngine::kQnnpack) {
    bias_term_.clear();
    bias_q_.assign(weight_scales.size(), 0);
    const float input = static_cast<float>(input_scale);
    const float output_inv = 1.0f / static_cast<float>(output_scale);
    for (size_t c = 0; c < weight_scales.size(); ++c) {
      op_scale_[c] = (static_cast<float>(weight_scales[c]) * input) * output_inv;
      if (bias != nullptr) {
        const float inv = 1.0f / static_cast<float>(weight_scales[c] * input_scale);
        // quantize_val<qint32>: saturated to int32.
        const double q = std::nearbyint(bias[c] * inv);
        bias_q_[c] = static_cast<int32_t>(std::clamp(q, -2147483648.0, 2147483647.0));
      }
    }
    return;
  }
  // ideep's scales are the reciprocals of PyTorch's; see the header for the sources.
  const float src_inv = static_cast<float>(1.0 / input_scale);
  const float dst_inv = static_cast<float>(1.0 / output_scale);
  for (size_t c = 0; c < weight_scales.size(); ++c) {
    const float weight_inv = per_channel_weight
                                 ? 1.0f / static_cast<float>(weight_scales[c])
                                 : static_cast<float>(1.0 / weight_scales[c]);
    const float bias_scale = src_inv * weight_inv;
    op_scale_[c] = dst_inv / bias_scale;
    if (bias != nullptr) bias_term_[c] = bias[c] * bias_scale;
  }
}

}  // namespace quantized
}  // namespace fuselage
