// Float16 static quantization's lowering (float16_static_qconfig): convert makes every
// float16 "observer" a cast, x.to(torch.float16) → dequantize (quantize/convert.h), around
// ops that stay float. PyTorch 1.13's special_pattern_replacement lowers only the ops
// that run on any tensor as they are — its copy nodes and general tensor shape nodes
// (pools, flatten, reshape, relu, identity, ...) — by letting them read the float16
// tensor and dropping the cast after them:
//
//   c = x.to(torch.float16) ─► dequantize ─► op ─► to(torch.float16) ─► dequantize
//      ⇒
//   c = x.to(torch.float16) ─► op ─► dequantize
//
// Here those ops are the registry's pass-through rules that drop a requantizing quantize
// as PyTorch does (LoweringRule::requantizing_quantize_dropped), except the
// fixed-qparams ones (sigmoid, tanh, ...), which PyTorch leaves in reference form for
// float16. Everything else (binary ops, F.linear, weighted modules) stays as convert
// made it, as in PyTorch: float16 has no native kernels there.
//
// The runtime carries a float16 tensor as float32 holding float16 values
// (runtime/quantized/quantize.h CastToFloat16), so an op that computes (an average pool,
// a mean, an interpolation) runs in float32 on float16 inputs where PyTorch computes in
// float16: its outputs may differ by float16's rounding; shape ops, max pools and relus
// are exact.
#ifndef FUSELAGE_LOWERING_FLOAT16_LOWERING_H_
#define FUSELAGE_LOWERING_FLOAT16_LOWERING_H_

#include "absl/status/statusor.h"
#include "graph/graph_module.h"
#include "lowering/lowering_rule.h"

namespace fuselage {

inline constexpr char kFloat16PassThroughRuleName[] = "float16-pass-through";

struct Float16Lowering {
  int lowered = 0;  // ops made to read float16 tensors, their cast after them dropped
  int casts_kept = 0;  // the other float16 casts, left as convert made them
};

// Lowers every match in `gm` (see the file comment) with `registry`'s pass-through
// rules. Every match is found before the graph changes.
absl::StatusOr<Float16Lowering> LowerFloat16PassThrough(GraphModule& gm,
                                                        const LoweringRuleRegistry& registry);

}  // namespace fuselage

#endif  // FUSELAGE_LOWERING_FLOAT16_LOWERING_H_
