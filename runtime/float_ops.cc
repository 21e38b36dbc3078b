// GCC's -O2 vectorizes with its "very cheap" cost model, which refuses loops with a
// remainder (and gathers); these loops are worth its full model. Set for the whole file,
// before any include, so that the inline functions the loops call share the setting and
// stay inlinable. Clang vectorizes them by default.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

#include "runtime/float_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/check.h"
#include "graph/parallel_for.h"
#include "graph/status_macros.h"
#include "runtime/onednn/onednn.h"

namespace fuselage {
namespace {

std::string ShapeStr(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// A weight / bias read as floats must be float32 (a module file may hold any dtype);
// null (absent) passes.
absl::Status ExpectFloatParameter(const Tensor* t, absl::string_view what,
                                  absl::string_view name) {
  if (t == nullptr || t->dtype() == DType::kFloat32) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", name, " is ", DTypeName(t->dtype()),
                                                 " ", t->ShapeString(), "; expected float32"));
}

// Applies `fn` to every element of float tensor `x` into a new tensor of its shape.
template <typename Fn>
Tensor MapFloats(const Tensor& x, Fn fn) {
  // Into a fresh buffer, not a copy of x's mapped in place: the interpreter still holds x
  // while the kernel runs, so writing a copy of it would first duplicate its bytes.
  // x's shape already passed Tensor's size limits, so this allocation cannot be refused.
  absl::StatusOr<Tensor> out = Tensor::Uninitialized(DType::kFloat32, x.shape());
  FUSELAGE_CHECK(out.ok());
  const float* src = x.data<float>();
  float* dst = out->mutable_data<float>();
  const int64_t n = x.numel();
  ParallelForChunks(n, ParallelChunkCount(n),
                    [&](int, int64_t begin, int64_t end) {
                      const float* __restrict in = src + begin;
                      float* __restrict to = dst + begin;
                      for (int64_t i = 0; i < end - begin; ++i) to[i] = fn(in[i]);
                    });
  return *std::move(out);
}

// Row-major strides of `shape`, aligned to `rank` trailing dims, with 0 where `shape`
// broadcasts (size 1 or missing).
std::vector<int64_t> BroadcastStrides(absl::Span<const int64_t> shape, size_t rank) {
  std::vector<int64_t> strides(rank, 0);
  int64_t stride = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    const size_t dim = shape.size() - 1 - i;
    const size_t out_dim = rank - 1 - i;
    strides[out_dim] = shape[dim] == 1 ? 0 : stride;
    stride *= shape[dim];
  }
  return strides;
}

template <typename Fn>
absl::StatusOr<Tensor> BroadcastBinary(const Tensor& a, const Tensor& b, Fn fn) {
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, BroadcastShapes(a.shape(), b.shape()));
  // Uninitialized: the loops below write every element (zeroing it first is a wasted pass).
  ASSIGN_OR_RETURN(Tensor out, Tensor::Uninitialized(DType::kFloat32, shape));
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.mutable_data<float>();
  const int64_t n = out.numel();
  // The common cases (same shape, a scalar side) on OpenMP's threads.
  const auto chunked = [&](auto loop) {
    ParallelForChunks(n, ParallelChunkCount(n), loop);
    return out;
  };
  if (a.shape() == b.shape()) {
    return chunked([&](int, int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) po[i] = fn(pa[i], pb[i]);
    });
  }
  if (b.numel() == 1 && a.numel() == n) {
    return chunked([&](int, int64_t begin, int64_t end) {
      const float y = pb[0];
      for (int64_t i = begin; i < end; ++i) po[i] = fn(pa[i], y);
    });
  }
  if (a.numel() == 1 && b.numel() == n) {
    return chunked([&](int, int64_t begin, int64_t end) {
      const float x = pa[0];
      for (int64_t i = begin; i < end; ++i) po[i] = fn(x, pb[i]);
    });
  }
  const size_t rank = shape.size();
  const std::vector<int64_t> sa = BroadcastStrides(a.shape(), rank);
  const std::vector<int64_t> sb = BroadcastStrides(b.shape(), rank);
  std::vector<int64_t> index(rank, 0);
  int64_t ia = 0, ib = 0;
  for (int64_t i = 0; i < n; ++i) {
    po[i] = fn(pa[ia], pb[ib]);
    // Advance the multi-index like an odometer, keeping both input offsets in step.
    for (size_t d = rank; d-- > 0;) {
      ++index[d];
      ia += sa[d];
      ib += sb[d];
      if (index[d] < shape[d]) break;
      ia -= sa[d] * shape[d];
      ib -= sb[d] * shape[d];
      index[d] = 0;
    }
  }
  return out;
}

// Views an [N, C, H, W] or [C, H, W] input as (N, C, H, W).
absl::Status Image4d(const Tensor& x, int64_t dims[4], absl::string_view what) {
  if (x.dim() == 4) {
    std::copy(x.shape().begin(), x.shape().end(), dims);
  } else if (x.dim() == 3) {
    dims[0] = 1;
    std::copy(x.shape().begin(), x.shape().end(), dims + 1);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": expected a 4-d [N, C, H, W] or 3-d [C, H, W] input; got ", x.ShapeString()));
  }
  return absl::OkStatus();
}

// Output shape for an [N, C, H, W] result, unbatched if the input was.
std::vector<int64_t> ImageShape(const Tensor& x, int64_t n, int64_t c, int64_t h, int64_t w) {
  if (x.dim() == 3) return {c, h, w};
  return {n, c, h, w};
}

absl::Status CheckPoolParams(const Pool2dParams& p, absl::string_view what) {
  // At most Tensor::kMaxElements, as tensor dimensions are: PoolOutputSize's arithmetic
  // cannot overflow.
  auto two = [&](const std::vector<int64_t>& v, absl::string_view field, int64_t min) {
    if (v.size() != 2 || v[0] < min || v[1] < min || v[0] > Tensor::kMaxElements ||
        v[1] > Tensor::kMaxElements) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", field, " must be 2 ints >= ",
                                                     min, " and <= ", Tensor::kMaxElements,
                                                     "; got ", ShapeStr(v)));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(two(p.kernel_size, "kernel_size", 1));
  RETURN_IF_ERROR(two(p.stride, "stride", 1));
  RETURN_IF_ERROR(two(p.padding, "padding", 0));
  RETURN_IF_ERROR(two(p.dilation, "dilation", 1));
  for (int i = 0; i < 2; ++i) {
    if (p.padding[i] > p.kernel_size[i] / 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": padding ", ShapeStr(p.padding), " must be at most half of kernel_size ",
          ShapeStr(p.kernel_size)));
    }
  }
  return absl::OkStatus();
}

// PyTorch's pooling_output_shape.
int64_t PoolOutputSize(int64_t in, int64_t kernel, int64_t pad, int64_t stride,
                       int64_t dilation, bool ceil_mode) {
  const int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = (span >= 0 ? span / stride : -((-span + stride - 1) / stride)) + 1;
  // The last window must start inside the input or its left padding.
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

}  // namespace

absl::StatusOr<Tensor> NewFloatTensor(std::vector<int64_t> shape) {
  return Tensor::Zeros(DType::kFloat32, std::move(shape));
}

absl::StatusOr<int64_t> NormalizeDim(int64_t dim, int64_t rank) {
  const int64_t bound = std::max<int64_t>(rank, 1);  // a 0-d tensor accepts dim 0 / -1
  if (dim < -bound || dim >= bound) {
    return absl::InvalidArgumentError(absl::StrCat("dim ", dim, " is out of range for a ", rank,
                                                   "-d tensor; expected [", -bound, ", ",
                                                   bound - 1, "]"));
  }
  return dim < 0 ? dim + bound : dim;
}

Tensor Relu(const Tensor& x) {
  return MapFloats(x, [](float v) { return v > 0.0f ? v : (std::isnan(v) ? v : 0.0f); });
}

Tensor Hardtanh(const Tensor& x, float min_val, float max_val) {
  return MapFloats(x, [=](float v) { return v < min_val ? min_val : (v > max_val ? max_val : v); });
}

Tensor Clamp(const Tensor& x, std::optional<float> min_val, std::optional<float> max_val) {
  const float lo = min_val.value_or(-std::numeric_limits<float>::infinity());
  const float hi = max_val.value_or(std::numeric_limits<float>::infinity());
  return MapFloats(x, [=](float v) {
    if (std::isnan(v)) return v;
    const float at_least_lo = v < lo ? lo : v;
    return at_least_lo > hi ? hi : at_least_lo;
  });
}

Tensor Hardswish(const Tensor& x) {
  return MapFloats(x, [](float v) { return v * std::min(std::max(v + 3.0f, 0.0f), 6.0f) / 6.0f; });
}

Tensor Hardsigmoid(const Tensor& x) {
  return MapFloats(x, [](float v) { return std::min(std::max(v + 3.0f, 0.0f), 6.0f) / 6.0f; });
}

Tensor Sigmoid(const Tensor& x) {
  return MapFloats(x, [](float v) { return 1.0f / (1.0f + std::exp(-v)); });
}

Tensor Tanh(const Tensor& x) {
  return MapFloats(x, [](float v) { return std::tanh(v); });
}

Tensor Erf(const Tensor& x) {
  return MapFloats(x, [](float v) { return std::erf(v); });
}

Tensor Silu(const Tensor& x) {
  return MapFloats(x, [](float v) { return v / (1.0f + std::exp(-v)); });
}

// Both forms in float, in PyTorch's order of operations (GeluKernel.cpp), so the
// cancellation in 1 + erf(x / sqrt 2) for very negative x rounds as PyTorch's does.
Tensor Gelu(const Tensor& x, bool tanh_approx) {
  if (tanh_approx) {
    constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
    constexpr float kKappa = 0.044715f;
    return MapFloats(x, [](float v) {
      const float inner = kBeta * (v + kKappa * v * v * v);
      return 0.5f * v * (1.0f + std::tanh(inner));
    });
  }
  constexpr float kAlpha = 0.7071067811865476f;  // 1 / sqrt(2)
  return MapFloats(x, [](float v) { return v * 0.5f * (1.0f + std::erf(v * kAlpha)); });
}

Tensor Elu(const Tensor& x, float alpha) {
  return MapFloats(x, [alpha](float v) { return v > 0.0f ? v : alpha * std::expm1(v); });
}

Tensor LeakyRelu(const Tensor& x, float negative_slope) {
  return MapFloats(x, [negative_slope](float v) { return v > 0.0f ? v : v * negative_slope; });
}

absl::StatusOr<Tensor> Prelu(const Tensor& x, const Tensor& weight) {
  RETURN_IF_ERROR(ExpectFloatParameter(&weight, "prelu", "weight"));
  const int64_t slopes = weight.numel();
  const int64_t channels = x.dim() == 0 ? 1 : x.dim() == 1 ? x.shape()[0] : x.shape()[1];
  if (slopes != 1 && slopes != channels) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prelu: weight has ", slopes, " entries; expected 1 or the input's ", channels,
        " channels (input ", x.ShapeString(), ")"));
  }
  int64_t inner = 1;
  for (int64_t d = 2; d < x.dim(); ++d) inner *= x.shape()[d];
  Tensor out = x;
  float* po = out.mutable_data<float>();
  const float* w = weight.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float slope = slopes == 1 ? w[0] : w[(i / inner) % channels];
    if (!(po[i] > 0.0f)) po[i] *= slope;
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> BroadcastShapes(absl::Span<const int64_t> a,
                                                     absl::Span<const int64_t> b) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) {
      return absl::InvalidArgumentError(absl::StrCat("shapes ", ShapeStr(a), " and ", ShapeStr(b),
                                                     " do not broadcast (dim ", rank - 1 - i,
                                                     ": ", da, " vs ", db, ")"));
    }
    out[rank - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

absl::StatusOr<Tensor> Add(const Tensor& a, const Tensor& b, float alpha) {
  if (alpha == 1.0f) return BroadcastBinary(a, b, [](float x, float y) { return x + y; });
  return BroadcastBinary(a, b, [alpha](float x, float y) { return x + alpha * y; });
}

absl::StatusOr<Tensor> Mul(const Tensor& a, const Tensor& b) {
  return BroadcastBinary(a, b, [](float x, float y) { return x * y; });
}

absl::StatusOr<Tensor> Div(const Tensor& a, const Tensor& b) {
  return BroadcastBinary(a, b, [](float x, float y) { return x / y; });
}

Tensor DivScalar(const Tensor& a, float scalar) {
  return MapFloats(a, [scalar](float v) { return v / scalar; });
}

Tensor RDivScalar(float scalar, const Tensor& b) {
  return MapFloats(b, [scalar](float v) { return scalar / v; });
}

Tensor AddScalar(const Tensor& a, float scalar) {
  return MapFloats(a, [scalar](float v) { return v + scalar; });
}

Tensor MulScalar(const Tensor& a, float scalar) {
  return MapFloats(a, [scalar](float v) { return v * scalar; });
}

absl::StatusOr<Tensor> BatchNorm(const Tensor& x, const Tensor& running_mean,
                                 const Tensor& running_var, const Tensor* weight,
                                 const Tensor* bias, double eps) {
  if (x.dim() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch norm: expected an [N, C, ...] input; got ", x.ShapeString()));
  }
  const int64_t channels = x.shape()[1];
  auto check = [&](const Tensor* t, absl::string_view name) -> absl::Status {
    if (t != nullptr && (t->dim() != 1 || t->shape()[0] != channels)) {
      return absl::InvalidArgumentError(absl::StrCat("batch norm: ", name, " has shape ",
                                                     t->ShapeString(), "; expected [", channels,
                                                     "] for input ", x.ShapeString()));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(check(&running_mean, "running_mean"));
  RETURN_IF_ERROR(check(&running_var, "running_var"));
  RETURN_IF_ERROR(check(weight, "weight"));
  RETURN_IF_ERROR(check(bias, "bias"));
  // y = x * scale + shift, with scale = w / sqrt(var + eps), shift = b - mean * scale.
  std::vector<float> scale(channels), shift(channels);
  for (int64_t c = 0; c < channels; ++c) {
    const double inv_std = 1.0 / std::sqrt(static_cast<double>(running_var.data<float>()[c]) + eps);
    const double w = weight ? weight->data<float>()[c] : 1.0;
    const double b = bias ? bias->data<float>()[c] : 0.0;
    scale[c] = static_cast<float>(w * inv_std);
    shift[c] = static_cast<float>(b - running_mean.data<float>()[c] * w * inv_std);
  }
  // Into a fresh buffer: the interpreter still holds x, so mapping a copy of it in place
  // would first duplicate its bytes (a pass more).
  ASSIGN_OR_RETURN(Tensor out, Tensor::Uninitialized(DType::kFloat32, x.shape()));
  const float* __restrict in = x.data<float>();
  float* __restrict data = out.mutable_data<float>();
  int64_t inner = 1;
  for (int64_t k = 2; k < x.dim(); ++k) inner *= x.shape()[k];
  for (int64_t n = 0; n < x.shape()[0]; ++n) {
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t offset = (n * channels + c) * inner;
      const float sc = scale[c], sh = shift[c];
      for (int64_t i = 0; i < inner; ++i) data[offset + i] = in[offset + i] * sc + sh;
    }
  }
  return out;
}

absl::StatusOr<Tensor> MaxPool2d(const Tensor& x, const Pool2dParams& p) {
  int64_t d[4];
  RETURN_IF_ERROR(Image4d(x, d, "max_pool2d"));
  RETURN_IF_ERROR(CheckPoolParams(p, "max_pool2d"));
  const int64_t N = d[0], C = d[1], H = d[2], W = d[3];
  const int64_t OH = PoolOutputSize(H, p.kernel_size[0], p.padding[0], p.stride[0], p.dilation[0], p.ceil_mode);
  const int64_t OW = PoolOutputSize(W, p.kernel_size[1], p.padding[1], p.stride[1], p.dilation[1], p.ceil_mode);
  if (OH <= 0 || OW <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_pool2d: input ", x.ShapeString(),
                                                   " is too small for the kernel (output ",
                                                   OH, "x", OW, ")"));
  }
  // Uninitialized: every output element is written below.
  ASSIGN_OR_RETURN(Tensor out,
                   Tensor::Uninitialized(DType::kFloat32, ImageShape(x, N, C, OH, OW)));
  const int64_t KH = p.kernel_size[0], KW = p.kernel_size[1];
  const int64_t SH = p.stride[0], SW = p.stride[1], PH = p.padding[0], PW = p.padding[1];
  const int64_t DH = p.dilation[0], DW = p.dilation[1];
  // Output columns [ow_lo, ow_hi) have their whole window inside the input's width, so
  // their loop needs no bounds checks (the hot part: all but the border columns).
  const int64_t ow_lo = std::min(OW, (PW + SW - 1) / SW);
  const int64_t last_start = W - 1 - (KW - 1) * DW + PW;  // of a window inside the width
  const int64_t ow_hi = std::max(ow_lo, std::min(OW, last_start >= 0 ? last_start / SW + 1
                                                                     : int64_t{0}));
  // PyTorch's rule (`val > max || isnan(val)`) as a select, not a branch: which element
  // wins is data-dependent and unpredictable. The window's maximum (or NaN if it holds
  // one) does not depend on the order its elements are visited in, so each output row
  // first takes the maximum down the window's rows for every input column (contiguous:
  // vectorized), then across the window's columns of that.
  const auto take = [](float v, float best) { return (v > best || v != v) ? v : best; };
  const float* in = x.data<float>();
  float* out_data = out.mutable_data<float>();
  // Planes on OpenMP's threads, each chunk with its own column maxima.
  const int chunks = ParallelChunkCount(N * C, H * W);
  ParallelForChunks(N * C, chunks, [&](int, int64_t first_plane, int64_t end_plane) {
    std::vector<float> column_max(W);
    float* po = out_data + first_plane * OH * OW;
    for (int64_t plane = first_plane; plane < end_plane; ++plane) {
      const float* src = in + plane * H * W;
      for (int64_t oh = 0; oh < OH; ++oh, po += OW) {
        // The window's rows inside the input: kh in [kh0, kh1).
        const int64_t top = oh * SH - PH;
        const int64_t kh0 = top >= 0 ? 0 : (-top + DH - 1) / DH;
        int64_t kh1 = KH;
        while (kh1 > kh0 && top + (kh1 - 1) * DH >= H) --kh1;
        float* __restrict cm = column_max.data();
        std::fill(cm, cm + W, -std::numeric_limits<float>::infinity());
        for (int64_t kh = kh0; kh < kh1; ++kh) {
          const float* __restrict row = src + (top + kh * DH) * W;
          for (int64_t iw = 0; iw < W; ++iw) cm[iw] = take(row[iw], cm[iw]);
        }
        const auto checked_column = [&](int64_t ow) {
          float best = -std::numeric_limits<float>::infinity();
          for (int64_t kw = 0; kw < KW; ++kw) {
            const int64_t iw = ow * SW - PW + kw * DW;
            if (iw >= 0 && iw < W) best = take(cm[iw], best);
          }
          po[ow] = best;
        };
        for (int64_t ow = 0; ow < ow_lo; ++ow) checked_column(ow);
        for (int64_t ow = ow_lo; ow < ow_hi; ++ow) {
          const float* window = cm + ow * SW - PW;
          float best = -std::numeric_limits<float>::infinity();
          for (int64_t kw = 0; kw < KW; ++kw) best = take(window[kw * DW], best);
          po[ow] = best;
        }
        for (int64_t ow = ow_hi; ow < OW; ++ow) checked_column(ow);
      }
    }
  });
  return out;
}

absl::StatusOr<Tensor> AvgPool2d(const Tensor& x, const Pool2dParams& p) {
  int64_t d[4];
  RETURN_IF_ERROR(Image4d(x, d, "avg_pool2d"));
  RETURN_IF_ERROR(CheckPoolParams(p, "avg_pool2d"));
  const int64_t N = d[0], C = d[1], H = d[2], W = d[3];
  const int64_t KH = p.kernel_size[0], KW = p.kernel_size[1];
  const int64_t SH = p.stride[0], SW = p.stride[1], PH = p.padding[0], PW = p.padding[1];
  const int64_t OH = PoolOutputSize(H, KH, PH, SH, 1, p.ceil_mode);
  const int64_t OW = PoolOutputSize(W, KW, PW, SW, 1, p.ceil_mode);
  if (OH <= 0 || OW <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("avg_pool2d: input ", x.ShapeString(),
                                                   " is too small for the kernel (output ",
                                                   OH, "x", OW, ")"));
  }
  ASSIGN_OR_RETURN(Tensor out, NewFloatTensor(ImageShape(x, N, C, OH, OW)));
  const float* in = x.data<float>();
  float* po = out.mutable_data<float>();
  for (int64_t plane = 0; plane < N * C; ++plane) {
    const float* src = in + plane * H * W;
    for (int64_t oh = 0; oh < OH; ++oh) {
      for (int64_t ow = 0; ow < OW; ++ow) {
        // PyTorch's window: clipped to the padded input for the divisor, then to the input.
        int64_t h0 = oh * SH - PH, w0 = ow * SW - PW;
        int64_t h1 = std::min(h0 + KH, H + PH), w1 = std::min(w0 + KW, W + PW);
        const int64_t padded_size = (h1 - h0) * (w1 - w0);
        h0 = std::max<int64_t>(h0, 0);
        w0 = std::max<int64_t>(w0, 0);
        h1 = std::min(h1, H);
        w1 = std::min(w1, W);
        double sum = 0.0;
        for (int64_t ih = h0; ih < h1; ++ih) {
          for (int64_t iw = w0; iw < w1; ++iw) sum += src[ih * W + iw];
        }
        const int64_t divisor = p.divisor_override > 0 ? p.divisor_override
                                : p.count_include_pad ? padded_size
                                                      : (h1 - h0) * (w1 - w0);
        *po++ = divisor > 0 ? static_cast<float>(sum / divisor) : 0.0f;
      }
    }
  }
  return out;
}

namespace {

// PyTorch's adaptive pooling: output cell (oh, ow) of an OH x OW output covers input rows
// [oh * H / OH, ceil((oh + 1) * H / OH)) and the same for columns; `reduce(src, W, h0, h1,
// w0, w1)` gives the value of the cell whose window that is, in the H x W plane `src`.
template <typename Reduce>
absl::StatusOr<Tensor> AdaptivePool2d(const Tensor& x, int64_t out_h, int64_t out_w,
                                      absl::string_view op, Reduce reduce) {
  int64_t d[4];
  RETURN_IF_ERROR(Image4d(x, d, op));
  const int64_t N = d[0], C = d[1], H = d[2], W = d[3];
  const int64_t OH = out_h < 0 ? H : out_h;
  const int64_t OW = out_w < 0 ? W : out_w;
  if (OH == 0 || OW == 0 || H == 0 || W == 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": input ", x.ShapeString(),
                                                   " and output size ", OH, "x", OW,
                                                   " must be non-empty"));
  }
  ASSIGN_OR_RETURN(Tensor out, NewFloatTensor(ImageShape(x, N, C, OH, OW)));
  const float* in = x.data<float>();
  float* po = out.mutable_data<float>();
  for (int64_t plane = 0; plane < N * C; ++plane) {
    const float* src = in + plane * H * W;
    for (int64_t oh = 0; oh < OH; ++oh) {
      const int64_t h0 = oh * H / OH, h1 = ((oh + 1) * H + OH - 1) / OH;
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t w0 = ow * W / OW, w1 = ((ow + 1) * W + OW - 1) / OW;
        *po++ = reduce(src, W, h0, h1, w0, w1);
      }
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<Tensor> AdaptiveAvgPool2d(const Tensor& x, int64_t out_h, int64_t out_w) {
  return AdaptivePool2d(x, out_h, out_w, "adaptive_avg_pool2d",
                        [](const float* src, int64_t W, int64_t h0, int64_t h1, int64_t w0,
                           int64_t w1) {
                          double sum = 0.0;
                          for (int64_t ih = h0; ih < h1; ++ih) {
                            for (int64_t iw = w0; iw < w1; ++iw) sum += src[ih * W + iw];
                          }
                          return static_cast<float>(sum / static_cast<double>((h1 - h0) *
                                                                              (w1 - w0)));
                        });
}

namespace {

// A reduction over `dims` (empty: all dims): `combine(acc, v)` folds every input element
// into its output slot's accumulator (starting at `init`), `finish(acc, count)` turns an
// accumulator into the output value, `count` being the number of elements reduced.
template <typename Combine, typename Finish>
absl::StatusOr<Tensor> Reduce(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim,
                              absl::string_view what, double init, Combine combine,
                              Finish finish) {
  const int64_t rank = x.dim();
  std::vector<bool> reduced(rank, dims.empty());
  for (int64_t dim : dims) {
    ASSIGN_OR_RETURN(int64_t d, NormalizeDim(dim, rank));
    if (rank == 0) continue;
    if (reduced[d]) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": dim ", dim, " appears twice"));
    }
    reduced[d] = true;
  }
  std::vector<int64_t> out_shape;
  std::vector<int64_t> kept_shape;  // out shape with reduced dims as 1 (keepdim form)
  int64_t count = 1;
  for (int64_t d = 0; d < rank; ++d) {
    kept_shape.push_back(reduced[d] ? 1 : x.shape()[d]);
    if (reduced[d]) count *= x.shape()[d];
    if (!reduced[d] || keepdim) out_shape.push_back(reduced[d] ? 1 : x.shape()[d]);
  }
  ASSIGN_OR_RETURN(Tensor out, NewFloatTensor(out_shape));
  std::vector<double> acc(out.numel(), init);
  const std::vector<int64_t> strides = BroadcastStrides(kept_shape, rank);
  std::vector<int64_t> index(rank, 0);
  int64_t at = 0;
  const float* in = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    acc[at] = combine(acc[at], static_cast<double>(in[i]));
    for (int64_t d = rank; d-- > 0;) {
      ++index[d];
      at += strides[d];
      if (index[d] < x.shape()[d]) break;
      at -= strides[d] * x.shape()[d];
      index[d] = 0;
    }
  }
  float* po = out.mutable_data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) po[i] = finish(acc[i], count);
  return out;
}

}  // namespace

absl::StatusOr<Tensor> Mean(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  return Reduce(
      x, dims, keepdim, "mean", 0.0, [](double a, double v) { return a + v; },
      [](double a, int64_t count) {
        return count == 0 ? std::numeric_limits<float>::quiet_NaN()
                          : static_cast<float>(a / static_cast<double>(count));
      });
}

absl::StatusOr<Tensor> Sum(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  return Reduce(
      x, dims, keepdim, "sum", 0.0, [](double a, double v) { return a + v; },
      [](double a, int64_t) { return static_cast<float>(a); });
}

absl::StatusOr<Tensor> Amax(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  for (int64_t d = 0; d < x.dim(); ++d) {
    const bool is_reduced =
        dims.empty() || std::find(dims.begin(), dims.end(), d) != dims.end() ||
        std::find(dims.begin(), dims.end(), d - x.dim()) != dims.end();
    if (is_reduced && x.shape()[d] == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "amax: cannot reduce over dim ", d, " of size 0 (input ", x.ShapeString(), ")"));
    }
  }
  return Reduce(
      x, dims, keepdim, "amax", -std::numeric_limits<double>::infinity(),
      [](double a, double v) { return (v > a || std::isnan(v)) && !std::isnan(a) ? v : a; },
      [](double a, int64_t) { return static_cast<float>(a); });
}

absl::StatusOr<Tensor> Cat(absl::Span<const Tensor> tensors, int64_t dim) {
  if (tensors.empty()) return absl::InvalidArgumentError("cat: expected at least one tensor");
  const Tensor& first = tensors[0];
  if (first.dim() == 0) return absl::InvalidArgumentError("cat: zero-dimensional tensors cannot be concatenated");
  ASSIGN_OR_RETURN(const int64_t d, NormalizeDim(dim, first.dim()));
  std::vector<int64_t> shape = first.shape();
  shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    bool compatible = t.dtype() == first.dtype() && t.dim() == first.dim() &&
                      t.qparams() == first.qparams();
    for (int64_t k = 0; compatible && k < t.dim(); ++k) {
      compatible = k == d || t.shape()[k] == first.shape()[k];
    }
    if (!compatible) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cat along dim ", d, ": tensor ", i, " (", DTypeName(t.dtype()), " ", t.ShapeString(),
          ") does not match tensor 0 (", DTypeName(first.dtype()), " ", first.ShapeString(),
          ") in dtype, quantization or the other dims"));
    }
    shape[d] += t.shape()[d];
  }
  ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(first.dtype(), shape, first.qparams()));
  const size_t elem = DTypeSize(first.dtype());
  int64_t outer = 1;
  for (int64_t k = 0; k < d; ++k) outer *= shape[k];
  int64_t inner = 1;
  for (int64_t k = d + 1; k < first.dim(); ++k) inner *= shape[k];
  char* dst = static_cast<char*>(out.mutable_raw_data());
  const size_t out_row = static_cast<size_t>(shape[d] * inner) * elem;
  size_t offset = 0;
  for (const Tensor& t : tensors) {
    const size_t row = static_cast<size_t>(t.shape()[d] * inner) * elem;
    const char* src = static_cast<const char*>(t.raw_data());
    for (int64_t o = 0; o < outer; ++o) {
      std::copy(src + o * row, src + (o + 1) * row, dst + o * out_row + offset);
    }
    offset += row;
  }
  return out;
}

absl::StatusOr<Tensor> Flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  if (x.dim() == 0) return x.Reshaped({1});
  ASSIGN_OR_RETURN(const int64_t start, NormalizeDim(start_dim, x.dim()));
  ASSIGN_OR_RETURN(const int64_t end, NormalizeDim(end_dim, x.dim()));
  if (start > end) {
    return absl::InvalidArgumentError(absl::StrCat("flatten: start_dim ", start_dim,
                                                   " comes after end_dim ", end_dim));
  }
  std::vector<int64_t> shape(x.shape().begin(), x.shape().begin() + start);
  int64_t merged = 1;
  for (int64_t k = start; k <= end; ++k) merged *= x.shape()[k];
  shape.push_back(merged);
  shape.insert(shape.end(), x.shape().begin() + end + 1, x.shape().end());
  return x.Reshaped(std::move(shape));
}

namespace {

// The leading dims of a pixel (un)shuffle input, and its last three [C, H, W].
absl::StatusOr<std::vector<int64_t>> PixelShuffleBatch(const Tensor& x, int64_t factor,
                                                      absl::string_view op,
                                                      absl::string_view factor_name) {
  if (x.dim() < 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": expected an input of at least 3 dims [*, C, H, W]; got ", x.ShapeString()));
  }
  if (factor <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", factor_name, " must be positive; got ", factor));
  }
  return std::vector<int64_t>(x.shape().begin(), x.shape().end() - 3);
}

}  // namespace

absl::StatusOr<Tensor> PixelShuffle(const Tensor& x, int64_t r) {
  ASSIGN_OR_RETURN(std::vector<int64_t> batch,
                   PixelShuffleBatch(x, r, "pixel_shuffle", "upscale_factor"));
  const int64_t c = x.shape()[x.dim() - 3], h = x.shape()[x.dim() - 2],
                w = x.shape()[x.dim() - 1];
  if (c % (r * r) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pixel_shuffle: the channel dim ", c, " of ", x.ShapeString(),
        " is not divisible by upscale_factor squared (", r * r, ")"));
  }
  const int64_t b = static_cast<int64_t>(batch.size());
  std::vector<int64_t> split = batch;
  split.insert(split.end(), {c / (r * r), r, r, h, w});
  std::vector<int64_t> order;
  for (int64_t i = 0; i < b; ++i) order.push_back(i);
  order.insert(order.end(), {b, b + 3, b + 1, b + 4, b + 2});  // C, H, r, W, r
  ASSIGN_OR_RETURN(Tensor grouped, x.Reshaped(std::move(split)));
  ASSIGN_OR_RETURN(Tensor permuted, Permute(grouped, order));
  batch.insert(batch.end(), {c / (r * r), h * r, w * r});
  return permuted.Reshaped(std::move(batch));
}

absl::StatusOr<Tensor> PixelUnshuffle(const Tensor& x, int64_t r) {
  ASSIGN_OR_RETURN(std::vector<int64_t> batch,
                   PixelShuffleBatch(x, r, "pixel_unshuffle", "downscale_factor"));
  const int64_t c = x.shape()[x.dim() - 3], h = x.shape()[x.dim() - 2],
                w = x.shape()[x.dim() - 1];
  if (h % r != 0 || w % r != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pixel_unshuffle: the spatial dims of ", x.ShapeString(),
        " are not divisible by downscale_factor ", r));
  }
  const int64_t b = static_cast<int64_t>(batch.size());
  std::vector<int64_t> split = batch;
  split.insert(split.end(), {c, h / r, r, w / r, r});
  std::vector<int64_t> order;
  for (int64_t i = 0; i < b; ++i) order.push_back(i);
  order.insert(order.end(), {b, b + 2, b + 4, b + 1, b + 3});  // C, r, r, H, W
  ASSIGN_OR_RETURN(Tensor grouped, x.Reshaped(std::move(split)));
  ASSIGN_OR_RETURN(Tensor permuted, Permute(grouped, order));
  batch.insert(batch.end(), {c * r * r, h / r, w / r});
  return permuted.Reshaped(std::move(batch));
}

absl::StatusOr<Tensor> Reshape(const Tensor& x, std::vector<int64_t> shape) {
  int64_t known = 1;
  int infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer_at >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("reshape to ", ShapeStr(shape), ": only one dimension can be -1"));
      }
      infer_at = static_cast<int>(i);
    } else if (shape[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("reshape to ", ShapeStr(shape), ": negative dimension"));
    } else {
      if (shape[i] != 0 && known > Tensor::kMaxElements / shape[i]) {
        return absl::InvalidArgumentError(absl::StrCat("reshape to ", ShapeStr(shape), ": too large"));
      }
      known *= shape[i];
    }
  }
  if (infer_at >= 0) {
    if (known == 0 || x.numel() % known != 0) {
      return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", x.ShapeString(), " (",
                                                     x.numel(), " elements) to ", ShapeStr(shape)));
    }
    shape[infer_at] = x.numel() / known;
  }
  return x.Reshaped(std::move(shape));
}

// ---- Normalization over groups of contiguous elements ---------------------------------

namespace {

// Normalizes `x` viewed as [outer, groups_per_row..]: every run of `group_size`
// contiguous elements is normalized by its own mean and biased variance; then element
// i of the run gets `scale(i) * v + shift(i)` via `affine(row, i)` (null: none).
template <typename Affine>
Tensor NormalizeRuns(const Tensor& x, int64_t group_size, double eps, Affine affine) {
  Tensor out = x;
  float* data = out.mutable_data<float>();
  const int64_t runs = group_size == 0 ? 0 : x.numel() / group_size;
  for (int64_t r = 0; r < runs; ++r) {
    float* p = data + r * group_size;
    double sum = 0.0;
    for (int64_t i = 0; i < group_size; ++i) sum += p[i];
    const double mean = sum / static_cast<double>(group_size);
    double sq = 0.0;
    for (int64_t i = 0; i < group_size; ++i) sq += (p[i] - mean) * (p[i] - mean);
    const double inv_std = 1.0 / std::sqrt(sq / static_cast<double>(group_size) + eps);
    for (int64_t i = 0; i < group_size; ++i) {
      const double normalized = (p[i] - mean) * inv_std;
      p[i] = affine(r, i, normalized);
    }
  }
  return out;
}

absl::Status CheckChannelTensor(const Tensor* t, int64_t channels, absl::string_view what,
                                absl::string_view name, const Tensor& x) {
  RETURN_IF_ERROR(ExpectFloatParameter(t, what, name));
  if (t == nullptr || (t->dim() == 1 && t->shape()[0] == channels)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", name, " has shape ",
                                                 t->ShapeString(), "; expected [", channels,
                                                 "] for input ", x.ShapeString()));
}

// Group norm's core: [N, C, inner] with C in `groups` groups; per-channel affine.
absl::StatusOr<Tensor> ChannelGroupNorm(const Tensor& x, int64_t groups, const Tensor* weight,
                                        const Tensor* bias, double eps, absl::string_view what) {
  if (x.dim() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": expected an [N, C, ...] input; got ", x.ShapeString()));
  }
  const int64_t channels = x.shape()[1];
  if (groups <= 0 || channels % groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", channels,
                                                   " channels cannot be split into ", groups,
                                                   " groups"));
  }
  RETURN_IF_ERROR(CheckChannelTensor(weight, channels, what, "weight", x));
  RETURN_IF_ERROR(CheckChannelTensor(bias, channels, what, "bias", x));
  int64_t inner = 1;
  for (int64_t d = 2; d < x.dim(); ++d) inner *= x.shape()[d];
  const int64_t per_group = channels / groups;
  const float* w = weight ? weight->data<float>() : nullptr;
  const float* b = bias ? bias->data<float>() : nullptr;
  return NormalizeRuns(x, per_group * inner, eps, [&](int64_t run, int64_t i, double v) {
    const int64_t c = (run % groups) * per_group + i / inner;
    return static_cast<float>(v * (w ? w[c] : 1.0) + (b ? b[c] : 0.0));
  });
}

}  // namespace

absl::StatusOr<Tensor> LayerNorm(const Tensor& x, absl::Span<const int64_t> normalized_shape,
                                 const Tensor* weight, const Tensor* bias, double eps) {
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  bool fits = k >= 1 && k <= x.dim();
  for (int64_t i = 0; fits && i < k; ++i) {
    fits = x.shape()[x.dim() - k + i] == normalized_shape[i];
  }
  if (!fits) {
    return absl::InvalidArgumentError(absl::StrCat("layer_norm: normalized_shape ",
                                                   ShapeStr(normalized_shape),
                                                   " is not the trailing shape of input ",
                                                   x.ShapeString()));
  }
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{weight, "weight"},
                                {bias, "bias"}}) {
    RETURN_IF_ERROR(ExpectFloatParameter(t, "layer_norm", name));
    if (t != nullptr && !std::equal(t->shape().begin(), t->shape().end(),
                                    normalized_shape.begin(), normalized_shape.end())) {
      return absl::InvalidArgumentError(absl::StrCat("layer_norm: ", name, " has shape ",
                                                     t->ShapeString(), "; expected ",
                                                     ShapeStr(normalized_shape)));
    }
  }
  int64_t size = 1;
  for (int64_t d : normalized_shape) size *= d;
  const float* w = weight ? weight->data<float>() : nullptr;
  const float* b = bias ? bias->data<float>() : nullptr;
  return NormalizeRuns(x, size, eps, [&](int64_t, int64_t i, double v) {
    return static_cast<float>(v * (w ? w[i] : 1.0) + (b ? b[i] : 0.0));
  });
}

absl::StatusOr<Tensor> GroupNorm(const Tensor& x, int64_t num_groups, const Tensor* weight,
                                 const Tensor* bias, double eps) {
  return ChannelGroupNorm(x, num_groups, weight, bias, eps, "group_norm");
}

absl::StatusOr<Tensor> InstanceNorm(const Tensor& x, const Tensor* weight, const Tensor* bias,
                                    double eps) {
  if (x.dim() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("instance_norm: expected an [N, C, ...] input; got ", x.ShapeString()));
  }
  return ChannelGroupNorm(x, x.shape()[1], weight, bias, eps, "instance_norm");
}

// ---- Softmax and matrix products ----------------------------------------------------

namespace {

// Runs `fn(row, n, stride)` over every 1-d line along `dim`: `row` points at its first
// element, the others follow `stride` apart.
template <typename Fn>
absl::Status ForEachLine(Tensor& out, int64_t dim, Fn fn) {
  ASSIGN_OR_RETURN(const int64_t d, NormalizeDim(dim, out.dim()));
  if (out.dim() == 0) {
    fn(out.mutable_data<float>(), 1, 1);
    return absl::OkStatus();
  }
  const int64_t n = out.shape()[d];
  int64_t inner = 1, outer = 1;
  for (int64_t k = d + 1; k < out.dim(); ++k) inner *= out.shape()[k];
  for (int64_t k = 0; k < d; ++k) outer *= out.shape()[k];
  float* data = out.mutable_data<float>();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) fn(data + o * n * inner + i, n, inner);
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> SoftmaxImpl(const Tensor& x, int64_t dim, bool log) {
  Tensor out = x;
  RETURN_IF_ERROR(ForEachLine(out, dim, [log](float* p, int64_t n, int64_t stride) {
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i) max = std::max(max, p[i * stride]);
    // One exp per element, in float as PyTorch's kernel: softmax keeps exp(x - max) in
    // place and scales it; only the sum is accumulated in double.
    double sum = 0.0;
    if (log) {
      for (int64_t i = 0; i < n; ++i) sum += std::exp(p[i * stride] - max);
      const float log_sum = static_cast<float>(std::log(sum));
      for (int64_t i = 0; i < n; ++i) p[i * stride] = (p[i * stride] - max) - log_sum;
      return;
    }
    for (int64_t i = 0; i < n; ++i) {
      const float e = std::exp(p[i * stride] - max);
      p[i * stride] = e;
      sum += e;
    }
    const float inverse = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) p[i * stride] *= inverse;
  }));
  return out;
}

}  // namespace

absl::StatusOr<Tensor> Softmax(const Tensor& x, int64_t dim) { return SoftmaxImpl(x, dim, false); }

absl::StatusOr<Tensor> LogSoftmax(const Tensor& x, int64_t dim) {
  return SoftmaxImpl(x, dim, true);
}

absl::StatusOr<Tensor> MatMul(const Tensor& a, const Tensor& b) {
  if (a.dim() == 0 || b.dim() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "matmul: both operands need at least 1 dim; got ", a.ShapeString(), " and ",
        b.ShapeString()));
  }
  // Promote 1-d operands: a vector on the left is a row, on the right a column.
  std::vector<int64_t> sa(a.shape().begin(), a.shape().end());
  std::vector<int64_t> sb(b.shape().begin(), b.shape().end());
  if (a.dim() == 1) sa.insert(sa.begin(), 1);
  if (b.dim() == 1) sb.push_back(1);
  const int64_t M = sa[sa.size() - 2], K = sa.back();
  const int64_t K2 = sb[sb.size() - 2], N = sb.back();
  if (K != K2) {
    return absl::InvalidArgumentError(absl::StrCat("matmul: shapes ", a.ShapeString(), " and ",
                                                   b.ShapeString(), " cannot be multiplied (",
                                                   K, " vs ", K2, ")"));
  }
  const std::vector<int64_t> batch_a(sa.begin(), sa.end() - 2), batch_b(sb.begin(), sb.end() - 2);
  ASSIGN_OR_RETURN(std::vector<int64_t> batch, BroadcastShapes(batch_a, batch_b));
  std::vector<int64_t> out_shape = batch;
  if (a.dim() > 1) out_shape.push_back(M);
  if (b.dim() > 1) out_shape.push_back(N);
  ASSIGN_OR_RETURN(Tensor out, NewFloatTensor(out_shape));
  int64_t batches = 1;
  for (int64_t d : batch) batches *= d;
  const std::vector<int64_t> stride_a = BroadcastStrides(batch_a, batch.size());
  const std::vector<int64_t> stride_b = BroadcastStrides(batch_b, batch.size());
  if (out.numel() == 0) return out;
  float* po = out.mutable_data<float>();
  if (K == 0) return out;  // an empty sum: zeros
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  // Neither operand broadcast: one batched primitive over all matrices; else one call per
  // output matrix with its operands' own batch offsets.
  if (batch_a == batch && batch_b == batch) {
    RETURN_IF_ERROR(onednn::BatchedMatMul("matmul", batches, M, K, N, pa, pb, po));
    return out;
  }
  for (int64_t i = 0; i < batches; ++i) {
    int64_t ia = 0, ib = 0, rest = i;
    for (size_t d = batch.size(); d-- > 0;) {
      const int64_t at = rest % batch[d];
      rest /= batch[d];
      ia += at * stride_a[d];
      ib += at * stride_b[d];
    }
    RETURN_IF_ERROR(onednn::BatchedMatMul("matmul", 1, M, K, N, pa + ia * M * K,
                                          pb + ib * K * N, po + i * M * N));
  }
  return out;
}

absl::StatusOr<Tensor> AdaptiveMaxPool2d(const Tensor& x, int64_t out_h, int64_t out_w) {
  return AdaptivePool2d(x, out_h, out_w, "adaptive_max_pool2d",
                        [](const float* src, int64_t W, int64_t h0, int64_t h1, int64_t w0,
                           int64_t w1) {
                          // A NaN in the window is the result, as in PyTorch.
                          float best = -std::numeric_limits<float>::infinity();
                          for (int64_t ih = h0; ih < h1; ++ih) {
                            for (int64_t iw = w0; iw < w1; ++iw) {
                              const float v = src[ih * W + iw];
                              if (v > best || std::isnan(v)) best = v;
                            }
                          }
                          return best;
                        });
}

// ---- Resampling and padding ----------------------------------------------------------

namespace {

// PyTorch's compute_scales_value: the user's scale factor wins over in / out.
float SourceScale(double user_scale, int64_t in, int64_t out) {
  return user_scale > 0.0 ? static_cast<float>(1.0 / user_scale)
                          : static_cast<float>(in) / static_cast<float>(out);
}

// nearest_idx of UpSample.h: source index of output index `o`.
int64_t NearestIndex(int64_t o, int64_t in, int64_t out, double user_scale) {
  if (out == in) return o;
  if (out == 2 * in) return o >> 1;
  const float scale = SourceScale(user_scale, in, out);
  return std::min(static_cast<int64_t>(std::floor(static_cast<float>(o) * scale)), in - 1);
}

// compute_indices_weights_linear: the two source indices and the weight of the second.
struct LinearTap {
  int64_t i0, i1;
  float lambda1;
};
std::vector<LinearTap> LinearTaps(int64_t in, int64_t out, bool align_corners, double user_scale) {
  float scale;
  if (align_corners) {
    scale = out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.0f;
  } else {
    scale = SourceScale(user_scale, in, out);
  }
  std::vector<LinearTap> taps(out);
  for (int64_t o = 0; o < out; ++o) {
    float src = align_corners ? scale * static_cast<float>(o)
                              : scale * (static_cast<float>(o) + 0.5f) - 0.5f;
    if (src < 0.0f) src = 0.0f;
    const int64_t i0 = static_cast<int64_t>(src);
    const float lambda = std::min(std::max(src - static_cast<float>(i0), 0.0f), 1.0f);
    taps[o] = {i0, i0 + (i0 < in - 1 ? 1 : 0), lambda};
  }
  return taps;
}

}  // namespace

absl::StatusOr<Tensor> Interpolate(const Tensor& x, const InterpolateParams& p) {
  if (x.dim() != 4) {
    return absl::UnimplementedError(absl::StrCat(
        "interpolate: only 4-d [N, C, H, W] inputs are supported; got ", x.ShapeString()));
  }
  if (p.out_h <= 0 || p.out_w <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("interpolate: output size ", p.out_h, "x",
                                                   p.out_w, " must be positive"));
  }
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t OH = p.out_h, OW = p.out_w;
  if (H == 0 || W == 0) {
    return absl::InvalidArgumentError(absl::StrCat("interpolate: empty input ", x.ShapeString()));
  }
  ASSIGN_OR_RETURN(Tensor out, NewFloatTensor({N, C, OH, OW}));
  const float* in = x.data<float>();
  float* po = out.mutable_data<float>();
  if (p.mode == "nearest") {
    std::vector<int64_t> rows(OH), cols(OW);
    for (int64_t o = 0; o < OH; ++o) rows[o] = NearestIndex(o, H, OH, p.scale_h);
    for (int64_t o = 0; o < OW; ++o) cols[o] = NearestIndex(o, W, OW, p.scale_w);
    for (int64_t plane = 0; plane < N * C; ++plane) {
      const float* src = in + plane * H * W;
      for (int64_t oh = 0; oh < OH; ++oh) {
        for (int64_t ow = 0; ow < OW; ++ow) *po++ = src[rows[oh] * W + cols[ow]];
      }
    }
    return out;
  }
  if (p.mode == "bilinear") {
    const std::vector<LinearTap> rows = LinearTaps(H, OH, p.align_corners, p.scale_h);
    const std::vector<LinearTap> cols = LinearTaps(W, OW, p.align_corners, p.scale_w);
    for (int64_t plane = 0; plane < N * C; ++plane) {
      const float* src = in + plane * H * W;
      for (const LinearTap& r : rows) {
        const float* r0 = src + r.i0 * W;
        const float* r1 = src + r.i1 * W;
        for (const LinearTap& c : cols) {
          const float top = (1.0f - c.lambda1) * r0[c.i0] + c.lambda1 * r0[c.i1];
          const float bottom = (1.0f - c.lambda1) * r1[c.i0] + c.lambda1 * r1[c.i1];
          *po++ = (1.0f - r.lambda1) * top + r.lambda1 * bottom;
        }
      }
    }
    return out;
  }
  return absl::UnimplementedError(absl::StrCat("interpolate: mode '", p.mode,
                                               "' is not supported; expected 'nearest' or "
                                               "'bilinear'"));
}

absl::StatusOr<Tensor> ConstantPad(const Tensor& x, absl::Span<const int64_t> pads, float value) {
  if (pads.size() % 2 != 0 || static_cast<int64_t>(pads.size() / 2) > x.dim()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pad: expected an even number of pads, at most 2 per dim of input ", x.ShapeString(),
        "; got ", ShapeStr(pads)));
  }
  const int64_t rank = x.dim();
  std::vector<int64_t> before(rank, 0), shape(x.shape().begin(), x.shape().end());
  for (size_t i = 0; i < pads.size() / 2; ++i) {
    const int64_t d = rank - 1 - static_cast<int64_t>(i);
    before[d] = pads[2 * i];
    shape[d] += pads[2 * i] + pads[2 * i + 1];
    if (shape[d] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("pad: pads ", ShapeStr(pads),
                                                     " give dim ", d, " of input ",
                                                     x.ShapeString(), " a negative size"));
    }
  }
  ASSIGN_OR_RETURN(Tensor out, NewFloatTensor(shape));
  float* po = out.mutable_data<float>();
  std::fill(po, po + out.numel(), value);
  const float* in = x.data<float>();
  std::vector<int64_t> index(rank, 0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    // Input index -> output offset, if it lands inside (negative pads crop).
    int64_t offset = 0;
    bool inside = true;
    for (int64_t d = 0; d < rank && inside; ++d) {
      const int64_t o = index[d] + before[d];
      inside = o >= 0 && o < shape[d];
      offset = offset * shape[d] + o;
    }
    if (inside) po[offset] = in[i];
    for (int64_t d = rank; d-- > 0;) {
      if (++index[d] < x.shape()[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

// ---- Shape ops ------------------------------------------------------------------------

namespace {

template <typename T>
void GatherTyped(const char* src, int64_t step, int64_t n, char* dst) {
  const T* from = reinterpret_cast<const T*>(src);
  T* to = reinterpret_cast<T*>(dst);
  for (int64_t j = 0; j < n; ++j) to[j] = from[j * step];
}

// dst[j] = src[j * step] for n elements of `elem` bytes.
void GatherRow(const char* src, int64_t step, int64_t n, size_t elem, char* dst) {
  if (step == 1) {
    std::memcpy(dst, src, n * elem);
    return;
  }
  switch (elem) {
    case 1: return GatherTyped<uint8_t>(src, step, n, dst);
    case 2: return GatherTyped<uint16_t>(src, step, n, dst);
    case 4: return GatherTyped<uint32_t>(src, step, n, dst);
    case 8: return GatherTyped<uint64_t>(src, step, n, dst);
    default:
      for (int64_t j = 0; j < n; ++j) std::memcpy(dst + j * elem, src + j * step * elem, elem);
  }
}

}  // namespace

absl::StatusOr<Tensor> Permute(const Tensor& x, absl::Span<const int64_t> dims) {
  const int64_t rank = x.dim();
  if (static_cast<int64_t>(dims.size()) != rank) {
    return absl::InvalidArgumentError(absl::StrCat("permute: dims ", ShapeStr(dims), " has ",
                                                   dims.size(), " entries; the input ",
                                                   x.ShapeString(), " has ", rank));
  }
  std::vector<int64_t> order(rank);
  std::vector<bool> seen(rank, false);
  for (int64_t i = 0; i < rank; ++i) {
    ASSIGN_OR_RETURN(order[i], NormalizeDim(dims[i], rank));
    if (seen[order[i]]) {
      return absl::InvalidArgumentError(absl::StrCat("permute: dims ", ShapeStr(dims),
                                                     " repeat dim ", order[i]));
    }
    seen[order[i]] = true;
  }
  std::vector<int64_t> in_strides(rank, 1), out_shape(rank);
  for (int64_t d = rank - 1; d > 0; --d) in_strides[d - 1] = in_strides[d] * x.shape()[d];
  for (int64_t i = 0; i < rank; ++i) out_shape[i] = x.shape()[order[i]];
  // A per-channel quantized tensor's channel axis moves with its dim.
  QuantParams qparams = x.qparams();
  if (qparams.scheme == QScheme::kPerChannelAffine) {
    qparams.axis = std::find(order.begin(), order.end(), qparams.axis) - order.begin();
  }
  ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(x.dtype(), out_shape, std::move(qparams)));
  if (out.numel() == 0) return out;
  // Row by row over the output's last dim: a run of the input when that dim keeps its
  // place (memcpy), else a strided gather typed by element size.
  const size_t elem = DTypeSize(x.dtype());
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(out.mutable_raw_data());
  const int64_t row = rank == 0 ? 1 : out_shape[rank - 1];
  const int64_t step = rank == 0 ? 1 : in_strides[order[rank - 1]];
  std::vector<int64_t> index(rank, 0);
  int64_t at = 0;  // input offset of the current output row's first element
  for (int64_t i = 0; i < out.numel(); i += row) {
    GatherRow(src + at * elem, step, row, elem, dst + i * elem);
    for (int64_t d = rank - 1; d-- > 0;) {
      at += in_strides[order[d]];
      if (++index[d] < out_shape[d]) break;
      at -= in_strides[order[d]] * out_shape[d];
      index[d] = 0;
    }
  }
  return out;
}

absl::StatusOr<Tensor> Transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  if (x.dim() == 0) return x;
  ASSIGN_OR_RETURN(const int64_t a, NormalizeDim(dim0, x.dim()));
  ASSIGN_OR_RETURN(const int64_t b, NormalizeDim(dim1, x.dim()));
  std::vector<int64_t> order(x.dim());
  for (int64_t i = 0; i < x.dim(); ++i) order[i] = i;
  std::swap(order[a], order[b]);
  return Permute(x, order);
}

absl::StatusOr<std::vector<Tensor>> SplitSizes(const Tensor& x, absl::Span<const int64_t> sizes,
                                               int64_t dim) {
  if (x.dim() == 0) return absl::InvalidArgumentError("split: a 0-d tensor cannot be split");
  ASSIGN_OR_RETURN(const int64_t d, NormalizeDim(dim, x.dim()));
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) {
      return absl::InvalidArgumentError(absl::StrCat("split: sizes ", ShapeStr(sizes),
                                                     " has a negative entry"));
    }
    total += s;
  }
  if (total != x.shape()[d]) {
    return absl::InvalidArgumentError(absl::StrCat("split: sizes ", ShapeStr(sizes), " add up to ",
                                                   total, "; dim ", d, " of input ",
                                                   x.ShapeString(), " has ", x.shape()[d]));
  }
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= x.shape()[k];
  for (int64_t k = d + 1; k < x.dim(); ++k) inner *= x.shape()[k];
  const size_t elem = DTypeSize(x.dtype());
  const char* src = static_cast<const char*>(x.raw_data());
  const size_t in_row = static_cast<size_t>(x.shape()[d] * inner) * elem;
  std::vector<Tensor> pieces;
  size_t offset = 0;  // bytes into each row of `dim`
  int64_t first = 0;  // index along `dim` of the piece's first entry
  for (int64_t s : sizes) {
    std::vector<int64_t> shape(x.shape().begin(), x.shape().end());
    shape[d] = s;
    // Split along a per-channel quantized tensor's axis: each piece keeps its channels'
    // scales and zero points.
    QuantParams qparams = x.qparams();
    if (qparams.scheme == QScheme::kPerChannelAffine && qparams.axis == d) {
      qparams = QuantParams::PerChannel(
          std::vector<double>(x.qparams().scales.begin() + first,
                              x.qparams().scales.begin() + first + s),
          std::vector<int64_t>(x.qparams().zero_points.begin() + first,
                               x.qparams().zero_points.begin() + first + s),
          d);
    }
    ASSIGN_OR_RETURN(Tensor piece, Tensor::Zeros(x.dtype(), shape, std::move(qparams)));
    char* dst = static_cast<char*>(piece.mutable_raw_data());
    const size_t row = static_cast<size_t>(s * inner) * elem;
    for (int64_t o = 0; o < outer; ++o) {
      std::copy(src + o * in_row + offset, src + o * in_row + offset + row, dst + o * row);
    }
    offset += row;
    first += s;
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

absl::StatusOr<Tensor> Stack(absl::Span<const Tensor> tensors, int64_t dim) {
  if (tensors.empty()) return absl::InvalidArgumentError("stack: expected at least one tensor");
  ASSIGN_OR_RETURN(const int64_t d, NormalizeDim(dim, tensors[0].dim() + 1));
  if (tensors[0].qparams().scheme == QScheme::kPerChannelAffine) {
    return absl::UnimplementedError("stack: per-channel quantized tensors");
  }
  std::vector<Tensor> expanded;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].shape() != tensors[0].shape()) {
      return absl::InvalidArgumentError(absl::StrCat("stack: tensor ", i, " has shape ",
                                                     tensors[i].ShapeString(), "; tensor 0 has ",
                                                     tensors[0].ShapeString()));
    }
    std::vector<int64_t> shape(tensors[i].shape().begin(), tensors[i].shape().end());
    shape.insert(shape.begin() + d, 1);
    ASSIGN_OR_RETURN(Tensor t, tensors[i].Reshaped(std::move(shape)));
    expanded.push_back(std::move(t));
  }
  return Cat(expanded, d);
}

}  // namespace fuselage
