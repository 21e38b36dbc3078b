#include "runtime/float_kernels.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/float_conv.h"
#include "runtime/float_conv_nd.h"
#include "runtime/float_ops.h"
#include "runtime/kernel_args.h"

namespace fuselage {
namespace {

constexpr OpKind kFunction = OpKind::kCallFunction;
constexpr OpKind kMethod = OpKind::kCallMethod;

// ---- Reading module attributes (absent ones take PyTorch's defaults) ------------------

absl::StatusOr<std::vector<int64_t>> IntsAttr(const Module& m, absl::string_view name,
                                              std::vector<int64_t> default_value) {
  const Argument* a = m.FindAttribute(name);
  if (a == nullptr || a->is_none()) return default_value;
  if (a->is_list() && a->items().empty()) return default_value;
  return m.GetInts(name, default_value.size());
}

absl::StatusOr<int64_t> IntAttr(const Module& m, absl::string_view name, int64_t default_value) {
  return m.FindAttribute(name) == nullptr ? default_value : m.GetInt(name);
}

absl::StatusOr<double> FloatAttr(const Module& m, absl::string_view name, double default_value) {
  return m.FindAttribute(name) == nullptr ? default_value : m.GetFloat(name);
}

absl::StatusOr<bool> BoolAttr(const Module& m, absl::string_view name, bool default_value) {
  return m.FindAttribute(name) == nullptr ? default_value : m.GetBool(name);
}

const Tensor* OptionalTensor(const Module& m, absl::string_view name) {
  return m.FindTensor(name);
}

// The single tensor input of a one-input module kernel, float32.
absl::StatusOr<const Tensor*> SingleFloatInput(const Module& m, absl::Span<const Value> args,
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

// ---- Conv / linear / batch norm modules --------------------------------------------

absl::StatusOr<Conv2dParams> ConvParamsOf(const Module& m) {
  Conv2dParams p;
  ASSIGN_OR_RETURN(p.stride, IntsAttr(m, "stride", {1, 1}));
  const Argument* padding = m.FindAttribute("padding");
  if (padding != nullptr && padding->is_string()) {
    if (padding->as_string() != "valid") {
      return absl::UnimplementedError(absl::StrCat(m.type().name(), ": padding='",
                                                   padding->as_string(),
                                                   "' is not supported; use explicit ints"));
    }
  } else {
    ASSIGN_OR_RETURN(p.padding, IntsAttr(m, "padding", {0, 0}));
  }
  ASSIGN_OR_RETURN(p.dilation, IntsAttr(m, "dilation", {1, 1}));
  ASSIGN_OR_RETURN(p.groups, IntAttr(m, "groups", 1));
  const Argument* mode = m.FindAttribute("padding_mode");
  if (mode != nullptr && !(mode->is_string() && mode->as_string() == "zeros")) {
    return absl::UnimplementedError(absl::StrCat(m.type().name(), ": padding_mode ",
                                                 mode->ToString(), " is not supported; only 'zeros'"));
  }
  return p;
}

absl::StatusOr<Tensor> RunConv2dModule(const Module& m, const Tensor& x) {
  ASSIGN_OR_RETURN(const Tensor* weight, m.GetTensor("weight"));
  ASSIGN_OR_RETURN(Conv2dParams params, ConvParamsOf(m));
  return Conv2d(x, *weight, OptionalTensor(m, "bias"), params);
}

// nn.Conv{1,3}d and nn.ConvTranspose{1,2,3}d: the same attributes with one entry per
// spatial dim, plus output_padding for the transposed ones.
absl::StatusOr<Tensor> RunConvNdModule(const Module& m, const Tensor& x, int spatial_dims,
                                       bool transposed) {
  ASSIGN_OR_RETURN(const Tensor* weight, m.GetTensor("weight"));
  const std::vector<int64_t> zeros(spatial_dims, 0), ones(spatial_dims, 1);
  ConvNdParams p;
  ASSIGN_OR_RETURN(p.stride, IntsAttr(m, "stride", ones));
  const Argument* padding = m.FindAttribute("padding");
  if (padding != nullptr && padding->is_string()) {
    if (padding->as_string() != "valid") {
      return absl::UnimplementedError(absl::StrCat(m.type().name(), ": padding='",
                                                   padding->as_string(),
                                                   "' is not supported; use explicit ints"));
    }
    p.padding = zeros;
  } else {
    ASSIGN_OR_RETURN(p.padding, IntsAttr(m, "padding", zeros));
  }
  ASSIGN_OR_RETURN(p.dilation, IntsAttr(m, "dilation", ones));
  if (transposed) {
    ASSIGN_OR_RETURN(p.output_padding, IntsAttr(m, "output_padding", zeros));
  }
  ASSIGN_OR_RETURN(p.groups, IntAttr(m, "groups", 1));
  const Argument* mode = m.FindAttribute("padding_mode");
  if (mode != nullptr && !(mode->is_string() && mode->as_string() == "zeros")) {
    return absl::UnimplementedError(absl::StrCat(m.type().name(), ": padding_mode ",
                                                 mode->ToString(),
                                                 " is not supported; only 'zeros'"));
  }
  const Tensor* bias = OptionalTensor(m, "bias");
  return transposed ? ConvTransposeNd(x, *weight, bias, p, spatial_dims)
                    : ConvNd(x, *weight, bias, p, spatial_dims);
}

absl::StatusOr<Tensor> RunLinearModule(const Module& m, const Tensor& x) {
  ASSIGN_OR_RETURN(const Tensor* weight, m.GetTensor("weight"));
  return Linear(x, *weight, OptionalTensor(m, "bias"));
}

// Eval-mode batch norm; `ranks` lists the input ranks the module type accepts.
absl::StatusOr<Tensor> RunBatchNormModule(const Module& m, const Tensor& x,
                                          std::vector<int64_t> ranks) {
  if (std::find(ranks.begin(), ranks.end(), x.dim()) == ranks.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        m.type().name(), ": expected a ", ranks.size() == 1 ? "" : "2-d or ", ranks.back(),
        "-d input; got ", x.ShapeString()));
  }
  const Tensor* mean = OptionalTensor(m, "running_mean");
  const Tensor* var = OptionalTensor(m, "running_var");
  if (mean == nullptr || var == nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        m.type().name(), ": needs tensors 'running_mean' and 'running_var' (eval mode with "
                         "track_running_stats=True)"));
  }
  ASSIGN_OR_RETURN(double eps, FloatAttr(m, "eps", 1e-5));
  return BatchNorm(x, *mean, *var, OptionalTensor(m, "weight"), OptionalTensor(m, "bias"), eps);
}

// ---- Pool modules and functionals ---------------------------------------------------

absl::StatusOr<Pool2dParams> PoolParamsOfModule(const Module& m) {
  Pool2dParams p;
  ASSIGN_OR_RETURN(p.kernel_size, m.GetInts("kernel_size", 2));
  ASSIGN_OR_RETURN(p.stride, IntsAttr(m, "stride", p.kernel_size));
  ASSIGN_OR_RETURN(p.padding, IntsAttr(m, "padding", {0, 0}));
  ASSIGN_OR_RETURN(p.dilation, IntsAttr(m, "dilation", {1, 1}));
  ASSIGN_OR_RETURN(p.ceil_mode, BoolAttr(m, "ceil_mode", false));
  ASSIGN_OR_RETURN(p.count_include_pad, BoolAttr(m, "count_include_pad", true));
  const Argument* divisor = m.FindAttribute("divisor_override");
  if (divisor != nullptr && !divisor->is_none()) {
    ASSIGN_OR_RETURN(p.divisor_override, m.GetInt("divisor_override"));
    if (p.divisor_override <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(m.type().name(),
                                                     ": divisor_override must be > 0"));
    }
  }
  ASSIGN_OR_RETURN(bool return_indices, BoolAttr(m, "return_indices", false));
  if (return_indices) {
    return absl::UnimplementedError(absl::StrCat(m.type().name(), ": return_indices=True"));
  }
  return p;
}

// output_size: an int, or a list of two entries each an int or None (keep input size).
absl::StatusOr<std::pair<int64_t, int64_t>> AdaptiveOutputSize(const Argument* a,
                                                               absl::string_view what) {
  auto entry = [&](const Argument& e) -> absl::StatusOr<int64_t> {
    if (e.is_none()) return -1;
    if (e.is_int() && e.as_int() >= 0) return e.as_int();
    return absl::InvalidArgumentError(absl::StrCat(what, ": output_size entries must be ints "
                                                   ">= 0 or None; got ", e.ToString()));
  };
  if (a == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, ": missing output_size"));
  if (!a->is_list()) {
    ASSIGN_OR_RETURN(int64_t s, entry(*a));
    return std::make_pair(s, s);
  }
  if (a->items().size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": output_size must have 2 entries; got ",
                                                   a->ToString()));
  }
  ASSIGN_OR_RETURN(int64_t h, entry(a->items()[0]));
  ASSIGN_OR_RETURN(int64_t w, entry(a->items()[1]));
  return std::make_pair(h, w);
}

// The same for a runtime Value.
absl::StatusOr<std::pair<int64_t, int64_t>> AdaptiveOutputSizeValue(const Value& v) {
  auto entry = [&](const Value& e) -> absl::StatusOr<int64_t> {
    if (e.is_none()) return -1;
    if (e.is_int() && e.as_int() >= 0) return e.as_int();
    return absl::InvalidArgumentError(absl::StrCat(
        "arg 'output_size': entries must be ints >= 0 or None; got ", e.ToString()));
  };
  if (!v.is_list()) {
    ASSIGN_OR_RETURN(int64_t s, entry(v));
    return std::make_pair(s, s);
  }
  if (v.items().size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("arg 'output_size': expected 2 entries; got ", v.ToString()));
  }
  ASSIGN_OR_RETURN(int64_t h, entry(v.items()[0]));
  ASSIGN_OR_RETURN(int64_t w, entry(v.items()[1]));
  return std::make_pair(h, w);
}

// ---- Fused (nni.*) modules ----------------------------------------------------------

// The numbered children "0", "1", ... of a fused module, in order (other named children
// are not part of its sequence); InvalidArgument if there is no child "0".
absl::StatusOr<std::vector<const Module*>> FusedParts(const Module& m) {
  std::vector<const Module*> parts;
  for (size_t i = 0;; ++i) {
    const Module* child = m.FindChild(absl::StrCat(i));
    if (child == nullptr) break;
    parts.push_back(child);
  }
  if (parts.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        m.type().name(), ": a fused module holds its parts as children \"0\", \"1\", ...; "
                         "found no child \"0\""));
  }
  return parts;
}

// nni.ConvReLU2d, nni.ConvBnReLU2d, nni.LinearReLU, ...: runs the numbered children in
// order, each through its own kernel. `ends_with_relu` checks the last part is a ReLU, so a
// malformed fused module does not silently skip its activation.
ModuleKernel SequentialFusedModule(bool ends_with_relu) {
  return [ends_with_relu](const KernelContext& ctx, const Module& m, absl::Span<const Value> args,
                          const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ASSIGN_OR_RETURN(std::vector<const Module*> parts, FusedParts(m));
    if (ends_with_relu && parts.back()->type() != Symbol::Intern("nn.ReLU")) {
      return absl::InvalidArgumentError(absl::StrCat(
          m.type().name(), ": last part (child \"", parts.size() - 1, "\") is ",
          parts.back()->type().name(), "; expected nn.ReLU"));
    }
    if (args.size() != 1 || !kwargs.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(m.type().name(), " takes 1 input; got ", args.size()));
    }
    Value value = args[0];
    for (const Module* part : parts) {
      ASSIGN_OR_RETURN(value, ctx.registry.CallModule(ctx, *part, {value}));
    }
    return value;
  };
}

// nni.ConvAdd2d / nni.ConvAddReLU2d: (x, extra) -> [relu](conv(x) + extra), conv = "0".
ModuleKernel ConvAddModule(bool relu) {
  return [relu](const KernelContext& ctx, const Module& m, absl::Span<const Value> args,
                const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    if (args.size() != 2 || !kwargs.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          m.type().name(), " takes 2 inputs (input, extra_input); got ", args.size()));
    }
    const Module* conv = m.FindChild("0");
    if (conv == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(m.type().name(), ": missing child \"0\" (the conv)"));
    }
    if (!args[1].is_tensor()) {
      return absl::InvalidArgumentError(absl::StrCat(m.type().name(), ": extra_input is a ",
                                                     args[1].KindName(), "; expected a Tensor"));
    }
    RETURN_IF_ERROR(ExpectFloatTensor(args[1].as_tensor(), absl::StrCat(m.type().name(), " extra_input")));
    ASSIGN_OR_RETURN(Value conv_out, ctx.registry.CallModule(ctx, *conv, {args[0]}));
    if (!conv_out.is_tensor()) {
      return absl::InvalidArgumentError(absl::StrCat(m.type().name(), ": conv part returned a ",
                                                     conv_out.KindName()));
    }
    const Tensor& y = conv_out.as_tensor();
    const Tensor& extra = args[1].as_tensor();
    if (y.shape() != extra.shape()) {
      return absl::InvalidArgumentError(absl::StrCat(m.type().name(), ": conv output ",
                                                     y.ShapeString(), " and extra_input ",
                                                     extra.ShapeString(), " differ in shape"));
    }
    ASSIGN_OR_RETURN(Tensor sum, Add(y, extra));
    return Value(relu ? Relu(sum) : std::move(sum));
  };
}

// ---- Identity-like modules (any value) ----------------------------------------------

absl::StatusOr<Value> PassThroughModule(const KernelContext&, const Module& m,
                                        absl::Span<const Value> args, const ValueKwargs& kwargs) {
  if (args.size() != 1 || !kwargs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(m.type().name(), " takes 1 input; got ", args.size()));
  }
  return args[0];
}

// ---- Functions ----------------------------------------------------------------------

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

// Python arithmetic on two scalars: int op int stays int, otherwise float.
absl::StatusOr<Value> ScalarArithmetic(const Value& a, const Value& b, bool multiply,
                                       const Value* alpha) {
  if (alpha != nullptr && !alpha->is_number()) {
    return absl::InvalidArgumentError(absl::StrCat("arg 'alpha': expected a number; got ",
                                                   alpha->ToString()));
  }
  if (a.is_int() && b.is_int() && (alpha == nullptr || alpha->is_int())) {
    const int64_t rhs = alpha == nullptr ? b.as_int() : b.as_int() * alpha->as_int();
    return Value::Int(multiply ? a.as_int() * b.as_int() : a.as_int() + rhs);
  }
  const double scale = alpha == nullptr ? 1.0 : alpha->as_float();
  return Value::Float(multiply ? a.as_float() * b.as_float() : a.as_float() + scale * b.as_float());
}

// add / mul with tensors or scalars on either side (operator.add, torch.add, Tensor.add).
FunctionKernel BinaryArithmetic(bool multiply) {
  return [multiply](const KernelContext&, absl::Span<const Value> args,
                    const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ArgReader r(args, kwargs);
    RETURN_IF_ERROR(r.ExpectAtMostPositional(3));
    ASSIGN_OR_RETURN(Value a, r.Required(0, "input"));
    ASSIGN_OR_RETURN(Value b, r.Required(1, "other"));
    const Value* alpha_value = multiply ? nullptr : r.Find(2, "alpha");
    if (alpha_value != nullptr && alpha_value->is_none()) alpha_value = nullptr;
    for (const Value* v : {&a, &b}) {
      if (v->is_tensor()) {
        RETURN_IF_ERROR(ExpectFloatTensor(v->as_tensor(), v == &a ? "arg 'input'" : "arg 'other'"));
      } else if (!v->is_number()) {
        return absl::InvalidArgumentError(absl::StrCat(
            v == &a ? "arg 'input'" : "arg 'other'", ": expected a Tensor or a number; got ",
            v->KindName(), " ", v->ToString()));
      }
    }
    if (!a.is_tensor() && !b.is_tensor()) return ScalarArithmetic(a, b, multiply, alpha_value);
    if (alpha_value != nullptr && !alpha_value->is_number()) {
      return absl::InvalidArgumentError(absl::StrCat("arg 'alpha': expected a number; got ",
                                                     alpha_value->ToString()));
    }
    const float alpha = alpha_value == nullptr ? 1.0f : static_cast<float>(alpha_value->as_float());
    if (a.is_tensor() && b.is_tensor()) {
      ASSIGN_OR_RETURN(Tensor y, multiply ? Mul(a.as_tensor(), b.as_tensor())
                                          : Add(a.as_tensor(), b.as_tensor(), alpha));
      return Value(std::move(y));
    }
    if (a.is_tensor()) {
      const float s = static_cast<float>(b.as_float());
      return Value(multiply ? MulScalar(a.as_tensor(), s) : AddScalar(a.as_tensor(), alpha * s));
    }
    // scalar (op) tensor: a + alpha * t, or a * t.
    const float s = static_cast<float>(a.as_float());
    if (multiply) return Value(MulScalar(b.as_tensor(), s));
    return Value(AddScalar(alpha == 1.0f ? b.as_tensor() : MulScalar(b.as_tensor(), alpha), s));
  };
}

absl::StatusOr<Value> GetItem(const KernelContext&, absl::Span<const Value> args,
                              const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
  ASSIGN_OR_RETURN(Value seq, r.Required(0, "a"));
  ASSIGN_OR_RETURN(Value index, r.Required(1, "b"));
  if (seq.is_tensor()) {
    return absl::UnimplementedError("getitem on a Tensor (indexing / slicing) is not supported");
  }
  if (!seq.is_list()) {
    return absl::InvalidArgumentError(absl::StrCat("getitem: expected a list or tuple; got ",
                                                   seq.KindName()));
  }
  if (!index.is_int()) {
    return absl::InvalidArgumentError(absl::StrCat("getitem: index must be an int; got ",
                                                   index.KindName(), " ", index.ToString()));
  }
  const int64_t size = static_cast<int64_t>(seq.items().size());
  int64_t i = index.as_int();
  if (i < -size || i >= size) {
    return absl::InvalidArgumentError(absl::StrCat("getitem: index ", i, " out of range for a ",
                                                   seq.KindName(), " of ", size));
  }
  if (i < 0) i += size;
  return seq.items()[i];
}

absl::StatusOr<Value> CatKernel(const KernelContext&, absl::Span<const Value> args,
                                const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
  ASSIGN_OR_RETURN(Value list, r.Required(0, "tensors"));
  ASSIGN_OR_RETURN(int64_t dim, r.OptionalInt(1, "dim", 0));
  if (!list.is_list()) {
    return absl::InvalidArgumentError(absl::StrCat("arg 'tensors': expected a list of Tensors; got ",
                                                   list.KindName()));
  }
  std::vector<Tensor> tensors;
  for (const Value& v : list.items()) {
    if (!v.is_tensor()) {
      return absl::InvalidArgumentError(absl::StrCat("arg 'tensors': item is a ", v.KindName(),
                                                     "; expected a Tensor"));
    }
    tensors.push_back(v.as_tensor());
  }
  ASSIGN_OR_RETURN(Tensor y, Cat(tensors, dim));
  return Value(std::move(y));
}

// flatten(input, start_dim, end_dim) on any dtype.
absl::StatusOr<Value> FlattenKernel(const KernelContext&, absl::Span<const Value> args,
                                    const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(3));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(int64_t start, r.OptionalInt(1, "start_dim", 0));
  ASSIGN_OR_RETURN(int64_t end, r.OptionalInt(2, "end_dim", -1));
  ASSIGN_OR_RETURN(Tensor y, Flatten(*x, start, end));
  return Value(std::move(y));
}

// Tensor.view / Tensor.reshape: the shape as varargs (x.view(n, -1)) or one list; also
// torch.reshape(input, shape). Any dtype.
absl::StatusOr<Value> ReshapeKernel(const KernelContext&, absl::Span<const Value> args,
                                    const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  std::vector<int64_t> shape;
  if (args.size() == 2 && args[1].is_list()) {
    ASSIGN_OR_RETURN(shape, ValueToInts(args[1], "shape"));
  } else if (args.size() >= 2) {
    for (size_t i = 1; i < args.size(); ++i) {
      if (!args[i].is_int()) {
        return absl::InvalidArgumentError(absl::StrCat("shape entry ", i - 1, " is a ",
                                                       args[i].KindName(), "; expected an int"));
      }
      shape.push_back(args[i].as_int());
    }
  } else {
    ASSIGN_OR_RETURN(Value s, r.Required(1, "shape"));
    ASSIGN_OR_RETURN(shape, ValueToInts(s, "shape"));
  }
  ASSIGN_OR_RETURN(Tensor y, Reshape(*x, std::move(shape)));
  return Value(std::move(y));
}

// mean(input, dim=None, keepdim=False, dtype=None).
absl::StatusOr<Value> MeanKernel(const KernelContext&, absl::Span<const Value> args,
                                 const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(4));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetFloatTensor(0, "input"));
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, r.OptionalInts(1, "dim", 0, {}));
  ASSIGN_OR_RETURN(bool keepdim, r.OptionalBool(2, "keepdim", false));
  const Value* dtype = r.Find(3, "dtype");
  if (dtype != nullptr && !dtype->is_none() &&
      !(dtype->is_dtype() && dtype->as_dtype() == DType::kFloat32)) {
    return absl::UnimplementedError(absl::StrCat("mean: dtype ", dtype->ToString()));
  }
  ASSIGN_OR_RETURN(Tensor y, Mean(*x, std::move(dims), keepdim));
  return Value(std::move(y));
}

// Tensor.size(dim=None): a tuple of ints, or one int.
absl::StatusOr<Value> SizeKernel(const KernelContext&, absl::Span<const Value> args,
                                 const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  const Value* dim = r.Find(1, "dim");
  if (dim == nullptr || dim->is_none()) {
    std::vector<Value> sizes;
    for (int64_t d : x->shape()) sizes.push_back(Value::Int(d));
    return Value::Tuple(std::move(sizes));
  }
  if (!dim->is_int()) {
    return absl::InvalidArgumentError(absl::StrCat("arg 'dim': expected an int; got ",
                                                   dim->ToString()));
  }
  ASSIGN_OR_RETURN(int64_t d, NormalizeDim(dim->as_int(), x->dim()));
  if (x->dim() == 0) return absl::InvalidArgumentError("size(dim) of a 0-d tensor");
  return Value::Int(x->shape()[d]);
}

// Tensor.contiguous(): our tensors are always contiguous.
absl::StatusOr<Value> ContiguousKernel(const KernelContext&, absl::Span<const Value> args,
                                       const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  return Value(*x);
}

// F.dropout(input, p=0.5, training=True, inplace=False): the identity when training is
// False (how FX records an eval-mode model); random dropout is not something a reference
// interpreter should do, so training=True is Unimplemented.
absl::StatusOr<Value> DropoutKernel(const KernelContext&, absl::Span<const Value> args,
                                    const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(4));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(bool training, r.OptionalBool(2, "training", true));
  if (training) {
    return absl::UnimplementedError("dropout with training=True (only eval mode runs)");
  }
  return Value(*x);
}

absl::StatusOr<Conv2dParams> ConvParamsOfArgs(const ArgReader& r) {
  Conv2dParams p;
  ASSIGN_OR_RETURN(p.stride, r.OptionalInts(3, "stride", 2, {1, 1}));
  const Value* padding = r.Find(4, "padding");
  if (padding != nullptr && padding->is_string()) {
    if (padding->as_string() != "valid") {
      return absl::UnimplementedError(absl::StrCat("conv2d: padding='", padding->as_string(),
                                                   "' is not supported; use explicit ints"));
    }
  } else {
    ASSIGN_OR_RETURN(p.padding, r.OptionalInts(4, "padding", 2, {0, 0}));
  }
  ASSIGN_OR_RETURN(p.dilation, r.OptionalInts(5, "dilation", 2, {1, 1}));
  ASSIGN_OR_RETURN(p.groups, r.OptionalInt(6, "groups", 1));
  return p;
}

absl::StatusOr<Pool2dParams> PoolParamsOfArgs(const ArgReader& r, bool max_pool) {
  Pool2dParams p;
  ASSIGN_OR_RETURN(p.kernel_size, r.OptionalInts(1, "kernel_size", 2, {}));
  if (p.kernel_size.empty()) return absl::InvalidArgumentError("missing arg 'kernel_size'");
  ASSIGN_OR_RETURN(p.stride, r.OptionalInts(2, "stride", 2, p.kernel_size));
  if (p.stride.empty()) p.stride = p.kernel_size;  // stride=[] means "kernel_size" too
  ASSIGN_OR_RETURN(p.padding, r.OptionalInts(3, "padding", 2, {0, 0}));
  if (max_pool) {
    ASSIGN_OR_RETURN(p.dilation, r.OptionalInts(4, "dilation", 2, {1, 1}));
    ASSIGN_OR_RETURN(p.ceil_mode, r.OptionalBool(5, "ceil_mode", false));
    ASSIGN_OR_RETURN(bool return_indices, r.OptionalBool(6, "return_indices", false));
    if (return_indices) return absl::UnimplementedError("max_pool2d: return_indices=True");
  } else {
    ASSIGN_OR_RETURN(p.ceil_mode, r.OptionalBool(4, "ceil_mode", false));
    ASSIGN_OR_RETURN(p.count_include_pad, r.OptionalBool(5, "count_include_pad", true));
    ASSIGN_OR_RETURN(p.divisor_override, r.OptionalInt(6, "divisor_override", 0));
  }
  return p;
}

struct NamedModuleKernel {
  const char* type;
  ModuleKernel kernel;
};
struct NamedFunctionKernel {
  OpKind op;
  const char* target;
  FunctionKernel kernel;
};

std::vector<NamedModuleKernel> ModuleKernels() {
  auto relu = UnaryModule([](const Module&, const Tensor& x) -> absl::StatusOr<Tensor> {
    return Relu(x);
  });
  return {
      {"nn.Conv2d", UnaryModule(RunConv2dModule)},
      {"nn.Linear", UnaryModule(RunLinearModule)},
      {"nn.BatchNorm2d", UnaryModule([](const Module& m, const Tensor& x) {
         return RunBatchNormModule(m, x, {4});
       })},
      {"nn.BatchNorm1d", UnaryModule([](const Module& m, const Tensor& x) {
         return RunBatchNormModule(m, x, {2, 3});
       })},
      {"nn.BatchNorm3d", UnaryModule([](const Module& m, const Tensor& x) {
         return RunBatchNormModule(m, x, {5});
       })},
      {"nn.Conv1d", UnaryModule([](const Module& m, const Tensor& x) {
         return RunConvNdModule(m, x, 1, /*transposed=*/false);
       })},
      {"nn.Conv3d", UnaryModule([](const Module& m, const Tensor& x) {
         return RunConvNdModule(m, x, 3, /*transposed=*/false);
       })},
      {"nn.ConvTranspose1d", UnaryModule([](const Module& m, const Tensor& x) {
         return RunConvNdModule(m, x, 1, /*transposed=*/true);
       })},
      {"nn.ConvTranspose2d", UnaryModule([](const Module& m, const Tensor& x) {
         return RunConvNdModule(m, x, 2, /*transposed=*/true);
       })},
      {"nn.ConvTranspose3d", UnaryModule([](const Module& m, const Tensor& x) {
         return RunConvNdModule(m, x, 3, /*transposed=*/true);
       })},
      {"nn.ReLU", relu},
      {"nn.ReLU6", UnaryModule([](const Module&, const Tensor& x) -> absl::StatusOr<Tensor> {
         return Hardtanh(x, 0.0f, 6.0f);
       })},
      {"nn.Hardtanh", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(double lo, FloatAttr(m, "min_val", -1.0));
         ASSIGN_OR_RETURN(double hi, FloatAttr(m, "max_val", 1.0));
         if (lo > hi) {
           return absl::InvalidArgumentError(absl::StrCat("nn.Hardtanh: min_val ", lo,
                                                          " > max_val ", hi));
         }
         return Hardtanh(x, static_cast<float>(lo), static_cast<float>(hi));
       })},
      {"nn.Hardswish", UnaryModule([](const Module&, const Tensor& x) -> absl::StatusOr<Tensor> {
         return Hardswish(x);
       })},
      {"nn.Hardsigmoid", UnaryModule([](const Module&, const Tensor& x) -> absl::StatusOr<Tensor> {
         return Hardsigmoid(x);
       })},
      {"nn.Sigmoid", UnaryModule([](const Module&, const Tensor& x) -> absl::StatusOr<Tensor> {
         return Sigmoid(x);
       })},
      {"nn.MaxPool2d", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(Pool2dParams p, PoolParamsOfModule(m));
         return MaxPool2d(x, p);
       })},
      {"nn.AvgPool2d", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(Pool2dParams p, PoolParamsOfModule(m));
         return AvgPool2d(x, p);
       })},
      {"nn.AdaptiveAvgPool2d",
       UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(auto size, AdaptiveOutputSize(m.FindAttribute("output_size"),
                                                        m.type().name()));
         return AdaptiveAvgPool2d(x, size.first, size.second);
       })},
      {"nn.Flatten", [](const KernelContext&, const Module& m, absl::Span<const Value> args,
                        const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
         if (args.size() != 1 || !kwargs.empty() || !args[0].is_tensor()) {
           return absl::InvalidArgumentError("nn.Flatten takes 1 Tensor input");
         }
         ASSIGN_OR_RETURN(int64_t start, IntAttr(m, "start_dim", 1));
         ASSIGN_OR_RETURN(int64_t end, IntAttr(m, "end_dim", -1));
         ASSIGN_OR_RETURN(Tensor y, Flatten(args[0].as_tensor(), start, end));
         return Value(std::move(y));
       }},
      {"nn.Identity", PassThroughModule},
      {"nn.Dropout", PassThroughModule},
      {"nni.ConvReLU2d", SequentialFusedModule(true)},
      {"nni.ConvBn2d", SequentialFusedModule(false)},
      {"nni.ConvBnReLU2d", SequentialFusedModule(true)},
      {"nni.BNReLU2d", SequentialFusedModule(true)},
      {"nni.ConvReLU1d", SequentialFusedModule(true)},
      {"nni.ConvReLU3d", SequentialFusedModule(true)},
      {"nni.ConvBn1d", SequentialFusedModule(false)},
      {"nni.ConvBn3d", SequentialFusedModule(false)},
      {"nni.ConvBnReLU1d", SequentialFusedModule(true)},
      {"nni.ConvBnReLU3d", SequentialFusedModule(true)},
      {"nni.BNReLU3d", SequentialFusedModule(true)},
      {"nni.LinearReLU", SequentialFusedModule(true)},
      {"nni.LinearBn1d", SequentialFusedModule(false)},
      {"nni.ConvAdd2d", ConvAddModule(false)},
      {"nni.ConvAddReLU2d", ConvAddModule(true)},
  };
}

std::vector<NamedFunctionKernel> FunctionKernels() {
  auto relu = UnaryFunction([](const Tensor& x, const ArgReader&) -> absl::StatusOr<Tensor> {
    return Relu(x);
  });
  auto relu6 = UnaryFunction([](const Tensor& x, const ArgReader&) -> absl::StatusOr<Tensor> {
    return Hardtanh(x, 0.0f, 6.0f);
  });
  auto hardtanh = UnaryFunction([](const Tensor& x, const ArgReader& r) -> absl::StatusOr<Tensor> {
    ASSIGN_OR_RETURN(double lo, r.OptionalFloat(1, "min_val", -1.0));
    ASSIGN_OR_RETURN(double hi, r.OptionalFloat(2, "max_val", 1.0));
    if (lo > hi) {
      return absl::InvalidArgumentError(absl::StrCat("hardtanh: min_val ", lo, " > max_val ", hi));
    }
    return Hardtanh(x, static_cast<float>(lo), static_cast<float>(hi));
  });
  // torch.clamp(input, min=None, max=None) / Tensor.clamp: number bounds; PyTorch refuses
  // two None bounds, and so do we.
  auto clamp = UnaryFunction([](const Tensor& x, const ArgReader& r) -> absl::StatusOr<Tensor> {
    RETURN_IF_ERROR(r.ExpectAtMostPositional(3));
    std::optional<float> bounds[2];
    const char* names[2] = {"min", "max"};
    for (int i = 0; i < 2; ++i) {
      const Value* v = r.Find(1 + i, names[i]);
      if (v == nullptr || v->is_none()) continue;
      if (!v->is_number()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "clamp: '", names[i], "' must be a number or None (tensor bounds are not supported)"));
      }
      bounds[i] = static_cast<float>(v->as_float());
    }
    if (!bounds[0].has_value() && !bounds[1].has_value()) {
      return absl::InvalidArgumentError("clamp: at least one of 'min' or 'max' must not be None");
    }
    return Clamp(x, bounds[0], bounds[1]);
  });
  auto hardswish = UnaryFunction([](const Tensor& x, const ArgReader&) -> absl::StatusOr<Tensor> {
    return Hardswish(x);
  });
  auto hardsigmoid = UnaryFunction([](const Tensor& x, const ArgReader&) -> absl::StatusOr<Tensor> {
    return Hardsigmoid(x);
  });
  auto sigmoid = UnaryFunction([](const Tensor& x, const ArgReader&) -> absl::StatusOr<Tensor> {
    return Sigmoid(x);
  });
  auto conv2d = UnaryFunction([](const Tensor& x, const ArgReader& r) -> absl::StatusOr<Tensor> {
    ASSIGN_OR_RETURN(const Tensor* weight, r.GetFloatTensor(1, "weight"));
    ASSIGN_OR_RETURN(const Tensor* bias, r.OptionalFloatTensor(2, "bias"));
    ASSIGN_OR_RETURN(Conv2dParams p, ConvParamsOfArgs(r));
    return Conv2d(x, *weight, bias, p);
  });
  auto linear = UnaryFunction([](const Tensor& x, const ArgReader& r) -> absl::StatusOr<Tensor> {
    ASSIGN_OR_RETURN(const Tensor* weight, r.GetFloatTensor(1, "weight"));
    ASSIGN_OR_RETURN(const Tensor* bias, r.OptionalFloatTensor(2, "bias"));
    return Linear(x, *weight, bias);
  });
  auto max_pool = UnaryFunction([](const Tensor& x, const ArgReader& r) -> absl::StatusOr<Tensor> {
    ASSIGN_OR_RETURN(Pool2dParams p, PoolParamsOfArgs(r, true));
    return MaxPool2d(x, p);
  });
  auto avg_pool = UnaryFunction([](const Tensor& x, const ArgReader& r) -> absl::StatusOr<Tensor> {
    ASSIGN_OR_RETURN(Pool2dParams p, PoolParamsOfArgs(r, false));
    return AvgPool2d(x, p);
  });
  auto adaptive_avg_pool =
      UnaryFunction([](const Tensor& x, const ArgReader& r) -> absl::StatusOr<Tensor> {
        ASSIGN_OR_RETURN(Value size_value, r.Required(1, "output_size"));
        ASSIGN_OR_RETURN(auto size, AdaptiveOutputSizeValue(size_value));
        return AdaptiveAvgPool2d(x, size.first, size.second);
      });
  const FunctionKernel add = BinaryArithmetic(false);
  const FunctionKernel mul = BinaryArithmetic(true);
  return {
      {kFunction, "operator.add", add},
      {kFunction, "torch.add", add},
      {kMethod, "add", add},
      {kFunction, "operator.mul", mul},
      {kFunction, "torch.mul", mul},
      {kMethod, "mul", mul},
      {kFunction, "operator.getitem", GetItem},
      {kFunction, "torch.cat", CatKernel},
      {kFunction, "torch.flatten", FlattenKernel},
      {kMethod, "flatten", FlattenKernel},
      {kMethod, "view", ReshapeKernel},
      {kMethod, "reshape", ReshapeKernel},
      {kFunction, "torch.reshape", ReshapeKernel},
      {kFunction, "torch.mean", MeanKernel},
      {kMethod, "mean", MeanKernel},
      {kMethod, "size", SizeKernel},
      {kMethod, "contiguous", ContiguousKernel},
      {kFunction, "torch.nn.functional.dropout", DropoutKernel},
      {kFunction, "torch.relu", relu},
      {kFunction, "torch.nn.functional.relu", relu},
      {kMethod, "relu", relu},
      {kFunction, "torch.nn.functional.relu6", relu6},
      {kFunction, "torch.nn.functional.hardtanh", hardtanh},
      // In place is out of place here: the interpreter's values are never aliased.
      {kFunction, "torch.nn.functional.hardtanh_", hardtanh},
      {kFunction, "torch.clamp", clamp},
      {kMethod, "clamp", clamp},
      {kFunction, "torch.nn.functional.hardswish", hardswish},
      {kFunction, "torch.nn.functional.hardsigmoid", hardsigmoid},
      {kFunction, "torch.sigmoid", sigmoid},
      {kMethod, "sigmoid", sigmoid},
      {kFunction, "torch.nn.functional.conv2d", conv2d},
      {kFunction, "torch.nn.functional.linear", linear},
      {kFunction, "torch.nn.functional.max_pool2d", max_pool},
      {kFunction, "torch.nn.functional.avg_pool2d", avg_pool},
      {kFunction, "torch.nn.functional.adaptive_avg_pool2d", adaptive_avg_pool},
  };
}

}  // namespace

absl::Status RegisterFloatKernels(KernelRegistry& registry) {
  std::vector<NamedModuleKernel> modules = ModuleKernels();
  std::vector<NamedFunctionKernel> functions = FunctionKernels();
  // All or nothing: check for clashes before registering anything.
  for (const NamedModuleKernel& k : modules) {
    if (registry.FindModule(Symbol::Intern(k.type)) != nullptr) {
      return absl::AlreadyExistsError(
          absl::StrCat("RegisterFloatKernels: module type '", k.type, "' already has a kernel"));
    }
  }
  for (const NamedFunctionKernel& k : functions) {
    if (registry.FindFunction(k.op, Symbol::Intern(k.target)) != nullptr) {
      return absl::AlreadyExistsError(absl::StrCat("RegisterFloatKernels: ", OpKindName(k.op),
                                                   " '", k.target, "' already has a kernel"));
    }
  }
  for (NamedModuleKernel& k : modules) {
    RETURN_IF_ERROR(registry.RegisterModule(k.type, std::move(k.kernel)));
  }
  for (NamedFunctionKernel& k : functions) {
    RETURN_IF_ERROR(registry.RegisterFunction(k.op, k.target, std::move(k.kernel)));
  }
  return absl::OkStatus();
}

}  // namespace fuselage
