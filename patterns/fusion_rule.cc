#include "patterns/fusion_rule.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "graph/graph.h"
#include "graph/status_macros.h"

namespace fuselage {
namespace {

absl::Status RuleError(const FusionRule& rule, absl::string_view field,
                       absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("fusion rule '", rule.name, "': ", field, ": ", what));
}

// The matched op nodes of `match`, in execution (graph) order.
std::vector<Node*> MatchedOpNodesInOrder(const PatternMatch& match) {
  std::vector<Node*> nodes;
  const Pattern& pattern = match.rule->pattern;
  for (int i = 0; i < pattern.size(); ++i) {
    if (!pattern.position(i).match_all && match.node_at(i) != nullptr) {
      nodes.push_back(match.node_at(i));
    }
  }
  const Graph* graph = nodes.front()->graph();
  std::sort(nodes.begin(), nodes.end(),
            [graph](const Node* a, const Node* b) { return graph->Precedes(a, b); });
  return nodes;
}

bool IsFunctionalRelu(const Node* node) {
  const absl::string_view t = node->target().name();
  return (node->op() == OpKind::kCallFunction &&
          (t == "torch.relu" || t == "torch.nn.functional.relu")) ||
         (node->op() == OpKind::kCallMethod && t == "relu");
}

bool IsBinaryOp(const Node* node) {
  const absl::string_view t = node->target().name();
  if (node->op() == OpKind::kCallMethod) return t == "add" || t == "mul";
  return node->op() == OpKind::kCallFunction &&
         (t == "operator.add" || t == "torch.add" || t == "operator.mul" || t == "torch.mul");
}

// The module of one matched node as a part of a fused module, or nullptr for a binary op
// the fused type implies.
absl::StatusOr<std::unique_ptr<Module>> PartModule(const GraphModule& gm, const Node* node,
                                                   absl::string_view rule_name) {
  if (node->op() == OpKind::kCallModule) {
    ASSIGN_OR_RETURN(Module * module, gm.GetModule(node->target().name()));
    return module->Clone();
  }
  if (IsFunctionalRelu(node)) return std::make_unique<Module>("nn.ReLU");
  if (IsBinaryOp(node)) return std::unique_ptr<Module>();
  return absl::UnimplementedError(absl::StrCat(
      "fusion rule '", rule_name, "': node '", node->name(), "' (", OpKindName(node->op()),
      " ", node->target().name(),
      ") has no module form to put in a fused module; register a custom fuser"));
}

absl::StatusOr<std::unique_ptr<Module>> Wrap(Symbol type,
                                             std::vector<std::unique_ptr<Module>> parts) {
  auto fused = std::make_unique<Module>(type);
  int index = 0;
  for (std::unique_ptr<Module>& part : parts) {
    if (part == nullptr) continue;
    fused->SetChild(absl::StrCat(index++), std::move(part));
  }
  return fused;
}

absl::StatusOr<std::unique_ptr<Module>> WrapInSequence(const GraphModule& gm,
                                                       const PatternMatch& match) {
  std::vector<std::unique_ptr<Module>> parts;
  for (const Node* node : MatchedOpNodesInOrder(match)) {
    ASSIGN_OR_RETURN(std::unique_ptr<Module> part, PartModule(gm, node, match.rule->name));
    parts.push_back(std::move(part));
  }
  return Wrap(match.rule->fused_module_type, std::move(parts));
}

bool IsFoldableInto(Symbol type) {
  const absl::string_view t = type.name();
  return t == "nn.Conv1d" || t == "nn.Conv2d" || t == "nn.Conv3d" || t == "nn.Linear" ||
         t == "nn.ConvTranspose1d" || t == "nn.ConvTranspose2d" || t == "nn.ConvTranspose3d";
}

bool IsConvTranspose(Symbol type) {
  const absl::string_view t = type.name();
  return t == "nn.ConvTranspose1d" || t == "nn.ConvTranspose2d" || t == "nn.ConvTranspose3d";
}

bool IsBatchNorm(Symbol type) {
  const absl::string_view t = type.name();
  return t == "nn.BatchNorm1d" || t == "nn.BatchNorm2d" || t == "nn.BatchNorm3d";
}

// Reads a float32 tensor of exactly `n` elements, or a default of `fill` if absent and
// `optional`.
absl::StatusOr<std::vector<float>> ReadVector(const Module& module, absl::string_view owner,
                                              absl::string_view name, int64_t n,
                                              bool optional, float fill) {
  const Tensor* t = module.FindTensor(name);
  if (t == nullptr) {
    if (optional) return std::vector<float>(n, fill);
    return absl::InvalidArgumentError(
        absl::StrCat("batch-norm folding: module '", owner, "' has no tensor '", name, "'"));
  }
  if (t->dtype() != DType::kFloat32 || t->numel() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch-norm folding: tensor '", name, "' of module '", owner,
        "' must be float32 with ", n, " elements (one per output channel); it is ",
        DTypeName(t->dtype()), " ", t->ShapeString()));
  }
  const float* data = t->data<float>();
  return std::vector<float>(data, data + n);
}

// PyTorch's fuse_conv_bn_eval / fuse_linear_bn_eval on module data: returns a copy of
// `conv` with the batch norm folded into its bias, and in `pending` the scaling still owed
// to its weight (see PendingWeightScale).
absl::StatusOr<std::unique_ptr<Module>> FoldBatchNorm(const Module& conv,
                                                      absl::string_view conv_path,
                                                      const Module& bn,
                                                      absl::string_view bn_path,
                                                      PendingWeightScale* pending) {
  ASSIGN_OR_RETURN(const Tensor* weight, conv.GetTensor("weight"));
  if (weight->dtype() != DType::kFloat32 || weight->dim() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch-norm folding: weight of '", conv_path, "' must be a float32 tensor of rank >= 2,"
        " got ", DTypeName(weight->dtype()), " ", weight->ShapeString()));
  }
  // A transposed conv's weight is [in, out / groups, k...]: output channels are dim 1, as
  // in PyTorch's fuse_conv_bn_weights(transpose=True), which supports groups == 1 only.
  const bool transpose = IsConvTranspose(conv.type());
  if (transpose && conv.FindAttribute("groups") != nullptr) {
    ASSIGN_OR_RETURN(int64_t groups, conv.GetInt("groups"));
    if (groups != 1) {
      return absl::UnimplementedError(absl::StrCat(
          "batch-norm folding: transposed conv '", conv_path, "' has groups = ", groups,
          "; only groups = 1 folds (as in PyTorch)"));
    }
  }
  const int64_t outer = transpose ? weight->shape()[0] : 1;
  const int64_t out_channels = weight->shape()[transpose ? 1 : 0];
  const int64_t per_channel =
      out_channels == 0 || outer == 0 ? 0 : weight->numel() / (outer * out_channels);
  ASSIGN_OR_RETURN(std::vector<float> mean,
                   ReadVector(bn, bn_path, "running_mean", out_channels, false, 0));
  ASSIGN_OR_RETURN(std::vector<float> var,
                   ReadVector(bn, bn_path, "running_var", out_channels, false, 0));
  // affine=False batch norm has no weight / bias: gamma 1, beta 0.
  ASSIGN_OR_RETURN(std::vector<float> gamma,
                   ReadVector(bn, bn_path, "weight", out_channels, true, 1.0f));
  ASSIGN_OR_RETURN(std::vector<float> beta,
                   ReadVector(bn, bn_path, "bias", out_channels, true, 0.0f));
  ASSIGN_OR_RETURN(std::vector<float> bias,
                   ReadVector(conv, conv_path, "bias", out_channels, true, 0.0f));
  double eps = 1e-5;
  if (bn.FindAttribute("eps") != nullptr) {
    ASSIGN_OR_RETURN(eps, bn.GetFloat("eps"));
  }
  // Float32 arithmetic in PyTorch 1.13's own order, so the folded weights are bit-identical
  // to fuse_fx's (a double-precision fold differs by one ulp in ~40% of weights, which
  // flips quantized weights at rounding ties):
  //   conv (fuse_conv_bn_weights):  r = rsqrt(var + eps); w' = w * (gamma * r);
  //                                 b' = ((b - mean) * r) * gamma + beta
  //   linear (fuse_linear_bn_weights): s = gamma * rsqrt(var + eps); w' = w * s;
  //                                 b' = (b - mean) * s + beta
  const bool is_linear = conv.type().name() == "nn.Linear";
  const float eps_f = static_cast<float>(eps);
  std::vector<float> rsqrt(out_channels), scale(out_channels);
  for (int64_t c = 0; c < out_channels; ++c) {
    const float denominator = var[c] + eps_f;
    if (!(denominator > 0) || !std::isfinite(denominator)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch-norm folding: '", bn_path, "' has running_var + eps = ", denominator,
          " at channel ", c, "; it must be positive"));
    }
    rsqrt[c] = 1.0f / std::sqrt(denominator);
    scale[c] = gamma[c] * rsqrt[c];
  }
  std::vector<float> new_bias(out_channels);
  for (int64_t c = 0; c < out_channels; ++c) {
    const float centered = bias[c] - mean[c];
    new_bias[c] = is_linear ? centered * scale[c] + beta[c]
                            : (centered * rsqrt[c]) * gamma[c] + beta[c];
  }
  // The clone shares the weight's data with `conv`; PendingWeightScale::Apply scales it.
  std::unique_ptr<Module> folded = conv.Clone();
  folded->SetTensor("bias", Tensor::FromFloats({out_channels}, new_bias));
  pending->module = folded.get();
  pending->scale = std::move(scale);
  pending->outer = outer;
  pending->per_channel = per_channel;
  return folded;
}

absl::StatusOr<std::unique_ptr<Module>> FoldBatchNormThenWrap(const GraphModule& gm,
                                                              const PatternMatch& match,
                                                              PendingWeightScale* pending) {
  const FusionRule& rule = *match.rule;
  ASSIGN_OR_RETURN(Node * root, rule.RootNode(match));
  const Module* root_module =
      root->op() == OpKind::kCallModule ? gm.FindModule(root->target().name()) : nullptr;
  if (root_module == nullptr || !IsFoldableInto(root_module->type())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "fusion rule '", rule.name, "': batch norm can only be folded into a call_module of "
        "nn.Conv1d/2d/3d, nn.ConvTranspose1d/2d/3d or nn.Linear; root node '", root->name(), "' is not one"));
  }
  // The batch norm to fold is the matched node reading the root.
  const Node* bn_node = nullptr;
  const Module* bn_module = nullptr;
  for (const Node* node : MatchedOpNodesInOrder(match)) {
    if (node->op() != OpKind::kCallModule || node->num_args() < 1 ||
        !node->arg(0).is_node() || node->arg(0).as_node() != root) {
      continue;
    }
    const Module* module = gm.FindModule(node->target().name());
    if (module != nullptr && IsBatchNorm(module->type())) {
      bn_node = node;
      bn_module = module;
      break;
    }
  }
  if (bn_node == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "fusion rule '", rule.name, "': fuser fold_bn_then_wrap found no BatchNorm node "
        "reading root node '", root->name(), "'"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Module> folded,
                   FoldBatchNorm(*root_module, root->target().name(), *bn_module,
                                 bn_node->target().name(), pending));
  std::vector<std::unique_ptr<Module>> parts;
  for (const Node* node : MatchedOpNodesInOrder(match)) {
    if (node == bn_node) continue;
    if (node == root) {
      parts.push_back(std::move(folded));
      continue;
    }
    ASSIGN_OR_RETURN(std::unique_ptr<Module> part, PartModule(gm, node, rule.name));
    parts.push_back(std::move(part));
  }
  if (rule.fused_module_type.empty()) {
    // (BatchNorm2d, Conv2d) -> the folded conv itself, as PyTorch's eval-mode fusion.
    int modules = 0;
    std::unique_ptr<Module>* only = nullptr;
    for (std::unique_ptr<Module>& part : parts) {
      if (part != nullptr) {
        ++modules;
        only = &part;
      }
    }
    if (modules != 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "fusion rule '", rule.name, "': no fused module type, but ", modules,
          " modules remain after folding the batch norm; set fused_module_type"));
    }
    return std::move(*only);
  }
  return Wrap(rule.fused_module_type, std::move(parts));
}

}  // namespace

void PendingWeightScale::Apply() {
  if (module == nullptr) return;
  Tensor* weight = module->FindMutableTensor("weight");
  // Copy-on-write: detaches (one memcpy) only if another tensor still shares the data.
  float* w = weight->mutable_data<float>();
  const int64_t channels = static_cast<int64_t>(scale.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t c = 0; c < channels; ++c) {
      float* row = w + (o * channels + c) * per_channel;
      const float s = scale[c];
      // Blocks of 8 with a fixed trip count, which -O2 turns into SIMD multiplies (it does
      // not vectorize the plain loop); each lane is the same float32 product as before.
      int64_t k = 0;
      for (; k + 8 <= per_channel; k += 8) {
        for (int j = 0; j < 8; ++j) row[k + j] = row[k + j] * s;
      }
      for (; k < per_channel; ++k) row[k] = row[k] * s;
    }
  }
  module = nullptr;
  scale.clear();
}

absl::string_view FuserKindName(FuserKind kind) {
  switch (kind) {
    case FuserKind::kWrapInSequence:
      return "wrap_in_sequence";
    case FuserKind::kFoldBatchNormThenWrap:
      return "fold_bn_then_wrap";
    case FuserKind::kCustom:
      return "custom";
  }
  return "unknown";
}

absl::StatusOr<FuserKind> FuserKindFromName(absl::string_view name) {
  for (FuserKind kind : {FuserKind::kWrapInSequence, FuserKind::kFoldBatchNormThenWrap,
                         FuserKind::kCustom}) {
    if (FuserKindName(kind) == name) return kind;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown fuser '", name, "'; expected wrap_in_sequence, fold_bn_then_wrap or custom"));
}

absl::Status FusionRule::Validate() const {
  if (name.empty()) return RuleError(*this, "name", "must not be empty");
  if (pattern.size() == 0) return RuleError(*this, "pattern", "must not be empty");
  if (root_position.has_value()) {
    const int p = *root_position;
    if (p < 0 || p >= pattern.size() || pattern.position(p).match_all) {
      return RuleError(*this, "root_position",
                       absl::StrCat(p, " is not an op position of ", pattern.ToString()));
    }
  }
  if (extra_input_positions.has_value()) {
    for (int p : *extra_input_positions) {
      if (p < 0 || p >= pattern.size() || !pattern.position(p).match_all) {
        return RuleError(*this, "extra_input_positions",
                         absl::StrCat(p, " is not a MatchAllNode position of ",
                                      pattern.ToString()));
      }
    }
  }
  switch (fuser_kind) {
    case FuserKind::kCustom:
      if (!custom_fuser) return RuleError(*this, "custom_fuser", "kCustom needs a fuser");
      break;
    case FuserKind::kWrapInSequence:
      if (fused_module_type.empty()) {
        return RuleError(*this, "fused_module_type", "wrap_in_sequence needs a fused type");
      }
      break;
    case FuserKind::kFoldBatchNormThenWrap:
      break;
  }
  return absl::OkStatus();
}

absl::StatusOr<Node*> FusionRule::RootNode(const PatternMatch& match) const {
  if (root_node_getter) return root_node_getter(match);
  const int p = root_position.value_or(pattern.DefaultRootPosition());
  Node* node = match.node_at(p);
  if (node == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "fusion rule '", name, "': root position '", pattern.PathOf(p),
        "' is bound to a constant, not a node"));
  }
  return node;
}

absl::StatusOr<std::vector<Argument>> FusionRule::ExtraInputs(const PatternMatch& match) const {
  if (extra_inputs_getter) return extra_inputs_getter(match);
  std::vector<Argument> extra;
  for (int p : extra_input_positions.value_or(pattern.DefaultExtraInputPositions())) {
    extra.push_back(match.bindings[p]);
  }
  return extra;
}

absl::StatusOr<std::unique_ptr<Module>> FusionRule::Fuse(const GraphModule& gm,
                                                         const PatternMatch& match) const {
  PendingWeightScale pending;
  absl::StatusOr<std::unique_ptr<Module>> fused = Fuse(gm, match, &pending);
  if (fused.ok()) pending.Apply();
  return fused;
}

absl::StatusOr<std::unique_ptr<Module>> FusionRule::Fuse(const GraphModule& gm,
                                                         const PatternMatch& match,
                                                         PendingWeightScale* pending) const {
  *pending = PendingWeightScale();
  switch (fuser_kind) {
    case FuserKind::kWrapInSequence:
      return WrapInSequence(gm, match);
    case FuserKind::kFoldBatchNormThenWrap: {
      absl::StatusOr<std::unique_ptr<Module>> fused = FoldBatchNormThenWrap(gm, match, pending);
      // On failure the folded module is gone: nothing may point at it.
      if (!fused.ok()) *pending = PendingWeightScale();
      return fused;
    }
    case FuserKind::kCustom:
      if (!custom_fuser) return RuleError(*this, "custom_fuser", "kCustom needs a fuser");
      return custom_fuser(gm, match);
  }
  return absl::InternalError("unknown fuser kind");
}

absl::StatusOr<FusionRule> MakeFusionRule(absl::string_view name,
                                          absl::string_view pattern_text,
                                          PatternFormat format,
                                          absl::string_view fused_module_type,
                                          FuserKind fuser_kind) {
  FusionRule rule;
  rule.name = std::string(name);
  ASSIGN_OR_RETURN(rule.pattern, Pattern::Parse(pattern_text, format));
  if (!fused_module_type.empty()) rule.fused_module_type = Symbol::Intern(fused_module_type);
  rule.fuser_kind = fuser_kind;
  RETURN_IF_ERROR(rule.Validate());
  return rule;
}

}  // namespace fuselage
