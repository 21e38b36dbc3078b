#include "runtime/quantized/elementwise.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "graph/parallel_for.h"
#include "graph/status_macros.h"
#include "runtime/float_ops.h"
#include "runtime/quantized/kernel_loops.h"
#include "runtime/quantized/quant_math.h"

namespace fuselage {
namespace quantized {
namespace {

// The checks shared by add and mul; on success the broadcast output shape, with its
// element count checked against Tensor::kMaxElements before anything is allocated.
absl::StatusOr<std::vector<int64_t>> CheckBinaryInputs(absl::string_view op, const Tensor& qa,
                                                       const Tensor& qb, double output_scale,
                                                       int64_t output_zero_point) {
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qa, op, "input a"));
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qb, op, "input b"));
  if (qa.dtype() != qb.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": inputs have dtypes ",
                                                   DTypeName(qa.dtype()), " and ",
                                                   DTypeName(qb.dtype()),
                                                   "; expected the same dtype"));
  }
  absl::StatusOr<std::vector<int64_t>> shape = BroadcastShapes(qa.shape(), qb.shape());
  if (!shape.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": inputs have shapes ", qa.ShapeString(), " and ", qb.ShapeString(),
                     "; expected shapes that broadcast (", shape.status().message(), ")"));
  }
  absl::StatusOr<int64_t> numel = CheckedNumel(*shape);
  if (!numel.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": inputs of shapes ", qa.ShapeString(),
                                                   " and ", qb.ShapeString(),
                                                   " broadcast to an output that is too large (",
                                                   numel.status().message(), ")"));
  }
  RETURN_IF_ERROR(ExpectValidScale(output_scale, op, "output scale"));
  RETURN_IF_ERROR(ExpectValidZeroPoint(output_zero_point, qa.dtype(), op, "output zero_point"));
  return shape;
}

// The stored values of `q` repeated out to `shape` (which q's shape broadcasts to), in
// row-major order: both operands then line up element by element, as PyTorch's
// TensorIterator lines them up with zero strides.
std::vector<int32_t> BroadcastIntValues(const Tensor& q, absl::Span<const int64_t> shape) {
  std::vector<int32_t> values = IntValues(q);
  if (std::equal(shape.begin(), shape.end(), q.shape().begin(), q.shape().end())) return values;
  const size_t rank = shape.size();
  const size_t offset = rank - q.shape().size();  // q's dims align to the trailing dims
  // q's row-major strides per output dim, 0 where q broadcasts (size 1 or missing).
  std::vector<int64_t> strides(rank, 0);
  int64_t stride = 1;
  for (size_t d = rank; d-- > offset;) {
    const int64_t size = q.shape()[d - offset];
    strides[d] = size == 1 ? 0 : stride;
    stride *= size;
  }
  int64_t n = 1;
  for (int64_t size : shape) n *= size;
  std::vector<int32_t> out(static_cast<size_t>(n));
  std::vector<int64_t> index(rank, 0);
  int64_t source = 0;
  for (int64_t i = 0; i < n; ++i) {
    out[static_cast<size_t>(i)] = values[static_cast<size_t>(source)];
    // Advance the multi-index like an odometer, keeping the source offset in step.
    for (size_t d = rank; d-- > 0;) {
      ++index[d];
      source += strides[d];
      if (index[d] < shape[d]) break;
      source -= strides[d] * shape[d];
      index[d] = 0;
    }
  }
  return out;
}

bool Is8Bit(DType dtype) { return dtype == DType::kQUInt8 || dtype == DType::kQInt8; }

// The value a stored byte holds in an 8-bit quantized dtype.
int32_t StoredValue(uint8_t byte, DType dtype) {
  return dtype == DType::kQInt8 ? static_cast<int8_t>(byte) : byte;
}

// Clamps every stored value of 8-bit `qx` to [lo, hi], qparams kept.
absl::StatusOr<Tensor> Clamp8BitTensor(const Tensor& qx, int32_t lo, int32_t hi) {
  ASSIGN_OR_RETURN(Tensor out, Tensor::Uninitialized(qx.dtype(), qx.shape(), qx.qparams()));
  if (out.numel() == 0) return out;
  Clamp8Bit(static_cast<const uint8_t*>(qx.raw_data()), qx.numel(), lo, hi, qx.dtype(),
            static_cast<uint8_t*>(out.mutable_raw_data()));
  return out;
}

// The AVX2 body of qadd_kernel: fmadd(scale, float(q), scale * -zero_point).
float DequantizeFma(int32_t q, float scale, float neg_zp_premul) {
  return std::fma(scale, static_cast<float>(q), neg_zp_premul);
}

}  // namespace

absl::StatusOr<Tensor> QuantizedAdd(const Tensor& qa, const Tensor& qb, double output_scale,
                                    int64_t output_zero_point, bool relu) {
  const absl::string_view op = relu ? "quantized add_relu" : "quantized add";
  ASSIGN_OR_RETURN(const std::vector<int64_t> shape,
                   CheckBinaryInputs(op, qa, qb, output_scale, output_zero_point));
  const float a_scale = static_cast<float>(qa.qparams().scales[0]);
  const float b_scale = static_cast<float>(qb.qparams().scales[0]);
  const float a_premul = a_scale * -static_cast<float>(qa.qparams().zero_points[0]);
  const float b_premul = b_scale * -static_cast<float>(qb.qparams().zero_points[0]);
  const float inv_scale = InverseScale(output_scale);
  if (qa.shape() == qb.shape() && Is8Bit(qa.dtype())) {
    // 256 stored values per input: dequantize by table (the same fma per value).
    float table_a[256], table_b[256];
    for (int v = 0; v < 256; ++v) {
      const int32_t q = StoredValue(static_cast<uint8_t>(v), qa.dtype());
      table_a[v] = DequantizeFma(q, a_scale, a_premul);
      table_b[v] = DequantizeFma(q, b_scale, b_premul);
    }
    const Dequantize8Bit dq_a{a_scale, a_premul, table_a}, dq_b{b_scale, b_premul, table_b};
    ASSIGN_OR_RETURN(Tensor out,
                     Tensor::Uninitialized(qa.dtype(), shape,
                                           QuantParams::PerTensor(output_scale, output_zero_point)));
    if (out.numel() == 0) return out;
    const auto* a = static_cast<const uint8_t*>(qa.raw_data());
    const auto* b = static_cast<const uint8_t*>(qb.raw_data());
    auto* sum = static_cast<uint8_t*>(out.mutable_raw_data());
    ParallelForChunks(out.numel(), ParallelChunkCount(out.numel()),
                      [&](int, int64_t begin, int64_t end) {
                        AddDequantized8Bit(a + begin, b + begin, end - begin, dq_a, dq_b,
                                           relu, inv_scale, output_zero_point, qa.dtype(),
                                           sum + begin);
                      });
    return out;
  }
  const std::vector<int32_t> a = BroadcastIntValues(qa, shape);
  const std::vector<int32_t> b = BroadcastIntValues(qb, shape);
  std::vector<int32_t> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    float c = DequantizeFma(a[i], a_scale, a_premul) + DequantizeFma(b[i], b_scale, b_premul);
    if (relu) c = std::max(c, 0.0f);
    out[i] = QuantizeValue(c, inv_scale, output_zero_point, qa.dtype());
  }
  return FromIntValues(qa.dtype(), shape, QuantParams::PerTensor(output_scale, output_zero_point),
                       out);
}

absl::StatusOr<Tensor> QuantizedMul(const Tensor& qa, const Tensor& qb, double output_scale,
                                    int64_t output_zero_point, bool relu) {
  const absl::string_view op = relu ? "quantized mul_relu" : "quantized mul";
  ASSIGN_OR_RETURN(const std::vector<int64_t> shape,
                   CheckBinaryInputs(op, qa, qb, output_scale, output_zero_point));
  const float multiplier = static_cast<float>(qa.qparams().scales[0]) *
                           static_cast<float>(qb.qparams().scales[0]) *
                           InverseScale(output_scale);
  const int64_t a_zero_point = qa.qparams().zero_points[0];
  const int64_t b_zero_point = qb.qparams().zero_points[0];
  const std::vector<int32_t> a = BroadcastIntValues(qa, shape);
  const std::vector<int32_t> b = BroadcastIntValues(qb, shape);
  std::vector<int32_t> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const int64_t c = (a[i] - a_zero_point) * (b[i] - b_zero_point);
    int32_t q = RequantizeFromInt(c, multiplier, output_zero_point, qa.dtype());
    if (relu) q = std::max<int32_t>(q, static_cast<int32_t>(output_zero_point));
    out[i] = q;
  }
  return FromIntValues(qa.dtype(), shape, QuantParams::PerTensor(output_scale, output_zero_point),
                       out);
}

namespace {

// c_q = nearbyint(other / scale), which ATen converts to int32 (Scalar::to<int32_t>).
absl::StatusOr<int64_t> QuantizedScalar(double scale, double other, absl::string_view op) {
  const double q = std::nearbyint(other / scale);
  if (!std::isfinite(other) || !(std::abs(q) <= 2147483647.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": the number ", other, " is not finite or its quantized value (", other, " / ",
        scale, ") overflows int32"));
  }
  return static_cast<int64_t>(q);
}

}  // namespace

absl::StatusOr<ScalarOpQParams> AddScalarOutputQParams(double scale, int64_t zero_point,
                                                       DType dtype, double other) {
  ASSIGN_OR_RETURN(const int64_t c_q, QuantizedScalar(scale, other, "quantized add (scalar)"));
  const int64_t q_min = DTypeMin(dtype);
  const int64_t q_max = DTypeMax(dtype);
  const int64_t shifted = zero_point - c_q;
  // _add_scalar_out's three cases, its arithmetic in its order.
  if (q_min > shifted) {
    return ScalarOpQParams{(static_cast<double>(q_max) - shifted) /
                               (static_cast<double>(q_max) - q_min) * scale,
                           q_min};
  }
  if (q_max < shifted) {
    return ScalarOpQParams{(static_cast<double>(shifted) - q_min) /
                               (static_cast<double>(q_max) - q_min) * scale,
                           q_max};
  }
  return ScalarOpQParams{scale, shifted};
}

absl::StatusOr<ScalarOpQParams> MulScalarOutputQParams(double scale, int64_t zero_point,
                                                       DType dtype, double other) {
  if (!std::isfinite(other)) {
    return absl::InvalidArgumentError(
        absl::StrCat("quantized mul (scalar): the number ", other, " is not finite"));
  }
  if (other > 0.0) return ScalarOpQParams{other * scale, zero_point};
  if (other == 0.0) return ScalarOpQParams{1.0, 0};
  return ScalarOpQParams{std::abs(other) * scale,
                         DTypeMax(dtype) - (zero_point - DTypeMin(dtype))};
}

absl::StatusOr<Tensor> QuantizedAddScalar(const Tensor& qx, double other, bool relu) {
  const absl::string_view op = relu ? "quantized add_relu (scalar)" : "quantized add (scalar)";
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qx, op, "input"));
  const double scale = qx.qparams().scales[0];
  const int64_t zero_point = qx.qparams().zero_points[0];
  ASSIGN_OR_RETURN(const int64_t c_q, QuantizedScalar(scale, other, op));
  ASSIGN_OR_RETURN(const ScalarOpQParams out,
                   AddScalarOutputQParams(scale, zero_point, qx.dtype(), other));
  RETURN_IF_ERROR(ExpectValidScale(out.scale, op, "output scale"));
  std::vector<int32_t> q = IntValues(qx);
  if (out.zero_point == zero_point - c_q) {
    // The number moved the zero point only: the stored values are the output's.
    if (relu) {
      for (int32_t& v : q) v = std::max<int32_t>(v, static_cast<int32_t>(out.zero_point));
    }
  } else {
    // qadd_scalar_kernel: scale and multiplier in float, as ATen computes them.
    const float multiplier = static_cast<float>(scale) * InverseScale(out.scale);
    for (int32_t& v : q) {
      int32_t r = RequantizeFromInt(static_cast<int64_t>(v) - zero_point + c_q, multiplier,
                                    out.zero_point, qx.dtype());
      if (relu) r = std::max<int32_t>(r, static_cast<int32_t>(out.zero_point));
      v = r;
    }
  }
  return FromIntValues(qx.dtype(), qx.shape(), QuantParams::PerTensor(out.scale, out.zero_point),
                       q);
}

absl::StatusOr<Tensor> QuantizedMulScalar(const Tensor& qx, double other, bool relu) {
  const absl::string_view op = relu ? "quantized mul_relu (scalar)" : "quantized mul (scalar)";
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qx, op, "input"));
  const int64_t zero_point = qx.qparams().zero_points[0];
  ASSIGN_OR_RETURN(const ScalarOpQParams out,
                   MulScalarOutputQParams(qx.qparams().scales[0], zero_point, qx.dtype(), other));
  RETURN_IF_ERROR(ExpectValidScale(out.scale, op, "output scale"));
  std::vector<int32_t> q = IntValues(qx);
  const int64_t q_min = DTypeMin(qx.dtype());
  const int64_t q_max = DTypeMax(qx.dtype());
  for (int32_t& v : q) {
    if (other > 0.0) {
      // Copied; relu at the input's zero point, which the output keeps.
      if (relu) v = std::max<int32_t>(v, static_cast<int32_t>(zero_point));
    } else if (other == 0.0) {
      v = 0;  // no relu: zero is the output's zero point
    } else {
      v = static_cast<int32_t>(q_max + q_min - v);
      if (relu) v = std::max<int32_t>(v, static_cast<int32_t>(out.zero_point));
    }
  }
  return FromIntValues(qx.dtype(), qx.shape(), QuantParams::PerTensor(out.scale, out.zero_point),
                       q);
}

absl::StatusOr<Tensor> QuantizedRelu(const Tensor& qx) {
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qx, "quantized relu", "input"));
  const int32_t zero_point = static_cast<int32_t>(qx.qparams().zero_points[0]);
  if (Is8Bit(qx.dtype())) {
    return Clamp8BitTensor(qx, zero_point, static_cast<int32_t>(DTypeMax(qx.dtype())));
  }
  std::vector<int32_t> q = IntValues(qx);
  for (int32_t& v : q) v = std::max(v, zero_point);
  return FromIntValues(qx.dtype(), qx.shape(), qx.qparams(), q);
}

absl::StatusOr<Tensor> QuantizedHardtanh(const Tensor& qx, double min_val, double max_val) {
  constexpr absl::string_view kOp = "quantized hardtanh";
  RETURN_IF_ERROR(ExpectPerTensorQuantized(qx, kOp, "input"));
  if (!(min_val <= max_val)) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": min_val ", min_val,
                                                   " and max_val ", max_val,
                                                   "; expected min_val <= max_val"));
  }
  const float inv_scale = InverseScale(qx.qparams().scales[0]);
  const int64_t zero_point = qx.qparams().zero_points[0];
  const int32_t lo = QuantizeValue(static_cast<float>(min_val), inv_scale, zero_point, qx.dtype());
  const int32_t hi = QuantizeValue(static_cast<float>(max_val), inv_scale, zero_point, qx.dtype());
  if (Is8Bit(qx.dtype())) return Clamp8BitTensor(qx, lo, hi);
  std::vector<int32_t> q = IntValues(qx);
  for (int32_t& v : q) v = std::min(std::max(v, lo), hi);
  return FromIntValues(qx.dtype(), qx.shape(), qx.qparams(), q);
}

}  // namespace quantized
}  // namespace fuselage
