#include "runtime/quantized/shape_ops.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/status_macros.h"
#include "runtime/quantized/quant_math.h"

namespace fuselage {
namespace quantized {
namespace {

absl::Status ExpectReshapable(const Tensor& qx, absl::string_view op) {
  RETURN_IF_ERROR(ExpectQuantized(qx, op, "input"));
  if (qx.qparams().scheme != QScheme::kPerTensorAffine) {
    return absl::UnimplementedError(absl::StrCat(
        op, ": input is per-channel quantized; only per-tensor tensors can be reshaped"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tensor> QuantizedFlatten(const Tensor& qx, int64_t start_dim, int64_t end_dim) {
  constexpr absl::string_view kOp = "quantized flatten";
  RETURN_IF_ERROR(ExpectReshapable(qx, kOp));
  const int64_t rank = std::max<int64_t>(qx.dim(), 1);  // a 0-d tensor flattens to [1]
  const int64_t start = start_dim < 0 ? start_dim + rank : start_dim;
  const int64_t end = end_dim < 0 ? end_dim + rank : end_dim;
  if (start < 0 || start >= rank || end < 0 || end >= rank || start > end) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": start_dim ", start_dim, " and end_dim ", end_dim, " for input ",
        qx.ShapeString(), "; expected dims in [", -rank, ", ", rank, ") with start <= end"));
  }
  if (qx.dim() == 0) return qx.Reshaped({1});
  std::vector<int64_t> shape(qx.shape().begin(), qx.shape().begin() + start);
  int64_t merged = 1;
  for (int64_t d = start; d <= end; ++d) merged *= qx.shape()[d];
  shape.push_back(merged);
  shape.insert(shape.end(), qx.shape().begin() + end + 1, qx.shape().end());
  return qx.Reshaped(std::move(shape));
}

absl::StatusOr<Tensor> QuantizedReshape(const Tensor& qx, std::vector<int64_t> shape) {
  constexpr absl::string_view kOp = "quantized reshape";
  RETURN_IF_ERROR(ExpectReshapable(qx, kOp));
  int64_t inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1 && inferred < 0) {
      inferred = static_cast<int64_t>(i);
    } else if (shape[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(kOp, ": shape [", absl::StrJoin(shape, ", "),
                                                     "]; expected sizes >= 0 and at most one -1"));
    } else {
      known *= shape[i];
    }
  }
  if (inferred >= 0) {
    if (known == 0 || qx.numel() % known != 0) {
      return absl::InvalidArgumentError(absl::StrCat(kOp, ": cannot reshape ", qx.ShapeString(),
                                                     " to [", absl::StrJoin(shape, ", "), "]"));
    }
    shape[inferred] = qx.numel() / known;
  }
  auto reshaped = qx.Reshaped(shape);
  if (!reshaped.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": ", reshaped.status().message()));
  }
  return reshaped;
}

absl::StatusOr<Tensor> QuantizedCat(absl::Span<const Tensor> inputs, int64_t dim,
                                    std::optional<OutputQParams> output) {
  constexpr absl::string_view kOp = "quantized cat";
  if (inputs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": no inputs; expected at least one"));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    RETURN_IF_ERROR(ExpectPerTensorQuantized(inputs[i], kOp, absl::StrCat("tensors[", i, "]")));
  }
  const Tensor& first = inputs[0];
  const int64_t rank = first.dim();
  const int64_t axis = dim < 0 ? dim + rank : dim;
  if (rank == 0 || axis < 0 || axis >= rank) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": dim ", dim, " for inputs of shape ",
                                                   first.ShapeString(), "; expected [", -rank,
                                                   ", ", rank, ") on tensors of rank >= 1"));
  }
  std::vector<int64_t> out_shape = first.shape();
  out_shape[axis] = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (t.dtype() != first.dtype() || t.dim() != rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          kOp, ": tensors[", i, "] is ", DTypeName(t.dtype()), " ", t.ShapeString(),
          "; expected ", DTypeName(first.dtype()), " of rank ", rank, " like tensors[0]"));
    }
    for (int64_t d = 0; d < rank; ++d) {
      if (d != axis && t.shape()[d] != first.shape()[d]) {
        return absl::InvalidArgumentError(absl::StrCat(
            kOp, ": tensors[", i, "] has shape ", t.ShapeString(), "; expected ",
            first.ShapeString(), " except along dim ", axis));
      }
    }
    out_shape[axis] += t.shape()[axis];
  }
  const OutputQParams out_q =
      output.value_or(OutputQParams{first.qparams().scales[0], first.qparams().zero_points[0]});
  RETURN_IF_ERROR(ExpectValidScale(out_q.scale, kOp, "output scale"));
  RETURN_IF_ERROR(ExpectValidZeroPoint(out_q.zero_point, first.dtype(), kOp, "output zero_point"));

  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= out_shape[d];
  for (int64_t d = axis + 1; d < rank; ++d) inner *= out_shape[d];
  const float inv_scale = InverseScale(out_q.scale);
  std::vector<int32_t> out(static_cast<size_t>(outer * out_shape[axis] * inner));
  int64_t offset = 0;  // along `axis`
  for (const Tensor& t : inputs) {
    const std::vector<int32_t> q = IntValues(t);
    const float scale = static_cast<float>(t.qparams().scales[0]);
    const int64_t zero_point = t.qparams().zero_points[0];
    const int64_t run = t.shape()[axis] * inner;
    for (int64_t o = 0; o < outer; ++o) {
      int32_t* dst = out.data() + (o * out_shape[axis] + offset) * inner;
      for (int64_t k = 0; k < run; ++k) {
        dst[k] = QuantizeValue(DequantizeValue(q[o * run + k], scale, zero_point), inv_scale,
                               out_q.zero_point, first.dtype());
      }
    }
    offset += t.shape()[axis];
  }
  return FromIntValues(first.dtype(), std::move(out_shape),
                       QuantParams::PerTensor(out_q.scale, out_q.zero_point), out);
}

}  // namespace quantized
}  // namespace fuselage
