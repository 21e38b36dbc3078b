// The composite kernel: how a module type declared as data runs. A backend config's
// fused_module_type (backend_configs/declared_types.h) registers a ModuleSchema with a
// ModuleComposition (graph/module_schema.h) and no C++: this kernel runs its steps in
// order, each a child module through that child's own kernel or a registered float
// function, and returns the last step's value.
//
// KernelRegistry::SelectModule falls back to it for a module type that has no kernel of
// its own and whose schema in ModuleSchemaRegistry::Global() has a composition, so every
// registry (BuiltinKernels, a user's) runs declared types, including ones declared after
// the registry was built.
//
//   // user.ConvBnAddReLU2d: relu(conv(x) + residual), children "0" = conv, "1" = relu
//   ASSIGN_OR_RETURN(Value y, RunCompositeModule(ctx, module, {x, residual}, {}));
#ifndef FUSELAGE_RUNTIME_COMPOSITE_KERNEL_H_
#define FUSELAGE_RUNTIME_COMPOSITE_KERNEL_H_

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "graph/module.h"
#include "graph/module_schema.h"
#include "runtime/kernel_registry.h"
#include "runtime/value.h"

namespace fuselage {

// Runs `composition` for `module` with forward() args `args` (keyword args are refused:
// a declared forward() is positional). InvalidArgument naming the step if an arg count
// is wrong or a child is missing; Unimplemented if a step's function has no kernel in
// ctx.registry; a step kernel's own error is returned prefixed with the step.
absl::StatusOr<Value> RunComposition(const KernelContext& ctx, const Module& module,
                                     const ModuleComposition& composition,
                                     absl::Span<const Value> args, const ValueKwargs& kwargs);

// RunComposition with the composition of `module`'s type in ModuleSchemaRegistry::Global()
// (Unimplemented if it has none): the ModuleKernel SelectModule falls back to.
absl::StatusOr<Value> RunCompositeModule(const KernelContext& ctx, const Module& module,
                                         absl::Span<const Value> args,
                                         const ValueKwargs& kwargs);

}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_COMPOSITE_KERNEL_H_
