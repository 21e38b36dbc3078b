// A private detail of the float kernels, not a public header: what runtime/float_kernels.cc
// and the family files beside it (float_activation_kernels.cc, float_shape_kernels.cc,
// float_arithmetic_kernels.cc) share. Each family keeps its kernels and its registration
// list together; RegisterFloatKernels (float_kernels.h, the public contract) concatenates
// the lists. Here: the lists' entry types, each family's list, and the helpers more than one
// family uses. Only those files include it.
#ifndef FUSELAGE_RUNTIME_FLOAT_KERNEL_TABLE_H_
#define FUSELAGE_RUNTIME_FLOAT_KERNEL_TABLE_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph/module.h"
#include "graph/status_macros.h"
#include "graph/tensor.h"
#include "runtime/kernel_args.h"
#include "runtime/kernel_registry.h"
#include "runtime/value.h"

namespace fuselage {
namespace float_kernels_internal {

inline constexpr OpKind kFunction = OpKind::kCallFunction;
inline constexpr OpKind kMethod = OpKind::kCallMethod;

struct NamedModuleKernel {
  const char* type;
  ModuleKernel kernel;
};

struct NamedFunctionKernel {
  OpKind op;
  const char* target;
  FunctionKernel kernel;
};

// Each family's registration list, defined beside its kernels. float_kernels.cc holds the
// conv / linear / batch norm / pool / fused (nni.*) family and concatenates them all.
std::vector<NamedModuleKernel> ActivationModuleKernels();    // float_activation_kernels.cc
std::vector<NamedFunctionKernel> ActivationFunctionKernels();
std::vector<NamedModuleKernel> ShapeModuleKernels();         // float_shape_kernels.cc
std::vector<NamedFunctionKernel> ShapeFunctionKernels();
std::vector<NamedFunctionKernel> ArithmeticFunctionKernels();  // float_arithmetic_kernels.cc

// ---- Reading module attributes (absent ones take PyTorch's defaults) ------------------

inline absl::StatusOr<std::vector<int64_t>> IntsAttr(const Module& m, absl::string_view name,
                                                     std::vector<int64_t> default_value) {
  const Argument* a = m.FindAttribute(name);
  if (a == nullptr || a->is_none()) return default_value;
  if (a->is_list() && a->items().empty()) return default_value;
  return m.GetInts(name, default_value.size());
}

inline absl::StatusOr<int64_t> IntAttr(const Module& m, absl::string_view name,
                                       int64_t default_value) {
  return m.FindAttribute(name) == nullptr ? default_value : m.GetInt(name);
}

inline absl::StatusOr<double> FloatAttr(const Module& m, absl::string_view name,
                                        double default_value) {
  return m.FindAttribute(name) == nullptr ? default_value : m.GetFloat(name);
}

inline absl::StatusOr<bool> BoolAttr(const Module& m, absl::string_view name,
                                     bool default_value) {
  return m.FindAttribute(name) == nullptr ? default_value : m.GetBool(name);
}

inline const Tensor* OptionalTensor(const Module& m, absl::string_view name) {
  return m.FindTensor(name);
}

// The single tensor input of a one-input module kernel, float32.
inline absl::StatusOr<const Tensor*> SingleFloatInput(const Module& m,
                                                      absl::Span<const Value> args,
                                                      const ValueKwargs& kwargs) {
  if (args.size() != 1 || !kwargs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(m.type().name(), " takes 1 input; got ",
                                                   args.size(), " positional and ",
                                                   kwargs.size(), " keyword args"));
  }
  if (!args[0].is_tensor()) {
    return absl::InvalidArgumentError(absl::StrCat(m.type().name(), ": input is a ",
                                                   args[0].KindName(), "; expected a Tensor"));
  }
  RETURN_IF_ERROR(ExpectFloatTensor(args[0].as_tensor(), absl::StrCat(m.type().name(), " input")));
  return &args[0].as_tensor();
}

// A module kernel computing fn(module, input) on one float input.
template <typename Fn>
ModuleKernel UnaryModule(Fn fn) {
  return [fn](const KernelContext&, const Module& m, absl::Span<const Value> args,
              const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ASSIGN_OR_RETURN(const Tensor* x, SingleFloatInput(m, args, kwargs));
    ASSIGN_OR_RETURN(Tensor y, fn(m, *x));
    return Value(std::move(y));
  };
}

// A function kernel over one float tensor `input` (position 0) plus other args.
template <typename Fn>
FunctionKernel UnaryFunction(Fn fn) {
  return [fn](const KernelContext&, absl::Span<const Value> args,
              const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ArgReader r(args, kwargs);
    ASSIGN_OR_RETURN(const Tensor* x, r.GetFloatTensor(0, "input"));
    ASSIGN_OR_RETURN(Tensor y, fn(*x, r));
    return Value(std::move(y));
  };
}

}  // namespace float_kernels_internal
}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_FLOAT_KERNEL_TABLE_H_
