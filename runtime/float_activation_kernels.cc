// The float activations, norms, softmax, resampling and padding: their kernels and their
// registration list (float_kernel_table.h; RegisterFloatKernels adds it).
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/float_kernel_table.h"
#include "runtime/float_ops.h"
#include "runtime/kernel_args.h"

namespace fuselage {
namespace float_kernels_internal {
namespace {

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

}  // namespace

std::vector<NamedModuleKernel> ActivationModuleKernels() {
  auto relu = UnaryModule([](const Module&, const Tensor& x) -> absl::StatusOr<Tensor> {
    return Relu(x);
  });
  return {
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
      {"nn.Upsample", UnaryModule([](const Module& m, const Tensor& x) {
         return RunUpsampleModule(m, x, "nearest");
       })},
      {"nn.UpsamplingNearest2d", UnaryModule([](const Module& m, const Tensor& x) {
         return RunUpsampleModule(m, x, "nearest");
       })},
      {"nn.UpsamplingBilinear2d", UnaryModule([](const Module& m, const Tensor& x) {
         return RunUpsampleModule(m, x, "bilinear");
       })},
  };
}

std::vector<NamedFunctionKernel> ActivationFunctionKernels() {
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
  return {
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
      {kFunction, "torch.nn.functional.sigmoid", sigmoid},
      {kFunction, "torch.nn.functional.silu", Elementwise(Silu)},
      {kFunction, "torch.tanh", Elementwise(Tanh)},
      {kFunction, "torch.erf", Elementwise(Erf)},
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
  };
}

}  // namespace float_kernels_internal
}  // namespace fuselage
