// FusionRule: what the fusion pass applies — a named pattern, which matched node is the
// root (the node whose args the fused node takes), which matched args are extra inputs,
// how the fused module is built, and its type. A BackendPatternConfig (backend_configs/)
// carries one of these plus its quantization settings.
//
// The fused call_module node's args are: the root's args, then the extra inputs, in order.
//
// Root and extra inputs are positions in the pattern (declarative; see pattern.h for
// positions and paths) or, from C++, callables. Unset, they default to what is right for
// multi-input patterns: root = the leaf reached by following arg 0 from the outermost op,
// extra inputs = the MatchAllNode positions off that chain. For
// (ReLU, (add, (BatchNorm2d, Conv2d), MatchAllNode)) that is root = Conv2d and extra
// inputs = [the MatchAllNode]; PyTorch's default root getter would return the MatchAllNode.
//
// Fusers are data: kWrapInSequence, kFoldBatchNormThenWrap, or a user's C++ callable.
#ifndef FUSELAGE_PATTERNS_FUSION_RULE_H_
#define FUSELAGE_PATTERNS_FUSION_RULE_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph/argument.h"
#include "graph/graph_module.h"
#include "graph/module.h"
#include "graph/node.h"
#include "graph/symbol.h"
#include "graph/tensor.h"
#include "patterns/pattern.h"

namespace fuselage {

struct FusionRule;

// One match of a rule: what each pattern position is bound to. Op positions are bound to
// a node; a MatchAllNode position to whatever the arg is (a node, a constant, None, ...).
struct PatternMatch {
  const FusionRule* rule = nullptr;
  // Indexed by pattern position (preorder). A view of `storage`, where the matcher stores
  // the bindings of all the matches of one scan side by side (in blocks of thousands), so a
  // match costs no allocation and no free of its own.
  absl::Span<const Argument> bindings;
  // Keeps `bindings` alive; shared by the matches of one scan and by copies (immutable).
  std::shared_ptr<const void> storage;

  // The node at position `i`, or nullptr if it is bound to a non-node arg.
  Node* node_at(int i) const {
    return bindings[i].is_node() ? bindings[i].as_node() : nullptr;
  }
  Node* outermost() const { return node_at(0); }
  // The match's outputs (pattern.h `-> $name`): output 0 is the outermost node, output i
  // the node at the pattern's i-th declared output position. num_outputs() is 1 for a
  // single-output pattern.
  size_t num_outputs() const;
  Node* output(size_t i) const;
};

// Builds the fused module of one match. Must not modify `gm`. The pass installs the result
// as the fused node's module; an error aborts the whole pass with the graph unchanged.
using Fuser = std::function<absl::StatusOr<std::unique_ptr<Module>>(
    const GraphModule& gm, const PatternMatch& match)>;
using RootNodeGetter = std::function<absl::StatusOr<Node*>(const PatternMatch& match)>;
using ExtraInputsGetter =
    std::function<absl::StatusOr<std::vector<Argument>>(const PatternMatch& match)>;

enum class FuserKind {
  // The fused module (type `fused_module_type`) gets as children "0", "1", ... the
  // modules of the matched op nodes in execution order: call_module nodes contribute a
  // copy of their module, functional/method relu a new nn.ReLU; binary ops (add, mul) are
  // implied by the fused type and add no child (PyTorch's ConvAdd2d keeps `add` as a plain
  // function, not a submodule). A plain torch.nn fused type ("nn.SiLU" for
  // `(mul, $x, (sigmoid, $x))`) computes the whole match itself and gets no children; a
  // matched module with parameters or attributes is then refused (it would be dropped).
  kWrapInSequence,
  // Eval-mode fuse_conv_bn_eval: the BatchNorm node that consumes the root conv / linear
  // is folded into a copy of it (w' = w * gamma / sqrt(var + eps) per out-channel,
  // b' = (b - mean) * gamma / sqrt(var + eps) + beta) and absent from the result; the rest
  // is wrapped as kWrapInSequence does. With an empty `fused_module_type` the result is
  // the folded conv / linear itself (PyTorch's (BatchNorm2d, Conv2d) -> nn.Conv2d).
  // A match whose optional batch norm is absent (`(ReLU, (BatchNorm2d?, Conv2d))` on
  // conv-relu) has nothing to fold and is wrapped as kWrapInSequence does.
  kFoldBatchNormThenWrap,
  // `custom_fuser` builds the module.
  kCustom,
};

// The weight half of a batch-norm fold, checked but not yet applied. The fusion pass asks
// Fuse for it (FusionRule::Fuse with `pending`), so the fused module comes back with its
// folded bias but its conv / linear weight still unscaled and sharing its data with the
// original module; the pass scales it once it has removed the modules it replaced. By then
// nothing else holds the data, and Tensor's copy-on-write scales it in place instead of
// copying it: for resnet50 that is 100 MB less to allocate, fill and copy. Data still
// shared (a weight tied to another module, a get_attr reading it, a tensor borrowed from
// the user's torch model) is read and the scaled values written to a fresh buffer, so no
// other module sees the change.
struct PendingWeightScale {
  Module* module = nullptr;  // the folded conv / linear; nullptr: nothing pending
  std::vector<float> scale;  // per output channel: gamma / sqrt(var + eps)
  int64_t outer = 1;         // a transposed conv's input channels (its weight's dim 0), else 1
  int64_t per_channel = 0;   // elements per output channel within one `outer` slice

  // w[o][c][k] = w[o][c][k] * scale[c] on `module`'s float32 "weight" (the float32 product
  // fuse_fx computes, so the result is bit-identical). Cannot fail: Fuse checked the weight.
  // Clears the record; a second call does nothing.
  void Apply();
};

// ---- For the fusion pass (patterns/fuse.cc) --------------------------------------------
// The pass resolves each matched op node's module once per match and knows which modules
// it will delete; given that, a fuser neither looks the modules up again nor copies a
// module only to have the pass free the original.

// One matched op node of a match, as the pass resolved it.
struct MatchedOpNode {
  Node* node = nullptr;
  // call_module: the module it calls (nullptr if the path does not resolve); else nullptr.
  Module* module = nullptr;
  // The pass deletes `module` with this match: no other call_module node calls it, no
  // get_attr reads it or anything inside it, and it has no children. A fuser may then take
  // it (PendingFusion::moves) instead of copying it.
  bool movable = false;
};

// What FusionRule::FuseForPass leaves to the pass: the parts to move out of the module
// tree, applied when the pass installs the fused module (ApplyMoves, after every check of
// every match), and a batch-norm fold: computed by ApplyMoves when the folded conv /
// linear is moved (moved_fold), else only its weight half (weight_scale) is left, which
// the pass applies last.
struct PendingFusion {
  // *to = std::move(*from): `from` is a movable module of the graph, `to` an empty
  // placeholder inside the fused module (or the fused module itself). The moved-from
  // module stays in the tree, empty, until the pass removes it.
  struct Move {
    Module* from;
    Module* to;
  };
  absl::InlinedVector<Move, 3> moves;
  // A batch-norm fold whose conv / linear is moved, not copied: checked, not yet computed.
  // It keeps the fold's inputs -- the data of the batch norm and of the conv's bias, which
  // no fusion of the pass changes (every write to shared data copies it first) -- and
  // ApplyMoves computes the fold once the move has filled `module` (the conv's
  // placeholder), writing the bias and scaling the weight in place: no per-fold buffers.
  struct MovedFold {
    Module* module = nullptr;  // nullptr: no fold pending
    const float* mean = nullptr;
    const float* var = nullptr;
    const float* gamma = nullptr;  // nullptr: 1
    const float* beta = nullptr;   // nullptr: 0
    const float* bias = nullptr;   // the conv's own bias; nullptr: 0
    float eps = 0;
    bool is_linear = false;
    int64_t channels = 0;     // output channels
    int64_t outer = 1;        // as PendingWeightScale
    int64_t per_channel = 0;  // as PendingWeightScale
  };
  MovedFold moved_fold;
  // The weight half of a fold into a copied conv / linear (its bias is already folded).
  PendingWeightScale weight_scale;
  // Set by the pass before FuseForPass (which keeps it): the module the pass will replace
  // by the fused module in its slot of the tree (the root node's, when only the root calls
  // it), or nullptr. If the fused module would be that very module, moved whole -- a
  // batch-norm fold with no fused type, e.g. (BatchNorm2d, Conv2d) -> nn.Conv2d, of a
  // movable conv -- the fuser leaves it where it is instead: FuseForPass returns nullptr,
  // sets `fused_in_place`, and ApplyMoves computes the fold into it (no module allocated,
  // nothing moved out and back).
  Module* root_slot = nullptr;
  bool fused_in_place = false;
  // Set by the pass before FuseForPass (which keeps it) when the fused module will go to
  // root_slot: where a fuser that wraps the parts in a new module of the fused type
  // (kWrapInSequence; kFoldBatchNormThenWrap with a fused type) builds it, as the pass
  // would only move it into root_slot (a heap block and its free fewer per fusion).
  // FuseForPass then returns nullptr and sets `fused_in_storage`; the caller moves
  // **storage into root_slot (and Relocate()s from it). nullptr: built on the heap.
  std::optional<Module>* storage = nullptr;
  bool fused_in_storage = false;

  // Performs the moves, then computes a moved fold (moved_fold) into the moved module:
  // folded bias and scaled weight, the float32 arithmetic Fuse uses, so bit-identical.
  // Clears both. Cannot fail.
  void ApplyMoves();
  // The module at `from` has been moved into `to` (the pass moved the fused module into its
  // slot of the module tree): what still points at `from` now points at `to`.
  void Relocate(const Module* from, Module* to);
};

// ---- Fused subgraphs (multi-output patterns; pattern.h `-> $name`) ----------------------
// A rule whose fused type is kFusedSubgraphType (fuser kWrapInSequence) fuses each match
// into one module of that type that replays the matched nodes: any op mix (chunk, getitem,
// sigmoid, mul, conv, ...), any number of outputs. It holds
//  - children "0", "1", ...: the modules of the matched call_module nodes, in execution
//    order (copied, or moved when the pass deletes them);
//  - attribute "steps": per matched op node, in execution order, a tuple
//    (op kind name, target, args, kwargs): target is the child's name for call_module;
//    args a list of refs, kwargs a list of (key, ref); a ref is ("input", i) (the fused
//    node's arg i), ("step", j) (the value of step j), ("const", value), or
//    ("list" | "tuple" | "slice", [refs]) for a nested arg holding any of those;
//  - attribute "outputs": the step of each pattern output (Pattern::output_positions).
// Its forward returns that one value for a single-output pattern, else a tuple in output
// order, which the pass's getitem nodes read. Its args are FusedSubgraphInputs, so a
// chunk's kwargs or constant args stay in the steps. The runtime's kernel for it is
// runtime/fused_subgraph.h.
//   (mul, (operator.getitem, (torch.chunk@c, $x, 2), 0), (sigmoid, (operator.getitem@b, $c, 1))) -> $b
//   fused into kFusedSubgraphType: fused(x) returns (x0 * sigmoid(x1), x1).
inline constexpr char kFusedSubgraphType[] = "fuselage.FusedSubgraph";

// One input of a fused subgraph: a node outside the match that an op node of it reads.
struct SubgraphInput {
  Node* node = nullptr;
  // Where it was first read: `consumer->arg(arg_index)` is it (arg_index >= 0), or it is
  // inside a nested arg or a kwarg of `consumer` (arg_index = -1).
  const Node* consumer = nullptr;
  int arg_index = -1;
};

// The distinct nodes outside the match that `nodes` (a match's op nodes in execution
// order) read, in the order the fused subgraph takes them: node by node, args then kwargs,
// depth first, each node once.
std::vector<SubgraphInput> FusedSubgraphInputs(absl::Span<const MatchedOpNode> nodes);

// "wrap_in_sequence", "fold_bn_then_wrap", "custom".
absl::string_view FuserKindName(FuserKind kind);
absl::StatusOr<FuserKind> FuserKindFromName(absl::string_view name);

struct FusionRule {
  // Stable name, e.g. "conv_bn_add_relu"; fused nodes record it as meta "pattern".
  std::string name;
  Pattern pattern;
  // Type of the fused module ("nni.ConvAddReLU2d"). May be empty only for
  // kFoldBatchNormThenWrap (the folded module itself) and kCustom (whatever it returns).
  Symbol fused_module_type;

  FuserKind fuser_kind = FuserKind::kWrapInSequence;
  Fuser custom_fuser;  // kCustom only

  // For a fused type declared in a backend config: its steps and outputs
  // (graph/module_schema.h, CompositionSteps), which the built-in fusers write on every
  // module they make, so the module runs with no config loaded. BackendConfig sets them
  // from the type's schema; null for every other type.
  std::shared_ptr<const Argument> composite_steps;
  std::shared_ptr<const Argument> composite_outputs;

  // Set by a config loader that checked, from the pattern alone, that every module this
  // rule builds holds the children its type declares (ChildTypesFromPattern): the fusion
  // pass then skips its per-match check. False (check each fused module) everywhere else.
  bool children_checked_at_load = false;

  // Declarative getters: a pattern position (see Pattern::PositionAtPath). Unset = default.
  std::optional<int> root_position;
  std::optional<std::vector<int>> extra_input_positions;
  // C++ getters; when set they win over the positions.
  RootNodeGetter root_node_getter;
  ExtraInputsGetter extra_inputs_getter;

  // The outermost node may have users outside the match (FX: yes). Inner nodes never may.
  // (Kept as a knob because a config may want the stricter rule.)
  bool outermost_may_have_many_users = true;

  // Priority among rules that can start at the same node (matcher.h rule 2): higher is
  // tried first; ties keep the default order (longest first, then registration). 0 for
  // every rule gives exactly PyTorch's order.
  int benefit = 0;

  // Checks the rule on its own: non-empty name, positions in range and pointing at the
  // right kind of position (root: an op position; extra inputs: MatchAllNode positions),
  // a fuser for kCustom, a fused type where required. InvalidArgument naming the rule
  // and the field.
  absl::Status Validate() const;

  // The root node of `match`: callable, else position, else the default. FailedPrecondition
  // if the chosen position is bound to a constant.
  absl::StatusOr<Node*> RootNode(const PatternMatch& match) const;
  // The extra inputs of `match`: callable, else positions, else the defaults.
  absl::StatusOr<std::vector<Argument>> ExtraInputs(const PatternMatch& match) const;
  // Builds the fused module with the rule's fuser.
  absl::StatusOr<std::unique_ptr<Module>> Fuse(const GraphModule& gm,
                                               const PatternMatch& match) const;
  // The same, except that a batch-norm fold's weight scaling is left to the caller: the
  // returned module's weight is unscaled until `pending->Apply()`, which the caller must
  // call while the returned module is alive. `pending` is left empty by other fusers.
  absl::StatusOr<std::unique_ptr<Module>> Fuse(const GraphModule& gm, const PatternMatch& match,
                                               PendingWeightScale* pending) const;
  // The fusion pass's Fuse: `root` is RootNode(match) and `nodes` the match's op nodes in
  // execution order with their modules resolved (MatchedOpNode). Reads `gm` only; parts
  // marked movable are not copied but left in `pending->moves`, and a batch-norm fold's
  // weight scaling in `pending->weight_scale`. The caller applies `pending`
  // (ApplyMoves, then weight_scale.Apply()) while the returned module is alive, or drops
  // both, having changed nothing. A custom fuser is called as by Fuse and defers nothing.
  // Returns nullptr (and sets pending->fused_in_place) only when the fused module is
  // pending->root_slot itself, folded in place (see PendingFusion::root_slot), or (and sets
  // pending->fused_in_storage) when it was built in *pending->storage.
  absl::StatusOr<std::unique_ptr<Module>> FuseForPass(const GraphModule& gm,
                                                      const PatternMatch& match, Node* root,
                                                      absl::Span<const MatchedOpNode> nodes,
                                                      PendingFusion* pending) const;

  // The children "0", "1", ... the built-in fuser gives the fused module, known from the
  // pattern alone: per child, the module types it may have (one per alternative of its
  // pattern position). A config loader checks them against the fused type's schema, so a
  // fuser that would drop a part (wrap_in_sequence of conv-bn-add-relu into
  // nni.ConvAddReLU2d keeps the batch norm the type has no place for) is refused before
  // any graph is fused. nullopt where the pattern does not decide it: a custom fuser or
  // getter, no fused type, op positions that branch (their execution order is the
  // graph's), a position whose alternatives mix module and non-module forms or have no
  // module form, an optional position other than the folded batch norm (its absence
  // changes the children).
  std::optional<std::vector<std::vector<Symbol>>> ChildTypesFromPattern() const;
};

// Convenience constructors (parse + fill + Validate).
absl::StatusOr<FusionRule> MakeFusionRule(absl::string_view name,
                                          absl::string_view pattern_text,
                                          PatternFormat format,
                                          absl::string_view fused_module_type,
                                          FuserKind fuser_kind);

}  // namespace fuselage

#endif  // FUSELAGE_PATTERNS_FUSION_RULE_H_
