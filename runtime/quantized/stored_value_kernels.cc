// Quantized overloads of the ops that only move or select stored values (nearest
// interpolate / upsample, adaptive max pool; bilinear interpolate too): the float kernel
// runs on the stored integers. With their registration lists (StoredValueModuleOverloads,
// StoredValueFunctionOverloads), which RegisterQuantizedKernels in register.cc registers.
// register_internal.h is what the quantized kernel files share.

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

}  // namespace

NamedModuleKernels StoredValueModuleOverloads() {
  return {
    {"nn.AdaptiveMaxPool2d", QuantizedAdaptiveMaxPoolModule},
    {"nn.Upsample", QuantizedUpsampleModule("nearest")},
    {"nn.UpsamplingNearest2d", QuantizedUpsampleModule("nearest")},
    {"nn.UpsamplingBilinear2d", QuantizedUpsampleModule("bilinear")},
  };
}

NamedFunctionKernels StoredValueFunctionOverloads() {
  return {
    {"torch.nn.functional.interpolate", QuantizedInterpolateFn},
    {"torch.nn.functional.adaptive_max_pool2d",
     OnStoredValuesFn(OpKind::kCallFunction,
                      Symbol::Intern("torch.nn.functional.adaptive_max_pool2d"))},
  };
}

}  // namespace quantized_kernels_internal
}  // namespace fuselage
