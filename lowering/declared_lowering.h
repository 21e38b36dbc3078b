// Lowering rules declared as data in a backend config (backend_configs/declared_types.h,
// a file's `lowering_rule`), turned into LoweringRules: the declared reference module,
// with the listed args dequantized, becomes its native module, built from the reference
// child "0" (BuildNativeWeightedModule) as the built-in two-input rules are, and reading
// those args quantized; a rule of several native_steps becomes a kNativeComposition
// rule, one native node per step (lower_to_native.h). RegisterNativeLoweringRules calls
// this last, so every registry it fills lowers the types declared so far.
//
//   LoweringRuleRegistry rules;
//   RETURN_IF_ERROR(RegisterNativeLoweringRules(rules));  // includes the declared rules
#ifndef FUSELAGE_LOWERING_DECLARED_LOWERING_H_
#define FUSELAGE_LOWERING_DECLARED_LOWERING_H_

#include "absl/status/status.h"
#include "backend_configs/declared_types.h"
#include "lowering/lowering_rule.h"

namespace fuselage {

// The LoweringRule a declared rule stands for (action kNativeModule, or
// kNativeComposition for a rule of several native_steps).
LoweringRule LoweringRuleFromDeclaration(const DeclaredLoweringRule& declared);

// Registers every rule DeclaredLoweringRules() holds. AlreadyExists naming the rule and
// its config if a name is taken (by a built-in rule).
absl::Status RegisterDeclaredLoweringRules(LoweringRuleRegistry& registry);

}  // namespace fuselage

#endif  // FUSELAGE_LOWERING_DECLARED_LOWERING_H_
