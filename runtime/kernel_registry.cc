#include "runtime/kernel_registry.h"

#include "absl/strings/str_cat.h"
#include "graph/module_schema.h"
#include "graph/module_schema.h"
#include "runtime/fused_subgraph.h"

namespace fuselage {

namespace {

absl::Status AddModuleKernel(absl::flat_hash_map<Symbol, ModuleKernel>& table, Symbol type,
                             ModuleKernel kernel, absl::string_view what) {
  if (type.empty() || !kernel) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": empty module type or empty kernel"));
  }
  if (!table.emplace(type, std::move(kernel)).second) {
    return absl::AlreadyExistsError(absl::StrCat(what, ": a kernel for module type '",
                                                 type.name(), "' is already registered"));
  }
  return absl::OkStatus();
}

absl::Status AddFunctionKernel(
    absl::flat_hash_map<std::pair<OpKind, Symbol>, FunctionKernel>& table, OpKind op,
    Symbol target, FunctionKernel kernel, absl::string_view what) {
  if (op != OpKind::kCallFunction && op != OpKind::kCallMethod) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": op must be call_function or call_method; got ", OpKindName(op)));
  }
  if (target.empty() || !kernel) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": empty target or empty kernel"));
  }
  if (!table.emplace(std::make_pair(op, target), std::move(kernel)).second) {
    return absl::AlreadyExistsError(absl::StrCat(what, ": a kernel for ", OpKindName(op), " '",
                                                 target.name(), "' is already registered"));
  }
  return absl::OkStatus();
}

template <typename Map, typename Key>
const typename Map::mapped_type* FindIn(const Map& map, const Key& key) {
  auto it = map.find(key);
  return it == map.end() ? nullptr : &it->second;
}

// True if the first tensor of the call (args[0], or the first item of a list args[0]) is
// quantized; a channels-last tensor always is.
bool FirstTensorIsQuantized(absl::Span<const Value> args) {
  if (args.empty()) return false;
  const Value& first = args[0];
  const Value* tensor = first.is_list() && !first.items().empty() ? &first.items()[0] : &first;
  if (tensor->is_tensor()) return tensor->as_tensor().is_quantized();
  return tensor->is_channels_last();
}

}  // namespace

absl::Status KernelRegistry::RegisterModule(Symbol module_type, ModuleKernel kernel) {
  return AddModuleKernel(module_kernels_, module_type, std::move(kernel), "RegisterModule");
}

absl::Status KernelRegistry::RegisterFunction(OpKind op, Symbol target, FunctionKernel kernel) {
  return AddFunctionKernel(function_kernels_, op, target, std::move(kernel), "RegisterFunction");
}

absl::Status KernelRegistry::RegisterQuantizedModuleOverload(Symbol module_type,
                                                             ModuleKernel kernel) {
  return AddModuleKernel(quantized_module_kernels_, module_type, std::move(kernel),
                         "RegisterQuantizedModuleOverload");
}

absl::Status KernelRegistry::RegisterQuantizedFunctionOverload(OpKind op, Symbol target,
                                                               FunctionKernel kernel) {
  return AddFunctionKernel(quantized_function_kernels_, op, target, std::move(kernel),
                           "RegisterQuantizedFunctionOverload");
}

absl::Status KernelRegistry::RegisterChannelsLastModuleOverload(Symbol module_type,
                                                               ModuleKernel kernel) {
  return AddModuleKernel(channels_last_module_kernels_, module_type, std::move(kernel),
                         "RegisterChannelsLastModuleOverload");
}

absl::Status KernelRegistry::RegisterChannelsLastFunctionOverload(OpKind op, Symbol target,
                                                                  FunctionKernel kernel) {
  return AddFunctionKernel(channels_last_function_kernels_, op, target, std::move(kernel),
                           "RegisterChannelsLastFunctionOverload");
}

const ModuleKernel* KernelRegistry::SelectChannelsLastModule(
    Symbol module_type, absl::Span<const Value> args) const {
  if (!FirstTensorIsQuantized(args)) return nullptr;
  return FindIn(channels_last_module_kernels_, module_type);
}

const FunctionKernel* KernelRegistry::SelectChannelsLastFunction(
    OpKind op, Symbol target, absl::Span<const Value> args) const {
  if (!FirstTensorIsQuantized(args)) return nullptr;
  return FindIn(channels_last_function_kernels_, std::make_pair(op, target));
}

const ModuleKernel* KernelRegistry::FindModule(Symbol module_type) const {
  return FindIn(module_kernels_, module_type);
}

const FunctionKernel* KernelRegistry::FindFunction(OpKind op, Symbol target) const {
  return FindIn(function_kernels_, std::make_pair(op, target));
}

const ModuleKernel* KernelRegistry::SelectModule(const Module& module,
                                                 absl::Span<const Value> args) const {
  const Symbol module_type = module.type();
  if (FirstTensorIsQuantized(args)) {
    if (const ModuleKernel* k = FindIn(quantized_module_kernels_, module_type)) return k;
  }
  if (const ModuleKernel* k = FindModule(module_type)) return k;
  // A module carrying its own steps (a declared type) runs them; looked up only when no
  // kernel of its own exists.
  static const ModuleKernel* const kSteps = new ModuleKernel(RunSteps);
  return CarriesSteps(module) ? kSteps : nullptr;
}

const FunctionKernel* KernelRegistry::SelectFunction(OpKind op, Symbol target,
                                                     absl::Span<const Value> args) const {
  if (FirstTensorIsQuantized(args)) {
    const auto key = std::make_pair(op, target);
    if (const FunctionKernel* k = FindIn(quantized_function_kernels_, key)) return k;
  }
  return FindFunction(op, target);
}

absl::StatusOr<Value> KernelRegistry::CallModule(const KernelContext& ctx, const Module& module,
                                                 absl::Span<const Value> args,
                                                 const ValueKwargs& kwargs) const {
  const ModuleKernel* kernel = SelectModule(module, args);
  if (kernel == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("no kernel registered for module type '", module.type().name(), "'"));
  }
  return (*kernel)(ctx, module, args, kwargs);
}

}  // namespace fuselage
