#include "runtime/quantized/pooling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/parallel_for.h"
#include "graph/status_macros.h"
#include "runtime/quantized/quant_math.h"

namespace fuselage {
namespace quantized {
namespace {

// An NCHW view: planes = N * C (or C), each in_h x in_w.
struct Planes {
  int64_t planes = 0;
  int64_t in_h = 0;
  int64_t in_w = 0;
};

absl::StatusOr<Planes> ExpectPoolInput(const Tensor& qx, absl::string_view op) {
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qx, op, "input"));
  if (qx.dim() != 3 && qx.dim() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": input has shape ", qx.ShapeString(), "; expected [N, C, H, W] or [C, H, W]"));
  }
  Planes p;
  p.in_h = qx.shape()[qx.dim() - 2];
  p.in_w = qx.shape()[qx.dim() - 1];
  p.planes = qx.numel() / std::max<int64_t>(1, p.in_h * p.in_w);
  if (p.in_h * p.in_w == 0) p.planes = 0;
  return p;
}

// PyTorch's pooling_output_shape.
int64_t PooledSize(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dilation,
                   bool ceil_mode) {
  const int64_t numerator = in + 2 * pad - dilation * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  // Floor division (numerator may be negative for an oversized kernel).
  int64_t out = (numerator >= 0 ? numerator / stride : -((-numerator + stride - 1) / stride)) + 1;
  // The last window must start inside the input or its left padding.
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

absl::Status ExpectWindow(const Pool2dParams& p, absl::string_view op) {
  for (int i = 0; i < 2; ++i) {
    // At most Tensor::kMaxElements, as tensor dimensions are: PooledSize's arithmetic
    // cannot overflow.
    const int64_t most = std::max({p.kernel_size[i], p.stride[i], p.dilation[i], p.padding[i]});
    if (p.kernel_size[i] <= 0 || p.stride[i] <= 0 || p.dilation[i] <= 0 || p.padding[i] < 0 ||
        most > Tensor::kMaxElements) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": kernel_size [", p.kernel_size[0], ", ", p.kernel_size[1], "], stride [",
          p.stride[0], ", ", p.stride[1], "], padding [", p.padding[0], ", ", p.padding[1],
          "], dilation [", p.dilation[0], ", ", p.dilation[1],
          "]; expected kernel, stride and dilation > 0 and padding >= 0, all at most ",
          Tensor::kMaxElements));
    }
    if (p.padding[i] * 2 > p.kernel_size[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": padding ", p.padding[i], " is more than half of kernel_size ",
          p.kernel_size[i], "; expected padding <= kernel_size / 2"));
    }
  }
  return absl::OkStatus();
}

std::vector<int64_t> OutputShape(const Tensor& qx, int64_t out_h, int64_t out_w) {
  std::vector<int64_t> shape = qx.shape();
  shape[shape.size() - 2] = out_h;
  shape[shape.size() - 1] = out_w;
  return shape;
}

absl::Status ExpectNonEmpty(int64_t out_h, int64_t out_w, const Tensor& qx,
                            absl::string_view op) {
  if (out_h > 0 && out_w > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": output would be ", out_h, " x ",
                                                 out_w, " for input ", qx.ShapeString(),
                                                 "; expected a non-empty output"));
}

// Max pooling of planes [first_plane, end_plane), an output row at a time: first the
// elementwise max of the window's input rows (contiguous, so it vectorizes), then each
// output's max over that row's window columns. Max is exact, so the result is the one a
// window-by-window scan gives; a window with no element inside the input keeps lowest().
template <typename T>
void MaxPoolPlaneRange(const T* x, const Planes& planes, const Pool2dParams& p, int64_t out_h,
                       int64_t out_w, int64_t first_plane, int64_t end_plane, T* out) {
  std::vector<T> row_max(planes.in_w);
  for (int64_t c = first_plane; c < end_plane; ++c) {
    const T* plane = x + c * planes.in_h * planes.in_w;
    for (int64_t oh = 0; oh < out_h; ++oh) {
      std::fill(row_max.begin(), row_max.end(), std::numeric_limits<T>::lowest());
      for (int64_t kh = 0; kh < p.kernel_size[0]; ++kh) {
        const int64_t ih = oh * p.stride[0] - p.padding[0] + kh * p.dilation[0];
        if (ih < 0 || ih >= planes.in_h) continue;
        const T* in_row = plane + ih * planes.in_w;
        for (int64_t iw = 0; iw < planes.in_w; ++iw) {
          row_max[iw] = std::max(row_max[iw], in_row[iw]);
        }
      }
      T* out_row = out + (c * out_h + oh) * out_w;
      for (int64_t ow = 0; ow < out_w; ++ow) {
        T best = std::numeric_limits<T>::lowest();
        for (int64_t kw = 0; kw < p.kernel_size[1]; ++kw) {
          const int64_t iw = ow * p.stride[1] - p.padding[1] + kw * p.dilation[1];
          if (iw < 0 || iw >= planes.in_w) continue;
          best = std::max(best, row_max[iw]);
        }
        out_row[ow] = best;
      }
    }
  }
}

// Max pooling of every plane over the stored values (the max of quantized values is the
// quantized max: one qparams for input and output), read and written in their own type.
// Planes on OpenMP's threads.
template <typename T>
void MaxPoolPlanes(const T* x, const Planes& planes, const Pool2dParams& p, int64_t out_h,
                   int64_t out_w, T* out) {
  const int chunks = ParallelChunkCount(planes.planes, planes.in_h * planes.in_w);
  ParallelForChunks(planes.planes, chunks, [&](int, int64_t first_plane, int64_t end_plane) {
    MaxPoolPlaneRange(x, planes, p, out_h, out_w, first_plane, end_plane, out);
  });
}

// Max pooling of [N, H, W, C] bytes, output rows [first_row, end_row) of the N * out_h
// rows: the elementwise max of the window's input rows (each in_w * C contiguous
// values), then each output pixel's C values the max of its window's columns there.
template <typename T>
void MaxPoolChannelsLastRows(const T* x, int64_t in_h, int64_t in_w, int64_t channels,
                             const Pool2dParams& p, int64_t out_h, int64_t out_w,
                             int64_t first_row, int64_t end_row, T* out) {
  const int64_t row_values = in_w * channels;
  std::vector<T> row_max(static_cast<size_t>(row_values));
  for (int64_t row = first_row; row < end_row; ++row) {
    const int64_t n = row / out_h, oh = row % out_h;
    std::fill(row_max.begin(), row_max.end(), std::numeric_limits<T>::lowest());
    for (int64_t kh = 0; kh < p.kernel_size[0]; ++kh) {
      const int64_t ih = oh * p.stride[0] - p.padding[0] + kh * p.dilation[0];
      if (ih < 0 || ih >= in_h) continue;
      const T* in_row = x + (n * in_h + ih) * row_values;
      for (int64_t i = 0; i < row_values; ++i) row_max[i] = std::max(row_max[i], in_row[i]);
    }
    T* out_row = out + row * out_w * channels;
    for (int64_t ow = 0; ow < out_w; ++ow) {
      T* best = out_row + ow * channels;
      std::fill(best, best + channels, std::numeric_limits<T>::lowest());
      for (int64_t kw = 0; kw < p.kernel_size[1]; ++kw) {
        const int64_t iw = ow * p.stride[1] - p.padding[1] + kw * p.dilation[1];
        if (iw < 0 || iw >= in_w) continue;
        const T* column = row_max.data() + iw * channels;
        for (int64_t c = 0; c < channels; ++c) best[c] = std::max(best[c], column[c]);
      }
    }
  }
}

// The output size of a max pool of `qx`, checked.
absl::StatusOr<std::array<int64_t, 2>> MaxPoolOutputSize(const Tensor& qx, const Planes& planes,
                                                         const Pool2dParams& p,
                                                         absl::string_view op) {
  RETURN_IF_ERROR(ExpectWindow(p, op));
  const int64_t out_h = PooledSize(planes.in_h, p.kernel_size[0], p.padding[0], p.stride[0],
                                   p.dilation[0], p.ceil_mode);
  const int64_t out_w = PooledSize(planes.in_w, p.kernel_size[1], p.padding[1], p.stride[1],
                                   p.dilation[1], p.ceil_mode);
  RETURN_IF_ERROR(ExpectNonEmpty(out_h, out_w, qx, op));
  return std::array<int64_t, 2>{out_h, out_w};
}

}  // namespace

absl::StatusOr<Tensor> QuantizedMaxPool2dChannelsLast(const Tensor& qx, const Pool2dParams& p) {
  constexpr absl::string_view kOp = "quantized max_pool2d";
  ASSIGN_OR_RETURN(const Planes planes, ExpectPoolInput(qx, kOp));
  if (qx.dim() != 4 || !(qx.dtype() == DType::kQUInt8 || qx.dtype() == DType::kQInt8)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": a channels-last input of shape ", qx.ShapeString(), " and dtype ",
        DTypeName(qx.dtype()), "; expected a 4-D quint8 / qint8 tensor"));
  }
  ASSIGN_OR_RETURN(const auto out_size, MaxPoolOutputSize(qx, planes, p, kOp));
  const int64_t out_h = out_size[0], out_w = out_size[1];
  ASSIGN_OR_RETURN(Tensor out, Tensor::Uninitialized(qx.dtype(), OutputShape(qx, out_h, out_w),
                                                     qx.qparams()));
  const int64_t batch = qx.shape()[0], channels = qx.shape()[1];
  const int64_t rows = batch * out_h;
  const int chunks = ParallelChunkCount(rows, p.kernel_size[0] * planes.in_w * channels);
  ParallelForChunks(rows, chunks, [&](int, int64_t first_row, int64_t end_row) {
    if (qx.dtype() == DType::kQUInt8) {
      MaxPoolChannelsLastRows(qx.data<uint8_t>(), planes.in_h, planes.in_w, channels, p, out_h,
                              out_w, first_row, end_row, out.mutable_data<uint8_t>());
    } else {
      MaxPoolChannelsLastRows(qx.data<int8_t>(), planes.in_h, planes.in_w, channels, p, out_h,
                              out_w, first_row, end_row, out.mutable_data<int8_t>());
    }
  });
  return out;
}

absl::StatusOr<Tensor> QuantizedMaxPool2d(const Tensor& qx, const Pool2dParams& p) {
  constexpr absl::string_view kOp = "quantized max_pool2d";
  ASSIGN_OR_RETURN(const Planes planes, ExpectPoolInput(qx, kOp));
  ASSIGN_OR_RETURN(const auto out_size, MaxPoolOutputSize(qx, planes, p, kOp));
  const int64_t out_h = out_size[0], out_w = out_size[1];
  ASSIGN_OR_RETURN(Tensor out, Tensor::Uninitialized(qx.dtype(), OutputShape(qx, out_h, out_w),
                                                     qx.qparams()));
  switch (qx.dtype()) {
    case DType::kQUInt8:
      MaxPoolPlanes(qx.data<uint8_t>(), planes, p, out_h, out_w, out.mutable_data<uint8_t>());
      break;
    case DType::kQInt8:
      MaxPoolPlanes(qx.data<int8_t>(), planes, p, out_h, out_w, out.mutable_data<int8_t>());
      break;
    default:
      MaxPoolPlanes(qx.data<int32_t>(), planes, p, out_h, out_w, out.mutable_data<int32_t>());
      break;
  }
  return out;
}

absl::StatusOr<Tensor> QuantizedAvgPool2d(const Tensor& qx, const Pool2dParams& p) {
  constexpr absl::string_view kOp = "quantized avg_pool2d";
  ASSIGN_OR_RETURN(const Planes planes, ExpectPoolInput(qx, kOp));
  RETURN_IF_ERROR(ExpectWindow(p, kOp));
  if (p.divisor_override.has_value() && *p.divisor_override == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": divisor_override is 0; expected a non-zero divisor"));
  }
  const int64_t out_h =
      PooledSize(planes.in_h, p.kernel_size[0], p.padding[0], p.stride[0], 1, p.ceil_mode);
  const int64_t out_w =
      PooledSize(planes.in_w, p.kernel_size[1], p.padding[1], p.stride[1], 1, p.ceil_mode);
  RETURN_IF_ERROR(ExpectNonEmpty(out_h, out_w, qx, kOp));
  const int64_t zero_point = qx.qparams().zero_points[0];
  const std::vector<int32_t> x = IntValues(qx);
  std::vector<int32_t> out(static_cast<size_t>(planes.planes * out_h * out_w));
  for (int64_t c = 0; c < planes.planes; ++c) {
    const int32_t* plane = x.data() + c * planes.in_h * planes.in_w;
    for (int64_t oh = 0; oh < out_h; ++oh) {
      for (int64_t ow = 0; ow < out_w; ++ow) {
        int64_t h0 = oh * p.stride[0] - p.padding[0];
        int64_t w0 = ow * p.stride[1] - p.padding[1];
        int64_t h1 = std::min(h0 + p.kernel_size[0], planes.in_h + p.padding[0]);
        int64_t w1 = std::min(w0 + p.kernel_size[1], planes.in_w + p.padding[1]);
        const int64_t pool_size = (h1 - h0) * (w1 - w0);
        h0 = std::max<int64_t>(h0, 0);
        w0 = std::max<int64_t>(w0, 0);
        h1 = std::min(h1, planes.in_h);
        w1 = std::min(w1, planes.in_w);
        const int64_t size = (h1 - h0) * (w1 - w0);
        const int64_t divide_factor = p.divisor_override.has_value() ? *p.divisor_override
                                      : p.count_include_pad         ? pool_size
                                                                    : size;
        int64_t sum = 0;
        for (int64_t ih = h0; ih < h1; ++ih) {
          for (int64_t iw = w0; iw < w1; ++iw) sum += plane[ih * planes.in_w + iw];
        }
        sum -= size * zero_point;
        if (p.channels_last) {
          // _qavg_pool_nhwc_kernel: multiplier = in_scale / out_scale / divide_factor in
          // float (the scales are equal), the zero point added after rounding.
          const float multiplier = 1.0f / static_cast<float>(divide_factor);
          out[(c * out_h + oh) * out_w + ow] = RoundAndClamp(
              std::nearbyint(static_cast<float>(sum) * multiplier) +
                  static_cast<float>(zero_point),
              DTypeMin(qx.dtype()), DTypeMax(qx.dtype()));
          continue;
        }
        // scale_factor = in_scale / out_scale = 1 (same qparams), narrowed to float.
        const float multiplier = static_cast<float>(1.0 / static_cast<double>(divide_factor));
        const float value = static_cast<float>(sum) * multiplier + static_cast<float>(zero_point);
        out[(c * out_h + oh) * out_w + ow] =
            RoundAndClamp(value, DTypeMin(qx.dtype()), DTypeMax(qx.dtype()));
      }
    }
  }
  return FromIntValues(qx.dtype(), OutputShape(qx, out_h, out_w), qx.qparams(), out);
}

absl::StatusOr<Tensor> QuantizedAdaptiveAvgPool2d(const Tensor& qx,
                                                  std::array<int64_t, 2> output_size,
                                                  bool channels_last) {
  constexpr absl::string_view kOp = "quantized adaptive_avg_pool2d";
  ASSIGN_OR_RETURN(const Planes planes, ExpectPoolInput(qx, kOp));
  const int64_t out_h = output_size[0], out_w = output_size[1];
  if (out_h <= 0 || out_w <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": output_size is [", out_h, ", ",
                                                   out_w, "]; expected sizes > 0"));
  }
  if (planes.in_h <= 0 || planes.in_w <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": input ", qx.ShapeString(), " has empty spatial dimensions; expected > 0"));
  }
  // PyTorch's start_index / end_index, computed in float.
  auto start = [](int64_t i, int64_t out, int64_t in) {
    return static_cast<int64_t>(std::floor(static_cast<float>(i * in) / out));
  };
  auto end = [](int64_t i, int64_t out, int64_t in) {
    return static_cast<int64_t>(std::ceil(static_cast<float>((i + 1) * in) / out));
  };
  const std::vector<int32_t> x = IntValues(qx);
  std::vector<int32_t> out(static_cast<size_t>(planes.planes * out_h * out_w));
  for (int64_t c = 0; c < planes.planes; ++c) {
    const int32_t* plane = x.data() + c * planes.in_h * planes.in_w;
    for (int64_t oh = 0; oh < out_h; ++oh) {
      const int64_t h0 = start(oh, out_h, planes.in_h), h1 = end(oh, out_h, planes.in_h);
      const float inv_h = static_cast<float>(1.0 / static_cast<double>(h1 - h0));
      for (int64_t ow = 0; ow < out_w; ++ow) {
        const int64_t w0 = start(ow, out_w, planes.in_w), w1 = end(ow, out_w, planes.in_w);
        const float inv_area = inv_h / static_cast<float>(w1 - w0);
        int64_t sum = 0;
        for (int64_t ih = h0; ih < h1; ++ih) {
          for (int64_t iw = w0; iw < w1; ++iw) sum += plane[ih * planes.in_w + iw];
        }
        if (channels_last) {
          // _qadaptive_avg_pool_kernel: (sum - zp * size) * (in_scale / out_scale / size)
          // in float, rounded, plus the zero point.
          const int64_t size = (h1 - h0) * (w1 - w0);
          const int64_t zp = qx.qparams().zero_points[0];
          const float multiplier = 1.0f / static_cast<float>(size);
          out[(c * out_h + oh) * out_w + ow] = RoundAndClamp(
              std::nearbyint(static_cast<float>(sum - zp * size) * multiplier) +
                  static_cast<float>(zp),
              DTypeMin(qx.dtype()), DTypeMax(qx.dtype()));
          continue;
        }
        out[(c * out_h + oh) * out_w + ow] = RoundAndClamp(
            static_cast<float>(sum) * inv_area, DTypeMin(qx.dtype()), DTypeMax(qx.dtype()));
      }
    }
  }
  return FromIntValues(qx.dtype(), OutputShape(qx, out_h, out_w), qx.qparams(), out);
}

}  // namespace quantized
}  // namespace fuselage
