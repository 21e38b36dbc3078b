#include "runtime/float_conv.h"

#include <algorithm>
#include <string>

#include <eigen3/Eigen/Core>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/status_macros.h"

namespace fuselage {
namespace {

using RowMajorMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMatrixMap = Eigen::Map<const RowMajorMatrix>;
using MatrixMap = Eigen::Map<RowMajorMatrix>;

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

// Unfolds one group's input planes [C, H, W] into columns [C * KH * KW, OH * OW], zeros
// where the window reaches into the padding.
void Im2Col(const float* in, int64_t C, int64_t H, int64_t W, int64_t KH, int64_t KW,
            int64_t OH, int64_t OW, const Conv2dParams& p, float* col) {
  const int64_t SH = p.stride[0], SW = p.stride[1], PH = p.padding[0], PW = p.padding[1];
  const int64_t DH = p.dilation[0], DW = p.dilation[1];
  for (int64_t c = 0; c < C; ++c) {
    const float* plane = in + c * H * W;
    for (int64_t kh = 0; kh < KH; ++kh) {
      for (int64_t kw = 0; kw < KW; ++kw) {
        for (int64_t oh = 0; oh < OH; ++oh) {
          const int64_t ih = oh * SH - PH + kh * DH;
          if (ih < 0 || ih >= H) {
            std::fill(col, col + OW, 0.0f);
            col += OW;
            continue;
          }
          const float* row = plane + ih * W;
          for (int64_t ow = 0; ow < OW; ++ow) {
            const int64_t iw = ow * SW - PW + kw * DW;
            *col++ = (iw >= 0 && iw < W) ? row[iw] : 0.0f;
          }
        }
      }
    }
  }
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
  ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(DType::kFloat32, std::move(out_shape)));

  const int64_t OG = O / G;           // out channels per group
  const int64_t K = CG * KH * KW;     // GEMM depth
  const int64_t P = OH * OW;          // output pixels
  // The column buffer is one group's unfolded input; bound it like any tensor, so a
  // hostile kernel or image size is an error rather than a failed allocation.
  if (K > Tensor::kMaxElements / std::max<int64_t>(P, 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "conv2d: unfolding input ", input.ShapeString(), " for weight ", weight.ShapeString(),
        " needs more than ", Tensor::kMaxElements, " elements"));
  }
  const bool direct = KH == 1 && KW == 1 && p.stride[0] == 1 && p.stride[1] == 1 &&
                      p.padding[0] == 0 && p.padding[1] == 0;  // input already is the columns
  std::vector<float> col(direct ? 0 : static_cast<size_t>(K * P));
  const float* in = input.data<float>();
  const float* w = weight.data<float>();
  float* dst = out.mutable_data<float>();
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t g = 0; g < G; ++g) {
      const float* group_in = in + (n * C + g * CG) * H * W;
      const float* columns = group_in;
      if (!direct) {
        Im2Col(group_in, CG, H, W, KH, KW, OH, OW, p, col.data());
        columns = col.data();
      }
      MatrixMap result(dst + (n * O + g * OG) * P, OG, P);
      result.noalias() = ConstMatrixMap(w + g * OG * K, OG, K) * ConstMatrixMap(columns, K, P);
      if (bias != nullptr) {
        const float* b = bias->data<float>() + g * OG;
        for (int64_t o = 0; o < OG; ++o) result.row(o).array() += b[o];
      }
    }
  }
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
  const int64_t rows = in_features == 0 ? out.numel() / std::max<int64_t>(out_features, 1)
                                        : input.numel() / in_features;
  MatrixMap result(out.mutable_data<float>(), rows, out_features);
  if (in_features > 0) {
    result.noalias() = ConstMatrixMap(input.data<float>(), rows, in_features) *
                       ConstMatrixMap(weight.data<float>(), out_features, in_features).transpose();
  }
  if (bias != nullptr) {
    result.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(bias->data<float>(), out_features);
  }
  return out;
}

}  // namespace fuselage
