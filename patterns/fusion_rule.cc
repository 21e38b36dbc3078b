#include "patterns/fusion_rule.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/base/macros.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/graph.h"
#include "graph/module_schema.h"
#include "graph/status_macros.h"
#include "patterns/batch_norm_folding.h"

namespace fuselage {
namespace {

absl::Status RuleError(const FusionRule& rule, absl::string_view field,
                       absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("fusion rule '", rule.name, "': ", field, ": ", what));
}

// The symbols the built-in fusers compare against, interned once: comparing symbols is an
// integer compare, where comparing their names compared strings per node.
struct KnownSymbols {
  Symbol relu_module = Symbol::Intern("nn.ReLU");
  Symbol linear = Symbol::Intern("nn.Linear");
  Symbol torch_relu = Symbol::Intern("torch.relu");
  Symbol functional_relu = Symbol::Intern("torch.nn.functional.relu");
  Symbol method_relu = Symbol::Intern("relu");
  Symbol method_add = Symbol::Intern("add");
  Symbol method_mul = Symbol::Intern("mul");
  Symbol binary_functions[4] = {Symbol::Intern("operator.add"), Symbol::Intern("torch.add"),
                                Symbol::Intern("operator.mul"), Symbol::Intern("torch.mul")};
  Symbol convs[3] = {Symbol::Intern("nn.Conv1d"), Symbol::Intern("nn.Conv2d"),
                     Symbol::Intern("nn.Conv3d")};
  Symbol transposed_convs[3] = {Symbol::Intern("nn.ConvTranspose1d"),
                                Symbol::Intern("nn.ConvTranspose2d"),
                                Symbol::Intern("nn.ConvTranspose3d")};
  Symbol batch_norms[3] = {Symbol::Intern("nn.BatchNorm1d"), Symbol::Intern("nn.BatchNorm2d"),
                           Symbol::Intern("nn.BatchNorm3d")};
};

const KnownSymbols& Known() {
  static const KnownSymbols* const known = new KnownSymbols();
  return *known;
}

template <size_t N>
bool IsOneOf(Symbol s, const Symbol (&set)[N]) {
  for (Symbol candidate : set) {
    if (s == candidate) return true;
  }
  return false;
}

// The matched op nodes of `match`, in execution (graph) order, with their modules looked up
// (for Fuse outside the pass: nothing is movable).
std::vector<MatchedOpNode> MatchedOpNodesInOrder(const GraphModule& gm,
                                                 const PatternMatch& match) {
  std::vector<MatchedOpNode> nodes;
  const Pattern& pattern = match.rule->pattern;
  for (int i = 0; i < pattern.size(); ++i) {
    Node* node = match.node_at(i);
    if (pattern.position(i).match_all || node == nullptr) continue;
    MatchedOpNode entry;
    entry.node = node;
    if (node->op() == OpKind::kCallModule) entry.module = gm.FindModule(node->target());
    nodes.push_back(entry);
  }
  const Graph* graph = nodes.front().node->graph();
  std::sort(nodes.begin(), nodes.end(), [graph](const MatchedOpNode& a, const MatchedOpNode& b) {
    return graph->Precedes(a.node, b.node);
  });
  return nodes;
}

bool IsFunctionalRelu(const Node* node) {
  const KnownSymbols& known = Known();
  const Symbol t = node->target();
  return (node->op() == OpKind::kCallFunction &&
          (t == known.torch_relu || t == known.functional_relu)) ||
         (node->op() == OpKind::kCallMethod && t == known.method_relu);
}

bool IsBinaryOp(const Node* node) {
  const KnownSymbols& known = Known();
  const Symbol t = node->target();
  if (node->op() == OpKind::kCallMethod) return t == known.method_add || t == known.method_mul;
  return node->op() == OpKind::kCallFunction && IsOneOf(t, known.binary_functions);
}

// The module `entry` calls, or the NotFound error GraphModule::GetModule gives for its path.
absl::StatusOr<Module*> ModuleOf(const GraphModule& gm, const MatchedOpNode& entry) {
  if (entry.module != nullptr) return entry.module;
  return gm.GetModule(entry.node->target());
}

// The module of one matched node as a part of a fused module, or nullptr for a binary op
// the fused type implies. A movable module (with `pending`) is not copied: the part is an
// empty placeholder that the pass fills by moving the module into it.
absl::StatusOr<std::unique_ptr<Module>> PartModule(const GraphModule& gm,
                                                   const MatchedOpNode& entry,
                                                   absl::string_view rule_name,
                                                   PendingFusion* pending) {
  const Node* node = entry.node;
  if (node->op() == OpKind::kCallModule) {
    ASSIGN_OR_RETURN(Module * module, ModuleOf(gm, entry));
    if (entry.movable && pending != nullptr) {
      auto placeholder = std::make_unique<Module>(module->type());
      // A module with no fields (nn.ReLU) is its type alone: the placeholder already equals
      // it, and there is nothing to move (nor a module to touch again when installing).
      if (!module->tensors().empty() || !module->attributes().empty()) {
        pending->moves.push_back({module, placeholder.get()});
      }
      return placeholder;
    }
    return module->Clone();
  }
  if (IsFunctionalRelu(node)) return std::make_unique<Module>(Known().relu_module);
  if (IsBinaryOp(node)) return std::unique_ptr<Module>();
  return absl::UnimplementedError(absl::StrCat(
      "fusion rule '", rule_name, "': node '", node->name(), "' (", OpKindName(node->op()),
      " ", node->target().name(),
      ") has no module form to put in a fused module; register a custom fuser"));
}

// The parts of one fused module: a pattern has a handful of op nodes, so they stay inline
// (no allocation per fusion).
using ModuleParts = absl::InlinedVector<std::unique_ptr<Module>, 4>;

// The module of type `type` with `parts` as children: built in pending->storage if the pass
// gave one (then returns nullptr and sets pending->fused_in_storage), else on the heap.
absl::StatusOr<std::unique_ptr<Module>> Wrap(const FusionRule& rule, ModuleParts parts,
                                             PendingFusion* pending) {
  const Symbol type = rule.fused_module_type;
  std::unique_ptr<Module> owned;
  Module* fused = nullptr;
  if (pending != nullptr && pending->storage != nullptr) {
    fused = &pending->storage->emplace(type);
    pending->fused_in_storage = true;
  } else {
    owned = std::make_unique<Module>(type);
    fused = owned.get();
  }
  fused->ReserveChildren(static_cast<size_t>(
      std::count_if(parts.begin(), parts.end(), [](const auto& part) { return part != nullptr; })));
  // The children's names "0", "1", ... viewed from literals (no string built per child).
  static constexpr absl::string_view kChildNames[] = {"0", "1", "2", "3", "4", "5", "6", "7"};
  size_t index = 0;
  for (std::unique_ptr<Module>& part : parts) {
    if (part == nullptr) continue;
    if (index < ABSL_ARRAYSIZE(kChildNames)) {
      fused->SetChild(kChildNames[index], std::move(part));
    } else {
      fused->SetChild(absl::StrCat(index), std::move(part));
    }
    ++index;
  }
  if (rule.composite_steps != nullptr) {
    fused->SetAttribute(kStepsAttribute, *rule.composite_steps);
    fused->SetAttribute(kOutputsAttribute, *rule.composite_outputs);
  }
  return owned;
}

// A torch.nn module type ("nn.SiLU"), not a fused (nni.) one.
bool IsPlainModuleType(Symbol type) { return absl::StartsWith(type.name(), "nn."); }

bool IsInMatch(absl::Span<const MatchedOpNode> nodes, const Node* node) {
  for (const MatchedOpNode& entry : nodes) {
    if (entry.node == node) return true;
  }
  return false;
}

// The ref (fusion_rule.h, kFusedSubgraphType) of one arg of a matched node: a step, an
// input (its index in `inputs`), a constant, or a nested list / tuple / slice of refs.
Argument SubgraphRef(const Argument& arg, absl::Span<const MatchedOpNode> nodes,
                     absl::Span<const SubgraphInput> inputs) {
  const auto tagged = [](absl::string_view tag, Argument value) {
    return Argument::Tuple({Argument::String(tag), std::move(value)});
  };
  if (arg.is_node()) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i].node == arg.as_node()) return tagged("step", Argument::Int(i));
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].node == arg.as_node()) return tagged("input", Argument::Int(i));
    }
    return tagged("const", Argument::None());  // not reached: every input is listed
  }
  if (!arg.ContainsNode()) return tagged("const", arg);
  std::vector<Argument> items;
  for (const Argument& item : arg.items()) items.push_back(SubgraphRef(item, nodes, inputs));
  return tagged(arg.is_slice() ? "slice" : arg.is_tuple() ? "tuple" : "list",
                Argument::List(std::move(items)));
}

// The fused subgraph module of `match` (fusion_rule.h): its children, steps and outputs.
absl::StatusOr<std::unique_ptr<Module>> BuildFusedSubgraph(const GraphModule& gm,
                                                           const PatternMatch& match,
                                                           absl::Span<const MatchedOpNode> nodes,
                                                           PendingFusion* pending) {
  const std::vector<SubgraphInput> inputs = FusedSubgraphInputs(nodes);
  ModuleParts parts;
  std::vector<Argument> steps;
  int child = 0;
  for (const MatchedOpNode& entry : nodes) {
    const Node* node = entry.node;
    Argument target = Argument::String(node->target().name());
    if (node->op() == OpKind::kCallModule) {
      ASSIGN_OR_RETURN(std::unique_ptr<Module> part,
                       PartModule(gm, entry, match.rule->name, pending));
      parts.push_back(std::move(part));
      target = Argument::String(absl::StrCat(child++));
    } else if (node->op() != OpKind::kCallFunction && node->op() != OpKind::kCallMethod) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fusion rule '", match.rule->name, "': node '", node->name(), "' is a ",
          OpKindName(node->op()), " node; a fused subgraph replays calls only"));
    }
    std::vector<Argument> args, kwargs;
    for (const Argument& a : node->args()) args.push_back(SubgraphRef(a, nodes, inputs));
    for (const Kwarg& kw : node->kwargs()) {
      kwargs.push_back(Argument::Tuple({Argument::String(kw.first.name()),
                                        SubgraphRef(kw.second, nodes, inputs)}));
    }
    steps.push_back(Argument::Tuple({Argument::String(OpKindName(node->op())), std::move(target),
                                     Argument::List(std::move(args)),
                                     Argument::List(std::move(kwargs))}));
  }
  std::vector<Argument> outputs;
  for (int p : match.rule->pattern.output_positions()) {
    const Node* out = match.node_at(p);
    size_t step = 0;
    while (step < nodes.size() && nodes[step].node != out) ++step;
    if (step == nodes.size()) {
      return absl::InternalError(absl::StrCat("fusion rule '", match.rule->name,
                                              "': an output is not a matched op node"));
    }
    outputs.push_back(Argument::Int(static_cast<int64_t>(step)));
  }
  // Built on the heap (no PendingFusion::storage): the attributes are set after the
  // children.
  ASSIGN_OR_RETURN(std::unique_ptr<Module> fused,
                   Wrap(*match.rule, std::move(parts), nullptr));
  fused->SetAttribute(kStepsAttribute, Argument::List(std::move(steps)));
  fused->SetAttribute(kOutputsAttribute, Argument::List(std::move(outputs)));
  return fused;
}

absl::StatusOr<std::unique_ptr<Module>> WrapInSequence(const GraphModule& gm,
                                                       const PatternMatch& match,
                                                       absl::Span<const MatchedOpNode> nodes,
                                                       PendingFusion* pending) {
  if (match.rule->fused_module_type == Symbol::Intern(kFusedSubgraphType)) {
    return BuildFusedSubgraph(gm, match, nodes, pending);
  }
  ModuleParts parts;
  if (IsPlainModuleType(match.rule->fused_module_type)) {
    // The fused type computes the whole match itself (x * sigmoid(x) -> nn.SiLU): no
    // children. Refused where a part carries state the type has no place for.
    for (const MatchedOpNode& entry : nodes) {
      if (entry.node->op() != OpKind::kCallModule) continue;
      ASSIGN_OR_RETURN(Module * module, ModuleOf(gm, entry));
      if (!module->tensors().empty() || !module->attributes().empty() ||
          !module->children().empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "fusion rule '", match.rule->name, "': node '", entry.node->name(), "' calls ",
            module->type().name(), " with parameters or attributes, which the fused type ",
            match.rule->fused_module_type.name(), " (a plain nn module, no children) would "
            "drop"));
      }
    }
    return Wrap(*match.rule, std::move(parts), pending);
  }
  for (const MatchedOpNode& entry : nodes) {
    ASSIGN_OR_RETURN(std::unique_ptr<Module> part,
                     PartModule(gm, entry, match.rule->name, pending));
    parts.push_back(std::move(part));
  }
  return Wrap(*match.rule, std::move(parts), pending);
}

// True if an optional position of `match` is absent (bound to None).
bool HasAbsentPosition(const PatternMatch& match) {
  const Pattern& pattern = match.rule->pattern;
  if (!pattern.has_optional()) return false;
  for (int p = 0; p < pattern.size(); ++p) {
    if (pattern.position(p).optional && match.node_at(p) == nullptr) return true;
  }
  return false;
}

bool IsFoldableInto(Symbol type) {
  const KnownSymbols& known = Known();
  return type == known.linear || IsOneOf(type, known.convs) ||
         IsOneOf(type, known.transposed_convs);
}

bool IsConvTranspose(Symbol type) { return IsOneOf(type, Known().transposed_convs); }

bool IsBatchNorm(Symbol type) { return IsOneOf(type, Known().batch_norms); }

// The InvalidArgument ReadVector returns for a tensor that is absent (and not optional) or
// not float32 with `n` elements. Kept out of line: ReadVector runs five times per fold, and
// building an error is the rare path.
ABSL_ATTRIBUTE_NOINLINE absl::Status ReadVectorError(const Tensor* t, Symbol owner,
                                                     absl::string_view name, int64_t n) {
  if (t == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch-norm folding: module '", owner.name(), "' has no tensor '", name,
                     "'"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "batch-norm folding: tensor '", name, "' of module '", owner.name(),
      "' must be float32 with ", n, " elements (one per output channel); it is ",
      DTypeName(t->dtype()), " ", t->ShapeString()));
}

// Points `*data` at the `n` float32 values of `t`, tensor `name` of the module at path
// `owner`, or at nullptr if `t` is absent (nullptr) and `optional` (the caller then uses its
// default). InvalidArgument otherwise. The path's text is read only for the error.
inline absl::Status ReadVector(const Tensor* t, Symbol owner, absl::string_view name,
                               int64_t n, bool optional, const float** data) {
  if (t != nullptr && t->dtype() == DType::kFloat32 && t->numel() == n) {
    *data = t->data<float>();
    return absl::OkStatus();
  }
  *data = nullptr;
  if (t == nullptr && optional) return absl::OkStatus();
  return ReadVectorError(t, owner, name, n);
}

// The four tensors of a batch norm that a fold reads, found in one scan of its tensors
// (four FindTensor calls would scan them four times); absent ones are nullptr.
struct BatchNormTensors {
  const Tensor* running_mean = nullptr;
  const Tensor* running_var = nullptr;
  const Tensor* weight = nullptr;
  const Tensor* bias = nullptr;

  explicit BatchNormTensors(const Module& bn) {
    for (const auto& [stored_name, tensor] : bn.tensors()) {
      const absl::string_view name = stored_name;  // compares lengths first
      const Tensor** slot = name == "running_mean" ? &running_mean
                            : name == "running_var" ? &running_var
                            : name == "weight"      ? &weight
                            : name == "bias"        ? &bias
                                                    : nullptr;
      // The first of a name wins, as FindTensor's does (names are unique anyway).
      if (slot != nullptr && *slot == nullptr) *slot = &tensor;
    }
  }
};

// The conv / linear tensors a fold reads, "weight" and "bias", found in one scan of its
// tensors (as BatchNormTensors); absent ones are nullptr.
struct FoldedModuleTensors {
  const Tensor* weight = nullptr;
  const Tensor* bias = nullptr;

  explicit FoldedModuleTensors(const Module& conv) {
    for (const auto& [stored_name, tensor] : conv.tensors()) {
      const absl::string_view name = stored_name;
      const Tensor** slot = name == "weight" ? &weight : name == "bias" ? &bias : nullptr;
      if (slot != nullptr && *slot == nullptr) *slot = &tensor;
    }
  }
};

// Gives `module` the float32 bias `values` (shape [n]): written over its own bias when it has
// one of that dtype and shape (and no quantization parameters) — in place unless another module shares the data (Tensor's
// copy-on-write then copies it first) — else set as a new tensor.
void SetFoldedBias(Module& module, absl::Span<const float> values) {
  const int64_t n = static_cast<int64_t>(values.size());
  Tensor* bias = module.FindMutableTensor("bias");
  if (bias != nullptr && bias->dtype() == DType::kFloat32 && bias->dim() == 1 &&
      bias->numel() == n && bias->qparams() == QuantParams()) {
    if (n > 0) std::memcpy(bias->mutable_data<float>(), values.data(), n * sizeof(float));
    return;
  }
  module.SetTensor("bias", Tensor::FromFloats({n}, values));
}

// PyTorch's fuse_conv_bn_eval / fuse_linear_bn_eval on module data, checked here. If
// `move_conv`, returns an empty placeholder that the pass fills by moving `conv` into it,
// and leaves the whole fold to compute then (pending->moved_fold, PendingFusion::
// ApplyMoves); if also `in_place`, returns nullptr and leaves the fold to compute into
// `conv` itself, where it is. Else returns a copy of `conv` with the batch norm folded into
// its bias, and in `pending->weight_scale` the scaling still owed to its weight
// (PendingWeightScale). `conv_path` and `bn_path` are the modules' paths, for errors (their
// text is read only to build one).
absl::StatusOr<std::unique_ptr<Module>> FoldBatchNorm(Module& conv, Symbol conv_path,
                                                      bool move_conv, bool in_place,
                                                      const Module& bn, Symbol bn_path,
                                                      PendingFusion* pending) {
  const FoldedModuleTensors conv_tensors(conv);
  const Tensor* weight = conv_tensors.weight;
  if (weight == nullptr) return conv.GetTensor("weight").status();  // its NotFound
  if (weight->dtype() != DType::kFloat32 || weight->dim() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch-norm folding: weight of '", conv_path.name(),
        "' must be a float32 tensor of rank >= 2, got ", DTypeName(weight->dtype()), " ", weight->ShapeString()));
  }
  // A transposed conv's weight is [in, out / groups, k...]: output channels are dim 1, as
  // in PyTorch's fuse_conv_bn_weights(transpose=True), which supports groups == 1 only.
  const bool transpose = IsConvTranspose(conv.type());
  if (transpose && conv.FindAttribute("groups") != nullptr) {
    ASSIGN_OR_RETURN(int64_t groups, conv.GetInt("groups"));
    if (groups != 1) {
      return absl::UnimplementedError(absl::StrCat(
          "batch-norm folding: transposed conv '", conv_path.name(), "' has groups = ", groups,
          "; only groups = 1 folds (as in PyTorch)"));
    }
  }
  const int64_t outer = transpose ? weight->shape()[0] : 1;
  const int64_t out_channels = weight->shape()[transpose ? 1 : 0];
  const int64_t per_channel =
      out_channels == 0 || outer == 0 ? 0 : weight->numel() / (outer * out_channels);
  // Read in place (no copies); an absent optional tensor reads as its default.
  const float *mean, *var, *gamma, *beta, *bias;
  const BatchNormTensors bn_tensors(bn);
  RETURN_IF_ERROR(ReadVector(bn_tensors.running_mean, bn_path, "running_mean", out_channels,
                             false, &mean));
  RETURN_IF_ERROR(ReadVector(bn_tensors.running_var, bn_path, "running_var", out_channels,
                             false, &var));
  // affine=False batch norm has no weight / bias: gamma 1, beta 0.
  RETURN_IF_ERROR(ReadVector(bn_tensors.weight, bn_path, "weight", out_channels, true, &gamma));
  RETURN_IF_ERROR(ReadVector(bn_tensors.bias, bn_path, "bias", out_channels, true, &beta));
  RETURN_IF_ERROR(
      ReadVector(conv_tensors.bias, conv_path, "bias", out_channels, true, &bias));
  double eps = 1e-5;
  if (const Argument* eps_attribute = bn.FindAttribute("eps"); eps_attribute != nullptr) {
    if (eps_attribute->is_float() || eps_attribute->is_int()) {
      eps = eps_attribute->as_float();  // what GetFloat reads, without a second lookup
    } else {
      ASSIGN_OR_RETURN(eps, bn.GetFloat("eps"));  // its InvalidArgument
    }
  }
  // The arithmetic is BatchNormFold::Channel's; only the check is done here for a moved conv.
  const bool is_linear = conv.type() == Known().linear;
  const float eps_f = static_cast<float>(eps);
  for (int64_t c = 0; c < out_channels; ++c) {
    const float denominator = var[c] + eps_f;
    if (!(denominator > 0) || !std::isfinite(denominator)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch-norm folding: '", bn_path.name(), "' has running_var + eps = ", denominator,
          " at channel ", c, "; it must be positive"));
    }
  }
  if (move_conv) {
    // Computed when the move has filled the placeholder (PendingFusion::ApplyMoves), or,
    // in place, when the pass installs the fusion.
    std::unique_ptr<Module> folded;
    if (!in_place) {
      folded = std::make_unique<Module>(conv.type());
      pending->moves.push_back({&conv, folded.get()});
    }
    PendingFusion::MovedFold& fold = pending->moved_fold;
    fold.module = in_place ? &conv : folded.get();
    fold.mean = mean;
    fold.var = var;
    fold.gamma = gamma;
    fold.beta = beta;
    fold.bias = bias;
    fold.eps = eps_f;
    fold.is_linear = is_linear;
    fold.channels = out_channels;
    fold.outer = outer;
    fold.per_channel = per_channel;
    return folded;
  }
  const BatchNormFold inputs{mean, var, gamma, beta, bias, eps_f, is_linear};
  std::vector<float> scale(out_channels), new_bias(out_channels);
  for (int64_t c = 0; c < out_channels; ++c) {
    inputs.Channel(c, &scale[c], &new_bias[c]);
  }
  // The copy shares the weight's data with `conv`; PendingWeightScale::Apply scales it.
  std::unique_ptr<Module> folded = conv.Clone();
  SetFoldedBias(*folded, new_bias);
  PendingWeightScale& weight_scale = pending->weight_scale;
  weight_scale.module = folded.get();
  weight_scale.scale = std::move(scale);
  weight_scale.outer = outer;
  weight_scale.per_channel = per_channel;
  return folded;
}

absl::StatusOr<std::unique_ptr<Module>> FoldBatchNormThenWrap(
    const GraphModule& gm, const PatternMatch& match, Node* root,
    absl::Span<const MatchedOpNode> nodes, PendingFusion* pending) {
  const FusionRule& rule = *match.rule;
  const MatchedOpNode* root_entry = nullptr;
  for (const MatchedOpNode& entry : nodes) {
    if (entry.node == root) root_entry = &entry;
  }
  Module* root_module = root_entry != nullptr ? root_entry->module
                        : root->op() == OpKind::kCallModule
                            ? gm.FindModule(root->target())
                            : nullptr;
  if (root->op() != OpKind::kCallModule || root_module == nullptr ||
      !IsFoldableInto(root_module->type())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "fusion rule '", rule.name, "': batch norm can only be folded into a call_module of "
        "nn.Conv1d/2d/3d, nn.ConvTranspose1d/2d/3d or nn.Linear; root node '", root->name(), "' is not one"));
  }
  // The batch norm to fold is the matched node reading the root.
  const Node* bn_node = nullptr;
  const Module* bn_module = nullptr;
  for (const MatchedOpNode& entry : nodes) {
    const Node* node = entry.node;
    if (node->op() != OpKind::kCallModule || node->num_args() < 1 ||
        !node->arg(0).is_node() || node->arg(0).as_node() != root) {
      continue;
    }
    if (entry.module != nullptr && IsBatchNorm(entry.module->type())) {
      bn_node = node;
      bn_module = entry.module;
      break;
    }
  }
  if (bn_node == nullptr && HasAbsentPosition(match)) {
    // `(ReLU, (BatchNorm2d?, Conv2d))` without its batch norm: nothing to fold.
    return WrapInSequence(gm, match, nodes, pending);
  }
  if (bn_node == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "fusion rule '", rule.name, "': fuser fold_bn_then_wrap found no BatchNorm node "
        "reading root node '", root->name(), "'"));
  }
  const bool move_root = root_entry != nullptr && root_entry->movable;
  // The result is the folded root module alone (no fused type, no other matched node) and
  // the pass replaces that very module: it is folded where it is (PendingFusion::root_slot).
  const bool in_place = move_root && rule.fused_module_type.empty() && nodes.size() == 2 &&
                        pending->root_slot == root_module;
  ASSIGN_OR_RETURN(std::unique_ptr<Module> folded,
                   FoldBatchNorm(*root_module, root->target(), move_root, in_place, *bn_module,
                                 bn_node->target(), pending));
  if (in_place) {
    pending->fused_in_place = true;
    return folded;  // nullptr
  }
  ModuleParts parts;
  for (const MatchedOpNode& entry : nodes) {
    if (entry.node == bn_node) continue;
    if (entry.node == root) {
      parts.push_back(std::move(folded));
      continue;
    }
    ASSIGN_OR_RETURN(std::unique_ptr<Module> part, PartModule(gm, entry, rule.name, pending));
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
  return Wrap(rule, std::move(parts), pending);
}

// Computes `fold` into its module: the folded bias (in place when the module has a float32
// bias of shape [channels] without quantization parameters, as SetFoldedBias) and the
// scaled weight, channel by channel, with no buffer for the scales.
void ApplyMovedFold(const PendingFusion::MovedFold& fold) {
  Module& module = *fold.module;
  const BatchNormFold inputs{fold.mean, fold.var, fold.gamma, fold.beta, fold.bias, fold.eps,
                          fold.is_linear};
  const int64_t n = fold.channels;
  // Both in one scan of the module's tensors (FoldBatchNorm checked that "weight" exists).
  const auto [weight, bias] = module.FindMutableTensors("weight", "bias");
  float* new_bias = nullptr;
  std::vector<float> replacement;  // a bias SetFoldedBias would replace, not overwrite
  const bool in_place = bias != nullptr && bias->dtype() == DType::kFloat32 &&
                        bias->dim() == 1 && bias->numel() == n &&
                        bias->qparams() == QuantParams();
  if (in_place) {
    // Copy-on-write: detaches only if another tensor shares the data; fold.bias may be
    // this very buffer (read per channel before it is written).
    new_bias = n > 0 ? bias->mutable_data<float>() : nullptr;
  } else {
    replacement.resize(n);
    new_bias = replacement.data();
  }
  const ScaledWeight w = ScaledWeightOf(weight);
  for (int64_t c = 0; c < n; ++c) {
    float scale;
    inputs.Channel(c, &scale, &new_bias[c]);
    for (int64_t o = 0; o < fold.outer; ++o) {
      const int64_t offset = (o * n + c) * fold.per_channel;
      ScaleRow(w.from + offset, w.to + offset, fold.per_channel, scale);
    }
  }
  if (!in_place) SetFoldedBias(module, replacement);
}

// Empties `pending` field by field (assigning it a temporary PendingFusion() moves an empty
// InlinedVector, which gcc 12 flags -Wmaybe-uninitialized: a false positive), except its
// inputs root_slot and storage (whose module, if any, it drops).
void ClearPending(PendingFusion* pending) {
  pending->fused_in_place = false;
  pending->fused_in_storage = false;
  if (pending->storage != nullptr) pending->storage->reset();
  pending->moves.clear();
  pending->moved_fold = PendingFusion::MovedFold();
  pending->weight_scale.module = nullptr;
  pending->weight_scale.scale.clear();
  pending->weight_scale.outer = 1;
  pending->weight_scale.per_channel = 0;
}

}  // namespace

void PendingWeightScale::Apply() {
  if (module == nullptr) return;
  Tensor* weight = module->FindMutableTensor("weight");
  // In place unless another tensor still shares the data (then into a fresh buffer).
  const ScaledWeight w = ScaledWeightOf(weight);
  const int64_t channels = static_cast<int64_t>(scale.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t offset = (o * channels + c) * per_channel;
      ScaleRow(w.from + offset, w.to + offset, per_channel, scale[c]);
    }
  }
  module = nullptr;
  scale.clear();
}

void PendingFusion::ApplyMoves() {
  for (const Move& move : moves) *move.to = std::move(*move.from);
  moves.clear();
  if (moved_fold.module != nullptr) {
    // The conv was moved, not copied: the module it came from holds none of its tensors
    // any more, so its weight is scaled now, while it is in cache, rather than after the
    // pass (still copy-on-write: data another module shares is copied first).
    ApplyMovedFold(moved_fold);
    moved_fold = MovedFold();
  }
}

void PendingFusion::Relocate(const Module* from, Module* to) {
  for (Move& move : moves) {
    if (move.to == from) move.to = to;
  }
  if (moved_fold.module == from) moved_fold.module = to;
  if (weight_scale.module == from) weight_scale.module = to;
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

size_t PatternMatch::num_outputs() const { return rule->pattern.output_positions().size(); }

Node* PatternMatch::output(size_t i) const {
  return node_at(rule->pattern.output_positions()[i]);
}

std::vector<SubgraphInput> FusedSubgraphInputs(absl::Span<const MatchedOpNode> nodes) {
  std::vector<SubgraphInput> inputs;
  const auto add = [&](Node* input, const Node* consumer, int arg_index) {
    if (IsInMatch(nodes, input)) return;
    for (const SubgraphInput& known : inputs) {
      if (known.node == input) return;
    }
    inputs.push_back({input, consumer, arg_index});
  };
  for (const MatchedOpNode& entry : nodes) {
    const Node* node = entry.node;
    for (size_t i = 0; i < node->num_args(); ++i) {
      const Argument& a = node->arg(i);
      if (a.is_node()) {
        add(a.as_node(), node, static_cast<int>(i));
      } else {
        a.ForEachNode([&](const Node* n) { add(const_cast<Node*>(n), node, -1); });
      }
    }
    for (const Kwarg& kw : node->kwargs()) {
      kw.second.ForEachNode([&](const Node* n) { add(const_cast<Node*>(n), node, -1); });
    }
  }
  return inputs;
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
    if (pattern.position(p).optional) {
      return RuleError(*this, "root_position",
                       absl::StrCat(p, " is an optional position of ", pattern.ToString(),
                                    "; the root must be present in every match"));
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
  if (pattern.has_declared_outputs() &&
      (fuser_kind != FuserKind::kWrapInSequence ||
       fused_module_type != Symbol::Intern(kFusedSubgraphType))) {
    return RuleError(*this, "fused_module_type",
                     absl::StrCat("the pattern declares outputs (", pattern.ToString(),
                                  "); only wrap_in_sequence into ", kFusedSubgraphType,
                                  " fuses a multi-output match (one module, a tuple of "
                                  "results)"));
  }
  if (fused_module_type == Symbol::Intern(kFusedSubgraphType) &&
      (root_node_getter || extra_inputs_getter || extra_input_positions.has_value())) {
    return RuleError(*this, "extra_input_positions",
                     absl::StrCat("a rule fused into ", kFusedSubgraphType,
                                  " takes the match's inputs (FusedSubgraphInputs); no extra "
                                  "inputs or getters"));
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
  const std::vector<int>& positions = extra_input_positions.has_value()
                                          ? *extra_input_positions
                                          : pattern.default_extra_input_positions();
  extra.reserve(positions.size());
  for (int p : positions) {
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
  Node* root = nullptr;
  if (fuser_kind == FuserKind::kFoldBatchNormThenWrap) {
    ASSIGN_OR_RETURN(root, RootNode(match));
  }
  PendingFusion deferred;
  // Nothing is movable here, so nothing but the weight scale is deferred.
  ASSIGN_OR_RETURN(std::unique_ptr<Module> fused,
                   FuseForPass(gm, match, root, MatchedOpNodesInOrder(gm, match), &deferred));
  *pending = std::move(deferred.weight_scale);
  return fused;
}

absl::StatusOr<std::unique_ptr<Module>> FusionRule::FuseForPass(
    const GraphModule& gm, const PatternMatch& match, Node* root,
    absl::Span<const MatchedOpNode> nodes, PendingFusion* pending) const {
  ClearPending(pending);
  absl::StatusOr<std::unique_ptr<Module>> fused;
  switch (fuser_kind) {
    case FuserKind::kWrapInSequence:
      fused = WrapInSequence(gm, match, nodes, pending);
      break;
    case FuserKind::kFoldBatchNormThenWrap:
      if (root == nullptr) return absl::InternalError("FuseForPass: no root node");
      fused = FoldBatchNormThenWrap(gm, match, root, nodes, pending);
      break;
    case FuserKind::kCustom:
      if (!custom_fuser) return RuleError(*this, "custom_fuser", "kCustom needs a fuser");
      return custom_fuser(gm, match);
    default:
      return absl::InternalError("unknown fuser kind");
  }
  // On failure the parts are gone: nothing may point at them.
  if (!fused.ok()) ClearPending(pending);
  return fused;
}

std::optional<std::vector<std::vector<Symbol>>> FusionRule::ChildTypesFromPattern() const {
  using Children = std::vector<std::vector<Symbol>>;
  if (fuser_kind == FuserKind::kCustom || fused_module_type.empty() || root_node_getter ||
      pattern.size() == 0) {
    return std::nullopt;
  }
  // The op positions form one chain from the outermost op down arg by arg; executed from
  // its far end up.
  std::vector<int> order;
  for (int p = 0; p >= 0;) {
    order.push_back(p);
    int next = -1;
    for (int arg : pattern.position(p).args) {
      if (pattern.position(arg).match_all) continue;
      if (next >= 0) return std::nullopt;
      next = arg;
    }
    p = next;
  }
  std::reverse(order.begin(), order.end());
  // kFoldBatchNormThenWrap folds the batch norm reading the root into it.
  int folded_bn = -1;
  if (fuser_kind == FuserKind::kFoldBatchNormThenWrap) {
    const int root = root_position.value_or(pattern.DefaultRootPosition());
    for (int p : order) {
      const PatternPosition& position = pattern.position(p);
      if (position.args.empty() || position.args[0] != root) continue;
      const bool all_bn = std::all_of(
          position.alternatives.begin(), position.alternatives.end(), [](OpRef op) {
            return op.op == OpKind::kCallModule && IsBatchNorm(op.target);
          });
      if (all_bn && !position.alternatives.empty()) folded_bn = p;
    }
    if (folded_bn < 0) return std::nullopt;  // the fuser reports it on the graph
  }
  // An optional position changes the children when absent, unless it is the folded batch
  // norm (absent or folded, it is never a child).
  for (int p : order) {
    if (pattern.position(p).optional && p != folded_bn) return std::nullopt;
  }
  const KnownSymbols& known = Known();
  Children children;
  for (int p : order) {
    if (p == folded_bn) continue;
    // An ONNX leaf names every form of its op (onnx.Conv: Conv1d | Conv2d | Conv3d), of
    // which a match holds one: the fusion pass checks each fused module (patterns/fuse.cc).
    const PatternPosition& written = pattern.position(p);
    if (written.leaves.size() <= 1 && absl::StartsWith(written.spelling, "onnx.")) {
      return std::nullopt;
    }
    std::vector<Symbol> types;
    int binary = 0;
    for (OpRef op : pattern.position(p).alternatives) {
      const Symbol t = op.target;
      if (op.op == OpKind::kCallModule) {
        types.push_back(t);
      } else if ((op.op == OpKind::kCallFunction &&
                  (t == known.torch_relu || t == known.functional_relu)) ||
                 (op.op == OpKind::kCallMethod && t == known.method_relu)) {
        types.push_back(known.relu_module);
      } else if ((op.op == OpKind::kCallMethod &&
                  (t == known.method_add || t == known.method_mul)) ||
                 (op.op == OpKind::kCallFunction && IsOneOf(t, known.binary_functions))) {
        ++binary;
      } else {
        return std::nullopt;  // no module form: the fuser reports it
      }
    }
    if (binary > 0 && !types.empty()) return std::nullopt;
    if (binary > 0) continue;  // implied by the fused type
    std::sort(types.begin(), types.end(), [](Symbol a, Symbol b) { return a.id() < b.id(); });
    types.erase(std::unique(types.begin(), types.end()), types.end());
    children.push_back(std::move(types));
  }
  return children;
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
