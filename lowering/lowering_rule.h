// Lowering rules and their public registry: how one reference quantized pattern
//
//     dq(x_q) [, dq(y_q) ...] → reference op → quantize_per_tensor(·, scale, zp, dtype)
//
// becomes a native quantized op that reads the quantized tensors directly and produces a
// quantized tensor with (scale, zp). A rule is data — which reference op, which of its
// args must be dequantized tensors, which native op to produce — plus, for modules, a
// builder that makes the native module from the reference one. Everything built in
// (RegisterNativeLoweringRules) goes through the same public Register() a user calls for
// their own fused module, so a user's two-input module lowers with both inputs quantized
// without touching any internal table.
#ifndef FUSELAGE_LOWERING_LOWERING_RULE_H_
#define FUSELAGE_LOWERING_LOWERING_RULE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph/dtype.h"
#include "graph/module.h"
#include "graph/node.h"
#include "graph/symbol.h"

namespace fuselage {

// The quantization parameters of a quantized tensor flowing out of a node.
struct OutputQParams {
  double scale = 1.0;
  int64_t zero_point = 0;
  DType dtype = DType::kQUInt8;
  friend bool operator==(const OutputQParams& a, const OutputQParams& b) {
    return a.scale == b.scale && a.zero_point == b.zero_point && a.dtype == b.dtype;
  }
};

// Makes the native module from the reference module (for a fused module: the fused
// module, whose child "0" is the reference weighted module) and the output's quantization
// parameters. Must not modify anything; an error leaves the pattern unlowered and is
// reported with the node.
using NativeModuleBuilder = std::function<absl::StatusOr<std::unique_ptr<Module>>(
    const Module& reference, const OutputQParams& output)>;

// One native op of a kNativeComposition rule (a declared lowering rule of several
// native_steps, backend_config.proto NativeStep), e.g. nnq.Conv2d from child "0", then
// torch.ops.quantized.add_relu of its value and arg 1.
struct NativeCompositionStep {
  // A native module type ("nnq.Conv2d") built from child `from_child` of the reference
  // module, or (is_function) a quantized function ("torch.ops.quantized.add_relu") called
  // with its inputs and then its output's scale and zero point.
  std::string native_target;
  bool is_function = false;
  int from_child = -1;
  // A module step: the type child `from_child` must have ("nnqr.Conv2d"); empty: no check.
  std::string child_type;
  // What each input reads: arg `index` of the reference node (one of dequantized_args,
  // read quantized), or (from_step) the value of earlier step `index`.
  struct Input {
    bool from_step = false;
    int index = 0;
  };
  std::vector<Input> inputs;
  // Every step but the last, one of the two: the reference module's observed step whose
  // quantization parameters (recorded by convert: ObservedStepScaleAttribute) this
  // step's quantized value takes, or the dequantized arg whose parameters it borrows.
  // Both -1 on the last step, whose value has the quantize's.
  int qparams_of_step = -1;
  int qparams_of_arg = -1;
};

struct LoweringRule {
  enum class Action : uint8_t {
    // call_module of a reference module → call_module of a native module built by
    // `build_module` (default: BuildNativeWeightedModule with `native_target`).
    kNativeModule,
    // call_function / call_method → call_function `native_target` (or
    // `native_relu_target` when a following relu is absorbed), with the quantized inputs
    // and the output's scale and zero point.
    kNativeFunction,
    // An op that runs on quantized tensors as it is (pools, flatten, reshape, cat, relu):
    // the same node, fed the quantized inputs; the quantize after it goes and the output
    // carries its (first) input's parameters, as in PyTorch 1.13.
    kPassThrough,
    // call_module of a reference (declared) fused module → the chain of native ops in
    // `composition`, the last one producing the quantize's parameters.
    kNativeComposition,
  };
  // Where a kNativeFunction puts the output scale and zero point.
  enum class OutputQParamsStyle : uint8_t {
    kAppendArgs,  // (..., scale, zero_point): torch.ops.quantized.add(qa, qb, scale, zp)
    kKwargs,      // output_scale=, output_zero_point=
  };

  // Stable kebab-case name, used in reports ("conv-add-relu2d").
  std::string name;
  Action action = Action::kNativeModule;

  // The reference op: `reference_op` is call_module (match on the module's type),
  // call_function (on the target) or call_method (on the method name).
  OpKind reference_op = OpKind::kCallModule;
  std::string reference_target;  // "nni.ConvAddReLU2d", "operator.add", "flatten"
  // For a fused reference module: the type child "0" must have ("nnqr.Conv2d"); empty
  // means no check.
  std::string inner_type;

  // The positional args that must be dequantized tensors (`x.dequantize()` nodes); they
  // are replaced by the quantized tensors. {0}: one input; {0, 1}: two inputs.
  std::vector<int> dequantized_args = {0};
  // n inputs: arg `dequantized_args[0]` is a list (torch.cat) whose every item must be
  // a dequantized tensor.
  bool list_of_dequantized = false;
  // kNativeFunction: the dequantized arg holding a weight (1 for F.conv2d / F.linear), or
  // -1. The native kernels pack a weight per tensor or per output channel (axis 0) only;
  // one quantized along another axis keeps the op in reference form.
  int weight_arg = -1;
  // kPassThrough list rules only: the op's quantized kernel requantizes every item into
  // the first item's parameters (ATen's quantized cat does), so items with other
  // parameters lower too; otherwise every item must carry the first item's parameters.
  bool list_items_requantized_to_first = false;
  // kPassThrough only: the quantize after the op goes even when it has other parameters
  // than the op's (first) input, whose parameters the output then keeps, as PyTorch
  // 1.13's special_pattern_replacement does for the ops it lists (pools, interpolate,
  // torch.flatten, cat, ...). False: such a quantize is a real requantization and the
  // pattern stays (x.flatten(), torch.reshape, torch.relu and nn.Flatten, which PyTorch
  // does not lower, then stay float as there).
  bool requantizing_quantize_dropped = false;

  // The native op: a module type ("nniq.ConvAddReLU2d") or a function target
  // ("torch.ops.quantized.add"). Unused by kPassThrough.
  std::string native_target;
  // The native op when a relu (torch.relu, F.relu, .relu(), nn.ReLU) between the op and
  // the quantize is absorbed: a function target, or for kNativeModule a module type built
  // like `native_target` (nnqr.Linear -> relu -> quantize: nniq.LinearReLU, where prepare
  // observed an unfused linear-relu pair as one op). Empty: this rule absorbs no relu.
  std::string native_relu_target;
  // kNativeFunction only: the native targets when the op's value is read only by an add
  // (operator.add / torch.add) whose other input is a dequantized tensor, the accumulator,
  // which the native op then reads quantized as its arg 1 (PyTorch's conv2d_add(qx,
  // qaccum, ...)); `native_add_relu_target` when a relu follows the add. The native node
  // takes the add's place in the graph, where both inputs exist. Empty: no add absorbed.
  std::string native_add_target;
  std::string native_add_relu_target;
  OutputQParamsStyle output_qparams_style = OutputQParamsStyle::kAppendArgs;
  // kNativeFunction only: the arg that must be a number (int or float), not a tensor, or
  // -1: `x + 3` / `3 + x`, lowered to torch.ops.quantized.add(qx, 3) / add(3, qx) with
  // the args in their order, as PyTorch's _lower_quantized_binary_op does.
  int scalar_arg = -1;
  // kNativeFunction with a scalar_arg: the output parameters the native function makes
  // itself from its (one) quantized input's and the number (ATen's add_scalar /
  // mul_scalar), which the pass needs to know what the lowered node carries. Such a
  // function is called without an output scale / zero point, and the quantize after the
  // op goes whatever its parameters, as PyTorch drops it. An error keeps the pattern.
  std::function<absl::StatusOr<OutputQParams>(const OutputQParams& input, double number)>
      own_output_qparams;
  // kNativeFunction only: keyword args of the reference op the native function does not
  // take (PyTorch's QOP_TO_ARG_NAMES_TO_SKIP: `inplace` of F.hardswish / F.elu / F.dropout).
  std::vector<std::string> kwargs_to_drop;
  // kNativeModule only; empty means BuildNativeWeightedModule(native_target, inner_type).
  NativeModuleBuilder build_module;
  // kNativeModule with a native_relu_target: BuildNativeWeightedModule with that type, set
  // by LoweringRuleRegistry::Register (a rule with its own build_module absorbs no relu).
  NativeModuleBuilder build_relu_module;
  // kPassThrough only: the op fixes its own output parameters (sigmoid: scale 1/256, zero
  // point 0, quint8), so the quantize it drops differs from the input's; it is dropped
  // only if it holds exactly these (prepare's FixedQParamsObserver gives it them; an
  // observer shared with a cat's other inputs would not).
  std::optional<OutputQParams> fixed_output_qparams;
  // kNativeModule only: the native module passes its input's parameters through and the
  // quantize after it is dropped whatever its parameters (nnq.Dropout, as PyTorch 1.13
  // lowers nn.Dropout: the module is the identity in eval mode).
  bool output_keeps_input_qparams = false;
  // kNativeComposition only: the native ops, in order; the last one's value is the output.
  std::vector<NativeCompositionStep> composition;
};

// The native form of a weightless reference module that PyTorch 1.13's
// SPECIAL_PATTERN_LOWER_MODULE_MAP lowers with `from_reference(mod, scale, zero_point)`
// (nn.BatchNorm2d -> nnq.BatchNorm2d, nn.Hardswish -> nnq.Hardswish, nn.ELU, nn.LeakyReLU,
// nn.LayerNorm, nn.InstanceNorm*d, nn.Softmax; nni.BNReLU2d -> nniq.BNReLU2d): a module of
// type `native_type` with the float module's tensors and attributes (for a fused module,
// its child "0"'s: nniq.BNReLU2d holds the batch norm's) plus attributes `scale` and
// `zero_point`, the output's. No children.
absl::StatusOr<std::unique_ptr<Module>> BuildNativeModuleWithOutputQParams(
    absl::string_view native_type, const Module& reference, const OutputQParams& output);

// Quantizes a reference weighted module (nnqr.Conv*, nnqr.Linear, or a fused module
// whose child "0" is one) into a native one of type `native_type`, as PyTorch's
// `from_reference`: the float weight quantized with the reference module's weight_scale /
// weight_zero_point / weight_axis / weight_qscheme / weight_dtype (per-tensor or
// per-channel, round half to even, clamped to the dtype); the bias copied as float32; the
// conv / linear attributes copied; `scale` and `zero_point` set to the output's.
// InvalidArgument naming the module type and field if anything is missing or malformed.
absl::StatusOr<std::unique_ptr<Module>> BuildNativeWeightedModule(
    absl::string_view native_type, const Module& reference, const OutputQParams& output);

class LoweringRuleRegistry {
 public:
  LoweringRuleRegistry() = default;
  LoweringRuleRegistry(const LoweringRuleRegistry&) = delete;
  LoweringRuleRegistry& operator=(const LoweringRuleRegistry&) = delete;

  // Adds a rule. InvalidArgument (naming the rule and field) if it is inconsistent:
  // empty name or reference target, no dequantized args, a negative index, a list rule
  // with more than one index, a kNativeModule rule on a non-module op, a missing native
  // target. AlreadyExists if the name is taken. Rules for the same reference op are
  // tried in registration order; the first that applies wins.
  absl::Status Register(LoweringRule rule);

  // The rules for a reference op (kind + target or module type), in registration order.
  // The span is valid until the next Register.
  absl::Span<const LoweringRule* const> RulesFor(OpKind op, Symbol target_or_type) const;
  const LoweringRule* FindByName(absl::string_view name) const;
  size_t size() const { return rules_.size(); }

 private:
  std::vector<std::unique_ptr<LoweringRule>> rules_;
  absl::flat_hash_map<std::pair<OpKind, Symbol>, std::vector<const LoweringRule*>> by_op_;
};

// Registers fuselage's native rules (PyTorch 1.13's tables, plus the two-input ones):
//  - one dequantized input: nnqr.Conv1d/2d/3d → nnq.Conv*, nnqr.Linear → nnq.Linear,
//    nni.ConvReLU1d/2d/3d (child 0 nnqr.Conv*) → nniq.ConvReLU*, nni.LinearReLU (child 0
//    nnqr.Linear) → nniq.LinearReLU;
//  - two dequantized inputs: nni.ConvAdd2d / nni.ConvAddReLU2d (child 0 nnqr.Conv2d) →
//    nniq.ConvAdd2d / nniq.ConvAddReLU2d;
//  - functionals (dequantized input and weight): F.conv1d/2d/3d →
//    torch.ops.quantized.conv{1,2,3}d[_relu], F.linear → torch.ops.quantized.linear[_relu],
//    with output_scale / output_zero_point kwargs;
//  - binary ops on two dequantized tensors: operator.add / torch.add →
//    torch.ops.quantized.add[_relu], operator.mul / torch.mul → torch.ops.quantized.mul[_relu],
//    torch.matmul → torch.ops.quantized.matmul;
//  - the same adds and muls of a dequantized tensor and a number, either side →
//    torch.ops.quantized.add[_relu] / mul[_relu](qx, number) (or (number, qx)), which make
//    their own output parameters (own_output_qparams; the quantize goes);
//  - pass-through on quantized tensors: PyTorch 1.13's copy nodes and general tensor
//    shape nodes (pools, flatten, reshape, view, relu, identity, transpose, permute,
//    squeeze, unsqueeze, mean, interpolate, the clamp-like ops nn.ReLU6, nn.Hardtanh,
//    F.relu6, F.hardtanh[_], torch.clamp and .clamp, ...), torch.cat and torch.stack (a
//    list of dequantized tensors), and the fixed-qparams ops nn.Sigmoid, nn.Hardsigmoid,
//    nn.Tanh, torch.sigmoid / tanh, F.hardsigmoid and their methods;
//  - SPECIAL_PATTERN_LOWER_MODULE_MAP: nn.BatchNorm2d/3d -> nnq.BatchNorm2d/3d,
//    nni.BNReLU2d/3d -> nniq.BNReLU2d/3d, nn.Hardswish, nn.ELU, nn.LeakyReLU,
//    nn.LayerNorm, nn.InstanceNorm1d/2d/3d, nn.Softmax -> their nnq forms
//    (BuildNativeModuleWithOutputQParams), nn.Dropout -> nnq.Dropout (input parameters
//    kept), nnqr.ConvTranspose1d/2d -> nnq.ConvTranspose1d/2d;
//  - STATIC_LOWER_MODULE_MAP's nn.PReLU -> nnq.PReLU (lowering/prelu_lowering.h);
//  - PyTorch's default functionals: F.hardswish, F.elu, F.leaky_relu, F.layer_norm,
//    F.instance_norm, F.dropout -> torch.ops.quantized.<name> with output_scale /
//    output_zero_point kwargs.
// `options` says how the pass-through rules treat a quantize that requantizes.
struct NativeLoweringOptions {
  // A pass-through op (pool, interpolate, torch.flatten, cat, ...) whose quantize has
  // other parameters than its input. True: the quantize goes and the op's output keeps
  // its input's parameters, as PyTorch 1.13's special_pattern_replacement does (the
  // report lists each one: quantizes_dropped_after_pass_through). False: the pattern
  // stays dequantize -> op -> quantize (listed as unlowered), which is what a runtime
  // whose quantized op takes an output scale of its own runs as calibrated (ONNX
  // Runtime's QLinearGlobalAveragePool); fuselage.onnx.quantize_static lowers so.
  bool drop_requantizing_quantizes = true;
};
absl::Status RegisterNativeLoweringRules(LoweringRuleRegistry& registry,
                                         const NativeLoweringOptions& options = {});

}  // namespace fuselage

#endif  // FUSELAGE_LOWERING_LOWERING_RULE_H_
