// BuiltinKernels: a registry holding every kernel fuselage itself defines, float
// (runtime/float_kernels.h) and quantized (runtime/quantized/register.h). Explicit:
// callers build it once and pass it to Run; nothing registers behind their back.
#ifndef FUSELAGE_RUNTIME_BUILTIN_KERNELS_H_
#define FUSELAGE_RUNTIME_BUILTIN_KERNELS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "runtime/kernel_registry.h"

namespace fuselage {

// A new registry with RegisterFloatKernels, RegisterFusedSubgraphKernel
// (runtime/fused_subgraph.h) and RegisterQuantizedKernels applied. Add your
// own kernels to it afterwards.
absl::StatusOr<std::unique_ptr<KernelRegistry>> BuiltinKernels();

}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_BUILTIN_KERNELS_H_
