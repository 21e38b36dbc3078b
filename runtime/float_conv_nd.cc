#include "runtime/float_conv_nd.h"

#include <algorithm>
#include <array>
#include <string>

#include <eigen3/Eigen/Core>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/status_macros.h"
#include "runtime/onednn/onednn.h"

namespace fuselage {
namespace {

using RowMajorMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMatrixMap = Eigen::Map<const RowMajorMatrix>;
using MatrixMap = Eigen::Map<RowMajorMatrix>;

using Dims3 = std::array<int64_t, 3>;

// A convolution's sizes with the spatial dims right-aligned into 3 (1d: [1, 1, L]), so
// one loop nest serves 1d, 2d and 3d.
struct Geometry {
  int64_t batch = 1;
  bool unbatched = false;
  int64_t in_channels = 0, out_channels = 0, groups = 1;
  Dims3 in{1, 1, 1}, kernel{1, 1, 1}, out{1, 1, 1};
  Dims3 stride{1, 1, 1}, padding{0, 0, 0}, dilation{1, 1, 1}, output_padding{0, 0, 0};

  int64_t InSize() const { return in[0] * in[1] * in[2]; }
  int64_t KernelSize() const { return kernel[0] * kernel[1] * kernel[2]; }
  int64_t OutSize() const { return out[0] * out[1] * out[2]; }
};

std::string ShapeStr(const std::vector<int64_t>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ", "), "]");
}

// Checks dtypes, ranks, parameter lengths and channel counts, and fills everything but
// the output size. `weight_in_dim` is the weight dim holding input channels per group
// (1 for conv, 0 for transposed conv, where it holds all input channels).
absl::StatusOr<Geometry> ReadGeometry(const Tensor& input, const Tensor& weight,
                                      const Tensor* bias, const ConvNdParams& p,
                                      int spatial_dims, bool transposed) {
  const std::string op = absl::StrCat(transposed ? "conv_transpose" : "conv", spatial_dims, "d");
  if (spatial_dims < 1 || spatial_dims > 3) {
    return absl::InvalidArgumentError(absl::StrCat("conv: spatial_dims ", spatial_dims,
                                                   " is not 1, 2 or 3"));
  }
  for (const Tensor* t : {&input, &weight, bias}) {
    if (t != nullptr && t->dtype() != DType::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": expected torch.float32 tensors; got ",
                                                     DTypeName(t->dtype())));
    }
  }
  const int batched_rank = spatial_dims + 2;
  Geometry g;
  g.unbatched = input.dim() == batched_rank - 1;
  if (input.dim() != batched_rank && !g.unbatched) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": expected a ", batched_rank,
                                                   "-d [N, C, ...] or ", batched_rank - 1,
                                                   "-d [C, ...] input; got ",
                                                   input.ShapeString()));
  }
  if (weight.dim() != batched_rank) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": expected a ", batched_rank,
                                                   "-d weight; got ", weight.ShapeString()));
  }
  const size_t n = static_cast<size_t>(spatial_dims);
  const bool lengths_ok = p.stride.size() == n && p.padding.size() == n &&
                          p.dilation.size() == n &&
                          (p.output_padding.empty() || p.output_padding.size() == n);
  // At most Tensor::kMaxElements each, as tensor dimensions are: the output size
  // arithmetic cannot overflow.
  auto in_range = [](int64_t v, int64_t min) { return v >= min && v <= Tensor::kMaxElements; };
  bool values_ok = lengths_ok && in_range(p.groups, 1);
  for (size_t i = 0; values_ok && i < n; ++i) {
    values_ok = in_range(p.stride[i], 1) && in_range(p.padding[i], 0) &&
                in_range(p.dilation[i], 1);
    if (values_ok && !p.output_padding.empty()) {
      values_ok = p.output_padding[i] >= 0 &&
                  (p.output_padding[i] < p.stride[i] || p.output_padding[i] < p.dilation[i]);
    }
  }
  if (!values_ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": bad parameters stride=", ShapeStr(p.stride), " padding=", ShapeStr(p.padding),
        " dilation=", ShapeStr(p.dilation), " output_padding=", ShapeStr(p.output_padding),
        " groups=", p.groups, "; expected ", n,
        " ints each (stride, dilation >= 1, padding >= 0, 0 <= output_padding < stride or "
        "dilation) and groups >= 1"));
  }
  g.batch = g.unbatched ? 1 : input.shape()[0];
  const int channel_dim = g.unbatched ? 0 : 1;
  g.in_channels = input.shape()[channel_dim];
  g.groups = p.groups;
  const int64_t w0 = weight.shape()[0], w1 = weight.shape()[1];
  // conv: weight [O, C/G, *K]; transposed: weight [C, O/G, *K].
  const int64_t weight_in_channels = transposed ? w0 : w1 * g.groups;
  g.out_channels = transposed ? w1 * g.groups : w0;
  if (weight_in_channels != g.in_channels || w0 % g.groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": weight ", weight.ShapeString(), " with groups=", g.groups, " expects ",
        weight_in_channels, " input channels (and weight dim 0 divisible by groups); input ",
        input.ShapeString(), " has ", g.in_channels));
  }
  if (bias != nullptr && (bias->dim() != 1 || bias->shape()[0] != g.out_channels)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": bias has shape ", bias->ShapeString(),
                                                   "; expected [", g.out_channels, "]"));
  }
  const size_t offset = 3 - n;  // right-align into 3 dims
  for (size_t i = 0; i < n; ++i) {
    g.in[offset + i] = input.shape()[channel_dim + 1 + i];
    g.kernel[offset + i] = weight.shape()[2 + i];
    g.stride[offset + i] = p.stride[i];
    g.padding[offset + i] = p.padding[i];
    g.dilation[offset + i] = p.dilation[i];
    if (!p.output_padding.empty()) g.output_padding[offset + i] = p.output_padding[i];
  }
  return g;
}

// The output tensor: [N, O, *out] (or [O, *out] unbatched), zeros.
absl::StatusOr<Tensor> MakeOutput(const Geometry& g, int spatial_dims) {
  std::vector<int64_t> shape;
  if (!g.unbatched) shape.push_back(g.batch);
  shape.push_back(g.out_channels);
  for (int i = 3 - spatial_dims; i < 3; ++i) shape.push_back(g.out[i]);
  return Tensor::Zeros(DType::kFloat32, std::move(shape));
}

// A scratch matrix of rows x cols, bounded like any tensor so hostile sizes are an error.
absl::Status CheckScratch(int64_t rows, int64_t cols, absl::string_view op) {
  if (rows > Tensor::kMaxElements / std::max<int64_t>(cols, 1)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": unfolding needs more than ",
                                                   Tensor::kMaxElements, " elements"));
  }
  return absl::OkStatus();
}

// Input coordinate along one dim that output `o` reads through kernel tap `k`.
inline int64_t Source(const Geometry& g, int d, int64_t o, int64_t k) {
  return o * g.stride[d] - g.padding[d] + k * g.dilation[d];
}

// The adjoint of the forward conv's unfold (im2col), for the transposed conv: here `g.in` is the *output* volume being
// accumulated and `g.out` the positions of the transposed conv's input, so each column
// entry is added where the forward conv would have read it.
void Col2ImAdd(const Geometry& g, const float* col, int64_t channels, float* volume_out) {
  for (int64_t c = 0; c < channels; ++c) {
    float* volume = volume_out + c * g.InSize();
    for (int64_t kd = 0; kd < g.kernel[0]; ++kd)
      for (int64_t kh = 0; kh < g.kernel[1]; ++kh)
        for (int64_t kw = 0; kw < g.kernel[2]; ++kw)
          for (int64_t od = 0; od < g.out[0]; ++od) {
            const int64_t id = Source(g, 0, od, kd);
            for (int64_t oh = 0; oh < g.out[1]; ++oh) {
              const int64_t ih = Source(g, 1, oh, kh);
              if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1]) {
                col += g.out[2];
                continue;
              }
              float* row = volume + (id * g.in[1] + ih) * g.in[2];
              for (int64_t ow = 0; ow < g.out[2]; ++ow, ++col) {
                const int64_t iw = Source(g, 2, ow, kw);
                if (iw >= 0 && iw < g.in[2]) row[iw] += *col;
              }
            }
          }
  }
}

void AddBias(const Tensor* bias, int64_t channels, int64_t plane, int64_t batch, float* out) {
  if (bias == nullptr) return;
  const float* b = bias->data<float>();
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t o = 0; o < channels; ++o) {
      float* p = out + (n * channels + o) * plane;
      std::for_each(p, p + plane, [&](float& v) { v += b[o]; });
    }
}

}  // namespace

absl::StatusOr<Tensor> ConvNd(const Tensor& input, const Tensor& weight, const Tensor* bias,
                              const ConvNdParams& params, int spatial_dims) {
  ASSIGN_OR_RETURN(Geometry g, ReadGeometry(input, weight, bias, params, spatial_dims,
                                            /*transposed=*/false));
  const std::string op = absl::StrCat("conv", spatial_dims, "d");
  for (int d = 0; d < 3; ++d) {
    const int64_t span = g.dilation[d] * (g.kernel[d] - 1) + 1;
    if (g.in[d] + 2 * g.padding[d] < span) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": input ", input.ShapeString(),
                                                     " (padded) is smaller than the dilated "
                                                     "kernel ", weight.ShapeString()));
    }
    g.out[d] = (g.in[d] + 2 * g.padding[d] - span) / g.stride[d] + 1;
  }
  ASSIGN_OR_RETURN(Tensor out, MakeOutput(g, spatial_dims));
  const int64_t cg = g.in_channels / g.groups;
  RETURN_IF_ERROR(CheckScratch(cg * g.KernelSize(), g.OutSize(), op));
  if (out.numel() == 0) return out;
  // oneDNN takes the real spatial rank (the right-aligned leading 1s dropped).
  onednn::ConvGeometry geometry;
  geometry.src = {g.batch, g.in_channels};
  geometry.weights = {g.out_channels, cg};
  geometry.dst = {g.batch, g.out_channels};
  for (int d = 3 - spatial_dims; d < 3; ++d) {
    geometry.src.push_back(g.in[d]);
    geometry.weights.push_back(g.kernel[d]);
    geometry.dst.push_back(g.out[d]);
    geometry.stride.push_back(g.stride[d]);
    geometry.padding.push_back(g.padding[d]);
    geometry.dilation.push_back(g.dilation[d]);
  }
  geometry.groups = g.groups;
  onednn::ConvBuffers buffers;
  buffers.src = input.data<float>();
  buffers.weights = weight.data<float>();
  buffers.weights_owner = &weight;
  buffers.bias = bias ? bias->data<float>() : nullptr;
  buffers.dst = out.mutable_data<float>();
  using dt = dnnl::memory::data_type;
  RETURN_IF_ERROR(onednn::Convolution(op, geometry, dt::f32, dt::f32, dt::f32, buffers));
  return out;
}

absl::StatusOr<Tensor> ConvTransposeNd(const Tensor& input, const Tensor& weight,
                                       const Tensor* bias, const ConvNdParams& params,
                                       int spatial_dims) {
  ASSIGN_OR_RETURN(Geometry g, ReadGeometry(input, weight, bias, params, spatial_dims,
                                            /*transposed=*/true));
  const std::string op = absl::StrCat("conv_transpose", spatial_dims, "d");
  for (int d = 0; d < 3; ++d) {
    g.out[d] = (g.in[d] - 1) * g.stride[d] - 2 * g.padding[d] +
               g.dilation[d] * (g.kernel[d] - 1) + g.output_padding[d] + 1;
    if (g.out[d] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": input ", input.ShapeString(),
                                                     " with weight ", weight.ShapeString(),
                                                     " gives a non-positive output size"));
    }
  }
  ASSIGN_OR_RETURN(Tensor out, MakeOutput(g, spatial_dims));
  const int64_t cg = g.in_channels / g.groups, og = g.out_channels / g.groups;
  const int64_t rows = og * g.KernelSize(), positions = g.InSize();
  RETURN_IF_ERROR(CheckScratch(rows, positions, op));
  std::vector<float> col(static_cast<size_t>(rows * positions));
  // Col2ImAdd walks the geometry of the forward conv this one transposes: its input is
  // our output and its output positions are our input positions.
  Geometry forward = g;
  forward.in = g.out;
  forward.out = g.in;
  const int64_t out_plane = g.OutSize();
  const float* in = input.data<float>();
  const float* w = weight.data<float>();
  float* dst = out.mutable_data<float>();
  for (int64_t n = 0; n < g.batch; ++n) {
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      // weight group [cg, og * K] -> columns [og * K, positions] = W^T x X.
      MatrixMap(col.data(), rows, positions).noalias() =
          ConstMatrixMap(w + grp * cg * rows, cg, rows).transpose() *
          ConstMatrixMap(in + (n * g.in_channels + grp * cg) * positions, cg, positions);
      Col2ImAdd(forward, col.data(), og, dst + (n * g.out_channels + grp * og) * out_plane);
    }
  }
  AddBias(bias, g.out_channels, out_plane, g.batch, dst);
  return out;
}

}  // namespace fuselage
