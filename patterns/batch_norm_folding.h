// Folding an inference batch norm into the conv or linear before it: the arithmetic of
// the module fusion (fusion_rule.cc's fold_bn_then_wrap, nn.Conv2d + nn.BatchNorm2d, as
// PyTorch's fuse_fx folds them) and the functional fold of a torch.export graph
// (FoldFunctionalBatchNorms, F.conv2d + F.batch_norm on constants, as torchao's
// prepare_pt2e folds them) is this one, in PyTorch's float32 order.
#ifndef FUSELAGE_PATTERNS_BATCH_NORM_FOLDING_H_
#define FUSELAGE_PATTERNS_BATCH_NORM_FOLDING_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "graph/graph_module.h"
#include "graph/tensor.h"

namespace fuselage {

// Float32 arithmetic in PyTorch's own order (torch.nn.utils.fusion), so the folded weights
// are bit-identical to fuse_fx's and torchao's (a double-precision fold differs by one ulp
// in ~40% of weights, which flips quantized weights at rounding ties):
//   conv (fuse_conv_bn_weights):  r = rsqrt(var + eps); w' = w * (gamma * r);
//                                 b' = ((b - mean) * r) * gamma + beta
//   linear (fuse_linear_bn_weights): s = gamma * rsqrt(var + eps); w' = w * s;
//                                 b' = (b - mean) * s + beta
// Absent gamma / beta / b (nullptr) read as 1 / 0 / 0. The caller checks var + eps > 0.
struct BatchNormFold {
  const float* mean;
  const float* var;
  const float* gamma;
  const float* beta;
  const float* bias;
  float eps;
  bool is_linear;

  // Channel c's weight scale and folded bias. Reads bias[c] before the caller writes
  // *new_bias, which may therefore be &bias[c].
  void Channel(int64_t c, float* scale, float* new_bias) const;
};

// to[k] = from[k] * s for k < n (`to` may be `from`), vectorized; each lane is the same
// float32 product.
void ScaleRow(const float* from, float* to, int64_t n, float s);

// A float32 weight about to be overwritten with its values scaled: where to read them and
// where to write. In place when the tensor holds its data alone; else the tensor gets a
// fresh uninitialized buffer and the old data is read through `old` (kept alive there), so
// a weight shared with the user's model (resnet50: 94 MB) is written once instead of
// copied and then scaled.
struct ScaledWeight {
  Tensor old;
  const float* from = nullptr;
  float* to = nullptr;
};
ScaledWeight ScaledWeightOf(Tensor* weight);

// The pass "fold-functional-batch-norm": each call of torch.nn.functional.batch_norm in
// inference (args (input, running_mean, running_var, weight, bias, training=False,
// momentum, eps)) whose input is a torch.nn.functional.conv1d/2d/3d read by nothing else,
// with the conv's weight and bias and the batch norm's statistics and affine parameters
// get_attr float32 tensors (or None where optional), is folded into the conv: the conv
// reads a new weight `<conv>_weight_folded` and bias `<conv>_bias_folded` (tensors at the
// root), takes the batch norm's users, and the batch norm goes; then dead code is
// eliminated (Graph::EliminateDeadCode). The tensors the conv and batch norm read before
// stay in the module tree. A batch norm that does not qualify (training, a non-constant
// or misshapen parameter, var + eps not positive) is left as it is. Returns how many
// were folded. The model's tensors are never written in place: a weight the user's model
// lends is read, and the folded one is new.
absl::StatusOr<int> FoldFunctionalBatchNorms(GraphModule& gm);

}  // namespace fuselage

#endif  // FUSELAGE_PATTERNS_BATCH_NORM_FOLDING_H_
