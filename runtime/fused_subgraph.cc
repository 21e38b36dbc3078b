#include "runtime/fused_subgraph.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/module_schema.h"
#include "graph/status_macros.h"

namespace fuselage {
namespace {

absl::Status StepError(const Module& m, size_t step, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(m.type().name(), ": step ", step, ": ", what));
}

// The value a ref (patterns/fusion_rule.h) stands for: an input, an earlier step's value,
// a constant, or a list / tuple / slice of refs.
absl::StatusOr<Value> Resolve(const Module& m, size_t step, const Argument& ref,
                              absl::Span<const Value> inputs, absl::Span<const Value> done) {
  if (!ref.is_tuple() || ref.items().size() != 2 || !ref.items()[0].is_string()) {
    return StepError(m, step, absl::StrCat("a ref is a (tag, value) tuple; got ", ref.ToString()));
  }
  const absl::string_view tag = ref.items()[0].as_string();
  const Argument& value = ref.items()[1];
  if (tag == "input" || tag == "step") {
    const size_t limit = tag == "input" ? inputs.size() : done.size();
    if (!value.is_int() || value.as_int() < 0 || static_cast<size_t>(value.as_int()) >= limit) {
      return StepError(m, step, absl::StrCat("ref ", ref.ToString(), ": expected an index below ",
                                             limit));
    }
    return tag == "input" ? inputs[value.as_int()] : done[value.as_int()];
  }
  if (tag == "const") {
    switch (value.kind()) {
      case Argument::Kind::kNone: return Value::None();
      case Argument::Kind::kBool: return Value::Bool(value.as_bool());
      case Argument::Kind::kInt: return Value::Int(value.as_int());
      case Argument::Kind::kFloat: return Value::Float(value.as_float());
      case Argument::Kind::kString: return Value::String(value.as_string());
      case Argument::Kind::kDType: return Value::Dtype(value.as_dtype());
      case Argument::Kind::kEllipsis: return Value::Ellipsis();
      case Argument::Kind::kList:
        if (!value.is_slice()) {
          // A constant list (kernel_size=(3, 3)): each item a constant.
          std::vector<Value> items;
          for (const Argument& item : value.items()) {
            ASSIGN_OR_RETURN(Value v, Resolve(m, step, Argument::Tuple({Argument::String("const"),
                                                                       item}),
                                              inputs, done));
            items.push_back(std::move(v));
          }
          return value.is_tuple() ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
        }
        break;
      default:
        break;
    }
    if (value.is_slice()) {
      std::optional<int64_t> parts[3];
      for (int i = 0; i < 3; ++i) {
        if (value.items()[i].is_int()) parts[i] = value.items()[i].as_int();
      }
      return Value::Slice({parts[0], parts[1], parts[2]});
    }
    return StepError(m, step, absl::StrCat("constant ", value.ToString(), " has no value form"));
  }
  if (tag == "list" || tag == "tuple" || tag == "slice") {
    if (!value.is_list()) {
      return StepError(m, step, absl::StrCat("ref ", tag, ": expected a list of refs"));
    }
    std::vector<Value> items;
    for (const Argument& item : value.items()) {
      ASSIGN_OR_RETURN(Value v, Resolve(m, step, item, inputs, done));
      items.push_back(std::move(v));
    }
    if (tag == "list") return Value::List(std::move(items));
    if (tag == "tuple") return Value::Tuple(std::move(items));
    if (items.size() != 3) return StepError(m, step, "a slice ref has 3 parts");
    std::optional<int64_t> parts[3];
    for (int i = 0; i < 3; ++i) {
      if (items[i].is_int()) {
        parts[i] = items[i].as_int();
      } else if (!items[i].is_none()) {
        return StepError(m, step, "a slice part is None or an int");
      }
    }
    return Value::Slice({parts[0], parts[1], parts[2]});
  }
  return StepError(m, step, absl::StrCat("unknown ref tag '", tag, "'"));
}

// One step: (op kind name, target, args, kwargs), run through its own kernel.
absl::StatusOr<Value> RunStep(const KernelContext& ctx, const Module& m, size_t step,
                              const Argument& spec, absl::Span<const Value> inputs,
                              absl::Span<const Value> done) {
  if (!spec.is_tuple() || spec.items().size() != 4 || !spec.items()[0].is_string() ||
      !spec.items()[1].is_string() || !spec.items()[2].is_list() || !spec.items()[3].is_list()) {
    return StepError(m, step, "expected (op, target, args, kwargs)");
  }
  const std::optional<OpKind> op = OpKindFromName(spec.items()[0].as_string());
  const absl::string_view target = spec.items()[1].as_string();
  std::vector<Value> args;
  for (const Argument& ref : spec.items()[2].items()) {
    ASSIGN_OR_RETURN(Value v, Resolve(m, step, ref, inputs, done));
    args.push_back(std::move(v));
  }
  ValueKwargs kwargs;
  for (const Argument& kw : spec.items()[3].items()) {
    if (!kw.is_tuple() || kw.items().size() != 2 || !kw.items()[0].is_string()) {
      return StepError(m, step, "a kwarg is a (key, ref) tuple");
    }
    ASSIGN_OR_RETURN(Value v, Resolve(m, step, kw.items()[1], inputs, done));
    kwargs.emplace_back(Symbol::Intern(kw.items()[0].as_string()), std::move(v));
  }
  if (op == OpKind::kCallModule) {
    const Module* child = m.FindChild(target);
    if (child == nullptr) return StepError(m, step, absl::StrCat("no child \"", target, "\""));
    return ctx.registry.CallModule(ctx, *child, args, kwargs);
  }
  if (op != OpKind::kCallFunction && op != OpKind::kCallMethod) {
    return StepError(m, step, absl::StrCat("op '", spec.items()[0].as_string(),
                                           "': expected call_module, call_function or "
                                           "call_method"));
  }
  const FunctionKernel* kernel = ctx.registry.SelectFunction(*op, Symbol::Intern(target), args);
  if (kernel == nullptr) {
    return absl::UnimplementedError(absl::StrCat(m.type().name(), ": step ", step, ": no kernel "
                                                 "registered for ", OpKindName(*op), " ", target));
  }
  return (*kernel)(ctx, args, kwargs);
}

// During calibration (ctx.inner_observer set), gives step `s`'s value to the observer
// prepare recorded on `m` for it (a declared type's observed_step,
// graph/module_schema.h ObservedStepAttribute), if there is one.
absl::Status FeedStepObserver(const KernelContext& ctx, const Module& m, size_t s,
                              const Value& value) {
  const Argument* path = m.FindAttribute(ObservedStepAttribute(static_cast<int>(s)));
  if (path == nullptr || !path->is_string()) return absl::OkStatus();
  const absl::Status status = (*ctx.inner_observer)(path->as_string(), value);
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(m.type().name(), ": observer of step ", s,
                                                  " ('", path->as_string(), "'): ",
                                                  status.message()));
}

}  // namespace

absl::StatusOr<Value> RunSteps(const KernelContext& ctx, const Module& m,
                               absl::Span<const Value> args, const ValueKwargs& kwargs) {
  if (!kwargs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(m.type().name(), " takes no kwargs"));
  }
  const Argument* steps = m.FindAttribute(kStepsAttribute);
  const Argument* outputs = m.FindAttribute(kOutputsAttribute);
  if (steps == nullptr || !steps->is_list() || outputs == nullptr || !outputs->is_list() ||
      outputs->items().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        m.type().name(), ": expected attributes \"steps\" (a list) and \"outputs\" (a "
        "non-empty list of step indices)"));
  }
  std::vector<Value> done;
  done.reserve(steps->items().size());
  for (size_t i = 0; i < steps->items().size(); ++i) {
    absl::StatusOr<Value> v = RunStep(ctx, m, i, steps->items()[i], args, done);
    if (!v.ok()) {
      // A step's own kernel does not know it runs inside `m`.
      const absl::string_view message = v.status().message();
      if (absl::StartsWith(message, m.type().name())) return v.status();
      return absl::Status(v.status().code(),
                          absl::StrCat(m.type().name(), ": step ", i, ": ", message));
    }
    done.push_back(*std::move(v));
    if (ctx.inner_observer != nullptr) {
      RETURN_IF_ERROR(FeedStepObserver(ctx, m, i, done.back()));
    }
  }
  std::vector<Value> results;
  for (const Argument& out : outputs->items()) {
    if (!out.is_int() || out.as_int() < 0 || static_cast<size_t>(out.as_int()) >= done.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          m.type().name(), ": output ", out.ToString(), " is not a step index below ",
          done.size()));
    }
    results.push_back(done[out.as_int()]);
  }
  if (results.size() == 1) return results[0];
  return Value::Tuple(std::move(results));
}

absl::Status RegisterFusedSubgraphKernel(KernelRegistry& registry) {
  return registry.RegisterModule("fuselage.FusedSubgraph", RunSteps);
}

}  // namespace fuselage
