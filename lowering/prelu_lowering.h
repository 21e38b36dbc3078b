// The lowering rule for nn.PReLU: the reference pattern
//
//   x = x_q.dequantize();  y = prelu(x)  (nn.PReLU);  y_q = quantize_per_tensor(y, s, z, dt)
//
// becomes y_q = prelu(x_q) with `prelu` an nnq.PReLU, as PyTorch 1.13's
// _lower_to_native_backend.py does (STATIC_LOWER_MODULE_MAP: nn.PReLU -> nnq.PReLU,
// built by nnq.PReLU.from_reference(mod, s, z)).
//
// The weight is quantized exactly as from_reference does it: with the qparams of
// `mod.qconfig.weight()`, a weight observer made there and never run, whose
// calculate_qparams() returns scale 1.0 and zero point 0 (with a warning) for every
// PyTorch default observer; the dtype is torch.quint8 whatever the observer's. So each
// slope is rounded half to even to an integer and clamped to [0, 255]: a slope of 0.25
// becomes 0 and the negative side is dropped. That is PyTorch 1.13's numerics, kept on
// purpose so fuselage's quantized model equals PyTorch's converted one.
//
//   LoweringRuleRegistry rules;
//   RETURN_IF_ERROR(rules.Register(PReluLoweringRule()));  // RegisterNativeLoweringRules does
#ifndef FUSELAGE_LOWERING_PRELU_LOWERING_H_
#define FUSELAGE_LOWERING_PRELU_LOWERING_H_

#include <memory>

#include "absl/status/statusor.h"
#include "graph/module.h"
#include "lowering/lowering_rule.h"

namespace fuselage {

// The weight qparams nnq.PReLU.from_reference gives in PyTorch 1.13 (see above).
inline constexpr double kPReluWeightScale = 1.0;
inline constexpr int64_t kPReluWeightZeroPoint = 0;

// nnq.PReLU from an nn.PReLU: tensor `weight` quantized per tensor (quint8, the qparams
// above), attributes num_parameters (the weight's size), scale and zero_point (`output`).
// InvalidArgument naming the module and field if the weight is missing, not float32 or
// empty.
absl::StatusOr<std::unique_ptr<Module>> BuildQuantizedPRelu(const Module& reference,
                                                            const OutputQParams& output);

// Rule "prelu": call_module nn.PReLU with dequantized arg 0 -> nnq.PReLU.
LoweringRule PReluLoweringRule();

}  // namespace fuselage

#endif  // FUSELAGE_LOWERING_PRELU_LOWERING_H_
