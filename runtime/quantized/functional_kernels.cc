// The quantized functions (call_function targets): quantize / dequantize, the binary
// ops, cat, the functional convs / linear / norms and the torch.ops.quantized
// activations, with their registration list (QuantizedFunctionKernels, which
// RegisterQuantizedKernels in register.cc registers). register_internal.h is what the
// quantized kernel files share.

#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/module.h"
#include "graph/status_macros.h"
#include "runtime/kernel_args.h"
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
#include "runtime/quantized/register_internal.h"
#include "runtime/quantized/resample.h"
#include "runtime/quantized/shape_ops.h"

namespace fuselage {
namespace quantized_kernels_internal {
namespace {

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

}  // namespace

// Declared in register_internal.h: register.cc registers it as the method too.
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
  // A float value, such as a float16 cast's (carried as float32, CastToFloat16): PyTorch's
  // dequantize of a tensor that is not quantized is .to(torch.float).
  if (x.as_tensor().dtype() == DType::kFloat32) return x;
  ASSIGN_OR_RETURN(Tensor y, quantized::Dequantize(x.as_tensor()));
  return Value(std::move(y));
}

// Declared in register_internal.h: x.to(dtype), for the dtypes a converted model casts
// to: torch.float16 (a float16 static qconfig's "quantize", CastToFloat16) and
// torch.float32 (unchanged).
absl::StatusOr<Value> CastFn(const KernelContext&, absl::Span<const Value> args,
                             const ValueKwargs& kwargs) {
  ArgReader r(args, kwargs);
  ASSIGN_OR_RETURN(const Tensor* x, r.GetTensor(0, "self"));
  ASSIGN_OR_RETURN(DType dtype, DTypeArg(r, 1, "dtype"));
  RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
  if (x->dtype() != DType::kFloat32) {
    return absl::UnimplementedError(absl::StrCat("to: the input is ", DTypeName(x->dtype()),
                                                 "; only a float32 tensor is cast here"));
  }
  if (dtype == DType::kFloat32) return Value(*x);
  if (dtype != DType::kFloat16) {
    return absl::UnimplementedError(absl::StrCat("to: dtype ", DTypeName(dtype),
                                                 " is not supported; expected torch.float16 "
                                                 "or torch.float32"));
  }
  ASSIGN_OR_RETURN(Tensor y, quantized::CastToFloat16(*x));
  return Value(std::move(y));
}

namespace {

FunctionKernel BinaryFn(bool add, bool relu) {
  return [add, relu](const KernelContext&, absl::Span<const Value> args,
                     const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ArgReader r(args, kwargs);
    // (qa, number) or (number, qa): ATen's add.Scalar / Scalar2 (mul too), which make
    // their own output parameters and take none.
    const Value* first = r.Find(0, "qa");
    const Value* second = r.Find(1, "qb");
    if (first != nullptr && second != nullptr && first->is_number() != second->is_number()) {
      RETURN_IF_ERROR(r.ExpectAtMostPositional(2));
      const Value& x = first->is_number() ? *second : *first;
      const double number = first->is_number() ? first->as_float() : second->as_float();
      if (!x.is_tensor()) {
        return absl::InvalidArgumentError(absl::StrCat(
            add ? "quantized add" : "quantized mul", " with a number: expected a quantized "
            "Tensor beside it; got ", x.ToString()));
      }
      ASSIGN_OR_RETURN(Tensor y, add ? quantized::QuantizedAddScalar(x.as_tensor(), number, relu)
                                     : quantized::QuantizedMulScalar(x.as_tensor(), number, relu));
      return Value(std::move(y));
    }
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

}  // namespace

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

namespace {

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

}  // namespace

// torch.ops.quantized.conv1d / conv2d / conv3d [_relu] as lowering writes them for
// F.conv1d / 2d / 3d: (input, weight, bias=None, stride=1, padding=0, dilation=1,
// groups=1, *, output_scale, output_zero_point), input and weight quantized, bias float or
// None; `spatial` ints per parameter (an int broadcasts). With `channels_last` (the
// channels-last overload of conv2d, runtime/layout.h) the input may be channels-last and
// so is the output where the convolution computes in that layout: a chain of functional
// int8 convs (a PT2E model lowered by fuselage) moves no bytes between them.
FunctionKernel FunctionalConvNdFn(size_t spatial, bool relu, bool channels_last) {
  return [spatial, relu, channels_last](const KernelContext& ctx, absl::Span<const Value> args,
                                        const ValueKwargs& kwargs) -> absl::StatusOr<Value> {
    ArgReader r(args, kwargs);
    RETURN_IF_ERROR(r.ExpectAtMostPositional(9));
    quantized::Activation x;
    if (channels_last && !args.empty() && args[0].is_channels_last()) {
      x = quantized::Activation{args[0].as_channels_last(), true};
    } else {
      ASSIGN_OR_RETURN(const Tensor* input, r.GetTensor(0, "input"));
      x = quantized::Activation{*input, false};
    }
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
    ASSIGN_OR_RETURN(quantized::Activation y,
                     quantized::QuantizedConvNdAnyLayout(x, *w, bias, p, out.scale,
                                                         out.zero_point, relu, ctx.engine,
                                                         channels_last));
    return ActivationValue(std::move(y));
  };
}

namespace {

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

NamedFunctionKernels QuantizedFunctionKernels() {
  return {
      {"torch.quantize_per_tensor", QuantizePerTensorFn},
      {"torch.quantize_per_channel", QuantizePerChannelFn},
      {"torch.dequantize", DequantizeFn},
      {"torch.ops.quantized.add", BinaryFn(true, false)},
      {"torch.ops.quantized.add_relu", BinaryFn(true, true)},
      {"torch.ops.quantized.mul", BinaryFn(false, false)},
      {"torch.ops.quantized.mul_relu", BinaryFn(false, true)},
      {"torch.ops.quantized.cat", CatFn(true)},
      {"torch.ops.quantized.conv2d", FunctionalConvNdFn(2, false, false)},
      {"torch.ops.quantized.conv2d_relu", FunctionalConvNdFn(2, true, false)},
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
      {"torch.ops.quantized.conv1d", FunctionalConvNdFn(1, false, false)},
      {"torch.ops.quantized.conv1d_relu", FunctionalConvNdFn(1, true, false)},
      {"torch.ops.quantized.conv3d", FunctionalConvNdFn(3, false, false)},
      {"torch.ops.quantized.conv3d_relu", FunctionalConvNdFn(3, true, false)},
      {"torch.ops.quantized.linear", FunctionalLinearFn(false)},
      {"torch.ops.quantized.linear_relu", FunctionalLinearFn(true)},
  };
}

}  // namespace quantized_kernels_internal
}  // namespace fuselage
