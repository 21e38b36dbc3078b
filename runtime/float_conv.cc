#include "runtime/float_conv.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/status_macros.h"
#include "runtime/onednn/onednn.h"

namespace fuselage {
namespace {

using dt = dnnl::memory::data_type;

std::string ShapeStr(const std::vector<int64_t>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ", "), "]");
}

absl::Status CheckFloat(const Tensor& t, absl::string_view what) {
  if (t.dtype() != DType::kFloat32) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expected torch.float32; got ",
                                                   DTypeName(t.dtype())));
  }
  return absl::OkStatus();
}

absl::Status CheckBias(const Tensor* bias, int64_t out_features, absl::string_view op) {
  if (bias == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(CheckFloat(*bias, absl::StrCat(op, " bias")));
  if (bias->dim() != 1 || bias->shape()[0] != out_features) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": bias has shape ", bias->ShapeString(),
                                                   "; expected [", out_features, "]"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tensor> Conv2d(const Tensor& input, const Tensor& weight, const Tensor* bias,
                              const Conv2dParams& p) {
  RETURN_IF_ERROR(CheckFloat(input, "conv2d input"));
  RETURN_IF_ERROR(CheckFloat(weight, "conv2d weight"));
  const bool unbatched = input.dim() == 3;
  if (input.dim() != 4 && !unbatched) {
    return absl::InvalidArgumentError(absl::StrCat(
        "conv2d: expected a 4-d [N, C, H, W] or 3-d [C, H, W] input; got ", input.ShapeString()));
  }
  if (weight.dim() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "conv2d: expected a 4-d [O, C/groups, KH, KW] weight; got ", weight.ShapeString()));
  }
  // At most Tensor::kMaxElements each, as tensor dimensions are: the output size
  // arithmetic below cannot overflow.
  auto in_range = [](int64_t v, int64_t min) { return v >= min && v <= Tensor::kMaxElements; };
  auto pair_ok = [&](const std::vector<int64_t>& v, int64_t min) {
    return v.size() == 2 && in_range(v[0], min) && in_range(v[1], min);
  };
  if (!pair_ok(p.stride, 1) || !pair_ok(p.padding, 0) || !pair_ok(p.dilation, 1) ||
      !in_range(p.groups, 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "conv2d: bad parameters stride=", ShapeStr(p.stride), " padding=", ShapeStr(p.padding),
        " dilation=", ShapeStr(p.dilation), " groups=", p.groups,
        "; expected 2 ints each (stride, dilation >= 1, padding >= 0) and groups >= 1, all "
        "at most ", Tensor::kMaxElements));
  }
  const int64_t N = unbatched ? 1 : input.shape()[0];
  const int64_t C = input.shape()[unbatched ? 0 : 1];
  const int64_t H = input.shape()[unbatched ? 1 : 2];
  const int64_t W = input.shape()[unbatched ? 2 : 3];
  const int64_t O = weight.shape()[0], CG = weight.shape()[1];
  const int64_t KH = weight.shape()[2], KW = weight.shape()[3];
  const int64_t G = p.groups;
  if (O % G != 0 || CG * G != C) {
    return absl::InvalidArgumentError(absl::StrCat(
        "conv2d: weight ", weight.ShapeString(), " with groups=", G, " expects ", CG * G,
        " input channels (and out channels divisible by groups); input ", input.ShapeString(),
        " has ", C));
  }
  RETURN_IF_ERROR(CheckBias(bias, O, "conv2d"));
  const int64_t OH = (H + 2 * p.padding[0] - p.dilation[0] * (KH - 1) - 1) / p.stride[0] + 1;
  const int64_t OW = (W + 2 * p.padding[1] - p.dilation[1] * (KW - 1) - 1) / p.stride[1] + 1;
  if (H + 2 * p.padding[0] < p.dilation[0] * (KH - 1) + 1 ||
      W + 2 * p.padding[1] < p.dilation[1] * (KW - 1) + 1 || OH <= 0 || OW <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "conv2d: input ", input.ShapeString(), " (padded) is smaller than the dilated kernel ",
        weight.ShapeString()));
  }
  std::vector<int64_t> out_shape = unbatched ? std::vector<int64_t>{O, OH, OW}
                                             : std::vector<int64_t>{N, O, OH, OW};
  ASSIGN_OR_RETURN(Tensor out, Tensor::Uninitialized(DType::kFloat32, std::move(out_shape)));
  // Bound one group's unfolded input (what a GEMM-based conv would allocate) like any
  // tensor, so a hostile kernel / image size is an error, not hours of work or a failed
  // allocation inside oneDNN.
  const int64_t depth = CG * KH * KW, pixels = OH * OW;
  if (depth > Tensor::kMaxElements / std::max<int64_t>(pixels, 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "conv2d: unfolding input ", input.ShapeString(), " for weight ", weight.ShapeString(),
        " needs more than ", Tensor::kMaxElements, " elements"));
  }
  if (N == 0 || O == 0) return out;
  onednn::ConvGeometry geometry;
  geometry.src = {N, C, H, W};
  geometry.weights = {O, CG, KH, KW};
  geometry.dst = {N, O, OH, OW};
  geometry.stride = p.stride;
  geometry.padding = p.padding;
  geometry.dilation = p.dilation;
  geometry.groups = G;
  onednn::ConvBuffers buffers;
  buffers.src = input.data<float>();
  buffers.weights = weight.data<float>();
  buffers.weights_owner = &weight;
  buffers.bias = bias ? bias->data<float>() : nullptr;
  buffers.dst = out.mutable_data<float>();
  RETURN_IF_ERROR(onednn::Convolution("conv2d", geometry, dt::f32, dt::f32, dt::f32, buffers));
  return out;
}

absl::StatusOr<Tensor> Linear(const Tensor& input, const Tensor& weight, const Tensor* bias) {
  RETURN_IF_ERROR(CheckFloat(input, "linear input"));
  RETURN_IF_ERROR(CheckFloat(weight, "linear weight"));
  if (weight.dim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("linear: expected a 2-d [out, in] weight; got ",
                                                   weight.ShapeString()));
  }
  const int64_t out_features = weight.shape()[0], in_features = weight.shape()[1];
  if (input.dim() < 1 || input.shape().back() != in_features) {
    return absl::InvalidArgumentError(absl::StrCat("linear: input ", input.ShapeString(),
                                                   " must end in ", in_features,
                                                   " features for weight ", weight.ShapeString()));
  }
  RETURN_IF_ERROR(CheckBias(bias, out_features, "linear"));
  std::vector<int64_t> out_shape = input.shape();
  out_shape.back() = out_features;
  ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(DType::kFloat32, std::move(out_shape)));
  if (out.numel() == 0) return out;
  const int64_t rows = out.numel() / out_features;
  float* dst = out.mutable_data<float>();
  if (in_features == 0) {  // an empty sum: the output is the bias (or zeros)
    if (bias != nullptr) {
      for (int64_t r = 0; r < rows; ++r) {
        std::copy_n(bias->data<float>(), out_features, dst + r * out_features);
      }
    }
    return out;
  }
  RETURN_IF_ERROR(onednn::MatMul("linear", rows, in_features, out_features, dt::f32, dt::f32,
                                 dt::f32, input.data<float>(), weight.data<float>(),
                                 bias ? bias->data<float>() : nullptr, dst));
  return out;
}

}  // namespace fuselage
