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
  return rule;
}

absl::Status RegisterDeclaredLoweringRules(LoweringRuleRegistry& registry) {
  for (const DeclaredLoweringRule& declared : DeclaredLoweringRules()) {
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
