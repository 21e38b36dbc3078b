#include "runtime/float_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
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

// The four arithmetic ops of operator.* / torch.* / Tensor.*.
enum class BinaryOp { kAdd, kSub, kMul, kDiv };

// Python arithmetic on two scalars: int op int stays int (true division excepted),
// otherwise float. `alpha` scales the second operand of add / sub.
absl::StatusOr<Value> ScalarArithmetic(const Value& a, const Value& b, BinaryOp op,
                                       const Value* alpha) {
  if (alpha != nullptr && !alpha->is_number()) {
    return absl::InvalidArgumentError(absl::StrCat("arg 'alpha': expected a number; got ",
                                                   alpha->ToString()));
  }
  if (a.is_int() && b.is_int() && (alpha == nullptr || alpha->is_int()) &&
      op != BinaryOp::kDiv) {
    const int64_t rhs = alpha == nullptr ? b.as_int() : b.as_int() * alpha->as_int();
    switch (op) {
      case BinaryOp::kAdd: return Value::Int(a.as_int() + rhs);
      case BinaryOp::kSub: return Value::Int(a.as_int() - rhs);
      default: return Value::Int(a.as_int() * b.as_int());
    }
  }
  const double scale = alpha == nullptr ? 1.0 : alpha->as_float();
  switch (op) {
    case BinaryOp::kAdd: return Value::Float(a.as_float() + scale * b.as_float());
    case BinaryOp::kSub: return Value::Float(a.as_float() - scale * b.as_float());
    case BinaryOp::kMul: return Value::Float(a.as_float() * b.as_float());
    case BinaryOp::kDiv:
      if (b.as_float() == 0.0) return absl::InvalidArgumentError("division by zero");
      return Value::Float(a.as_float() / b.as_float());
  }
  return absl::InternalError("unknown binary op");
}

// t op s for a tensor t and a number s; `tensor_first` says which side t is on.
Tensor TensorScalarArithmetic(const Tensor& t, float s, bool tensor_first, BinaryOp op,
                              float alpha) {
  switch (op) {
    case BinaryOp::kAdd:
      if (tensor_first) return AddScalar(t, alpha * s);
      return AddScalar(alpha == 1.0f ? t : MulScalar(t, alpha), s);  // s + alpha * t
    case BinaryOp::kSub:
      if (tensor_first) return AddScalar(t, -alpha * s);
      return AddScalar(MulScalar(t, -alpha), s);  // s - alpha * t
    case BinaryOp::kMul:
      return MulScalar(t, s);
    case BinaryOp::kDiv:
      return tensor_first ? DivScalar(t, s) : RDivScalar(s, t);
  }
  return t;
}

// add / sub / mul / div with tensors (broadcasting) or numbers on either side
// (operator.add, torch.add, Tensor.add, ...; add and sub take alpha, torch.div takes
// rounding_mode=None only).
FunctionKernel BinaryArithmetic(BinaryOp op) {
  return [op](const KernelContext&, absl::Span<const Value> args,
              const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ArgReader r(args, kwargs);
    RETURN_IF_ERROR(r.ExpectAtMostPositional(3));
    ASSIGN_OR_RETURN(Value a, r.Required(0, "input"));
    ASSIGN_OR_RETURN(Value b, r.Required(1, "other"));
    const bool has_alpha = op == BinaryOp::kAdd || op == BinaryOp::kSub;
    const Value* alpha_value = has_alpha ? r.Find(2, "alpha") : nullptr;
    if (alpha_value != nullptr && alpha_value->is_none()) alpha_value = nullptr;
    if (op == BinaryOp::kDiv) {
      const Value* rounding = r.Find(2, "rounding_mode");
      if (rounding != nullptr && !rounding->is_none()) {
        return absl::UnimplementedError(absl::StrCat("div: rounding_mode ", rounding->ToString(),
                                                     " (only true division runs)"));
      }
    }
    for (const Value* v : {&a, &b}) {
      if (v->is_tensor()) {
        RETURN_IF_ERROR(ExpectFloatTensor(v->as_tensor(), v == &a ? "arg 'input'" : "arg 'other'"));
      } else if (!v->is_number()) {
        return absl::InvalidArgumentError(absl::StrCat(
            v == &a ? "arg 'input'" : "arg 'other'", ": expected a Tensor or a number; got ",
            v->KindName(), " ", v->ToString()));
      }
    }
    if (!a.is_tensor() && !b.is_tensor()) return ScalarArithmetic(a, b, op, alpha_value);
    if (alpha_value != nullptr && !alpha_value->is_number()) {
      return absl::InvalidArgumentError(absl::StrCat("arg 'alpha': expected a number; got ",
                                                     alpha_value->ToString()));
    }
    const float alpha = alpha_value == nullptr ? 1.0f : static_cast<float>(alpha_value->as_float());
    if (a.is_tensor() && b.is_tensor()) {
      const Tensor& x = a.as_tensor();
      const Tensor& y = b.as_tensor();
      absl::StatusOr<Tensor> out;
      switch (op) {
        case BinaryOp::kAdd: out = Add(x, y, alpha); break;
        case BinaryOp::kSub: out = Add(x, y, -alpha); break;  // x + (-alpha) y == x - alpha y
        case BinaryOp::kMul: out = Mul(x, y); break;
        case BinaryOp::kDiv: out = Div(x, y); break;
      }
      if (!out.ok()) return out.status();
      return Value(*std::move(out));
    }
    if (a.is_tensor()) {
      return Value(TensorScalarArithmetic(a.as_tensor(), static_cast<float>(b.as_float()),
                                          /*tensor_first=*/true, op, alpha));
    }
    return Value(TensorScalarArithmetic(b.as_tensor(), static_cast<float>(a.as_float()),
                                        /*tensor_first=*/false, op, alpha));
  };
}

// Python's slice.indices(size) for step > 0: start, step and element count, with negative
// bounds counted from the end and out-of-range bounds clamped (as `x[-100:100]` does).
struct SliceRange {
  int64_t start = 0;
  int64_t step = 1;
  int64_t count = 0;
};

absl::StatusOr<SliceRange> ResolveSlice(const Value::SliceParts& s, int64_t size) {
  SliceRange range;
  range.step = s.step.value_or(1);
  if (range.step <= 0) {
    // torch refuses negative steps on tensors too ("step must be greater than zero").
    return absl::InvalidArgumentError(absl::StrCat(
        "getitem: slice step ", range.step, "; expected a step greater than zero"));
  }
  const auto clamp = [size](std::optional<int64_t> bound, int64_t absent) {
    if (!bound.has_value()) return absent;
    int64_t b = *bound < 0 ? *bound + size : *bound;
    return std::min(std::max<int64_t>(b, 0), size);
  };
  range.start = clamp(s.start, 0);
  const int64_t stop = clamp(s.stop, size);
  range.count = stop > range.start ? (stop - range.start + range.step - 1) / range.step : 0;
  return range;
}

// seq[slice] on a list or tuple (`x.shape[-2:]`): the same kind of sequence.
absl::StatusOr<Value> SliceSequence(const Value& seq, const Value::SliceParts& parts) {
  const auto items = seq.items();
  ASSIGN_OR_RETURN(SliceRange range, ResolveSlice(parts, static_cast<int64_t>(items.size())));
  std::vector<Value> picked;
  picked.reserve(range.count);
  for (int64_t k = 0; k < range.count; ++k) picked.push_back(items[range.start + k * range.step]);
  return seq.is_tuple() ? Value::Tuple(std::move(picked)) : Value::List(std::move(picked));
}

// Tensor basic indexing (`x[..., 1:, None, 0]`): each index item is an int (drops the dim),
// a slice (keeps it, step > 0), None (a new dim of 1) or Ellipsis (as many full dims as
// the other items leave). Any dtype: the result is a copy of the selected elements.
absl::StatusOr<Value> IndexTensor(const Tensor& x, const Value& index) {
  if (x.qparams().scheme == QScheme::kPerChannelAffine) {
    // Its scales follow one axis, which indexing may drop or cut.
    return absl::UnimplementedError("getitem on a per-channel quantized tensor is not supported");
  }
  std::vector<Value> items;
  if (index.is_tuple()) {
    items.assign(index.items().begin(), index.items().end());
  } else {
    items.push_back(index);
  }
  int64_t consumed = 0;
  int ellipses = 0;
  for (const Value& item : items) {
    if (item.is_int() || item.is_slice()) {
      ++consumed;
    } else if (item.is_ellipsis()) {
      ++ellipses;
    } else if (!item.is_none()) {
      return absl::UnimplementedError(absl::StrCat(
          "getitem on a Tensor: index ", item.KindName(), " ", item.ToString(),
          " is not supported (ints, slices, None and Ellipsis are)"));
    }
  }
  if (ellipses > 1) {
    return absl::InvalidArgumentError("getitem: an index can only have a single ellipsis");
  }
  if (consumed > x.dim()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "getitem: too many indices for a tensor of dimension ", x.dim(), " (", consumed, ")"));
  }
  // Per input dim: first index, step and count; `keep` is false for an int index.
  struct DimPick {
    int64_t start, step, count;
  };
  std::vector<DimPick> picks;
  Shape out_shape;
  const auto full = [&](int64_t d) {
    picks.push_back({0, 1, x.shape()[d]});
    out_shape.push_back(x.shape()[d]);
  };
  int64_t d = 0;
  for (const Value& item : items) {
    if (item.is_none()) {
      out_shape.push_back(1);
    } else if (item.is_ellipsis()) {
      for (int64_t k = 0; k < x.dim() - consumed; ++k) full(d++);
    } else if (item.is_int()) {
      const int64_t size = x.shape()[d];
      int64_t i = item.as_int();
      if (i < -size || i >= size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "getitem: index ", i, " is out of bounds for dimension ", d, " with size ", size));
      }
      picks.push_back({i < 0 ? i + size : i, 1, 1});
      ++d;
    } else {
      ASSIGN_OR_RETURN(SliceRange range, ResolveSlice(item.as_slice(), x.shape()[d]));
      picks.push_back({range.start, range.step, range.count});
      out_shape.push_back(range.count);
      ++d;
    }
  }
  while (d < x.dim()) full(d++);
  ASSIGN_OR_RETURN(Tensor out, Tensor::Uninitialized(x.dtype(), out_shape, x.qparams()));
  if (out.numel() == 0) return Value(std::move(out));
  // Row-major strides (in elements) of x; then an odometer over the picked elements.
  std::vector<int64_t> stride(x.dim(), 1);
  for (int64_t k = x.dim() - 2; k >= 0; --k) stride[k] = stride[k + 1] * x.shape()[k + 1];
  const size_t element = DTypeSize(x.dtype());
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(out.mutable_raw_data());
  std::vector<int64_t> at(x.dim(), 0);
  for (int64_t n = 0; n < out.numel(); ++n) {
    int64_t offset = 0;
    for (int64_t k = 0; k < x.dim(); ++k) {
      offset += (picks[k].start + at[k] * picks[k].step) * stride[k];
    }
    std::memcpy(dst + n * element, src + offset * element, element);
    for (int64_t k = x.dim() - 1; k >= 0; --k) {
      if (++at[k] < picks[k].count) break;
      at[k] = 0;
    }
  }
  return Value(std::move(out));
}

// torch.narrow(input, dim, start, length) / Tensor.narrow: `length` entries of `dim` from
// `start` (negative counts from the end); unlike a slice, a range past the end is an
// error, as in torch. Any dtype.
absl::StatusOr<Value> NarrowKernel(const KernelContext&, absl::Span<const Value> args,
                                   const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(4));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(int64_t dim_arg, r.GetInt(1, "dim"));
  ASSIGN_OR_RETURN(int64_t start, r.GetInt(2, "start"));
  ASSIGN_OR_RETURN(int64_t length, r.GetInt(3, "length"));
  if (x->dim() == 0) return absl::InvalidArgumentError("narrow: the input is a 0-dim tensor");
  ASSIGN_OR_RETURN(const int64_t dim, NormalizeDim(dim_arg, x->dim()));
  const int64_t size = x->shape()[dim];
  if (start < -size || start > size) {
    return absl::InvalidArgumentError(absl::StrCat("narrow: start ", start,
                                                   " is out of range for dim ", dim,
                                                   " of size ", size));
  }
  if (start < 0) start += size;
  if (length < 0 || start + length > size) {
    return absl::InvalidArgumentError(absl::StrCat("narrow: start ", start, " + length ",
                                                   length, " exceeds dim ", dim, " of size ",
                                                   size));
  }
  std::vector<Value> index(dim, Value::Slice({}));
  index.push_back(Value::Slice({start, start + length, std::nullopt}));
  return IndexTensor(*x, Value::Tuple(std::move(index)));
}

absl::StatusOr<Value> GetItem(const KernelContext&, absl::Span<const Value> args,
                              const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
  ASSIGN_OR_RETURN(Value seq, r.Required(0, "a"));
  ASSIGN_OR_RETURN(Value index, r.Required(1, "b"));
  if (seq.is_tensor()) return IndexTensor(seq.as_tensor(), index);
  if (!seq.is_list()) {
    return absl::InvalidArgumentError(absl::StrCat("getitem: expected a list or tuple; got ",
                                                   seq.KindName()));
  }
  if (index.is_slice()) return SliceSequence(seq, index.as_slice());
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

// F.pixel_shuffle(input, upscale_factor) / F.pixel_unshuffle(input,
// downscale_factor) on any dtype.
template <absl::StatusOr<Tensor> (*op)(const Tensor&, int64_t)>
absl::StatusOr<Value> PixelShuffleKernel(const KernelContext&, absl::Span<const Value> args,
                                         const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(int64_t factor,
                   r.GetInt(1, op == &PixelShuffle ? "upscale_factor" : "downscale_factor"));
  ASSIGN_OR_RETURN(Tensor y, op(*x, factor));
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

// builtins.getattr(x, "shape"), as torch.fx records `x.shape`: the sizes as a tuple of
// ints (what x.size() gives; torch.Size is a tuple). Other attributes are not known here.
absl::StatusOr<Value> GetAttrKernel(const KernelContext&, absl::Span<const Value> args,
                                    const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
  ASSIGN_OR_RETURN(Value object, r.Required(0, "object"));
  ASSIGN_OR_RETURN(Value name, r.Required(1, "name"));
  if (!name.is_string() || name.as_string() != "shape" || !object.is_tensor()) {
    return absl::UnimplementedError(absl::StrCat(
        "getattr(", object.KindName(), ", ", name.ToString(),
        "): only a tensor's 'shape' is supported"));
  }
  std::vector<Value> sizes;
  for (int64_t d : object.as_tensor().shape()) sizes.push_back(Value::Int(d));
  return Value::Tuple(std::move(sizes));
}

// Tensor.dim(): the number of dimensions.
absl::StatusOr<Value> DimKernel(const KernelContext&, absl::Span<const Value> args,
                                const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(1));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  return Value::Int(x->dim());
}

// operator.floordiv on ints (shape arithmetic: `h // 2`), rounding toward minus infinity
// as Python does.
absl::StatusOr<Value> FloorDivKernel(const KernelContext&, absl::Span<const Value> args,
                                     const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
  ASSIGN_OR_RETURN(Value a, r.Required(0, "a"));
  ASSIGN_OR_RETURN(Value b, r.Required(1, "b"));
  if (!a.is_int() || !b.is_int()) {
    return absl::UnimplementedError(absl::StrCat("floordiv: only ints are supported; got ",
                                                 a.KindName(), " and ", b.KindName()));
  }
  if (b.as_int() == 0) return absl::InvalidArgumentError("floordiv: integer division by zero");
  const int64_t q = a.as_int() / b.as_int();
  const bool inexact = q * b.as_int() != a.as_int();
  return Value::Int(inexact && ((a.as_int() < 0) != (b.as_int() < 0)) ? q - 1 : q);
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

// ---- Activations, norms, softmax, resampling (the ops of torchvision's newer models) ----

// An elementwise function of one float tensor and no parameters, as a function kernel.
template <typename Fn>
FunctionKernel Elementwise(Fn fn) {
  return UnaryFunction([fn](const Tensor& x, const ArgReader&) -> absl::StatusOr<Tensor> {
    return fn(x);
  });
}

// GELU's `approximate`: "none" (erf) or "tanh"; true for tanh.
absl::StatusOr<bool> GeluTanh(absl::string_view approximate) {
  if (approximate == "none") return false;
  if (approximate == "tanh") return true;
  return absl::InvalidArgumentError(absl::StrCat("gelu: approximate is '", approximate,
                                                 "'; expected 'none' or 'tanh'"));
}

// softmax's dim=None: PyTorch's legacy _get_softmax_dim (0 for 0-, 1- and 3-d inputs).
int64_t LegacySoftmaxDim(const Tensor& x) {
  return (x.dim() == 0 || x.dim() == 1 || x.dim() == 3) ? 0 : 1;
}

// Instance norm of an [N, C, ...] input of rank `batched_rank` (or one less: unbatched,
// run as a batch of one), with the input's statistics, or the running ones when
// `running_mean` / `running_var` are given (eval with track_running_stats).
absl::StatusOr<Tensor> RunInstanceNorm(const Tensor& x, int64_t batched_rank,
                                       const Tensor* running_mean, const Tensor* running_var,
                                       const Tensor* weight, const Tensor* bias, double eps,
                                       absl::string_view what) {
  if (batched_rank > 0 && x.dim() != batched_rank && x.dim() != batched_rank - 1) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expected a ", batched_rank, "-d or ",
                                                   batched_rank - 1, "-d input; got ",
                                                   x.ShapeString()));
  }
  Tensor batched = x;
  if (batched_rank > 0 && x.dim() == batched_rank - 1) {
    std::vector<int64_t> shape(x.shape().begin(), x.shape().end());
    shape.insert(shape.begin(), 1);
    ASSIGN_OR_RETURN(batched, x.Reshaped(shape));
  }
  Tensor y;
  if (running_mean != nullptr && running_var != nullptr) {
    ASSIGN_OR_RETURN(y, BatchNorm(batched, *running_mean, *running_var, weight, bias, eps));
  } else {
    ASSIGN_OR_RETURN(y, InstanceNorm(batched, weight, bias, eps));
  }
  return y.Reshaped(x.shape());
}

absl::StatusOr<Tensor> RunInstanceNormModule(const Module& m, const Tensor& x, int64_t rank) {
  ASSIGN_OR_RETURN(double eps, FloatAttr(m, "eps", 1e-5));
  ASSIGN_OR_RETURN(bool track, BoolAttr(m, "track_running_stats", false));
  const Tensor* mean = track ? OptionalTensor(m, "running_mean") : nullptr;
  const Tensor* var = track ? OptionalTensor(m, "running_var") : nullptr;
  if (track && (mean == nullptr || var == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        m.type().name(), ": track_running_stats=True needs tensors 'running_mean' and "
                         "'running_var'"));
  }
  return RunInstanceNorm(x, rank, mean, var, OptionalTensor(m, "weight"),
                         OptionalTensor(m, "bias"), eps, m.type().name());
}

// size / scale_factor of interpolate and nn.Upsample, from a call's Value or a module's
// Argument: None (empty), one number for both spatial dims, or a list of two.
template <typename V>
absl::StatusOr<std::vector<double>> SpatialPair(const V* v, absl::string_view what) {
  if (v == nullptr || v->is_none()) return std::vector<double>{};
  auto number = [&](const V& e) -> absl::StatusOr<double> {
    if (!(e.is_int() || e.is_float()) || !(e.as_float() > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("interpolate: ", what, " entries must be "
                                                     "positive numbers; got ", e.ToString()));
    }
    return e.as_float();
  };
  if (!v->is_list()) {
    ASSIGN_OR_RETURN(double s, number(*v));
    return std::vector<double>{s, s};
  }
  if (v->items().size() != 2) {
    return absl::UnimplementedError(absl::StrCat("interpolate: ", what, " ", v->ToString(),
                                                 "; only 2 spatial dims are supported"));
  }
  ASSIGN_OR_RETURN(double h, number(v->items()[0]));
  ASSIGN_OR_RETURN(double w, number(v->items()[1]));
  return std::vector<double>{h, w};
}

// F.interpolate's argument rules (torch 1.13): exactly one of size and scale_factor;
// with scale_factor the output is floor(in * scale), and the kernel uses 1 / scale for
// the source index unless recompute_scale_factor.
absl::StatusOr<Tensor> RunInterpolate(const Tensor& x, const std::vector<double>& size,
                                      const std::vector<double>& scale, std::string mode,
                                      std::optional<bool> align_corners, bool recompute) {
  if (size.empty() == scale.empty()) {
    return absl::InvalidArgumentError(
        "interpolate: exactly one of size and scale_factor must be given");
  }
  if (align_corners.has_value() && mode == "nearest") {
    return absl::InvalidArgumentError(
        "interpolate: align_corners can only be set with the interpolating modes "
        "(linear, bilinear, bicubic, trilinear)");
  }
  if (x.dim() != 4) {
    return absl::UnimplementedError(absl::StrCat(
        "interpolate: only 4-d [N, C, H, W] inputs are supported; got ", x.ShapeString()));
  }
  InterpolateParams p;
  p.mode = std::move(mode);
  p.align_corners = align_corners.value_or(false);
  if (!size.empty()) {
    for (double s : size) {
      if (s != std::floor(s)) {
        return absl::InvalidArgumentError(absl::StrCat("interpolate: size entries must be ints; "
                                                       "got ", s));
      }
    }
    p.out_h = static_cast<int64_t>(size[0]);
    p.out_w = static_cast<int64_t>(size[1]);
  } else {
    p.out_h = static_cast<int64_t>(std::floor(static_cast<double>(x.shape()[2]) * scale[0]));
    p.out_w = static_cast<int64_t>(std::floor(static_cast<double>(x.shape()[3]) * scale[1]));
    if (!recompute) {
      p.scale_h = scale[0];
      p.scale_w = scale[1];
    }
  }
  return Interpolate(x, p);
}

// nn.Upsample, nn.UpsamplingNearest2d, nn.UpsamplingBilinear2d: their attributes are
// interpolate's arguments (the last two set mode / align_corners in their constructors).
absl::StatusOr<Tensor> RunUpsampleModule(const Module& m, const Tensor& x,
                                         absl::string_view default_mode) {
  ASSIGN_OR_RETURN(std::vector<double> size, SpatialPair(m.FindAttribute("size"), "size"));
  ASSIGN_OR_RETURN(std::vector<double> scale,
                   SpatialPair(m.FindAttribute("scale_factor"), "scale_factor"));
  std::string mode(default_mode);
  if (const Argument* a = m.FindAttribute("mode"); a != nullptr && !a->is_none()) {
    if (!a->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(m.type().name(), ": attribute 'mode' is ",
                                                     a->ToString(), "; expected a string"));
    }
    mode = std::string(a->as_string());
  }
  std::optional<bool> align_corners;
  if (const Argument* a = m.FindAttribute("align_corners"); a != nullptr && !a->is_none()) {
    ASSIGN_OR_RETURN(align_corners, m.GetBool("align_corners"));
  }
  bool recompute = false;
  if (const Argument* a = m.FindAttribute("recompute_scale_factor");
      a != nullptr && !a->is_none()) {
    ASSIGN_OR_RETURN(recompute, m.GetBool("recompute_scale_factor"));
  }
  return RunInterpolate(x, size, scale, std::move(mode), align_corners, recompute);
}

// F.interpolate(input, size=None, scale_factor=None, mode='nearest', align_corners=None,
// recompute_scale_factor=None, antialias=False).
absl::StatusOr<Tensor> InterpolateFunction(const Tensor& x, const ArgReader& r) {
  RETURN_IF_ERROR(r.ExpectAtMostPositional(7));
  ASSIGN_OR_RETURN(std::vector<double> size, SpatialPair(r.Find(1, "size"), "size"));
  ASSIGN_OR_RETURN(std::vector<double> scale,
                   SpatialPair(r.Find(2, "scale_factor"), "scale_factor"));
  std::string mode = "nearest";
  if (const Value* v = r.Find(3, "mode"); v != nullptr && !v->is_none()) {
    if (!v->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat("interpolate: arg 'mode' is ",
                                                     v->ToString(), "; expected a string"));
    }
    mode = v->as_string();
  }
  std::optional<bool> align_corners;
  if (const Value* v = r.Find(4, "align_corners"); v != nullptr && !v->is_none()) {
    ASSIGN_OR_RETURN(align_corners, r.OptionalBool(4, "align_corners", false));
  }
  ASSIGN_OR_RETURN(bool recompute, r.OptionalBool(5, "recompute_scale_factor", false));
  ASSIGN_OR_RETURN(bool antialias, r.OptionalBool(6, "antialias", false));
  if (antialias) return absl::UnimplementedError("interpolate: antialias=True");
  return RunInterpolate(x, size, scale, std::move(mode), align_corners, recompute);
}

// The ints of args[first..] given as varargs (x.permute(0, 2, 1)) or as one list
// (x.permute([0, 2, 1])), else the keyword `name`.
absl::StatusOr<std::vector<int64_t>> IntVarargs(absl::Span<const Value> args,
                                                const ValueKwargs& kwargs, size_t first,
                                                absl::string_view name) {
  if (args.size() == first + 1 && args[first].is_list()) return ValueToInts(args[first], name);
  if (args.size() > first) {
    std::vector<int64_t> out;
    for (size_t i = first; i < args.size(); ++i) {
      if (!args[i].is_int()) {
        return absl::InvalidArgumentError(absl::StrCat(name, " entry ", i - first, " is a ",
                                                       args[i].KindName(), "; expected an int"));
      }
      out.push_back(args[i].as_int());
    }
    return out;
  }
  ArgReader r(args, kwargs);
  ASSIGN_OR_RETURN(Value v, r.Required(first, name));
  return ValueToInts(v, name);
}

// permute(input, dims) / Tensor.permute(*dims), any dtype.
absl::StatusOr<Value> PermuteKernel(const KernelContext&, absl::Span<const Value> args,
                                    const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, IntVarargs(args, kwargs, 1, "dims"));
  ASSIGN_OR_RETURN(Tensor y, Permute(*x, dims));
  return Value(std::move(y));
}

// transpose(input, dim0, dim1), any dtype.
absl::StatusOr<Value> TransposeKernel(const KernelContext&, absl::Span<const Value> args,
                                      const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(3));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(int64_t d0, r.GetInt(1, "dim0"));
  ASSIGN_OR_RETURN(int64_t d1, r.GetInt(2, "dim1"));
  ASSIGN_OR_RETURN(Tensor y, Transpose(*x, d0, d1));
  return Value(std::move(y));
}

Value TensorTuple(std::vector<Tensor> tensors) {
  std::vector<Value> items;
  for (Tensor& t : tensors) items.push_back(Value(std::move(t)));
  return Value::Tuple(std::move(items));
}

// The size of dim `dim` of x (normalized), for chunk / split / unbind.
absl::StatusOr<int64_t> DimSize(const Tensor& x, int64_t dim, absl::string_view what) {
  if (x.dim() == 0) return absl::InvalidArgumentError(absl::StrCat(what, ": 0-d input"));
  ASSIGN_OR_RETURN(int64_t d, NormalizeDim(dim, x.dim()));
  return x.shape()[d];
}

// chunk(input, chunks, dim=0): pieces of ceil(n / chunks), the last one smaller, as
// PyTorch (so fewer than `chunks` pieces may come out). Any dtype.
absl::StatusOr<Value> ChunkKernel(const KernelContext&, absl::Span<const Value> args,
                                  const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(3));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(int64_t chunks, r.GetInt(1, "chunks"));
  ASSIGN_OR_RETURN(int64_t dim, r.OptionalInt(2, "dim", 0));
  if (chunks <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("chunk: chunks is ", chunks,
                                                   "; expected > 0"));
  }
  ASSIGN_OR_RETURN(int64_t n, DimSize(*x, dim, "chunk"));
  std::vector<int64_t> sizes;
  if (n == 0) {
    sizes.assign(chunks, 0);
  } else {
    const int64_t step = (n + chunks - 1) / chunks;
    for (int64_t at = 0; at < n; at += step) sizes.push_back(std::min(step, n - at));
  }
  ASSIGN_OR_RETURN(std::vector<Tensor> pieces, SplitSizes(*x, sizes, dim));
  return TensorTuple(std::move(pieces));
}

// split(tensor, split_size_or_sections, dim=0): equal pieces of an int size (the last
// one smaller), or the listed sizes. Any dtype.
absl::StatusOr<Value> SplitKernel(const KernelContext&, absl::Span<const Value> args,
                                  const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(3));
  const Value* t = r.Find(0, "tensor");
  if (t == nullptr) t = r.Find(0, "input");  // Tensor.split's self
  if (t == nullptr || !t->is_tensor()) {
    return absl::InvalidArgumentError("split: arg 'tensor' must be a Tensor");
  }
  const Tensor& x = t->as_tensor();
  const Value* how = r.Find(1, "split_size_or_sections");
  if (how == nullptr) how = r.Find(1, "split_size");
  if (how == nullptr) {
    return absl::InvalidArgumentError("split: missing arg 'split_size_or_sections'");
  }
  ASSIGN_OR_RETURN(int64_t dim, r.OptionalInt(2, "dim", 0));
  ASSIGN_OR_RETURN(int64_t n, DimSize(x, dim, "split"));
  std::vector<int64_t> sizes;
  if (how->is_int()) {
    const int64_t step = how->as_int();
    if (step < 0 || (step == 0 && n != 0)) {
      return absl::InvalidArgumentError(absl::StrCat("split: split_size is ", step,
                                                     "; expected > 0"));
    }
    if (n == 0) sizes.push_back(0);
    for (int64_t at = 0; at < n; at += step) sizes.push_back(std::min(step, n - at));
  } else {
    ASSIGN_OR_RETURN(sizes, ValueToInts(*how, "split_size_or_sections"));
  }
  ASSIGN_OR_RETURN(std::vector<Tensor> pieces, SplitSizes(x, sizes, dim));
  return TensorTuple(std::move(pieces));
}

// unbind(input, dim=0): the slices along dim, that dim removed. Any dtype.
absl::StatusOr<Value> UnbindKernel(const KernelContext&, absl::Span<const Value> args,
                                   const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(int64_t dim, r.OptionalInt(1, "dim", 0));
  ASSIGN_OR_RETURN(int64_t n, DimSize(*x, dim, "unbind"));
  if (x->qparams().scheme == QScheme::kPerChannelAffine) {
    return absl::UnimplementedError("unbind: per-channel quantized tensors");
  }
  ASSIGN_OR_RETURN(int64_t d, NormalizeDim(dim, x->dim()));
  ASSIGN_OR_RETURN(std::vector<Tensor> pieces,
                   SplitSizes(*x, std::vector<int64_t>(n, 1), d));
  std::vector<int64_t> shape(x->shape().begin(), x->shape().end());
  shape.erase(shape.begin() + d);
  for (Tensor& piece : pieces) {
    ASSIGN_OR_RETURN(piece, piece.Reshaped(shape));
  }
  return TensorTuple(std::move(pieces));
}

// stack(tensors, dim=0).
absl::StatusOr<Value> StackKernel(const KernelContext&, absl::Span<const Value> args,
                                  const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
  ASSIGN_OR_RETURN(Value list, r.Required(0, "tensors"));
  ASSIGN_OR_RETURN(int64_t dim, r.OptionalInt(1, "dim", 0));
  if (!list.is_list()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stack: arg 'tensors': expected a list of Tensors; got ", list.KindName()));
  }
  std::vector<Tensor> tensors;
  for (const Value& v : list.items()) {
    if (!v.is_tensor()) {
      return absl::InvalidArgumentError(absl::StrCat("stack: arg 'tensors': item is a ",
                                                     v.KindName(), "; expected a Tensor"));
    }
    tensors.push_back(v.as_tensor());
  }
  ASSIGN_OR_RETURN(Tensor y, Stack(tensors, dim));
  return Value(std::move(y));
}

// matmul(input, other); bmm additionally wants two 3-d inputs of one batch size.
FunctionKernel MatMulKernel(bool bmm) {
  return [bmm](const KernelContext&, absl::Span<const Value> args,
               const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ArgReader r(args, kwargs);
    RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
    ASSIGN_OR_RETURN(const Tensor* a, r.GetFloatTensor(0, "input"));
    const Value* other = r.Find(1, bmm ? "mat2" : "other");
    if (other == nullptr || !other->is_tensor()) {
      return absl::InvalidArgumentError(absl::StrCat(bmm ? "bmm" : "matmul",
                                                     ": the second operand must be a Tensor"));
    }
    const Tensor& b = other->as_tensor();
    RETURN_IF_ERROR(ExpectFloatTensor(b, "second operand"));
    if (bmm && (a->dim() != 3 || b.dim() != 3 || a->shape()[0] != b.shape()[0])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bmm: expected two 3-d tensors with the same batch size; got ", a->ShapeString(),
          " and ", b.ShapeString()));
    }
    ASSIGN_OR_RETURN(Tensor y, MatMul(*a, b));
    return Value(std::move(y));
  };
}

// sum / amax(input, dim, keepdim=False[, dtype]): dim an int or a list; absent, None or
// empty reduces everything.
template <typename Reduction>
FunctionKernel ReductionKernel(Reduction reduce, absl::string_view what, bool takes_dtype) {
  return [reduce, what = std::string(what), takes_dtype](
             const KernelContext&, absl::Span<const Value> args,
             const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ArgReader r(args, kwargs);
    RETURN_IF_ERROR(r.ExpectAtMostPositional(takes_dtype ? 4 : 3));
    ASSIGN_OR_RETURN(const Tensor* x, r.GetFloatTensor(0, "input"));
    ASSIGN_OR_RETURN(std::vector<int64_t> dims, r.OptionalInts(1, "dim", 0, {}));
    ASSIGN_OR_RETURN(bool keepdim, r.OptionalBool(2, "keepdim", false));
    if (takes_dtype) {
      const Value* dtype = r.Find(3, "dtype");
      if (dtype != nullptr && !dtype->is_none() &&
          !(dtype->is_dtype() && dtype->as_dtype() == DType::kFloat32)) {
        return absl::UnimplementedError(absl::StrCat(what, ": dtype ", dtype->ToString()));
      }
    }
    ASSIGN_OR_RETURN(Tensor y, reduce(*x, std::move(dims), keepdim));
    return Value(std::move(y));
  };
}

// softmax / log_softmax(input, dim=None, _stacklevel=3, dtype=None) and the torch. /
// Tensor. forms (input, dim, dtype=None): positional dtype is at 2 for those, 3 for F.
FunctionKernel SoftmaxKernel(bool log, size_t dtype_position) {
  return UnaryFunction([log, dtype_position](const Tensor& x,
                                             const ArgReader& r) -> absl::StatusOr<Tensor> {
    RETURN_IF_ERROR(r.ExpectAtMostPositional(dtype_position + 1));
    const Value* dim = r.Find(1, "dim");
    int64_t d = LegacySoftmaxDim(x);
    if (dim != nullptr && !dim->is_none()) {
      if (!dim->is_int()) {
        return absl::InvalidArgumentError(absl::StrCat("softmax: arg 'dim' is ", dim->ToString(),
                                                       "; expected an int"));
      }
      d = dim->as_int();
    }
    const Value* dtype = r.Find(dtype_position, "dtype");
    if (dtype != nullptr && !dtype->is_none() &&
        !(dtype->is_dtype() && dtype->as_dtype() == DType::kFloat32)) {
      return absl::UnimplementedError(absl::StrCat("softmax: dtype ", dtype->ToString()));
    }
    return log ? LogSoftmax(x, d) : Softmax(x, d);
  });
}

// torchvision.ops.stochastic_depth(input, p, mode, training=True): the identity in eval
// (training=False) or with p == 0; random row dropping is not for a reference interpreter.
absl::StatusOr<Value> StochasticDepthKernel(const KernelContext&, absl::Span<const Value> args,
                                            const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(4));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(double p, r.GetFloat(1, "p"));
  if (p < 0.0 || p > 1.0) {
    return absl::InvalidArgumentError(absl::StrCat("stochastic_depth: p is ", p,
                                                   "; expected a probability in [0, 1]"));
  }
  const Value* mode = r.Find(2, "mode");
  if (mode == nullptr || !mode->is_string() ||
      (mode->as_string() != "batch" && mode->as_string() != "row")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stochastic_depth: arg 'mode' is ", mode == nullptr ? "missing" : mode->ToString(),
        "; expected 'batch' or 'row'"));
  }
  ASSIGN_OR_RETURN(bool training, r.OptionalBool(3, "training", true));
  if (training && p != 0.0) {
    return absl::UnimplementedError(
        "stochastic_depth with training=True (only eval mode runs)");
  }
  return Value(*x);
}

absl::StatusOr<Tensor> PadFunction(const Tensor& x, const ArgReader& r) {
  RETURN_IF_ERROR(r.ExpectAtMostPositional(4));
  ASSIGN_OR_RETURN(Value pad_value, r.Required(1, "pad"));
  ASSIGN_OR_RETURN(std::vector<int64_t> pads, ValueToInts(pad_value, "pad"));
  if (const Value* mode = r.Find(2, "mode"); mode != nullptr && !mode->is_none()) {
    if (!mode->is_string() || mode->as_string() != "constant") {
      return absl::UnimplementedError(absl::StrCat("pad: mode ", mode->ToString(),
                                                   " (only 'constant' runs)"));
    }
  }
  ASSIGN_OR_RETURN(double value, r.OptionalFloat(3, "value", 0.0));
  return ConstantPad(x, pads, static_cast<float>(value));
}

// F.conv1d / F.conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1,
// groups=1) and F.conv_transpose1d / 2d / 3d(input, weight, bias=None, stride=1,
// padding=0, output_padding=0, groups=1, dilation=1): note the transposed forms' order.
FunctionKernel FunctionalConvNd(int spatial_dims, bool transposed) {
  return UnaryFunction([spatial_dims, transposed](const Tensor& x,
                                                  const ArgReader& r) -> absl::StatusOr<Tensor> {
    RETURN_IF_ERROR(r.ExpectAtMostPositional(transposed ? 8 : 7));
    ASSIGN_OR_RETURN(const Tensor* weight, r.GetFloatTensor(1, "weight"));
    ASSIGN_OR_RETURN(const Tensor* bias, r.OptionalFloatTensor(2, "bias"));
    const size_t n = static_cast<size_t>(spatial_dims);
    const std::vector<int64_t> zeros(n, 0), ones(n, 1);
    ConvNdParams p;
    ASSIGN_OR_RETURN(p.stride, r.OptionalInts(3, "stride", n, ones));
    const Value* padding = r.Find(4, "padding");
    if (padding != nullptr && padding->is_string()) {
      if (transposed || padding->as_string() != "valid") {
        return absl::UnimplementedError(absl::StrCat("conv: padding='", padding->as_string(),
                                                     "' is not supported; use explicit ints"));
      }
      p.padding = zeros;
    } else {
      ASSIGN_OR_RETURN(p.padding, r.OptionalInts(4, "padding", n, zeros));
    }
    if (transposed) {
      ASSIGN_OR_RETURN(p.output_padding, r.OptionalInts(5, "output_padding", n, zeros));
      ASSIGN_OR_RETURN(p.groups, r.OptionalInt(6, "groups", 1));
      ASSIGN_OR_RETURN(p.dilation, r.OptionalInts(7, "dilation", n, ones));
      return ConvTransposeNd(x, *weight, bias, p, spatial_dims);
    }
    ASSIGN_OR_RETURN(p.dilation, r.OptionalInts(5, "dilation", n, ones));
    ASSIGN_OR_RETURN(p.groups, r.OptionalInt(6, "groups", 1));
    return ConvNd(x, *weight, bias, p, spatial_dims);
  });
}

// x with shape `shape`, which drops or inserts size-1 dims only; a per-channel axis
// moves to `axis` (the caller's count of the dims before it in the new shape).
absl::StatusOr<Tensor> ReshapedKeepingAxis(const Tensor& x, std::vector<int64_t> shape,
                                           int64_t axis) {
  ASSIGN_OR_RETURN(Tensor y, x.Reshaped(std::move(shape)));
  if (x.qparams().scheme == QScheme::kPerChannelAffine) {
    QuantParams q = x.qparams();
    q.axis = axis;
    y.set_qparams(std::move(q));
  }
  return y;
}

// squeeze(input, dim=None): drops every size-1 dim, or only `dim` if it has size 1. Any
// dtype.
absl::StatusOr<Value> SqueezeKernel(const KernelContext&, absl::Span<const Value> args,
                                    const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  const Value* dim = r.Find(1, "dim");
  std::vector<bool> drop(x->dim(), false);
  if (dim == nullptr || dim->is_none()) {
    for (int64_t d = 0; d < x->dim(); ++d) drop[d] = x->shape()[d] == 1;
  } else {
    if (!dim->is_int()) {
      return absl::InvalidArgumentError(absl::StrCat("squeeze: arg 'dim' is ", dim->ToString(),
                                                     "; expected an int"));
    }
    ASSIGN_OR_RETURN(int64_t d, NormalizeDim(dim->as_int(), x->dim()));
    if (x->dim() > 0) drop[d] = x->shape()[d] == 1;
  }
  const int64_t old_axis = x->qparams().axis;
  if (x->qparams().scheme == QScheme::kPerChannelAffine && drop[old_axis]) {
    return absl::UnimplementedError("squeeze: the channel axis of a per-channel quantized tensor");
  }
  std::vector<int64_t> shape;
  int64_t axis = 0;
  for (int64_t d = 0; d < x->dim(); ++d) {
    if (drop[d]) continue;
    if (d < old_axis) ++axis;
    shape.push_back(x->shape()[d]);
  }
  ASSIGN_OR_RETURN(Tensor y, ReshapedKeepingAxis(*x, std::move(shape), axis));
  return Value(std::move(y));
}

// unsqueeze(input, dim): a size-1 dim inserted at dim in [-rank - 1, rank]. Any dtype.
absl::StatusOr<Value> UnsqueezeKernel(const KernelContext&, absl::Span<const Value> args,
                                      const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(int64_t dim, r.GetInt(1, "dim"));
  ASSIGN_OR_RETURN(int64_t d, NormalizeDim(dim, x->dim() + 1));
  std::vector<int64_t> shape(x->shape().begin(), x->shape().end());
  shape.insert(shape.begin() + d, 1);
  const int64_t axis = x->qparams().axis + (d <= x->qparams().axis ? 1 : 0);
  ASSIGN_OR_RETURN(Tensor y, ReshapedKeepingAxis(*x, std::move(shape), axis));
  return Value(std::move(y));
}

// ---- 1-d pools: the 2-d kernels over [N, C, 1, L] --------------------------------------

// A 1-d pool's parameters (one entry each) as a 2-d pool's with a 1-high window.
Pool2dParams Pool1dAs2d(int64_t kernel, int64_t stride, int64_t padding, int64_t dilation,
                        bool ceil_mode, bool count_include_pad) {
  Pool2dParams p;
  p.kernel_size = {1, kernel};
  p.stride = {1, stride};
  p.padding = {0, padding};
  p.dilation = {1, dilation};
  p.ceil_mode = ceil_mode;
  p.count_include_pad = count_include_pad;
  return p;
}

// Runs `pool2d` on x ([N, C, L] or unbatched [C, L]) viewed with a height of 1.
template <typename Pool2d>
absl::StatusOr<Tensor> Pool1d(const Tensor& x, absl::string_view what, Pool2d pool2d) {
  if (x.dim() != 2 && x.dim() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": expected a 3-d [N, C, L] or 2-d [C, L] input; got ", x.ShapeString()));
  }
  std::vector<int64_t> shape(x.shape().begin(), x.shape().end());
  shape.insert(shape.end() - 1, 1);
  ASSIGN_OR_RETURN(Tensor image, x.Reshaped(shape));
  ASSIGN_OR_RETURN(Tensor y, pool2d(image));
  std::vector<int64_t> out(y.shape().begin(), y.shape().end());
  out.erase(out.end() - 2);
  return y.Reshaped(out);
}

// One int of a 1-d pool module attribute (an int or a list of one), or `default_value`.
absl::StatusOr<int64_t> Int1Attr(const Module& m, absl::string_view name, int64_t default_value) {
  const Argument* a = m.FindAttribute(name);
  if (a == nullptr || a->is_none() || (a->is_list() && a->items().empty())) return default_value;
  ASSIGN_OR_RETURN(std::vector<int64_t> v, m.GetInts(name, 1));
  return v[0];
}

absl::StatusOr<Tensor> RunPool1dModule(const Module& m, const Tensor& x, bool max_pool) {
  ASSIGN_OR_RETURN(int64_t kernel, Int1Attr(m, "kernel_size", 0));
  if (kernel <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(m.type().name(),
                                                   ": attribute 'kernel_size' must be >= 1"));
  }
  ASSIGN_OR_RETURN(int64_t stride, Int1Attr(m, "stride", kernel));
  ASSIGN_OR_RETURN(int64_t padding, Int1Attr(m, "padding", 0));
  ASSIGN_OR_RETURN(int64_t dilation, Int1Attr(m, "dilation", 1));
  ASSIGN_OR_RETURN(bool ceil_mode, BoolAttr(m, "ceil_mode", false));
  ASSIGN_OR_RETURN(bool count_include_pad, BoolAttr(m, "count_include_pad", true));
  ASSIGN_OR_RETURN(bool return_indices, BoolAttr(m, "return_indices", false));
  if (return_indices) {
    return absl::UnimplementedError(absl::StrCat(m.type().name(), ": return_indices=True"));
  }
  const Pool2dParams p =
      Pool1dAs2d(kernel, stride, padding, dilation, ceil_mode, count_include_pad);
  return Pool1d(x, m.type().name(), [&](const Tensor& image) {
    return max_pool ? MaxPool2d(image, p) : AvgPool2d(image, p);
  });
}

// F.max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
// return_indices=False) / F.avg_pool1d(input, kernel_size, stride=None, padding=0,
// ceil_mode=False, count_include_pad=True).
FunctionKernel Pool1dFunction(bool max_pool) {
  return UnaryFunction([max_pool](const Tensor& x, const ArgReader& r) -> absl::StatusOr<Tensor> {
    RETURN_IF_ERROR(r.ExpectAtMostPositional(max_pool ? 7 : 6));
    auto one = [&](size_t index, absl::string_view name,
                   int64_t default_value) -> absl::StatusOr<int64_t> {
      ASSIGN_OR_RETURN(std::vector<int64_t> v, r.OptionalInts(index, name, 1, {default_value}));
      if (v.empty()) return default_value;  // stride=[] means "kernel_size"
      return v[0];
    };
    ASSIGN_OR_RETURN(int64_t kernel, one(1, "kernel_size", 0));
    if (kernel <= 0) return absl::InvalidArgumentError("pool1d: kernel_size must be >= 1");
    ASSIGN_OR_RETURN(int64_t stride, one(2, "stride", kernel));
    ASSIGN_OR_RETURN(int64_t padding, one(3, "padding", 0));
    int64_t dilation = 1;
    bool ceil_mode = false, count_include_pad = true;
    if (max_pool) {
      ASSIGN_OR_RETURN(dilation, one(4, "dilation", 1));
      ASSIGN_OR_RETURN(ceil_mode, r.OptionalBool(5, "ceil_mode", false));
      ASSIGN_OR_RETURN(bool return_indices, r.OptionalBool(6, "return_indices", false));
      if (return_indices) return absl::UnimplementedError("max_pool1d: return_indices=True");
    } else {
      ASSIGN_OR_RETURN(ceil_mode, r.OptionalBool(4, "ceil_mode", false));
      ASSIGN_OR_RETURN(count_include_pad, r.OptionalBool(5, "count_include_pad", true));
    }
    const Pool2dParams p =
        Pool1dAs2d(kernel, stride, padding, dilation, ceil_mode, count_include_pad);
    return Pool1d(x, max_pool ? "max_pool1d" : "avg_pool1d", [&](const Tensor& image) {
      return max_pool ? MaxPool2d(image, p) : AvgPool2d(image, p);
    });
  });
}

// nn.AdaptiveAvgPool1d / F.adaptive_avg_pool1d: output_size an int (or a list of one).
absl::StatusOr<Tensor> AdaptiveAvgPool1d(const Tensor& x, int64_t size, absl::string_view what) {
  if (size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": output_size must be >= 1; got ",
                                                   size));
  }
  return Pool1d(x, what, [&](const Tensor& image) { return AdaptiveAvgPool2d(image, 1, size); });
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
      {"nn.Dropout2d", PassThroughModule},
      {"nni.ConvReLU2d", SequentialFusedModule(true)},
      {"nni.ConvBn2d", SequentialFusedModule(false)},
      {"nni.ConvAct2d", SequentialFusedModule(false)},  // its schema fixes the activation
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
      {"nn.SiLU", UnaryModule([](const Module&, const Tensor& x) -> absl::StatusOr<Tensor> {
         return Silu(x);
       })},
      {"nn.Tanh", UnaryModule([](const Module&, const Tensor& x) -> absl::StatusOr<Tensor> {
         return Tanh(x);
       })},
      {"nn.GELU", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         std::string approximate = "none";
         if (const Argument* a = m.FindAttribute("approximate"); a != nullptr && a->is_string()) {
           approximate = std::string(a->as_string());
         }
         ASSIGN_OR_RETURN(bool tanh_approx, GeluTanh(approximate));
         return Gelu(x, tanh_approx);
       })},
      {"nn.ELU", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(double alpha, FloatAttr(m, "alpha", 1.0));
         return Elu(x, static_cast<float>(alpha));
       })},
      {"nn.LeakyReLU", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(double slope, FloatAttr(m, "negative_slope", 0.01));
         return LeakyRelu(x, static_cast<float>(slope));
       })},
      {"nn.PReLU", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(const Tensor* weight, m.GetTensor("weight"));
         return Prelu(x, *weight);
       })},
      {"nn.Softmax", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         const Argument* dim = m.FindAttribute("dim");
         if (dim == nullptr || dim->is_none()) return Softmax(x, LegacySoftmaxDim(x));
         ASSIGN_OR_RETURN(int64_t d, m.GetInt("dim"));
         return Softmax(x, d);
       })},
      {"nn.LogSoftmax", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         const Argument* dim = m.FindAttribute("dim");
         if (dim == nullptr || dim->is_none()) return LogSoftmax(x, LegacySoftmaxDim(x));
         ASSIGN_OR_RETURN(int64_t d, m.GetInt("dim"));
         return LogSoftmax(x, d);
       })},
      {"nn.LayerNorm", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         const Argument* shape = m.FindAttribute("normalized_shape");
         if (shape == nullptr) {
           return absl::InvalidArgumentError("nn.LayerNorm: missing attribute 'normalized_shape'");
         }
         const size_t rank = shape->is_list() ? shape->items().size() : 1;
         ASSIGN_OR_RETURN(std::vector<int64_t> normalized, m.GetInts("normalized_shape", rank));
         ASSIGN_OR_RETURN(double eps, FloatAttr(m, "eps", 1e-5));
         return LayerNorm(x, normalized, OptionalTensor(m, "weight"), OptionalTensor(m, "bias"),
                          eps);
       })},
      {"nn.GroupNorm", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(int64_t groups, m.GetInt("num_groups"));
         ASSIGN_OR_RETURN(double eps, FloatAttr(m, "eps", 1e-5));
         return GroupNorm(x, groups, OptionalTensor(m, "weight"), OptionalTensor(m, "bias"), eps);
       })},
      {"nn.InstanceNorm1d", UnaryModule([](const Module& m, const Tensor& x) {
         return RunInstanceNormModule(m, x, 3);
       })},
      {"nn.InstanceNorm2d", UnaryModule([](const Module& m, const Tensor& x) {
         return RunInstanceNormModule(m, x, 4);
       })},
      {"nn.InstanceNorm3d", UnaryModule([](const Module& m, const Tensor& x) {
         return RunInstanceNormModule(m, x, 5);
       })},
      {"nn.PixelShuffle", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(int64_t r, m.GetInt("upscale_factor"));
         return PixelShuffle(x, r);
       })},
      {"nn.PixelUnshuffle", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(int64_t r, m.GetInt("downscale_factor"));
         return PixelUnshuffle(x, r);
       })},
      {"nn.Upsample", UnaryModule([](const Module& m, const Tensor& x) {
         return RunUpsampleModule(m, x, "nearest");
       })},
      {"nn.UpsamplingNearest2d", UnaryModule([](const Module& m, const Tensor& x) {
         return RunUpsampleModule(m, x, "nearest");
       })},
      {"nn.UpsamplingBilinear2d", UnaryModule([](const Module& m, const Tensor& x) {
         return RunUpsampleModule(m, x, "bilinear");
       })},
      {"nn.MaxPool1d", UnaryModule([](const Module& m, const Tensor& x) {
         return RunPool1dModule(m, x, /*max_pool=*/true);
       })},
      {"nn.AvgPool1d", UnaryModule([](const Module& m, const Tensor& x) {
         return RunPool1dModule(m, x, /*max_pool=*/false);
       })},
      {"nn.AdaptiveAvgPool1d",
       UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(int64_t size, Int1Attr(m, "output_size", 0));
         return AdaptiveAvgPool1d(x, size, m.type().name());
       })},
      {"nn.AdaptiveMaxPool2d",
       UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(bool return_indices, BoolAttr(m, "return_indices", false));
         if (return_indices) {
           return absl::UnimplementedError("nn.AdaptiveMaxPool2d: return_indices=True");
         }
         ASSIGN_OR_RETURN(auto size, AdaptiveOutputSize(m.FindAttribute("output_size"),
                                                        m.type().name()));
         return AdaptiveMaxPool2d(x, size.first, size.second);
       })},
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
  const FunctionKernel add = BinaryArithmetic(BinaryOp::kAdd);
  const FunctionKernel sub = BinaryArithmetic(BinaryOp::kSub);
  const FunctionKernel mul = BinaryArithmetic(BinaryOp::kMul);
  const FunctionKernel div = BinaryArithmetic(BinaryOp::kDiv);
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
      {kFunction, "torch.narrow", NarrowKernel},
      {kMethod, "narrow", NarrowKernel},
      {kFunction, "torch.nn.functional.pixel_shuffle", PixelShuffleKernel<PixelShuffle>},
      {kFunction, "torch.nn.functional.pixel_unshuffle", PixelShuffleKernel<PixelUnshuffle>},
      {kMethod, "flatten", FlattenKernel},
      {kMethod, "view", ReshapeKernel},
      {kMethod, "reshape", ReshapeKernel},
      {kFunction, "torch.reshape", ReshapeKernel},
      {kFunction, "torch.mean", MeanKernel},
      {kMethod, "mean", MeanKernel},
      {kMethod, "size", SizeKernel},
      {kMethod, "dim", DimKernel},
      {kFunction, "builtins.getattr", GetAttrKernel},
      {kFunction, "operator.floordiv", FloorDivKernel},
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
      {kFunction, "operator.sub", sub},
      {kFunction, "torch.sub", sub},
      {kMethod, "sub", sub},
      {kFunction, "operator.truediv", div},
      {kFunction, "torch.div", div},
      {kMethod, "div", div},
      {kFunction, "torch.nn.functional.sigmoid", sigmoid},
      {kFunction, "torch.nn.functional.silu", Elementwise(Silu)},
      {kFunction, "torch.tanh", Elementwise(Tanh)},
      {kFunction, "torch.nn.functional.tanh", Elementwise(Tanh)},
      {kMethod, "tanh", Elementwise(Tanh)},
      {kFunction, "torch.nn.functional.gelu",
       UnaryFunction([](const Tensor& x, const ArgReader& r) -> absl::StatusOr<Tensor> {
         RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
         std::string approximate = "none";
         if (const Value* v = r.Find(1, "approximate"); v != nullptr && !v->is_none()) {
           if (!v->is_string()) {
             return absl::InvalidArgumentError(absl::StrCat(
                 "gelu: arg 'approximate' is ", v->ToString(), "; expected 'none' or 'tanh'"));
           }
           approximate = v->as_string();
         }
         ASSIGN_OR_RETURN(bool tanh_approx, GeluTanh(approximate));
         return Gelu(x, tanh_approx);
       })},
      {kFunction, "torch.nn.functional.elu",
       UnaryFunction([](const Tensor& x, const ArgReader& r) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(double alpha, r.OptionalFloat(1, "alpha", 1.0));
         return Elu(x, static_cast<float>(alpha));
       })},
      {kFunction, "torch.nn.functional.leaky_relu",
       UnaryFunction([](const Tensor& x, const ArgReader& r) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(double slope, r.OptionalFloat(1, "negative_slope", 0.01));
         return LeakyRelu(x, static_cast<float>(slope));
       })},
      {kFunction, "torch.nn.functional.prelu",
       UnaryFunction([](const Tensor& x, const ArgReader& r) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(const Tensor* weight, r.GetFloatTensor(1, "weight"));
         return Prelu(x, *weight);
       })},
      {kFunction, "torch.nn.functional.softmax", SoftmaxKernel(false, 3)},
      {kFunction, "torch.softmax", SoftmaxKernel(false, 2)},
      {kMethod, "softmax", SoftmaxKernel(false, 2)},
      {kFunction, "torch.nn.functional.log_softmax", SoftmaxKernel(true, 3)},
      {kFunction, "torch.log_softmax", SoftmaxKernel(true, 2)},
      {kMethod, "log_softmax", SoftmaxKernel(true, 2)},
      {kFunction, "torch.nn.functional.layer_norm",
       UnaryFunction([](const Tensor& x, const ArgReader& r) -> absl::StatusOr<Tensor> {
         RETURN_IF_ERROR(r.ExpectAtMostPositional(5));
         ASSIGN_OR_RETURN(std::vector<int64_t> shape, r.OptionalInts(1, "normalized_shape", 0, {}));
         if (shape.empty()) {
           return absl::InvalidArgumentError("layer_norm: missing arg 'normalized_shape'");
         }
         ASSIGN_OR_RETURN(const Tensor* weight, r.OptionalFloatTensor(2, "weight"));
         ASSIGN_OR_RETURN(const Tensor* bias, r.OptionalFloatTensor(3, "bias"));
         ASSIGN_OR_RETURN(double eps, r.OptionalFloat(4, "eps", 1e-5));
         return LayerNorm(x, shape, weight, bias, eps);
       })},
      {kFunction, "torch.nn.functional.group_norm",
       UnaryFunction([](const Tensor& x, const ArgReader& r) -> absl::StatusOr<Tensor> {
         RETURN_IF_ERROR(r.ExpectAtMostPositional(5));
         ASSIGN_OR_RETURN(int64_t groups, r.GetInt(1, "num_groups"));
         ASSIGN_OR_RETURN(const Tensor* weight, r.OptionalFloatTensor(2, "weight"));
         ASSIGN_OR_RETURN(const Tensor* bias, r.OptionalFloatTensor(3, "bias"));
         ASSIGN_OR_RETURN(double eps, r.OptionalFloat(4, "eps", 1e-5));
         return GroupNorm(x, groups, weight, bias, eps);
       })},
      // F.batch_norm(input, running_mean, running_var, weight=None, bias=None,
      // training=False, momentum=0.1, eps=1e-5), as torch.export's aten.batch_norm reads
      // (fuselage._exported); inference only: the running statistics.
      {kFunction, "torch.nn.functional.batch_norm",
       UnaryFunction([](const Tensor& x, const ArgReader& r) -> absl::StatusOr<Tensor> {
         RETURN_IF_ERROR(r.ExpectAtMostPositional(8));
         ASSIGN_OR_RETURN(const Tensor* mean, r.GetTensor(1, "running_mean"));
         ASSIGN_OR_RETURN(const Tensor* var, r.GetTensor(2, "running_var"));
         ASSIGN_OR_RETURN(const Tensor* weight, r.OptionalFloatTensor(3, "weight"));
         ASSIGN_OR_RETURN(const Tensor* bias, r.OptionalFloatTensor(4, "bias"));
         ASSIGN_OR_RETURN(bool training, r.OptionalBool(5, "training", false));
         ASSIGN_OR_RETURN(double eps, r.OptionalFloat(7, "eps", 1e-5));
         if (training) {
           return absl::InvalidArgumentError(
               "batch_norm: training=True; fuselage runs inference (the running statistics)");
         }
         if (x.dim() < 2) {
           return absl::InvalidArgumentError(
               absl::StrCat("batch_norm: expected an [N, C, ...] input; got ", x.ShapeString()));
         }
         return BatchNorm(x, *mean, *var, weight, bias, eps);
       })},
      // F.instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
      // use_input_stats=True, momentum=0.1, eps=1e-5).
      {kFunction, "torch.nn.functional.instance_norm",
       UnaryFunction([](const Tensor& x, const ArgReader& r) -> absl::StatusOr<Tensor> {
         RETURN_IF_ERROR(r.ExpectAtMostPositional(8));
         ASSIGN_OR_RETURN(const Tensor* mean, r.OptionalFloatTensor(1, "running_mean"));
         ASSIGN_OR_RETURN(const Tensor* var, r.OptionalFloatTensor(2, "running_var"));
         ASSIGN_OR_RETURN(const Tensor* weight, r.OptionalFloatTensor(3, "weight"));
         ASSIGN_OR_RETURN(const Tensor* bias, r.OptionalFloatTensor(4, "bias"));
         ASSIGN_OR_RETURN(bool input_stats, r.OptionalBool(5, "use_input_stats", true));
         ASSIGN_OR_RETURN(double eps, r.OptionalFloat(7, "eps", 1e-5));
         if (!input_stats && (mean == nullptr || var == nullptr)) {
           return absl::InvalidArgumentError(
               "instance_norm: use_input_stats=False needs running_mean and running_var");
         }
         return RunInstanceNorm(x, /*batched_rank=*/0, input_stats ? nullptr : mean,
                                input_stats ? nullptr : var, weight, bias, eps, "instance_norm");
       })},
      {kFunction, "torch.nn.functional.interpolate", UnaryFunction(InterpolateFunction)},
      {kFunction, "torch.nn.functional.pad", UnaryFunction(PadFunction)},
      {kFunction, "torch.nn.functional.max_pool1d", Pool1dFunction(true)},
      {kFunction, "torch.nn.functional.avg_pool1d", Pool1dFunction(false)},
      {kFunction, "torch.nn.functional.adaptive_avg_pool1d",
       UnaryFunction([](const Tensor& x, const ArgReader& r) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(std::vector<int64_t> size, r.OptionalInts(1, "output_size", 1, {}));
         if (size.size() != 1) {
           return absl::InvalidArgumentError("adaptive_avg_pool1d: output_size must be one int");
         }
         return AdaptiveAvgPool1d(x, size[0], "adaptive_avg_pool1d");
       })},
      {kFunction, "torch.nn.functional.adaptive_max_pool2d",
       UnaryFunction([](const Tensor& x, const ArgReader& r) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(Value size_value, r.Required(1, "output_size"));
         ASSIGN_OR_RETURN(bool return_indices, r.OptionalBool(2, "return_indices", false));
         if (return_indices) {
           return absl::UnimplementedError("adaptive_max_pool2d: return_indices=True");
         }
         ASSIGN_OR_RETURN(auto size, AdaptiveOutputSizeValue(size_value));
         return AdaptiveMaxPool2d(x, size.first, size.second);
       })},
      {kFunction, "torchvision.ops.stochastic_depth.stochastic_depth", StochasticDepthKernel},
      {kFunction, "torch.nn.functional.conv1d", FunctionalConvNd(1, false)},
      {kFunction, "torch.nn.functional.conv3d", FunctionalConvNd(3, false)},
      {kFunction, "torch.nn.functional.conv_transpose1d", FunctionalConvNd(1, true)},
      {kFunction, "torch.nn.functional.conv_transpose2d", FunctionalConvNd(2, true)},
      {kFunction, "torch.nn.functional.conv_transpose3d", FunctionalConvNd(3, true)},
      {kFunction, "torch.squeeze", SqueezeKernel},
      {kMethod, "squeeze", SqueezeKernel},
      {kFunction, "torch.unsqueeze", UnsqueezeKernel},
      {kMethod, "unsqueeze", UnsqueezeKernel},
      {kFunction, "torch.permute", PermuteKernel},
      {kMethod, "permute", PermuteKernel},
      {kFunction, "torch.transpose", TransposeKernel},
      {kMethod, "transpose", TransposeKernel},
      {kFunction, "torch.chunk", ChunkKernel},
      {kMethod, "chunk", ChunkKernel},
      {kFunction, "torch.functional.split", SplitKernel},
      {kMethod, "split", SplitKernel},
      {kFunction, "torch.unbind", UnbindKernel},
      {kMethod, "unbind", UnbindKernel},
      {kFunction, "torch.stack", StackKernel},
      {kFunction, "torch.matmul", MatMulKernel(false)},
      {kFunction, "operator.matmul", MatMulKernel(false)},
      {kMethod, "matmul", MatMulKernel(false)},
      {kFunction, "torch.bmm", MatMulKernel(true)},
      {kMethod, "bmm", MatMulKernel(true)},
      {kFunction, "torch.sum", ReductionKernel(Sum, "sum", true)},
      {kMethod, "sum", ReductionKernel(Sum, "sum", true)},
      {kFunction, "torch.amax", ReductionKernel(Amax, "amax", false)},
      {kMethod, "amax", ReductionKernel(Amax, "amax", false)},
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
