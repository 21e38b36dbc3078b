#include "backend_configs/known_functions.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/check.h"
#include "graph/status_macros.h"

namespace fuselage {

FunctionRegistry& FunctionRegistry::Global() {
  static FunctionRegistry* registry = [] {
    auto* r = new FunctionRegistry();
    FUSELAGE_CHECK(RegisterBuiltinFunctions(*r).ok());
    return r;
  }();
  return *registry;
}

absl::Status FunctionRegistry::Register(absl::string_view qualified_name) {
  if (qualified_name.empty() || !absl::StrContains(qualified_name, '.') ||
      absl::StartsWith(qualified_name, ".") || absl::EndsWith(qualified_name, ".")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "function '", qualified_name,
        "': expected a qualified name such as 'torch.nn.functional.relu'"));
  }
  const Symbol function = Symbol::Intern(qualified_name);
  absl::MutexLock lock(&mu_);
  functions_.insert(function);
  return absl::OkStatus();
}

bool FunctionRegistry::Contains(Symbol function) const {
  absl::MutexLock lock(&mu_);
  return functions_.contains(function);
}

absl::Status RegisterBuiltinFunctions(FunctionRegistry& registry) {
  for (const char* name : {
           // Binary ops and their torch forms.
           "operator.add", "operator.mul", "operator.floordiv", "operator.getitem",
           "builtins.getattr",  // x.shape, as torch.fx records it
           "torch.add", "torch.mul", "torch.matmul", "torch.cat", "torch.stack",
           // Activations and elementwise ops.
           "torch.relu", "torch.sigmoid", "torch.tanh", "torch.clamp", "torch.erf",
           "torch.nn.functional.relu", "torch.nn.functional.relu6",
           "torch.nn.functional.hardtanh", "torch.nn.functional.hardtanh_",
           "torch.nn.functional.hardswish", "torch.nn.functional.hardsigmoid",
           "torch.nn.functional.elu", "torch.nn.functional.leaky_relu",
           "torch.nn.functional.gelu", "torch.nn.functional.silu",
           "torch.nn.functional.sigmoid", "torch.nn.functional.tanh",
           "torch.nn.functional.softmax", "torch.nn.functional.dropout",
           // Weighted functionals and norms.
           "torch.nn.functional.conv1d", "torch.nn.functional.conv2d",
           "torch.nn.functional.conv3d", "torch.nn.functional.linear",
           "torch.nn.functional.layer_norm", "torch.nn.functional.group_norm",
           "torch.nn.functional.instance_norm", "torch.nn.functional.batch_norm",
           // Pools, resampling and shape ops.
           "torch.nn.functional.adaptive_avg_pool1d", "torch.nn.functional.adaptive_avg_pool2d",
           "torch.nn.functional.adaptive_avg_pool3d", "torch.nn.functional.avg_pool1d",
           "torch.nn.functional.avg_pool2d", "torch.nn.functional.avg_pool3d",
           "torch.nn.functional.max_pool1d", "torch.nn.functional.max_pool2d",
           "torch.nn.functional.max_pool3d", "torch.nn.functional.interpolate",
           "torch.flatten", "torch.mean", "torch.repeat_interleave", "torch.transpose",
           "torch.squeeze", "torch.unsqueeze", "torch.reshape",
           "torch.nn.functional.pixel_shuffle", "torch.nn.functional.pixel_unshuffle",
           "torch.narrow",
           // Quantization ops (graphs after convert / lowering).
           "torch.quantize_per_tensor", "torch.quantize_per_channel",
           "torch.quantize_per_tensor_dynamic",
           "torch.ops.quantized.add", "torch.ops.quantized.add_relu",
           "torch.ops.quantized.mul", "torch.ops.quantized.mul_relu",
           // What lowering emits and the runtime's kernels run.
           // Float ops the runtime runs (torchvision's newer models).
           "operator.sub", "operator.truediv", "operator.matmul", "torch.sub", "torch.div",
           "torch.bmm", "torch.permute", "torch.chunk", "torch.functional.split",
           "torch.unbind", "torch.sum", "torch.amax", "torch.softmax", "torch.log_softmax",
           "torch.nn.functional.log_softmax", "torch.nn.functional.prelu",
           "torch.nn.functional.pad", "torch.nn.functional.adaptive_max_pool2d",
           "torchvision.ops.stochastic_depth.stochastic_depth",
           "torch.dequantize", "torch.nn.functional.conv_transpose1d",
           "torch.nn.functional.conv_transpose2d", "torch.nn.functional.conv_transpose3d",
           "torch.ops.quantized.cat", "torch.ops.quantized.linear",
           "torch.ops.quantized.linear_relu", "torch.ops.quantized.linear_dynamic",
           "torch.ops.quantized.linear_relu_dynamic", "torch.ops.quantized.conv1d",
           "torch.ops.quantized.conv2d", "torch.ops.quantized.conv3d",
           "torch.ops.quantized.conv1d_relu", "torch.ops.quantized.conv2d_relu",
           "torch.ops.quantized.conv3d_relu", "torch.ops.quantized.conv2d_add",
           "torch.ops.quantized.conv2d_add_relu",
           // Quantized ops convert_fx writes that runtime/quantized/ runs, and PyTorch
           // 1.13's quantized forms of the default functionals (get_quantized_operator),
           // which lowering emits (issue #18).
           "torch.ops.quantized.hardswish", "torch.ops.quantized.sigmoid",
           "torch.ops.quantized.softmax", "torch.ops.quantized.layer_norm",
           "torch.ops.quantized.group_norm", "torch.ops.quantized.instance_norm",
           "torch.ops.quantized.batch_norm2d", "torch.ops.quantized.batch_norm2d_relu",
           "torch.ops.quantized.batch_norm3d", "torch.ops.quantized.batch_norm3d_relu",
           "torch.ops.quantized.elu", "torch.ops.quantized.leaky_relu",
           "torch.ops.quantized.dropout", "torch.ops.quantized.matmul",
       }) {
    RETURN_IF_ERROR(registry.Register(name));
  }
  return absl::OkStatus();
}

}  // namespace fuselage

namespace fuselage {

absl::Status VerifyFunctionTargets(const GraphModule& gm, const FunctionRegistry& functions) {
  for (const Node* n = gm.graph().first(); n != nullptr; n = n->next()) {
    if (n->op() != OpKind::kCallFunction || n->opaque() || functions.Contains(n->target())) {
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "node '", n->name(), "': call_function target '", n->target().name(),
        "' is not a known function; expected one of FunctionRegistry's (e.g. operator.add, "
        "torch.nn.functional.relu), or register it there"));
  }
  return absl::OkStatus();
}

}  // namespace fuselage
