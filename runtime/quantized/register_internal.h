// A private detail of the quantized kernels' registration, not a public header: what
// runtime/quantized/register.cc and the family files beside it (functional_kernels.cc,
// stored_value_kernels.cc) share. Each family keeps its kernels and its registration list
// together; RegisterQuantizedKernels (register.h, the public contract) registers the lists
// in one fixed order. Here: the lists' entry types, each family's list, and the helpers
// more than one family uses. Only those files include it (it is not in the library's hdrs).
#ifndef FUSELAGE_RUNTIME_QUANTIZED_REGISTER_INTERNAL_H_
#define FUSELAGE_RUNTIME_QUANTIZED_REGISTER_INTERNAL_H_

#include <array>
#include <cstdint>
#include <functional>
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
#include "runtime/quantized/conv.h"
#include "runtime/quantized/pooling.h"
#include "runtime/quantized/quant_math.h"
#include "runtime/value.h"

namespace fuselage {
namespace quantized_kernels_internal {

using quantized::Conv2dParams;
using quantized::Pool2dParams;

using NamedModuleKernels = std::vector<std::pair<const char*, ModuleKernel>>;
using NamedFunctionKernels = std::vector<std::pair<const char*, FunctionKernel>>;

// Each family's registration list, defined beside its kernels. register.cc holds the module
// kernels and the unary / activation overloads, and registers everything in one order.
NamedFunctionKernels QuantizedFunctionKernels();  // functional_kernels.cc (call_function)
// torch.dequantize, also registered as the call_method `dequantize` (functional_kernels.cc).
absl::StatusOr<Value> DequantizeFn(const KernelContext&, absl::Span<const Value> args,
                                   const ValueKwargs& kwargs);
// The call_method `to`: x.to(torch.float16), a float16 cast, or x.to(torch.float32)
// (functional_kernels.cc).
absl::StatusOr<Value> CastFn(const KernelContext&, absl::Span<const Value> args,
                             const ValueKwargs& kwargs);
// torch.ops.quantized.cat (explicit_qparams) and the quantized overload of torch.cat
// (functional_kernels.cc).
FunctionKernel CatFn(bool explicit_qparams);
// torch.ops.quantized.conv1d / 2d / 3d [_relu]; `channels_last`: the channels-last
// overload (functional_kernels.cc).
FunctionKernel FunctionalConvNdFn(size_t spatial, bool relu, bool channels_last);
NamedModuleKernels StoredValueModuleOverloads();     // stored_value_kernels.cc
NamedFunctionKernels StoredValueFunctionOverloads();

// ---- Reading values ----

// A number given as an int / float Value or as a tensor of one element (a get_attr of a
// 0-d tensor in graphs imported from PyTorch).
inline absl::StatusOr<double> NumberOf(const Value& v, absl::string_view what) {
  if (v.is_number()) return v.as_float();
  if (v.is_tensor() && v.as_tensor().numel() == 1) {
    const Tensor& t = v.as_tensor();
    switch (t.dtype()) {
      case DType::kFloat32: return t.data<float>()[0];
      case DType::kInt32: return t.data<int32_t>()[0];
      case DType::kInt64: return static_cast<double>(t.data<int64_t>()[0]);
      default: break;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "arg '", what, "': expected a number or a one-element float / int tensor; got ",
      v.ToString()));
}

inline absl::StatusOr<int64_t> IntOf(const Value& v, absl::string_view what) {
  ASSIGN_OR_RETURN(double d, NumberOf(v, what));
  if (d != static_cast<double>(static_cast<int64_t>(d))) {
    return absl::InvalidArgumentError(
        absl::StrCat("arg '", what, "': expected an integer; got ", v.ToString()));
  }
  return static_cast<int64_t>(d);
}

// The numbers of a float32 / int32 / int64 tensor of any shape (per-channel parameters).
inline absl::StatusOr<std::vector<double>> NumbersOfTensor(const Tensor& t,
                                                           absl::string_view what) {
  std::vector<double> out;
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DType::kFloat32: out.push_back(t.data<float>()[i]); break;
      case DType::kInt32: out.push_back(t.data<int32_t>()[i]); break;
      case DType::kInt64: out.push_back(static_cast<double>(t.data<int64_t>()[i])); break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(what, ": tensor of dtype ",
                                                       DTypeName(t.dtype()),
                                                       "; expected float32, int32 or int64"));
    }
  }
  return out;
}

inline std::vector<int64_t> ToInts(const std::vector<double>& values) {
  return std::vector<int64_t>(values.begin(), values.end());
}

inline absl::StatusOr<DType> DTypeArg(const ArgReader& r, size_t index, absl::string_view name) {
  ASSIGN_OR_RETURN(Value v, r.Required(index, name));
  if (!v.is_dtype()) {
    return absl::InvalidArgumentError(
        absl::StrCat("arg '", name, "': expected a dtype; got ", v.ToString()));
  }
  return v.as_dtype();
}

inline absl::StatusOr<std::array<int64_t, 2>> Pair(std::vector<int64_t> v) {
  if (v.size() == 1) return std::array<int64_t, 2>{v[0], v[0]};
  if (v.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("expected 1 or 2 ints; got ", v.size()));
  }
  return std::array<int64_t, 2>{v[0], v[1]};
}

// A module attribute as a pair (an int or a list of two), `fallback` when absent.
inline absl::StatusOr<std::array<int64_t, 2>> AttrPair(const Module& m,
                                                       absl::string_view name,
                                                       int64_t fallback) {
  if (m.FindAttribute(name) == nullptr) return std::array<int64_t, 2>{fallback, fallback};
  ASSIGN_OR_RETURN(std::vector<int64_t> v, m.GetInts(name, 2));
  return std::array<int64_t, 2>{v[0], v[1]};
}

inline absl::StatusOr<const Tensor*> OnlyTensorInput(absl::Span<const Value> args,
                                                     const Module& m, size_t count = 1) {
  if (args.size() != count || !args[0].is_tensor() ||
      (count == 2 && !args[1].is_tensor())) {
    return absl::InvalidArgumentError(absl::StrCat(m.type().name(), " takes ", count,
                                                   " Tensor input(s); got ", args.size(),
                                                   " args"));
  }
  return &args[0].as_tensor();
}

// A module attribute or 0-d tensor named `name` (nnq.Quantize keeps scale / zero_point
// as buffers in PyTorch; fuselage may store them as attributes).
inline absl::StatusOr<double> AttrOrTensorNumber(const Module& m, absl::string_view name) {
  if (m.FindAttribute(name) != nullptr) return m.GetFloat(name);
  if (const Tensor* t = m.FindTensor(name)) {
    ASSIGN_OR_RETURN(std::vector<double> v,
                     NumbersOfTensor(*t, absl::StrCat(m.type().name(), " ", name)));
    if (v.size() == 1) return v[0];
  }
  return absl::InvalidArgumentError(absl::StrCat(m.type().name(), ": missing '", name,
                                                 "' (an attribute or a one-element tensor)"));
}

// ---- Shared by the families ----

// A kernel's output in the layout it was computed in (runtime/layout.h).
inline Value ActivationValue(quantized::Activation a) {
  return a.channels_last ? Value::ChannelsLast(std::move(a.tensor)) : Value(std::move(a.tensor));
}

inline FunctionKernel UnaryFunction(
    std::function<absl::StatusOr<Tensor>(const ArgReader&, const Tensor&)> fn) {
  return [fn](const KernelContext&, absl::Span<const Value> args,
              const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ArgReader r(args, kwargs);
    ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
    ASSIGN_OR_RETURN(Tensor y, fn(r, *x));
    return Value(std::move(y));
  };
}

inline absl::StatusOr<Value> ArgumentToValue(const Argument& a) {
  switch (a.kind()) {
    case Argument::Kind::kNone: return Value::None();
    case Argument::Kind::kInt: return Value::Int(a.as_int());
    case Argument::Kind::kFloat: return Value::Float(a.as_float());
    case Argument::Kind::kList: {
      std::vector<Value> items;
      for (const Argument& i : a.items()) {
        ASSIGN_OR_RETURN(Value v, ArgumentToValue(i));
        items.push_back(std::move(v));
      }
      return a.is_tuple() ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
    }
    default: return absl::InvalidArgumentError(absl::StrCat("unexpected ", a.ToString()));
  }
}

}  // namespace quantized_kernels_internal
}  // namespace fuselage

#endif  // FUSELAGE_RUNTIME_QUANTIZED_REGISTER_INTERNAL_H_
