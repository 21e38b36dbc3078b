#include "lowering/declared_lowering.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace fuselage {

LoweringRule LoweringRuleFromDeclaration(const DeclaredLoweringRule& declared) {
  LoweringRule rule;
  rule.name = declared.name;
  rule.action = LoweringRule::Action::kNativeModule;
  rule.reference_op = OpKind::kCallModule;
  rule.reference_target = declared.reference_module;
  rule.inner_type = declared.inner_type;
  rule.dequantized_args = declared.quantized_args;
  rule.native_target = declared.native_module;
  if (declared.composition.empty()) return rule;
  rule.action = LoweringRule::Action::kNativeComposition;
  rule.inner_type.clear();  // each module step checks the child it is built from
  for (const DeclaredLoweringRule::Step& declared_step : declared.composition) {
    NativeCompositionStep step;
    step.native_target = declared_step.native;
    step.is_function = declared_step.is_function;
    step.from_child = declared_step.from_child;
    step.child_type = declared_step.child_type;
    for (const auto& [from_step, index] : declared_step.inputs) {
      step.inputs.push_back({from_step, index});
    }
    step.qparams_of_arg = declared_step.qparams_of_arg;
    step.qparams_of_step = declared_step.qparams_of_step;
    rule.composition.push_back(std::move(step));
  }
  rule.native_target = rule.composition.back().native_target;
  return rule;
}

absl::Status RegisterDeclaredLoweringRules(LoweringRuleRegistry& registry,
                                           absl::Span<const DeclaredLoweringRule> rules) {
  for (const DeclaredLoweringRule& declared : rules) {
    const absl::Status status = registry.Register(LoweringRuleFromDeclaration(declared));
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat("lowering rule '", declared.name, "' declared in '",
                                       declared.declared_in, "': ", status.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace fuselage
