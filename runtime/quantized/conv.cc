#include "runtime/quantized/conv.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <eigen3/Eigen/Core>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/quantized/output_requantizer.h"
#include "runtime/quantized/quant_math.h"
#include "runtime/quantized/weight_utils.h"

namespace fuselage {
namespace quantized {
namespace {

using IntMatrix = Eigen::Matrix<int32_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The exact int32 accumulators of one conv call, [N, O, OH, OW], plus what the
// requantization needs.
struct ConvAccumulators {
  std::vector<int64_t> shape;  // N, O, OH, OW
  std::vector<int32_t> acc;
  std::vector<double> weight_scales;  // per output channel
};

absl::StatusOr<ConvAccumulators> Accumulate(absl::string_view op, const Tensor& qx,
                                            const Tensor& qweight, const Tensor* bias,
                                            const Conv2dParams& p) {
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qx, op, "input"));
  if (qx.dtype() != DType::kQUInt8 && qx.dtype() != DType::kQInt8) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": input has dtype ",
                                                   DTypeName(qx.dtype()),
                                                   "; expected torch.quint8 or torch.qint8"));
  }
  if (qx.dim() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": input has shape ", qx.ShapeString(),
                                                   "; expected 4 dimensions [N, C, H, W]"));
  }
  for (int i = 0; i < 2; ++i) {
    // At most Tensor::kMaxElements, as tensor dimensions are: the output size arithmetic
    // below cannot overflow.
    if (p.stride[i] <= 0 || p.dilation[i] <= 0 || p.padding[i] < 0 ||
        p.stride[i] > Tensor::kMaxElements || p.dilation[i] > Tensor::kMaxElements ||
        p.padding[i] > Tensor::kMaxElements) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": stride [", p.stride[0], ", ", p.stride[1], "], padding [", p.padding[0],
          ", ", p.padding[1], "], dilation [", p.dilation[0], ", ", p.dilation[1],
          "]; expected stride and dilation > 0 and padding >= 0, all at most ",
          Tensor::kMaxElements));
    }
  }
  if (p.groups <= 0 || p.groups > Tensor::kMaxElements) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": groups is ", p.groups, "; expected 1 to ", Tensor::kMaxElements));
  }
  const int64_t batch = qx.shape()[0], in_c = qx.shape()[1];
  const int64_t in_h = qx.shape()[2], in_w = qx.shape()[3];
  RETURN_IF_ERROR(ExpectQInt8Weight(qweight, op, 4));
  const int64_t out_c = qweight.shape()[0], group_in_c = qweight.shape()[1];
  const int64_t k_h = qweight.shape()[2], k_w = qweight.shape()[3];
  if (in_c % p.groups != 0 || out_c % p.groups != 0 || group_in_c * p.groups != in_c) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": input has ", in_c, " channels and weight ", qweight.ShapeString(), " with ",
        p.groups, " groups; expected input channels == weight.shape[1] * groups (",
        group_in_c * p.groups, ") and out channels divisible by groups"));
  }
  RETURN_IF_ERROR(ExpectBias(bias, out_c, op));
  const int64_t out_h = (in_h + 2 * p.padding[0] - p.dilation[0] * (k_h - 1) - 1) / p.stride[0] + 1;
  const int64_t out_w = (in_w + 2 * p.padding[1] - p.dilation[1] * (k_w - 1) - 1) / p.stride[1] + 1;
  if (out_h <= 0 || out_w <= 0 || in_h + 2 * p.padding[0] < p.dilation[0] * (k_h - 1) + 1 ||
      in_w + 2 * p.padding[1] < p.dilation[1] * (k_w - 1) + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": input ", qx.ShapeString(), " with padding [", p.padding[0], ", ", p.padding[1],
        "] is smaller than the dilated kernel ", qweight.ShapeString(),
        "; expected a non-empty output"));
  }
  const int64_t depth = group_in_c * k_h * k_w;
  RETURN_IF_ERROR(ExpectAccumulatorFits(depth, op));

  // The accumulators (one per output element) and one group's columns are allocated
  // below: both bounded like any tensor first, so a padding that makes a huge output is
  // an error, not a failed allocation.
  const std::vector<int64_t> accumulators = {batch, out_c, out_h, out_w};
  const std::vector<int64_t> column_scratch = {depth, out_h * out_w};
  for (const std::vector<int64_t>* size : {&accumulators, &column_scratch}) {
    absl::Status fits = CheckedNumel(*size).status();
    if (!fits.ok()) return absl::InvalidArgumentError(absl::StrCat(op, ": ", fits.message()));
  }
  ConvAccumulators out;
  out.shape = {batch, out_c, out_h, out_w};
  out.weight_scales = PerOutputChannel(qweight.qparams().scales, out_c);
  const std::vector<int64_t> w_zero_points = PerOutputChannelZeroPoints(qweight, out_c);

  // Weight rows (w - w_zp), one per output channel, depth = group_in_c * kH * kW.
  const std::vector<int32_t> w_values = IntValues(qweight);
  IntMatrix weight(out_c, depth);
  for (int64_t o = 0; o < out_c; ++o) {
    for (int64_t k = 0; k < depth; ++k) {
      weight(o, k) = w_values[o * depth + k] - static_cast<int32_t>(w_zero_points[o]);
    }
  }

  const std::vector<int32_t> x_values = IntValues(qx);
  const int32_t x_zero_point = static_cast<int32_t>(qx.qparams().zero_points[0]);
  const int64_t pixels = out_h * out_w;
  const int64_t group_out_c = out_c / p.groups;
  out.acc.assign(static_cast<size_t>(batch * out_c * pixels), 0);
  IntMatrix columns(depth, pixels);
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t g = 0; g < p.groups; ++g) {
      // im2col of (x - x_zp); padding contributes a real zero, i.e. 0 after the shift.
      for (int64_t c = 0; c < group_in_c; ++c) {
        const int32_t* plane =
            x_values.data() + ((n * in_c) + g * group_in_c + c) * in_h * in_w;
        for (int64_t kh = 0; kh < k_h; ++kh) {
          for (int64_t kw = 0; kw < k_w; ++kw) {
            const int64_t row = (c * k_h + kh) * k_w + kw;
            for (int64_t oh = 0; oh < out_h; ++oh) {
              const int64_t ih = oh * p.stride[0] - p.padding[0] + kh * p.dilation[0];
              for (int64_t ow = 0; ow < out_w; ++ow) {
                const int64_t iw = ow * p.stride[1] - p.padding[1] + kw * p.dilation[1];
                const bool inside = ih >= 0 && ih < in_h && iw >= 0 && iw < in_w;
                columns(row, oh * out_w + ow) =
                    inside ? plane[ih * in_w + iw] - x_zero_point : 0;
              }
            }
          }
        }
      }
      Eigen::Map<IntMatrix> result(out.acc.data() + (n * out_c + g * group_out_c) * pixels,
                                   group_out_c, pixels);
      result.noalias() = weight.middleRows(g * group_out_c, group_out_c) * columns;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<Tensor> QuantizedConv2d(const Tensor& qx, const Tensor& qweight,
                                       const Tensor* bias, const Conv2dParams& params,
                                       double output_scale, int64_t output_zero_point,
                                       bool relu) {
  const absl::string_view op = relu ? "quantized conv2d_relu" : "quantized conv2d";
  ASSIGN_OR_RETURN(ConvAccumulators acc, Accumulate(op, qx, qweight, bias, params));
  RETURN_IF_ERROR(ExpectValidScale(output_scale, op, "output scale"));
  RETURN_IF_ERROR(ExpectValidZeroPoint(output_zero_point, qx.dtype(), op, "output zero_point"));
  const OutputRequantizer requantizer(
      qx.qparams().scales[0], acc.weight_scales,
      qweight.qparams().scheme == QScheme::kPerChannelAffine,
      bias ? bias->data<float>() : nullptr, output_scale, output_zero_point, relu, qx.dtype());
  const int64_t channels = acc.shape[1];
  const int64_t pixels = acc.shape[2] * acc.shape[3];
  std::vector<int32_t> q(acc.acc.size());
  for (size_t i = 0; i < q.size(); ++i) {
    q[i] = requantizer.Apply(acc.acc[i], (static_cast<int64_t>(i) / pixels) % channels);
  }
  return FromIntValues(qx.dtype(), acc.shape,
                       QuantParams::PerTensor(output_scale, output_zero_point), q);
}

absl::StatusOr<Tensor> QuantizedConvAdd2d(const Tensor& qx, const Tensor& qextra,
                                          const Tensor& qweight, const Tensor* bias,
                                          const Conv2dParams& params, double output_scale,
                                          int64_t output_zero_point, bool relu) {
  const absl::string_view op = relu ? "quantized conv2d_add_relu" : "quantized conv2d_add";
  ASSIGN_OR_RETURN(ConvAccumulators acc, Accumulate(op, qx, qweight, bias, params));
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qextra, op, "extra input"));
  if (qextra.shape() != acc.shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": extra input has shape ", qextra.ShapeString(),
        "; expected the conv output's shape [", acc.shape[0], ", ", acc.shape[1], ", ",
        acc.shape[2], ", ", acc.shape[3], "]"));
  }
  RETURN_IF_ERROR(ExpectValidScale(output_scale, op, "output scale"));
  RETURN_IF_ERROR(ExpectValidZeroPoint(output_zero_point, qx.dtype(), op, "output zero_point"));
  const double x_scale = qx.qparams().scales[0];
  const float extra_scale = static_cast<float>(qextra.qparams().scales[0]);
  const int64_t extra_zero_point = qextra.qparams().zero_points[0];
  const std::vector<int32_t> extra = IntValues(qextra);
  const float inv_scale = InverseScale(output_scale);
  const float* bias_data = bias ? bias->data<float>() : nullptr;
  const int64_t channels = acc.shape[1];
  const int64_t pixels = acc.shape[2] * acc.shape[3];
  std::vector<int32_t> q(acc.acc.size());
  for (size_t i = 0; i < q.size(); ++i) {
    const int64_t c = (static_cast<int64_t>(i) / pixels) % channels;
    double conv = static_cast<double>(acc.acc[i]) * x_scale * acc.weight_scales[c];
    if (bias_data) conv += bias_data[c];
    float sum = static_cast<float>(conv) + DequantizeValue(extra[i], extra_scale, extra_zero_point);
    if (relu) sum = std::max(sum, 0.0f);
    q[i] = QuantizeValue(sum, inv_scale, output_zero_point, qx.dtype());
  }
  return FromIntValues(qx.dtype(), acc.shape,
                       QuantParams::PerTensor(output_scale, output_zero_point), q);
}

}  // namespace quantized
}  // namespace fuselage
