// Bilinear upsampling of quantized NCHW tensors, as PyTorch 1.13's quantized
// upsample_bilinear2d computes it for contiguous input
// (aten/src/ATen/native/quantized/cpu/UpSampleBilinear2d.cpp, upsample_bilinear2d_out_frame):
// per output pixel, in float, with area_pixel_compute_scale / _source_index,
//   v   = h0 * (w0 * q00 + w1 * q01) + h1 * (w0 * q10 + w1 * q11) - zp
//   out = clamp(zp + nearbyint(v))
// The output keeps the input's qparams (the kernel's requantization has scale ratio 1).
// Nearest interpolation needs no kernel of its own: it only copies stored values (the
// float kernel runs on them; runtime/quantized/stored_value_kernels.cc).
//
// Example:
//   ASSIGN_OR_RETURN(Tensor y, quantized::QuantizedUpsampleBilinear2d(qx, {32, 32}, false));
#ifndef FUSELAGE_RUNTIME_QUANTIZED_RESAMPLE_H_
#define FUSELAGE_RUNTIME_QUANTIZED_RESAMPLE_H_

#include <array>
#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "graph/tensor.h"

namespace fuselage {
namespace quantized {

// `qx`: per-tensor quantized [N, C, H, W]; `output_size` entries > 0. `scales` (the
// scale_factor interpolate was given, when it passes them on): the source step is
// 1 / scale instead of in / out, as in PyTorch (ignored with align_corners).
absl::StatusOr<Tensor> QuantizedUpsampleBilinear2d(
    const Tensor& qx, std::array<int64_t, 2> output_size, bool align_corners,
    std::optional<std::array<double, 2>> scales = std::nullopt);

}  // namespace quantized
}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_RESAMPLE_H_
