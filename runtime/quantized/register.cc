#include "runtime/quantized/register.h"

#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/module.h"
#include "graph/status_macros.h"
#include "runtime/kernel_args.h"
#include "runtime/layout.h"
#include "runtime/quantized/activations.h"
#include "runtime/quantized/clamp.h"
#include "runtime/quantized/conv.h"
#include "runtime/quantized/dynamic_linear.h"
#include "runtime/quantized/elementwise.h"
#include "runtime/quantized/embedding.h"
#include "runtime/quantized/linear.h"
#include "runtime/quantized/matmul.h"
#include "runtime/quantized/normalization.h"
#include "runtime/quantized/pooling.h"
#include "runtime/quantized/prelu.h"
#include "runtime/quantized/quant_math.h"
#include "runtime/quantized/quantize.h"
#include "runtime/quantized/resample.h"
#include "runtime/quantized/shape_ops.h"

namespace fuselage {
namespace {

using quantized::Conv2dParams;
using quantized::Pool2dParams;

// ---- Reading values ----

// A number given as an int / float Value or as a tensor of one element (a get_attr of a
// 0-d tensor in graphs imported from PyTorch).
absl::StatusOr<double> NumberOf(const Value& v, absl::string_view what) {
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

absl::StatusOr<int64_t> IntOf(const Value& v, absl::string_view what) {
  ASSIGN_OR_RETURN(double d, NumberOf(v, what));
  if (d != static_cast<double>(static_cast<int64_t>(d))) {
    return absl::InvalidArgumentError(
        absl::StrCat("arg '", what, "': expected an integer; got ", v.ToString()));
  }
  return static_cast<int64_t>(d);
}

// The numbers of a float32 / int32 / int64 tensor of any shape (per-channel parameters).
absl::StatusOr<std::vector<double>> NumbersOfTensor(const Tensor& t, absl::string_view what) {
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

std::vector<int64_t> ToInts(const std::vector<double>& values) {
  return std::vector<int64_t>(values.begin(), values.end());
}

absl::StatusOr<DType> DTypeArg(const ArgReader& r, size_t index, absl::string_view name) {
  ASSIGN_OR_RETURN(Value v, r.Required(index, name));
  if (!v.is_dtype()) {
    return absl::InvalidArgumentError(
        absl::StrCat("arg '", name, "': expected a dtype; got ", v.ToString()));
  }
  return v.as_dtype();
}

absl::StatusOr<std::array<int64_t, 2>> Pair(std::vector<int64_t> v) {
  if (v.size() == 1) return std::array<int64_t, 2>{v[0], v[0]};
  if (v.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("expected 1 or 2 ints; got ", v.size()));
  }
  return std::array<int64_t, 2>{v[0], v[1]};
}

// A module attribute as a pair (an int or a list of two), `fallback` when absent.
absl::StatusOr<std::array<int64_t, 2>> AttrPair(const Module& m, absl::string_view name,
                                                int64_t fallback) {
  if (m.FindAttribute(name) == nullptr) return std::array<int64_t, 2>{fallback, fallback};
  ASSIGN_OR_RETURN(std::vector<int64_t> v, m.GetInts(name, 2));
  return std::array<int64_t, 2>{v[0], v[1]};
}

absl::StatusOr<const Tensor*> OnlyTensorInput(absl::Span<const Value> args, const Module& m,
                                              size_t count = 1) {
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
absl::StatusOr<double> AttrOrTensorNumber(const Module& m, absl::string_view name) {
  if (m.FindAttribute(name) != nullptr) return m.GetFloat(name);
  if (const Tensor* t = m.FindTensor(name)) {
    ASSIGN_OR_RETURN(std::vector<double> v,
                     NumbersOfTensor(*t, absl::StrCat(m.type().name(), " ", name)));
    if (v.size() == 1) return v[0];
  }
  return absl::InvalidArgumentError(absl::StrCat(m.type().name(), ": missing '", name,
                                                 "' (an attribute or a one-element tensor)"));
}

// ---- Native quantized modules ----

struct QuantizedModuleParts {
  const Tensor* weight = nullptr;
  const Tensor* bias = nullptr;  // may stay null
  double scale = 1.0;
  int64_t zero_point = 0;
};

absl::StatusOr<QuantizedModuleParts> ReadQuantizedModule(const Module& m) {
  QuantizedModuleParts parts;
  ASSIGN_OR_RETURN(parts.weight, m.GetTensor("weight"));
  parts.bias = m.FindTensor("bias");
  ASSIGN_OR_RETURN(parts.scale, AttrOrTensorNumber(m, "scale"));
  ASSIGN_OR_RETURN(double zero_point, AttrOrTensorNumber(m, "zero_point"));
  parts.zero_point = static_cast<int64_t>(zero_point);
  return parts;
}

absl::StatusOr<Conv2dParams> ReadConvParams(const Module& m) {
  Conv2dParams p;
  ASSIGN_OR_RETURN(p.stride, AttrPair(m, "stride", 1));
  ASSIGN_OR_RETURN(p.padding, AttrPair(m, "padding", 0));
  ASSIGN_OR_RETURN(p.dilation, AttrPair(m, "dilation", 1));
  if (m.FindAttribute("groups") != nullptr) {
    ASSIGN_OR_RETURN(p.groups, m.GetInt("groups"));
  }
  if (const Argument* mode = m.FindAttribute("padding_mode")) {
    if (!mode->is_string() || mode->as_string() != "zeros") {
      return absl::UnimplementedError(absl::StrCat(m.type().name(), " attribute 'padding_mode' is ",
                                                   mode->ToString(), "; only 'zeros' is supported"));
    }
  }
  return p;
}

// ---- Channels-last overloads (runtime/layout.h) ----

Value ActivationValue(quantized::Activation a) {
  return a.channels_last ? Value::ChannelsLast(std::move(a.tensor)) : Value(std::move(a.tensor));
}

// A per-dim conv attribute of `spatial` ints (an int broadcasts), `fallback` when absent.
absl::StatusOr<std::vector<int64_t>> AttrInts(const Module& m, absl::string_view name,
                                              size_t spatial, int64_t fallback) {
  if (m.FindAttribute(name) == nullptr) return std::vector<int64_t>(spatial, fallback);
  return m.GetInts(name, spatial);
}

// The conv attributes of nnq.Conv1d / Conv3d / ConvTranspose*d (graph/NAMING.md: PyTorch's
// own fields) for `spatial` dims.
absl::StatusOr<quantized::QuantizedConvParams> ReadConvNdParams(const Module& m, size_t spatial,
                                                                bool transposed) {
  quantized::QuantizedConvParams p;
  ASSIGN_OR_RETURN(p.stride, AttrInts(m, "stride", spatial, 1));
  ASSIGN_OR_RETURN(p.padding, AttrInts(m, "padding", spatial, 0));
  ASSIGN_OR_RETURN(p.dilation, AttrInts(m, "dilation", spatial, 1));
  if (transposed) {
    ASSIGN_OR_RETURN(p.output_padding, AttrInts(m, "output_padding", spatial, 0));
  }
  if (m.FindAttribute("groups") != nullptr) {
    ASSIGN_OR_RETURN(p.groups, m.GetInt("groups"));
  }
  if (const Argument* mode = m.FindAttribute("padding_mode")) {
    if (!mode->is_string() || mode->as_string() != "zeros") {
      return absl::UnimplementedError(absl::StrCat(m.type().name(), " attribute 'padding_mode' is ",
                                                   mode->ToString(), "; only 'zeros' is supported"));
    }
  }
  return p;
}

// nnq.Conv1d / Conv3d, nniq.ConvReLU1d / 3d, nnq.ConvTranspose1d / 2d / 3d.
// nnq.Conv2d / nniq.ConvReLU2d. The input may be channels-last (only the channels-last
// overload is given one); with `channels_last_output`, so may the output, so a chain of
// int8 convs moves no bytes between them.
ModuleKernel QuantizedConvModule(bool relu, bool channels_last_output) {
  return [relu, channels_last_output](const KernelContext& ctx, const Module& m,
                                      absl::Span<const Value> args,
                                      const ValueKwargs&) -> absl::StatusOr<Value> {
    if (args.size() != 1 || !(args[0].is_tensor() || args[0].is_channels_last())) {
      return absl::InvalidArgumentError(absl::StrCat(m.type().name(), " takes 1 Tensor input; got ",
                                                     args.size(), " args"));
    }
    const quantized::Activation x =
        args[0].is_channels_last() ? quantized::Activation{args[0].as_channels_last(), true}
                                   : quantized::Activation{args[0].as_tensor(), false};
    ASSIGN_OR_RETURN(QuantizedModuleParts parts, ReadQuantizedModule(m));
    ASSIGN_OR_RETURN(quantized::QuantizedConvParams p, ReadConvNdParams(m, 2, false));
    ASSIGN_OR_RETURN(quantized::Activation y,
                     quantized::QuantizedConvNdAnyLayout(x, *parts.weight, parts.bias, p,
                                                         parts.scale, parts.zero_point, relu,
                                                         ctx.engine, channels_last_output));
    return ActivationValue(std::move(y));
  };
}

ModuleKernel QuantizedConvNdModule(size_t spatial, bool relu, bool transposed) {
  return [spatial, relu, transposed](const KernelContext& ctx, const Module& m,
                                     absl::Span<const Value> args,
                                     const ValueKwargs&) -> absl::StatusOr<Value> {
    ASSIGN_OR_RETURN(const Tensor* x, OnlyTensorInput(args, m));
    ASSIGN_OR_RETURN(QuantizedModuleParts parts, ReadQuantizedModule(m));
    ASSIGN_OR_RETURN(quantized::QuantizedConvParams p, ReadConvNdParams(m, spatial, transposed));
    if (x->dim() != static_cast<int64_t>(spatial) + 2) {
      return absl::InvalidArgumentError(absl::StrCat(m.type().name(), ": input has shape ",
                                                     x->ShapeString(), "; expected ",
                                                     spatial + 2, "-D [N, C, ...]"));
    }
    ASSIGN_OR_RETURN(Tensor y, transposed ? quantized::QuantizedConvTransposeNd(
                                                *x, *parts.weight, parts.bias, p, parts.scale,
                                                parts.zero_point)
                                          : quantized::QuantizedConvNd(
                                                *x, *parts.weight, parts.bias, p, parts.scale,
                                                parts.zero_point, relu, ctx.engine));
    return Value(std::move(y));
  };
}

ModuleKernel QuantizedConvAddModule(bool relu) {
  return [relu](const KernelContext&, const Module& m, absl::Span<const Value> args,
                const ValueKwargs&) -> absl::StatusOr<Value> {
    ASSIGN_OR_RETURN(const Tensor* x, OnlyTensorInput(args, m, 2));
    ASSIGN_OR_RETURN(QuantizedModuleParts parts, ReadQuantizedModule(m));
    ASSIGN_OR_RETURN(Conv2dParams p, ReadConvParams(m));
    ASSIGN_OR_RETURN(Tensor y, quantized::QuantizedConvAdd2d(*x, args[1].as_tensor(),
                                                             *parts.weight, parts.bias, p,
                                                             parts.scale, parts.zero_point,
                                                             relu));
    return Value(std::move(y));
  };
}

ModuleKernel QuantizedLinearModule(bool relu) {
  return [relu](const KernelContext& ctx, const Module& m, absl::Span<const Value> args,
                const ValueKwargs&) -> absl::StatusOr<Value> {
    ASSIGN_OR_RETURN(const Tensor* x, OnlyTensorInput(args, m));
    ASSIGN_OR_RETURN(QuantizedModuleParts parts, ReadQuantizedModule(m));
    ASSIGN_OR_RETURN(Tensor y, quantized::QuantizedLinear(*x, *parts.weight, parts.bias,
                                                          parts.scale, parts.zero_point, relu,
                                                          ctx.engine));
    return Value(std::move(y));
  };
}

absl::StatusOr<Value> QuantizeModule(const KernelContext&, const Module& m,
                                     absl::Span<const Value> args, const ValueKwargs&) {
  ASSIGN_OR_RETURN(const Tensor* x, OnlyTensorInput(args, m));
  ASSIGN_OR_RETURN(double scale, AttrOrTensorNumber(m, "scale"));
  ASSIGN_OR_RETURN(double zero_point, AttrOrTensorNumber(m, "zero_point"));
  const Argument* dtype = m.FindAttribute("dtype");
  if (dtype == nullptr || !dtype->is_dtype()) {
    return absl::InvalidArgumentError(
        absl::StrCat(m.type().name(), " attribute 'dtype': expected a dtype"));
  }
  ASSIGN_OR_RETURN(Tensor y, quantized::QuantizePerTensor(
                                 *x, scale, static_cast<int64_t>(zero_point), dtype->as_dtype()));
  return Value(std::move(y));
}

absl::StatusOr<Value> DequantizeModule(const KernelContext&, const Module& m,
                                       absl::Span<const Value> args, const ValueKwargs&) {
  ASSIGN_OR_RETURN(const Tensor* x, OnlyTensorInput(args, m));
  ASSIGN_OR_RETURN(Tensor y, quantized::Dequantize(*x));
  return Value(std::move(y));
}

// ---- Reference modules ----

// The weight quantized with the module's weight_* parameters and dequantized again
// (torch.ao.nn.quantized.reference's _quantize_and_dequantize_weight).
absl::StatusOr<Tensor> QuantizeDequantizeWeight(const Module& m) {
  const std::string type(m.type().name());
  ASSIGN_OR_RETURN(const Tensor* weight, m.GetTensor("weight"));
  ASSIGN_OR_RETURN(const Tensor* scale_t, m.GetTensor("weight_scale"));
  ASSIGN_OR_RETURN(const Tensor* zero_point_t, m.GetTensor("weight_zero_point"));
  ASSIGN_OR_RETURN(std::vector<double> scales,
                   NumbersOfTensor(*scale_t, absl::StrCat(type, " weight_scale")));
  ASSIGN_OR_RETURN(std::vector<double> zero_points,
                   NumbersOfTensor(*zero_point_t, absl::StrCat(type, " weight_zero_point")));
  const Argument* qscheme = m.FindAttribute("weight_qscheme");
  const Argument* dtype = m.FindAttribute("weight_dtype");
  if (qscheme == nullptr || !qscheme->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(type, " attribute 'weight_qscheme': expected "
                                                         "torch.per_tensor_affine or "
                                                         "torch.per_channel_affine"));
  }
  if (dtype == nullptr || !dtype->is_dtype()) {
    return absl::InvalidArgumentError(
        absl::StrCat(type, " attribute 'weight_dtype': expected a dtype"));
  }
  if (!IsQuantized(dtype->as_dtype())) return *weight;  // e.g. float16: not emulated here
  const absl::string_view scheme = qscheme->as_string();
  absl::StatusOr<Tensor> q;
  if (scheme == "torch.per_tensor_affine") {
    if (scales.size() != 1 || zero_points.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          type, ": per-tensor weight_scale / weight_zero_point must have one element; got ",
          scales.size(), " and ", zero_points.size()));
    }
    q = quantized::QuantizePerTensor(*weight, scales[0], static_cast<int64_t>(zero_points[0]),
                                     dtype->as_dtype());
  } else if (scheme == "torch.per_channel_affine") {
    ASSIGN_OR_RETURN(const Tensor* axis_t, m.GetTensor("weight_axis"));
    ASSIGN_OR_RETURN(std::vector<double> axis,
                     NumbersOfTensor(*axis_t, absl::StrCat(type, " weight_axis")));
    if (axis.size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(type, ": weight_axis must have one element; got ", axis.size()));
    }
    q = quantized::QuantizePerChannel(*weight, scales, ToInts(zero_points),
                                      static_cast<int64_t>(axis[0]), dtype->as_dtype());
  } else {
    return absl::UnimplementedError(absl::StrCat(type, " attribute 'weight_qscheme' is ",
                                                 scheme, "; supported: torch.per_tensor_affine, "
                                                 "torch.per_channel_affine"));
  }
  if (!q.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(type, " weight: ", q.status().message()));
  }
  return quantized::Dequantize(*q);
}

// nnqr.X runs the float kernel of `float_type` on a copy of the module whose weight is
// quantized and dequantized.
ModuleKernel ReferenceModule(std::string float_type) {
  return [float_type](const KernelContext& ctx, const Module& m, absl::Span<const Value> args,
                      const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ASSIGN_OR_RETURN(Tensor weight, QuantizeDequantizeWeight(m));
    std::unique_ptr<Module> float_module = m.Clone();
    float_module->set_type(Symbol::Intern(float_type));
    float_module->SetTensor("weight", std::move(weight));
    return ctx.registry.CallModule(ctx, *float_module, args, kwargs);
  };
}

// ---- Unary pass-through overloads (quantized input) ----

ModuleKernel UnaryModule(
    std::function<absl::StatusOr<Tensor>(const Module&, const Tensor&)> fn) {
  return [fn](const KernelContext&, const Module& m, absl::Span<const Value> args,
              const ValueKwargs&) -> absl::StatusOr<Value> {
    ASSIGN_OR_RETURN(const Tensor* x, OnlyTensorInput(args, m));
    ASSIGN_OR_RETURN(Tensor y, fn(m, *x));
    return Value(std::move(y));
  };
}

FunctionKernel UnaryFunction(
    std::function<absl::StatusOr<Tensor>(const ArgReader&, const Tensor&)> fn) {
  return [fn](const KernelContext&, absl::Span<const Value> args,
              const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ArgReader r(args, kwargs);
    ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
    ASSIGN_OR_RETURN(Tensor y, fn(r, *x));
    return Value(std::move(y));
  };
}

absl::StatusOr<Pool2dParams> ModulePoolParams(const Module& m, bool max_pool) {
  Pool2dParams p;
  ASSIGN_OR_RETURN(p.kernel_size, AttrPair(m, "kernel_size", 0));
  const Argument* stride = m.FindAttribute("stride");
  if (stride == nullptr || stride->is_none() || (stride->is_list() && stride->items().empty())) {
    p.stride = p.kernel_size;
  } else {
    ASSIGN_OR_RETURN(p.stride, AttrPair(m, "stride", 0));
  }
  ASSIGN_OR_RETURN(p.padding, AttrPair(m, "padding", 0));
  if (m.FindAttribute("ceil_mode") != nullptr) {
    ASSIGN_OR_RETURN(p.ceil_mode, m.GetBool("ceil_mode"));
  }
  if (max_pool) {
    ASSIGN_OR_RETURN(p.dilation, AttrPair(m, "dilation", 1));
    if (const Argument* ri = m.FindAttribute("return_indices"); ri && ri->is_bool() && ri->as_bool()) {
      return absl::UnimplementedError("nn.MaxPool2d: return_indices=True on a quantized input");
    }
  } else {
    if (m.FindAttribute("count_include_pad") != nullptr) {
      ASSIGN_OR_RETURN(p.count_include_pad, m.GetBool("count_include_pad"));
    }
    const Argument* divisor = m.FindAttribute("divisor_override");
    if (divisor != nullptr && !divisor->is_none()) {
      ASSIGN_OR_RETURN(int64_t d, m.GetInt("divisor_override"));
      p.divisor_override = d;
    }
  }
  return p;
}

absl::StatusOr<Pool2dParams> FunctionPoolParams(const ArgReader& r, bool max_pool) {
  // max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
  //            return_indices=False)
  // avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
  //            count_include_pad=True, divisor_override=None)
  Pool2dParams p;
  ASSIGN_OR_RETURN(std::vector<int64_t> k, r.OptionalInts(1, "kernel_size", 2, {}));
  if (k.empty()) return absl::InvalidArgumentError("arg 'kernel_size': required");
  ASSIGN_OR_RETURN(p.kernel_size, Pair(k));
  ASSIGN_OR_RETURN(std::vector<int64_t> s, r.OptionalInts(2, "stride", 2, {}));
  if (s.empty()) {
    p.stride = p.kernel_size;
  } else {
    ASSIGN_OR_RETURN(p.stride, Pair(s));
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> pad, r.OptionalInts(3, "padding", 2, {0, 0}));
  ASSIGN_OR_RETURN(p.padding, Pair(pad));
  if (max_pool) {
    ASSIGN_OR_RETURN(std::vector<int64_t> d, r.OptionalInts(4, "dilation", 2, {1, 1}));
    ASSIGN_OR_RETURN(p.dilation, Pair(d));
    ASSIGN_OR_RETURN(p.ceil_mode, r.OptionalBool(5, "ceil_mode", false));
    ASSIGN_OR_RETURN(bool indices, r.OptionalBool(6, "return_indices", false));
    if (indices) {
      return absl::UnimplementedError("max_pool2d: return_indices=True on a quantized input");
    }
  } else {
    ASSIGN_OR_RETURN(p.ceil_mode, r.OptionalBool(4, "ceil_mode", false));
    ASSIGN_OR_RETURN(p.count_include_pad, r.OptionalBool(5, "count_include_pad", true));
    const Value* divisor = r.Find(6, "divisor_override");
    if (divisor != nullptr && !divisor->is_none()) {
      ASSIGN_OR_RETURN(int64_t d, IntOf(*divisor, "divisor_override"));
      p.divisor_override = d;
    }
  }
  return p;
}

// Channels-last overloads of a max pool: a channels-last input is pooled in its layout,
// a row-major one runs `row_major` as it is.
ModuleKernel MaxPoolModuleChannelsLast(ModuleKernel row_major) {
  return [row_major](const KernelContext& ctx, const Module& m, absl::Span<const Value> args,
                     const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    if (args.size() != 1 || !args[0].is_channels_last()) return row_major(ctx, m, args, kwargs);
    ASSIGN_OR_RETURN(const Pool2dParams p, ModulePoolParams(m, true));
    ASSIGN_OR_RETURN(Tensor y,
                     quantized::QuantizedMaxPool2dChannelsLast(args[0].as_channels_last(), p));
    return Value::ChannelsLast(std::move(y));
  };
}

FunctionKernel MaxPoolFunctionChannelsLast(FunctionKernel row_major) {
  return [row_major](const KernelContext& ctx, absl::Span<const Value> args,
                     const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    if (args.empty() || !args[0].is_channels_last()) return row_major(ctx, args, kwargs);
    std::vector<Value> plain(args.begin(), args.end());
    plain[0] = Value(args[0].as_channels_last());  // the parameters are read from the rest
    ArgReader r(plain, kwargs);
    ASSIGN_OR_RETURN(const Pool2dParams p, FunctionPoolParams(r, true));
    ASSIGN_OR_RETURN(Tensor y,
                     quantized::QuantizedMaxPool2dChannelsLast(args[0].as_channels_last(), p));
    return Value::ChannelsLast(std::move(y));
  };
}

// output_size: an int or two entries, each an int or None (None keeps the input size).
absl::StatusOr<std::array<int64_t, 2>> AdaptiveSize(const Value& v, const Tensor& x) {
  const std::array<int64_t, 2> input = {x.dim() >= 2 ? x.shape()[x.dim() - 2] : 0,
                                        x.dim() >= 2 ? x.shape()[x.dim() - 1] : 0};
  if (v.is_int()) return std::array<int64_t, 2>{v.as_int(), v.as_int()};
  if (v.is_list() && (v.items().size() == 1 || v.items().size() == 2)) {
    std::array<int64_t, 2> out{};
    for (size_t i = 0; i < 2; ++i) {
      const Value& e = v.items()[v.items().size() == 1 ? 0 : i];
      if (e.is_none()) {
        out[i] = input[i];
      } else if (e.is_int()) {
        out[i] = e.as_int();
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("arg 'output_size': entries must be ints or None; got ", v.ToString()));
      }
    }
    return out;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("arg 'output_size': expected an int or 2 entries; got ", v.ToString()));
}

absl::StatusOr<Value> ArgumentToValue(const Argument& a) {
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


// ---- Activations and normalization with their own output qparams ----

// The output scale / zero point a quantized activation module keeps as attributes or
// one-element buffers (nnq.Hardswish / nnq.ELU: attributes; nnq.LeakyReLU: buffers).
absl::StatusOr<QuantParams> ModuleOutputQParams(const Module& m, absl::string_view scale_name,
                                                absl::string_view zero_point_name) {
  ASSIGN_OR_RETURN(double scale, AttrOrTensorNumber(m, scale_name));
  ASSIGN_OR_RETURN(double zero_point, AttrOrTensorNumber(m, zero_point_name));
  return QuantParams::PerTensor(scale, static_cast<int64_t>(zero_point));
}

double FloatAttrOr(const Module& m, absl::string_view name, double fallback,
                   absl::Status& status) {
  if (m.FindAttribute(name) == nullptr) return fallback;
  absl::StatusOr<double> v = m.GetFloat(name);
  if (!v.ok()) {
    status = v.status();
    return fallback;
  }
  return *v;
}

// nnq.BatchNorm2d / 3d, nniq.BNReLU2d / 3d: tensors weight, bias, running_mean,
// running_var; attributes eps, scale, zero_point.
ModuleKernel QuantizedBatchNormModule(bool relu) {
  return [relu](const KernelContext&, const Module& m, absl::Span<const Value> args,
                const ValueKwargs&) -> absl::StatusOr<Value> {
    ASSIGN_OR_RETURN(const Tensor* x, OnlyTensorInput(args, m));
    ASSIGN_OR_RETURN(const Tensor* mean, m.GetTensor("running_mean"));
    ASSIGN_OR_RETURN(const Tensor* var, m.GetTensor("running_var"));
    ASSIGN_OR_RETURN(QuantParams out, ModuleOutputQParams(m, "scale", "zero_point"));
    absl::Status status;
    const double eps = FloatAttrOr(m, "eps", 1e-5, status);
    RETURN_IF_ERROR(status);
    const int64_t rank = m.type().name() == "nnq.BatchNorm3d" ||
                                 m.type().name() == "nniq.BNReLU3d" ? 5 : 4;
    if (x->dim() != rank) {
      return absl::InvalidArgumentError(absl::StrCat(m.type().name(), ": input has shape ",
                                                     x->ShapeString(), "; expected ", rank,
                                                     "-D [N, C, ...]"));
    }
    ASSIGN_OR_RETURN(Tensor y, quantized::QuantizedBatchNorm(
                                   *x, m.FindTensor("weight"), m.FindTensor("bias"), *mean,
                                   *var, eps, out.scales[0], out.zero_points[0], relu));
    return Value(std::move(y));
  };
}

// nnq.LayerNorm / GroupNorm / InstanceNorm1d / 2d / 3d: tensors weight, bias (either may
// be absent); attributes eps, scale, zero_point, and normalized_shape / num_groups.
absl::StatusOr<Value> QuantizedNormModule(const KernelContext&, const Module& m,
                                          absl::Span<const Value> args, const ValueKwargs&) {
  ASSIGN_OR_RETURN(const Tensor* x, OnlyTensorInput(args, m));
  ASSIGN_OR_RETURN(QuantParams out, ModuleOutputQParams(m, "scale", "zero_point"));
  absl::Status status;
  const double eps = FloatAttrOr(m, "eps", 1e-5, status);
  RETURN_IF_ERROR(status);
  const Tensor* weight = m.FindTensor("weight");
  const Tensor* bias = m.FindTensor("bias");
  const absl::string_view type = m.type().name();
  absl::StatusOr<Tensor> y;
  if (type == "nnq.LayerNorm") {
    const Argument* shape = m.FindAttribute("normalized_shape");
    if (shape == nullptr) {
      return absl::InvalidArgumentError("nnq.LayerNorm: missing attribute 'normalized_shape'");
    }
    ASSIGN_OR_RETURN(Value v, ArgumentToValue(*shape));
    ASSIGN_OR_RETURN(std::vector<int64_t> dims, ValueToInts(v, "normalized_shape"));
    y = quantized::QuantizedLayerNorm(*x, dims, weight, bias, eps, out.scales[0],
                                      out.zero_points[0]);
  } else if (type == "nnq.GroupNorm") {
    ASSIGN_OR_RETURN(int64_t groups, m.GetInt("num_groups"));
    y = quantized::QuantizedGroupNorm(*x, groups, weight, bias, eps, out.scales[0],
                                      out.zero_points[0]);
  } else {
    const int64_t rank = type == "nnq.InstanceNorm1d" ? 3 : type == "nnq.InstanceNorm2d" ? 4 : 5;
    if (x->dim() != rank) {
      return absl::InvalidArgumentError(absl::StrCat(type, ": input has shape ",
                                                     x->ShapeString(), "; expected ", rank,
                                                     "-D [N, C, ...]"));
    }
    y = quantized::QuantizedInstanceNorm(*x, weight, bias, eps, out.scales[0],
                                         out.zero_points[0]);
  }
  if (!y.ok()) return y.status();
  return Value(std::move(*y));
}

// torch.ops.quantized.batch_norm2d[_relu] / batch_norm3d[_relu](qx, weight, bias, mean,
// var, eps, output_scale, output_zero_point).
FunctionKernel QuantizedBatchNormFn(bool relu) {
  return [relu](const KernelContext&, absl::Span<const Value> args,
                const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ArgReader r(args, kwargs);
    RETURN_IF_ERROR(r.ExpectAtMostPositional(8));
    ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "qx"));
    ASSIGN_OR_RETURN(const Tensor* weight, r.OptionalFloatTensor(1, "weight"));
    ASSIGN_OR_RETURN(const Tensor* bias, r.OptionalFloatTensor(2, "bias"));
    ASSIGN_OR_RETURN(const Tensor* mean, r.GetFloatTensor(3, "mean"));
    ASSIGN_OR_RETURN(const Tensor* var, r.GetFloatTensor(4, "var"));
    ASSIGN_OR_RETURN(double eps, r.GetFloat(5, "eps"));
    ASSIGN_OR_RETURN(Value scale_v, r.Required(6, "output_scale"));
    ASSIGN_OR_RETURN(Value zp_v, r.Required(7, "output_zero_point"));
    ASSIGN_OR_RETURN(double scale, NumberOf(scale_v, "output_scale"));
    ASSIGN_OR_RETURN(int64_t zero_point, IntOf(zp_v, "output_zero_point"));
    ASSIGN_OR_RETURN(Tensor y, quantized::QuantizedBatchNorm(*x, weight, bias, *mean, *var, eps,
                                                             scale, zero_point, relu));
    return Value(std::move(y));
  };
}

// mean(input, dim=None, keepdim=False, dtype=None) on a quantized tensor.
absl::StatusOr<Value> QuantizedMeanFn(const KernelContext&, absl::Span<const Value> args,
                                      const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  RETURN_IF_ERROR(r.ExpectAtMostPositional(4));
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  std::vector<int64_t> dims;
  if (const Value* d = r.Find(1, "dim"); d != nullptr && !d->is_none()) {
    ASSIGN_OR_RETURN(dims, r.OptionalInts(1, "dim", 0, {}));
  }
  ASSIGN_OR_RETURN(bool keepdim, r.OptionalBool(2, "keepdim", false));
  if (const Value* dt = r.Find(3, "dtype"); dt != nullptr && !dt->is_none()) {
    if (!dt->is_dtype() || dt->as_dtype() != x->dtype()) {
      return absl::UnimplementedError(absl::StrCat(
          "quantized mean: arg 'dtype' is ", dt->ToString(),
          "; only None or the input's own dtype is supported"));
    }
  }
  // 4-D: channels-last in a converted model (runtime/quantized/pooling.h).
  ASSIGN_OR_RETURN(Tensor y, quantized::QuantizedMean(*x, std::move(dims), keepdim,
                                                      /*channels_last=*/x->dim() == 4));
  return Value(std::move(y));
}

// gelu's `approximate`: None / 'none' (erf) or 'tanh'.
absl::StatusOr<bool> GeluApproximation(const Value& v) {
  if (v.is_none() || (v.is_string() && v.as_string() == "none")) return false;
  if (v.is_string() && v.as_string() == "tanh") return true;
  return absl::InvalidArgumentError(absl::StrCat("gelu: 'approximate' is ", v.ToString(),
                                                 "; expected 'none' or 'tanh'"));
}

// ---- Ops that only move or select stored values ----

// The stored integers of a per-tensor quantized tensor as float32 (exact for 8-bit
// dtypes): a float kernel that only copies or selects elements (nearest interpolation,
// max pooling) then computes exactly what the quantized kernel does.
absl::StatusOr<Tensor> StoredValuesAsFloat(const Tensor& qx, absl::string_view what) {
  RETURN_IF_ERROR(quantized::ExpectPerTensorQuantized(qx, what, "input"));
  if (qx.dtype() == DType::kQInt32) {
    return absl::UnimplementedError(absl::StrCat(what, ": qint32 input; expected quint8 or qint8"));
  }
  const std::vector<int32_t> q = quantized::IntValues(qx);
  return Tensor::FromFloats(qx.shape(), std::vector<float>(q.begin(), q.end()));
}

// The float result of such a kernel back to stored integers with `like`'s dtype and
// qparams.
absl::StatusOr<Tensor> StoredValuesFromFloat(const Value& result, const Tensor& like,
                                             absl::string_view what) {
  if (!result.is_tensor() || result.as_tensor().dtype() != DType::kFloat32) {
    return absl::InternalError(absl::StrCat(what, ": the float kernel returned ",
                                            result.ToString(), "; expected a float32 tensor"));
  }
  const Tensor& y = result.as_tensor();
  std::vector<int32_t> q(static_cast<size_t>(y.numel()));
  for (int64_t i = 0; i < y.numel(); ++i) {
    q[i] = quantized::RoundAndClamp(y.data<float>()[i], DTypeMin(like.dtype()),
                                    DTypeMax(like.dtype()));
  }
  return quantized::FromIntValues(like.dtype(), y.shape(), like.qparams(), q);
}

// The (h, w) of a size / scale_factor arg (an int / float or a pair; None: absent).
absl::StatusOr<std::optional<std::array<double, 2>>> SpatialPairOf(const Value* v,
                                                                   absl::string_view name) {
  if (v == nullptr || v->is_none()) return std::optional<std::array<double, 2>>();
  if (v->is_number()) return std::optional<std::array<double, 2>>({v->as_float(), v->as_float()});
  if (v->is_list() && v->items().size() == 2 && v->items()[0].is_number() &&
      v->items()[1].is_number()) {
    return std::optional<std::array<double, 2>>(
        {v->items()[0].as_float(), v->items()[1].as_float()});
  }
  return absl::InvalidArgumentError(absl::StrCat("interpolate: arg '", name, "' is ",
                                                 v->ToString(),
                                                 "; expected a number or two numbers"));
}

// Bilinear interpolate / upsample of a quantized tensor from PyTorch's arguments: the
// output size is `size`, or floor(in * scale_factor), and the scales are passed on to the
// kernel unless recompute_scale_factor is set (as F.interpolate does).
absl::StatusOr<Tensor> QuantizedBilinear(const Tensor& qx, const Value* size, const Value* scale,
                                         bool align_corners, bool recompute) {
  ASSIGN_OR_RETURN(auto sizes, SpatialPairOf(size, "size"));
  ASSIGN_OR_RETURN(auto scales, SpatialPairOf(scale, "scale_factor"));
  if (sizes.has_value() == scales.has_value()) {
    return absl::InvalidArgumentError(
        "interpolate: exactly one of 'size' and 'scale_factor' must be given");
  }
  if (qx.dim() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bilinear interpolate: input has shape ", qx.ShapeString(), "; expected [N, C, H, W]"));
  }
  std::array<int64_t, 2> out{};
  if (sizes.has_value()) {
    out = {static_cast<int64_t>((*sizes)[0]), static_cast<int64_t>((*sizes)[1])};
  } else {
    for (int i = 0; i < 2; ++i) {
      out[i] = static_cast<int64_t>(
          std::floor(static_cast<double>(qx.shape()[2 + i]) * (*scales)[i]));
    }
  }
  return quantized::QuantizedUpsampleBilinear2d(
      qx, out, align_corners,
      scales.has_value() && !recompute ? scales : std::optional<std::array<double, 2>>());
}

// A quantized overload of a call_function whose float kernel only selects values
// (adaptive_max_pool2d): the float kernel runs on the stored integers.
FunctionKernel OnStoredValuesFn(OpKind op, Symbol target) {
  return [op, target](const KernelContext& ctx, absl::Span<const Value> args,
                      const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ArgReader r(args, kwargs);
    ASSIGN_OR_RETURN(const Tensor* qx, r.GetTensor(0, "input"));
    const FunctionKernel* kernel = ctx.registry.FindFunction(op, target);
    if (kernel == nullptr) {
      return absl::UnimplementedError(absl::StrCat("no float kernel for ", target.name()));
    }
    ASSIGN_OR_RETURN(Tensor x, StoredValuesAsFloat(*qx, target.name()));
    std::vector<Value> float_args(args.begin(), args.end());
    float_args[0] = Value(std::move(x));
    ASSIGN_OR_RETURN(Value y, (*kernel)(ctx, float_args, kwargs));
    ASSIGN_OR_RETURN(Tensor out, StoredValuesFromFloat(y, *qx, target.name()));
    return Value(std::move(out));
  };
}

// F.interpolate(input, size=None, scale_factor=None, mode='nearest', align_corners=None,
// recompute_scale_factor=None, antialias=False) on a quantized tensor: nearest copies
// stored values (the float kernel on them), bilinear is QuantizedUpsampleBilinear2d.
absl::StatusOr<Value> QuantizedInterpolateFn(const KernelContext& ctx,
                                             absl::Span<const Value> args,
                                             const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  ASSIGN_OR_RETURN(const Tensor* qx, r.GetTensor(0, "input"));
  std::string mode = "nearest";
  if (const Value* v = r.Find(3, "mode"); v != nullptr && !v->is_none()) {
    if (!v->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("interpolate: arg 'mode' is ", v->ToString(), "; expected a string"));
    }
    mode = std::string(v->as_string());
  }
  if (mode == "nearest") {
    return OnStoredValuesFn(OpKind::kCallFunction,
                            Symbol::Intern("torch.nn.functional.interpolate"))(ctx, args, kwargs);
  }
  if (mode != "bilinear") {
    return absl::UnimplementedError(absl::StrCat(
        "interpolate on a quantized tensor: mode '", mode, "'; supported: nearest, bilinear"));
  }
  ASSIGN_OR_RETURN(bool align_corners, r.OptionalBool(4, "align_corners", false));
  ASSIGN_OR_RETURN(bool recompute, r.OptionalBool(5, "recompute_scale_factor", false));
  ASSIGN_OR_RETURN(bool antialias, r.OptionalBool(6, "antialias", false));
  if (antialias) return absl::UnimplementedError("interpolate: antialias=True");
  ASSIGN_OR_RETURN(Tensor y, QuantizedBilinear(*qx, r.Find(1, "size"), r.Find(2, "scale_factor"),
                                               align_corners, recompute));
  return Value(std::move(y));
}

// nn.AdaptiveMaxPool2d on a quantized tensor: its float kernel on the stored integers.
absl::StatusOr<Value> QuantizedAdaptiveMaxPoolModule(const KernelContext& ctx, const Module& m,
                                                     absl::Span<const Value> args,
                                                     const ValueKwargs& kwargs) {
  ASSIGN_OR_RETURN(const Tensor* qx, OnlyTensorInput(args, m));
  const ModuleKernel* kernel = ctx.registry.FindModule(m.type());
  if (kernel == nullptr) {
    return absl::UnimplementedError(absl::StrCat("no float kernel for ", m.type().name()));
  }
  ASSIGN_OR_RETURN(Tensor x, StoredValuesAsFloat(*qx, m.type().name()));
  const std::vector<Value> float_args = {Value(std::move(x))};
  ASSIGN_OR_RETURN(Value y, (*kernel)(ctx, m, float_args, kwargs));
  ASSIGN_OR_RETURN(Tensor out, StoredValuesFromFloat(y, *qx, m.type().name()));
  return Value(std::move(out));
}

// nn.Upsample / nn.UpsamplingNearest2d / nn.UpsamplingBilinear2d on a quantized tensor:
// their attributes are interpolate's arguments (the last two fix mode, and bilinear
// align_corners=True, in their constructors).
ModuleKernel QuantizedUpsampleModule(absl::string_view default_mode) {
  const std::string fallback(default_mode);
  return [fallback](const KernelContext& ctx, const Module& m, absl::Span<const Value> args,
                    const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ASSIGN_OR_RETURN(const Tensor* qx, OnlyTensorInput(args, m));
    std::string mode = fallback;
    if (const Argument* a = m.FindAttribute("mode"); a != nullptr && !a->is_none()) {
      if (!a->is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(m.type().name(), ": attribute 'mode' is ",
                                                       a->ToString(), "; expected a string"));
      }
      mode = std::string(a->as_string());
    }
    if (mode == "nearest") {
      return QuantizedAdaptiveMaxPoolModule(ctx, m, args, kwargs);  // copies values too
    }
    if (mode != "bilinear") {
      return absl::UnimplementedError(absl::StrCat(m.type().name(), " on a quantized tensor: mode '",
                                                   mode, "'; supported: nearest, bilinear"));
    }
    bool align_corners = false;
    if (const Argument* a = m.FindAttribute("align_corners"); a != nullptr && !a->is_none()) {
      ASSIGN_OR_RETURN(align_corners, m.GetBool("align_corners"));
    }
    std::optional<Value> size, scale;
    if (const Argument* a = m.FindAttribute("size"); a != nullptr && !a->is_none()) {
      ASSIGN_OR_RETURN(size, ArgumentToValue(*a));
    }
    if (const Argument* a = m.FindAttribute("scale_factor"); a != nullptr && !a->is_none()) {
      ASSIGN_OR_RETURN(scale, ArgumentToValue(*a));
    }
    bool recompute = false;
    if (const Argument* a = m.FindAttribute("recompute_scale_factor");
        a != nullptr && !a->is_none()) {
      ASSIGN_OR_RETURN(recompute, m.GetBool("recompute_scale_factor"));
    }
    ASSIGN_OR_RETURN(Tensor y, QuantizedBilinear(*qx, size ? &*size : nullptr,
                                                 scale ? &*scale : nullptr, align_corners,
                                                 recompute));
    return Value(std::move(y));
  };
}

// ---- Functions ----

absl::StatusOr<Value> QuantizePerTensorFn(const KernelContext&, absl::Span<const Value> args,
                                          const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(Value scale_v, r.Required(1, "scale"));
  ASSIGN_OR_RETURN(Value zp_v, r.Required(2, "zero_point"));
  ASSIGN_OR_RETURN(double scale, NumberOf(scale_v, "scale"));
  ASSIGN_OR_RETURN(int64_t zero_point, IntOf(zp_v, "zero_point"));
  ASSIGN_OR_RETURN(DType dtype, DTypeArg(r, 3, "dtype"));
  ASSIGN_OR_RETURN(Tensor y, quantized::QuantizePerTensor(*x, scale, zero_point, dtype));
  return Value(std::move(y));
}

absl::StatusOr<Value> QuantizePerChannelFn(const KernelContext&, absl::Span<const Value> args,
                                           const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
  ASSIGN_OR_RETURN(const Tensor* scales_t, r.GetTensor(1, "scales"));
  ASSIGN_OR_RETURN(const Tensor* zps_t, r.GetTensor(2, "zero_points"));
  ASSIGN_OR_RETURN(std::vector<double> scales, NumbersOfTensor(*scales_t, "arg 'scales'"));
  ASSIGN_OR_RETURN(std::vector<double> zps, NumbersOfTensor(*zps_t, "arg 'zero_points'"));
  ASSIGN_OR_RETURN(int64_t axis, r.GetInt(3, "axis"));
  ASSIGN_OR_RETURN(DType dtype, DTypeArg(r, 4, "dtype"));
  ASSIGN_OR_RETURN(Tensor y,
                   quantized::QuantizePerChannel(*x, scales, ToInts(zps), axis, dtype));
  return Value(std::move(y));
}

absl::StatusOr<Value> DequantizeFn(const KernelContext&, absl::Span<const Value> args,
                                   const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  ASSIGN_OR_RETURN(Value x, r.Required(0, "input"));
  if (x.is_list()) {  // torch.dequantize(list of tensors) -> list
    std::vector<Value> out;
    for (const Value& item : x.items()) {
      if (!item.is_tensor()) {
        return absl::InvalidArgumentError(
            absl::StrCat("dequantize: expected tensors in the list; got ", item.ToString()));
      }
      ASSIGN_OR_RETURN(Tensor y, quantized::Dequantize(item.as_tensor()));
      out.push_back(Value(std::move(y)));
    }
    return Value::List(std::move(out));
  }
  if (!x.is_tensor()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dequantize: expected a Tensor; got ", x.ToString()));
  }
  ASSIGN_OR_RETURN(Tensor y, quantized::Dequantize(x.as_tensor()));
  return Value(std::move(y));
}

FunctionKernel BinaryFn(bool add, bool relu) {
  return [add, relu](const KernelContext&, absl::Span<const Value> args,
                     const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ArgReader r(args, kwargs);
    ASSIGN_OR_RETURN(const Tensor* a, r.GetTensor(0, "qa"));
    ASSIGN_OR_RETURN(const Tensor* b, r.GetTensor(1, "qb"));
    ASSIGN_OR_RETURN(Value scale_v, r.Required(2, "scale"));
    ASSIGN_OR_RETURN(Value zp_v, r.Required(3, "zero_point"));
    ASSIGN_OR_RETURN(double scale, NumberOf(scale_v, "scale"));
    ASSIGN_OR_RETURN(int64_t zero_point, IntOf(zp_v, "zero_point"));
    ASSIGN_OR_RETURN(Tensor y, add ? quantized::QuantizedAdd(*a, *b, scale, zero_point, relu)
                                   : quantized::QuantizedMul(*a, *b, scale, zero_point, relu));
    return Value(std::move(y));
  };
}

absl::StatusOr<std::vector<Tensor>> TensorList(const Value& v) {
  if (!v.is_list()) {
    return absl::InvalidArgumentError(
        absl::StrCat("arg 'tensors': expected a list of tensors; got ", v.ToString()));
  }
  std::vector<Tensor> out;
  for (const Value& item : v.items()) {
    if (!item.is_tensor()) {
      return absl::InvalidArgumentError(
          absl::StrCat("arg 'tensors': expected tensors; got ", item.ToString()));
    }
    out.push_back(item.as_tensor());
  }
  return out;
}

// torch.cat(tensors, dim=0) on quantized tensors and
// torch.ops.quantized.cat(tensors, dim, scale=None, zero_point=None).
FunctionKernel CatFn(bool explicit_qparams) {
  return [explicit_qparams](const KernelContext&, absl::Span<const Value> args,
                            const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ArgReader r(args, kwargs);
    ASSIGN_OR_RETURN(Value tensors_v, r.Required(0, "tensors"));
    ASSIGN_OR_RETURN(std::vector<Tensor> tensors, TensorList(tensors_v));
    ASSIGN_OR_RETURN(int64_t dim, r.OptionalInt(1, "dim", 0));
    std::optional<quantized::OutputQParams> out;
    if (explicit_qparams) {
      const Value* scale = r.Find(2, "scale");
      const Value* zp = r.Find(3, "zero_point");
      if (scale != nullptr && !scale->is_none() && zp != nullptr && !zp->is_none()) {
        ASSIGN_OR_RETURN(double s, NumberOf(*scale, "scale"));
        ASSIGN_OR_RETURN(int64_t z, IntOf(*zp, "zero_point"));
        out = quantized::OutputQParams{s, z};
      }
    }
    ASSIGN_OR_RETURN(Tensor y, quantized::QuantizedCat(tensors, dim, out));
    return Value(std::move(y));
  };
}

// The output_scale / output_zero_point of a functional quantized conv / linear: keyword
// args per graph/NAMING.md (positions `index`, `index + 1` are accepted too).
absl::StatusOr<quantized::OutputQParams> FunctionalOutputQParams(const ArgReader& r,
                                                                size_t index) {
  ASSIGN_OR_RETURN(Value scale_v, r.Required(index, "output_scale"));
  ASSIGN_OR_RETURN(Value zp_v, r.Required(index + 1, "output_zero_point"));
  ASSIGN_OR_RETURN(double scale, NumberOf(scale_v, "output_scale"));
  ASSIGN_OR_RETURN(int64_t zero_point, IntOf(zp_v, "output_zero_point"));
  return quantized::OutputQParams{scale, zero_point};
}

// The stride, padding, dilation and groups of a functional conv2d, args `first` on.
absl::StatusOr<Conv2dParams> FunctionalConv2dParams(const ArgReader& r, size_t first) {
  Conv2dParams p;
  ASSIGN_OR_RETURN(std::vector<int64_t> stride, r.OptionalInts(first, "stride", 2, {1, 1}));
  ASSIGN_OR_RETURN(std::vector<int64_t> padding,
                   r.OptionalInts(first + 1, "padding", 2, {0, 0}));
  ASSIGN_OR_RETURN(std::vector<int64_t> dilation,
                   r.OptionalInts(first + 2, "dilation", 2, {1, 1}));
  ASSIGN_OR_RETURN(p.stride, Pair(std::move(stride)));
  ASSIGN_OR_RETURN(p.padding, Pair(std::move(padding)));
  ASSIGN_OR_RETURN(p.dilation, Pair(std::move(dilation)));
  ASSIGN_OR_RETURN(p.groups, r.OptionalInt(first + 3, "groups", 1));
  return p;
}

// torch.ops.quantized.conv2d[_relu] as lowering writes it for F.conv2d:
// (input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *,
//  output_scale, output_zero_point), input and weight quantized, bias float or None.
FunctionKernel FunctionalConv2dFn(bool relu) {
  return [relu](const KernelContext& ctx, absl::Span<const Value> args,
                const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ArgReader r(args, kwargs);
    RETURN_IF_ERROR(r.ExpectAtMostPositional(9));
    ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
    ASSIGN_OR_RETURN(const Tensor* w, r.GetTensor(1, "weight"));
    ASSIGN_OR_RETURN(const Tensor* bias, r.OptionalFloatTensor(2, "bias"));
    ASSIGN_OR_RETURN(Conv2dParams p, FunctionalConv2dParams(r, 3));
    ASSIGN_OR_RETURN(quantized::OutputQParams out, FunctionalOutputQParams(r, 7));
    ASSIGN_OR_RETURN(Tensor y, quantized::QuantizedConv2d(*x, *w, bias, p, out.scale,
                                                          out.zero_point, relu, ctx.engine));
    return Value(std::move(y));
  };
}

// torch.ops.quantized.conv2d_add[_relu] as lowering writes F.conv2d with the residual add
// (+ relu) after it: (input, accumulator, weight, bias=None, stride=1, padding=0,
// dilation=1, groups=1, *, output_scale, output_zero_point), the accumulator quantized
// per tensor in the conv output's shape (PyTorch's conv2d_add(qx, qaccum, ...) order).
FunctionKernel FunctionalConv2dAddFn(bool relu) {
  return [relu](const KernelContext&, absl::Span<const Value> args,
                const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ArgReader r(args, kwargs);
    RETURN_IF_ERROR(r.ExpectAtMostPositional(10));
    ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
    ASSIGN_OR_RETURN(const Tensor* accumulator, r.GetTensor(1, "accumulator"));
    ASSIGN_OR_RETURN(const Tensor* w, r.GetTensor(2, "weight"));
    ASSIGN_OR_RETURN(const Tensor* bias, r.OptionalFloatTensor(3, "bias"));
    ASSIGN_OR_RETURN(Conv2dParams p, FunctionalConv2dParams(r, 4));
    ASSIGN_OR_RETURN(quantized::OutputQParams out, FunctionalOutputQParams(r, 8));
    ASSIGN_OR_RETURN(Tensor y, quantized::QuantizedConvAdd2d(*x, *accumulator, *w, bias, p,
                                                             out.scale, out.zero_point, relu));
    return Value(std::move(y));
  };
}

// torch.ops.quantized.conv1d / conv3d [_relu], as conv2d above with `spatial` dims per
// parameter (an int broadcasts).
FunctionKernel FunctionalConvNdFn(size_t spatial, bool relu) {
  return [spatial, relu](const KernelContext& ctx, absl::Span<const Value> args,
                         const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ArgReader r(args, kwargs);
    RETURN_IF_ERROR(r.ExpectAtMostPositional(9));
    ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
    ASSIGN_OR_RETURN(const Tensor* w, r.GetTensor(1, "weight"));
    ASSIGN_OR_RETURN(const Tensor* bias, r.OptionalFloatTensor(2, "bias"));
    quantized::QuantizedConvParams p;
    ASSIGN_OR_RETURN(p.stride, r.OptionalInts(3, "stride", spatial,
                                              std::vector<int64_t>(spatial, 1)));
    ASSIGN_OR_RETURN(p.padding, r.OptionalInts(4, "padding", spatial,
                                               std::vector<int64_t>(spatial, 0)));
    ASSIGN_OR_RETURN(p.dilation, r.OptionalInts(5, "dilation", spatial,
                                                std::vector<int64_t>(spatial, 1)));
    ASSIGN_OR_RETURN(p.groups, r.OptionalInt(6, "groups", 1));
    ASSIGN_OR_RETURN(quantized::OutputQParams out, FunctionalOutputQParams(r, 7));
    ASSIGN_OR_RETURN(Tensor y, quantized::QuantizedConvNd(*x, *w, bias, p, out.scale,
                                                          out.zero_point, relu, ctx.engine));
    return Value(std::move(y));
  };
}

// torch.ops.quantized.layer_norm(input, normalized_shape, weight, bias, eps, output_scale,
// output_zero_point), group_norm(input, num_groups, weight, bias, eps, output_scale,
// output_zero_point), instance_norm(input, weight, bias, eps, output_scale,
// output_zero_point), as convert_fx writes them (the last ones usually by keyword).
FunctionKernel QuantizedNormFn(absl::string_view kind) {
  const std::string k(kind);
  return [k](const KernelContext&, absl::Span<const Value> args,
             const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ArgReader r(args, kwargs);
    ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
    const size_t first = k == "instance_norm" ? 1 : 2;  // weight's position
    RETURN_IF_ERROR(r.ExpectAtMostPositional(first + 5));
    ASSIGN_OR_RETURN(const Tensor* weight, r.OptionalFloatTensor(first, "weight"));
    ASSIGN_OR_RETURN(const Tensor* bias, r.OptionalFloatTensor(first + 1, "bias"));
    ASSIGN_OR_RETURN(double eps, r.GetFloat(first + 2, "eps"));
    ASSIGN_OR_RETURN(quantized::OutputQParams out, FunctionalOutputQParams(r, first + 3));
    absl::StatusOr<Tensor> y;
    if (k == "layer_norm") {
      ASSIGN_OR_RETURN(std::vector<int64_t> shape, r.OptionalInts(1, "normalized_shape", 0, {}));
      y = quantized::QuantizedLayerNorm(*x, shape, weight, bias, eps, out.scale, out.zero_point);
    } else if (k == "group_norm") {
      ASSIGN_OR_RETURN(int64_t groups, r.GetInt(1, "num_groups"));
      y = quantized::QuantizedGroupNorm(*x, groups, weight, bias, eps, out.scale,
                                        out.zero_point);
    } else {
      y = quantized::QuantizedInstanceNorm(*x, weight, bias, eps, out.scale, out.zero_point);
    }
    if (!y.ok()) return y.status();
    return Value(std::move(*y));
  };
}

// torch.ops.quantized.linear[_relu] as lowering writes it for F.linear:
// (input, weight, bias=None, *, output_scale, output_zero_point).
FunctionKernel FunctionalLinearFn(bool relu) {
  return [relu](const KernelContext& ctx, absl::Span<const Value> args,
                const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ArgReader r(args, kwargs);
    RETURN_IF_ERROR(r.ExpectAtMostPositional(5));
    ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "input"));
    ASSIGN_OR_RETURN(const Tensor* w, r.GetTensor(1, "weight"));
    ASSIGN_OR_RETURN(const Tensor* bias, r.OptionalFloatTensor(2, "bias"));
    ASSIGN_OR_RETURN(quantized::OutputQParams out, FunctionalOutputQParams(r, 3));
    ASSIGN_OR_RETURN(Tensor y,
                     quantized::QuantizedLinear(*x, *w, bias, out.scale, out.zero_point, relu,
                                                ctx.engine));
    return Value(std::move(y));
  };
}

}  // namespace

absl::Status RegisterQuantizedKernels(KernelRegistry& registry) {
  // Native quantized modules and quantize / dequantize stubs.
  const std::vector<std::pair<const char*, ModuleKernel>> modules = {
      {"nnq.Conv2d", QuantizedConvModule(false, false)},
      {"nniq.ConvReLU2d", QuantizedConvModule(true, false)},
      {"nniq.ConvAdd2d", QuantizedConvAddModule(false)},
      {"nniq.ConvAddReLU2d", QuantizedConvAddModule(true)},
      {"nnq.Conv1d", QuantizedConvNdModule(1, false, false)},
      {"nnq.Conv3d", QuantizedConvNdModule(3, false, false)},
      {"nniq.ConvReLU1d", QuantizedConvNdModule(1, true, false)},
      {"nniq.ConvReLU3d", QuantizedConvNdModule(3, true, false)},
      {"nnq.ConvTranspose1d", QuantizedConvNdModule(1, false, true)},
      {"nnq.ConvTranspose2d", QuantizedConvNdModule(2, false, true)},
      {"nnq.ConvTranspose3d", QuantizedConvNdModule(3, false, true)},
      {"nnq.Linear", QuantizedLinearModule(false)},
      {"nniq.LinearReLU", QuantizedLinearModule(true)},
      {"nnq.Quantize", QuantizeModule},
      {"nnq.DeQuantize", DequantizeModule},
      // quantized::relu6 clamps to [zero_point, quantize_val(6.0)]: hardtanh(0, 6).
      {"nnq.ReLU6", UnaryModule([](const Module&, const Tensor& x) {
         return quantized::QuantizedHardtanh(x, 0.0, 6.0);
       })},
      {"nnq.Hardswish", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(QuantParams out, ModuleOutputQParams(m, "scale", "zero_point"));
         return quantized::QuantizedHardswish(x, out.scales[0], out.zero_points[0]);
       })},
      {"nnq.ELU", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(QuantParams out, ModuleOutputQParams(m, "scale", "zero_point"));
         absl::Status status;
         const double alpha = FloatAttrOr(m, "alpha", 1.0, status);
         RETURN_IF_ERROR(status);
         return quantized::QuantizedElu(x, out.scales[0], out.zero_points[0], alpha);
       })},
      {"nnq.LeakyReLU", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(QuantParams out, ModuleOutputQParams(m, "scale", "zero_point"));
         absl::Status status;
         const double slope = FloatAttrOr(m, "negative_slope", 0.01, status);
         RETURN_IF_ERROR(status);
         return quantized::QuantizedLeakyRelu(x, slope, out.scales[0], out.zero_points[0]);
       })},
      // nnq.PReLU: a quantized tensor `weight` (its slopes), attributes scale / zero_point.
      {"nnq.PReLU", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(QuantParams out, ModuleOutputQParams(m, "scale", "zero_point"));
         ASSIGN_OR_RETURN(const Tensor* weight, m.GetTensor("weight"));
         return quantized::QuantizedPrelu(x, *weight, out.scales[0], out.zero_points[0]);
       })},
      {"nnq.Sigmoid", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(QuantParams out,
                          ModuleOutputQParams(m, "output_scale", "output_zero_point"));
         return quantized::QuantizedSigmoid(x, out);
       })},
      {"nnq.Softmax", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(QuantParams out, ModuleOutputQParams(m, "scale", "zero_point"));
         // dim None: PyTorch's _get_softmax_dim (0 for 0-, 1- and 3-D inputs, else 1).
         int64_t dim = (x.dim() == 0 || x.dim() == 1 || x.dim() == 3) ? 0 : 1;
         if (const Argument* d = m.FindAttribute("dim"); d != nullptr && !d->is_none()) {
           ASSIGN_OR_RETURN(dim, m.GetInt("dim"));
         }
         return quantized::QuantizedSoftmax(x, dim, out.scales[0], out.zero_points[0]);
       })},
      {"nnq.LayerNorm", QuantizedNormModule},
      {"nnq.GroupNorm", QuantizedNormModule},
      {"nnq.InstanceNorm1d", QuantizedNormModule},
      {"nnq.InstanceNorm2d", QuantizedNormModule},
      {"nnq.InstanceNorm3d", QuantizedNormModule},
      {"nnq.BatchNorm2d", QuantizedBatchNormModule(false)},
      {"nnq.BatchNorm3d", QuantizedBatchNormModule(false)},
      {"nniq.BNReLU2d", QuantizedBatchNormModule(true)},
      {"nniq.BNReLU3d", QuantizedBatchNormModule(true)},
      // nnq.Dropout is the identity in eval mode; the value keeps its qparams.
      {"nnq.Dropout", UnaryModule([](const Module&, const Tensor& x) -> absl::StatusOr<Tensor> {
         RETURN_IF_ERROR(quantized::ExpectQuantized(x, "nnq.Dropout", "input"));
         return x;
       })},
      {"nnqr.Conv2d", ReferenceModule("nn.Conv2d")},
      {"nnqr.Linear", ReferenceModule("nn.Linear")},
  };
  for (const auto& [type, kernel] : modules) {
    RETURN_IF_ERROR(registry.RegisterModule(type, kernel));
  }

  const std::vector<std::pair<const char*, ModuleKernel>> module_overloads = {
      {"nn.ReLU", UnaryModule([](const Module&, const Tensor& x) {
         return quantized::QuantizedRelu(x);
       })},
      {"nn.ReLU6", UnaryModule([](const Module&, const Tensor& x) {
         return quantized::QuantizedHardtanh(x, 0.0, 6.0);
       })},
      {"nn.Hardtanh", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         double lo = -1.0, hi = 1.0;
         if (m.FindAttribute("min_val") != nullptr) {
           ASSIGN_OR_RETURN(lo, m.GetFloat("min_val"));
         }
         if (m.FindAttribute("max_val") != nullptr) {
           ASSIGN_OR_RETURN(hi, m.GetFloat("max_val"));
         }
         return quantized::QuantizedHardtanh(x, lo, hi);
       })},
      {"nn.MaxPool2d", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(Pool2dParams p, ModulePoolParams(m, true));
         return quantized::QuantizedMaxPool2d(x, p);
       })},
      {"nn.AvgPool2d", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(Pool2dParams p, ModulePoolParams(m, false));
         p.channels_last = x.dim() == 4;  // as in a converted model (pooling.h)
         return quantized::QuantizedAvgPool2d(x, p);
       })},
      {"nn.Sigmoid", UnaryModule([](const Module&, const Tensor& x) {
         return quantized::QuantizedSigmoid(x);
       })},
      {"nn.Hardsigmoid", UnaryModule([](const Module&, const Tensor& x) {
         return quantized::QuantizedHardsigmoid(x);
       })},
      {"nn.Tanh", UnaryModule([](const Module&, const Tensor& x) {
         return quantized::QuantizedTanh(x);
       })},
      {"nn.GELU", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         const Argument* a = m.FindAttribute("approximate");
         const Value v = a == nullptr || a->is_none() ? Value::None()
                         : a->is_string()             ? Value::String(a->as_string())
                                                      : Value::String(a->ToString());
         ASSIGN_OR_RETURN(bool tanh, GeluApproximation(v));
         return quantized::QuantizedGelu(x, tanh);
       })},
      // F.leaky_relu on a quantized tensor keeps the input's qparams.
      {"nn.LeakyReLU", UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         absl::Status status;
         const double slope = FloatAttrOr(m, "negative_slope", 0.01, status);
         RETURN_IF_ERROR(status);
         return quantized::QuantizedLeakyRelu(x, slope);
       })},
      {"nn.AdaptiveMaxPool2d", QuantizedAdaptiveMaxPoolModule},
      {"nn.Upsample", QuantizedUpsampleModule("nearest")},
      {"nn.UpsamplingNearest2d", QuantizedUpsampleModule("nearest")},
      {"nn.UpsamplingBilinear2d", QuantizedUpsampleModule("bilinear")},
      {"nn.AdaptiveAvgPool2d",
       UnaryModule([](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
         const Argument* size = m.FindAttribute("output_size");
         if (size == nullptr) {
           return absl::InvalidArgumentError("nn.AdaptiveAvgPool2d: missing 'output_size'");
         }
         ASSIGN_OR_RETURN(Value v, ArgumentToValue(*size));
         ASSIGN_OR_RETURN(auto out, AdaptiveSize(v, x));
         return quantized::QuantizedAdaptiveAvgPool2d(x, out, /*channels_last=*/x.dim() == 4);
       })},
  };
  for (const auto& [type, kernel] : module_overloads) {
    RETURN_IF_ERROR(registry.RegisterQuantizedModuleOverload(Symbol::Intern(type), kernel));
  }

  const FunctionKernel relu = UnaryFunction(
      [](const ArgReader&, const Tensor& x) { return quantized::QuantizedRelu(x); });
  const FunctionKernel sigmoid = UnaryFunction(
      [](const ArgReader&, const Tensor& x) { return quantized::QuantizedSigmoid(x); });
  const FunctionKernel tanh = UnaryFunction(
      [](const ArgReader&, const Tensor& x) { return quantized::QuantizedTanh(x); });
  const std::vector<std::pair<const char*, FunctionKernel>> functions = {
      {"torch.quantize_per_tensor", QuantizePerTensorFn},
      {"torch.quantize_per_channel", QuantizePerChannelFn},
      {"torch.dequantize", DequantizeFn},
      {"torch.ops.quantized.add", BinaryFn(true, false)},
      {"torch.ops.quantized.add_relu", BinaryFn(true, true)},
      {"torch.ops.quantized.mul", BinaryFn(false, false)},
      {"torch.ops.quantized.mul_relu", BinaryFn(false, true)},
      {"torch.ops.quantized.cat", CatFn(true)},
      {"torch.ops.quantized.conv2d", FunctionalConv2dFn(false)},
      {"torch.ops.quantized.conv2d_relu", FunctionalConv2dFn(true)},
      {"torch.ops.quantized.conv2d_add", FunctionalConv2dAddFn(false)},
      {"torch.ops.quantized.conv2d_add_relu", FunctionalConv2dAddFn(true)},
      // quantized::softmax(qx, dim, output_scale, output_zero_point)
      {"torch.ops.quantized.softmax",
       UnaryFunction([](const ArgReader& r, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(int64_t dim, r.GetInt(1, "dim"));
         ASSIGN_OR_RETURN(quantized::OutputQParams out, FunctionalOutputQParams(r, 2));
         return quantized::QuantizedSoftmax(x, dim, out.scale, out.zero_point);
       })},
      {"torch.ops.quantized.layer_norm", QuantizedNormFn("layer_norm")},
      {"torch.ops.quantized.group_norm", QuantizedNormFn("group_norm")},
      {"torch.ops.quantized.instance_norm", QuantizedNormFn("instance_norm")},
      {"torch.ops.quantized.batch_norm2d", QuantizedBatchNormFn(false)},
      {"torch.ops.quantized.batch_norm2d_relu", QuantizedBatchNormFn(true)},
      {"torch.ops.quantized.batch_norm3d", QuantizedBatchNormFn(false)},
      {"torch.ops.quantized.batch_norm3d_relu", QuantizedBatchNormFn(true)},
      // quantized::hardswish(input, output_scale, output_zero_point)
      {"torch.ops.quantized.hardswish",
       UnaryFunction([](const ArgReader& r, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(quantized::OutputQParams out, FunctionalOutputQParams(r, 1));
         return quantized::QuantizedHardswish(x, out.scale, out.zero_point);
       })},
      // quantized::sigmoid(qx, output_scale, output_zero_point)
      {"torch.ops.quantized.sigmoid",
       UnaryFunction([](const ArgReader& r, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(quantized::OutputQParams out, FunctionalOutputQParams(r, 1));
         return quantized::QuantizedSigmoid(x, QuantParams::PerTensor(out.scale, out.zero_point));
       })},
      // The default functionals as lowering writes them (F.elu / F.leaky_relu / F.dropout
      // with output_scale / output_zero_point kwargs), with PyTorch 1.13's schemas:
      // quantized::elu(self, output_scale, output_zero_point, alpha=1, scale=1,
      // input_scale=1); only scale = input_scale = 1 (what lowering writes) is supported.
      {"torch.ops.quantized.elu",
       UnaryFunction([](const ArgReader& r, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(quantized::OutputQParams out, FunctionalOutputQParams(r, 1));
         ASSIGN_OR_RETURN(double alpha, r.OptionalFloat(3, "alpha", 1.0));
         for (auto [index, name] : {std::pair<size_t, const char*>{4, "scale"}, {5, "input_scale"}}) {
           ASSIGN_OR_RETURN(double factor, r.OptionalFloat(index, name, 1.0));
           if (factor != 1.0) {
             return absl::UnimplementedError(absl::StrCat(
                 "torch.ops.quantized.elu: ", name, " is ", factor, "; only 1 is supported"));
           }
         }
         return quantized::QuantizedElu(x, out.scale, out.zero_point, alpha);
       })},
      // quantized::leaky_relu(qx, negative_slope, inplace, output_scale, output_zero_point);
      // `inplace` changes nothing here (the result is a new tensor either way).
      {"torch.ops.quantized.leaky_relu",
       UnaryFunction([](const ArgReader& r, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(double slope, r.OptionalFloat(1, "negative_slope", 0.01));
         ASSIGN_OR_RETURN(quantized::OutputQParams out, FunctionalOutputQParams(r, 3));
         return quantized::QuantizedLeakyRelu(x, slope, out.scale, out.zero_point);
       })},
      // quantized::dropout(self, output_scale, output_zero_point, p=0.5, training=False):
      // PyTorch 1.13 returns its input as it is (values and qparams), whatever the
      // output qparams and `training`.
      {"torch.ops.quantized.dropout",
       UnaryFunction([](const ArgReader&, const Tensor& x) -> absl::StatusOr<Tensor> {
         RETURN_IF_ERROR(quantized::ExpectPerTensorQuantized(x, "torch.ops.quantized.dropout",
                                                              "input"));
         return x;
       })},
      // quantized::matmul(qa, qb, output_scale, output_zero_point)
      {"torch.ops.quantized.matmul",
       [](const KernelContext&, absl::Span<const Value> args,
          const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
         ArgReader r(args, kwargs);
         RETURN_IF_ERROR(r.ExpectAtMostPositional(4));
         ASSIGN_OR_RETURN(const Tensor* a, r.GetTensor(0, "qa"));
         ASSIGN_OR_RETURN(const Tensor* b, r.GetTensor(1, "qb"));
         ASSIGN_OR_RETURN(quantized::OutputQParams out, FunctionalOutputQParams(r, 2));
         ASSIGN_OR_RETURN(Tensor y, quantized::QuantizedMatMul(*a, *b, out.scale, out.zero_point));
         return Value(std::move(y));
       }},
      {"torch.ops.quantized.conv1d", FunctionalConvNdFn(1, false)},
      {"torch.ops.quantized.conv1d_relu", FunctionalConvNdFn(1, true)},
      {"torch.ops.quantized.conv3d", FunctionalConvNdFn(3, false)},
      {"torch.ops.quantized.conv3d_relu", FunctionalConvNdFn(3, true)},
      {"torch.ops.quantized.linear", FunctionalLinearFn(false)},
      {"torch.ops.quantized.linear_relu", FunctionalLinearFn(true)},
  };
  for (const auto& [target, kernel] : functions) {
    RETURN_IF_ERROR(registry.RegisterFunction(OpKind::kCallFunction, target, kernel));
  }
  RETURN_IF_ERROR(registry.RegisterFunction(OpKind::kCallMethod, "dequantize", DequantizeFn));

  const std::vector<std::pair<const char*, FunctionKernel>> function_overloads = {
      {"torch.relu", relu},
      {"torch.nn.functional.relu", relu},
      {"torch.nn.functional.relu6",
       UnaryFunction([](const ArgReader&, const Tensor& x) {
         return quantized::QuantizedHardtanh(x, 0.0, 6.0);
       })},
      {"torch.nn.functional.hardtanh",
       UnaryFunction([](const ArgReader& r, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(double lo, r.OptionalFloat(1, "min_val", -1.0));
         ASSIGN_OR_RETURN(double hi, r.OptionalFloat(2, "max_val", 1.0));
         return quantized::QuantizedHardtanh(x, lo, hi);
       })},
      {"torch.nn.functional.max_pool2d",
       UnaryFunction([](const ArgReader& r, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(Pool2dParams p, FunctionPoolParams(r, true));
         return quantized::QuantizedMaxPool2d(x, p);
       })},
      {"torch.nn.functional.avg_pool2d",
       UnaryFunction([](const ArgReader& r, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(Pool2dParams p, FunctionPoolParams(r, false));
         p.channels_last = x.dim() == 4;  // as in a converted model (pooling.h)
         return quantized::QuantizedAvgPool2d(x, p);
       })},
      {"torch.nn.functional.adaptive_avg_pool2d",
       UnaryFunction([](const ArgReader& r, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(Value size, r.Required(1, "output_size"));
         ASSIGN_OR_RETURN(auto out, AdaptiveSize(size, x));
         return quantized::QuantizedAdaptiveAvgPool2d(x, out, /*channels_last=*/x.dim() == 4);
       })},
      {"torch.cat", CatFn(false)},
      {"torch.sigmoid", sigmoid},
      {"torch.nn.functional.sigmoid", sigmoid},
      {"torch.nn.functional.hardsigmoid", UnaryFunction([](const ArgReader&, const Tensor& x) {
         return quantized::QuantizedHardsigmoid(x);
       })},
      {"torch.tanh", tanh},
      {"torch.nn.functional.tanh", tanh},
      {"torch.nn.functional.gelu",
       UnaryFunction([](const ArgReader& r, const Tensor& x) -> absl::StatusOr<Tensor> {
         const Value* v = r.Find(1, "approximate");
         ASSIGN_OR_RETURN(bool tanh, GeluApproximation(v == nullptr ? Value::None() : *v));
         return quantized::QuantizedGelu(x, tanh);
       })},
      {"torch.nn.functional.leaky_relu",
       UnaryFunction([](const ArgReader& r, const Tensor& x) -> absl::StatusOr<Tensor> {
         ASSIGN_OR_RETURN(double slope, r.OptionalFloat(1, "negative_slope", 0.01));
         return quantized::QuantizedLeakyRelu(x, slope);
       })},
      {"torch.mean", QuantizedMeanFn},
      {"torch.nn.functional.interpolate", QuantizedInterpolateFn},
      {"torch.nn.functional.adaptive_max_pool2d",
       OnStoredValuesFn(OpKind::kCallFunction,
                        Symbol::Intern("torch.nn.functional.adaptive_max_pool2d"))},
  };
  for (const auto& [target, kernel] : function_overloads) {
    RETURN_IF_ERROR(registry.RegisterQuantizedFunctionOverload(OpKind::kCallFunction,
                                                               Symbol::Intern(target), kernel));
  }
  const std::vector<std::pair<const char*, FunctionKernel>> method_overloads = {
      {"relu", relu}, {"sigmoid", sigmoid}, {"tanh", tanh}, {"mean", QuantizedMeanFn},
  };
  for (const auto& [target, kernel] : method_overloads) {
    RETURN_IF_ERROR(registry.RegisterQuantizedFunctionOverload(OpKind::kCallMethod,
                                                               Symbol::Intern(target), kernel));
  }
  // torch.clamp, Tensor.clamp, F.hardtanh_: what lowering leaves on quantized tensors.
  RETURN_IF_ERROR(RegisterQuantizedClampKernels(registry));
  // nnqd.Linear and torch.quantize_per_tensor_dynamic: dynamic quantization; weight-only
  // nnq.Embedding / nnq.EmbeddingBag.
  RETURN_IF_ERROR(RegisterDynamicQuantizedKernels(registry));
  RETURN_IF_ERROR(RegisterQuantizedEmbeddingKernels(registry));

  // Channels-last overloads: the convs, and the ops between them in CNNs, whose every
  // output element comes from the inputs' elements at its position (or, max pool, is
  // pooled in that layout).
  RETURN_IF_ERROR(registry.RegisterChannelsLastModuleOverload(
      Symbol::Intern("nnq.Conv2d"), QuantizedConvModule(false, true)));
  RETURN_IF_ERROR(registry.RegisterChannelsLastModuleOverload(
      Symbol::Intern("nniq.ConvReLU2d"), QuantizedConvModule(true, true)));
  // The row-major kernel registered above for `name` in `kernels`.
  const auto named = [](const auto& kernels, absl::string_view name)
      -> absl::StatusOr<std::decay_t<decltype(kernels[0].second)>> {
    for (const auto& [n, kernel] : kernels) {
      if (n == name) return kernel;
    }
    return absl::InternalError(absl::StrCat("no quantized kernel '", name, "' to overload"));
  };
  for (const char* type : {"nn.ReLU", "nn.ReLU6", "nn.Hardtanh", "nn.MaxPool2d"}) {
    ASSIGN_OR_RETURN(ModuleKernel kernel, named(module_overloads, type));
    RETURN_IF_ERROR(registry.RegisterChannelsLastModuleOverload(
        Symbol::Intern(type), absl::string_view(type) == "nn.MaxPool2d"
                                  ? MaxPoolModuleChannelsLast(std::move(kernel))
                                  : KeepingChannelsLast(std::move(kernel))));
  }
  for (const char* target : {"torch.ops.quantized.add", "torch.ops.quantized.add_relu",
                             "torch.ops.quantized.mul", "torch.ops.quantized.mul_relu"}) {
    ASSIGN_OR_RETURN(FunctionKernel kernel, named(functions, target));
    RETURN_IF_ERROR(registry.RegisterChannelsLastFunctionOverload(
        OpKind::kCallFunction, Symbol::Intern(target), KeepingChannelsLast(std::move(kernel))));
  }
  for (const char* target : {"torch.relu", "torch.nn.functional.relu", "torch.nn.functional.relu6",
                             "torch.nn.functional.hardtanh", "torch.nn.functional.max_pool2d"}) {
    ASSIGN_OR_RETURN(FunctionKernel kernel, named(function_overloads, target));
    RETURN_IF_ERROR(registry.RegisterChannelsLastFunctionOverload(
        OpKind::kCallFunction, Symbol::Intern(target),
        absl::string_view(target) == "torch.nn.functional.max_pool2d"
            ? MaxPoolFunctionChannelsLast(std::move(kernel))
            : KeepingChannelsLast(std::move(kernel))));
  }
  ASSIGN_OR_RETURN(FunctionKernel relu_method, named(method_overloads, "relu"));
  RETURN_IF_ERROR(registry.RegisterChannelsLastFunctionOverload(
      OpKind::kCallMethod, Symbol::Intern("relu"), KeepingChannelsLast(std::move(relu_method))));
  return absl::OkStatus();
}

}  // namespace fuselage
