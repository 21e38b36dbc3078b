// Shape ops on quantized tensors.
//
//   QuantizedFlatten / QuantizedReshape: the stored integers are unchanged and the
//       output keeps the input's per-tensor qparams (torch.flatten / view / reshape on a
//       quantized tensor). Per-channel tensors are refused (Unimplemented): a reshape can
//       move their channel axis.
//   QuantizedCat: torch.cat on quantized tensors and torch.ops.quantized.cat
//       (quantized_cat_impl): every input dequantized, concatenated, and quantized again
//       with the output scale / zero point, which default to the first input's (as
//       at::cat on quantized tensors does).
#ifndef FUSELAGE_RUNTIME_QUANTIZED_SHAPE_OPS_H_
#define FUSELAGE_RUNTIME_QUANTIZED_SHAPE_OPS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "graph/tensor.h"

namespace fuselage {
namespace quantized {

// torch.flatten(x, start_dim, end_dim); negative dims count from the end.
absl::StatusOr<Tensor> QuantizedFlatten(const Tensor& qx, int64_t start_dim, int64_t end_dim);
// x.reshape(shape) / x.view(shape); at most one -1 entry, inferred.
absl::StatusOr<Tensor> QuantizedReshape(const Tensor& qx, std::vector<int64_t> shape);

struct OutputQParams {
  double scale = 1.0;
  int64_t zero_point = 0;
};
// Inputs: one or more per-tensor quantized tensors of one dtype and rank whose shapes
// agree except along `dim` (negative counts from the end). `output` absent: the first
// input's scale and zero point.
absl::StatusOr<Tensor> QuantizedCat(absl::Span<const Tensor> inputs, int64_t dim,
                                    std::optional<OutputQParams> output = std::nullopt);

}  // namespace quantized
}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_SHAPE_OPS_H_
