#include "backend_configs/declared_types.h"

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "graph/module.h"
#include "graph/module_schema.h"
#include "graph/status_macros.h"
#include "graph/symbol.h"

namespace fuselage {
namespace {

// The most forward() inputs a declared type may take; real fused ops take one to three.
constexpr int kMaxDeclaredInputs = 16;

// The float functions a step may call by short name, with their arity. Each maps to a
// call_function target the float kernels register (runtime/float_kernels.h).
struct CompositeOp {
  const char* name;
  const char* target;
  int arity;
};
constexpr CompositeOp kCompositeOps[] = {
    {"add", "operator.add", 2},
    {"mul", "operator.mul", 2},
    {"sub", "operator.sub", 2},
    {"relu", "torch.relu", 1},
    {"relu6", "torch.nn.functional.relu6", 1},
    {"sigmoid", "torch.sigmoid", 1},
    {"tanh", "torch.tanh", 1},
    {"hardswish", "torch.nn.functional.hardswish", 1},
    {"hardsigmoid", "torch.nn.functional.hardsigmoid", 1},
    {"silu", "torch.nn.functional.silu", 1},
    {"gelu", "torch.nn.functional.gelu", 1},
};

const CompositeOp* FindCompositeOp(absl::string_view op) {
  for (const CompositeOp& c : kCompositeOps) {
    if (op == c.name || op == c.target) return &c;
  }
  return nullptr;
}

std::string KnownOpsText() {
  std::vector<std::string> names;
  for (const CompositeOp& c : kCompositeOps) names.push_back(c.name);
  return absl::StrJoin(names, ", ");
}

absl::Status FieldError(absl::string_view field, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("field '", field, "': ", message));
}

// "Conv2d" -> "nn.Conv2d"; dotted names are kept.
std::string Qualified(const std::string& name, absl::string_view default_namespace) {
  return name.find('.') == std::string::npos ? absl::StrCat(default_namespace, ".", name) : name;
}

// The reference form convert makes of a weighted child ("nn.Conv2d" -> "nnqr.Conv2d"),
// if `modules` has one; "" otherwise.
std::string ReferenceFormOf(const std::string& type, const ModuleSchemaRegistry& modules) {
  if (type.rfind("nn.", 0) != 0) return "";
  const std::string reference = absl::StrCat("nnqr.", type.substr(3));
  return modules.Find(Symbol::Lookup(reference)) != nullptr ? reference : "";
}

// A namespaced name outside the built-in namespaces.
absl::Status CheckTypeNameFormat(const std::string& name) {
  const size_t dot = name.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == name.size()) {
    return FieldError("name", "must be \"namespace.Type\" (e.g. \"user.ConvBnAddReLU2d\")");
  }
  // A declared type must not look like one fuselage or PyTorch defines.
  if (InBuiltinNamespace(name)) {
    return FieldError("name", absl::StrCat("namespace '", name.substr(0, dot),
                                           "' is a built-in one; use your own (e.g. "
                                           "\"user.\")"));
  }
  return absl::OkStatus();
}

// Not a built-in or C++-registered type.
absl::Status CheckTypeNameClash(const std::string& name, const ModuleSchemaRegistry& modules) {
  if (modules.Find(Symbol::Lookup(name)) == nullptr) return absl::OkStatus();
  return FieldError("name", "clashes with a built-in (or C++-registered) module type");
}

absl::StatusOr<ModuleComposition::Value> ReadValueRef(const config::ValueRef& ref,
                                                      const std::string& field, int num_inputs,
                                                      int step) {
  ModuleComposition::Value v;
  switch (ref.source_case()) {
    case config::ValueRef::kArg:
      if (ref.arg() < 0 || ref.arg() >= num_inputs) {
        return FieldError(field + ".arg", absl::StrCat(ref.arg(), " is not one of the ",
                                                       num_inputs, " inputs"));
      }
      v.source = ModuleComposition::Value::Source::kArg;
      v.index = ref.arg();
      return v;
    case config::ValueRef::kStep:
      if (ref.step() < 0 || ref.step() >= step) {
        return FieldError(field + ".step",
                          absl::StrCat(ref.step(), " is not an earlier step (this is step ",
                                       step, ")"));
      }
      v.source = ModuleComposition::Value::Source::kStep;
      v.index = ref.step();
      return v;
    case config::ValueRef::SOURCE_NOT_SET:
      break;
  }
  return FieldError(field, "needs an arg or a step");
}

// The schema of a declaration, checked against `modules`.
absl::StatusOr<ModuleSchema> ReadFusedModuleType(const config::FusedModuleTypeDecl& decl,
                                                 absl::string_view source,
                                                 const ModuleSchemaRegistry& modules) {
  RETURN_IF_ERROR(CheckTypeNameFormat(decl.name()));
  ModuleSchema schema;
  schema.type = decl.name();
  schema.declared_in = std::string(source);
  if (decl.num_inputs() < 1 || decl.num_inputs() > kMaxDeclaredInputs) {
    return FieldError("num_inputs", absl::StrCat(decl.num_inputs(), "; expected 1 to ",
                                                 kMaxDeclaredInputs));
  }
  schema.min_inputs = schema.max_inputs = decl.num_inputs();
  std::vector<const ModuleSchema*> child_schemas;
  for (int c = 0; c < decl.child_size(); ++c) {
    const std::string type = Qualified(decl.child(c), "nn");
    const ModuleSchema* child = modules.Find(Symbol::Lookup(type));
    if (child == nullptr) {
      return FieldError(absl::StrCat("child[", c, "]"),
                        absl::StrCat("module type '", type, "' is not registered"));
    }
    child_schemas.push_back(child);
    std::vector<std::string> allowed = {type};
    if (std::string reference = ReferenceFormOf(type, modules); !reference.empty()) {
      allowed.push_back(std::move(reference));
    }
    schema.children.push_back(std::move(allowed));
  }
  auto composition = std::make_shared<ModuleComposition>();
  if (decl.step_size() == 0) return FieldError("step", "needs at least one step");
  std::set<int> children_run;
  for (int s = 0; s < decl.step_size(); ++s) {
    const config::CompositeStep& step = decl.step(s);
    const std::string field = absl::StrCat("step[", s, "]");
    ModuleComposition::Step out;
    int min_args = 0;
    int max_args = 0;
    switch (step.callee_case()) {
      case config::CompositeStep::kChild: {
        if (step.child() < 0 || step.child() >= decl.child_size()) {
          return FieldError(field + ".child", absl::StrCat(step.child(), " is not one of the ",
                                                           decl.child_size(), " children"));
        }
        out.child = step.child();
        children_run.insert(step.child());
        min_args = child_schemas[step.child()]->min_inputs;
        max_args = child_schemas[step.child()]->max_inputs;
        break;
      }
      case config::CompositeStep::kOp: {
        const CompositeOp* op = FindCompositeOp(step.op());
        if (op == nullptr) {
          return FieldError(field + ".op", absl::StrCat("unknown op '", step.op(),
                                                        "'; expected one of ", KnownOpsText()));
        }
        out.function = op->target;
        min_args = max_args = op->arity;
        break;
      }
      case config::CompositeStep::CALLEE_NOT_SET:
        return FieldError(field, "needs a child or an op");
    }
    const int n = step.input_size();
    if (n < min_args || (max_args != ModuleSchema::kAnyNumber && n > max_args) || n == 0) {
      return FieldError(field + ".input",
                        absl::StrCat(n, " inputs; ", out.child >= 0 ? "the child" : "the op",
                                     " takes ", min_args,
                                     max_args == min_args ? "" : " or more"));
    }
    for (int k = 0; k < n; ++k) {
      ASSIGN_OR_RETURN(ModuleComposition::Value v,
                       ReadValueRef(step.input(k), absl::StrCat(field, ".input[", k, "]"),
                                    decl.num_inputs(), s));
      out.inputs.push_back(v);
    }
    composition->steps.push_back(std::move(out));
  }
  // A child no step runs would be carried and silently ignored (the bug of issue 21:
  // a batch norm dropped): refused.
  for (int c = 0; c < decl.child_size(); ++c) {
    if (children_run.count(c) == 0) {
      return FieldError(absl::StrCat("child[", c, "]"), "no step runs this child");
    }
  }
  // Prepare observes every tensor input and the output of a fused module; a declaration
  // asking for less is refused rather than widened behind the user's back.
  if (decl.observed_input_size() > 0) {
    std::set<int> observed(decl.observed_input().begin(), decl.observed_input().end());
    for (int k = 0; k < decl.observed_input_size(); ++k) {
      const int i = decl.observed_input(k);
      if (i < 0 || i >= decl.num_inputs()) {
        return FieldError(absl::StrCat("observed_input[", k, "]"),
                          absl::StrCat(i, " is not one of the ", decl.num_inputs(), " inputs"));
      }
    }
    if (static_cast<int>(observed.size()) != decl.num_inputs()) {
      return absl::UnimplementedError(absl::StrCat(
          "field 'observed_input': observes ", observed.size(), " of the ", decl.num_inputs(),
          " inputs; only every input observed (or observed_input left empty) is supported"));
    }
  }
  if (!decl.observe_output()) {
    return absl::UnimplementedError(
        "field 'observe_output': must be true; an unobserved output is not supported");
  }
  if (decl.observation_type() != config::OUTPUT_USE_DIFFERENT_OBSERVER_AS_INPUT) {
    return absl::UnimplementedError(
        "field 'observation_type': set it on the pattern entry for this type (prepare "
        "reads it there); here only the default is accepted");
  }
  // An observed step is an intermediate: the last step's value is the output, which
  // observe_output observes.
  std::set<int> observed_steps;
  for (int k = 0; k < decl.observed_step_size(); ++k) {
    const int s = decl.observed_step(k);
    if (s < 0 || s + 1 >= decl.step_size() || !observed_steps.insert(s).second) {
      return FieldError(absl::StrCat("observed_step[", k, "]"),
                        absl::StrCat(s, " is not an intermediate step (0 to ",
                                     decl.step_size() - 2, "; the last step is the output), "
                                     "or is given twice"));
    }
    composition->observed_steps.push_back(s);
  }
  composition->carried_steps = CompositionSteps(*composition);
  composition->carried_outputs = CompositionOutputs(*composition);
  schema.composition = std::move(composition);
  RETURN_IF_ERROR(CheckTypeNameClash(decl.name(), modules));
  return schema;
}

// The quantized functions a composition step may name (what the built-in kNativeFunction
// rules lower to), with how many quantized inputs each takes.
struct NativeFunctionOp {
  absl::string_view name;
  absl::string_view target;
  int num_inputs;
};
constexpr NativeFunctionOp kNativeFunctionOps[] = {
    {"quantized.add", "torch.ops.quantized.add", 2},
    {"quantized.add_relu", "torch.ops.quantized.add_relu", 2},
    {"quantized.mul", "torch.ops.quantized.mul", 2},
    {"quantized.mul_relu", "torch.ops.quantized.mul_relu", 2},
};

const NativeFunctionOp* FindNativeFunctionOp(absl::string_view op) {
  for (const NativeFunctionOp& f : kNativeFunctionOps) {
    if (f.name == op || f.target == op) return &f;
  }
  return nullptr;
}

// OK if `step` is one of the observed_step of the declared type `reference` (its value
// observed, its own parameters recorded by convert); InvalidArgument naming `field` if
// the type has no such step, if it is the last one (the output), or if it is not observed.
absl::Status CheckObservedStep(int step, const ModuleSchema& reference,
                               const std::string& field) {
  const ModuleComposition& composition = *reference.composition;
  const int num_steps = static_cast<int>(composition.steps.size());
  if (step < 0 || step >= num_steps) {
    return FieldError(field, absl::StrCat(step, " is not a step of ", reference.type,
                                          ", which has ", num_steps, " steps"));
  }
  if (step + 1 == num_steps) {
    return FieldError(field, absl::StrCat(step, " is the last step of ", reference.type,
                                          ": its value is the output, whose parameters the "
                                          "last native step takes; name an intermediate"));
  }
  const std::vector<int>& observed = composition.observed_steps;
  if (std::find(observed.begin(), observed.end(), step) == observed.end()) {
    return FieldError(field, absl::StrCat("step ", step, " of ", reference.type,
                                          " is not observed; add observed_step: ", step,
                                          " to its fused_module_type"));
  }
  return absl::OkStatus();
}

// Checks a lowering rule of several native_steps (backend_config.proto, NativeStep):
// each step a registered nnq.* / nniq.* module built from one child that has a reference
// form, or a quantized function of kNativeFunctionOps; its inputs quantized args or
// earlier steps; every step but the last used later and given `qparams_of` (the observed
// value whose parameters its quantized result takes), the last without one.
absl::Status CheckNativeComposition(const config::LoweringRuleDecl& decl,
                                    const ModuleSchema& reference, int num_inputs,
                                    const std::set<int>& quantized_args,
                                    const ModuleSchemaRegistry& modules) {
  const int num_steps = decl.native_step_size();
  std::vector<bool> used(num_steps, false);
  auto check_ref = [&](const config::ValueRef& ref, int s,
                       const std::string& field) -> absl::Status {
    switch (ref.source_case()) {
      case config::ValueRef::kArg:
        if (quantized_args.count(ref.arg()) == 0) {
          return FieldError(field + ".arg",
                            absl::StrCat(ref.arg(), " is not one of the quantized_arg (",
                                         absl::StrJoin(quantized_args, ", "), ")"));
        }
        return absl::OkStatus();
      case config::ValueRef::kStep:
        if (ref.step() < 0 || ref.step() >= s) {
          return FieldError(field + ".step", absl::StrCat(ref.step(), " is not an earlier step"));
        }
        used[ref.step()] = true;
        return absl::OkStatus();
      case config::ValueRef::SOURCE_NOT_SET:
        break;
    }
    return FieldError(field, "names neither an arg nor a step");
  };
  for (int s = 0; s < num_steps; ++s) {
    const config::NativeStep& step = decl.native_step(s);
    const std::string prefix = absl::StrCat("native_step[", s, "]");
    if (step.input_size() == 0) {
      return FieldError(prefix + ".input", "a step of a composition lists its inputs");
    }
    for (int k = 0; k < step.input_size(); ++k) {
      RETURN_IF_ERROR(check_ref(step.input(k), s, absl::StrCat(prefix, ".input[", k, "]")));
    }
    if (const NativeFunctionOp* f = FindNativeFunctionOp(step.op()); f != nullptr) {
      if (step.from_child_size() > 0) {
        return FieldError(prefix + ".from_child",
                          absl::StrCat(f->name, " is a function; it takes no child's weights"));
      }
      if (step.input_size() != f->num_inputs) {
        return FieldError(prefix + ".input", absl::StrCat(f->name, " takes ", f->num_inputs,
                                                          " inputs; ", step.input_size(),
                                                          " given"));
      }
    } else {
      const std::string native = Qualified(step.op(), "nniq");
      const bool native_namespace =
          native.rfind("nnq.", 0) == 0 || native.rfind("nniq.", 0) == 0;
      const ModuleSchema* schema = modules.Find(Symbol::Lookup(native));
      if (!native_namespace || schema == nullptr) {
        std::vector<absl::string_view> functions;
        for (const NativeFunctionOp& fn : kNativeFunctionOps) functions.push_back(fn.name);
        return FieldError(prefix + ".op",
                          absl::StrCat("unknown native op '", step.op(),
                                       "'; expected a registered nnq.* / nniq.* module type "
                                       "or one of ", absl::StrJoin(functions, ", ")));
      }
      if (schema->min_inputs > step.input_size() ||
          (schema->max_inputs != ModuleSchema::kAnyNumber &&
           schema->max_inputs < step.input_size())) {
        return FieldError(prefix + ".input",
                          absl::StrCat(native, " takes ", schema->min_inputs, " to ",
                                       schema->max_inputs, " inputs; ", step.input_size(),
                                       " given"));
      }
      if (step.from_child_size() != 1) {
        return FieldError(prefix + ".from_child",
                          "a native module is built from exactly one child's weights");
      }
      const int c = step.from_child(0);
      if (c < 0 || c >= static_cast<int>(reference.children.size()) ||
          reference.children[c].size() < 2) {
        return FieldError(prefix + ".from_child[0]",
                          absl::StrCat(c, " is not a child of ", reference.type,
                                       " with a reference form (a weighted module such as "
                                       "nn.Conv2d)"));
      }
    }
    const bool last = s + 1 == num_steps;
    if (last && step.has_qparams_of()) {
      return FieldError(prefix + ".qparams_of",
                        "the last step's value is the output; its parameters are the output's");
    }
    if (!last) {
      if (!step.has_qparams_of()) {
        return FieldError(prefix + ".qparams_of",
                          "an intermediate value needs the observed value whose quantization "
                          "parameters it takes ({ step: k } an observed_step of the type, or "
                          "{ arg: i })");
      }
      if (step.qparams_of().source_case() == config::ValueRef::kStep) {
        RETURN_IF_ERROR(CheckObservedStep(step.qparams_of().step(), reference,
                                          prefix + ".qparams_of.step"));
      } else {
        RETURN_IF_ERROR(check_ref(step.qparams_of(), s, prefix + ".qparams_of"));
      }
    }
  }
  for (int s = 0; s + 1 < num_steps; ++s) {
    if (!used[s]) {
      return FieldError(absl::StrCat("native_step[", s, "]"), "no later step reads its value");
    }
  }
  return absl::OkStatus();
}

// A lowering rule, checked against the types declared (`declared`, this file's, by name)
// and registered.
absl::StatusOr<DeclaredLoweringRule> ReadLoweringRule(
    const config::LoweringRuleDecl& decl, absl::string_view source,
    const ModuleSchemaRegistry& modules,
    const absl::flat_hash_map<std::string, const ModuleSchema*>& declared) {
  DeclaredLoweringRule rule;
  rule.name = decl.name();
  rule.declared_in = std::string(source);
  if (rule.name.empty()) return FieldError("name", "must not be empty");
  rule.reference_module = decl.reference_module();
  const ModuleSchema* reference = nullptr;
  if (auto it = declared.find(rule.reference_module); it != declared.end()) {
    reference = it->second;
  }
  if (reference == nullptr) {
    return FieldError("reference_module",
                      absl::StrCat("'", rule.reference_module,
                                   "' is not a fused_module_type this file declares (built-in "
                                   "types have built-in rules)"));
  }
  const int num_inputs = reference->min_inputs;
  if (decl.quantized_arg_size() == 0) {
    return FieldError("quantized_arg", "needs at least one arg (usually every input)");
  }
  std::set<int> seen;
  for (int k = 0; k < decl.quantized_arg_size(); ++k) {
    const int a = decl.quantized_arg(k);
    if (a < 0 || a >= num_inputs || !seen.insert(a).second) {
      return FieldError(absl::StrCat("quantized_arg[", k, "]"),
                        absl::StrCat(a, " is not one of the ", num_inputs,
                                     " inputs, or is given twice"));
    }
    rule.quantized_args.push_back(a);
  }
  if (decl.fold_batch_norm()) {
    return absl::UnimplementedError(
        "field 'fold_batch_norm': fold the batch norm at fusion instead (the pattern entry's "
        "fuser: FOLD_BN_THEN_WRAP), so that the weight is observed and quantized after "
        "folding");
  }
  if (decl.native_step_size() == 0) {
    return FieldError("native_step", "needs at least one native op");
  }
  if (decl.native_step_size() > 1) {
    RETURN_IF_ERROR(CheckNativeComposition(decl, *reference, num_inputs, seen, modules));
    // Checked; LowerToNative replaces the reference node by one native node per step
    // (LoweringRule::Action::kNativeComposition).
    for (const config::NativeStep& step : decl.native_step()) {
      DeclaredLoweringRule::Step lowered;
      if (const NativeFunctionOp* f = FindNativeFunctionOp(step.op()); f != nullptr) {
        lowered.native = std::string(f->target);
        lowered.is_function = true;
      } else {
        lowered.native = Qualified(step.op(), "nniq");
        lowered.from_child = step.from_child(0);
        lowered.child_type = reference->children[lowered.from_child][1];
      }
      for (const config::ValueRef& input : step.input()) {
        const bool from_step = input.source_case() == config::ValueRef::kStep;
        lowered.inputs.emplace_back(from_step, from_step ? input.step() : input.arg());
      }
      if (step.qparams_of().source_case() == config::ValueRef::kStep) {
        lowered.qparams_of_step = step.qparams_of().step();
      } else if (step.has_qparams_of()) {
        lowered.qparams_of_arg = step.qparams_of().arg();
      }
      rule.composition.push_back(std::move(lowered));
    }
    return rule;
  }
  const config::NativeStep& step = decl.native_step(0);
  rule.native_module = Qualified(step.op(), "nniq");
  const bool native_namespace =
      rule.native_module.rfind("nnq.", 0) == 0 || rule.native_module.rfind("nniq.", 0) == 0;
  const ModuleSchema* native = modules.Find(Symbol::Lookup(rule.native_module));
  if (!native_namespace || native == nullptr) {
    return FieldError("native_step[0].op",
                      absl::StrCat("unknown native op '", step.op(),
                                   "'; expected a registered nnq.* / nniq.* module type (e.g. "
                                   "nniq.ConvAddReLU2d)"));
  }
  if (native->min_inputs > num_inputs ||
      (native->max_inputs != ModuleSchema::kAnyNumber && native->max_inputs < num_inputs)) {
    return FieldError("native_step[0].op",
                      absl::StrCat(rule.native_module, " takes ", native->min_inputs, " to ",
                                   native->max_inputs, " inputs; ", rule.reference_module,
                                   " has ", num_inputs));
  }
  // The native module is built from the reference child "0" (its weight quantized with
  // the parameters convert recorded) and takes the reference module's args unchanged.
  if (step.from_child_size() != 1 || step.from_child(0) != 0) {
    return absl::UnimplementedError(
        "field 'native_step[0].from_child': only [0] (the weighted child \"0\") is supported");
  }
  if (reference->children.empty() || reference->children[0].size() < 2) {
    return FieldError("native_step[0].from_child[0]",
                      absl::StrCat("child 0 of ", rule.reference_module,
                                   " has no reference form (expected a weighted module such "
                                   "as nn.Conv2d)"));
  }
  rule.inner_type = reference->children[0][1];
  if (step.input_size() > 0) {
    bool args_in_order = step.input_size() == num_inputs;
    for (int k = 0; args_in_order && k < step.input_size(); ++k) {
      args_in_order = step.input(k).source_case() == config::ValueRef::kArg &&
                      step.input(k).arg() == k;
    }
    if (!args_in_order) {
      return absl::UnimplementedError(absl::StrCat(
          "field 'native_step[0].input': the native op takes the reference module's ",
          num_inputs, " args in order (arg 0, arg 1, ...); leave it empty or list them so"));
    }
  }
  return rule;
}

std::string EntryPrefix(absl::string_view source, absl::string_view what, int index,
                        const std::string& name) {
  constexpr size_t kShown = 60;  // a name may be as long as a model file's string limit
  const std::string shown =
      name.size() > kShown ? absl::StrCat(name.substr(0, kShown), "...") : name;
  return absl::StrCat(source, ": ", what, "[", index, "]",
                      name.empty() ? "" : absl::StrCat(" '", shown, "'"), ": ");
}

absl::Status Prefixed(const absl::Status& status, const std::string& prefix) {
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

absl::Status CheckDeclaredModulesIn(const Module& module, const std::string& path,
                                    const ModuleSchemaRegistry& schemas) {
  const ModuleSchema* schema = schemas.Find(module.type());
  if (schema != nullptr && schema->composition != nullptr) {
    RETURN_IF_ERROR(CheckModuleAgainstSchema(
        module, *schema, absl::StrCat("module '", path, "' (", schema->type, ")")));
  }
  for (const auto& [name, child] : module.children()) {
    RETURN_IF_ERROR(CheckDeclaredModulesIn(
        *child, path.empty() ? name : absl::StrCat(path, ".", name), schemas));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckDeclaredModules(const GraphModule& gm, const Declarations* declarations) {
  if (declarations == nullptr) return absl::OkStatus();
  return CheckDeclaredModulesIn(gm.root(), "", declarations->schemas);
}

absl::StatusOr<std::shared_ptr<const Declarations>> ReadDeclarations(
    const config::BackendConfigFile& file, absl::string_view source,
    const ModuleSchemaRegistry& modules) {
  if (file.fused_module_type_size() == 0 && file.lowering_rule_size() == 0) return nullptr;
  auto declarations = std::make_shared<Declarations>(modules);
  std::vector<ModuleSchema> schemas;
  absl::flat_hash_map<std::string, const ModuleSchema*> declared;
  schemas.reserve(file.fused_module_type_size());
  for (int i = 0; i < file.fused_module_type_size(); ++i) {
    const config::FusedModuleTypeDecl& decl = file.fused_module_type(i);
    const std::string prefix = EntryPrefix(source, "fused_module_type", i, decl.name());
    absl::StatusOr<ModuleSchema> schema = ReadFusedModuleType(decl, source, modules);
    if (!schema.ok()) return Prefixed(schema.status(), prefix);
    if (declared.contains(decl.name())) {
      return Prefixed(FieldError("name", "declared twice in this file"), prefix);
    }
    schemas.push_back(*std::move(schema));
    declared[decl.name()] = &schemas.back();
  }
  for (int i = 0; i < file.lowering_rule_size(); ++i) {
    const config::LoweringRuleDecl& decl = file.lowering_rule(i);
    const std::string prefix = EntryPrefix(source, "lowering_rule", i, decl.name());
    absl::StatusOr<DeclaredLoweringRule> rule = ReadLoweringRule(decl, source, modules, declared);
    if (!rule.ok()) return Prefixed(rule.status(), prefix);
    for (const DeclaredLoweringRule& r : declarations->lowering_rules) {
      if (r.name == rule->name) {
        return Prefixed(FieldError("name", "declared twice in this file"), prefix);
      }
    }
    declarations->lowering_rules.push_back(*std::move(rule));
  }
  for (size_t i = 0; i < schemas.size(); ++i) {
    const std::string name = schemas[i].type;
    if (absl::Status st = declarations->schemas.Register(std::move(schemas[i])); !st.ok()) {
      return Prefixed(st, EntryPrefix(source, "fused_module_type", static_cast<int>(i), name));
    }
  }
  return std::shared_ptr<const Declarations>(std::move(declarations));
}

}  // namespace fuselage
