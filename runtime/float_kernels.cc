#include "runtime/float_kernels.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "runtime/float_conv.h"
#include "runtime/float_conv_nd.h"
#include "runtime/float_kernel_table.h"
#include "runtime/float_ops.h"
#include "runtime/kernel_args.h"

namespace fuselage {
namespace float_kernels_internal {
namespace {

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

// nni.ConvAdd2d / nni.ConvAddReLU2d: (x, extra) -> [relu](conv(x) + extra), conv = "0";
// with `batch_norm` (nni.ConvBnAdd2d / nni.ConvBnAddReLU2d, the QAT forms):
// [relu](bn(conv(x)) + extra), bn = "1".
ModuleKernel ConvAddModule(bool relu, bool batch_norm = false) {
  return [relu, batch_norm](const KernelContext& ctx, const Module& m, absl::Span<const Value> args,
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
    if (batch_norm) {
      const Module* bn = m.FindChild("1");
      if (bn == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(m.type().name(), ": missing child \"1\" (the batch norm)"));
      }
      ASSIGN_OR_RETURN(conv_out, ctx.registry.CallModule(ctx, *bn, {conv_out}));
    }
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

// ---- Conv / linear / pool functionals -----------------------------------------------

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

std::vector<NamedModuleKernel> LayerModuleKernels() {
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
      {"nni.ConvBnAdd2d", ConvAddModule(false, /*batch_norm=*/true)},
      {"nni.ConvBnAddReLU2d", ConvAddModule(true, /*batch_norm=*/true)},
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

std::vector<NamedFunctionKernel> LayerFunctionKernels() {
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
  return {
      {kFunction, "torch.nn.functional.conv2d", conv2d},
      {kFunction, "torch.nn.functional.linear", linear},
      {kFunction, "torch.nn.functional.max_pool2d", max_pool},
      {kFunction, "torch.nn.functional.avg_pool2d", avg_pool},
      {kFunction, "torch.nn.functional.adaptive_avg_pool2d", adaptive_avg_pool},
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
      {kFunction, "torch.nn.functional.conv1d", FunctionalConvNd(1, false)},
      {kFunction, "torch.nn.functional.conv3d", FunctionalConvNd(3, false)},
      {kFunction, "torch.nn.functional.conv_transpose1d", FunctionalConvNd(1, true)},
      {kFunction, "torch.nn.functional.conv_transpose2d", FunctionalConvNd(2, true)},
      {kFunction, "torch.nn.functional.conv_transpose3d", FunctionalConvNd(3, true)},
  };
}

// Every family's list, one after another.
template <typename Named>
std::vector<Named> Concatenated(std::vector<std::vector<Named>> lists) {
  std::vector<Named> all;
  for (std::vector<Named>& list : lists) {
    for (Named& k : list) all.push_back(std::move(k));
  }
  return all;
}

}  // namespace
}  // namespace float_kernels_internal

absl::Status RegisterFloatKernels(KernelRegistry& registry) {
  using float_kernels_internal::Concatenated;
  using float_kernels_internal::NamedFunctionKernel;
  using float_kernels_internal::NamedModuleKernel;
  std::vector<NamedModuleKernel> modules = Concatenated<NamedModuleKernel>(
      {float_kernels_internal::LayerModuleKernels(),
       float_kernels_internal::ActivationModuleKernels(),
       float_kernels_internal::ShapeModuleKernels()});
  std::vector<NamedFunctionKernel> functions = Concatenated<NamedFunctionKernel>(
      {float_kernels_internal::ArithmeticFunctionKernels(),
       float_kernels_internal::LayerFunctionKernels(),
       float_kernels_internal::ActivationFunctionKernels(),
       float_kernels_internal::ShapeFunctionKernels()});
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
