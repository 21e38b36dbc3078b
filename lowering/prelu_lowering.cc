#include "lowering/prelu_lowering.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "graph/tensor.h"
#include "quantize/observers.h"
#include "runtime/quantized/quantize.h"

namespace fuselage {

absl::StatusOr<std::unique_ptr<Module>> BuildQuantizedPRelu(const Module& reference,
                                                            const OutputQParams& output) {
  const std::string where = absl::StrCat(reference.type().name(), " module");
  const Tensor* weight = reference.FindTensor("weight");
  if (weight == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(where, " has no tensor 'weight'"));
  }
  if (weight->dtype() != DType::kFloat32 || weight->numel() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, " tensor 'weight' is ", DTypeName(weight->dtype()), " ", weight->ShapeString(),
        "; expected a non-empty torch.float32 tensor"));
  }
  ObserverSpec weight_spec;  // PyTorch's MinMaxObserver(): quint8, per-tensor affine
  weight_spec.kind = ObserverKind::kMinMax;
  weight_spec.dtype = DType::kQUInt8;
  ASSIGN_OR_RETURN(std::unique_ptr<Observer> observer, MakeObserver(weight_spec));
  RETURN_IF_ERROR(observer->Update(*weight));
  ASSIGN_OR_RETURN(const PerTensorQParams qparams, observer->CalculatePerTensorQParams());
  ASSIGN_OR_RETURN(Tensor qweight,
                   quantized::QuantizePerTensor(*weight, qparams.scale, qparams.zero_point,
                                                DType::kQUInt8));
  Module::TensorList tensors;
  tensors.emplace_back("weight", std::move(qweight));
  Module::AttributeList attributes;
  attributes.emplace_back("num_parameters", Argument::Int(weight->numel()));
  attributes.emplace_back("scale", Argument::Float(output.scale));
  attributes.emplace_back("zero_point", Argument::Int(output.zero_point));
  return std::make_unique<Module>(Symbol::Intern("nnq.PReLU"), std::move(tensors),
                                  std::move(attributes));
}

LoweringRule PReluLoweringRule() {
  LoweringRule rule;
  rule.name = "prelu";
  rule.action = LoweringRule::Action::kNativeModule;
  rule.reference_op = OpKind::kCallModule;
  rule.reference_target = "nn.PReLU";
  rule.native_target = "nnq.PReLU";
  rule.dequantized_args = {0};
  rule.build_module = BuildQuantizedPRelu;
  return rule;
}

}  // namespace fuselage
