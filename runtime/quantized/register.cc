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
#include "runtime/quantized/dynamic_rnn.h"
#include "runtime/quantized/elementwise.h"
#include "runtime/quantized/embedding.h"
#include "runtime/quantized/linear.h"
#include "runtime/quantized/matmul.h"
#include "runtime/quantized/normalization.h"
#include "runtime/quantized/pooling.h"
#include "runtime/quantized/prelu.h"
#include "runtime/quantized/quant_math.h"
#include "runtime/quantized/quantize.h"
#include "runtime/quantized/register_internal.h"
#include "runtime/quantized/resample.h"
#include "runtime/quantized/shape_ops.h"

namespace fuselage {
namespace quantized_kernels_internal {
namespace {

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


// A pool module's parameters as the 2-d kernels take them; a 1-d pool's (dims 1) over its
// input viewed as [N, C, 1, L]: each of its values is the width, the height's kernel and
// stride 1 and its padding 0 (as ATen's max_pool1d / avg_pool1d run the 2-d kernels).
absl::StatusOr<Pool2dParams> ModulePoolParams(const Module& m, bool max_pool, int dims = 2) {
  auto pair = [&](absl::string_view name, int64_t fallback,
                  int64_t height) -> absl::StatusOr<std::array<int64_t, 2>> {
    if (dims == 2) return AttrPair(m, name, fallback);
    if (m.FindAttribute(name) == nullptr) return std::array<int64_t, 2>{height, fallback};
    ASSIGN_OR_RETURN(std::vector<int64_t> v, m.GetInts(name, 1));
    return std::array<int64_t, 2>{height, v[0]};
  };
  Pool2dParams p;
  ASSIGN_OR_RETURN(p.kernel_size, pair("kernel_size", 0, 1));
  const Argument* stride = m.FindAttribute("stride");
  if (stride == nullptr || stride->is_none() || (stride->is_list() && stride->items().empty())) {
    p.stride = p.kernel_size;
  } else {
    ASSIGN_OR_RETURN(p.stride, pair("stride", 0, 1));
  }
  ASSIGN_OR_RETURN(p.padding, pair("padding", 0, 0));
  if (m.FindAttribute("ceil_mode") != nullptr) {
    ASSIGN_OR_RETURN(p.ceil_mode, m.GetBool("ceil_mode"));
  }
  if (max_pool) {
    ASSIGN_OR_RETURN(p.dilation, pair("dilation", 1, 1));
    if (const Argument* ri = m.FindAttribute("return_indices"); ri && ri->is_bool() && ri->as_bool()) {
      return absl::UnimplementedError(absl::StrCat(
          m.type().name(), ": return_indices=True on a quantized input"));
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

// nn.MaxPool1d / nn.AvgPool1d on a quantized [N, C, L] (or [C, L]) input: the 2-d kernel
// over [N, C, 1, L], the result viewed back, as ATen's quantized max_pool1d / avg_pool1d.
ModuleKernel Pool1dModule(bool max_pool) {
  return UnaryModule([max_pool](const Module& m, const Tensor& x) -> absl::StatusOr<Tensor> {
    if (x.dim() != 2 && x.dim() != 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          m.type().name(), ": expected a 2-D or 3-D input; got ", x.ShapeString()));
    }
    ASSIGN_OR_RETURN(Pool2dParams p, ModulePoolParams(m, max_pool, /*dims=*/1));
    Shape rows;  // x's shape with a 1 before its last dimension
    for (int64_t i = 0; i < x.dim(); ++i) {
      if (i == x.dim() - 1) rows.push_back(1);
      rows.push_back(x.shape()[i]);
    }
    ASSIGN_OR_RETURN(Tensor x2d, x.Reshaped(rows));
    // PyTorch's arithmetic follows the layout: a 3-D input from a quantized conv1d (as in a
    // converted model) is [N, L, C] in memory, pooled by the NHWC kernel (pooling.h).
    p.channels_last = !max_pool && x.dim() == 3;
    ASSIGN_OR_RETURN(Tensor y2d, max_pool ? quantized::QuantizedMaxPool2d(x2d, p)
                                          : quantized::QuantizedAvgPool2d(x2d, p));
    Shape out;  // without the 1 again
    for (int64_t i = 0; i < y2d.dim(); ++i)
      if (i != y2d.dim() - 2) out.push_back(y2d.shape()[i]);
    return y2d.Reshaped(out);
  });
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

// Appends `from` to `to`, in order (the registration lists are concatenated in one order).
template <typename T>
void Append(std::vector<T>& to, std::vector<T> from) {
  for (T& entry : from) to.push_back(std::move(entry));
}

}  // namespace
}  // namespace quantized_kernels_internal

absl::Status RegisterQuantizedKernels(KernelRegistry& registry) {
  using namespace quantized_kernels_internal;  // NOLINT: the families' kernels and lists
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

  NamedModuleKernels module_overloads = {
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
      {"nn.MaxPool1d", Pool1dModule(/*max_pool=*/true)},
      {"nn.AvgPool1d", Pool1dModule(/*max_pool=*/false)},
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
  };
  // The ops on stored values (stored_value_kernels.cc), then nn.AdaptiveAvgPool2d.
  Append(module_overloads, StoredValueModuleOverloads());
  Append(module_overloads, NamedModuleKernels{
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
  });
  for (const auto& [type, kernel] : module_overloads) {
    RETURN_IF_ERROR(registry.RegisterQuantizedModuleOverload(Symbol::Intern(type), kernel));
  }

  const FunctionKernel relu = UnaryFunction(
      [](const ArgReader&, const Tensor& x) { return quantized::QuantizedRelu(x); });
  const FunctionKernel sigmoid = UnaryFunction(
      [](const ArgReader&, const Tensor& x) { return quantized::QuantizedSigmoid(x); });
  const FunctionKernel tanh = UnaryFunction(
      [](const ArgReader&, const Tensor& x) { return quantized::QuantizedTanh(x); });
  // The functions (functional_kernels.cc).
  const NamedFunctionKernels functions = QuantizedFunctionKernels();
  for (const auto& [target, kernel] : functions) {
    RETURN_IF_ERROR(registry.RegisterFunction(OpKind::kCallFunction, target, kernel));
  }
  RETURN_IF_ERROR(registry.RegisterFunction(OpKind::kCallMethod, "dequantize", DequantizeFn));
  RETURN_IF_ERROR(registry.RegisterFunction(OpKind::kCallMethod, "to", CastFn));

  NamedFunctionKernels function_overloads = {
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
  };
  // interpolate and adaptive_max_pool2d on stored values (stored_value_kernels.cc).
  Append(function_overloads, StoredValueFunctionOverloads());
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
  // nnqd.Linear, nnqd.LSTM / GRU and torch.quantize_per_tensor_dynamic: dynamic quantization; weight-only
  // nnq.Embedding / nnq.EmbeddingBag.
  RETURN_IF_ERROR(RegisterDynamicQuantizedKernels(registry));
  RETURN_IF_ERROR(RegisterDynamicRnnKernels(registry));
  RETURN_IF_ERROR(RegisterQuantizedEmbeddingKernels(registry));

  // Channels-last overloads: the convs, and the ops between them in CNNs, whose every
  // output element comes from the inputs' elements at its position (or, max pool, is
  // pooled in that layout).
  RETURN_IF_ERROR(registry.RegisterChannelsLastModuleOverload(
      Symbol::Intern("nnq.Conv2d"), QuantizedConvModule(false, true)));
  RETURN_IF_ERROR(registry.RegisterChannelsLastModuleOverload(
      Symbol::Intern("nniq.ConvReLU2d"), QuantizedConvModule(true, true)));
  for (const bool relu : {false, true}) {
    RETURN_IF_ERROR(registry.RegisterChannelsLastFunctionOverload(
        OpKind::kCallFunction,
        Symbol::Intern(relu ? "torch.ops.quantized.conv2d_relu" : "torch.ops.quantized.conv2d"),
        FunctionalConvNdFn(2, relu, true)));
  }
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
