// The kernel of fuselage.FusedSubgraph, the module a multi-output pattern match is fused
// into (patterns/fusion_rule.h, kFusedSubgraphType): it replays the matched nodes, recorded
// as the module's "steps", each through the registry's own kernel (children for
// call_module steps), and returns the value of its one output or a tuple of its
// "outputs" in order. The float result equals the unfused graph's exactly: the same
// kernels run on the same values in the same order.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<KernelRegistry> kernels, BuiltinKernels());  // has it
//   // or, in a registry of your own:
//   RETURN_IF_ERROR(RegisterFusedSubgraphKernel(*registry));
//
// A malformed module (a step that is not a tuple of (op, target, args, kwargs), a ref to a
// later step, an input index past the args, a missing child) is InvalidArgument naming the
// step and the field, never an abort.
#ifndef FUSELAGE_RUNTIME_FUSED_SUBGRAPH_H_
#define FUSELAGE_RUNTIME_FUSED_SUBGRAPH_H_

#include "absl/status/status.h"
#include "runtime/kernel_registry.h"

namespace fuselage {

// Registers the kernel of "fuselage.FusedSubgraph" in `registry` (AlreadyExists if it has
// one). BuiltinKernels() calls it.
absl::Status RegisterFusedSubgraphKernel(KernelRegistry& registry);

}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_FUSED_SUBGRAPH_H_
