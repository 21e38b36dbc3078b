#include "runtime/composite_kernel.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "graph/symbol.h"

namespace fuselage {
namespace {

std::string StepName(const ModuleComposition::Step& step, size_t index) {
  return step.child >= 0 ? absl::StrCat("step ", index, " (child \"", step.child, "\")")
                         : absl::StrCat("step ", index, " (", step.function, ")");
}

// During calibration (ctx.inner_observer set), gives step `s`'s value to the observer
// prepare recorded on `module` for it, if the composition observes that step.
absl::Status FeedStepObserver(const KernelContext& ctx, const Module& module,
                              const ModuleComposition& composition, size_t s,
                              const Value& value) {
  if (ctx.inner_observer == nullptr || composition.observed_steps.empty()) {
    return absl::OkStatus();
  }
  const std::vector<int>& observed = composition.observed_steps;
  if (std::find(observed.begin(), observed.end(), static_cast<int>(s)) == observed.end()) {
    return absl::OkStatus();
  }
  const Argument* path = module.FindAttribute(ObservedStepAttribute(static_cast<int>(s)));
  if (path == nullptr || !path->is_string()) {
    // Not prepared (a float or converted model run by a calibration-style caller).
    return absl::OkStatus();
  }
  const absl::Status status = (*ctx.inner_observer)(path->as_string(), value);
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat(module.type().name(), ": observer of step ", s, " ('",
                                     path->as_string(), "'): ", status.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Value> RunComposition(const KernelContext& ctx, const Module& module,
                                     const ModuleComposition& composition,
                                     absl::Span<const Value> args, const ValueKwargs& kwargs) {
  const std::string type(module.type().name());
  if (!kwargs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        type, ": a declared module takes positional args only; got ", kwargs.size(),
        " keyword args"));
  }
  if (composition.steps.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(type, ": its composition has no step"));
  }
  std::vector<Value> results;
  results.reserve(composition.steps.size());
  std::vector<Value> inputs;
  for (size_t s = 0; s < composition.steps.size(); ++s) {
    const ModuleComposition::Step& step = composition.steps[s];
    inputs.clear();
    for (const ModuleComposition::Value& ref : step.inputs) {
      const bool from_arg = ref.source == ModuleComposition::Value::Source::kArg;
      const size_t available = from_arg ? args.size() : results.size();
      if (ref.index < 0 || static_cast<size_t>(ref.index) >= available) {
        return absl::InvalidArgumentError(absl::StrCat(
            type, ": ", StepName(step, s), " reads ", from_arg ? "arg " : "step ", ref.index,
            " but there are ", available, from_arg ? " args" : " earlier steps"));
      }
      inputs.push_back(from_arg ? args[ref.index] : results[ref.index]);
    }
    absl::StatusOr<Value> result;
    if (step.child >= 0) {
      const Module* child = module.FindChild(absl::StrCat(step.child));
      if (child == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(type, ": ", StepName(step, s), ": the module has no such child"));
      }
      result = ctx.registry.CallModule(ctx, *child, inputs);
    } else {
      const FunctionKernel* kernel = ctx.registry.SelectFunction(
          OpKind::kCallFunction, Symbol::Intern(step.function), inputs);
      if (kernel == nullptr) {
        return absl::UnimplementedError(absl::StrCat(
            type, ": ", StepName(step, s), ": no kernel registered for this function"));
      }
      result = (*kernel)(ctx, inputs, {});
    }
    if (!result.ok()) {
      return absl::Status(result.status().code(), absl::StrCat(type, ": ", StepName(step, s),
                                                               ": ", result.status().message()));
    }
    results.push_back(*std::move(result));
    RETURN_IF_ERROR(FeedStepObserver(ctx, module, composition, s, results.back()));
  }
  return std::move(results.back());
}

absl::StatusOr<Value> RunCompositeModule(const KernelContext& ctx, const Module& module,
                                         absl::Span<const Value> args,
                                         const ValueKwargs& kwargs) {
  const ModuleSchema* schema = ModuleSchemaRegistry::Global().Find(module.type());
  if (schema == nullptr || schema->composition == nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        "no kernel registered for module type '", module.type().name(), "'"));
  }
  return RunComposition(ctx, module, *schema->composition, args, kwargs);
}

}  // namespace fuselage
