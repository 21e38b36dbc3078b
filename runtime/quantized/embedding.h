// Weight-only quantized embeddings: PyTorch's nnq.Embedding / nnq.EmbeddingBag
// (float_qparams_weight_only_qconfig), whose weight is quantized per row to quint8 with a
// float scale and a float zero point (torch.per_channel_affine_float_qparams). PyTorch
// packs each row with its scale and bias = -(zero_point * scale); a value reads back as
// scale * q + bias.
//
//   EmbeddingByte = torch.ops.quantized.embedding_byte(packed, indices): the rows of
//     `indices` (int64 or int32, any shape), dequantized: [*indices.shape, dim].
//   EmbeddingBagByte = torch.ops.quantized.embedding_bag_byte(packed, indices, offsets,
//     scale_grad_by_freq=False, mode, pruned_weights=False, per_sample_weights, None,
//     include_last_offset): bags of rows summed (mode 0) or averaged (mode 1); 1-D indices
//     with offsets (bag b holds indices[offsets[b] : offsets[b + 1]], the last bag running
//     to the end unless include_last_offset), or 2-D indices without offsets (one bag per
//     row); per_sample_weights (float32, one per index, sum mode only) scale each row.
//     An empty bag gives zeros. Output: [bags, dim] float32.
// nnq.EmbeddingBag's forward passes mode 0 whatever its `mode` attribute says (PyTorch
// 2.14 and 1.13 alike): the module kernel does the same, so a converted model computes
// what PyTorch's does.
// Weight: uint8 [rows, dim]; scales and zero points: float32 [rows].
#ifndef FUSELAGE_RUNTIME_QUANTIZED_EMBEDDING_H_
#define FUSELAGE_RUNTIME_QUANTIZED_EMBEDDING_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/tensor.h"
#include "runtime/kernel_registry.h"

namespace fuselage {
namespace quantized {

// The quantized weight of an embedding: values, per-row scales and zero points.
struct RowwiseQuantizedWeight {
  const Tensor* values = nullptr;       // uint8 [rows, dim]
  const Tensor* scales = nullptr;       // float32 [rows]
  const Tensor* zero_points = nullptr;  // float32 [rows]
};

absl::StatusOr<Tensor> EmbeddingByte(const RowwiseQuantizedWeight& weight,
                                     const Tensor& indices);

enum class EmbeddingBagMode : int { kSum = 0, kMean = 1 };

absl::StatusOr<Tensor> EmbeddingBagByte(const RowwiseQuantizedWeight& weight,
                                        const Tensor& indices, const Tensor* offsets,
                                        EmbeddingBagMode mode,
                                        const Tensor* per_sample_weights,
                                        bool include_last_offset);

}  // namespace quantized

// Registers the modules nnq.Embedding (indices) and nnq.EmbeddingBag (indices,
// offsets=None, per_sample_weights=None; attribute include_last_offset), whose tensors are
// weight (uint8), weight_scale and weight_zero_point (float32), as lowering
// (lowering/dynamic_lowering.h) builds them. AlreadyExists if one is registered.
absl::Status RegisterQuantizedEmbeddingKernels(KernelRegistry& registry);

}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_EMBEDDING_H_
