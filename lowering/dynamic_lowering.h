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
// float16 (quantize_per_tensor_dynamic(·, float16, ·) and a reference module of
// weight_dtype float16): nnqd.Linear(dtype=torch.float16), its weight rounded to float16
// and kept in float32, which its kernel multiplies in float32.
#ifndef FUSELAGE_LOWERING_DYNAMIC_LOWERING_H_
#define FUSELAGE_LOWERING_DYNAMIC_LOWERING_H_

#include "absl/status/statusor.h"
#include "graph/graph_module.h"

namespace fuselage {

inline constexpr char kDynamicLinearRuleName[] = "dynamic-linear";

// Lowers every match in `gm` (see the file comment); returns how many. Every native
// module is built before the graph is touched: an error (a reference module whose weight
// parameters do not fit) names the node and leaves `gm` as it was.
absl::StatusOr<int> LowerDynamicLinear(GraphModule& gm);

}  // namespace fuselage

#endif  // FUSELAGE_LOWERING_DYNAMIC_LOWERING_H_
