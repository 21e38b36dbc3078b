#include "runtime/quantized/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/quantized/kernel_loops.h"
#include "runtime/quantized/quant_math.h"

namespace fuselage {
namespace quantized {
namespace {

// Number of elements before / inside / after dimension `axis` of `shape`.
struct AxisSplit {
  int64_t outer = 1;
  int64_t channels = 1;
  int64_t inner = 1;
};

AxisSplit SplitAt(const std::vector<int64_t>& shape, int64_t axis) {
  AxisSplit split;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < axis) split.outer *= shape[d];
    if (d == axis) split.channels = shape[d];
    if (d > axis) split.inner *= shape[d];
  }
  return split;
}

}  // namespace

absl::StatusOr<Tensor> QuantizePerTensor(const Tensor& x, double scale, int64_t zero_point,
                                         DType dtype) {
  constexpr absl::string_view kOp = "quantize_per_tensor";
  RETURN_IF_ERROR(ExpectFloat32(x, kOp, "input"));
  RETURN_IF_ERROR(ExpectQuantizedDType(dtype, kOp, "dtype"));
  RETURN_IF_ERROR(ExpectValidScale(scale, kOp, "scale"));
  RETURN_IF_ERROR(ExpectValidZeroPoint(zero_point, dtype, kOp, "zero_point"));
  const float inv_scale = InverseScale(scale);
  const float* in = x.data<float>();
  if (dtype == DType::kQUInt8 || dtype == DType::kQInt8) {
    ASSIGN_OR_RETURN(Tensor out, Tensor::Uninitialized(dtype, x.shape(),
                                                       QuantParams::PerTensor(scale, zero_point)));
    if (out.numel() == 0) return out;
    QuantizeFloatsTo8Bit(in, x.numel(), inv_scale, zero_point, dtype,
                         static_cast<uint8_t*>(out.mutable_raw_data()));
    return out;
  }
  std::vector<int32_t> q(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    q[i] = QuantizeValue(in[i], inv_scale, zero_point, dtype);
  }
  return FromIntValues(dtype, x.shape(), QuantParams::PerTensor(scale, zero_point), q);
}

absl::StatusOr<Tensor> QuantizePerChannel(const Tensor& x, const std::vector<double>& scales,
                                          const std::vector<int64_t>& zero_points,
                                          int64_t axis, DType dtype) {
  constexpr absl::string_view kOp = "quantize_per_channel";
  RETURN_IF_ERROR(ExpectFloat32(x, kOp, "input"));
  RETURN_IF_ERROR(ExpectQuantizedDType(dtype, kOp, "dtype"));
  if (axis < 0) axis += x.dim();
  if (axis < 0 || axis >= x.dim()) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": axis is out of range for input ",
                                                   x.ShapeString(), "; expected [",
                                                   -x.dim(), ", ", x.dim(), ")"));
  }
  const AxisSplit split = SplitAt(x.shape(), axis);
  if (static_cast<int64_t>(scales.size()) != split.channels ||
      static_cast<int64_t>(zero_points.size()) != split.channels) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": got ", scales.size(), " scales and ", zero_points.size(),
        " zero_points; expected ", split.channels, " of each (size of input dimension ",
        axis, ")"));
  }
  for (int64_t c = 0; c < split.channels; ++c) {
    RETURN_IF_ERROR(ExpectValidScale(scales[c], kOp, absl::StrCat("scales[", c, "]")));
    RETURN_IF_ERROR(ExpectValidZeroPoint(zero_points[c], dtype, kOp,
                                         absl::StrCat("zero_points[", c, "]")));
  }
  const float* in = x.data<float>();
  if (dtype == DType::kQUInt8 || dtype == DType::kQInt8) {
    // Row by row with the per-tensor loop (vectorized): a weight of 10^7 values (resnet50)
    // went element by element through an int32 copy.
    ASSIGN_OR_RETURN(Tensor out,
                     Tensor::Uninitialized(dtype, x.shape(),
                                           QuantParams::PerChannel(scales, zero_points, axis)));
    if (out.numel() == 0) return out;
    uint8_t* stored = static_cast<uint8_t*>(out.mutable_raw_data());
    int64_t row = 0;
    for (int64_t o = 0; o < split.outer; ++o) {
      for (int64_t c = 0; c < split.channels; ++c, row += split.inner) {
        QuantizeFloatsTo8Bit(in + row, split.inner, InverseScale(scales[c]), zero_points[c],
                             dtype, stored + row);
      }
    }
    return out;
  }
  std::vector<int32_t> q(static_cast<size_t>(x.numel()));
  int64_t i = 0;
  for (int64_t o = 0; o < split.outer; ++o) {
    for (int64_t c = 0; c < split.channels; ++c) {
      const float inv_scale = InverseScale(scales[c]);
      for (int64_t k = 0; k < split.inner; ++k, ++i) {
        q[i] = QuantizeValue(in[i], inv_scale, zero_points[c], dtype);
      }
    }
  }
  return FromIntValues(dtype, x.shape(), QuantParams::PerChannel(scales, zero_points, axis),
                       q);
}

absl::StatusOr<Tensor> Dequantize(const Tensor& x) {
  RETURN_IF_ERROR(ExpectQuantized(x, "dequantize", "input"));
  const std::vector<int32_t> q = IntValues(x);
  std::vector<float> out(q.size());
  const QuantParams& qp = x.qparams();
  if (qp.scheme == QScheme::kPerTensorAffine) {
    const float scale = static_cast<float>(qp.scales[0]);
    for (size_t i = 0; i < q.size(); ++i) out[i] = DequantizeValue(q[i], scale, qp.zero_points[0]);
  } else {
    const AxisSplit split = SplitAt(x.shape(), qp.axis);
    size_t i = 0;
    for (int64_t o = 0; o < split.outer; ++o) {
      for (int64_t c = 0; c < split.channels; ++c) {
        // The per-channel kernel subtracts in float and multiplies by the double scale.
        const float zero_point = static_cast<float>(qp.zero_points[c]);
        for (int64_t k = 0; k < split.inner; ++k, ++i) {
          out[i] = static_cast<float>(
              static_cast<double>(static_cast<float>(q[i]) - zero_point) * qp.scales[c]);
        }
      }
    }
  }
  return Tensor::FromFloats(x.shape(), out);
}

float RoundToFloat16(float value, bool saturate) {
  constexpr float kMax = 65504.0f;  // the largest finite float16
  if (std::isnan(value)) return value;
  float a = std::fabs(value);
  if (saturate) a = std::min(a, kMax);
  float rounded;
  if (a < 6.103515625e-05f) {
    // Subnormal float16: multiples of 2^-24.
    rounded = std::nearbyint(a * 16777216.0f) / 16777216.0f;
  } else if (a > kMax + 16.0f) {  // past the tie at 65520, which rounds to infinity
    rounded = std::numeric_limits<float>::infinity();
  } else {
    uint32_t bits;
    std::memcpy(&bits, &a, sizeof(bits));
    bits += 0xfffu + ((bits >> 13) & 1u);  // round the 13 dropped mantissa bits to even
    bits &= ~0x1fffu;
    std::memcpy(&rounded, &bits, sizeof(rounded));
    // 65504 < a <= 65520 rounds up to 2^16, which float16 cannot hold.
    if (rounded > kMax) rounded = saturate ? kMax : std::numeric_limits<float>::infinity();
  }
  return std::signbit(value) ? -rounded : rounded;
}

absl::StatusOr<Tensor> CastToFloat16(const Tensor& x) {
  RETURN_IF_ERROR(ExpectFloat32(x, "to(torch.float16)", "input"));
  std::vector<float> out(x.data<float>(), x.data<float>() + x.numel());
  for (float& v : out) v = RoundToFloat16(v);
  return Tensor::FromFloats(x.shape(), out);
}

}  // namespace quantized
}  // namespace fuselage
