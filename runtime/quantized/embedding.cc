#include "runtime/quantized/embedding.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/kernel_args.h"
#include "runtime/value.h"

namespace fuselage {
namespace quantized {
namespace {

absl::Status CheckWeight(const RowwiseQuantizedWeight& w, absl::string_view op) {
  if (w.values == nullptr || w.values->dtype() != DType::kUInt8 || w.values->dim() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": weight must be a uint8 tensor [num_embeddings, dim]"));
  }
  const int64_t rows = w.values->shape()[0];
  for (const Tensor* t : {w.scales, w.zero_points}) {
    if (t == nullptr || t->dtype() != DType::kFloat32 || t->numel() != rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": weight_scale and weight_zero_point must be float32 with ", rows,
          " entries (one per row)"));
    }
  }
  return absl::OkStatus();
}

// The indices as int64, each checked to name a row.
absl::StatusOr<std::vector<int64_t>> Indices(const Tensor& indices, int64_t rows,
                                             absl::string_view op, absl::string_view what) {
  std::vector<int64_t> out(static_cast<size_t>(indices.numel()));
  if (indices.dtype() == DType::kInt64) {
    std::copy(indices.data<int64_t>(), indices.data<int64_t>() + indices.numel(), out.begin());
  } else if (indices.dtype() == DType::kInt32) {
    std::copy(indices.data<int32_t>(), indices.data<int32_t>() + indices.numel(), out.begin());
  } else {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " has dtype ",
                                                   DTypeName(indices.dtype()),
                                                   "; expected torch.int64 or torch.int32"));
  }
  if (rows >= 0) {
    for (int64_t i : out) {
      if (i < 0 || i >= rows) {
        return absl::InvalidArgumentError(absl::StrCat(op, ": index ", i, " is out of range [0, ",
                                                       rows, ")"));
      }
    }
  }
  return out;
}

// The scale and bias PyTorch's prepack stores with each row.
void RowScaleBias(const RowwiseQuantizedWeight& w, int64_t row, float* scale, float* bias) {
  *scale = w.scales->data<float>()[row];
  *bias = w.zero_points->data<float>()[row] * *scale * -1.0f;
}

}  // namespace

absl::StatusOr<Tensor> EmbeddingByte(const RowwiseQuantizedWeight& weight,
                                     const Tensor& indices) {
  constexpr absl::string_view op = "quantized embedding_byte";
  RETURN_IF_ERROR(CheckWeight(weight, op));
  const int64_t rows = weight.values->shape()[0], dim = weight.values->shape()[1];
  ASSIGN_OR_RETURN(std::vector<int64_t> idx, Indices(indices, rows, op, "indices"));
  std::vector<int64_t> shape = indices.shape();
  shape.push_back(dim);
  ASSIGN_OR_RETURN(Tensor y, Tensor::Uninitialized(DType::kFloat32, std::move(shape)));
  float* dst = y.mutable_data<float>();
  const uint8_t* q = weight.values->data<uint8_t>();
  for (size_t i = 0; i < idx.size(); ++i) {
    float scale, bias;
    RowScaleBias(weight, idx[i], &scale, &bias);
    const uint8_t* row = q + idx[i] * dim;
    for (int64_t j = 0; j < dim; ++j) dst[i * dim + j] = scale * row[j] + bias;
  }
  return y;
}

absl::StatusOr<Tensor> EmbeddingBagByte(const RowwiseQuantizedWeight& weight,
                                        const Tensor& indices, const Tensor* offsets,
                                        EmbeddingBagMode mode,
                                        const Tensor* per_sample_weights,
                                        bool include_last_offset) {
  constexpr absl::string_view op = "quantized embedding_bag_byte";
  RETURN_IF_ERROR(CheckWeight(weight, op));
  const int64_t rows = weight.values->shape()[0], dim = weight.values->shape()[1];
  ASSIGN_OR_RETURN(std::vector<int64_t> idx, Indices(indices, rows, op, "indices"));
  const int64_t n = static_cast<int64_t>(idx.size());
  // Bag b holds idx[starts[b], starts[b + 1]).
  std::vector<int64_t> starts;
  if (offsets == nullptr) {
    if (indices.dim() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": indices of shape ", indices.ShapeString(),
          " need offsets; without offsets they must be 2-D [bags, bag_size]"));
    }
    const int64_t bags = indices.shape()[0], size = indices.shape()[1];
    for (int64_t b = 0; b <= bags; ++b) starts.push_back(b * size);
  } else {
    if (indices.dim() != 1 || offsets->dim() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": with offsets, indices and offsets must be 1-D"));
    }
    ASSIGN_OR_RETURN(starts, Indices(*offsets, -1, op, "offsets"));
    if (!include_last_offset) starts.push_back(n);
    if (starts.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": include_last_offset needs at least one offset"));
    }
    for (size_t b = 0; b < starts.size(); ++b) {
      if (starts[b] < 0 || starts[b] > n || (b > 0 && starts[b] < starts[b - 1])) {
        return absl::InvalidArgumentError(absl::StrCat(
            op, ": offsets must be non-decreasing within [0, ", n, "]; offset ", b, " is ",
            starts[b]));
      }
    }
  }
  const float* sample_weights = nullptr;
  if (per_sample_weights != nullptr) {
    if (mode != EmbeddingBagMode::kSum) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": per_sample_weights are only supported in sum mode"));
    }
    if (per_sample_weights->dtype() != DType::kFloat32 || per_sample_weights->numel() != n) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": per_sample_weights must be float32 with one entry per index (", n, ")"));
    }
    sample_weights = per_sample_weights->data<float>();
  }
  const int64_t bags = static_cast<int64_t>(starts.size()) - 1;
  ASSIGN_OR_RETURN(Tensor y, Tensor::Uninitialized(DType::kFloat32, {bags, dim}));
  float* dst = y.mutable_data<float>();
  std::fill(dst, dst + bags * dim, 0.0f);
  const uint8_t* q = weight.values->data<uint8_t>();
  for (int64_t b = 0; b < bags; ++b) {
    float* out = dst + b * dim;
    for (int64_t i = starts[b]; i < starts[b + 1]; ++i) {
      float scale, bias;
      RowScaleBias(weight, idx[i], &scale, &bias);
      if (sample_weights != nullptr) {
        scale *= sample_weights[i];
        bias *= sample_weights[i];
      }
      const uint8_t* row = q + idx[i] * dim;
      for (int64_t j = 0; j < dim; ++j) out[j] += scale * row[j] + bias;
    }
    const int64_t count = starts[b + 1] - starts[b];
    if (mode == EmbeddingBagMode::kMean && count > 0) {
      for (int64_t j = 0; j < dim; ++j) out[j] /= static_cast<float>(count);
    }
  }
  return y;
}

}  // namespace quantized

namespace {

absl::StatusOr<quantized::RowwiseQuantizedWeight> ReadWeight(const Module& m) {
  quantized::RowwiseQuantizedWeight w;
  ASSIGN_OR_RETURN(w.values, m.GetTensor("weight"));
  ASSIGN_OR_RETURN(w.scales, m.GetTensor("weight_scale"));
  ASSIGN_OR_RETURN(w.zero_points, m.GetTensor("weight_zero_point"));
  return w;
}

absl::StatusOr<Value> EmbeddingModule(const KernelContext&, const Module& m,
                                      absl::Span<const Value> args, const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  ASSIGN_OR_RETURN(const Tensor* indices, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(quantized::RowwiseQuantizedWeight w, ReadWeight(m));
  ASSIGN_OR_RETURN(Tensor y, quantized::EmbeddingByte(w, *indices));
  return Value(std::move(y));
}

absl::StatusOr<Value> EmbeddingBagModule(const KernelContext&, const Module& m,
                                         absl::Span<const Value> args,
                                         const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  ASSIGN_OR_RETURN(const Tensor* indices, r.GetTensor(0, "input"));
  const Tensor* offsets = nullptr;
  if (const Value* v = r.Find(1, "offsets"); v != nullptr && !v->is_none()) {
    ASSIGN_OR_RETURN(offsets, r.GetTensor(1, "offsets"));
  }
  const Tensor* per_sample_weights = nullptr;
  if (const Value* v = r.Find(2, "per_sample_weights"); v != nullptr && !v->is_none()) {
    ASSIGN_OR_RETURN(per_sample_weights, r.GetFloatTensor(2, "per_sample_weights"));
  }
  bool include_last_offset = false;
  if (m.FindAttribute("include_last_offset") != nullptr) {
    ASSIGN_OR_RETURN(include_last_offset, m.GetBool("include_last_offset"));
  }
  ASSIGN_OR_RETURN(quantized::RowwiseQuantizedWeight w, ReadWeight(m));
  // nnq.EmbeddingBag.forward passes mode 0 (sum) whatever its mode attribute says.
  ASSIGN_OR_RETURN(Tensor y, quantized::EmbeddingBagByte(w, *indices, offsets,
                                                         quantized::EmbeddingBagMode::kSum,
                                                         per_sample_weights,
                                                         include_last_offset));
  return Value(std::move(y));
}

}  // namespace

absl::Status RegisterQuantizedEmbeddingKernels(KernelRegistry& registry) {
  RETURN_IF_ERROR(registry.RegisterModule("nnq.Embedding", EmbeddingModule));
  return registry.RegisterModule("nnq.EmbeddingBag", EmbeddingBagModule);
}

}  // namespace fuselage
