// Moving quantized activations between the row-major layout every tensor has and the
// channels-last one (Value::ChannelsLast) that quantized kernels registered for it hand
// each other: int8 convolutions compute in [N, H, W, C] on x86 (oneDNN's choice, and
// PyTorch's quantized tensors' layout), so a chain conv -> add -> conv kept channels-last
// moves no bytes between the kernels, where a row-major chain transposes twice per conv.
//
// The interpreter calls a channels-last overload (KernelRegistry) when one is registered
// for the call and the call's first tensor is quantized; every other kernel, the node
// observer and the run's outputs get ToRowMajor's values, so the layout never changes a
// result. Example, a kernel that computes position by position:
//   registry.RegisterChannelsLastFunctionOverload(
//       OpKind::kCallFunction, Symbol::Intern("torch.ops.quantized.add"),
//       KeepingChannelsLast(add_kernel));
#ifndef FUSELAGE_RUNTIME_LAYOUT_H_
#define FUSELAGE_RUNTIME_LAYOUT_H_

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "graph/tensor.h"
#include "runtime/kernel_registry.h"
#include "runtime/value.h"

namespace fuselage {

// Whether a 4-D tensor of this dtype can be kept channels-last: an 8-bit quantized one
// (quint8 / qint8) quantized per tensor, whose qparams do not depend on the layout.
bool CanBeChannelsLast(const Tensor& tensor);

// `tensor` [N, C, H, W] (row-major) with its bytes moved to [N, H, W, C]; the shape and
// qparams are kept. InvalidArgument unless CanBeChannelsLast.
absl::StatusOr<Tensor> ToChannelsLastBytes(const Tensor& tensor);

// The row-major tensor of a channels-last value's tensor (bytes [N, H, W, C] -> [N, C, H, W]).
Tensor FromChannelsLastBytes(const Tensor& channels_last);

// `value` with every channels-last tensor in it (at any depth of lists) made row-major.
Value ToRowMajor(const Value& value);

// Whether any of `args` (or an item of a list among them) is channels-last.
bool HasChannelsLast(absl::Span<const Value> args);

// `args` with every channels-last tensor made row-major (ToRowMajor of each).
std::vector<Value> ToRowMajor(absl::Span<const Value> args);

// A channels-last overload of `kernel`, a kernel whose output element at each position
// is computed from its tensor inputs' elements at that same position (relu, hardtanh,
// add / mul of equal shapes): when every tensor arg has the shape of the first, the args
// run through `kernel` channels-last (a row-major one moved there first) and the output
// stays channels-last; otherwise (broadcasting, a non-4-D input) the args are made
// row-major and `kernel` runs as it always does.
FunctionKernel KeepingChannelsLast(FunctionKernel kernel);
ModuleKernel KeepingChannelsLast(ModuleKernel kernel);

}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_LAYOUT_H_
