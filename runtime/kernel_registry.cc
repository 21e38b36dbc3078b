#include "runtime/kernel_registry.h"

#include "absl/strings/str_cat.h"

namespace fuselage {

absl::Status KernelRegistry::RegisterModule(Symbol module_type, ModuleKernel kernel) {
  if (module_type.empty() || !kernel) {
    return absl::InvalidArgumentError("RegisterModule: empty module type or empty kernel");
  }
  if (!module_kernels_.emplace(module_type, std::move(kernel)).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("a kernel for module type '", module_type.name(), "' is already registered"));
  }
  return absl::OkStatus();
}

absl::Status KernelRegistry::RegisterFunction(OpKind op, Symbol target, FunctionKernel kernel) {
  if (op != OpKind::kCallFunction && op != OpKind::kCallMethod) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RegisterFunction: op must be call_function or call_method; got ", OpKindName(op)));
  }
  if (target.empty() || !kernel) {
    return absl::InvalidArgumentError("RegisterFunction: empty target or empty kernel");
  }
  if (!function_kernels_.emplace(std::make_pair(op, target), std::move(kernel)).second) {
    return absl::AlreadyExistsError(absl::StrCat("a kernel for ", OpKindName(op), " '",
                                                 target.name(), "' is already registered"));
  }
  return absl::OkStatus();
}

const ModuleKernel* KernelRegistry::FindModule(Symbol module_type) const {
  auto it = module_kernels_.find(module_type);
  return it == module_kernels_.end() ? nullptr : &it->second;
}

const FunctionKernel* KernelRegistry::FindFunction(OpKind op, Symbol target) const {
  auto it = function_kernels_.find(std::make_pair(op, target));
  return it == function_kernels_.end() ? nullptr : &it->second;
}

absl::StatusOr<Value> KernelRegistry::CallModule(const KernelContext& ctx, const Module& module,
                                                 absl::Span<const Value> args,
                                                 const ValueKwargs& kwargs) const {
  const ModuleKernel* kernel = FindModule(module.type());
  if (kernel == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("no kernel registered for module type '", module.type().name(), "'"));
  }
  return (*kernel)(ctx, module, args, kwargs);
}

}  // namespace fuselage
