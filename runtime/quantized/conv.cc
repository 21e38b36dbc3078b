#include "runtime/quantized/conv.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/onednn/onednn.h"
#include "runtime/quantized/kernel_loops.h"
#include "runtime/quantized/output_requantizer.h"
#include "runtime/quantized/quant_math.h"
#include "runtime/quantized/weight_utils.h"

namespace fuselage {
namespace quantized {
namespace {

using dt = dnnl::memory::data_type;

// One validated conv call: its output shape [N, O, OH, OW], oneDNN geometry and what the
// requantization needs.
struct ConvCall {
  std::vector<int64_t> shape;
  onednn::ConvGeometry geometry;
  dt src_type = dt::u8;
  int32_t x_zero_point = 0;
  std::vector<double> weight_scales;  // per output channel
  std::vector<int64_t> w_zero_points;  // per output channel
  bool weight_zero_points = false;     // any of them non-zero
};

absl::StatusOr<ConvCall> Prepare(absl::string_view op, const Tensor& qx, const Tensor& qweight,
                                 const Tensor* bias, const Conv2dParams& p) {
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

  // The accumulators (one per output element) and one group's columns (what a GEMM-based
  // conv unfolds, and a bound on the work) are bounded like any tensor first, so a padding
  // that makes a huge output is an error, not a failed allocation.
  const std::vector<int64_t> accumulators = {batch, out_c, out_h, out_w};
  const std::vector<int64_t> column_scratch = {depth, out_h * out_w};
  for (const std::vector<int64_t>* size : {&accumulators, &column_scratch}) {
    absl::Status fits = CheckedNumel(*size).status();
    if (!fits.ok()) return absl::InvalidArgumentError(absl::StrCat(op, ": ", fits.message()));
  }
  ConvCall call;
  call.shape = {batch, out_c, out_h, out_w};
  call.weight_scales = PerOutputChannel(qweight.qparams().scales, out_c);
  call.w_zero_points = PerOutputChannelZeroPoints(qweight, out_c);
  call.weight_zero_points = std::any_of(call.w_zero_points.begin(), call.w_zero_points.end(),
                                        [](int64_t z) { return z != 0; });
  call.src_type = qx.dtype() == DType::kQUInt8 ? dt::u8 : dt::s8;
  call.x_zero_point = static_cast<int32_t>(qx.qparams().zero_points[0]);
  call.geometry.src = {batch, in_c, in_h, in_w};
  call.geometry.weights = {out_c, group_in_c, k_h, k_w};
  call.geometry.dst = call.shape;
  call.geometry.stride = {p.stride[0], p.stride[1]};
  call.geometry.padding = {p.padding[0], p.padding[1]};
  call.geometry.dilation = {p.dilation[0], p.dilation[1]};
  call.geometry.groups = p.groups;
  return call;
}

// The exact int32 accumulators sum((x - x_zp) * (w - w_zp)), [N, O, OH, OW]. oneDNN
// computes sum((x - x_zp) * w) exactly (x u8 / s8, w s8, the zero point a run-time
// argument; padding is a real zero, i.e. x_zp before the shift).
absl::StatusOr<std::vector<int32_t>> Accumulate(absl::string_view op, const ConvCall& call,
                                                const Tensor& qx, const Tensor& qweight) {
  const int64_t batch = call.shape[0], out_c = call.shape[1];
  const int64_t pixels = call.shape[2] * call.shape[3];
  std::vector<int32_t> acc(static_cast<size_t>(batch * out_c * pixels), 0);
  if (acc.empty()) return acc;
  onednn::ConvBuffers buffers;
  buffers.src = qx.raw_data();
  buffers.weights = qweight.raw_data();
  buffers.weights_owner = &qweight;
  buffers.dst = acc.data();
  RETURN_IF_ERROR(onednn::Convolution(op, call.geometry, call.src_type, dt::s8, dt::s32,
                                      buffers, call.x_zero_point));
  if (!call.weight_zero_points) return acc;
  // oneDNN convolutions take no weight zero point. sum((x - x_zp) * (w - w_zp)) is the
  // above minus w_zp[o] * sum(x - x_zp) over the window: the window sums are one more
  // convolution, with an all-ones weight per group. (PyTorch's engines only produce
  // w_zp = 0; fuselage accepts any.)
  const int64_t groups = call.geometry.groups;
  onednn::ConvGeometry ones_geometry = call.geometry;
  ones_geometry.weights[0] = groups;  // one all-ones filter per group
  ones_geometry.dst[1] = groups;
  int64_t filter = 1;
  for (size_t i = 1; i < ones_geometry.weights.size(); ++i) filter *= ones_geometry.weights[i];
  std::vector<int8_t> ones(static_cast<size_t>(groups * filter), 1);
  std::vector<int32_t> sums(static_cast<size_t>(batch * groups * pixels));
  buffers.weights = ones.data();
  buffers.weights_owner = nullptr;  // a temporary
  buffers.dst = sums.data();
  RETURN_IF_ERROR(onednn::Convolution(op, ones_geometry, call.src_type, dt::s8, dt::s32,
                                      buffers, call.x_zero_point));
  const int64_t group_out_c = out_c / groups;
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t o = 0; o < out_c; ++o) {
      const int32_t zp = static_cast<int32_t>(call.w_zero_points[o]);
      if (zp == 0) continue;
      int32_t* a = acc.data() + (n * out_c + o) * pixels;
      const int32_t* sum = sums.data() + (n * groups + o / group_out_c) * pixels;
      for (int64_t i = 0; i < pixels; ++i) a[i] -= zp * sum[i];
    }
  }
  return acc;
}

}  // namespace

absl::StatusOr<Tensor> QuantizedConv2d(const Tensor& qx, const Tensor& qweight,
                                       const Tensor* bias, const Conv2dParams& params,
                                       double output_scale, int64_t output_zero_point,
                                       bool relu, QuantizedEngine engine) {
  const absl::string_view op = relu ? "quantized conv2d_relu" : "quantized conv2d";
  ASSIGN_OR_RETURN(const ConvCall call, Prepare(op, qx, qweight, bias, params));
  RETURN_IF_ERROR(ExpectValidScale(output_scale, op, "output scale"));
  RETURN_IF_ERROR(ExpectValidZeroPoint(output_zero_point, qx.dtype(), op, "output zero_point"));
  const OutputRequantizer requantizer(
      qx.qparams().scales[0], call.weight_scales,
      qweight.qparams().scheme == QScheme::kPerChannelAffine,
      bias ? bias->data<float>() : nullptr, output_scale, output_zero_point, relu, qx.dtype(),
      engine);
  const QuantParams out_qparams = QuantParams::PerTensor(output_scale, output_zero_point);
  if (!call.weight_zero_points && requantizer.fusable_in_onednn()) {
    // The common case (PyTorch's weights are symmetric): oneDNN requantizes in the conv,
    // with OutputRequantizer's factors and PyTorch's onednn engine's step order.
    ASSIGN_OR_RETURN(Tensor out, Tensor::Uninitialized(qx.dtype(), call.shape, out_qparams));
    if (out.numel() == 0) return out;
    onednn::ConvBuffers buffers;
    buffers.src = qx.raw_data();
    buffers.weights = qweight.raw_data();
    buffers.weights_owner = &qweight;
    buffers.bias = bias ? requantizer.bias_terms().data() : nullptr;
    buffers.dst = out.mutable_raw_data();
    onednn::Int8Output output;
    output.scales = requantizer.op_scales().data();
    output.zero_point = static_cast<int32_t>(output_zero_point);
    output.relu = relu;
    RETURN_IF_ERROR(onednn::Convolution(op, call.geometry, call.src_type, dt::s8, call.src_type,
                                        buffers, call.x_zero_point, &output));
    return out;
  }
  // Non-zero weight zero points or QNNPACK's arithmetic: the exact accumulators,
  // requantized here.
  ASSIGN_OR_RETURN(const std::vector<int32_t> acc, Accumulate(op, call, qx, qweight));
  const int64_t channels = call.shape[1];
  const int64_t pixels = call.shape[2] * call.shape[3];
  if (!requantizer.fusable_in_onednn() &&
      (qx.dtype() == DType::kQUInt8 || qx.dtype() == DType::kQInt8)) {
    ASSIGN_OR_RETURN(Tensor out, Tensor::Uninitialized(qx.dtype(), call.shape, out_qparams));
    uint8_t* dst = static_cast<uint8_t*>(out.mutable_raw_data());
    for (int64_t plane = 0; plane * pixels < static_cast<int64_t>(acc.size()); ++plane) {
      const int64_t c = plane % channels;
      RequantizeQnnpackPlane(acc.data() + plane * pixels, pixels, requantizer.qnnpack_bias()[c],
                             requantizer.op_scales()[c], requantizer.zero_point(),
                             requantizer.lo(), requantizer.hi(), qx.dtype(), dst + plane * pixels);
    }
    return out;
  }
  std::vector<int32_t> q(acc.size());
  for (size_t i = 0; i < q.size(); ++i) {
    q[i] = requantizer.Apply(acc[i], (static_cast<int64_t>(i) / pixels) % channels);
  }
  return FromIntValues(qx.dtype(), call.shape, out_qparams, q);
}

absl::StatusOr<Tensor> QuantizedConvAdd2d(const Tensor& qx, const Tensor& qextra,
                                          const Tensor& qweight, const Tensor* bias,
                                          const Conv2dParams& params, double output_scale,
                                          int64_t output_zero_point, bool relu) {
  const absl::string_view op = relu ? "quantized conv2d_add_relu" : "quantized conv2d_add";
  ASSIGN_OR_RETURN(const ConvCall call, Prepare(op, qx, qweight, bias, params));
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qextra, op, "extra input"));
  if (qextra.shape() != call.shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": extra input has shape ", qextra.ShapeString(),
        "; expected the conv output's shape [", call.shape[0], ", ", call.shape[1], ", ",
        call.shape[2], ", ", call.shape[3], "]"));
  }
  RETURN_IF_ERROR(ExpectValidScale(output_scale, op, "output scale"));
  RETURN_IF_ERROR(ExpectValidZeroPoint(output_zero_point, qx.dtype(), op, "output zero_point"));
  const double x_scale = qx.qparams().scales[0];
  const float extra_scale = static_cast<float>(qextra.qparams().scales[0]);
  const int64_t extra_zero_point = qextra.qparams().zero_points[0];
  const std::vector<int32_t> extra = IntValues(qextra);
  const float inv_scale = InverseScale(output_scale);
  ASSIGN_OR_RETURN(const std::vector<int32_t> acc, Accumulate(op, call, qx, qweight));
  const float* bias_data = bias ? bias->data<float>() : nullptr;
  const int64_t channels = call.shape[1];
  const int64_t pixels = call.shape[2] * call.shape[3];
  std::vector<int32_t> q(acc.size());
  for (size_t i = 0; i < q.size(); ++i) {
    const int64_t c = (static_cast<int64_t>(i) / pixels) % channels;
    double conv = static_cast<double>(acc[i]) * x_scale * call.weight_scales[c];
    if (bias_data) conv += bias_data[c];
    float sum = static_cast<float>(conv) + DequantizeValue(extra[i], extra_scale, extra_zero_point);
    if (relu) sum = std::max(sum, 0.0f);
    q[i] = QuantizeValue(sum, inv_scale, output_zero_point, qx.dtype());
  }
  return FromIntValues(qx.dtype(), call.shape,
                       QuantParams::PerTensor(output_scale, output_zero_point), q);
}

}  // namespace quantized
}  // namespace fuselage
