#include "lowering/lowering_rule.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "graph/tensor.h"

namespace fuselage {
namespace {

// The values of a small float32 / int64 / int32 tensor, as doubles.
absl::StatusOr<std::vector<double>> TensorValues(const Module& module, absl::string_view name) {
  ASSIGN_OR_RETURN(const Tensor* t, module.GetTensor(name));
  std::vector<double> values(static_cast<size_t>(t->numel()));
  for (size_t i = 0; i < values.size(); ++i) {
    switch (t->dtype()) {
      case DType::kFloat32: values[i] = t->data<float>()[i]; break;
      case DType::kInt64: values[i] = static_cast<double>(t->data<int64_t>()[i]); break;
      case DType::kInt32: values[i] = t->data<int32_t>()[i]; break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            module.type().name(), " tensor '", name, "' has dtype ", DTypeName(t->dtype()),
            "; expected torch.float32, torch.int64 or torch.int32"));
    }
  }
  return values;
}

// PyTorch's quantize_val: zero_point + nearbyint(value * (1.0f / scale)), clamped.
int64_t QuantizeValue(float value, double scale, int64_t zero_point, int64_t qmin,
                      int64_t qmax) {
  const float inv_scale = 1.0f / static_cast<float>(scale);
  const int64_t q = zero_point + static_cast<int64_t>(std::nearbyint(value * inv_scale));
  return std::min(std::max(q, qmin), qmax);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Module>> BuildNativeWeightedModule(
    absl::string_view native_type, const Module& reference, const OutputQParams& output) {
  // A fused module holds the reference weighted module as child "0".
  const Module* ref = &reference;
  if (ref->FindTensor("weight") == nullptr && ref->FindChild("0") != nullptr) {
    ref = ref->FindChild("0");
  }
  const std::string where = absl::StrCat(ref->type().name(), " (lowering to ", native_type, ")");
  if (!(output.scale > 0) || !std::isfinite(output.scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": output scale ", output.scale, " must be positive and finite"));
  }
  ASSIGN_OR_RETURN(const Tensor* weight, ref->GetTensor("weight"));
  if (weight->dtype() != DType::kFloat32 || weight->dim() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": tensor 'weight' is ", DTypeName(weight->dtype()), " ",
        weight->ShapeString(), "; expected a float32 tensor of rank >= 1"));
  }
  ASSIGN_OR_RETURN(std::vector<double> scales, TensorValues(*ref, "weight_scale"));
  ASSIGN_OR_RETURN(std::vector<double> zero_points_d, TensorValues(*ref, "weight_zero_point"));
  const Argument* qscheme_attr = ref->FindAttribute("weight_qscheme");
  if (qscheme_attr == nullptr || !qscheme_attr->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": attribute 'weight_qscheme' must be a string such as "
               "'torch.per_channel_affine'"));
  }
  const absl::string_view qscheme = qscheme_attr->as_string();
  const bool per_channel =
      qscheme == "torch.per_channel_affine" || qscheme == "torch.per_channel_symmetric";
  if (!per_channel && qscheme != "torch.per_tensor_affine" &&
      qscheme != "torch.per_tensor_symmetric") {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": weight_qscheme '", qscheme,
        "' is not supported; expected torch.per_tensor_affine/symmetric or "
        "torch.per_channel_affine/symmetric"));
  }
  DType weight_dtype = DType::kQInt8;
  if (const Argument* d = ref->FindAttribute("weight_dtype")) {
    if (!d->is_dtype()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": attribute 'weight_dtype' must be a dtype, got ", d->ToString()));
    }
    weight_dtype = d->as_dtype();
  }
  if (weight_dtype != DType::kQInt8 && weight_dtype != DType::kQUInt8) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": weight_dtype ", DTypeName(weight_dtype), "; expected torch.qint8 or torch.quint8"));
  }
  int64_t axis = 0;
  const int64_t count = per_channel ? 0 : 1;
  if (per_channel) {
    ASSIGN_OR_RETURN(std::vector<double> axis_values, TensorValues(*ref, "weight_axis"));
    if (axis_values.size() != 1 || axis_values[0] < 0 || axis_values[0] >= weight->dim()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": weight_axis must hold one axis in [0, ", weight->dim(), ")"));
    }
    axis = static_cast<int64_t>(axis_values[0]);
  }
  const size_t expected =
      per_channel ? static_cast<size_t>(weight->shape()[static_cast<size_t>(axis)])
                  : static_cast<size_t>(count);
  if (scales.size() != expected || zero_points_d.size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": weight_scale has ", scales.size(), " and weight_zero_point ",
        zero_points_d.size(), " entries; expected ", expected, " for ", qscheme,
        " on weight ", weight->ShapeString()));
  }
  std::vector<int64_t> zero_points;
  for (size_t i = 0; i < scales.size(); ++i) {
    if (!(scales[i] > 0) || !std::isfinite(scales[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": weight_scale[", i, "] is ", scales[i], "; expected positive and finite"));
    }
    zero_points.push_back(static_cast<int64_t>(zero_points_d[i]));
  }

  // Quantize the weight.
  const int64_t qmin = DTypeMin(weight_dtype), qmax = DTypeMax(weight_dtype);
  int64_t inner = 1;
  for (int64_t d = axis + 1; d < weight->dim(); ++d) inner *= weight->shape()[static_cast<size_t>(d)];
  const int64_t channels = weight->shape()[static_cast<size_t>(axis)];
  const QuantParams qparams =
      per_channel ? QuantParams::PerChannel(scales, zero_points, axis)
                  : QuantParams::PerTensor(scales[0], zero_points[0]);
  ASSIGN_OR_RETURN(Tensor qweight, Tensor::Zeros(weight_dtype, weight->shape(), qparams));
  const float* src = weight->data<float>();
  for (int64_t i = 0; i < weight->numel(); ++i) {
    const size_t c = per_channel ? static_cast<size_t>((i / inner) % channels) : 0;
    const int64_t q = QuantizeValue(src[i], scales[c], zero_points[c], qmin, qmax);
    if (weight_dtype == DType::kQInt8) {
      qweight.mutable_data<int8_t>()[i] = static_cast<int8_t>(q);
    } else {
      qweight.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(q);
    }
  }

  auto native = std::make_unique<Module>(native_type);
  native->SetTensor("weight", std::move(qweight));
  if (const Tensor* bias = ref->FindTensor("bias")) {
    if (bias->dtype() != DType::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": tensor 'bias' has dtype ", DTypeName(bias->dtype()), "; expected torch.float32"));
    }
    native->SetTensor("bias", *bias);
  }
  for (const auto& [name, value] : ref->attributes()) {
    if (name == "weight_qscheme" || name == "weight_dtype") continue;
    native->SetAttribute(name, value);
  }
  native->SetAttribute("scale", Argument::Float(output.scale));
  native->SetAttribute("zero_point", Argument::Int(output.zero_point));
  return native;
}

absl::Status LoweringRuleRegistry::Register(LoweringRule rule) {
  const std::string where = absl::StrCat("lowering rule '", rule.name, "'");
  if (rule.name.empty()) return absl::InvalidArgumentError("lowering rule: empty name");
  if (rule.reference_target.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": empty reference_target"));
  }
  if (rule.reference_op != OpKind::kCallModule && rule.reference_op != OpKind::kCallFunction &&
      rule.reference_op != OpKind::kCallMethod) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": reference_op is ", OpKindName(rule.reference_op),
        "; expected call_module, call_function or call_method"));
  }
  if (rule.dequantized_args.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": dequantized_args is empty; a reference pattern has at least "
                            "one dequantized input"));
  }
  for (int i : rule.dequantized_args) {
    if (i < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": dequantized_args has negative index ", i));
    }
  }
  if (rule.list_of_dequantized && rule.dequantized_args.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": list_of_dequantized needs exactly one dequantized_args index (the list)"));
  }
  if (rule.action == LoweringRule::Action::kNativeModule &&
      rule.reference_op != OpKind::kCallModule) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": a native-module rule needs reference_op call_module"));
  }
  if (rule.action != LoweringRule::Action::kPassThrough && rule.native_target.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": empty native_target"));
  }
  if (FindByName(rule.name) != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat(where, " is already registered"));
  }
  if (rule.action == LoweringRule::Action::kNativeModule && !rule.build_module) {
    rule.build_module = [native = rule.native_target](const Module& reference,
                                                      const OutputQParams& output) {
      return BuildNativeWeightedModule(native, reference, output);
    };
  }
  rules_.push_back(std::make_unique<LoweringRule>(std::move(rule)));
  const LoweringRule* added = rules_.back().get();
  by_op_[{added->reference_op, Symbol::Intern(added->reference_target)}].push_back(added);
  return absl::OkStatus();
}

std::vector<const LoweringRule*> LoweringRuleRegistry::RulesFor(OpKind op,
                                                                Symbol target_or_type) const {
  auto it = by_op_.find(std::make_pair(op, target_or_type));
  return it == by_op_.end() ? std::vector<const LoweringRule*>() : it->second;
}

const LoweringRule* LoweringRuleRegistry::FindByName(absl::string_view name) const {
  for (const auto& rule : rules_) {
    if (rule->name == name) return rule.get();
  }
  return nullptr;
}

namespace {

LoweringRule ModuleRule(std::string name, std::string reference, std::string inner,
                        std::string native, std::vector<int> dequantized = {0}) {
  LoweringRule r;
  r.name = std::move(name);
  r.action = LoweringRule::Action::kNativeModule;
  r.reference_op = OpKind::kCallModule;
  r.reference_target = std::move(reference);
  r.inner_type = std::move(inner);
  r.native_target = std::move(native);
  r.dequantized_args = std::move(dequantized);
  return r;
}

LoweringRule FunctionRule(std::string name, std::string reference, std::string native,
                          std::string native_relu, LoweringRule::OutputQParamsStyle style) {
  LoweringRule r;
  r.name = std::move(name);
  r.action = LoweringRule::Action::kNativeFunction;
  r.reference_op = OpKind::kCallFunction;
  r.reference_target = std::move(reference);
  r.native_target = std::move(native);
  r.native_relu_target = std::move(native_relu);
  r.dequantized_args = {0, 1};
  r.output_qparams_style = style;
  return r;
}

LoweringRule PassThrough(std::string name, OpKind op, std::string reference) {
  LoweringRule r;
  r.name = std::move(name);
  r.action = LoweringRule::Action::kPassThrough;
  r.reference_op = op;
  r.reference_target = std::move(reference);
  return r;
}

}  // namespace

absl::Status RegisterNativeLoweringRules(LoweringRuleRegistry& registry) {
  // One dequantized input: reference weighted modules and their fused forms.
  for (const char* d : {"1d", "2d", "3d"}) {
    RETURN_IF_ERROR(registry.Register(ModuleRule(absl::StrCat("conv", d),
                                                 absl::StrCat("nnqr.Conv", d), "",
                                                 absl::StrCat("nnq.Conv", d))));
    RETURN_IF_ERROR(registry.Register(
        ModuleRule(absl::StrCat("conv-relu", d), absl::StrCat("nni.ConvReLU", d),
                   absl::StrCat("nnqr.Conv", d), absl::StrCat("nniq.ConvReLU", d))));
  }
  RETURN_IF_ERROR(registry.Register(ModuleRule("linear", "nnqr.Linear", "", "nnq.Linear")));
  RETURN_IF_ERROR(registry.Register(
      ModuleRule("linear-relu", "nni.LinearReLU", "nnqr.Linear", "nniq.LinearReLU")));
  // Two dequantized inputs: both stay quantized.
  RETURN_IF_ERROR(registry.Register(ModuleRule("conv-add2d", "nni.ConvAdd2d", "nnqr.Conv2d",
                                               "nniq.ConvAdd2d", {0, 1})));
  RETURN_IF_ERROR(registry.Register(ModuleRule("conv-add-relu2d", "nni.ConvAddReLU2d",
                                               "nnqr.Conv2d", "nniq.ConvAddReLU2d", {0, 1})));
  // Functionals: dequantized input and weight.
  constexpr auto kKwargs = LoweringRule::OutputQParamsStyle::kKwargs;
  for (const char* d : {"1d", "2d", "3d"}) {
    RETURN_IF_ERROR(registry.Register(FunctionRule(
        absl::StrCat("functional-conv", d), absl::StrCat("torch.nn.functional.conv", d),
        absl::StrCat("torch.ops.quantized.conv", d),
        absl::StrCat("torch.ops.quantized.conv", d, "_relu"), kKwargs)));
  }
  RETURN_IF_ERROR(registry.Register(
      FunctionRule("functional-linear", "torch.nn.functional.linear",
                   "torch.ops.quantized.linear", "torch.ops.quantized.linear_relu", kKwargs)));
  // Binary ops on two dequantized tensors: (qa, qb, scale, zero_point).
  constexpr auto kAppend = LoweringRule::OutputQParamsStyle::kAppendArgs;
  for (const char* f : {"operator.add", "torch.add"}) {
    RETURN_IF_ERROR(registry.Register(FunctionRule(absl::StrCat("add:", f), f,
                                                   "torch.ops.quantized.add",
                                                   "torch.ops.quantized.add_relu", kAppend)));
  }
  for (const char* f : {"operator.mul", "torch.mul"}) {
    RETURN_IF_ERROR(registry.Register(FunctionRule(absl::StrCat("mul:", f), f,
                                                   "torch.ops.quantized.mul",
                                                   "torch.ops.quantized.mul_relu", kAppend)));
  }
  // Ops that run on quantized tensors as they are.
  for (const char* m :
       {"nn.MaxPool1d", "nn.MaxPool2d", "nn.MaxPool3d", "nn.AvgPool1d", "nn.AvgPool2d",
        "nn.AvgPool3d", "nn.AdaptiveAvgPool1d", "nn.AdaptiveAvgPool2d", "nn.AdaptiveAvgPool3d",
        "nn.Flatten", "nn.ReLU", "nn.Identity", "nn.Dropout"}) {
    RETURN_IF_ERROR(registry.Register(PassThrough(absl::StrCat("pass-through:", m),
                                                  OpKind::kCallModule, m)));
  }
  for (const char* f :
       {"torch.flatten", "torch.reshape", "torch.relu", "torch.nn.functional.relu",
        "torch.nn.functional.max_pool1d", "torch.nn.functional.max_pool2d",
        "torch.nn.functional.max_pool3d", "torch.nn.functional.avg_pool2d",
        "torch.nn.functional.adaptive_avg_pool2d", "torch.nn.functional.dropout"}) {
    RETURN_IF_ERROR(registry.Register(PassThrough(absl::StrCat("pass-through:", f),
                                                  OpKind::kCallFunction, f)));
  }
  for (const char* m : {"flatten", "reshape", "view", "relu", "contiguous"}) {
    RETURN_IF_ERROR(registry.Register(PassThrough(absl::StrCat("pass-through:.", m),
                                                  OpKind::kCallMethod, m)));
  }
  LoweringRule cat = PassThrough("pass-through:torch.cat", OpKind::kCallFunction, "torch.cat");
  cat.list_of_dequantized = true;
  RETURN_IF_ERROR(registry.Register(std::move(cat)));
  return absl::OkStatus();
}

}  // namespace fuselage
