// Lowering rules declared as data in a backend config (backend_configs/declared_types.h,
// a file's `lowering_rule`), turned into LoweringRules: the declared reference module,
// with the listed args dequantized, becomes its native module, built from the reference
// child "0" (BuildNativeWeightedModule) as the built-in two-input rules are, and reading
// those args quantized; a rule of several native_steps becomes a kNativeComposition
// rule, one native node per step (lower_to_native.h). A config's rules lower only with
// that config: the pipeline's LowerModel registers them after the built-in ones.
//
//   LoweringRuleRegistry rules;
//   RETURN_IF_ERROR(RegisterNativeLoweringRules(rules));
//   RETURN_IF_ERROR(RegisterDeclaredLoweringRules(rules, config.declared_lowering_rules()));
#ifndef FUSELAGE_LOWERING_DECLARED_LOWERING_H_
#define FUSELAGE_LOWERING_DECLARED_LOWERING_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "backend_configs/declared_types.h"
#include "lowering/lowering_rule.h"

namespace fuselage {

// The LoweringRule a declared rule stands for (action kNativeModule, or
// kNativeComposition for a rule of several native_steps).
LoweringRule LoweringRuleFromDeclaration(const DeclaredLoweringRule& declared);

// Registers `rules` (a config's, BackendConfig::declared_lowering_rules). AlreadyExists
// naming the rule and its config if a name is taken (by a built-in rule).
absl::Status RegisterDeclaredLoweringRules(LoweringRuleRegistry& registry,
                                           absl::Span<const DeclaredLoweringRule> rules);

}  // namespace fuselage

#endif  // FUSELAGE_LOWERING_DECLARED_LOWERING_H_
