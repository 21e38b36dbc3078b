// Pooling on quantized NCHW (or CHW) tensors; the output keeps the input's qparams, as in
// PyTorch 1.13 (aten/src/ATen/native/quantized/cpu/{Pooling,AveragePool2d,
// AdaptiveAveragePooling}.cpp, non-QNNPACK engines, contiguous NCHW input):
//
//   QuantizedMaxPool2d: max of the stored integers over each window (padding never wins).
//   QuantizedAvgPool2d: avg_pool2d_out_frame: sum of the window's integers minus
//       size * zp (size = in-bounds elements), times float(1.0 / divide_factor), plus zp,
//       nearbyint in float, clamped. divide_factor = divisor_override, else the window
//       clipped to the padded input (count_include_pad) or to the input.
//   QuantizedAdaptiveAvgPool2d: adaptive_avg_pool_single_out_frame: windows
//       [floor(i * in / out), ceil((i + 1) * in / out)) computed in float; output
//       nearbyint(float(sum) * ((1.0f / kH) / kW)) without zero-point correction (the
//       zero point averages to itself).
//
// PyTorch's quantized convs write channels-last outputs, and the ops after them keep that
// layout, so inside a converted model these pools run PyTorch's NHWC kernels
// (_qavg_pool_nhwc_kernel, _qadaptive_avg_pool_kernel), which round differently:
// out = zp + nearbyint(float(sum - size * zp) * (1.0f / divisor)), the zero point added
// after rounding (an odd zero point moves ties). `channels_last` selects that arithmetic;
// the values stay in fuselage's plain NCHW order either way. runtime/quantized/register.cc
// uses it for every 4-D input, as a converted model has them.
#ifndef FUSELAGE_RUNTIME_QUANTIZED_POOLING_H_
#define FUSELAGE_RUNTIME_QUANTIZED_POOLING_H_

#include <array>
#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "graph/tensor.h"

namespace fuselage {
namespace quantized {

struct Pool2dParams {
  std::array<int64_t, 2> kernel_size = {1, 1};
  std::array<int64_t, 2> stride = {1, 1};  // PyTorch's default stride = kernel_size.
  std::array<int64_t, 2> padding = {0, 0};
  std::array<int64_t, 2> dilation = {1, 1};  // max pool only
  bool ceil_mode = false;
  bool count_include_pad = true;                // avg pool only
  std::optional<int64_t> divisor_override;      // avg pool only
  bool channels_last = false;                   // avg pool only: PyTorch's NHWC arithmetic
};

// Errors: a non-quantized or per-channel input, not 3-D / 4-D, kernel / stride /
// dilation <= 0, padding < 0 or more than half the kernel, an empty output, a zero
// divisor_override.
absl::StatusOr<Tensor> QuantizedMaxPool2d(const Tensor& qx, const Pool2dParams& params);
// The same over a 4-D 8-bit input whose bytes are [N, H, W, C] (shape [N, C, H, W]; a
// channels-last value, runtime/layout.h); the output's bytes are [N, out_h, out_w, C].
absl::StatusOr<Tensor> QuantizedMaxPool2dChannelsLast(const Tensor& qx,
                                                      const Pool2dParams& params);
absl::StatusOr<Tensor> QuantizedAvgPool2d(const Tensor& qx, const Pool2dParams& params);
// `output_size` entries must be > 0.
absl::StatusOr<Tensor> QuantizedAdaptiveAvgPool2d(const Tensor& qx,
                                                  std::array<int64_t, 2> output_size,
                                                  bool channels_last = false);

}  // namespace quantized
}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_POOLING_H_
