#include "runtime/quantized/normalization.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/quantized/quant_math.h"

namespace fuselage {
namespace quantized {
namespace {

// A float32 tensor of `channels` elements (any shape), or null when optional.
absl::Status ExpectChannelVector(const Tensor* t, int64_t channels, bool optional,
                                 absl::string_view op, absl::string_view field) {
  if (t == nullptr) {
    if (optional) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(op, ": missing ", field));
  }
  RETURN_IF_ERROR(ExpectFloat32(*t, op, field));
  if (t->numel() != channels) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", field, " has ", t->numel(),
                                                   " elements; expected ", channels,
                                                   " (one per input channel)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tensor> QuantizedBatchNorm(const Tensor& qx, const Tensor* weight,
                                          const Tensor* bias, const Tensor& running_mean,
                                          const Tensor& running_var, double eps,
                                          double output_scale, int64_t output_zero_point,
                                          bool relu) {
  const absl::string_view op = relu ? "quantized batch_norm_relu" : "quantized batch_norm";
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qx, op, "input"));
  if (qx.dim() < 3) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": input has shape ", qx.ShapeString(),
                                                   "; expected [N, C, ...] of rank 3 or more"));
  }
  const int64_t channels = qx.shape()[1];
  RETURN_IF_ERROR(ExpectChannelVector(weight, channels, true, op, "weight"));
  RETURN_IF_ERROR(ExpectChannelVector(bias, channels, true, op, "bias"));
  RETURN_IF_ERROR(ExpectChannelVector(&running_mean, channels, false, op, "running_mean"));
  RETURN_IF_ERROR(ExpectChannelVector(&running_var, channels, false, op, "running_var"));
  if (!(eps >= 0.0) || !std::isfinite(eps)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": eps is ", eps,
                                                   "; expected a finite value >= 0"));
  }
  RETURN_IF_ERROR(ExpectValidScale(output_scale, op, "output scale"));
  RETURN_IF_ERROR(ExpectValidZeroPoint(output_zero_point, qx.dtype(), op, "output zero_point"));

  // compute_fused_params, step by step in PyTorch's precisions.
  const double scale_ratio = qx.qparams().scales[0] / output_scale;
  std::vector<float> alpha(channels), beta(channels);
  for (int64_t c = 0; c < channels; ++c) {
    const float var = running_var.data<float>()[c];
    const float inv_sigma =
        static_cast<float>(1.0 / std::sqrt(var + static_cast<float>(eps)));
    const float w = weight != nullptr ? weight->data<float>()[c] : 1.0f;
    const float b = bias != nullptr ? bias->data<float>()[c] : 0.0f;
    alpha[c] = static_cast<float>(inv_sigma * w * scale_ratio);
    beta[c] = static_cast<float>((b - running_mean.data<float>()[c] * inv_sigma * w) /
                                 output_scale);
  }
  const int64_t in_zp = qx.qparams().zero_points[0];
  const int64_t lo = relu ? std::max<int64_t>(output_zero_point, DTypeMin(qx.dtype()))
                          : DTypeMin(qx.dtype());
  const int64_t hi = DTypeMax(qx.dtype());
  int64_t inner = 1;
  for (int64_t d = 2; d < qx.dim(); ++d) inner *= qx.shape()[d];
  std::vector<int32_t> q = IntValues(qx);
  for (size_t i = 0; i < q.size(); ++i) {
    const int64_t c = static_cast<int64_t>(i) / inner % channels;
    const float v = std::fma(alpha[c], static_cast<float>(q[i] - in_zp), beta[c]);
    // out_zp + lrintf(v): the zero point is added after rounding, in integers.
    const double rounded = static_cast<double>(std::nearbyint(v)) + output_zero_point;
    q[i] = std::isnan(v) ? static_cast<int32_t>(output_zero_point)
                         : static_cast<int32_t>(std::min<double>(hi, std::max<double>(lo, rounded)));
  }
  return FromIntValues(qx.dtype(), qx.shape(),
                       QuantParams::PerTensor(output_scale, output_zero_point), q);
}

absl::StatusOr<Tensor> QuantizedMean(const Tensor& qx, std::vector<int64_t> dims, bool keepdim) {
  constexpr absl::string_view kOp = "quantized mean";
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qx, kOp, "input"));
  const int64_t rank = qx.dim();
  std::vector<bool> reduced(static_cast<size_t>(rank), dims.empty());
  for (int64_t d : dims) {
    const int64_t n = d < 0 ? d + rank : d;
    if (n < 0 || n >= rank || reduced[n]) {
      return absl::InvalidArgumentError(absl::StrCat(kOp, ": dim ", d, " is out of range or "
                                                     "repeated for an input of shape ",
                                                     qx.ShapeString()));
    }
    reduced[n] = true;
  }
  std::vector<int64_t> out_shape;
  int64_t count = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (reduced[d]) {
      count *= qx.shape()[d];
      if (keepdim) out_shape.push_back(1);
    } else {
      out_shape.push_back(qx.shape()[d]);
    }
  }
  if (count == 0) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": the reduced dims of ",
                                                   qx.ShapeString(), " are empty"));
  }
  // Innermost dims only (a suffix of the shape): PyTorch's qmean_inner_dim kernel, the
  // integer sum over each row, nearbyint(float(sum) / n), in the input's qparams.
  bool inner = true;
  for (int64_t d = 0, seen = 0; d < rank; ++d) {
    if (reduced[d]) seen = 1;
    else if (seen) inner = false;
  }
  const std::vector<int32_t> q = IntValues(qx);
  const size_t outputs = q.size() / static_cast<size_t>(count);
  std::vector<int32_t> out(outputs);
  const int64_t lo = DTypeMin(qx.dtype()), hi = DTypeMax(qx.dtype());
  if (inner) {
    for (size_t o = 0; o < outputs; ++o) {
      int64_t sum = 0;
      for (int64_t j = 0; j < count; ++j) sum += q[o * count + j];
      out[o] = RoundAndClamp(static_cast<float>(sum) / static_cast<float>(count), lo, hi);
    }
  } else {
    // The general path: dequantize (Tensor.dequantize's scale * (q - zp)), sum in float
    // in row-major order as at::sum does across an outer dim, divide by the count,
    // quantize again.
    const float scale = static_cast<float>(qx.qparams().scales[0]);
    const int64_t zp = qx.qparams().zero_points[0];
    std::vector<float> sums(outputs, 0.0f);
    std::vector<int64_t> index(static_cast<size_t>(rank), 0);
    for (size_t i = 0; i < q.size(); ++i) {
      size_t o = 0;
      for (int64_t d = 0; d < rank; ++d) {
        if (!reduced[d]) o = o * static_cast<size_t>(qx.shape()[d]) + index[d];
      }
      sums[o] += DequantizeValue(q[i], scale, zp);
      for (int64_t d = rank; d-- > 0;) {
        if (++index[d] < qx.shape()[d]) break;
        index[d] = 0;
      }
    }
    const float inv_scale = InverseScale(qx.qparams().scales[0]);
    for (size_t o = 0; o < outputs; ++o) {
      out[o] = QuantizeValue(sums[o] / static_cast<float>(count), inv_scale, zp, qx.dtype());
    }
  }
  return FromIntValues(qx.dtype(), out_shape, qx.qparams(), out);
}

}  // namespace quantized
}  // namespace fuselage
