// KernelRegistry: what the interpreter calls for each node. Module kernels are keyed by
// module type ("nn.Conv2d"); function kernels by (op kind, target): call_function targets
// are qualified names ("torch.add", "operator.getitem"), call_method targets bare method
// names ("relu", "view"), with `self` as the first positional arg.
//
// Registration is explicit: RegisterFloatKernels (runtime/float_kernels.h) and
// RegisterQuantizedKernels (runtime/quantized/) fill a registry; a user adds kernels for
// their own module types and functions the same way (register the module type's schema in
// ModuleSchemaRegistry too, so Verify() accepts the graph).
//
// Kernel contract:
//  - Arguments arrive evaluated (node references replaced by their Values). Positional
//    args as given, keyword args in the node's order.
//  - A kernel never mutates its inputs (Tensors are copy-on-write; write only to tensors
//    it creates) and never aborts on bad input: wrong shapes, dtypes, kinds or missing
//    args are an absl::Status (InvalidArgument, or Unimplemented for a valid but
//    unsupported case). The interpreter prefixes every kernel error with the node's name,
//    op and target, so a kernel's message only needs to say which arg / field is wrong
//    and what was expected.
//  - Kernels may be called concurrently on different graphs; they must not keep state.
#ifndef FUSELAGE_RUNTIME_KERNEL_REGISTRY_H_
#define FUSELAGE_RUNTIME_KERNEL_REGISTRY_H_

#include <functional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "graph/graph_module.h"
#include "graph/module.h"
#include "graph/node.h"
#include "graph/symbol.h"
#include "runtime/quantized_engine.h"
#include "runtime/value.h"

namespace fuselage {

class KernelRegistry;

// Keyword args of one call, evaluated, in the node's order.
using ValueKwargs = std::vector<std::pair<Symbol, Value>>;

// Called by a kernel with a value computed inside a module (not a node's value) that
// an observer module watches, named by that observer's path: a declared type's
// intermediate step (runtime/fused_subgraph.h) during calibration.
using InnerValueObserver =
    std::function<absl::Status(absl::string_view observer_path, const Value& value)>;

// Where a kernel runs. `registry` lets a kernel of a composite module (a fused
// nni.ConvReLU2d) run its children through their own kernels; `engine` is the integer
// arithmetic quantized kernels reproduce (RunOptions::engine).
struct KernelContext {
  const Node& node;
  const GraphModule& graph_module;
  const KernelRegistry& registry;
  QuantizedEngine engine = QuantizedEngine::kOnednn;
  // RunOptions::inner_observer when set (calibration), else null.
  const InnerValueObserver* inner_observer = nullptr;
};

// `module` is the called module (for a fused module's child: the child).
using ModuleKernel = std::function<absl::StatusOr<Value>(
    const KernelContext& ctx, const Module& module, absl::Span<const Value> args,
    const ValueKwargs& kwargs)>;
using FunctionKernel = std::function<absl::StatusOr<Value>(
    const KernelContext& ctx, absl::Span<const Value> args, const ValueKwargs& kwargs)>;

class KernelRegistry {
 public:
  KernelRegistry() = default;
  KernelRegistry(const KernelRegistry&) = delete;
  KernelRegistry& operator=(const KernelRegistry&) = delete;
  KernelRegistry(KernelRegistry&&) = default;
  KernelRegistry& operator=(KernelRegistry&&) = default;

  // AlreadyExists if `module_type` already has a kernel; InvalidArgument on an empty type
  // or an empty kernel.
  absl::Status RegisterModule(Symbol module_type, ModuleKernel kernel);
  absl::Status RegisterModule(absl::string_view module_type, ModuleKernel kernel) {
    return RegisterModule(Symbol::Intern(module_type), std::move(kernel));
  }
  // `op` must be kCallFunction or kCallMethod (else InvalidArgument). AlreadyExists on a
  // duplicate (op, target).
  absl::Status RegisterFunction(OpKind op, Symbol target, FunctionKernel kernel);
  absl::Status RegisterFunction(OpKind op, absl::string_view target, FunctionKernel kernel) {
    return RegisterFunction(op, Symbol::Intern(target), std::move(kernel));
  }

  // Quantized overloads. Some targets take float or quantized tensors under one name
  // (nn.MaxPool2d, nn.ReLU, torch.cat, torch.flatten, ...). A quantized overload runs
  // instead of the kernel registered above when the call's first tensor is quantized
  // (args[0], or the first item of a list/tuple args[0], e.g. torch.cat's list); otherwise
  // the plain kernel runs. AlreadyExists on a duplicate overload. An overload may exist
  // without a plain kernel.
  absl::Status RegisterQuantizedModuleOverload(Symbol module_type, ModuleKernel kernel);
  absl::Status RegisterQuantizedFunctionOverload(OpKind op, Symbol target,
                                                 FunctionKernel kernel);

  // Channels-last overloads (runtime/layout.h): quantized kernels that take their 4-D
  // positional tensor args either row-major or channels-last (Value::ChannelsLast) and may
  // return a channels-last tensor. The interpreter runs one instead of the kernels above
  // when the call's first tensor is quantized in either layout and one is registered
  // (SelectChannelsLast*); nothing else calls them, so other kernels, composite kernels'
  // children included, only ever see row-major tensors. AlreadyExists on a duplicate.
  absl::Status RegisterChannelsLastModuleOverload(Symbol module_type, ModuleKernel kernel);
  absl::Status RegisterChannelsLastFunctionOverload(OpKind op, Symbol target,
                                                    FunctionKernel kernel);
  // The channels-last overload for a call with `args`, or nullptr.
  const ModuleKernel* SelectChannelsLastModule(Symbol module_type,
                                               absl::Span<const Value> args) const;
  const FunctionKernel* SelectChannelsLastFunction(OpKind op, Symbol target,
                                                   absl::Span<const Value> args) const;

  // The plain kernel, or nullptr if none is registered.
  const ModuleKernel* FindModule(Symbol module_type) const;
  const FunctionKernel* FindFunction(OpKind op, Symbol target) const;
  // The kernel to run for a call of `module` with `args`: the quantized overload of its
  // type if the first tensor is quantized and one is registered, else the plain kernel,
  // else, for a module that carries its own steps (a type declared in a backend config),
  // the steps kernel (runtime/fused_subgraph.h); nullptr if none.
  const ModuleKernel* SelectModule(const Module& module, absl::Span<const Value> args) const;
  const FunctionKernel* SelectFunction(OpKind op, Symbol target,
                                       absl::Span<const Value> args) const;

  // Runs the kernel SelectModule picks for `module`'s type and `args`: how composite
  // kernels call their children. Unimplemented (naming the module type) if there is no kernel.
  absl::StatusOr<Value> CallModule(const KernelContext& ctx, const Module& module,
                                   absl::Span<const Value> args,
                                   const ValueKwargs& kwargs = {}) const;

 private:
  absl::flat_hash_map<Symbol, ModuleKernel> module_kernels_;
  absl::flat_hash_map<std::pair<OpKind, Symbol>, FunctionKernel> function_kernels_;
  absl::flat_hash_map<Symbol, ModuleKernel> quantized_module_kernels_;
  absl::flat_hash_map<std::pair<OpKind, Symbol>, FunctionKernel> quantized_function_kernels_;
  absl::flat_hash_map<Symbol, ModuleKernel> channels_last_module_kernels_;
  absl::flat_hash_map<std::pair<OpKind, Symbol>, FunctionKernel> channels_last_function_kernels_;
};

}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_KERNEL_REGISTRY_H_
