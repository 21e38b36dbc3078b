#include "patterns/batch_norm_folding.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/graph.h"
#include "graph/status_macros.h"

namespace fuselage {

void BatchNormFold::Channel(int64_t c, float* scale, float* new_bias) const {
  const float g = gamma != nullptr ? gamma[c] : 1.0f;
  const float b = beta != nullptr ? beta[c] : 0.0f;
  const float rsqrt = 1.0f / std::sqrt(var[c] + eps);
  const float s = g * rsqrt;
  const float centered = (bias != nullptr ? bias[c] : 0.0f) - mean[c];
  *scale = s;
  *new_bias = is_linear ? centered * s + b : (centered * rsqrt) * g + b;
}

// Blocks of 8 with a fixed trip count, which -O2 turns into SIMD multiplies (it does not
// vectorize the plain loop).
void ScaleRow(const float* from, float* to, int64_t n, float s) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    for (int j = 0; j < 8; ++j) to[k + j] = from[k + j] * s;
  }
  for (; k < n; ++k) to[k] = from[k] * s;
}

ScaledWeight ScaledWeightOf(Tensor* weight) {
  ScaledWeight w;
  if (weight->shares_data()) {
    absl::StatusOr<Tensor> fresh =
        Tensor::Uninitialized(weight->dtype(), weight->shape(), weight->qparams());
    if (fresh.ok()) {  // it cannot fail for the shape of an existing tensor
      w.old = std::move(*weight);
      *weight = *std::move(fresh);
      w.from = w.old.data<float>();
    }
  }
  w.to = weight->mutable_data<float>();
  if (w.from == nullptr) w.from = w.to;
  return w;
}

namespace {

struct FunctionalSymbols {
  Symbol batch_norm = Symbol::Intern("torch.nn.functional.batch_norm");
  Symbol convs[3] = {Symbol::Intern("torch.nn.functional.conv1d"),
                     Symbol::Intern("torch.nn.functional.conv2d"),
                     Symbol::Intern("torch.nn.functional.conv3d")};
};

const FunctionalSymbols& Functional() {
  static const FunctionalSymbols* const symbols = new FunctionalSymbols();
  return *symbols;
}

bool IsConv(const Node* node) {
  if (node->op() != OpKind::kCallFunction) return false;
  for (Symbol conv : Functional().convs) {
    if (node->target() == conv) return true;
  }
  return false;
}

// The float32 tensor a get_attr arg reads, with `n` elements unless n < 0; `*absent` set
// for None where `optional`. nullptr (without `*absent`) if the arg is anything else.
const Tensor* ConstantArg(const GraphModule& gm, const Argument& arg, int64_t n, bool optional,
                          bool* absent) {
  *absent = false;
  if (arg.is_none() && optional) {
    *absent = true;
    return nullptr;
  }
  if (!arg.is_node() || arg.as_node()->op() != OpKind::kGetAttr) return nullptr;
  const Tensor* t = gm.FindTensor(arg.as_node()->target().name());
  if (t == nullptr || t->dtype() != DType::kFloat32 || t->is_quantized() ||
      (n >= 0 && t->numel() != n)) {
    return nullptr;
  }
  return t;
}

// Folds `bn` into the conv it reads if it qualifies (see the header); false if not.
absl::StatusOr<bool> FoldOne(GraphModule& gm, Node* bn) {
  Graph& graph = gm.graph();
  if (bn->num_args() < 8 || !bn->kwargs().empty() || !bn->arg(0).is_node() ||
      !bn->arg(5).is_bool() || bn->arg(5).as_bool() ||
      !(bn->arg(7).is_float() || bn->arg(7).is_int())) {
    return false;
  }
  Node* conv = bn->arg(0).as_node();
  if (!IsConv(conv) || conv->num_users() != 1 || conv->num_args() < 2 ||
      conv->FindKwarg("bias") != nullptr) {
    return false;
  }
  bool absent = false;
  const Tensor* weight = ConstantArg(gm, conv->arg(1), -1, false, &absent);
  if (weight == nullptr || weight->dim() < 2) return false;
  const int64_t channels = weight->shape()[0];
  const Tensor* stats[5];  // conv bias, mean, var, gamma, beta
  const float* data[5];
  const Argument none;
  const Argument* args[5] = {conv->num_args() > 2 ? &conv->arg(2) : &none, &bn->arg(1),
                             &bn->arg(2), &bn->arg(3), &bn->arg(4)};
  const bool optional[5] = {true, false, false, true, true};
  for (int i = 0; i < 5; ++i) {
    stats[i] = ConstantArg(gm, *args[i], channels, optional[i], &absent);
    if (stats[i] == nullptr && !absent) return false;
    data[i] = stats[i] != nullptr ? stats[i]->data<float>() : nullptr;
  }
  const float eps = static_cast<float>(bn->arg(7).as_float());
  for (int64_t c = 0; c < channels; ++c) {
    const float denominator = data[2][c] + eps;
    if (!(denominator > 0) || !std::isfinite(denominator)) return false;
  }
  const BatchNormFold fold{data[1], data[2], data[3], data[4], data[0], eps, false};
  ASSIGN_OR_RETURN(Tensor folded_weight,
                   Tensor::Uninitialized(DType::kFloat32, weight->shape(), QuantParams()));
  std::vector<float> folded_bias(static_cast<size_t>(channels));
  const int64_t per_channel = channels == 0 ? 0 : weight->numel() / channels;
  const float* from = weight->data<float>();
  float* to = folded_weight.mutable_data<float>();
  for (int64_t c = 0; c < channels; ++c) {
    float scale;
    fold.Channel(c, &scale, &folded_bias[static_cast<size_t>(c)]);
    ScaleRow(from + c * per_channel, to + c * per_channel, per_channel, scale);
  }
  Node* conv_args[2];
  Tensor tensors[2] = {std::move(folded_weight), Tensor::FromFloats({channels}, folded_bias)};
  const char* suffixes[2] = {"_weight_folded", "_bias_folded"};
  for (int i = 0; i < 2; ++i) {
    ASSIGN_OR_RETURN(conv_args[i],
                     gm.InsertConstantBefore(conv, absl::StrCat(conv->name(), suffixes[i]),
                                             std::move(tensors[i])));
  }
  std::vector<Argument> new_args(conv->args().begin(), conv->args().end());
  if (new_args.size() < 3) new_args.resize(3);
  new_args[1] = Argument(conv_args[0]);
  new_args[2] = Argument(conv_args[1]);
  RETURN_IF_ERROR(graph.SetArgs(conv, NodeArgs(std::move(new_args))));
  RETURN_IF_ERROR(graph.ReplaceAllUsesWith(bn, conv).status());
  RETURN_IF_ERROR(graph.Erase(bn));
  return true;
}

}  // namespace

absl::StatusOr<int> FoldFunctionalBatchNorms(GraphModule& gm) {
  int folded = 0;
  for (Node* node : gm.graph().Nodes()) {
    if (node->op() != OpKind::kCallFunction || node->target() != Functional().batch_norm) {
      continue;
    }
    ASSIGN_OR_RETURN(bool done, FoldOne(gm, node));
    if (done) ++folded;
  }
  gm.graph().EliminateDeadCode();
  return folded;
}

}  // namespace fuselage
