// Quantizing constants ahead of time: a quantize node whose input and parameters are all
// constants (a converted reference model's weight: torch.quantize_per_channel(get_attr w,
// get_attr scales, get_attr zero_points, axis, dtype)) computed once, by the runtime's own
// quantize (runtime/quantized/quantize.h, the one the interpreter runs), and replaced by a
// get_attr of the quantized tensor: what torchao's convert_pt2e does to its weights.
#ifndef FUSELAGE_QUANTIZE_QUANTIZED_CONSTANTS_H_
#define FUSELAGE_QUANTIZE_QUANTIZED_CONSTANTS_H_

#include <optional>

#include "absl/status/statusor.h"
#include "graph/graph_module.h"
#include "graph/tensor.h"

namespace fuselage {

// The tensor the quantize node `q` (torch.quantize_per_tensor(x, scale, zero_point, dtype)
// or torch.quantize_per_channel(x, scales, zero_points, axis, dtype)) makes of its input,
// if the input is a get_attr of a float32 tensor and every parameter a constant (a number,
// or a get_attr of a float32 or int64 tensor: one element for per tensor);
// nullopt if any is not. An error for parameters the quantize refuses (a zero scale).
absl::StatusOr<std::optional<Tensor>> QuantizedConstant(const GraphModule& gm, const Node* q);

// The pass "fold-constant-quantize": each quantize node with a QuantizedConstant is
// replaced by a get_attr of that tensor, installed at the root as `<node name>_weight`
// (`_1`, ... where taken); then every get_attr left without users is erased (the tensors
// stay in the module tree). Returns how many were folded.
absl::StatusOr<int> FoldConstantQuantizes(GraphModule& gm);

}  // namespace fuselage

#endif  // FUSELAGE_QUANTIZE_QUANTIZED_CONSTANTS_H_
