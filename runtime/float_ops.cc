#include "runtime/float_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/status_macros.h"

namespace fuselage {
namespace {

std::string ShapeStr(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Applies `fn` to every element of float tensor `x` into a new tensor of its shape.
template <typename Fn>
Tensor MapFloats(const Tensor& x, Fn fn) {
  Tensor out = x;  // same shape and dtype; the write below detaches the copy
  float* dst = out.mutable_data<float>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) dst[i] = fn(dst[i]);
  return out;
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
  ASSIGN_OR_RETURN(Tensor out, NewFloatTensor(shape));
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.mutable_data<float>();
  const int64_t n = out.numel();
  if (a.shape() == b.shape()) {
    for (int64_t i = 0; i < n; ++i) po[i] = fn(pa[i], pb[i]);
    return out;
  }
  if (b.numel() == 1 && a.numel() == n) {
    for (int64_t i = 0; i < n; ++i) po[i] = fn(pa[i], pb[0]);
    return out;
  }
  if (a.numel() == 1 && b.numel() == n) {
    for (int64_t i = 0; i < n; ++i) po[i] = fn(pa[0], pb[i]);
    return out;
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
  Tensor out = x;
  float* data = out.mutable_data<float>();
  int64_t inner = 1;
  for (int64_t k = 2; k < x.dim(); ++k) inner *= x.shape()[k];
  for (int64_t n = 0; n < x.shape()[0]; ++n) {
    for (int64_t c = 0; c < channels; ++c) {
      float* p = data + (n * channels + c) * inner;
      for (int64_t i = 0; i < inner; ++i) p[i] = p[i] * scale[c] + shift[c];
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
  ASSIGN_OR_RETURN(Tensor out, NewFloatTensor(ImageShape(x, N, C, OH, OW)));
  const float* in = x.data<float>();
  float* po = out.mutable_data<float>();
  for (int64_t plane = 0; plane < N * C; ++plane) {
    const float* src = in + plane * H * W;
    for (int64_t oh = 0; oh < OH; ++oh) {
      for (int64_t ow = 0; ow < OW; ++ow) {
        float best = -std::numeric_limits<float>::infinity();
        for (int64_t kh = 0; kh < p.kernel_size[0]; ++kh) {
          const int64_t ih = oh * p.stride[0] - p.padding[0] + kh * p.dilation[0];
          if (ih < 0 || ih >= H) continue;
          for (int64_t kw = 0; kw < p.kernel_size[1]; ++kw) {
            const int64_t iw = ow * p.stride[1] - p.padding[1] + kw * p.dilation[1];
            if (iw < 0 || iw >= W) continue;
            const float v = src[ih * W + iw];
            if (v > best || std::isnan(v)) best = v;
          }
        }
        *po++ = best;
      }
    }
  }
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

absl::StatusOr<Tensor> AdaptiveAvgPool2d(const Tensor& x, int64_t out_h, int64_t out_w) {
  int64_t d[4];
  RETURN_IF_ERROR(Image4d(x, d, "adaptive_avg_pool2d"));
  const int64_t N = d[0], C = d[1], H = d[2], W = d[3];
  const int64_t OH = out_h < 0 ? H : out_h;
  const int64_t OW = out_w < 0 ? W : out_w;
  if (OH == 0 || OW == 0 || H == 0 || W == 0) {
    return absl::InvalidArgumentError(absl::StrCat("adaptive_avg_pool2d: input ", x.ShapeString(),
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
        double sum = 0.0;
        for (int64_t ih = h0; ih < h1; ++ih) {
          for (int64_t iw = w0; iw < w1; ++iw) sum += src[ih * W + iw];
        }
        *po++ = static_cast<float>(sum / static_cast<double>((h1 - h0) * (w1 - w0)));
      }
    }
  }
  return out;
}

absl::StatusOr<Tensor> Mean(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  const int64_t rank = x.dim();
  std::vector<bool> reduced(rank, dims.empty());
  for (int64_t dim : dims) {
    ASSIGN_OR_RETURN(int64_t d, NormalizeDim(dim, rank));
    if (rank == 0) continue;
    if (reduced[d]) {
      return absl::InvalidArgumentError(absl::StrCat("mean: dim ", dim, " appears twice"));
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
  std::vector<double> sums(out.numel(), 0.0);
  const std::vector<int64_t> strides = BroadcastStrides(kept_shape, rank);
  std::vector<int64_t> index(rank, 0);
  int64_t at = 0;
  const float* in = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    sums[at] += in[i];
    for (int64_t d = rank; d-- > 0;) {
      ++index[d];
      at += strides[d];
      if (index[d] < x.shape()[d]) break;
      at -= strides[d] * x.shape()[d];
      index[d] = 0;
    }
  }
  float* po = out.mutable_data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) {
    po[i] = count == 0 ? std::numeric_limits<float>::quiet_NaN()
                       : static_cast<float>(sums[i] / static_cast<double>(count));
  }
  return out;
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

}  // namespace fuselage
