// Dynamic quantization's lowering: PyTorch's reference pattern for a dynamically
// quantized Linear (prepare observes its input with PlaceholderObserver(is_dynamic=True),
// convert makes it quantize_per_tensor_dynamic → dequantize, quantize/convert.h)
//
//   x ─► torch.quantize_per_tensor_dynamic(·, quint8, reduce_range) ─► dequantize ─►
//        nnqr.Linear ─► users (float)
//      ⇒
//   x ─► nnqd.Linear ─► users (float)
//
// nnqd.Linear is torch.ao.nn.quantized.dynamic.Linear: its weight quantized by the
// reference module's weight parameters (per tensor, or per channel along axis 0) and a
// float bias; its kernel quantizes the input at run time (runtime/quantized/
// dynamic_linear.h). The quantize and dequantize nodes go when nothing else reads them.
// A fused nni.LinearReLU whose child "0" is the reference Linear becomes
// nniqd.LinearReLU (int8 only, as in PyTorch).
// The same pattern around an nnqr.LSTM / nnqr.GRU (which may take its initial state as
// a second arg) gives nnqd.LSTM / nnqd.GRU: every weight W quantized by the reference's
// W_scale / W_zero_point / W_axis / W_qscheme / W_dtype, the float biases, the module's
// attributes and dtype qint8 (float16: the weights rounded to float16, kept float32).
// float16 (quantize_per_tensor_dynamic(·, float16, ·) and a reference module of
// weight_dtype float16): nnqd.Linear(dtype=torch.float16), its weight rounded to float16
// and kept in float32, which its kernel multiplies in float32.
#ifndef FUSELAGE_LOWERING_DYNAMIC_LOWERING_H_
#define FUSELAGE_LOWERING_DYNAMIC_LOWERING_H_

#include "absl/status/statusor.h"
#include "graph/graph_module.h"

namespace fuselage {

inline constexpr char kDynamicLinearRuleName[] = "dynamic-linear";
// A dynamically quantized F.linear, lowered by LowerToNative (lower_to_native.cc) to
// torch.ops.quantized.linear_dynamic[_relu].
inline constexpr char kDynamicFunctionalLinearRuleName[] = "dynamic-functional-linear";

// Lowers every match in `gm` (see the file comment); returns how many. Every native
// module is built before the graph is touched: an error (a reference module whose weight
// parameters do not fit) names the node and leaves `gm` as it was.
absl::StatusOr<int> LowerDynamicLinear(GraphModule& gm);

// Weight-only quantization's lowering (float_qparams_weight_only_qconfig): every call of
// an nnqr.Embedding / nnqr.EmbeddingBag (its weight quantized per row to quint8 with float
// zero points, torch.per_channel_affine_float_qparams) becomes a call of nnq.Embedding /
// nnq.EmbeddingBag, PyTorch's torch.ao.nn.quantized modules: its input is the indices
// (and offsets) and its output is float, so no quantize or dequantize node is involved.
// Each native module holds `weight` (uint8 [rows, dim], the quantized values, as PyTorch's
// quantize_per_channel computes them), `weight_scale` and `weight_zero_point` (float32
// [rows]). Modules are built before any is replaced; an error names the node.
inline constexpr char kWeightOnlyEmbeddingRuleName[] = "weight-only-embedding";
absl::StatusOr<int> LowerWeightOnlyEmbeddings(GraphModule& gm);

}  // namespace fuselage

#endif  // FUSELAGE_LOWERING_DYNAMIC_LOWERING_H_
