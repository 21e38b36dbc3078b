#include "patterns/onnx_ops.h"

namespace fuselage {
namespace {

using V = absl::string_view;
constexpr V kConv[] = {"Conv1d", "Conv2d", "Conv3d"};
constexpr V kBatchNorm[] = {"BatchNorm1d", "BatchNorm2d", "BatchNorm3d"};
constexpr V kRelu[] = {"ReLU", "relu"};
// Clip(0, 6) is ReLU6, Clip(0, inf) ReLU, other constant bounds Hardtanh, else torch.clamp.
constexpr V kClip[] = {"ReLU6", "ReLU", "Hardtanh", "torch.clamp"};
constexpr V kSigmoid[] = {"sigmoid"};
constexpr V kHardSwish[] = {"Hardswish"};
constexpr V kHardSigmoid[] = {"Hardsigmoid"};
constexpr V kTanh[] = {"torch.tanh"};
constexpr V kErf[] = {"torch.erf"};
constexpr V kLayerNorm[] = {"LayerNorm"};
constexpr V kAdd[] = {"add"};
constexpr V kSub[] = {"operator.sub"};
constexpr V kMul[] = {"mul"};
constexpr V kDiv[] = {"operator.truediv"};
constexpr V kGemm[] = {"Linear"};
constexpr V kMatMul[] = {"Linear", "torch.matmul"};
constexpr V kMaxPool[] = {"MaxPool1d", "MaxPool2d", "MaxPool3d"};
constexpr V kAveragePool[] = {"AvgPool1d", "AvgPool2d", "AvgPool3d"};
constexpr V kGlobalAveragePool[] = {"AdaptiveAvgPool1d", "AdaptiveAvgPool2d",
                                    "AdaptiveAvgPool3d"};
constexpr V kReduceMean[] = {"torch.mean"};
constexpr V kFlatten[] = {"torch.flatten"};
constexpr V kReshape[] = {"torch.reshape"};
constexpr V kTranspose[] = {"torch.permute"};
constexpr V kConcat[] = {"torch.cat"};
constexpr V kSoftmax[] = {"torch.softmax"};

}  // namespace

absl::Span<const OnnxOp> OnnxOps() {
  static constexpr OnnxOp kOps[] = {
      {"Conv", kConv},
      {"BatchNormalization", kBatchNorm},
      {"LayerNormalization", kLayerNorm},
      {"Relu", kRelu},
      {"Clip", kClip},
      {"Sigmoid", kSigmoid},
      {"HardSwish", kHardSwish},
      {"HardSigmoid", kHardSigmoid},
      {"Tanh", kTanh},
      {"Erf", kErf},
      {"Add", kAdd},
      {"Sub", kSub},
      {"Mul", kMul},
      {"Div", kDiv},
      {"Gemm", kGemm},
      {"MatMul", kMatMul},
      {"MaxPool", kMaxPool},
      {"AveragePool", kAveragePool},
      {"GlobalAveragePool", kGlobalAveragePool},
      {"ReduceMean", kReduceMean},
      {"Flatten", kFlatten},
      {"Reshape", kReshape},
      {"Transpose", kTranspose},
      {"Concat", kConcat},
      {"Softmax", kSoftmax},
  };
  return kOps;
}

std::optional<absl::Span<const absl::string_view>> FxFormsOfOnnxOp(absl::string_view op_type) {
  for (const OnnxOp& op : OnnxOps()) {
    if (op.op_type == op_type) return op.leaves;
  }
  return std::nullopt;
}

}  // namespace fuselage
