#include "runtime/builtin_kernels.h"

#include "graph/status_macros.h"
#include "runtime/float_kernels.h"
#include "runtime/fused_subgraph.h"
#include "runtime/quantized/register.h"

namespace fuselage {

absl::StatusOr<std::unique_ptr<KernelRegistry>> BuiltinKernels() {
  auto registry = std::make_unique<KernelRegistry>();
  RETURN_IF_ERROR(RegisterFloatKernels(*registry));
  RETURN_IF_ERROR(RegisterFusedSubgraphKernel(*registry));
  RETURN_IF_ERROR(RegisterQuantizedKernels(*registry));
  return registry;
}

}  // namespace fuselage
