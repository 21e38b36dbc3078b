// The lowering rule for nn.PReLU: the reference pattern
//
//   x = x_q.dequantize();  y = prelu(x)  (nn.PReLU);  y_q = quantize_per_tensor(y, s, z, dt)
//
// becomes y_q = prelu(x_q) with `prelu` an nnq.PReLU, as PyTorch 1.13's
// _lower_to_native_backend.py does (STATIC_LOWER_MODULE_MAP: nn.PReLU -> nnq.PReLU,
// built by nnq.PReLU.from_reference(mod, s, z)).
//
// The weight is quantized as PyTorch 2's from_reference does it with the default
// qconfig mapping's PReLU entry (default_quint8_weight_qconfig): a MinMaxObserver
// (quint8, per-tensor affine) run on the weight, and its qparams. (PyTorch 1.13 never ran
// that observer and quantized with scale 1.0, zero point 0: every slope rounded to an
// integer, the negative ones dropped. fuselage followed it until PyTorch 2 became the
// reference.) A qconfig mapping that gives PReLU another weight observer is not read
// here: the reference module does not carry it.
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

// nnq.PReLU from an nn.PReLU: tensor `weight` quantized per tensor (quint8, the qparams
// its MinMaxObserver gives, see above), attributes num_parameters (the weight's size), scale and zero_point (`output`).
// InvalidArgument naming the module and field if the weight is missing, not float32 or
// empty.
absl::StatusOr<std::unique_ptr<Module>> BuildQuantizedPRelu(const Module& reference,
                                                            const OutputQParams& output);

// Rule "prelu": call_module nn.PReLU with dequantized arg 0 -> nnq.PReLU.
LoweringRule PReluLoweringRule();

}  // namespace fuselage

#endif  // FUSELAGE_LOWERING_PRELU_LOWERING_H_
