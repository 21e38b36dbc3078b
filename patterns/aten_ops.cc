#include "patterns/aten_ops.h"

namespace fuselage {

absl::Span<const AtenOp> AtenOps() {
  static constexpr AtenOp kOps[] = {
      {"aten.conv1d.default", "torch.nn.functional.conv1d"},
      {"aten.conv2d.default", "torch.nn.functional.conv2d"},
      {"aten.conv3d.default", "torch.nn.functional.conv3d"},
      {"aten.linear.default", "torch.nn.functional.linear"},
      {"aten.relu.default", "torch.nn.functional.relu"},
      {"aten.relu_.default", "torch.nn.functional.relu"},
      {"aten.add.Tensor", "operator.add"},
      {"aten.add_.Tensor", "operator.add"},
      {"aten.mul.Tensor", "operator.mul"},
      {"aten.mul_.Tensor", "operator.mul"},
      {"aten.batch_norm.default", "torch.nn.functional.batch_norm"},
      {"aten._native_batch_norm_legit_no_training.default", "torch.nn.functional.batch_norm"},
      {"aten.adaptive_avg_pool2d.default", "torch.nn.functional.adaptive_avg_pool2d"},
      {"aten.max_pool2d.default", "torch.nn.functional.max_pool2d"},
      {"aten.avg_pool2d.default", "torch.nn.functional.avg_pool2d"},
      {"aten.flatten.using_ints", "torch.flatten"},
      {"aten.view.default", "torch.reshape"},
      {"aten.reshape.default", "torch.reshape"},
      {"aten.mean.dim", "torch.mean"},
      {"aten.cat.default", "torch.cat"},
      {"aten.permute.default", "torch.permute"},
      {"aten.hardswish.default", "torch.nn.functional.hardswish"},
      {"aten.hardswish_.default", "torch.nn.functional.hardswish"},
      {"aten.hardsigmoid.default", "torch.nn.functional.hardsigmoid"},
      {"aten.hardsigmoid_.default", "torch.nn.functional.hardsigmoid"},
      {"aten.hardtanh.default", "torch.nn.functional.hardtanh"},
      {"aten.hardtanh_.default", "torch.nn.functional.hardtanh"},
      {"aten.silu.default", "torch.nn.functional.silu"},
      {"aten.silu_.default", "torch.nn.functional.silu"},
      {"aten.sigmoid.default", "torch.sigmoid"},
      {"aten.sigmoid_.default", "torch.sigmoid"},
      {"aten.gelu.default", "torch.nn.functional.gelu"},
      {"aten.layer_norm.default", "torch.nn.functional.layer_norm"},
      {"aten.dropout.default", "torch.nn.functional.dropout"},
      {"aten.dropout_.default", "torch.nn.functional.dropout"},
  };
  return kOps;
}

std::optional<absl::string_view> FxFormOfAtenOp(absl::string_view aten_name) {
  for (const AtenOp& op : AtenOps()) {
    if (op.aten == aten_name) return op.fx;
  }
  return std::nullopt;
}

}  // namespace fuselage
