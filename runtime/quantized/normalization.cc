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

namespace {

// quantized_normalize_kernel over `rows` rows of `n` stored values each. per_channel
// (group norm): row r covers channels_per_group channels of n / channels_per_group values,
// scaled by gamma / beta of channel (r * channels_per_group + k) % channels; otherwise
// (layer norm) gamma / beta are indexed by the position in the row.
absl::StatusOr<Tensor> Normalize(absl::string_view op, const Tensor& qx, const Tensor* gamma,
                                 const Tensor* beta, bool per_channel, int64_t channels,
                                 int64_t groups, int64_t rows, int64_t n, double eps,
                                 double output_scale, int64_t output_zero_point) {
  if (!(eps >= 0.0) || !std::isfinite(eps)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": eps is ", eps,
                                                   "; expected a finite value >= 0"));
  }
  RETURN_IF_ERROR(ExpectValidScale(output_scale, op, "output scale"));
  RETURN_IF_ERROR(ExpectValidZeroPoint(output_zero_point, qx.dtype(), op, "output zero_point"));
  const std::vector<int32_t> q = IntValues(qx);
  std::vector<int32_t> out(q.size());
  const float x_scale = static_cast<float>(qx.qparams().scales[0]);
  const float x_zp = static_cast<float>(qx.qparams().zero_points[0]);
  const float y_inv_scale = 1.0f / static_cast<float>(output_scale);
  const float* g = gamma != nullptr ? gamma->data<float>() : nullptr;
  const float* b = beta != nullptr ? beta->data<float>() : nullptr;
  const int64_t channels_per_group = per_channel ? channels / groups : 1;
  const int64_t per_channel_n = n / channels_per_group;
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* x = q.data() + r * n;
    int64_t sum = 0, sum_sq = 0;
    for (int64_t i = 0; i < n; ++i) {
      sum += x[i];
      sum_sq += static_cast<int64_t>(x[i]) * x[i];
    }
    const float mean_shifted = static_cast<float>(sum) / static_cast<float>(n);
    const float mean_div_scale = mean_shifted - x_zp;
    const float var = std::max(
        static_cast<float>(sum_sq) / static_cast<float>(n) - mean_shifted * mean_shifted, 0.0f);
    const float inv_std = static_cast<float>(
        x_scale / std::sqrt(static_cast<double>(var * x_scale * x_scale) + eps));
    int32_t* y = out.data() + r * n;
    for (int64_t i = 0; i < n; ++i) {
      const float centred = (static_cast<float>(x[i]) - x_zp) - mean_div_scale;
      float v;
      if (per_channel) {
        const int64_t c = (r * channels_per_group + i / per_channel_n) % channels;
        const float signed_scale = inv_std * (g != nullptr ? g[c] : 1.0f);
        v = centred * signed_scale + (b != nullptr ? b[c] : 0.0f);
      } else {
        v = centred * inv_std * (g != nullptr ? g[i] : 1.0f) + (b != nullptr ? b[i] : 0.0f);
      }
      y[i] = QuantizeValue(v, y_inv_scale, output_zero_point, qx.dtype());
    }
  }
  return FromIntValues(qx.dtype(), qx.shape(),
                       QuantParams::PerTensor(output_scale, output_zero_point), out);
}

}  // namespace

absl::StatusOr<Tensor> QuantizedLayerNorm(const Tensor& qx,
                                          const std::vector<int64_t>& normalized_shape,
                                          const Tensor* weight, const Tensor* bias, double eps,
                                          double output_scale, int64_t output_zero_point) {
  constexpr absl::string_view kOp = "quantized layer_norm";
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qx, kOp, "input"));
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  bool matches = k >= 1 && k <= qx.dim();
  for (int64_t i = 0; matches && i < k; ++i) {
    matches = qx.shape()[qx.dim() - k + i] == normalized_shape[i];
  }
  if (!matches) {
    std::string shape;
    for (int64_t d : normalized_shape) absl::StrAppend(&shape, shape.empty() ? "" : ", ", d);
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": normalized_shape [", shape,
                                                   "] is not the trailing shape of input ",
                                                   qx.ShapeString()));
  }
  int64_t n = 1;
  for (int64_t d : normalized_shape) n *= d;
  RETURN_IF_ERROR(ExpectChannelVector(weight, n, true, kOp, "weight"));
  RETURN_IF_ERROR(ExpectChannelVector(bias, n, true, kOp, "bias"));
  if (n == 0) return qx;
  return Normalize(kOp, qx, weight, bias, false, 0, 1, qx.numel() / n, n, eps, output_scale,
                   output_zero_point);
}

absl::StatusOr<Tensor> QuantizedGroupNorm(const Tensor& qx, int64_t groups, const Tensor* weight,
                                          const Tensor* bias, double eps, double output_scale,
                                          int64_t output_zero_point) {
  constexpr absl::string_view kOp = "quantized group_norm";
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qx, kOp, "input"));
  if (qx.dim() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": input has shape ", qx.ShapeString(),
                                                   "; expected [N, C, ...]"));
  }
  const int64_t channels = qx.shape()[1];
  if (groups <= 0 || channels % groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": ", channels,
                                                   " channels in ", groups,
                                                   " groups; expected groups > 0 dividing "
                                                   "the channels"));
  }
  RETURN_IF_ERROR(ExpectChannelVector(weight, channels, true, kOp, "weight"));
  RETURN_IF_ERROR(ExpectChannelVector(bias, channels, true, kOp, "bias"));
  const int64_t rows = qx.shape()[0] * groups;
  if (qx.numel() == 0) return qx;
  return Normalize(kOp, qx, weight, bias, true, channels, groups, rows, qx.numel() / rows, eps,
                   output_scale, output_zero_point);
}

absl::StatusOr<Tensor> QuantizedInstanceNorm(const Tensor& qx, const Tensor* weight,
                                             const Tensor* bias, double eps,
                                             double output_scale, int64_t output_zero_point) {
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qx, "quantized instance_norm", "input"));
  if (qx.dim() < 3) {
    return absl::InvalidArgumentError(absl::StrCat("quantized instance_norm: input has shape ",
                                                   qx.ShapeString(),
                                                   "; expected [N, C, ...] of rank 3 or more"));
  }
  return QuantizedGroupNorm(qx, qx.shape()[1], weight, bias, eps, output_scale,
                            output_zero_point);
}

absl::StatusOr<Tensor> QuantizedMean(const Tensor& qx, std::vector<int64_t> dims, bool keepdim,
                                     bool channels_last) {
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
  bool inner = !(channels_last && qx.dim() == 4);  // a channels-last tensor is not contiguous
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
