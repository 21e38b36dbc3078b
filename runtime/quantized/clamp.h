// Clamp-like ops on quantized tensors, as PyTorch 1.13 runs them where convert_fx leaves
// them on the quantized tensor (torch.clamp / Tensor.clamp / F.hardtanh_ are "copy
// nodes" of _lower_to_native_backend.py, sharing their input's quantization parameters):
//
//   QuantizedClamp = torch.clamp(qx, min=None, max=None) on a quantized tensor
//                    (aten/src/ATen/native/quantized/cpu/qclamp.cpp, qclamp_kernel /
//                    qclamp_min_kernel / qclamp_max_kernel): with min_q = quantize_val(min)
//                    and max_q = quantize_val(max) in the input's qparams,
//                    y = min(max(q, min_q), max_q), either bound optional but not both.
//                    min > max is allowed, as in PyTorch: every element becomes max_q.
//                    The output keeps the input's dtype, shape and qparams.
//
// nn.ReLU6 / nn.Hardtanh / F.relu6 / F.hardtanh on quantized tensors are
// QuantizedHardtanh (runtime/quantized/elementwise.h), registered by register.cc.
#ifndef FUSELAGE_RUNTIME_QUANTIZED_CLAMP_H_
#define FUSELAGE_RUNTIME_QUANTIZED_CLAMP_H_

#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/tensor.h"
#include "runtime/kernel_registry.h"

namespace fuselage {
namespace quantized {

// InvalidArgument if `qx` is not a per-tensor quantized tensor or both bounds are absent.
absl::StatusOr<Tensor> QuantizedClamp(const Tensor& qx, std::optional<double> min_val,
                                      std::optional<double> max_val);

}  // namespace quantized

// Registers the quantized overloads (they run when the first tensor argument is
// quantized) of call_function torch.clamp(input, min=None, max=None), call_method
// clamp(min=None, max=None) and call_function torch.nn.functional.hardtanh_(input,
// min_val=-1.0, max_val=1.0). Bounds must be numbers or None (PyTorch has no quantized
// clamp with tensor bounds). AlreadyExists if one of them is already registered.
absl::Status RegisterQuantizedClampKernels(KernelRegistry& registry);

}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_CLAMP_H_
