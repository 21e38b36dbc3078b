#include "runtime/quantized/quant_math.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "graph/check.h"
#include "graph/status_macros.h"

namespace fuselage {
namespace quantized {

int32_t RequantizeFromInt(int64_t src, float multiplier, int64_t zero_point, DType dtype) {
  const float scaled = static_cast<float>(src) * multiplier;
  // lrintf(scaled) + zero_point, then clamp; adding an integer zero point after rounding
  // equals rounding after adding it, except where float can't hold the sum (saturated).
  const double rounded = static_cast<double>(std::nearbyint(scaled)) + zero_point;
  const double lo = static_cast<double>(DTypeMin(dtype));
  const double hi = static_cast<double>(DTypeMax(dtype));
  if (std::isnan(rounded)) return static_cast<int32_t>(zero_point);
  return static_cast<int32_t>(std::min(hi, std::max(lo, rounded)));
}

namespace {

template <typename T>
void Widen(const Tensor& tensor, std::vector<int32_t>& out) {
  const T* data = tensor.data<T>();
  for (int64_t i = 0; i < tensor.numel(); ++i) out[i] = static_cast<int32_t>(data[i]);
}

template <typename T>
std::string Narrow(const std::vector<int32_t>& values) {
  std::string bytes(values.size() * sizeof(T), '\0');
  T* out = reinterpret_cast<T*>(bytes.data());
  for (size_t i = 0; i < values.size(); ++i) out[i] = static_cast<T>(values[i]);
  return bytes;
}

}  // namespace

std::vector<int32_t> IntValues(const Tensor& tensor) {
  FUSELAGE_CHECK(tensor.is_quantized());
  std::vector<int32_t> out(static_cast<size_t>(tensor.numel()));
  switch (tensor.dtype()) {
    case DType::kQUInt8: Widen<uint8_t>(tensor, out); break;
    case DType::kQInt8: Widen<int8_t>(tensor, out); break;
    case DType::kQInt32: Widen<int32_t>(tensor, out); break;
    default: FUSELAGE_CHECK(false && "unsupported quantized dtype");
  }
  return out;
}

Tensor FromIntValues(DType dtype, std::vector<int64_t> shape, QuantParams qparams,
                     const std::vector<int32_t>& values) {
  std::string bytes;
  switch (dtype) {
    case DType::kQUInt8: bytes = Narrow<uint8_t>(values); break;
    case DType::kQInt8: bytes = Narrow<int8_t>(values); break;
    case DType::kQInt32: bytes = Narrow<int32_t>(values); break;
    default: FUSELAGE_CHECK(false && "unsupported quantized dtype");
  }
  auto tensor = Tensor::FromBytes(dtype, std::move(shape), std::move(bytes), std::move(qparams));
  FUSELAGE_CHECK(tensor.ok());
  return *std::move(tensor);
}

absl::Status ExpectQuantizedDType(DType dtype, absl::string_view op, absl::string_view field) {
  if (dtype == DType::kQInt8 || dtype == DType::kQUInt8 || dtype == DType::kQInt32) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", field, " has dtype ",
                                                 DTypeName(dtype),
                                                 "; expected torch.qint8, torch.quint8 "
                                                 "or torch.qint32"));
}

absl::Status ExpectValidScale(double scale, absl::string_view op, absl::string_view field) {
  if (std::isfinite(scale) && scale > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": ", field, " is ", scale, "; expected a finite scale > 0"));
}

absl::Status ExpectValidZeroPoint(int64_t zero_point, DType dtype, absl::string_view op,
                                  absl::string_view field) {
  if (zero_point >= DTypeMin(dtype) && zero_point <= DTypeMax(dtype)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": ", field, " is ", zero_point, "; expected a zero point in [", DTypeMin(dtype),
      ", ", DTypeMax(dtype), "] for ", DTypeName(dtype)));
}

absl::Status ExpectFloat32(const Tensor& tensor, absl::string_view op,
                           absl::string_view field) {
  if (tensor.dtype() == DType::kFloat32) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", field, " has dtype ",
                                                 DTypeName(tensor.dtype()),
                                                 "; expected torch.float32"));
}

absl::Status ExpectQuantized(const Tensor& tensor, absl::string_view op,
                             absl::string_view field) {
  if (!tensor.is_quantized()) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", field, " is a ", DTypeName(tensor.dtype()),
        " tensor; expected a quantized tensor (torch.quint8, torch.qint8 or torch.qint32)"));
  }
  RETURN_IF_ERROR(ExpectQuantizedDType(tensor.dtype(), op, field));
  const QuantParams& q = tensor.qparams();
  switch (q.scheme) {
    case QScheme::kPerTensorAffine:
      if (q.scales.size() != 1 || q.zero_points.size() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            op, ": ", field, " is per-tensor quantized with ", q.scales.size(),
            " scales and ", q.zero_points.size(), " zero points; expected one of each"));
      }
      break;
    case QScheme::kPerChannelAffine: {
      if (q.axis < 0 || q.axis >= tensor.dim()) {
        return absl::InvalidArgumentError(absl::StrCat(op, ": ", field, " has axis ", q.axis,
                                                       "; expected an axis in [0, ",
                                                       tensor.dim(), ")"));
      }
      const size_t channels = static_cast<size_t>(tensor.shape()[q.axis]);
      if (q.scales.size() != channels || q.zero_points.size() != channels) {
        return absl::InvalidArgumentError(absl::StrCat(
            op, ": ", field, " is per-channel quantized along axis ", q.axis, " (",
            channels, " channels) with ", q.scales.size(), " scales and ",
            q.zero_points.size(), " zero points; expected one of each per channel"));
      }
      break;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": ", field, " has no quantization scheme; expected per-tensor or per-channel"));
  }
  for (size_t i = 0; i < q.scales.size(); ++i) {
    RETURN_IF_ERROR(ExpectValidScale(q.scales[i], op, absl::StrCat(field, " scale")));
    RETURN_IF_ERROR(ExpectValidZeroPoint(q.zero_points[i], tensor.dtype(), op,
                                         absl::StrCat(field, " zero_point")));
  }
  return absl::OkStatus();
}

absl::Status ExpectPerTensorQuantized(const Tensor& tensor, absl::string_view op,
                                      absl::string_view field) {
  RETURN_IF_ERROR(ExpectQuantized(tensor, op, field));
  if (tensor.qparams().scheme != QScheme::kPerTensorAffine) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", field, " is per-channel quantized; expected per-tensor quantization"));
  }
  return absl::OkStatus();
}

absl::Status ExpectPerTensorEightBit(const Tensor& tensor, absl::string_view op,
                                     absl::string_view field) {
  RETURN_IF_ERROR(ExpectPerTensorQuantized(tensor, op, field));
  if (tensor.dtype() != DType::kQUInt8 && tensor.dtype() != DType::kQInt8) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", field, " has dtype ",
                                                   DTypeName(tensor.dtype()),
                                                   "; expected torch.quint8 or torch.qint8"));
  }
  return absl::OkStatus();
}

}  // namespace quantized
}  // namespace fuselage
