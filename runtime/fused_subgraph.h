// The one kernel of every module that carries its own steps (graph/module_schema.h,
// kStepsAttribute): fuselage.FusedSubgraph, the module a multi-output pattern match is
// fused into (patterns/fusion_rule.h, kFusedSubgraphType), and every fused module type a
// backend config declares (backend_configs/declared_types.h), whose steps fusion writes
// from the declaration. It replays the steps, each through the registry's own kernel
// (children for call_module steps), and returns the value of its one output or a tuple of
// its "outputs" in order. The float result equals the unfused graph's exactly: the same
// kernels run on the same values in the same order. During calibration it feeds the
// observer prepare recorded for a declared type's observed step.
//
// KernelRegistry::SelectModule picks it for any module with steps whose type has no
// kernel of its own, in every registry; fuselage.FusedSubgraph is also registered by name:
//   ASSIGN_OR_RETURN(std::unique_ptr<KernelRegistry> kernels, BuiltinKernels());  // has it
//   ASSIGN_OR_RETURN(Value y, RunSteps(ctx, module, {x, residual}, {}));
//
// A malformed module (a step that is not a tuple of (op, target, args, kwargs), a ref to a
// later step, an input index past the args, a missing child) is InvalidArgument naming the
// step and the field, never an abort.
#ifndef FUSELAGE_RUNTIME_FUSED_SUBGRAPH_H_
#define FUSELAGE_RUNTIME_FUSED_SUBGRAPH_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "graph/module.h"
#include "runtime/kernel_registry.h"
#include "runtime/value.h"

namespace fuselage {

// Runs `module`'s steps on forward() args `args` (keyword args are refused).
absl::StatusOr<Value> RunSteps(const KernelContext& ctx, const Module& module,
                               absl::Span<const Value> args, const ValueKwargs& kwargs);

// Registers the kernel of "fuselage.FusedSubgraph" in `registry` (AlreadyExists if it has
// one). BuiltinKernels() calls it.
absl::Status RegisterFusedSubgraphKernel(KernelRegistry& registry);

}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_FUSED_SUBGRAPH_H_
