#include "lowering/lower_to_native.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/check.h"
#include "graph/module_schema.h"
#include "graph/status_macros.h"
#include "lowering/dynamic_lowering.h"
#include "lowering/float16_lowering.h"
#include "quantize/qconfig.h"
#include "quantize/quantized_constants.h"

namespace fuselage {
namespace {

constexpr absl::string_view kOutputQParamsMeta = "output_qparams";

// The targets the pass recognizes, interned once: matching compares symbols (integers),
// not strings, on every node.
struct Targets {
  Symbol dequantize_method = Symbol::Intern("dequantize");
  Symbol dequantize_function = Symbol::Intern("torch.dequantize");
  Symbol quantize_per_tensor = Symbol::Intern("torch.quantize_per_tensor");
  Symbol quantize_per_channel = Symbol::Intern("torch.quantize_per_channel");
  Symbol relu_function = Symbol::Intern("torch.relu");
  Symbol functional_relu = Symbol::Intern("torch.nn.functional.relu");
  Symbol relu_method = Symbol::Intern("relu");
  Symbol relu_module = Symbol::Intern("nn.ReLU");
  // Clamps to constant bounds, which commute with a quantize (LowerUnderClamp).
  Symbol clamp_functions[4] = {Symbol::Intern("torch.nn.functional.hardtanh"),
                               Symbol::Intern("torch.nn.functional.hardtanh_"),
                               Symbol::Intern("torch.nn.functional.relu6"),
                               Symbol::Intern("torch.clamp")};
  Symbol clamp_modules[2] = {Symbol::Intern("nn.ReLU6"), Symbol::Intern("nn.Hardtanh")};
  Symbol add_operator = Symbol::Intern("operator.add");
  Symbol add_function = Symbol::Intern("torch.add");
  Symbol getitem = Symbol::Intern("operator.getitem");
  Symbol builtins_getattr = Symbol::Intern("builtins.getattr");
  Symbol builtins_tuple = Symbol::Intern("builtins.tuple");
  Symbol builtins_list = Symbol::Intern("builtins.list");
  Symbol tuple = Symbol::Intern("tuple");
  Symbol list = Symbol::Intern("list");
  Symbol output_qparams_meta = Symbol::Intern(kOutputQParamsMeta);
};

// The reason an op prepare marked with kQConfigNoneMeta stays a reference pattern.
constexpr char kSkippedForQConfig[] =
    "its qconfig is None: left float, as PyTorch's should_skip_lowering does";

const Targets& T() {
  static const Targets* const targets = new Targets();
  return *targets;
}

bool IsCall(const Node* n, OpKind op, Symbol target) {
  return n->op() == op && n->target() == target;
}

// `x.dequantize()` (or torch.dequantize(x)) of a node: returns x, else nullptr.
Node* DequantizedInput(const Argument& arg) {
  if (!arg.is_node()) return nullptr;
  const Node* n = arg.as_node();
  const bool is_dq = IsCall(n, OpKind::kCallMethod, T().dequantize_method) ||
                     IsCall(n, OpKind::kCallFunction, T().dequantize_function);
  if (!is_dq || n->num_args() != 1 || !n->arg(0).is_node()) return nullptr;
  return n->arg(0).as_node();
}

// `getattr(x.dequantize(), "shape")`: returns x, else nullptr. A quantized tensor has the
// dequantized one's shape, so the read moves to x and the dequantize is not computed for
// it (PyTorch 1.13's _lower_getattr_tensor_metadta_op).
Node* DequantizedTensorWhoseShapeIsRead(const Node* n) {
  if (!IsCall(n, OpKind::kCallFunction, T().builtins_getattr) || n->num_args() != 2 ||
      !n->arg(1).is_string() || n->arg(1).as_string() != "shape") {
    return nullptr;
  }
  return DequantizedInput(n->arg(0));
}

bool IsQuantizePerTensor(const Node* n) {
  return IsCall(n, OpKind::kCallFunction, T().quantize_per_tensor) && n->num_args() == 4 &&
         n->arg(0).is_node();
}

// `module`: the module `n` calls if it is a call_module node (nullptr if none resolves).
bool IsRelu(const Node* n, const Module* module) {
  if (n->num_args() < 1 || !n->arg(0).is_node()) return false;
  if (IsCall(n, OpKind::kCallFunction, T().relu_function) ||
      IsCall(n, OpKind::kCallFunction, T().functional_relu) ||
      IsCall(n, OpKind::kCallMethod, T().relu_method)) {
    return true;
  }
  if (n->op() != OpKind::kCallModule) return false;
  return module != nullptr && module->type() == T().relu_module;
}

// A clamp of its first arg to constant bounds (hardtanh, relu6, torch.clamp, or their
// modules; `module` as for IsRelu).
bool IsClamp(const Node* n, const Module* module) {
  if (n->num_args() < 1 || !n->arg(0).is_node()) return false;
  if (n->op() == OpKind::kCallFunction) {
    for (Symbol f : T().clamp_functions) {
      if (n->target() == f) return true;
    }
    return false;
  }
  if (n->op() != OpKind::kCallModule || module == nullptr) return false;
  for (Symbol m : T().clamp_modules) {
    if (module->type() == m) return true;
  }
  return false;
}

// `a + b` of two nodes (operator.add, or torch.add without alpha / out).
bool IsTensorAdd(const Node* n) {
  return n->op() == OpKind::kCallFunction &&
         (n->target() == T().add_operator || n->target() == T().add_function) &&
         n->num_args() == 2 && n->kwargs().empty() && n->arg(0).is_node() &&
         n->arg(1).is_node();
}

// A float from an inline arg or a get_attr of a one-element tensor.
absl::StatusOr<double> ScalarArg(const GraphModule& gm, const Node* q, const Argument& arg,
                                 absl::string_view field) {
  if (arg.is_float() || arg.is_int()) return arg.as_float();
  if (arg.is_node() && arg.as_node()->op() == OpKind::kGetAttr) {
    const Tensor* t = gm.FindTensor(arg.as_node()->target().name());
    if (t != nullptr && t->numel() == 1) {
      switch (t->dtype()) {
        case DType::kFloat32: return static_cast<double>(t->data<float>()[0]);
        case DType::kInt64: return static_cast<double>(t->data<int64_t>()[0]);
        case DType::kInt32: return static_cast<double>(t->data<int32_t>()[0]);
        default: break;
      }
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "node '", q->name(), "': ", field, " is ", arg.ToString(),
      "; expected a number or a get_attr of a one-element float32/int tensor"));
}

absl::StatusOr<OutputQParams> QuantizeParams(const GraphModule& gm, const Node* q) {
  OutputQParams p;
  ASSIGN_OR_RETURN(p.scale, ScalarArg(gm, q, q->arg(1), "scale"));
  ASSIGN_OR_RETURN(const double zp, ScalarArg(gm, q, q->arg(2), "zero_point"));
  p.zero_point = static_cast<int64_t>(zp);
  if (!q->arg(3).is_dtype() || !IsQuantized(q->arg(3).as_dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node '", q->name(), "': dtype is ", q->arg(3).ToString(),
        "; expected torch.quint8, torch.qint8 or torch.qint32"));
  }
  p.dtype = q->arg(3).as_dtype();
  if (!(p.scale > 0) || !std::isfinite(p.scale)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node '", q->name(), "': scale ", p.scale, " must be positive and finite"));
  }
  return p;
}

// Sets `key` in `kwargs`, appending it if absent (what Graph::SetKwarg does to a node).
void SetOrAppendKwarg(Kwargs& kwargs, absl::string_view key, Argument value) {
  const Symbol k = Symbol::Intern(key);
  auto it = std::find_if(kwargs.begin(), kwargs.end(),
                         [k](const Kwarg& kw) { return kw.first == k; });
  if (it != kwargs.end()) {
    it->second = std::move(value);
  } else {
    kwargs.emplace_back(k, std::move(value));
  }
}

// A new meta value (scale, zero_point, dtype). Items are moved in, not copied from an
// initializer list (three variant copies and a second buffer).
Argument QParamsMeta(const OutputQParams& p) {
  std::vector<Argument> items;
  items.reserve(3);
  items.push_back(Argument::Float(p.scale));
  items.push_back(Argument::Int(p.zero_point));
  items.push_back(Argument::Dtype(p.dtype));
  return Argument::Tuple(std::move(items));
}

// The meta "output_qparams" of `node` if it is a well-formed tuple holding exactly `p`
// (what KnownOutputQParams would read back), else nullptr. A pass-through op's output
// has its input's parameters: its meta shares the input's tuple (lists are immutable and
// shared) instead of building the same one again (two heap blocks).
const Argument* QParamsMetaHolding(const Node* node, const OutputQParams& p) {
  for (const Kwarg& kw : node->meta()) {
    if (kw.first != T().output_qparams_meta) continue;
    const Argument& meta = kw.second;
    if (!meta.is_tuple() || meta.items().size() != 3) return nullptr;
    const auto items = meta.items();
    const bool holds_p = items[0].is_float() && items[0].as_float() == p.scale &&
                         items[1].is_int() && items[1].as_int() == p.zero_point &&
                         items[2].is_dtype() && items[2].as_dtype() == p.dtype;
    return holds_p ? &meta : nullptr;
  }
  return nullptr;
}

// Sets meta "output_qparams" on `node`. A fused node shares its meta block with every
// node of its rule ({"pattern": ...}); Graph::SetMeta would copy that block and then grow
// the copy (two allocations and a reallocation): here the node's own block is built once,
// at its final size. A block of the node's own is changed in place by Graph::SetMeta.
// `value`: the meta value, QParamsMeta(p) or an existing tuple holding p.
absl::Status SetOutputQParamsMeta(Graph& graph, Node* node, Argument value) {
  if (!node->shared_meta().shared()) {
    return graph.SetMeta(node, T().output_qparams_meta, std::move(value));
  }
  const Kwargs& old = node->meta();
  Kwargs entries;
  entries.reserve(old.size() + 1);
  entries.assign(old.begin(), old.end());
  auto it = std::find_if(entries.begin(), entries.end(),
                         [](const Kwarg& kw) { return kw.first == T().output_qparams_meta; });
  if (it != entries.end()) {
    it->second = std::move(value);
  } else {
    entries.emplace_back(T().output_qparams_meta, std::move(value));
  }
  ASSIGN_OR_RETURN(NodeMeta meta, NodeMeta::Make(std::move(entries)));
  return graph.SetMeta(node, std::move(meta));
}

// A node dead-code elimination may erase: anything but placeholders, the output and opaque
// nodes, as in Graph::EliminateDeadCode.
bool IsPure(const Node* n) {
  return n->op() != OpKind::kPlaceholder && n->op() != OpKind::kOutput && !n->opaque();
}

// What a matched rule will do; built completely before the graph changes.
struct Plan {
  const LoweringRule* rule = nullptr;
  Node* quantize = nullptr;
  Node* reference = nullptr;
  Node* relu = nullptr;
  // An add after `reference` (before `relu`) the native op absorbs, and its other input,
  // the accumulator, read quantized; the native node takes the add's place.
  Node* add = nullptr;
  Node* accumulator = nullptr;
  // The module `reference` calls (call_module only); a native-module rule replaces its
  // contents with native_module's.
  Module* reference_module = nullptr;
  OutputQParams output;
  // The native op makes its own output parameters (own_output_qparams) from an input
  // whose parameters are unknown: `output` means nothing and the node gets no meta.
  bool output_unknown = false;
  // The meta value for `output` if an input holds it already (a pass-through op's); read
  // by Apply before the graph changes. nullptr: build it. (A pointer: an Argument here
  // made every move and destruction of a Plan an out-of-line call.)
  const Argument* output_meta = nullptr;
  // (arg index, quantized replacement); a rule has one or two dequantized args, kept
  // inline (no allocation per pattern).
  absl::InlinedVector<std::pair<size_t, Argument>, 2> quantized_args;
  std::unique_ptr<Module> native_module;
  // A pass-through op whose quantize had other parameters than its input: the quantize's
  // (the output keeps `output`, the input's), for the report.
  std::optional<OutputQParams> dropped_quantize;
  // kNativeComposition: per step, its output's parameters and (module steps) the native
  // module, built before the graph changes. Behind a pointer: most plans have none.
  struct CompositionStepPlan {
    OutputQParams qparams;
    std::unique_ptr<Module> module;  // nullptr for a function step
  };
  std::unique_ptr<std::vector<CompositionStepPlan>> composition;
};

// A set of the graph's nodes with a worklist order, kept by node index (Node::index())
// instead of hashing pointers: a flag per index, and the nodes in the order they were
// added. An index belongs to one live node at a time, and a node's entry is cleared
// (Erase) before it leaves the graph, so a set flag always means its node is alive.
class NodeWorklist {
 public:
  explicit NodeWorklist(size_t index_bound) : in_(index_bound, 0) {}

  // Adds `n`; false if it is in already.
  bool Insert(Node* n) {
    const uint32_t i = n->index();
    if (i >= in_.size()) in_.resize(i + 1, 0);  // a node made after construction
    if (in_[i] != 0) return false;
    in_[i] = 1;
    order_.push_back({n, i});
    return true;
  }
  // Removes `n`; false if it was not in.
  bool Erase(const Node* n) {
    const uint32_t i = n->index();
    if (i >= in_.size() || in_[i] == 0) return false;
    in_[i] = 0;
    return true;
  }
  // Removes and returns the node added last that is still in; nullptr when none is.
  Node* Pop() {
    while (!order_.empty()) {
      const Entry e = order_.back();
      order_.pop_back();
      if (in_[e.index] != 0) {  // else erased (or popped) since it was added
        in_[e.index] = 0;
        return e.node;
      }
    }
    return nullptr;
  }
  void Reserve(size_t n) { order_.reserve(n); }

 private:
  struct Entry {
    Node* node;
    uint32_t index;  // read without touching a node that may have been erased
  };
  std::vector<uint8_t> in_;
  std::vector<Entry> order_;
};

// The pass. Its steps (file comment of lower_to_native.h) walk the graph once: tuple
// accesses and patterns are lowered in one walk that collects the quantize nodes left,
// and RemoveDequantizeQuantizePairs visits only those, in the same topological order a
// full walk would (quantize nodes are never created by the pass, and each step erases
// only the quantize it is looking at, plus a relu, which is no quantize node).
class Lowerer {
 public:
  Lowerer(GraphModule& gm, const LoweringRuleRegistry& registry, LoweringReport& report)
      : gm_(gm),
        graph_(gm.graph()),
        registry_(registry),
        report_(report),
        maybe_dead_(graph_.node_index_bound()) {}

  // Step 0's dynamic F.linear (see the definition); returns how many.
  absl::StatusOr<int> LowerDynamicFunctionalLinears();
  // Steps 1 and 2 in one walk (see LowerTuplesAndPatterns in the .cc).
  absl::Status LowerTuplesAndPatterns();
  absl::Status RemoveDequantizeQuantizePairs();
  // Step 3b: a quantize of a constant float tensor (a get_attr weight) that only native
  // functions read becomes a get_attr of the tensor quantized now, as PyTorch's
  // fold_weight packs it once instead of quantizing it at every run.
  absl::Status FoldQuantizedConstants();
  // After dead-code elimination: removes the float tensors step 3b made unused (a folded
  // weight, its per-channel scales and zero points) that no get_attr reads any more, as
  // PyTorch's converted GraphModule keeps only the attributes its graph reads.
  void RemoveUnreadFoldedTensors();
  // Step 4: erases the dead nodes, starting from those the pass noted (see
  // maybe_dead_), and returns how many.
  int EliminateDeadNodes();
  // Adds the per-rule counts to the report.
  void FinishReport() {
    for (const auto& [rule, count] : lowered_per_rule_) {
      report_.lowered_per_rule[rule->name] += count;
    }
  }

 private:
  // The module a call_module node calls, or nullptr.
  Module* ModuleOf(const Node* n) const {
    return n->op() == OpKind::kCallModule ? gm_.FindModule(n->target().name()) : nullptr;
  }
  // What rules are keyed by: the module type of a call_module node (given its `module`,
  // possibly nullptr), else the target.
  static Symbol RuleKey(const Node* n, const Module* module) {
    if (n->op() == OpKind::kCallModule) return module == nullptr ? Symbol() : module->type();
    return n->target();
  }
  // Checks whether `rule` lowers (ref [, add] [, relu], q); the error message is the
  // reason not. `module` is ref's module for call_module (nullptr if it does not resolve).
  absl::StatusOr<Plan> TryRule(const LoweringRule& rule, Node* ref, Module* module,
                               Node* add, Node* relu, Node* q,
                               const OutputQParams& output) const;
  absl::Status Apply(Plan plan);
  // Apply for a kNativeComposition: one native node per step before the reference node,
  // the last one taking the quantize's users; the reference node and module go.
  absl::Status ApplyComposition(Plan plan);
  // TryRule's kNativeComposition part: each step's parameters and native module.
  absl::Status PlanComposition(const LoweringRule& rule, const Module& module,
                               Plan* plan) const;
  // A pass-through rule's output parameters: its first input's where known (the quantize
  // goes whatever its scale and zero point, as in PyTorch; a differing one is kept in
  // plan->dropped_quantize for the report). The error says why the rule does not apply:
  // a list op that does not requantize (torch.stack) given items with other parameters,
  // a quantize to another dtype, or a requantizing quantize after an op whose rule keeps
  // it (requantizing_quantize_dropped false).
  absl::Status PlanPassThroughOutput(const LoweringRule& rule,
                                     absl::Span<Node* const> quantized_inputs,
                                     Plan* plan) const;
  // Step 1 at one node: a tuple access of a packer replaced by the item; true if it was
  // (`n` is then erased).
  absl::StatusOr<bool> LowerTupleAt(Node* n);
  // Step 2 over the collected quantize nodes, compacting the list to those that stay.
  absl::Status LowerPatterns();
  // Whether a rule lowers tuple / list construction (then tuples go first).
  bool RegistryLowersPackers() const;
  // Lowers the pattern ending at the quantize `q`, if it is a reference pattern and a
  // rule applies; true if it did (`q` is then erased). An unlowered reference pattern is
  // added to the report.
  absl::StatusOr<bool> LowerPatternAt(Node* q);
  // LowerPatternAt for a clamp `clamp` between a reference op and its quantize `q`: the
  // op is lowered under a quantize of q's parameters put between it and the clamp (with
  // a dequantize after it), so that the clamp then runs on its quantized result. Exact:
  // quantize is monotone, so quantize(clamp(v)) is the clamp of quantize(v) to the
  // quantized bounds, which is what the quantized clamp computes. X86InductorQuantizer
  // observes a conv-hardtanh (mobilenet's relu6) after the clamp only, leaving
  // dq -> conv -> hardtanh -> q. Nothing changes if the op does not lower.
  absl::Status LowerUnderClamp(Node* q, Node* clamp);
  // The native target of a function rule (its add / relu variant), interned once per
  // rule and pass.
  Symbol NativeTarget(const LoweringRule& rule, bool add, bool relu);
  static bool HasDequantizedInput(const Node* n);
  // Whether prepare kept `n` float because its qconfig is None.
  static bool IsFloatByQConfig(const Node* n) {
    const Argument* none = n->FindMeta(kQConfigNoneMeta);
    return none != nullptr && none->is_bool() && none->as_bool();
  }
  // Whether `rule` must not lower `ref`, whose qconfig was None: a binary op or a weighted
  // functional, the rules PyTorch's should_skip_lowering guards (LowerToNative).
  bool SkippedForQConfig(const LoweringRule& rule, const Node* ref) const {
    return rule.action == LoweringRule::Action::kNativeFunction &&
           (rule.dequantized_args.size() >= 2 || rule.weight_arg >= 0 || rule.scalar_arg >= 0) &&
           IsFloatByQConfig(ref);
  }

  GraphModule& gm_;
  Graph& graph_;
  const LoweringRuleRegistry& registry_;
  LoweringReport& report_;
  // The quantize_per_tensor nodes still in the graph, in topological order.
  std::vector<Node*> quantize_nodes_;
  // The quantize_per_channel nodes (a per-channel functional weight's), for step 3b.
  std::vector<Node*> per_channel_quantize_nodes_;
  // The tensors the quantize nodes step 3b folded read (weight, scales, zero points).
  std::vector<std::string> folded_tensor_paths_;
  // The tensor quantize node `q` makes of the constant float tensor it reads, if its
  // parameters are constants too; nullopt otherwise.
  std::optional<Tensor> QuantizedConstant(const Node* q) const;
  absl::flat_hash_map<std::tuple<const LoweringRule*, bool, bool>, Symbol> native_targets_;
  // Patterns lowered per rule; by name into the report at the end (a pointer hash per
  // pattern instead of a string-keyed map lookup).
  absl::flat_hash_map<const LoweringRule*, int> lowered_per_rule_;
  // Every node that can be dead when the pass ends: the pure nodes the walk found
  // without users (the pass never gives a user to a node that has none) and every node
  // that lost a user to the pass (the inputs of an erased node, the old inputs of a
  // rewritten one). Graph::EliminateDeadCode would find the same dead set by walking the
  // whole graph again; at 10^5 nodes that walk was one eighth of the pass (cache misses).
  // By node index: a hash set of pointers cost 5 % of the pass in hashing and probing.
  NodeWorklist maybe_dead_;
  // Adds `n`'s inputs to maybe_dead_.
  void NoteInputsMayDie(const Node* n);
  // Graph::Erase, keeping maybe_dead_ free of erased nodes.
  absl::Status EraseNode(Node* n);
};

void Lowerer::NoteInputsMayDie(const Node* n) {
  auto note = [this](Node* input) { maybe_dead_.Insert(input); };
  for (const Argument& a : n->args()) a.ForEachNode(note);
  for (const Kwarg& kw : n->kwargs()) kw.second.ForEachNode(note);
}

absl::Status Lowerer::EraseNode(Node* n) {
  NoteInputsMayDie(n);
  // Out of the worklist before it leaves the graph: afterwards its slot is freed and its
  // index may belong to the next node created.
  maybe_dead_.Erase(n);
  return graph_.Erase(n);
}

int Lowerer::EliminateDeadNodes() {
  // A worklist version of Graph::EliminateDeadCode: a pure node without users goes, and
  // its inputs are looked at again. Same dead set (the pure nodes the output does not
  // depend on), in another order. The nodes found dead go in small batches through
  // Graph::EraseAll, which overlaps their random probes of the name index (one erase at
  // a time waited for each); a batch this small is still in cache when it is erased, and
  // EraseAll checks it by a scan, without a bitmap over all node indices. Every node of a
  // batch has no users at all, and an input of one has a user until the batch is erased,
  // so no batch holds a node and its input: the inputs are looked at after it.
  constexpr size_t kBatch = 16;
  int erased = 0;
  std::vector<Node*> batch;
  batch.reserve(kBatch);
  std::vector<Node*> inputs;  // of the batch's nodes; one buffer for all batches
  for (;;) {
    batch.clear();
    inputs.clear();
    auto collect = [&inputs](Node* input) { inputs.push_back(input); };
    while (batch.size() < kBatch) {
      Node* n = maybe_dead_.Pop();
      if (n == nullptr) break;
      if (!IsPure(n) || n->num_users() != 0) continue;
      batch.push_back(n);
      for (const Argument& a : n->args()) a.ForEachNode(collect);
      for (const Kwarg& kw : n->kwargs()) kw.second.ForEachNode(collect);
    }
    if (batch.empty()) break;
    // Popped, so no longer in maybe_dead_ when their indices are freed.
    FUSELAGE_CHECK(graph_.EraseAll(batch).ok());  // pure and without users
    erased += static_cast<int>(batch.size());
    for (Node* input : inputs) maybe_dead_.Insert(input);
  }
  return erased;
}

bool Lowerer::HasDequantizedInput(const Node* n) {
  for (const Argument& a : n->args()) {
    if (DequantizedInput(a) != nullptr) return true;
    if (a.is_list()) {
      for (const Argument& item : a.items()) {
        if (DequantizedInput(item) != nullptr) return true;
      }
    }
  }
  return false;
}

Symbol Lowerer::NativeTarget(const LoweringRule& rule, bool add, bool relu) {
  auto [it, inserted] = native_targets_.try_emplace({&rule, add, relu});
  if (inserted) {
    it->second = Symbol::Intern(add ? (relu ? rule.native_add_relu_target : rule.native_add_target)
                                    : (relu ? rule.native_relu_target : rule.native_target));
  }
  return it->second;
}

bool Lowerer::RegistryLowersPackers() const {
  for (const Symbol packer : {T().builtins_tuple, T().builtins_list, T().tuple, T().list}) {
    if (!registry_.RulesFor(OpKind::kCallFunction, packer).empty()) return true;
  }
  return false;
}

absl::Status Lowerer::LowerTuplesAndPatterns() {
  // Lowering each pattern as the walk reaches its quantize, while its nodes (just
  // visited) are still in cache, gives the same graph and report as lowering every tuple
  // access first: a pattern reads only nodes before its quantize, and a tuple access
  // further on changes only the users of its packer and its item. An item is used by
  // its packer and so never passes a rule's single-user check either way; a packer can
  // be a pattern's reference op only under a rule for tuple / list construction, so with
  // such a rule the tuples go first, in a walk of their own.
  const bool patterns_during_walk = !RegistryLowersPackers();
  // About one node in five is a quantize in a reference graph.
  quantize_nodes_.reserve(graph_.size() / 4);
  // Each lowered pattern notes its dequantize nodes and erased nodes' inputs (about one
  // node in three of a reference graph); sized once instead of regrown.
  maybe_dead_.Reserve(graph_.size() / 2);
  // Each step erases only the node it is looking at, or (a relu) one before it, so
  // walking on from the successor is safe.
  for (Node* n = graph_.first(); n != nullptr;) {
    Node* const next = n->next();
    bool erased = false;
    if (IsCall(n, OpKind::kCallFunction, T().quantize_per_channel)) {
      per_channel_quantize_nodes_.push_back(n);
    } else if (IsQuantizePerTensor(n)) {
      if (patterns_during_walk) {
        ASSIGN_OR_RETURN(erased, LowerPatternAt(n));
      }
      if (!erased) quantize_nodes_.push_back(n);
    } else if (Node* x = DequantizedTensorWhoseShapeIsRead(n); x != nullptr) {
      NoteInputsMayDie(n);  // the dequantize it stops reading
      RETURN_IF_ERROR(graph_.SetArg(n, 0, x));
      ++report_.shape_reads_of_dequantize_moved;
    } else {
      ASSIGN_OR_RETURN(erased, LowerTupleAt(n));
    }
    if (!erased && IsPure(n) && n->num_users() == 0) maybe_dead_.Insert(n);
    n = next;
  }
  if (!patterns_during_walk) RETURN_IF_ERROR(LowerPatterns());
  return absl::OkStatus();
}

absl::StatusOr<bool> Lowerer::LowerTupleAt(Node* n) {
  if (!IsCall(n, OpKind::kCallFunction, T().getitem) || n->num_args() != 2 ||
      !n->arg(0).is_node() || !n->arg(1).is_int()) {
    return false;
  }
  const Node* packer = n->arg(0).as_node();
  const Symbol kind = packer->target();
  const bool packs = packer->op() == OpKind::kCallFunction && packer->num_args() == 1 &&
                     packer->arg(0).is_list() &&
                     (kind == T().builtins_tuple || kind == T().builtins_list ||
                      kind == T().tuple || kind == T().list);
  if (!packs) return false;
  const auto items = packer->arg(0).items();
  int64_t index = n->arg(1).as_int();
  if (index < 0) index += static_cast<int64_t>(items.size());
  if (index < 0 || index >= static_cast<int64_t>(items.size()) ||
      !items[static_cast<size_t>(index)].is_node()) {
    return false;
  }
  Node* item = items[static_cast<size_t>(index)].as_node();
  // The item precedes its packer, which precedes `n` and so every user of `n`.
  ASSIGN_OR_RETURN(int rewired, graph_.ReplaceAllUsesWith(n, item));
  (void)rewired;
  RETURN_IF_ERROR(EraseNode(n));
  ++report_.tuple_accesses_removed;
  return true;
}

// A weight quantized per channel along an axis other than its output channels (a linear's
// ch_axis=1) cannot be packed for a native conv / linear kernel, which would read the
// scales as per output channel: silently wrong results.
absl::Status CheckWeightAxis(const LoweringRule& rule, const Plan& plan) {
  if (rule.weight_arg < 0) return absl::OkStatus();
  for (const auto& [index, arg] : plan.quantized_args) {
    if (static_cast<int>(index) != rule.weight_arg || !arg.is_node()) continue;
    const Node* q = arg.as_node();
    if (!IsCall(q, OpKind::kCallFunction, T().quantize_per_channel) || q->num_args() < 4 ||
        !q->arg(3).is_int() || q->arg(3).as_int() == 0) {
      continue;
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "rule '", rule.name, "': the weight '", q->name(),
        "' is quantized per channel along axis ", q->arg(3).as_int(),
        "; a native kernel needs its output channels, axis 0 (the weight observer's "
        "ch_axis)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Plan> Lowerer::TryRule(const LoweringRule& rule, Node* ref, Module* module,
                                      Node* add, Node* relu, Node* q,
                                      const OutputQParams& output) const {
  // Built only for the reason a rule does not apply.
  auto where = [&rule] { return absl::StrCat("rule '", rule.name, "'"); };
  Plan plan;
  plan.rule = &rule;
  plan.quantize = q;
  plan.reference = ref;
  plan.relu = relu;
  plan.add = add;
  plan.reference_module = module;
  plan.output = output;
  if (add != nullptr && (rule.action != LoweringRule::Action::kNativeFunction ||
                         rule.native_add_target.empty() ||
                         (relu != nullptr && rule.native_add_relu_target.empty()))) {
    return absl::FailedPreconditionError(absl::StrCat(
        where(), " does not absorb the add '", add->name(), "'",
        relu != nullptr ? absl::StrCat(" and relu '", relu->name(), "'") : ""));
  }
  if (add == nullptr && relu != nullptr && rule.native_relu_target.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(where(), " does not absorb the relu '", relu->name(), "'"));
  }
  // No value but the quantized output may be needed in float elsewhere.
  for (const Node* n : {ref, add, relu}) {
    if (n != nullptr && n->num_users() != 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          where(), ": '", n->name(),
          "' has other users besides the quantize; its float output is still needed"));
    }
  }
  if (add != nullptr) {
    const size_t other = add->arg(0).as_node() == ref ? 1 : 0;
    plan.accumulator = DequantizedInput(add->arg(other));
    if (plan.accumulator == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          where(), ": arg ", other, " of the add '", add->name(), "' (",
          add->arg(other).ToString(), ") is not a dequantized tensor"));
    }
    // A constant added to a conv is most often a bias that broadcasts ((1, C, H, W) to
    // any batch); the native kernel takes only a residual of the conv output's shape, and
    // the graph does not say that shape.
    if (plan.accumulator->op() == OpKind::kGetAttr) {
      return absl::FailedPreconditionError(absl::StrCat(
          where(), ": arg ", other, " of the add '", add->name(), "' is the constant '",
          plan.accumulator->target().name(), "', which may broadcast; the native add takes a "
          "residual of the conv output's shape"));
    }
  }
  if (ref->op() == OpKind::kCallModule) {
    if (module == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(where(), ": no module at '", ref->target().name(), "'"));
    }
    if (!rule.inner_type.empty()) {
      const Module* inner = module->FindChild("0");
      if (inner == nullptr || inner->type().name() != rule.inner_type) {
        return absl::FailedPreconditionError(absl::StrCat(
            where(), ": child '0' of ", module->type().name(), " is ",
            inner == nullptr ? std::string("missing") : inner->type().str(), "; expected ",
            rule.inner_type));
      }
    }
  }
  // quantized.add(qa, qb, scale, zero_point) takes no keyword args: torch.add(a, b,
  // alpha=2) stays a reference pattern (PyTorch 1.13 lowers it and drops alpha, a wrong
  // result; kept, the kwarg made a call PyTorch's quantized.add refuses).
  if (rule.action == LoweringRule::Action::kNativeFunction &&
      rule.output_qparams_style == LoweringRule::OutputQParamsStyle::kAppendArgs &&
      !ref->kwargs().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        where(), ": '", ref->name(), "' has keyword args (", ref->kwargs().front().first.name(),
        "), which ", rule.native_target, " does not take"));
  }
  if (rule.scalar_arg >= 0) {
    const size_t i = static_cast<size_t>(rule.scalar_arg);
    if (i >= ref->num_args() || !(ref->arg(i).is_int() || ref->arg(i).is_float())) {
      return absl::FailedPreconditionError(absl::StrCat(
          where(), ": arg ", rule.scalar_arg, " of '", ref->name(), "' is not a number"));
    }
    if (ref->num_args() != 2) {
      return absl::FailedPreconditionError(absl::StrCat(
          where(), ": '", ref->name(), "' has other args than a tensor and a number"));
    }
  }
  // The dequantized inputs, and their quantized replacements (one or two, but a list
  // rule, torch.cat, has any number).
  absl::InlinedVector<Node*, 2> quantized_inputs;
  for (int index : rule.dequantized_args) {
    const size_t i = static_cast<size_t>(index);
    if (i >= ref->num_args()) {
      return absl::FailedPreconditionError(absl::StrCat(
          where(), ": needs a dequantized arg ", index, " but '", ref->name(), "' has ",
          ref->num_args(), " args"));
    }
    const Argument& arg = ref->arg(i);
    if (rule.list_of_dequantized) {
      if (!arg.is_list() || arg.items().empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            where(), ": arg ", index, " of '", ref->name(), "' is not a list of tensors"));
      }
      std::vector<Argument> items;
      for (const Argument& item : arg.items()) {
        Node* x = DequantizedInput(item);
        if (x == nullptr) {
          return absl::FailedPreconditionError(absl::StrCat(
              where(), ": item ", item.ToString(), " of arg ", index, " of '", ref->name(),
              "' is not a dequantized tensor"));
        }
        items.emplace_back(x);
        quantized_inputs.push_back(x);
      }
      plan.quantized_args.emplace_back(
          i, arg.is_tuple() ? Argument::Tuple(std::move(items)) : Argument::List(std::move(items)));
    } else {
      Node* x = DequantizedInput(arg);
      if (x == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat(
            where(), ": arg ", index, " of '", ref->name(), "' (", arg.ToString(),
            ") is not a dequantized tensor"));
      }
      plan.quantized_args.emplace_back(i, Argument(x));
      quantized_inputs.push_back(x);
    }
  }
  switch (rule.action) {
    case LoweringRule::Action::kNativeModule: {
      if (rule.output_keeps_input_qparams) {
        // The module passes its input's parameters through; the quantize goes whatever
        // its own (PyTorch 1.13 drops it the same way).
        const std::optional<OutputQParams> in = KnownOutputQParams(gm_, quantized_inputs.front());
        if (!in.has_value()) {
          return absl::FailedPreconditionError(absl::StrCat(
              where(), ": the quantization parameters of its input '",
              quantized_inputs.front()->name(), "' are unknown"));
        }
        plan.output = *in;
        plan.output_meta = QParamsMetaHolding(quantized_inputs.front(), *in);
      }
      auto native = (relu != nullptr ? rule.build_relu_module : rule.build_module)(
          *module, plan.output);
      if (!native.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat(where(), ": ", native.status().message()));
      }
      plan.native_module = *std::move(native);
      break;
    }
    case LoweringRule::Action::kPassThrough:
      // The op's own fixed output parameters are the quantize's (prepare observed it with
      // the op's FixedQParamsObserver).
      if (rule.fixed_output_qparams.has_value()) {
        const OutputQParams& fixed = *rule.fixed_output_qparams;
        if (!(output == fixed)) {
          return absl::FailedPreconditionError(absl::StrCat(
              where(), ": the quantize '", q->name(), "' has scale ", output.scale,
              " zero_point ", output.zero_point, "; the op's own output has scale ",
              fixed.scale, " zero_point ", fixed.zero_point));
        }
        break;
      }
      RETURN_IF_ERROR(PlanPassThroughOutput(rule, quantized_inputs, &plan));
      break;
    case LoweringRule::Action::kNativeFunction:
      RETURN_IF_ERROR(CheckWeightAxis(rule, plan));
      if (rule.own_output_qparams) {
        // The op makes its own output parameters; the quantize goes whatever its own, as
        // PyTorch drops it (x + 3 observed with x's shared observer would clamp at x's
        // range otherwise).
        const std::optional<OutputQParams> in = KnownOutputQParams(gm_, quantized_inputs.front());
        if (!in.has_value()) {
          plan.output_unknown = true;
          break;
        }
        auto own = rule.own_output_qparams(
            *in, ref->arg(static_cast<size_t>(rule.scalar_arg)).as_float());
        if (!own.ok()) {
          return absl::FailedPreconditionError(
              absl::StrCat(where(), ": ", own.status().message()));
        }
        plan.output = *own;
      }
      break;
    case LoweringRule::Action::kNativeComposition: {
      const absl::Status status = PlanComposition(rule, *module, &plan);
      if (!status.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(where(), ": ", status.message()));
      }
      break;
    }
  }
  return plan;
}

absl::Status Lowerer::PlanComposition(const LoweringRule& rule, const Module& module,
                                      Plan* plan) const {
  auto steps = std::make_unique<std::vector<Plan::CompositionStepPlan>>();
  for (size_t s = 0; s < rule.composition.size(); ++s) {
    const NativeCompositionStep& step = rule.composition[s];
    Plan::CompositionStepPlan step_plan;
    step_plan.qparams = plan->output;
    if (s + 1 < rule.composition.size() && step.qparams_of_step >= 0) {
      // An intermediate value with its own parameters, which convert recorded from the
      // observer prepare gave the reference module's step.
      const int k = step.qparams_of_step;
      const Argument* scale = module.FindAttribute(ObservedStepScaleAttribute(k));
      const Argument* zero_point = module.FindAttribute(ObservedStepZeroPointAttribute(k));
      if (scale == nullptr || !scale->is_float() || zero_point == nullptr ||
          !zero_point->is_int()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "native step ", s, " (", step.native_target, ") takes the quantization "
            "parameters of step ", k, " of ", module.type().name(), ", but the module has "
            "no float attribute '", ObservedStepScaleAttribute(k), "' and int attribute '",
            ObservedStepZeroPointAttribute(k), "' (convert records them from the observer "
            "prepare gives that step; was the type declared with observed_step: ", k, "?)"));
      }
      step_plan.qparams.scale = scale->as_float();
      step_plan.qparams.zero_point = zero_point->as_int();
    } else if (s + 1 < rule.composition.size()) {
      // An intermediate value: quantized with the parameters of the arg `qparams_of_arg`.
      const Node* source = nullptr;
      for (const auto& [index, value] : plan->quantized_args) {
        if (static_cast<int>(index) == step.qparams_of_arg && value.is_node()) {
          source = value.as_node();
        }
      }
      const std::optional<OutputQParams> borrowed =
          source == nullptr ? std::nullopt : KnownOutputQParams(gm_, source);
      if (!borrowed.has_value()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "native step ", s, " (", step.native_target, ") takes the quantization "
            "parameters of arg ", step.qparams_of_arg, ", which are unknown"));
      }
      step_plan.qparams = *borrowed;
    }
    if (!step.is_function) {
      const Module* child = module.FindChild(std::to_string(step.from_child));
      if (child == nullptr ||
          (!step.child_type.empty() && child->type().name() != step.child_type)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "native step ", s, " (", step.native_target, ") is built from child '",
            step.from_child, "' of ", module.type().name(), ", which is ",
            child == nullptr ? std::string("missing") : child->type().str(), "; expected ",
            step.child_type.empty() ? std::string("a reference module") : step.child_type));
      }
      ASSIGN_OR_RETURN(step_plan.module,
                       BuildNativeWeightedModule(step.native_target, *child, step_plan.qparams));
    }
    steps->push_back(std::move(step_plan));
  }
  plan->composition = std::move(steps);
  return absl::OkStatus();
}

absl::Status Lowerer::ApplyComposition(Plan plan) {
  const LoweringRule& rule = *plan.rule;
  Node* ref = plan.reference;
  const std::string path(ref->target().name());
  // The first module step takes the reference module's place (its path and the object
  // in its parent); later ones get fresh sibling paths.
  bool path_taken = false;
  std::vector<Node*> values;
  values.reserve(rule.composition.size());
  for (size_t s = 0; s < rule.composition.size(); ++s) {
    const NativeCompositionStep& step = rule.composition[s];
    Plan::CompositionStepPlan& step_plan = (*plan.composition)[s];
    NodeArgs args;
    for (const NativeCompositionStep::Input& input : step.inputs) {
      if (input.from_step) {
        args.push_back(Argument(values[input.index]));
        continue;
      }
      for (const auto& [index, value] : plan.quantized_args) {
        if (static_cast<int>(index) == input.index) args.push_back(value);
      }
    }
    NodeSpec spec;
    if (step.is_function) {
      args.push_back(Argument::Float(step_plan.qparams.scale));
      args.push_back(Argument::Int(step_plan.qparams.zero_point));
      spec.op = OpKind::kCallFunction;
      spec.target = Symbol::Intern(step.native_target);
    } else {
      std::string step_path = path;
      if (!path_taken) {
        *plan.reference_module = std::move(*step_plan.module);
        path_taken = true;
      } else {
        step_path = gm_.UniqueModulePath(absl::StrCat(path, "_", s));
        RETURN_IF_ERROR(gm_.SetModule(step_path, std::move(step_plan.module)));
      }
      spec.op = OpKind::kCallModule;
      spec.target = Symbol::Intern(step_path);
    }
    spec.args = std::move(args);
    ASSIGN_OR_RETURN(Node* value, graph_.InsertBefore(ref, std::move(spec)));
    RETURN_IF_ERROR(SetOutputQParamsMeta(graph_, value, QParamsMeta(step_plan.qparams)));
    values.push_back(value);
  }
  ASSIGN_OR_RETURN(int rewired, graph_.ReplaceAllUsesWith(plan.quantize, values.back()));
  (void)rewired;
  RETURN_IF_ERROR(EraseNode(plan.quantize));
  RETURN_IF_ERROR(EraseNode(ref));
  if (!path_taken) RETURN_IF_ERROR(gm_.RemoveModule(path));
  ++lowered_per_rule_[&rule];
  return absl::OkStatus();
}

absl::Status Lowerer::PlanPassThroughOutput(const LoweringRule& rule,
                                            absl::Span<Node* const> quantized_inputs,
                                            Plan* plan) const {
  const std::optional<OutputQParams> first = KnownOutputQParams(gm_, quantized_inputs.front());
  // A list op whose kernel does not requantize (torch.stack) needs its items alike.
  if (!rule.list_items_requantized_to_first && first.has_value()) {
    for (size_t k = 1; k < quantized_inputs.size(); ++k) {
      const std::optional<OutputQParams> item = KnownOutputQParams(gm_, quantized_inputs[k]);
      if (item.has_value() && !(*item == *first)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "rule '", rule.name, "': its input '", quantized_inputs[k]->name(), "' has scale ",
            item->scale, " zero_point ", item->zero_point, " and its first input '",
            quantized_inputs.front()->name(), "' scale ", first->scale, " zero_point ",
            first->zero_point, "; the op does not requantize its inputs"));
      }
    }
  }
  // Unknown input parameters: the quantize's are taken to be the input's, as before.
  if (!first.has_value()) return absl::OkStatus();
  // Its users expect the quantize's dtype; the op cannot change its input's.
  if (first->dtype != plan->output.dtype) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rule '", rule.name, "': its quantize makes ", DTypeName(plan->output.dtype),
        " of its input '", quantized_inputs.front()->name(), "', which is ",
        DTypeName(first->dtype), "; the op keeps its input's dtype"));
  }
  // PyTorch 1.13's special_pattern_replacement drops the quantize whatever its
  // parameters: the quantized op passes its input's on (torch.cat: its first input's).
  if (!(*first == plan->output)) {
    if (!rule.requantizing_quantize_dropped) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rule '", rule.name, "': its quantize requantizes (input '",
          quantized_inputs.front()->name(), "' has scale ", first->scale, " zero_point ",
          first->zero_point, ", output has scale ", plan->output.scale, " zero_point ",
          plan->output.zero_point, ") and the rule keeps such a quantize (PyTorch 1.13 does "
          "not lower the op, or NativeLoweringOptions keeps requantizing quantizes)"));
    }
    plan->dropped_quantize = plan->output;
  }
  plan->output = *first;
  plan->output_meta = QParamsMetaHolding(quantized_inputs.front(), *first);
  return absl::OkStatus();
}

absl::Status Lowerer::Apply(Plan plan) {
  if (plan.rule->action == LoweringRule::Action::kNativeComposition) {
    return ApplyComposition(std::move(plan));
  }
  const LoweringRule& rule = *plan.rule;
  Node* ref = plan.reference;
  // Taken while the input whose meta it may share is untouched.
  Argument output_meta =
      plan.output_meta != nullptr ? *plan.output_meta : QParamsMeta(plan.output);
  if (rule.action == LoweringRule::Action::kNativeModule) {
    // What SetModule(ref's target, native) would leave, without walking the path again:
    // the module object stays where it is in its parent and takes the native module's
    // type, tensors, attributes and (no) children; the move invalidates cached module
    // types as SetModule does.
    *plan.reference_module = std::move(*plan.native_module);
  }
  // All new args in one SetArgs (each SetArgs re-derives the node's use-lists): the
  // quantized inputs and, for a function rule that takes them so, the output qparams.
  // Built as the node's own storage type and sized once: up to two args stay inline, and
  // more (a binary op's four) are one block, which the node takes over.
  const bool is_function = rule.action == LoweringRule::Action::kNativeFunction;
  const bool own_qparams = is_function && static_cast<bool>(rule.own_output_qparams);
  const bool append_qparams =
      is_function && !own_qparams &&
      rule.output_qparams_style == LoweringRule::OutputQParamsStyle::kAppendArgs;
  NodeArgs args;
  args.reserve(ref->num_args() + (append_qparams ? 2 : 0) + (plan.add != nullptr ? 1 : 0));
  args.assign(ref->args().begin(), ref->args().end());
  for (auto& [index, value] : plan.quantized_args) args[index] = std::move(value);
  if (plan.add != nullptr) args.insert(args.begin() + 1, Argument(plan.accumulator));
  if (append_qparams) {
    args.push_back(Argument::Float(plan.output.scale));
    args.push_back(Argument::Int(plan.output.zero_point));
  }
  // An absorbed add's node becomes the native op: the accumulator may be computed after
  // the reference op, never after the add.
  Node* native = plan.add != nullptr ? plan.add : ref;
  NoteInputsMayDie(ref);  // the dequantize nodes it stops reading
  if (plan.add != nullptr) NoteInputsMayDie(plan.add);
  RETURN_IF_ERROR(graph_.SetArgs(native, std::move(args)));
  if (is_function) {
    RETURN_IF_ERROR(graph_.SetOp(
        native, OpKind::kCallFunction,
        NativeTarget(rule, plan.add != nullptr, plan.relu != nullptr)));
    if (!append_qparams && !own_qparams) {
      Kwargs kwargs;
      for (const Kwarg& kw : ref->kwargs()) {
        const bool drop = std::find(rule.kwargs_to_drop.begin(), rule.kwargs_to_drop.end(),
                                    kw.first.name()) != rule.kwargs_to_drop.end();
        if (!drop) kwargs.push_back(kw);
      }
      SetOrAppendKwarg(kwargs, "output_scale", Argument::Float(plan.output.scale));
      SetOrAppendKwarg(kwargs, "output_zero_point", Argument::Int(plan.output.zero_point));
      RETURN_IF_ERROR(graph_.SetKwargs(native, std::move(kwargs)));
    }
  }
  // The native node precedes the quantize, hence all of the quantize's users.
  ASSIGN_OR_RETURN(int rewired, graph_.ReplaceAllUsesWith(plan.quantize, native));
  (void)rewired;
  RETURN_IF_ERROR(EraseNode(plan.quantize));
  if (plan.relu != nullptr) RETURN_IF_ERROR(EraseNode(plan.relu));
  if (plan.add != nullptr) RETURN_IF_ERROR(EraseNode(ref));  // the add no longer reads it
  if (!plan.output_unknown) {
    RETURN_IF_ERROR(SetOutputQParamsMeta(graph_, native, std::move(output_meta)));
  }
  if (plan.dropped_quantize.has_value()) {
    report_.quantizes_dropped_after_pass_through.push_back(
        {ref->name(), RuleKey(ref, plan.reference_module).str(), plan.output,
         *plan.dropped_quantize});
  }
  ++lowered_per_rule_[&rule];
  return absl::OkStatus();
}

absl::Status Lowerer::LowerPatterns() {
  // In topological order, so a pattern sees its inputs already lowered (and their
  // output_qparams). Only the current quantize and an earlier relu are erased, so the
  // list's later entries stay valid; the quantize nodes that stay are kept, in order, for
  // RemoveDequantizeQuantizePairs.
  size_t kept = 0;
  for (Node* q : quantize_nodes_) {
    ASSIGN_OR_RETURN(const bool erased, LowerPatternAt(q));
    if (!erased) quantize_nodes_[kept++] = q;
  }
  quantize_nodes_.resize(kept);
  return absl::OkStatus();
}

absl::Status Lowerer::LowerUnderClamp(Node* q, Node* clamp) {
  Node* op = clamp->arg(0).as_node();
  if (clamp->num_users() != 1 || op->num_users() != 1 || !HasDequantizedInput(op) ||
      IsRelu(op, ModuleOf(op)) || IsClamp(op, ModuleOf(op)) || q->arg(1).is_node() ||
      q->arg(2).is_node() || q->arg(3).is_node()) {
    return absl::OkStatus();
  }
  NodeSpec quantize{OpKind::kCallFunction, T().quantize_per_tensor,
                    NodeArgs({Argument(op), q->arg(1), q->arg(2), q->arg(3)})};
  ASSIGN_OR_RETURN(Node* under, graph_.InsertBefore(clamp, std::move(quantize)));
  NodeSpec dequantize{OpKind::kCallMethod, T().dequantize_method, NodeArgs({Argument(under)})};
  ASSIGN_OR_RETURN(Node* dequantized, graph_.InsertBefore(clamp, std::move(dequantize)));
  RETURN_IF_ERROR(graph_.SetArg(clamp, 0, dequantized));
  const size_t unlowered = report_.unlowered.size();
  ASSIGN_OR_RETURN(const bool lowered, LowerPatternAt(under));
  if (lowered) return absl::OkStatus();
  // The op stays as it was; its reason is the clamp's pattern's to give.
  report_.unlowered.resize(unlowered);
  RETURN_IF_ERROR(graph_.SetArg(clamp, 0, op));
  RETURN_IF_ERROR(EraseNode(dequantized));
  return EraseNode(under);
}

absl::StatusOr<bool> Lowerer::LowerPatternAt(Node* q) {
  Node* r = q->arg(0).as_node();
  // r's module, resolved once for the relu check, its rule key and its rules (a path
  // lookup in a module tree of up to 10^6 modules each time).
  Module* const r_module = ModuleOf(r);
  if (IsClamp(r, r_module) && !HasDequantizedInput(r)) {
    RETURN_IF_ERROR(LowerUnderClamp(q, r));
  }
  // Candidates: (an add and any relu after it absorbed into the op under the add, either
  // arg), (a relu absorbed into the op under it), then the op itself.
  struct Candidate {
    Node* reference;
    Node* add;
    Node* relu;
  };
  Candidate candidates[4];
  size_t num_candidates = 0;
  Node* const relu = IsRelu(r, r_module) ? r : nullptr;
  Node* const under_relu = relu != nullptr ? r->arg(0).as_node() : r;
  if (IsTensorAdd(under_relu) && under_relu->arg(0).as_node() != under_relu->arg(1).as_node()) {
    for (size_t i = 0; i < 2; ++i) {
      Node* producer = under_relu->arg(i).as_node();
      if (producer->op() == OpKind::kCallFunction && HasDequantizedInput(producer)) {
        candidates[num_candidates++] = {producer, under_relu, relu};
      }
    }
  }
  if (relu != nullptr) candidates[num_candidates++] = {under_relu, nullptr, relu};
  candidates[num_candidates++] = {r, nullptr, nullptr};
  bool is_reference_pattern = false;
  for (size_t c = 0; c < num_candidates; ++c) {
    is_reference_pattern = is_reference_pattern || HasDequantizedInput(candidates[c].reference);
  }
  if (!is_reference_pattern) return false;

  auto output = QuantizeParams(gm_, q);
  if (!output.ok()) {
    report_.unlowered.push_back(
        {r->name(), RuleKey(r, r_module).str(), std::string(output.status().message())});
    return false;
  }
  std::vector<std::string> reasons;
  std::optional<Plan> chosen;
  for (size_t c = 0; c < num_candidates && !chosen.has_value(); ++c) {
    Node* ref = candidates[c].reference;
    Node* add = candidates[c].add;
    Node* relu = candidates[c].relu;
    const bool absorbs = add != nullptr || relu != nullptr;
    if (absorbs && !HasDequantizedInput(ref)) continue;
    if (ref->op() != OpKind::kCallModule && ref->op() != OpKind::kCallFunction &&
        ref->op() != OpKind::kCallMethod) {
      continue;
    }
    if (add != nullptr && IsFloatByQConfig(add)) {
      reasons.push_back(absl::StrCat("the add '", add->name(), "' ", kSkippedForQConfig));
      continue;
    }
    Module* module = ref == r ? r_module : ModuleOf(ref);
    const Symbol key = RuleKey(ref, module);
    const absl::Span<const LoweringRule* const> rules = registry_.RulesFor(ref->op(), key);
    if (rules.empty() && !absorbs) {
      reasons.push_back(
          absl::StrCat("no lowering rule for ", OpKindName(ref->op()), " ", key.name()));
    }
    for (const LoweringRule* rule : rules) {
      if (add != nullptr && rule->native_add_target.empty()) continue;  // no reason worth giving
      if (SkippedForQConfig(*rule, ref)) {
        reasons.emplace_back(kSkippedForQConfig);
        continue;
      }
      auto plan = TryRule(*rule, ref, module, add, relu, q, *output);
      if (plan.ok()) {
        chosen = *std::move(plan);
        break;
      }
      reasons.emplace_back(plan.status().message());
    }
  }
  if (!chosen.has_value()) {
    report_.unlowered.push_back(
        {r->name(), RuleKey(r, r_module).str(), absl::StrJoin(reasons, "; ")});
    return false;
  }
  RETURN_IF_ERROR(Apply(*std::move(chosen)));
  return true;
}

std::optional<Tensor> Lowerer::QuantizedConstant(const Node* q) const {
  // Parameters the quantize refuses (a zero scale) leave it in the graph, where running
  // it fails naming the node.
  absl::StatusOr<std::optional<Tensor>> quantized = fuselage::QuantizedConstant(gm_, q);
  if (!quantized.ok()) return std::nullopt;
  return *std::move(quantized);
}

absl::Status Lowerer::FoldQuantizedConstants() {
  for (Node* q : per_channel_quantize_nodes_) quantize_nodes_.push_back(q);
  per_channel_quantize_nodes_.clear();
  for (Node*& q : quantize_nodes_) {
    if (q == nullptr || !q->arg(0).is_node()) continue;
    const Node* source = q->arg(0).as_node();
    if (source->op() != OpKind::kGetAttr || q->num_users() == 0) continue;
    bool only_native_functions = true;
    for (Node* user : q->users()) {
      // The dequantize the lowered op stopped reading is dead; dead-code elimination
      // erases it with the quantize's float input.
      const bool dead_dequantize = user->num_users() == 0 && DequantizedInput(Argument(user)) == q;
      only_native_functions = only_native_functions &&
                              (dead_dequantize || (user->op() == OpKind::kCallFunction &&
                                                   user->FindMeta(kOutputQParamsMeta) != nullptr));
    }
    if (!only_native_functions) continue;
    // nullopt (not a float32 constant, or parameters that are not): left as it is, the
    // quantize runs at run time.
    std::optional<Tensor> quantized = QuantizedConstant(q);
    if (!quantized.has_value()) continue;
    ASSIGN_OR_RETURN(Node * folded,
                     gm_.InsertConstantBefore(
                         q, absl::StrCat(source->target().name(), "_quantized"), *std::move(quantized)));
    ASSIGN_OR_RETURN(int rewired, graph_.ReplaceAllUsesWith(q, folded));
    (void)rewired;
    for (const Argument& a : q->args()) {
      if (a.is_node() && a.as_node()->op() == OpKind::kGetAttr) {
        folded_tensor_paths_.emplace_back(a.as_node()->target().name());
      }
    }
    RETURN_IF_ERROR(EraseNode(q));
    q = nullptr;
    ++report_.constants_quantized;
  }
  // What stays, per tensor, for step 3 (a per-channel quantize is never a pair's).
  quantize_nodes_.erase(std::remove_if(quantize_nodes_.begin(), quantize_nodes_.end(),
                                       [](const Node* q) {
                                         return q == nullptr || !IsQuantizePerTensor(q);
                                       }),
                        quantize_nodes_.end());
  return absl::OkStatus();
}

void Lowerer::RemoveUnreadFoldedTensors() {
  if (folded_tensor_paths_.empty()) return;
  absl::flat_hash_set<absl::string_view> read;
  for (const Node* n = graph_.first(); n != nullptr; n = n->next()) {
    if (n->op() == OpKind::kGetAttr) read.insert(n->target().name());
  }
  for (const std::string& path : folded_tensor_paths_) {
    if (read.contains(path)) continue;
    const size_t dot = path.rfind('.');
    Module* parent = dot == std::string::npos ? gm_.FindModule("")
                                              : gm_.FindModule(path.substr(0, dot));
    const std::string name = dot == std::string::npos ? path : path.substr(dot + 1);
    if (parent != nullptr && parent->RemoveTensor(name)) ++report_.folded_tensors_removed;
  }
}

// Dynamic quantization of F.linear (PyTorch's _lower_dynamic_weighted_ref_functional):
//
//   x ─► quantize_per_tensor_dynamic(·, quint8, reduce_range) ─► dequantize ─┐
//   w ─► quantize_per_tensor / per_channel(·, ..., qint8) ─► dequantize ─────┴► F.linear
//        [─► relu]
//      ⇒
//   x ─► torch.ops.quantized.linear_dynamic[_relu](·, w_quantized, bias, reduce_range)
//
// with w a constant float tensor quantized now (get_attr `<w>_quantized`; PyTorch packs
// it: fuselage._packed does for torch). int8 only: PyTorch's float16 functional form
// (linear_dynamic_fp16) stays in reference form here, as convert made it.
absl::StatusOr<int> Lowerer::LowerDynamicFunctionalLinears() {
  static const Symbol linear = Symbol::Intern("torch.nn.functional.linear");
  static const Symbol quantize_dynamic = Symbol::Intern("torch.quantize_per_tensor_dynamic");
  struct Match {
    Node* linear = nullptr;
    Node* relu = nullptr;
    Node* x = nullptr;
    Node* weight_quantize = nullptr;
    Tensor weight;
    bool reduce_range = false;
    // The dequantize and quantize nodes of x and w, users first.
    std::array<Node*, 4> pattern_nodes{};
  };
  std::vector<Match> matches;
  for (Node* n = graph_.first(); n != nullptr; n = n->next()) {
    if (!IsCall(n, OpKind::kCallFunction, linear) || n->num_args() < 2 || n->num_args() > 3 ||
        IsFloatByQConfig(n)) {
      continue;
    }
    Node* q = DequantizedInput(n->arg(0));
    Node* qw = DequantizedInput(n->arg(1));
    if (q == nullptr || qw == nullptr || !IsCall(q, OpKind::kCallFunction, quantize_dynamic) ||
        q->num_args() != 3 || !q->arg(1).is_dtype() || q->arg(1).as_dtype() != DType::kQUInt8 ||
        !q->arg(2).is_bool() || !q->arg(0).is_node()) {
      continue;
    }
    // The bias (arg 2 or keyword): absent, None or a node.
    bool bias_ok = true;
    for (const Kwarg& kw : n->kwargs()) bias_ok = bias_ok && kw.first.name() == "bias";
    if (!bias_ok) continue;
    // nullopt unless qw is a quantize (per tensor or channel) of a float32 constant by
    // constant parameters.
    std::optional<Tensor> quantized_weight = QuantizedConstant(qw);
    if (!quantized_weight.has_value() || quantized_weight->dtype() != DType::kQInt8) continue;
    Match m{n, nullptr, q->arg(0).as_node(), qw, *std::move(quantized_weight),
            q->arg(2).as_bool(), {n->arg(0).as_node(), q, n->arg(1).as_node(), qw}};
    if (n->num_users() == 1) {
      Node* user = n->users().front();
      bool only_inplace = true;  // F.relu(y, inplace=False) as torch.fx records it
      for (const Kwarg& kw : user->kwargs()) {
        only_inplace = only_inplace && kw.first.name() == "inplace";
      }
      if (IsRelu(user, ModuleOf(user)) && user->num_args() == 1 && user->arg(0).is_node() &&
          user->arg(0).as_node() == n && only_inplace) {
        m.relu = user;
      }
    }
    matches.push_back(std::move(m));
  }
  static const Symbol native = Symbol::Intern("torch.ops.quantized.linear_dynamic");
  static const Symbol native_relu = Symbol::Intern("torch.ops.quantized.linear_relu_dynamic");
  for (Match& m : matches) {
    const std::string float_weight(m.weight_quantize->arg(0).as_node()->target().name());
    ASSIGN_OR_RETURN(Node * weight,
                     gm_.InsertConstantBefore(m.linear, absl::StrCat(float_weight, "_quantized"),
                                              std::move(m.weight)));
    Argument bias = m.linear->num_args() > 2 ? m.linear->arg(2) : Argument::None();
    if (const Argument* b = m.linear->FindKwarg("bias"); b != nullptr) bias = *b;
    NoteInputsMayDie(m.linear);
    RETURN_IF_ERROR(graph_.SetKwargs(m.linear, {}));
    RETURN_IF_ERROR(graph_.SetOp(m.linear, OpKind::kCallFunction,
                                 m.relu != nullptr ? native_relu : native));
    RETURN_IF_ERROR(graph_.SetArgs(m.linear, NodeArgs{m.x, weight, std::move(bias),
                                                      Argument::Bool(m.reduce_range)}));
    if (m.relu != nullptr) {
      ASSIGN_OR_RETURN(int rewired, graph_.ReplaceAllUsesWith(m.relu, m.linear));
      (void)rewired;
      RETURN_IF_ERROR(EraseNode(m.relu));
    }
    // The pattern's dequantize and quantize nodes go now, before the walk collects the
    // weight's quantize for folding a second time.
    for (Node* dead : m.pattern_nodes) {
      if (dead->num_users() == 0) RETURN_IF_ERROR(EraseNode(dead));
    }
    folded_tensor_paths_.push_back(float_weight);
  }
  return static_cast<int>(matches.size());
}

absl::Status Lowerer::RemoveDequantizeQuantizePairs() {
  // Every quantize node the patterns left, in order; each iteration erases at most the
  // node it is looking at.
  for (Node* q : quantize_nodes_) {
    Node* x = DequantizedInput(q->arg(0));
    if (x == nullptr) continue;
    const std::optional<OutputQParams> in = KnownOutputQParams(gm_, x);
    auto out = QuantizeParams(gm_, q);
    if (!in.has_value() || !out.ok() || !(*in == *out)) continue;
    ASSIGN_OR_RETURN(int rewired, graph_.ReplaceAllUsesWith(q, x));
    (void)rewired;
    RETURN_IF_ERROR(EraseNode(q));
    ++report_.dequantize_quantize_pairs_removed;
  }
  quantize_nodes_.clear();
  return absl::OkStatus();
}

}  // namespace

std::optional<OutputQParams> KnownOutputQParams(const GraphModule& gm, const Node* node) {
  if (IsQuantizePerTensor(node)) {
    auto p = QuantizeParams(gm, node);
    if (p.ok()) return *p;
    return std::nullopt;
  }
  const Argument* meta = node->FindMeta(kOutputQParamsMeta);
  if (meta != nullptr && meta->is_tuple() && meta->items().size() == 3 &&
      meta->items()[0].is_float() && meta->items()[1].is_int() && meta->items()[2].is_dtype()) {
    return OutputQParams{meta->items()[0].as_float(), meta->items()[1].as_int(),
                         meta->items()[2].as_dtype()};
  }
  return std::nullopt;
}

int LoweringReport::total_lowered() const {
  int total = 0;
  for (const auto& [rule, count] : lowered_per_rule) total += count;
  return total;
}

std::string LoweringReport::ToString() const {
  std::string out = absl::StrCat("lower-to-native: ", total_lowered(), " pattern(s) lowered\n");
  for (const auto& [rule, count] : lowered_per_rule) {
    absl::StrAppend(&out, "  ", rule, ": ", count, "\n");
  }
  for (const Unlowered& u : unlowered) {
    absl::StrAppend(&out, "  left as reference: ", u.node, " (", u.target, "): ", u.reason, "\n");
  }
  for (const DroppedQuantize& d : quantizes_dropped_after_pass_through) {
    absl::StrAppend(&out, "  quantize dropped after pass-through op: ", d.node, " (", d.target,
                    "): its output keeps its input's scale ", d.kept.scale, " zero_point ",
                    d.kept.zero_point, ", not the quantize's scale ", d.dropped.scale,
                    " zero_point ", d.dropped.zero_point, " (as PyTorch 1.13)\n");
  }
  if (constants_quantized > 0) {
    absl::StrAppend(&out, "  constant weights quantized in advance: ", constants_quantized,
                    " (float tensors no longer read, removed: ", folded_tensors_removed, ")\n");
  }
  if (shape_reads_of_dequantize_moved > 0) {
    absl::StrAppend(&out, "  shape reads moved from a dequantize to its quantized tensor: ",
                    shape_reads_of_dequantize_moved, "\n");
  }
  if (float16_casts_kept > 0) {
    absl::StrAppend(&out, "  float16 casts kept (to(torch.float16) -> dequantize around float "
                    "ops, as PyTorch): ", float16_casts_kept, "\n");
  }
  absl::StrAppend(&out, "  tuple accesses removed: ", tuple_accesses_removed,
                  ", dequantize/quantize pairs removed: ", dequantize_quantize_pairs_removed,
                  ", dead nodes removed: ", dead_nodes_removed, "\n");
  return out;
}

absl::StatusOr<LoweringReport> LowerToNative(GraphModule& gm,
                                             const LoweringRuleRegistry& registry) {
  LoweringReport report;
  // Dynamic quantization's patterns end in a float op, not a quantize: lowered apart.
  ASSIGN_OR_RETURN(const int dynamic_linears, LowerDynamicLinear(gm));
  if (dynamic_linears > 0) report.lowered_per_rule[kDynamicLinearRuleName] += dynamic_linears;
  ASSIGN_OR_RETURN(const int embeddings, LowerWeightOnlyEmbeddings(gm));
  if (embeddings > 0) report.lowered_per_rule[kWeightOnlyEmbeddingRuleName] += embeddings;
  // Float16 casts end no quantize either.
  ASSIGN_OR_RETURN(const Float16Lowering float16, LowerFloat16PassThrough(gm, registry));
  if (float16.lowered > 0) report.lowered_per_rule[kFloat16PassThroughRuleName] += float16.lowered;
  report.float16_casts_kept = float16.casts_kept;
  Lowerer lowerer(gm, registry, report);
  ASSIGN_OR_RETURN(const int dynamic_functionals, lowerer.LowerDynamicFunctionalLinears());
  if (dynamic_functionals > 0) {
    report.lowered_per_rule[kDynamicFunctionalLinearRuleName] += dynamic_functionals;
  }
  RETURN_IF_ERROR(lowerer.LowerTuplesAndPatterns());
  RETURN_IF_ERROR(lowerer.FoldQuantizedConstants());
  RETURN_IF_ERROR(lowerer.RemoveDequantizeQuantizePairs());
  lowerer.FinishReport();
  report.dead_nodes_removed = lowerer.EliminateDeadNodes();
  lowerer.RemoveUnreadFoldedTensors();
  return report;
}

}  // namespace fuselage
