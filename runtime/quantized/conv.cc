#include "runtime/quantized/conv.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/onednn/channels_last.h"
#include "runtime/onednn/onednn.h"
#include "runtime/quantized/kernel_loops.h"
#include "runtime/quantized/output_requantizer.h"
#include "runtime/quantized/quant_math.h"
#include "runtime/quantized/weight_utils.h"

namespace fuselage {
namespace quantized {
namespace {

using dt = dnnl::memory::data_type;

// One validated conv call: its output shape [N, O, *OS], oneDNN geometry and what the
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

std::string Join(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) absl::StrAppend(&out, i ? ", " : "", v[i]);
  return out + "]";
}

// Checks what a forward or transposed conv shares: the input (quint8 / qint8, per tensor,
// [N, C, *S] with `spatial` dims), the weight (qint8, rank spatial + 2) and the per-dim
// parameters. Per-dim parameters must have `spatial` entries (output_padding: or none).
absl::Status CheckConvArgs(absl::string_view op, const Tensor& qx, const Tensor& qweight,
                           const QuantizedConvParams& p, size_t spatial) {
  RETURN_IF_ERROR(ExpectPerTensorEightBit(qx, op, "input"));
  if (qx.dim() != static_cast<int64_t>(spatial) + 2) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": input has shape ", qx.ShapeString(),
                                                   "; expected ", spatial + 2,
                                                   " dimensions [N, C, ...]"));
  }
  RETURN_IF_ERROR(ExpectQInt8Weight(qweight, op, static_cast<int64_t>(spatial) + 2));
  if (p.stride.size() != spatial || p.padding.size() != spatial ||
      p.dilation.size() != spatial ||
      (!p.output_padding.empty() && p.output_padding.size() != spatial)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": stride ", Join(p.stride), ", padding ", Join(p.padding), ", dilation ",
        Join(p.dilation), "; expected ", spatial, " entries each"));
  }
  for (size_t i = 0; i < spatial; ++i) {
    // At most Tensor::kMaxElements, as tensor dimensions are: the output size arithmetic
    // cannot overflow.
    const int64_t out_pad = p.output_padding.empty() ? 0 : p.output_padding[i];
    if (p.stride[i] <= 0 || p.dilation[i] <= 0 || p.padding[i] < 0 || out_pad < 0 ||
        p.stride[i] > Tensor::kMaxElements || p.dilation[i] > Tensor::kMaxElements ||
        p.padding[i] > Tensor::kMaxElements || out_pad > Tensor::kMaxElements) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": stride ", Join(p.stride), ", padding ", Join(p.padding), ", dilation ",
          Join(p.dilation), ", output_padding ", Join(p.output_padding),
          "; expected stride and dilation > 0 and padding >= 0, all at most ",
          Tensor::kMaxElements));
    }
  }
  if (p.groups <= 0 || p.groups > Tensor::kMaxElements) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": groups is ", p.groups, "; expected 1 to ", Tensor::kMaxElements));
  }
  return absl::OkStatus();
}

// Bounds the accumulators and one group's columns (what a GEMM-based conv unfolds, and a
// bound on the work) like any tensor, so a padding that makes a huge output is an error,
// not a failed allocation.
absl::Status CheckWork(absl::string_view op, const std::vector<int64_t>& accumulators,
                       int64_t depth, int64_t pixels) {
  RETURN_IF_ERROR(ExpectAccumulatorFits(depth, op));
  const std::vector<int64_t> column_scratch = {depth, pixels};
  for (const std::vector<int64_t>* size : {&accumulators, &column_scratch}) {
    absl::Status fits = CheckedNumel(*size).status();
    if (!fits.ok()) return absl::InvalidArgumentError(absl::StrCat(op, ": ", fits.message()));
  }
  return absl::OkStatus();
}

void SetQuantization(const Tensor& qx, const Tensor& qweight, int64_t out_c, ConvCall& call) {
  call.weight_scales = PerOutputChannel(qweight.qparams().scales, out_c);
  call.w_zero_points = PerOutputChannelZeroPoints(qweight, out_c);
  call.weight_zero_points = std::any_of(call.w_zero_points.begin(), call.w_zero_points.end(),
                                        [](int64_t z) { return z != 0; });
  call.src_type = qx.dtype() == DType::kQUInt8 ? dt::u8 : dt::s8;
  call.x_zero_point = static_cast<int32_t>(qx.qparams().zero_points[0]);
}

size_t SpatialDims(const Tensor& qx) {
  return qx.dim() >= 3 ? static_cast<size_t>(qx.dim() - 2) : 0;
}

absl::StatusOr<ConvCall> Prepare(absl::string_view op, const Tensor& qx, const Tensor& qweight,
                                 const Tensor* bias, const QuantizedConvParams& p) {
  const size_t spatial = SpatialDims(qx);
  if (spatial < 1 || spatial > 3) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": input has shape ", qx.ShapeString(),
                                                   "; expected [N, C, ...] with 1, 2 or 3 "
                                                   "spatial dims"));
  }
  RETURN_IF_ERROR(CheckConvArgs(op, qx, qweight, p, spatial));
  const int64_t batch = qx.shape()[0], in_c = qx.shape()[1];
  const int64_t out_c = qweight.shape()[0], group_in_c = qweight.shape()[1];
  if (in_c % p.groups != 0 || out_c % p.groups != 0 || group_in_c * p.groups != in_c) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": input has ", in_c, " channels and weight ", qweight.ShapeString(), " with ",
        p.groups, " groups; expected input channels == weight.shape[1] * groups (",
        group_in_c * p.groups, ") and out channels divisible by groups"));
  }
  RETURN_IF_ERROR(ExpectBias(bias, out_c, op));
  ConvCall call;
  call.shape = {batch, out_c};
  int64_t depth = group_in_c, pixels = 1;
  for (size_t i = 0; i < spatial; ++i) {
    const int64_t in = qx.shape()[2 + i], k = qweight.shape()[2 + i];
    const int64_t reach = p.dilation[i] * (k - 1) + 1;
    if (in + 2 * p.padding[i] < reach) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": input ", qx.ShapeString(), " with padding ", Join(p.padding),
          " is smaller than the dilated kernel ", qweight.ShapeString(),
          "; expected a non-empty output"));
    }
    const int64_t out = (in + 2 * p.padding[i] - reach) / p.stride[i] + 1;
    call.shape.push_back(out);
    depth *= k;
    pixels *= out;
  }
  RETURN_IF_ERROR(CheckWork(op, call.shape, depth, pixels));
  SetQuantization(qx, qweight, out_c, call);
  call.geometry.src = qx.shape();
  call.geometry.weights = qweight.shape();
  call.geometry.dst = call.shape;
  call.geometry.stride = p.stride;
  call.geometry.padding = p.padding;
  call.geometry.dilation = p.dilation;
  call.geometry.groups = p.groups;
  return call;
}

QuantizedConvParams FromConv2dParams(const Conv2dParams& p) {
  QuantizedConvParams q;
  q.stride = {p.stride[0], p.stride[1]};
  q.padding = {p.padding[0], p.padding[1]};
  q.dilation = {p.dilation[0], p.dilation[1]};
  q.groups = p.groups;
  return q;
}

int64_t Pixels(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t i = 2; i < shape.size(); ++i) n *= shape[i];
  return n;
}

// std::allocator, except that a resize or a size constructor leaves the new elements
// uninitialized: a conv writes every accumulator, so zeroing them first (a memset of the
// whole output in int32, 5 % of mobilenet_v2 on the qnnpack engine) is wasted.
template <typename T>
struct UninitializedAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <typename U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// A conv's int32 accumulators, every one written by the conv that fills them.
using Accumulators = std::vector<int32_t, UninitializedAllocator<int32_t>>;

// The exact int32 accumulators sum((x - x_zp) * (w - w_zp)), [N, O, OH, OW]. oneDNN
// computes sum((x - x_zp) * w) exactly (x u8 / s8, w s8, the zero point a run-time
// argument; padding is a real zero, i.e. x_zp before the shift).
absl::StatusOr<Accumulators> Accumulate(absl::string_view op, const ConvCall& call,
                                                const Tensor& qx, const Tensor& qweight) {
  const int64_t batch = call.shape[0], out_c = call.shape[1];
  const int64_t pixels = Pixels(call.shape);
  Accumulators acc(static_cast<size_t>(batch * out_c * pixels));
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
  Accumulators sums(static_cast<size_t>(batch * groups * pixels));
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

// QNNPACK's requantization of the conv (weight zero points all 0) into `out`: the exact
// accumulators in the conv's own layout; when that is channels-last, each pixel's row of
// channels is requantized there (per-channel bias and scale along the row) and only the
// 1-byte result moved to NC[D]HW, rather than moving 4-byte accumulators first.
absl::Status RequantizeQnnpack(absl::string_view op, const ConvCall& call, const Tensor& qx,
                               bool x_channels_last, const Tensor& qweight,
                               const OutputRequantizer& requantizer, Tensor& out,
                               bool* out_channels_last) {
  const int64_t batch = call.shape[0], channels = call.shape[1];
  const int64_t pixels = Pixels(call.shape);
  Accumulators acc(static_cast<size_t>(batch * channels * pixels));
  uint8_t* dst = static_cast<uint8_t*>(out.mutable_raw_data());
  if (acc.empty()) return absl::OkStatus();
  bool channels_last = false;
  onednn::ConvBuffers buffers;
  buffers.src = qx.raw_data();
  buffers.weights = qweight.raw_data();
  buffers.weights_owner = &qweight;
  buffers.dst = acc.data();
  buffers.src_channels_last = x_channels_last;
  buffers.dst_channels_last = &channels_last;
  RETURN_IF_ERROR(onednn::Convolution(op, call.geometry, call.src_type, dt::s8, dt::s32,
                                      buffers, call.x_zero_point));
  if (out_channels_last != nullptr) *out_channels_last = channels_last;
  if (!channels_last) {
    for (int64_t plane = 0; plane < batch * channels; ++plane) {
      const int64_t c = plane % channels;
      RequantizeQnnpackPlane(acc.data() + plane * pixels, pixels, requantizer.qnnpack_bias()[c],
                             requantizer.op_scales()[c], requantizer.zero_point(),
                             requantizer.lo(), requantizer.hi(), qx.dtype(), dst + plane * pixels);
    }
    return absl::OkStatus();
  }
  // Requantized into `out` itself when the caller takes channels-last bytes.
  std::vector<uint8_t> rows(out_channels_last != nullptr ? 0 : acc.size());
  uint8_t* const row_dst = out_channels_last != nullptr ? dst : rows.data();
  for (int64_t row = 0; row < batch * pixels; ++row) {
    RequantizeQnnpackRow(acc.data() + row * channels, channels,
                         requantizer.qnnpack_bias().data(), requantizer.op_scales().data(),
                         requantizer.zero_point(), requantizer.lo(), requantizer.hi(),
                         qx.dtype(), row_dst + row * channels);
  }
  if (out_channels_last == nullptr) {
    onednn::FromChannelsLast(rows.data(), 1, batch, channels, pixels, dst);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tensor> QuantizedConv2d(const Tensor& qx, const Tensor& qweight,
                                       const Tensor* bias, const Conv2dParams& params,
                                       double output_scale, int64_t output_zero_point,
                                       bool relu, QuantizedEngine engine) {
  return QuantizedConvNd(qx, qweight, bias, FromConv2dParams(params), output_scale,
                         output_zero_point, relu, engine);
}

absl::StatusOr<Tensor> QuantizedConvNd(const Tensor& qx, const Tensor& qweight,
                                       const Tensor* bias, const QuantizedConvParams& params,
                                       double output_scale, int64_t output_zero_point,
                                       bool relu, QuantizedEngine engine) {
  ASSIGN_OR_RETURN(Activation out,
                   QuantizedConvNdAnyLayout({qx, false}, qweight, bias, params, output_scale,
                                            output_zero_point, relu, engine,
                                            /*channels_last_output=*/false));
  return std::move(out.tensor);
}

absl::StatusOr<Activation> QuantizedConvNdAnyLayout(
    const Activation& x, const Tensor& qweight, const Tensor* bias,
    const QuantizedConvParams& params, double output_scale, int64_t output_zero_point,
    bool relu, QuantizedEngine engine, bool channels_last_output) {
  const Tensor& qx = x.tensor;
  const std::string op = absl::StrCat("quantized conv", SpatialDims(qx), "d",
                                      relu ? "_relu" : "");
  if (x.channels_last && (qx.dim() != 4 || !(qx.dtype() == DType::kQUInt8 ||
                                             qx.dtype() == DType::kQInt8))) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": a channels-last input of shape ", qx.ShapeString(), " and dtype ",
        DTypeName(qx.dtype()), "; expected a 4-D quint8 / qint8 activation"));
  }
  ASSIGN_OR_RETURN(const ConvCall call, Prepare(op, qx, qweight, bias, params));
  // Channels-last is a layout of 4-D activations only (runtime/layout.h).
  channels_last_output = channels_last_output && qx.dim() == 4;
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
    Activation out;
    ASSIGN_OR_RETURN(out.tensor, Tensor::Uninitialized(qx.dtype(), call.shape, out_qparams));
    if (out.tensor.numel() == 0) return out;
    onednn::ConvBuffers buffers;
    buffers.src = qx.raw_data();
    buffers.src_channels_last = x.channels_last;
    buffers.weights = qweight.raw_data();
    buffers.weights_owner = &qweight;
    buffers.bias = bias ? requantizer.bias_terms().data() : nullptr;
    buffers.dst = out.tensor.mutable_raw_data();
    if (channels_last_output) buffers.dst_channels_last = &out.channels_last;
    onednn::Int8Output output;
    output.scales = requantizer.op_scales().data();
    output.zero_point = static_cast<int32_t>(output_zero_point);
    output.relu = relu;
    RETURN_IF_ERROR(onednn::Convolution(op, call.geometry, call.src_type, dt::s8, call.src_type,
                                        buffers, call.x_zero_point, &output));
    return out;
  }
  const bool eight_bit = qx.dtype() == DType::kQUInt8 || qx.dtype() == DType::kQInt8;
  if (!call.weight_zero_points && !requantizer.fusable_in_onednn() && eight_bit) {
    Activation out;
    ASSIGN_OR_RETURN(out.tensor, Tensor::Uninitialized(qx.dtype(), call.shape, out_qparams));
    if (out.tensor.numel() == 0) return out;
    RETURN_IF_ERROR(RequantizeQnnpack(op, call, qx, x.channels_last, qweight, requantizer,
                                      out.tensor,
                                      channels_last_output ? &out.channels_last : nullptr));
    return out;
  }
  // Non-zero weight zero points or QNNPACK's arithmetic: the exact accumulators,
  // requantized here, from and to row-major activations.
  if (x.channels_last) {
    ASSIGN_OR_RETURN(Tensor row_major, Tensor::Uninitialized(qx.dtype(), qx.shape(), qx.qparams()));
    if (row_major.numel() > 0) {
      onednn::FromChannelsLast(qx.raw_data(), 1, qx.shape()[0], qx.shape()[1],
                               qx.shape()[2] * qx.shape()[3], row_major.mutable_raw_data());
    }
    return QuantizedConvNdAnyLayout({row_major, false}, qweight, bias, params, output_scale,
                                    output_zero_point, relu, engine, false);
  }
  ASSIGN_OR_RETURN(const Accumulators acc, Accumulate(op, call, qx, qweight));
  const int64_t channels = call.shape[1];
  const int64_t pixels = Pixels(call.shape);
  if (!requantizer.fusable_in_onednn() && eight_bit) {
    ASSIGN_OR_RETURN(Tensor out, Tensor::Uninitialized(qx.dtype(), call.shape, out_qparams));
    uint8_t* dst = static_cast<uint8_t*>(out.mutable_raw_data());
    for (int64_t plane = 0; plane * pixels < static_cast<int64_t>(acc.size()); ++plane) {
      const int64_t c = plane % channels;
      RequantizeQnnpackPlane(acc.data() + plane * pixels, pixels, requantizer.qnnpack_bias()[c],
                             requantizer.op_scales()[c], requantizer.zero_point(),
                             requantizer.lo(), requantizer.hi(), qx.dtype(), dst + plane * pixels);
    }
    return Activation{std::move(out), false};
  }
  std::vector<int32_t> q(acc.size());
  for (size_t i = 0; i < q.size(); ++i) {
    q[i] = requantizer.Apply(acc[i], (static_cast<int64_t>(i) / pixels) % channels);
  }
  return Activation{FromIntValues(qx.dtype(), call.shape, out_qparams, q), false};
}

absl::StatusOr<Tensor> QuantizedConvTransposeNd(const Tensor& qx, const Tensor& qweight,
                                                const Tensor* bias,
                                                const QuantizedConvParams& p,
                                                double output_scale, int64_t output_zero_point) {
  const size_t spatial = SpatialDims(qx);
  const std::string op = absl::StrCat("quantized conv_transpose", spatial, "d");
  if (spatial < 1 || spatial > 3) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": input has shape ", qx.ShapeString(),
                                                   "; expected [N, C, ...] with 1, 2 or 3 "
                                                   "spatial dims"));
  }
  RETURN_IF_ERROR(CheckConvArgs(op, qx, qweight, p, spatial));
  if (qweight.qparams().scheme != QScheme::kPerTensorAffine ||
      qweight.qparams().zero_points[0] != 0) {
    return absl::UnimplementedError(absl::StrCat(
        op, ": weight must be quantized per tensor with zero point 0 (PyTorch 1.13 has no "
            "per-channel transposed conv)"));
  }
  const int64_t batch = qx.shape()[0], in_c = qx.shape()[1];
  if (qweight.shape()[0] != in_c || in_c % p.groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": input has ", in_c, " channels and weight ", qweight.ShapeString(), " with ",
        p.groups, " groups; expected weight [C, O / groups, ...] with C == input channels, "
        "divisible by groups"));
  }
  const int64_t group_out_c = qweight.shape()[1], out_c = group_out_c * p.groups;
  const int64_t group_in_c = in_c / p.groups;
  RETURN_IF_ERROR(ExpectBias(bias, out_c, op));
  RETURN_IF_ERROR(ExpectValidScale(output_scale, op, "output scale"));
  RETURN_IF_ERROR(ExpectValidZeroPoint(output_zero_point, qx.dtype(), op, "output zero_point"));
  // The uncropped deconvolution [N, O, *F], F = (S - 1) * stride + dilation * (K - 1) + 1;
  // PyTorch's output is its window [padding, padding + OS) (zero past F).
  std::vector<int64_t> full = {batch, out_c}, shape = {batch, out_c};
  int64_t kernel = 1, pixels = 1;
  for (size_t i = 0; i < spatial; ++i) {
    const int64_t in = qx.shape()[2 + i], k = qweight.shape()[2 + i];
    const int64_t out_pad = p.output_padding.empty() ? 0 : p.output_padding[i];
    if (out_pad >= std::max(p.stride[i], p.dilation[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": output_padding ", Join(p.output_padding),
          "; expected each entry smaller than its stride or dilation"));
    }
    const int64_t f = (in - 1) * p.stride[i] + p.dilation[i] * (k - 1) + 1;
    const int64_t out = f - 2 * p.padding[i] + out_pad;
    if (out <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": input ", qx.ShapeString(), ", weight ", qweight.ShapeString(), " and padding ",
          Join(p.padding), " give an empty output"));
    }
    full.push_back(f);
    shape.push_back(out);
    kernel *= k;
    pixels *= f;
  }
  RETURN_IF_ERROR(CheckWork(op, full, group_in_c * kernel, pixels));
  RETURN_IF_ERROR(CheckWork(op, shape, group_in_c * kernel, 1));

  // oneDNN's weight [O, C / groups, *K] from PyTorch's [C, O / groups, *K].
  const int8_t* w = static_cast<const int8_t*>(qweight.raw_data());
  std::vector<int8_t> weights(static_cast<size_t>(qweight.numel()));
  for (int64_t g = 0; g < p.groups; ++g) {
    for (int64_t o = 0; o < group_out_c; ++o) {
      for (int64_t c = 0; c < group_in_c; ++c) {
        const int8_t* from = w + (((g * group_in_c + c) * group_out_c) + o) * kernel;
        int8_t* to = weights.data() + (((g * group_out_c + o) * group_in_c) + c) * kernel;
        std::copy(from, from + kernel, to);
      }
    }
  }
  onednn::ConvGeometry geometry;
  geometry.src = qx.shape();
  geometry.weights = {out_c, group_in_c};
  for (size_t i = 0; i < spatial; ++i) geometry.weights.push_back(qweight.shape()[2 + i]);
  geometry.dst = full;
  geometry.stride = p.stride;
  geometry.padding = std::vector<int64_t>(spatial, 0);
  geometry.dilation = p.dilation;
  geometry.groups = p.groups;
  const dt src_type = qx.dtype() == DType::kQUInt8 ? dt::u8 : dt::s8;
  const int64_t full_pixels = Pixels(full);
  std::vector<int32_t> acc(static_cast<size_t>(batch * out_c * full_pixels));
  onednn::ConvBuffers buffers;
  buffers.src = qx.raw_data();
  buffers.weights = weights.data();
  buffers.dst = acc.data();
  RETURN_IF_ERROR(onednn::Deconvolution(op, geometry, src_type, dt::s8, dt::s32, buffers));
  // sum(x * w) - x_zp * sum(w) over the taps that reach each output: the second sum is
  // the deconvolution of an all-ones input.
  const int32_t x_zp = static_cast<int32_t>(qx.qparams().zero_points[0]);
  if (x_zp != 0) {
    const std::vector<uint8_t> ones(static_cast<size_t>(qx.numel()), 1);
    std::vector<int32_t> taps(acc.size());
    buffers.src = ones.data();
    buffers.dst = taps.data();
    RETURN_IF_ERROR(onednn::Deconvolution(op, geometry, dt::u8, dt::s8, dt::s32, buffers));
    for (size_t i = 0; i < acc.size(); ++i) acc[i] -= x_zp * taps[i];
  }
  const OutputRequantizer requantizer(
      qx.qparams().scales[0], std::vector<double>(out_c, qweight.qparams().scales[0]),
      /*per_channel_weight=*/false, bias ? bias->data<float>() : nullptr, output_scale,
      output_zero_point, /*relu=*/false, qx.dtype());
  // Crop the window, walking the output in row-major order.
  const int64_t out_pixels = Pixels(shape);
  std::vector<int32_t> q(static_cast<size_t>(batch * out_c * out_pixels));
  std::vector<int64_t> index(spatial, 0);
  for (int64_t plane = 0; plane < batch * out_c; ++plane) {
    const int64_t channel = plane % out_c;
    std::fill(index.begin(), index.end(), 0);
    for (int64_t i = 0; i < out_pixels; ++i) {
      int64_t source = 0;
      bool inside = true;
      for (size_t d = 0; d < spatial; ++d) {
        const int64_t f = index[d] + p.padding[d];
        inside = inside && f < full[2 + d];
        source = source * full[2 + d] + f;
      }
      const int32_t a = inside ? acc[plane * full_pixels + source] : 0;
      q[plane * out_pixels + i] = requantizer.Apply(a, channel);
      for (size_t d = spatial; d-- > 0;) {
        if (++index[d] < shape[2 + d]) break;
        index[d] = 0;
      }
    }
  }
  return FromIntValues(qx.dtype(), shape, QuantParams::PerTensor(output_scale, output_zero_point),
                       q);
}

absl::StatusOr<Tensor> QuantizedConvAdd2d(const Tensor& qx, const Tensor& qextra,
                                          const Tensor& qweight, const Tensor* bias,
                                          const Conv2dParams& params, double output_scale,
                                          int64_t output_zero_point, bool relu) {
  const absl::string_view op = relu ? "quantized conv2d_add_relu" : "quantized conv2d_add";
  ASSIGN_OR_RETURN(const ConvCall call, Prepare(op, qx, qweight, bias, FromConv2dParams(params)));
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qextra, op, "extra input"));
  if (qextra.shape() != call.shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": extra input has shape ", qextra.ShapeString(),
        "; expected the conv output's shape [", call.shape[0], ", ", call.shape[1], ", ",
        call.shape[2], ", ", call.shape[3], "]"));
  }
  RETURN_IF_ERROR(ExpectValidScale(output_scale, op, "output scale"));
  RETURN_IF_ERROR(ExpectValidZeroPoint(output_zero_point, qx.dtype(), op, "output zero_point"));
  if (qextra.dtype() != DType::kQUInt8 && qextra.dtype() != DType::kQInt8) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": extra input is ",
                                                   DTypeName(qextra.dtype()),
                                                   "; expected quint8 or qint8"));
  }
  const int64_t extra_zero_point = qextra.qparams().zero_points[0];
  RETURN_IF_ERROR(ExpectValidZeroPoint(extra_zero_point, qextra.dtype(), op,
                                       "extra input zero_point"));
  ASSIGN_OR_RETURN(const Accumulators acc, Accumulate(op, call, qx, qweight));
  ASSIGN_OR_RETURN(Tensor out, Tensor::Uninitialized(qx.dtype(), call.shape,
                                                     QuantParams::PerTensor(output_scale,
                                                                            output_zero_point)));
  const float* bias_data = bias ? bias->data<float>() : nullptr;
  const int64_t channels = call.shape[1];
  const int64_t pixels = call.shape[2] * call.shape[3];
  const auto* extra = static_cast<const uint8_t*>(qextra.raw_data());
  auto* dst = static_cast<uint8_t*>(out.mutable_raw_data());
  // Plane by plane: the float sums of one channel, then their quantization, each a
  // vectorized loop (kernel_loops.h) with the arithmetic of the element-wise formula.
  std::vector<float> sums(static_cast<size_t>(pixels));
  for (int64_t plane = 0; plane * pixels < static_cast<int64_t>(acc.size()); ++plane) {
    const int64_t c = plane % channels;
    ConvAddPlaneSums(acc.data() + plane * pixels, extra + plane * pixels, pixels,
                     qx.qparams().scales[0], call.weight_scales[c],
                     bias_data ? bias_data[c] : 0.0,
                     static_cast<float>(qextra.qparams().scales[0]),
                     static_cast<int32_t>(extra_zero_point), qextra.dtype(), relu, sums.data());
    QuantizeFloatsTo8Bit(sums.data(), pixels, InverseScale(output_scale), output_zero_point,
                         qx.dtype(), dst + plane * pixels);
  }
  return out;
}

}  // namespace quantized
}  // namespace fuselage
