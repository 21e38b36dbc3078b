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
