#include "runtime/quantized/resample.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/quantized/quant_math.h"

namespace fuselage {
namespace quantized {
namespace {

// area_pixel_compute_scale<float>.
float SourceStep(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners) {
    return out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.0f;
  }
  if (scale.has_value() && *scale > 0) return static_cast<float>(1.0 / *scale);
  return static_cast<float>(in) / static_cast<float>(out);
}

// area_pixel_compute_source_index<float> (not cubic).
float SourceIndex(float step, int64_t dst, bool align_corners) {
  if (align_corners) return step * static_cast<float>(dst);
  const float src = step * (static_cast<float>(dst) + 0.5f) - 0.5f;
  return src < 0.0f ? 0.0f : src;
}

}  // namespace

absl::StatusOr<Tensor> QuantizedUpsampleBilinear2d(const Tensor& qx,
                                                   std::array<int64_t, 2> output_size,
                                                   bool align_corners,
                                                   std::optional<std::array<double, 2>> scales) {
  constexpr absl::string_view kOp = "quantized upsample_bilinear2d";
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qx, kOp, "input"));
  if (qx.dim() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": input has shape ", qx.ShapeString(),
                                                   "; expected [N, C, H, W]"));
  }
  const int64_t in_h = qx.shape()[2], in_w = qx.shape()[3];
  const int64_t out_h = output_size[0], out_w = output_size[1];
  if (out_h <= 0 || out_w <= 0 || in_h <= 0 || in_w <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": input ", qx.ShapeString(),
                                                   " and output size ", out_h, "x", out_w,
                                                   "; expected sizes > 0"));
  }
  const int64_t planes = qx.shape()[0] * qx.shape()[1];
  RETURN_IF_ERROR(CheckedNumel({planes, out_h, out_w}).status());
  const std::vector<int32_t> q = IntValues(qx);
  if (in_h == out_h && in_w == out_w) return qx;  // PyTorch copies
  const float step_h = SourceStep(in_h, out_h, align_corners,
                                  scales ? std::optional<double>((*scales)[0]) : std::nullopt);
  const float step_w = SourceStep(in_w, out_w, align_corners,
                                  scales ? std::optional<double>((*scales)[1]) : std::nullopt);
  const int64_t zp = qx.qparams().zero_points[0];
  std::vector<int32_t> out(static_cast<size_t>(planes * out_h * out_w));
  for (int64_t h2 = 0; h2 < out_h; ++h2) {
    const float h1r = SourceIndex(step_h, h2, align_corners);
    const int64_t h1 = static_cast<int64_t>(h1r);
    const int64_t h1p = h1 < in_h - 1 ? 1 : 0;
    const float h1lambda = h1r - static_cast<float>(h1);
    const float h0lambda = 1.0f - h1lambda;
    for (int64_t w2 = 0; w2 < out_w; ++w2) {
      const float w1r = SourceIndex(step_w, w2, align_corners);
      const int64_t w1 = static_cast<int64_t>(w1r);
      const int64_t w1p = w1 < in_w - 1 ? 1 : 0;
      const float w1lambda = w1r - static_cast<float>(w1);
      const float w0lambda = 1.0f - w1lambda;
      for (int64_t p = 0; p < planes; ++p) {
        const int32_t* pos = q.data() + (p * in_h + h1) * in_w + w1;
        const float v = h0lambda * (w0lambda * static_cast<float>(pos[0]) +
                                    w1lambda * static_cast<float>(pos[w1p])) +
                        h1lambda * (w0lambda * static_cast<float>(pos[h1p * in_w]) +
                                    w1lambda * static_cast<float>(pos[h1p * in_w + w1p])) -
                        static_cast<float>(zp);
        // quantize_val with the scale ratio out / in = 1.
        out[(p * out_h + h2) * out_w + w2] = QuantizeValue(v, 1.0f, zp, qx.dtype());
      }
    }
  }
  return FromIntValues(qx.dtype(), {qx.shape()[0], qx.shape()[1], out_h, out_w}, qx.qparams(),
                       out);
}

}  // namespace quantized
}  // namespace fuselage
