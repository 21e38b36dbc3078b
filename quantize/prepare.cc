#include "quantize/prepare.h"

#include <cmath>
#include <cstddef>
#include <deque>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/module_schema.h"
#include "graph/status_macros.h"
#include "patterns/pattern.h"
#include "quantize/observer_module.h"
#include "runtime/quantized_engine.h"

namespace fuselage {
namespace {

// Where a tensor input sits in a node's positional args: args[arg] itself, or item
// `item` of the list args[arg] (torch.cat's tensors).
struct TensorInput {
  size_t arg = 0;
  int item = -1;
  Node* producer = nullptr;
};
// Most ops have one or two tensor inputs: no heap block per node for the list.
using TensorInputs = absl::InlinedVector<TensorInput, 2>;

// One op Prepare quantizes, decided before anything is mutated. The specs and the dtype
// config are pointers into the QConfigMapping and the BackendConfig, which outlive the
// pass: a decision is ~120 bytes, not the ~500 of a copy of each (at 10^6 nodes the list
// of decisions was ~140 MB, copied at every growth of the vector).
struct Decision {
  Node* node = nullptr;
  // The node whose value the output observer watches: `node` itself, or the op that
  // follows it in a two-op pattern of the config ((ReLU, add): add's output is not
  // observed, the relu's is, as in PyTorch's prepare_fx).
  Node* output = nullptr;
  const ObserverSpec* activation = nullptr;
  bool share_output_with_input = false;
  // Weight-only quantization (nn.Embedding / nn.EmbeddingBag with a float activation and
  // a quantized weight, float_qparams_weight_only_qconfig): nothing is observed in the
  // graph; the weight is quantized at convert.
  bool weight_only = false;
  TensorInputs inputs;
  // The plan's parts (QuantizedOpPlan): the weighted module's float and reference types
  // and weight observer (empty / nullptr for ops without weights), and the dtype config
  // the qconfig satisfied.
  Symbol root_module;
  Symbol reference_module;
  const ObserverSpec* weight_observer = nullptr;
  const DTypeConfig* dtype_config = nullptr;
  // A functional weighted op (F.conv2d, F.linear): its weight arg, observed by the
  // qconfig's weight observer `functional_weight_observer` (producer null: none).
  TensorInput functional_weight;
  const ObserverSpec* functional_weight_observer = nullptr;
  // Its bias arg when activation and weight are float16 casts (float16_static_qconfig):
  // PyTorch's prepare_fx then gives the bias dtype float16 and observes it with the
  // activation observer (producer null: not observed).
  TensorInput functional_bias;
  // Inputs of the ops merged after `node` that come from outside the pattern (the
  // residual of a conv-add: (add, conv2d, MatchAllNode)), each with the op reading it,
  // observed like `inputs`.
  std::vector<std::pair<Node*, TensorInput>> merged_inputs;
  // How many tensor args `output`'s op reads, on which a two-op entry's observation type
  // may depend (PyTorch's binary ops: add(x, 1.0) shares x's observer, add(x, y) does
  // not): the decision's own inputs, or after a conv-add merge the add's two.
  size_t output_tensor_args = 0;
};

bool ProducesNonTensor(const Node* n, int depth = 0);

// Whether `n` computes only from values that are not tensors, as PyTorch 1.13's
// all_node_args_have_no_tensors: at least one node arg, every node arg (also inside a
// list) not a tensor, every other arg an int (`x.ndim - 1`, `[1] * (x.dim() - 2)`).
bool ComputesFromNonTensorsOnly(const Node* n, int depth) {
  bool any_node = false;
  auto non_tensor = [&](const Argument& a) {
    if (a.is_node()) {
      any_node = true;
      return ProducesNonTensor(a.as_node(), depth + 1);
    }
    return a.is_int();
  };
  for (size_t i = 0; i < n->num_args(); ++i) {
    const Argument& a = n->arg(i);
    if (a.is_list()) {
      for (const Argument& item : a.items()) {
        if (!non_tensor(item)) return false;
      }
    } else if (!non_tensor(a)) {
      return false;
    }
  }
  return any_node;
}

// Nodes whose value is not a tensor: observing them means nothing. An arithmetic on such
// values is followed a few steps back (kNonTensorDepth); past that it counts as a tensor.
bool ProducesNonTensor(const Node* n, int depth) {
  constexpr int kNonTensorDepth = 8;
  if (depth > kNonTensorDepth) return false;
  if (n->op() == OpKind::kCallMethod) {
    const absl::string_view m = n->target().name();
    if (m == "size" || m == "dim" || m == "numel" || m == "shape") return true;
    return ComputesFromNonTensorsOnly(n, depth);
  }
  if (n->op() == OpKind::kCallFunction) {
    const absl::string_view f = n->target().name();
    if (absl::StartsWith(f, "builtins.")) return true;
    if (f == "operator.getitem" && n->num_args() > 0 && n->arg(0).is_node()) {
      return ProducesNonTensor(n->arg(0).as_node(), depth + 1);
    }
    return ComputesFromNonTensorsOnly(n, depth);
  }
  return false;
}

// The args of a method that are never tensors (PyTorch 1.13's NON_OBSERVABLE_ARG_DICT):
// a shape method's dimensions (all args after the tensor), unsqueeze's dim, masked_fill's
// mask (a bool tensor) and value. Returns the first such arg index and whether only that
// one (else every arg from it on).
std::optional<std::pair<size_t, bool>> NonObservableArgs(const Node* n) {
  if (n->op() != OpKind::kCallMethod) return std::nullopt;
  const absl::string_view m = n->target().name();
  if (m == "permute" || m == "repeat" || m == "reshape" || m == "transpose" || m == "view" ||
      m == "masked_fill") {
    return std::make_pair(size_t{1}, false);
  }
  if (m == "unsqueeze" || m == "unsqueeze_" || m == "size") {
    return std::make_pair(size_t{1}, true);
  }
  return std::nullopt;
}

bool IsNonObservableArg(const std::optional<std::pair<size_t, bool>>& non_observable,
                        size_t i) {
  return non_observable &&
         (non_observable->second ? i == non_observable->first : i >= non_observable->first);
}

// A shape op whose value is its first arg's, reshaped: what feeds a non-observable arg
// through it is not observed either (PyTorch 1.13's dtype propagation through copy nodes:
// a bool mask unsqueezed before masked_fill).
bool IsShapeOfFirstArg(const Node* n) {
  if (n->op() != OpKind::kCallMethod || n->num_args() == 0 || !n->arg(0).is_node()) {
    return false;
  }
  const absl::string_view m = n->target().name();
  return m == "unsqueeze" || m == "unsqueeze_" || m == "squeeze" || m == "squeeze_" ||
         m == "view" || m == "reshape" || m == "permute" || m == "transpose" ||
         m == "repeat" || m == "flatten" || m == "contiguous" || m == "expand";
}

// The values that only feed non-observable args (NonObservableArgs), followed back through
// shape ops: masks and dimensions that are tensors or graph inputs.
absl::flat_hash_set<const Node*> NonFloatValues(const Graph& g) {
  absl::flat_hash_set<const Node*> out;
  auto mark = [&out](const Node* a) {
    for (int steps = 0; a != nullptr && steps < 16 && out.insert(a).second; ++steps) {
      a = IsShapeOfFirstArg(a) ? a->arg(0).as_node() : nullptr;
    }
  };
  for (const Node* n = g.first(); n != nullptr; n = n->next()) {
    const auto non_observable = NonObservableArgs(n);
    if (!non_observable) continue;
    for (size_t i = 0; i < n->num_args(); ++i) {
      if (!IsNonObservableArg(non_observable, i)) continue;
      const Argument& a = n->arg(i);
      if (a.is_node()) mark(a.as_node());
      if (a.is_list()) {
        for (const Argument& item : a.items()) {
          if (item.is_node()) mark(item.as_node());
        }
      }
    }
  }
  return out;
}

TensorInputs TensorInputsOf(Node* n, const absl::flat_hash_set<const Node*>& non_float) {
  TensorInputs inputs;
  const auto non_observable = NonObservableArgs(n);
  auto is_tensor = [&non_float](const Node* a) {
    return !ProducesNonTensor(a) && !non_float.contains(a);
  };
  for (size_t i = 0; i < n->num_args(); ++i) {
    if (IsNonObservableArg(non_observable, i)) continue;
    const Argument& a = n->arg(i);
    if (a.is_node()) {
      if (is_tensor(a.as_node())) inputs.push_back({i, -1, a.as_node()});
    } else if (a.is_list()) {
      for (size_t j = 0; j < a.items().size(); ++j) {
        const Argument& item = a.items()[j];
        if (item.is_node() && is_tensor(item.as_node())) {
          inputs.push_back({i, static_cast<int>(j), item.as_node()});
        }
      }
    }
  }
  return inputs;
}

// Why `c` does not accept tensors observed by `spec`, or nullopt if it does.
std::optional<std::string> Unsatisfied(const DTypeWithConstraints& c, const ObserverSpec& spec,
                                       absl::string_view what) {
  if (!c.dtype.has_value()) return absl::StrCat(what, " dtype is unset");
  if (*c.dtype != spec.dtype) {
    return absl::StrCat(what, " dtype ", DTypeName(*c.dtype), " is not the observer's ",
                        DTypeName(spec.dtype));
  }
  auto range = spec.QuantRange();
  if (!range.ok()) return absl::StrCat(what, ": ", range.status().message());
  if (c.quant_min_lower_bound && range->first < *c.quant_min_lower_bound) {
    return absl::StrCat(what, " needs quant_min >= ", *c.quant_min_lower_bound,
                        "; the observer's is ", range->first);
  }
  if (c.quant_max_upper_bound && range->second > *c.quant_max_upper_bound) {
    return absl::StrCat(what, " needs quant_max <= ", *c.quant_max_upper_bound,
                        "; the observer's is ", range->second);
  }
  // The observer's eps is the smallest scale it can produce.
  if (c.scale_min_lower_bound && spec.eps < *c.scale_min_lower_bound) {
    return absl::StrCat(what, " needs scale >= ", *c.scale_min_lower_bound,
                        "; the observer's eps is ", spec.eps);
  }
  // PyTorch 2's fixed-qparams ops (sigmoid, tanh, ...): satisfied by a FixedQParamsObserver
  // of exactly those parameters, as PyTorch's _qconfig_satisfies_dtype_config_constraints.
  if (c.scale_exact_match || c.zero_point_exact_match) {
    const bool fixed = spec.kind == ObserverKind::kFixedQParams;
    if (!fixed || (c.scale_exact_match && spec.fixed_scale != *c.scale_exact_match) ||
        (c.zero_point_exact_match && spec.fixed_zero_point != *c.zero_point_exact_match)) {
      return absl::StrCat(what, " requires fixed quantization parameters (scale ",
                          c.scale_exact_match ? absl::StrCat(*c.scale_exact_match) : "any",
                          ", zero point ",
                          c.zero_point_exact_match ? absl::StrCat(*c.zero_point_exact_match)
                                                   : "any",
                          "): a FixedQParamsObserver of those");
    }
  }
  return std::nullopt;
}

// The first dtype config `qconfig` satisfies (an element of `configs`), or the reasons
// none does.
absl::StatusOr<const DTypeConfig*> SelectDTypeConfig(const std::vector<DTypeConfig>& configs,
                                              const ObserverSpec& activation,
                                              const ObserverSpec* weight) {
  std::vector<std::string> reasons;
  for (size_t i = 0; i < configs.size(); ++i) {
    const DTypeConfig& c = configs[i];
    std::optional<std::string> why;
    if (c.is_dynamic != activation.is_dynamic) {
      why = c.is_dynamic ? "the dtype config is dynamic; the activation observer is not"
                         : "the activation observer is dynamic; the dtype config is not";
    } else if (c.is_dynamic) {
      // Dynamic: the input is quantized at run time to the activation observer's dtype;
      // the output stays float (the config's output dtype).
      why = Unsatisfied(c.input, activation, "input");
      if (!why && weight != nullptr && c.weight.dtype.has_value()) {
        why = Unsatisfied(c.weight, *weight, "weight");
      }
    } else {
      why = Unsatisfied(c.input, activation, "input");
      if (!why) why = Unsatisfied(c.output, activation, "output");
      // A dtype config without a weight dtype (the default ops': F.group_norm,
      // F.instance_norm) does not constrain the weight, as in PyTorch.
      if (!why && weight != nullptr && c.weight.dtype.has_value()) {
        why = Unsatisfied(c.weight, *weight, "weight");
      }
    }
    if (!why) return &c;
    reasons.push_back(absl::StrCat("[", i, "] ", *why));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "its qconfig satisfies none of the ", configs.size(), " dtype configs: ",
      absl::StrJoin(reasons, "; ")));
}

// The module type / function / method a node calls, as QConfigMapping and
// BackendConfig name it; empty for nodes that call nothing. A module's type comes from
// the GraphModule's per-node cache (Planner::Run fills it once), not from resolving the
// dotted path in the module tree per call.
Symbol ObjectType(const GraphModule& gm, const Node* n) {
  switch (n->op()) {
    case OpKind::kCallModule:
      return gm.ModuleTypeOf(n);
    case OpKind::kCallFunction:
    case OpKind::kCallMethod:
      return n->target();
    default:
      return Symbol();
  }
}

class Planner {
 public:
  Planner(const GraphModule& gm, const QConfigMapping& mapping, const BackendConfig& config)
      : gm_(gm), mapping_(mapping), config_(config) {}

  // Decides every node, in order; errors name the node.
  absl::Status Run(std::vector<Decision>* decisions, PrepareReport* report) {
    // One path lookup per call_module node, here; ObjectType then reads the cache (the
    // planner does not edit the module tree, so it stays current for the whole walk).
    gm_.ResolveModuleTypes();
    // Per-node state in vectors indexed by Node::index(): the planner creates no node, so
    // the bound read here covers every node it meets.
    observed_.assign(gm_.graph().node_index_bound(), false);
    decision_of_.assign(gm_.graph().node_index_bound(), kNoDecision);
    // Every call is resolved, in graph order, whether or not the config quantizes it:
    // module_name_object_type_order entries index the calls of a type.
    QConfigResolver resolver(mapping_, gm_.root().type());
    const absl::flat_hash_set<const Node*> non_float = NonFloatValues(gm_.graph());
    for (Node* n = gm_.graph().first(); n != nullptr; n = n->next()) {
      const Symbol type = ObjectType(gm_, n);
      if (type.empty()) continue;
      RETURN_IF_ERROR(RefuseNonFloatModel(n, type));
      ASSIGN_OR_RETURN(const OptionalQConfig* resolved, Resolve(resolver, n, type));
      const OptionalQConfig& qconfig = *resolved;
      // The tensor inputs, found once for both the merge check and the decision.
      TensorInputs inputs = TensorInputsOf(n, non_float);
      if (MergeIntoPrecedingOp(n, type, inputs, decisions)) {
        observed_[n->index()] = true;
        continue;
      }
      if (MergeBinaryIntoPrecedingOp(n, type, inputs, decisions)) continue;
      const BackendPatternConfig* entry = EntryFor(OpRef{n->op(), type});
      if (ProducesNonTensor(n) || non_float.contains(n)) continue;
      if (entry == nullptr) {
        // PyTorch leaves it float too, silently; the report names it.
        report->kept_float.push_back(
            {n->name(), std::string(type.name()),
             absl::StrCat("the backend config '", config_.name(), "' has no entry for it")});
        continue;
      }
      PrepareReport::KeptFloat kept{n->name(), std::string(type.name())};
      ASSIGN_OR_RETURN(std::optional<Decision> decision,
                       Decide(n, qconfig, *entry, std::move(inputs), &kept));
      if (decision.has_value()) {
        // A dynamic or weight-only op's output stays float.
        observed_[n->index()] = !decision->weight_only && !decision->activation->is_dynamic;
        for (const TensorInput& in : decision->inputs) observed_[in.producer->index()] = true;
        decision_of_[n->index()] = decisions->size();
        decisions->push_back(std::move(*decision));
      } else {
        report->kept_float.push_back(std::move(kept));
      }
    }
    return absl::OkStatus();
  }

 private:
  // Prepare takes a float model. On a prepared one it would observe the observers; on a
  // quantized one it would observe quantize / dequantize and quantized modules as float
  // ops: no error, and a model that is silently wrong once converted.
  absl::Status RefuseNonFloatModel(const Node* n, Symbol type) const {
    absl::string_view what;
    if (IsObserverModuleType(type)) {
      what = "is already prepared (calibrate or convert it instead)";
    } else if (type == quantize_per_tensor_ || type == quantize_per_channel_ ||
               IsQuantizedModuleType(type.name())) {
      what = "is already quantized";
    } else {
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "prepare: node '", n->name(), "' calls ", type.name(), ": the model ", what,
        "; prepare takes a float model"));
  }

  const Symbol quantize_per_tensor_ = Symbol::Intern("torch.quantize_per_tensor");
  const Symbol quantize_per_channel_ = Symbol::Intern("torch.quantize_per_channel");

  // The two-op entry (outer, inner) of the config, e.g. (ReLU, add), that `n` (outer) and
  // its only input `producer` (inner) match, or nullptr. A fusing entry counts too: its
  // pair is still unfused here when fusion took the inner op into another pattern first
  // (Linear -> BatchNorm1d -> ReLU: the batch norm folds into the linear, the relu stays),
  // and PyTorch's prepare_fx matches the fusion patterns of the config like any other.
  const BackendPatternConfig* TwoOpEntryFor(const Node* n, Symbol type, const Node* producer) {
    const OpRef outer{n->op(), type};
    const OpRef inner{producer->op(), ObjectType(gm_, producer)};
    // Cached per (outer, inner) op pair: the scan over the config's entries then runs once
    // per distinct pair, not once per node.
    const auto key = std::make_tuple(outer.op, outer.target, inner.op, inner.target);
    auto cached = two_op_entry_cache_.find(key);
    if (cached != two_op_entry_cache_.end()) return cached->second;
    const BackendPatternConfig* found = nullptr;
    for (const BackendPatternConfig& entry : config_.configs()) {
      const Pattern& pattern = entry.pattern();
      if (pattern.size() != 2 || pattern.position(1).match_all) continue;
      if (pattern.position(0).Matches(outer) && pattern.position(1).Matches(inner)) {
        found = &entry;
        break;
      }
    }
    two_op_entry_cache_.emplace(key, found);
    return found;
  }

  // If `n` (a relu after add, ...) completes a two-op pattern with its only input, which
  // was decided quantized and has no other user, extends that decision so the pattern's
  // output is observed after `n` (and not between the two) and returns true. PyTorch 1.13
  // matches these patterns before single ops, so the pair is quantized as one op (and
  // lowered to one native op, quantized::add_relu).
  bool MergeIntoPrecedingOp(Node* n, Symbol type, const TensorInputs& inputs,
                            std::vector<Decision>* decisions) {
    if (inputs.size() != 1) return false;
    Node* producer = inputs.front().producer;
    const size_t decided = decision_of_[producer->index()];
    if (decided == kNoDecision) return false;
    Decision& previous = (*decisions)[decided];
    if (previous.output != producer ||
        producer->users().size() != 1) {
      return false;
    }
    const BackendPatternConfig* entry = TwoOpEntryFor(n, type, producer);
    if (entry == nullptr || !entry->input_output_observed ||
        entry->fixed_output_qparams.has_value() || !entry->root_module.empty() ||
        previous.activation->is_dynamic) {
      return false;
    }
    ObservationType observation = entry->observation_type;
    bool found = entry->num_tensor_args_to_observation_type.empty();
    for (const auto& [count, type_for_count] : entry->num_tensor_args_to_observation_type) {
      if (count == static_cast<int>(previous.output_tensor_args)) {
        observation = type_for_count;
        found = true;
      }
    }
    if (!found || observation == ObservationType::kInputOutputNotObserved ||
        previous.activation->kind == ObserverKind::kReuseInput) {
      return false;
    }
    // Cached like a single op's: per node, a config the activation does not satisfy
    // would word its reasons again only to drop them.
    const absl::StatusOr<const DTypeConfig*>& dtype_config =
        CachedDTypeConfig(*entry, *previous.activation, nullptr);
    if (!dtype_config.ok()) return false;
    previous.output = n;
    previous.output_tensor_args = inputs.size();
    previous.share_output_with_input =
        observation == ObservationType::kOutputShareObserverWithInput;
    previous.dtype_config = *dtype_config;
    return true;
  }

  // The non-fusing three-position entry (outer, inner, MatchAllNode) of the config, in
  // either order, in which `n` (outer) reads `producer` (inner) at arg `arg` and any
  // value at its other arg, e.g. (add, conv2d, MatchAllNode); or nullptr.
  const BackendPatternConfig* BinaryEntryFor(const Node* n, Symbol type, const Node* producer,
                                             int arg) {
    const OpRef outer{n->op(), type};
    const OpRef inner{producer->op(), ObjectType(gm_, producer)};
    const auto key = std::make_tuple(outer.op, outer.target, inner.op, inner.target, arg);
    auto cached = binary_entry_cache_.find(key);
    if (cached != binary_entry_cache_.end()) return cached->second;
    const BackendPatternConfig* found = nullptr;
    for (const BackendPatternConfig& entry : config_.configs()) {
      const Pattern& pattern = entry.pattern();
      if (entry.fuses || pattern.size() != 3 || !pattern.position(0).Matches(outer)) continue;
      bool inner_matches = false;
      bool other_is_any = false;
      for (int i = 1; i < 3; ++i) {
        const PatternPosition& position = pattern.position(i);
        if (position.parent != 0) break;
        if (position.arg_index == arg) {
          inner_matches = !position.match_all && position.Matches(inner);
        } else {
          other_is_any = position.match_all;
        }
      }
      if (inner_matches && other_is_any) {
        found = &entry;
        break;
      }
    }
    binary_entry_cache_.emplace(key, found);
    return found;
  }

  // If `n` (an add) reads, at one of its two args, the output of a decided op that has
  // no other user, and the config has (n, that op, MatchAllNode) non-fusing, extends that
  // decision as PyTorch's prepare_fx treats the whole match: the op's output is not
  // observed, `n`'s other input and `n`'s output are. X86InductorQuantizer's conv-add
  // is observed so. The relu after it then merges as after any add.
  bool MergeBinaryIntoPrecedingOp(Node* n, Symbol type, const TensorInputs& inputs,
                                  std::vector<Decision>* decisions) {
    if (inputs.size() != 2 || inputs[0].item >= 0 || inputs[1].item >= 0 ||
        inputs[0].producer == inputs[1].producer) {
      return false;
    }
    for (int i = 0; i < 2; ++i) {
      Node* producer = inputs[i].producer;
      const size_t decided = decision_of_[producer->index()];
      if (decided == kNoDecision) continue;
      Decision& previous = (*decisions)[decided];
      if (previous.output != producer || producer->users().size() != 1 ||
          previous.share_output_with_input || previous.activation->is_dynamic ||
          previous.activation->kind == ObserverKind::kReuseInput) {
        continue;
      }
      const BackendPatternConfig* entry =
          BinaryEntryFor(n, type, producer, static_cast<int>(inputs[i].arg));
      if (entry == nullptr || !entry->input_output_observed ||
          entry->fixed_output_qparams.has_value() || !entry->root_module.empty() ||
          entry->observation_type != ObservationType::kOutputUseDifferentObserverAsInput) {
        continue;
      }
      const ObserverSpec* weight = previous.functional_weight_observer != nullptr
                                       ? previous.functional_weight_observer
                                       : previous.weight_observer;
      const absl::StatusOr<const DTypeConfig*>& dtype_config =
          CachedDTypeConfig(*entry, *previous.activation, weight);
      if (!dtype_config.ok()) continue;
      const TensorInput& other = inputs[1 - i];
      previous.output = n;
      previous.output_tensor_args = inputs.size();
      previous.dtype_config = *dtype_config;
      previous.merged_inputs.emplace_back(n, other);
      observed_[n->index()] = true;
      observed_[other.producer->index()] = true;
      decision_of_[n->index()] = decided;
      return true;
    }
    return false;
  }

  const BackendPatternConfig* EntryFor(OpRef op) {
    auto it = entry_cache_.find(std::make_pair(op.op, op.target));
    if (it != entry_cache_.end()) return it->second;
    std::vector<const BackendPatternConfig*> found = config_.FindForOp(op);
    const BackendPatternConfig* entry = found.empty() ? nullptr : found.front();
    entry_cache_.emplace(std::make_pair(op.op, op.target), entry);
    return entry;
  }

  // The qconfig of `n` (a call of `type`). A function or method call resolves in the
  // module its meta `module_path` names (graph/NAMING.md), else in the root.
  absl::StatusOr<const OptionalQConfig*> Resolve(QConfigResolver& resolver, const Node* n,
                                                 Symbol type) {
    if (n->op() == OpKind::kCallModule) {
      // A fused module (nni.*) shares its parts' object-type qconfig, as in PyTorch.
      parts_.clear();
      if (absl::StartsWith(type.name(), "nni.")) {
        for (const auto& [name, child] : gm_.ModuleOf(n)->children()) parts_.push_back(child->type());
      }
      absl::StatusOr<const OptionalQConfig*> q =
          resolver.ForModuleCall(type, n->target().name(), parts_);
      if (!q.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "prepare: node '", n->name(), "' (", type.name(), "): ", q.status().message()));
      }
      return q;
    }
    absl::string_view scope;
    Symbol scope_type = resolver.root_type();
    if (const Argument* path = n->FindMeta("module_path");
        path != nullptr && path->is_string() && !path->as_string().empty()) {
      // A path that names no module is ignored: the meta is advisory, not a reference.
      if (const Module* m = gm_.FindModule(path->as_string()); m != nullptr) {
        scope = path->as_string();
        scope_type = m->type();
      }
    }
    return n->op() == OpKind::kCallFunction ? &resolver.ForFunctionCall(type, scope, scope_type)
                                            : &resolver.ForMethodCall(type, scope, scope_type);
  }

  // A decision, or nullopt with kept's reason and cause set when the op stays float.
  // `inputs` are the node's tensor inputs (TensorInputsOf).
  absl::StatusOr<std::optional<Decision>> Decide(Node* n, const OptionalQConfig& qconfig,
                                                 const BackendPatternConfig& entry,
                                                 TensorInputs inputs,
                                                 PrepareReport::KeptFloat* kept) {
    using Cause = PrepareReport::KeptFloat::Cause;
    auto keep_float = [&](std::string why,
                          Cause cause = Cause::kNotQuantizable) -> std::optional<Decision> {
      kept->reason = std::move(why);
      kept->cause = cause;
      return std::nullopt;
    };
    if (!qconfig.has_value()) return keep_float(kQConfigNoneReason, Cause::kQConfigNone);
    // Weight-only: the activation stays float (a float placeholder, or the entry says its
    // input and output are not observed, PyTorch 1.13's _input_output_observed) and the
    // weight is quantized; only embeddings lower so.
    const bool float_activation = qconfig->activation.kind == ObserverKind::kPlaceholder &&
                                  !IsQuantized(qconfig->activation.dtype) &&
                                  !qconfig->activation.is_dynamic &&
                                  !qconfig->activation.IsFloat16Cast();
    if (!entry.input_output_observed || (float_activation && !entry.root_module.empty())) {
      return DecideWeightOnly(n, *qconfig, entry, keep_float);
    }
    if (entry.fixed_output_qparams.has_value()) {
      // PyTorch's prepare_fx refuses (ValueError) a qconfig whose activation is not the
      // op's FixedQParamsObserver, except a float16 one; the op's output observer is that
      // observer.
      const FixedQParams& fixed = *entry.fixed_output_qparams;
      const ObserverSpec& a = qconfig->activation;
      if (IsQuantized(a.dtype) &&
          (a.kind != ObserverKind::kFixedQParams || a.fixed_scale != fixed.scale ||
           a.fixed_zero_point != fixed.zero_point)) {
        return keep_float(absl::StrCat(
            "a fixed-qparams op needs the activation observer FixedQParamsObserver(scale=",
            fixed.scale, ", zero_point=", fixed.zero_point, "); its qconfig's is ",
            a.ToString(), " (PyTorch's prepare_fx refuses this qconfig)"),
            Cause::kQConfigRefusedByPyTorch);
      }
    }
    const ObserverSpec& activation = qconfig->activation;
    if (activation.is_dynamic && activation.dtype != DType::kQUInt8 &&
        activation.dtype != DType::kFloat16) {
      return keep_float(absl::StrCat("dynamic quantization to ", DTypeName(activation.dtype),
                                     " is not supported (quint8 or float16 only)"));
    }
    if (activation.is_dynamic && entry.root_module.empty() && !entry.weight_arg_index) {
      return keep_float("dynamic quantization of an op without weights is not supported "
                        "(weighted modules and F.linear only)");
    }
    // A float16 cast (float16_static_qconfig) is observed where an int8 observer would be;
    // convert makes it to(torch.float16) → dequantize.
    const bool observes = activation.is_dynamic || activation.IsFloat16Cast();
    switch (observes ? ObserverKind::kMinMax : activation.kind) {
      case ObserverKind::kPlaceholder:
      case ObserverKind::kNoop:
        return keep_float(absl::StrCat("its activation observer ",
                                       ObserverKindName(activation.kind),
                                       " does not quantize"));
      default:
        break;
    }

    Decision d;
    d.node = n;
    d.output = n;
    d.activation = &activation;
    d.inputs = std::move(inputs);
    const ObserverSpec* functional_weight = nullptr;
    if (entry.weight_arg_index.has_value()) {
      std::optional<std::string> why = TakeFunctionalWeight(n, entry, *qconfig, &d);
      if (why.has_value()) return keep_float(*std::move(why));
      functional_weight = d.functional_weight_observer;
    }
    if (d.inputs.empty()) return keep_float("it has no tensor input");
    ObservationType observation = entry.observation_type;
    if (!entry.num_tensor_args_to_observation_type.empty()) {
      bool found = false;
      for (const auto& [count, type_for_count] : entry.num_tensor_args_to_observation_type) {
        if (count == static_cast<int>(d.inputs.size())) {
          observation = type_for_count;
          found = true;
        }
      }
      if (!found) {
        return keep_float(absl::StrCat("the config has no observation type for ",
                                       d.inputs.size(), " tensor args"));
      }
    }
    if (observation == ObservationType::kInputOutputNotObserved) {
      return keep_float("its config says input and output are not observed "
                        "(INPUT_OUTPUT_NOT_OBSERVED)");
    }
    d.share_output_with_input =
        observation == ObservationType::kOutputShareObserverWithInput;
    if (activation.kind == ObserverKind::kReuseInput) {
      // ReuseInputObserver: the output is the input's tensor, re-viewed.
      if (!observed_[d.inputs.front().producer->index()]) {
        return keep_float("its ReuseInputObserver needs a quantized input; its input is float");
      }
      d.share_output_with_input = true;
    } else {
      RETURN_IF_ERROR(ValidateSpec(n, activation, "activation"));
    }

    const ObserverSpec* weight = nullptr;
    if (!entry.root_module.empty()) {
      if (n->op() != OpKind::kCallModule) {
        return keep_float("the entry names a root module but the op is not a module call");
      }
      if (entry.reference_quantized_module.empty()) {
        return keep_float("the entry has a root module but no reference_quantized_module");
      }
      const Module* m = gm_.FindModule(n->target().name());
      if (activation.is_dynamic && m->type() != entry.root_module &&
          m->type() != Symbol::Intern("nni.LinearReLU")) {
        return keep_float(absl::StrCat("dynamic quantization of the fused module ",
                                       m->type().name(), " is not supported"));
      }
      const Module* weighted = m->type() == entry.root_module ? m : m->FindChild("0");
      if (weighted == nullptr || weighted->type() != entry.root_module) {
        return keep_float(absl::StrCat(
            "its weighted part (the module or its child \"0\") is ",
            weighted == nullptr ? std::string("missing") : std::string(weighted->type().name()),
            "; the entry's root_module is ", entry.root_module.name()));
      }
      if (IsRecurrentModuleType(weighted->type())) {
        // nn.LSTM / nn.GRU: dynamic only (PyTorch's configs offer nothing else); every
        // weight_* tensor is quantized at convert.
        if (!activation.is_dynamic) {
          return keep_float(absl::StrCat(weighted->type().name(),
                                         " is quantized dynamically only; its qconfig's "
                                         "activation observer is not dynamic"));
        }
        if (const Argument* proj = weighted->FindAttribute("proj_size");
            proj != nullptr && !(proj->is_int() && proj->as_int() == 0)) {
          return keep_float(absl::StrCat("proj_size ", proj->ToString(),
                                         ": PyTorch's dynamic quantized LSTM has no projection"));
        }
        bool any = false;
        for (const auto& [name, t] : weighted->tensors()) {
          if (!absl::StartsWith(name, "weight_")) continue;
          any = true;
          if (t.dtype() != DType::kFloat32) {
            return absl::InvalidArgumentError(absl::StrCat(
                "prepare: node '", n->name(), "': module '", n->target().name(), "' (",
                weighted->type().name(), "): tensor '", name, "' is ", DTypeName(t.dtype()),
                "; expected torch.float32"));
          }
        }
        if (!any) {
          return absl::InvalidArgumentError(absl::StrCat(
              "prepare: node '", n->name(), "': module '", n->target().name(), "' (",
              weighted->type().name(), ") has no weight_* tensor"));
        }
        // Only the input sequence is observed, as in PyTorch's prepare_fx: the initial
        // state (h0, c0) goes to the dynamic module as it is.
        TensorInputs sequence;
        for (const TensorInput& in : d.inputs) {
          if (in.arg == 0 && in.item < 0) sequence.push_back(in);
        }
        d.inputs = std::move(sequence);
      } else {
        const Tensor* w = weighted->FindTensor("weight");
        if (w == nullptr || w->dtype() != DType::kFloat32) {
          return absl::InvalidArgumentError(absl::StrCat(
              "prepare: node '", n->name(), "': module '", n->target().name(),
              "' (", weighted->type().name(), ") has no float32 tensor 'weight'"));
        }
      }
      // float16 dynamic quantization's weight "observer" is a float16 placeholder: the
      // weight is cast, not observed (convert_fx's float16 reference module).
      if (!qconfig->weight.IsFloat16Cast()) {
        RETURN_IF_ERROR(ValidateSpec(n, qconfig->weight, "weight"));
      }
      weight = &qconfig->weight;
      d.root_module = entry.root_module;
      d.reference_module = entry.reference_quantized_module;
      d.weight_observer = &qconfig->weight;
    }
    const ObserverSpec& checked = activation.kind == ObserverKind::kReuseInput
                                      ? activation_of_reused_input_
                                      : activation;
    if (functional_weight != nullptr) {
      RETURN_IF_ERROR(ValidateSpec(n, *functional_weight, "weight"));
      weight = functional_weight;
    }
    const absl::StatusOr<const DTypeConfig*>& dtype_config =
        CachedDTypeConfig(entry, checked, weight);
    if (!dtype_config.ok()) return keep_float(std::string(dtype_config.status().message()));
    d.dtype_config = *dtype_config;
    d.output_tensor_args = d.inputs.size();
    return std::optional<Decision>(std::move(d));
  }

  // A weight-only decision (see Decision::weight_only) for a call of nn.Embedding or
  // nn.EmbeddingBag whose qconfig's weight observer quantizes; `keep_float` otherwise.
  template <typename KeepFloat>
  absl::StatusOr<std::optional<Decision>> DecideWeightOnly(Node* n, const QConfig& qconfig,
                                                           const BackendPatternConfig& entry,
                                                           KeepFloat keep_float) {
    const Module* m = n->op() == OpKind::kCallModule ? gm_.FindModule(n->target().name())
                                                     : nullptr;
    if (m == nullptr || entry.root_module.empty() || m->type() != entry.root_module ||
        (m->type().name() != "nn.Embedding" && m->type().name() != "nn.EmbeddingBag")) {
      return keep_float("weight-only quantization is supported for nn.Embedding and "
                        "nn.EmbeddingBag modules only");
    }
    if (entry.reference_quantized_module.empty()) {
      return keep_float("the entry has a root module but no reference_quantized_module");
    }
    const ObserverSpec& weight = qconfig.weight;
    if (weight.qscheme != ObserverQScheme::kPerChannelAffineFloatQParams ||
        weight.dtype != DType::kQUInt8 || weight.ch_axis != 0) {
      return keep_float(absl::StrCat(
          "weight-only quantization needs the weight observer of "
          "float_qparams_weight_only_qconfig (quint8, per_channel_affine_float_qparams, "
          "ch_axis 0); its qconfig's is ", weight.ToString()));
    }
    const Tensor* w = m->FindTensor("weight");
    if (w == nullptr || w->dtype() != DType::kFloat32 || w->dim() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "prepare: node '", n->name(), "': module '", n->target().name(), "' (",
          m->type().name(), ") has no float32 tensor 'weight' [num_embeddings, dim]"));
    }
    RETURN_IF_ERROR(ValidateSpec(n, weight, "weight"));
    const absl::StatusOr<const DTypeConfig*>& dtype_config =
        CachedDTypeConfig(entry, qconfig.activation, &weight);
    if (!dtype_config.ok()) return keep_float(std::string(dtype_config.status().message()));
    Decision d;
    d.node = n;
    d.output = n;
    d.activation = &qconfig.activation;
    d.weight_only = true;
    d.root_module = entry.root_module;
    d.reference_module = entry.reference_quantized_module;
    d.weight_observer = &weight;
    d.dtype_config = *dtype_config;
    return std::optional<Decision>(std::move(d));
  }

  // A functional weighted op (the entry has a weight_arg_index): its weight and bias args
  // leave `d->inputs` (they are no activations); the weight, if the qconfig's weight
  // observer quantizes or casts to float16, becomes d->functional_weight, observed by
  // that observer at calibration, as PyTorch's prepare_fx does (node_arg_is_weight); with
  // a float16 cast activation too, the bias becomes d->functional_bias. A float
  // placeholder weight observer (layer norm's) leaves the weight float. The reason the op
  // stays float otherwise.
  std::optional<std::string> TakeFunctionalWeight(const Node* n, const BackendPatternConfig& entry,
                                                  const QConfig& qconfig, Decision* d) {
    const size_t weight_arg = static_cast<size_t>(*entry.weight_arg_index);
    const std::optional<size_t> bias_arg =
        entry.bias_arg_index.has_value()
            ? std::optional<size_t>(static_cast<size_t>(*entry.bias_arg_index))
            : std::nullopt;
    TensorInputs activations;
    TensorInput weight;
    TensorInput bias;
    for (const TensorInput& in : d->inputs) {
      if (in.item >= 0 || (in.arg != weight_arg && in.arg != bias_arg)) {
        activations.push_back(in);
      } else if (in.arg == weight_arg) {
        weight = in;
      } else {
        bias = in;
      }
    }
    d->inputs = std::move(activations);
    const ObserverSpec& spec = qconfig.weight;
    if ((spec.kind == ObserverKind::kPlaceholder || spec.kind == ObserverKind::kNoop) &&
        !IsQuantized(spec.dtype) && !spec.IsFloat16Cast()) {
      return std::nullopt;
    }
    if (spec.IsFloat16Cast() && qconfig.activation.IsFloat16Cast()) d->functional_bias = bias;
    if (weight.producer == nullptr && weight_arg >= n->num_args()) {
      // Passed by keyword (torch.fx records F.group_norm(x, 2, weight=w)) or not at all:
      // PyTorch 2's prepare_fx observes only the positional weight, so the op reads its
      // weight in float. (1.13 observed the keyword too.)
      return std::nullopt;
    }
    if (weight.producer == nullptr) {
      return absl::StrCat("its weight (arg ", weight_arg,
                          " or keyword 'weight') is not a tensor node");
    }
    if (IsPerChannel(spec.qscheme) && weight.producer->op() != OpKind::kGetAttr) {
      return absl::StrCat("its qconfig's weight observer ", spec.ToString(),
                          " is per-channel and its weight is computed, not a get_attr; "
                          "fuselage quantizes only a constant weight per channel");
    }
    d->functional_weight = weight;
    d->functional_weight_observer = &spec;
    return std::nullopt;
  }

  // SelectDTypeConfig for an entry and the mapping's own observer specs (stable
  // addresses), computed once per distinct triple: it scans every dtype config of the
  // entry and words a reason for each one that does not fit, per node otherwise.
  const absl::StatusOr<const DTypeConfig*>& CachedDTypeConfig(
      const BackendPatternConfig& entry, const ObserverSpec& activation,
      const ObserverSpec* weight) {
    const auto key = std::make_tuple(&entry, &activation, weight);
    auto it = dtype_config_cache_.find(key);
    if (it == dtype_config_cache_.end()) {
      it = dtype_config_cache_
               .emplace(key, SelectDTypeConfig(entry.dtype_configs, activation, weight))
               .first;
    }
    return it->second;
  }

  // Checks that `spec` builds an observer. The specs are the mapping's own qconfigs, so a
  // spec object checked once is not checked (nor an observer built) again per node.
  absl::Status ValidateSpec(const Node* n, const ObserverSpec& spec, absl::string_view what) {
    if (valid_specs_.contains(&spec)) return absl::OkStatus();
    auto observer = MakeObserver(spec);
    if (observer.ok()) {
      valid_specs_.insert(&spec);
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat("prepare: node '", n->name(), "': ", what,
                                                   " observer ", spec.ToString(), ": ",
                                                   observer.status().message()));
  }

  const GraphModule& gm_;
  const QConfigMapping& mapping_;
  std::vector<Symbol> parts_;  // Resolve's scratch: a fused module's child types
  const BackendConfig& config_;
  // ReuseInputObserver carries no dtype of its own; its dtype config is checked against a
  // quint8 activation, the dtype Prepare's observers give the input.
  const ObserverSpec activation_of_reused_input_;
  // Per Node::index(): whether the node's value is observed (a quantized op's input or
  // output).
  std::vector<bool> observed_;
  absl::flat_hash_set<const ObserverSpec*> valid_specs_;
  absl::flat_hash_map<std::tuple<const BackendPatternConfig*, const ObserverSpec*,
                                 const ObserverSpec*>,
                      absl::StatusOr<const DTypeConfig*>>
      dtype_config_cache_;
  // Per Node::index(): the index in the decision list of a node decided quantized, or
  // kNoDecision.
  static constexpr size_t kNoDecision = static_cast<size_t>(-1);
  std::vector<size_t> decision_of_;
  absl::flat_hash_map<std::pair<OpKind, Symbol>, const BackendPatternConfig*> entry_cache_;
  absl::flat_hash_map<std::tuple<OpKind, Symbol, OpKind, Symbol>, const BackendPatternConfig*>
      two_op_entry_cache_;
  absl::flat_hash_map<std::tuple<OpKind, Symbol, OpKind, Symbol, int>,
                      const BackendPatternConfig*>
      binary_entry_cache_;
};

// The name of every observer module (and of the node calling it), then its number.
constexpr absl::string_view kObserverNamePrefix = "activation_post_process_";

// Inserts the observer nodes and modules the decisions call for.
class ObserverInserter {
 public:
  // `max_observer_nodes` and `max_observer_modules` bound the observer nodes and modules
  // Apply will insert: the per-node observer table and the container's child list are
  // sized for them once instead of growing as they are created.
  ObserverInserter(GraphModule& gm, PreparedModel& out, const ModuleSchemaRegistry& schemas,
                   size_t max_observer_nodes, size_t max_observer_modules)
      : gm_(gm), out_(out), schemas_(schemas), max_observer_modules_(max_observer_modules) {
    observer_of_.reserve(gm.graph().node_index_bound() + max_observer_nodes);
    observer_of_.resize(gm.graph().node_index_bound());
  }

  absl::Status Apply(const Decision& d) {
    Graph& g = gm_.graph();
    Node* first_input_observer = nullptr;
    for (const TensorInput& in : d.inputs) {
      ASSIGN_OR_RETURN(Node * obs, ObserverOf(in.producer, *d.activation));
      if (first_input_observer == nullptr) first_input_observer = obs;
      if (in.item < 0) {
        if (!SetArgWouldChangeNothing(d.node, in.arg, obs)) {
          RETURN_IF_ERROR(g.SetArg(d.node, in.arg, obs));
        }
      } else {
        std::vector<Argument> items(d.node->arg(in.arg).items().begin(),
                                    d.node->arg(in.arg).items().end());
        items[static_cast<size_t>(in.item)] = obs;
        const bool tuple = d.node->arg(in.arg).is_tuple();
        RETURN_IF_ERROR(g.SetArg(d.node, in.arg,
                                 tuple ? Argument::Tuple(std::move(items))
                                       : Argument::List(std::move(items))));
      }
    }
    if (d.functional_weight.producer != nullptr) {
      ASSIGN_OR_RETURN(Node * obs,
                       ObserverOf(d.functional_weight.producer, *d.functional_weight_observer));
      RETURN_IF_ERROR(g.SetArg(d.node, d.functional_weight.arg, obs));
    }
    if (d.functional_bias.producer != nullptr) {
      ASSIGN_OR_RETURN(Node * obs, ObserverOf(d.functional_bias.producer, *d.activation));
      RETURN_IF_ERROR(g.SetArg(d.node, d.functional_bias.arg, obs));
    }
    if (d.weight_only) {
      // Weight-only: nothing observed in the graph.
      RETURN_IF_ERROR(EnsureContainer());
      out_.quantized_ops.emplace(d.node->name(), PlanOf(d));
      ++out_.report.quantized_ops;
      return absl::OkStatus();
    }
    if (d.activation->is_dynamic) {
      // Dynamic quantization: the output is float, not observed.
      out_.quantized_ops.emplace(d.node->name(), PlanOf(d));
      ++out_.report.quantized_ops;
      return absl::OkStatus();
    }
    if (d.share_output_with_input) RETURN_IF_ERROR(ShareListInputObservers(d));
    // A shared output observer is a second call of the input observer's module: its
    // target symbol is reused as it is.
    Symbol path;
    if (d.share_output_with_input) {
      path = first_input_observer->target();
    } else {
      ASSIGN_OR_RETURN(path, NewObserverModule(*d.activation));
    }
    ASSIGN_OR_RETURN(Node * out_obs, InsertObserverNode(d.output, path));
    ASSIGN_OR_RETURN(int rewired, g.ReplaceAllUsesWith(d.output, out_obs));
    (void)rewired;
    // A shared output observer is its input's observer module, of the input's dtype.
    const DType out_dtype = d.share_output_with_input
                                ? ObserverEntry(first_input_observer).dtype
                                : d.activation->dtype;
    ObserverEntry(d.output) = {out_obs, out_dtype, false, true};
    ObserverEntry(out_obs) = {out_obs, out_dtype, false, true};
    RETURN_IF_ERROR(ObserveDeclaredSteps(d));
    out_.quantized_ops.emplace(d.node->name(), PlanOf(d));
    ++out_.report.quantized_ops;
    return absl::OkStatus();
  }

  // Observes `d.merged_inputs`. Run after every decision is applied: such an input may
  // be the output of an op decided later (a residual add's other conv), whose own output
  // observer the input then reads instead of a second observer in front of it.
  absl::Status ApplyMergedInputs(const Decision& d) {
    for (const auto& [reader, in] : d.merged_inputs) {
      ASSIGN_OR_RETURN(Node * obs, ObserverOf(in.producer, *d.activation));
      if (!SetArgWouldChangeNothing(reader, in.arg, obs)) {
        RETURN_IF_ERROR(gm_.graph().SetArg(reader, in.arg, obs));
      }
    }
    return absl::OkStatus();
  }

  // Removes the observer modules no node calls any more (ShareListInputObservers moved
  // their nodes to another module; PyTorch leaves them orphaned in the model).
  void RemoveOrphanedObservers() {
    if (maybe_orphaned_.empty()) return;
    absl::flat_hash_set<Symbol> called;
    for (const Node* n = gm_.graph().first(); n != nullptr; n = n->next()) {
      if (n->op() == OpKind::kCallModule && maybe_orphaned_.contains(n->target())) {
        called.insert(n->target());
      }
    }
    absl::flat_hash_set<std::string> names;
    for (Symbol path : maybe_orphaned_) {
      if (called.contains(path)) continue;
      names.insert(std::string(path.name().substr(name_offset_)));
      out_.observers.erase(path);
    }
    out_.report.observer_modules -= container_->RemoveChildren(names);
  }

 private:
  // An op whose output shares its input's observer and whose first tensor arg is a list
  // (torch.cat, torch.stack): every item of that list is observed by the first item's
  // observer module, as PyTorch 1.13's _maybe_make_input_output_share_observers does:
  // cat's inputs and output then carry one scale and zero point, so the quantized cat
  // copies bytes instead of requantizing. The observer nodes of the other items call
  // that module from now on, for every consumer they feed, as in PyTorch.
  absl::Status ShareListInputObservers(const Decision& d) {
    const TensorInput& first = d.inputs.front();
    if (first.item < 0) return absl::OkStatus();
    const Argument& list = d.node->arg(first.arg);
    const Symbol shared = list.items()[static_cast<size_t>(first.item)].as_node()->target();
    for (const TensorInput& in : d.inputs) {
      if (in.arg != first.arg || in.item < 0) continue;
      Node* obs = list.items()[static_cast<size_t>(in.item)].as_node();
      if (obs->target() == shared) continue;
      maybe_orphaned_.insert(obs->target());
      RETURN_IF_ERROR(gm_.graph().SetTarget(obs, shared));
    }
    return absl::OkStatus();
  }

  // A module of a declared type whose composition observes intermediate steps
  // (ModuleComposition::observed_steps) gets one observer module per step, of the
  // activation's spec as its output's (PyTorch observes an unfused op's output so): no
  // node calls it; its path is recorded on the module (ObservedStepAttribute), where the
  // steps kernel finds it during calibration and convert replaces it by the step's
  // scale and zero point.
  absl::Status ObserveDeclaredSteps(const Decision& d) {
    if (d.node->op() != OpKind::kCallModule) return absl::OkStatus();
    Module* module = gm_.FindModule(d.node->target());
    if (module == nullptr) return absl::OkStatus();
    const ModuleSchema* schema = schemas_.Find(module->type());
    if (schema == nullptr || schema->composition == nullptr) return absl::OkStatus();
    for (int step : schema->composition->observed_steps) {
      const std::string attribute = ObservedStepAttribute(step);
      if (const Argument* a = module->FindAttribute(attribute); a != nullptr) {
        // A second node calling the same module: one observer sees both calls' values.
        if (a->is_string()) continue;
      }
      ASSIGN_OR_RETURN(Symbol path, NewObserverModule(*d.activation));
      module->SetAttribute(attribute, Argument::String(std::string(path.name())));
    }
    return absl::OkStatus();
  }

  // Whether Graph::SetArg(node, arg, obs) would leave the graph as it is: the arg is
  // `obs` already (an earlier output observer's ReplaceAllUsesWith rewired it: most
  // inputs) and `node` is already last among the users of each of its inputs, where
  // SetArg's re-registering would move it. Then the call (~380 instructions) is skipped
  // and the user lists stay exactly as it would leave them.
  static bool SetArgWouldChangeNothing(const Node* node, size_t arg, const Node* obs) {
    const Argument& current = node->arg(arg);
    if (!current.is_node() || current.as_node() != obs) return false;
    bool last_everywhere = true;
    auto check = [&](Node* input) {
      last_everywhere = last_everywhere && input->users().back() == node;
    };
    for (const Argument& a : node->args()) a.ForEachNode(check);
    for (const auto& kw : node->kwargs()) kw.second.ForEachNode(check);
    return last_everywhere;
  }

  // The observer node watching `producer`'s value, inserted after it if there is none
  // (or if the one there observes another dtype).
  absl::StatusOr<Node*> ObserverOf(Node* producer, const ObserverSpec& spec) {
    const ObserverNode existing = ObserverEntry(producer);
    if (existing.node != nullptr && existing.dtype == spec.dtype &&
        existing.dynamic == spec.is_dynamic) {
      return existing.node;
    }
    // A dynamic op reading a statically observed value reads it as the static observer
    // leaves it (quantized, then dequantized: PyTorch's quantize -> op -> dequantize ->
    // dynamic op), so its observer watches the static observer's output; so does any op
    // reading an op's output observed to another dtype (a float16 add after an int8 conv:
    // quantize -> dequantize -> to(float16) -> dequantize), as PyTorch 1.13's prepare_fx,
    // where every user of that op reads its output observer, observes the observer node.
    // (An input observer is that consumer's only: another consumer reads the value.)
    const bool chained = existing.node != nullptr && !existing.dynamic &&
                         (spec.is_dynamic || existing.output);
    // Static consumers of one other dtype share one observer, as PyTorch reuses an
    // observer of the same dtype among the observed node's users.
    const bool shared = existing.node != nullptr && !spec.is_dynamic;
    const auto key = std::make_pair(existing.node, spec.dtype);
    if (shared) {
      auto it = other_dtype_observers_.find(key);
      if (it != other_dtype_observers_.end()) return it->second;
    }
    ASSIGN_OR_RETURN(Symbol path, NewObserverModule(spec));
    Node* observed = chained ? existing.node : producer;
    ASSIGN_OR_RETURN(Node * obs, InsertObserverNode(observed, path));
    if (shared) other_dtype_observers_.emplace(key, obs);
    // Static consumers keep sharing the static observer; a dynamic one (stateless) may
    // be repeated.
    if (existing.node == nullptr || (existing.dynamic && !spec.is_dynamic)) {
      ObserverEntry(producer) = {obs, spec.dtype, spec.is_dynamic};
    }
    ObserverEntry(obs) = {obs, spec.dtype, spec.is_dynamic};
    return obs;
  }

  // Adds a fresh observer module of `spec` to the container; returns its path, interned
  // (the target of every node that calls it).
  // Makes the observer container (once): every observer module goes there, and so do the
  // weight plans a stored prepared model keeps (quantize/prepared_model.h), also when
  // only weight-only ops were quantized and no node calls an observer.
  absl::Status EnsureContainer() {
    if (container_ != nullptr) return absl::OkStatus();
    out_.observer_container = gm_.UniqueModulePath("observers");
    RETURN_IF_ERROR(gm_.SetModule(out_.observer_container,
                                  std::make_unique<Module>("nn.Module")));
    container_ = gm_.FindModule(out_.observer_container);
    container_->ReserveChildren(max_observer_modules_);
    path_ = absl::StrCat(out_.observer_container, ".", kObserverNamePrefix);
    name_offset_ = out_.observer_container.size() + 1;
    number_offset_ = path_.size();
    return absl::OkStatus();
  }

  absl::StatusOr<Symbol> NewObserverModule(const ObserverSpec& spec) {
    RETURN_IF_ERROR(EnsureContainer());
    // "<container>.activation_post_process_<n>" built in place in one reused buffer; the
    // module's name is its tail.
    AdvanceNumber();
    const absl::string_view name = absl::string_view(path_).substr(name_offset_);
    ASSIGN_OR_RETURN(const Prototype* prototype, PrototypeFor(spec));
    // Straight into the container, which we hold: no path to resolve per observer.
    container_->SetChild(name, prototype->module->Clone());
    const Symbol path = Symbol::Intern(path_);
    out_.observers.emplace(path, prototype->observer->Clone());
    ++out_.report.observer_modules;
    return path;
  }

  // Makes the number at the end of path_ the next one (0 first): the last digits are
  // counted up in place, a carry past the first digit adds one; no number is formatted
  // per observer.
  void AdvanceNumber() {
    if (path_.size() == number_offset_) {
      path_.push_back('0');
      return;
    }
    size_t i = path_.size();
    while (i > number_offset_ && path_[i - 1] == '9') path_[--i] = '0';
    if (i == number_offset_) {
      path_.insert(path_.begin() + static_cast<std::ptrdiff_t>(number_offset_), '1');
    } else {
      ++path_[i - 1];
    }
  }

  // A fresh observer of one spec and its module, built once per distinct spec (a handful
  // per model) and cloned for each observer module: the spec is validated once, and the
  // module's tensor and attribute lists are shared with the clones copy-on-write
  // (Module::ShareFieldsWithClones): a clone is one heap block, the Module, until
  // calibration stores statistics into it.
  struct Prototype {
    // The caller's spec objects it was found for (the mapping's qconfigs: a handful;
    // equal specs of different qconfigs alternate, so one remembered address would miss).
    absl::InlinedVector<const ObserverSpec*, 4> spec_objects;
    ObserverSpec spec;
    std::unique_ptr<Observer> observer;
    std::unique_ptr<Module> module;
  };
  absl::StatusOr<const Prototype*> PrototypeFor(const ObserverSpec& spec) {
    // The specs are the mapping's own objects: found by address first, by value if a
    // different object has an equal spec.
    for (Prototype& known : prototypes_) {
      for (const ObserverSpec* object : known.spec_objects) {
        if (object == &spec) return &known;
      }
    }
    for (Prototype& known : prototypes_) {
      if (known.spec == spec) {
        known.spec_objects.push_back(&spec);
        return &known;
      }
    }
    ASSIGN_OR_RETURN(std::unique_ptr<Observer> observer, MakeObserver(spec));
    ASSIGN_OR_RETURN(std::unique_ptr<Module> module, MakeObserverModule(spec));
    module->ShareFieldsWithClones();
    prototypes_.push_back(Prototype{{&spec}, spec, std::move(observer), std::move(module)});
    return &prototypes_.back();
  }

  absl::StatusOr<Node*> InsertObserverNode(Node* after, Symbol path) {
    NodeSpec spec;
    spec.op = OpKind::kCallModule;
    spec.target = path;
    spec.args = {after};
    // Named as PyTorch names the node of its observer module: activation_post_process_<n>,
    // the tail of the path. Viewed, not copied: interned text never moves or dies.
    // Every observer path is "<container>.activation_post_process_<n>".
    spec.name = path.name().substr(name_offset_);
    ++out_.report.observer_nodes;
    return gm_.graph().InsertAfter(after, std::move(spec));
  }

  // The plan of `d`, sharing one copy of each distinct observer spec and dtype config
  // (found by the address of the mapping's / config's own object).
  QuantizedOpPlan PlanOf(const Decision& d) {
    QuantizedOpPlan plan;
    plan.root_module = d.root_module;
    plan.reference_module = d.reference_module;
    if (d.weight_observer != nullptr) plan.weight_observer = Shared(d.weight_observer, specs_);
    plan.dtype_config = Shared(d.dtype_config, dtype_configs_);
    return plan;
  }
  template <typename T>
  using SharedCopies = std::vector<std::pair<const T*, std::shared_ptr<const T>>>;
  // The shared copy of `*original` in `copies` (a handful: searched linearly).
  template <typename T>
  static std::shared_ptr<const T> Shared(const T* original, SharedCopies<T>& copies) {
    for (const auto& [known, copy] : copies) {
      if (known == original) return copy;
    }
    copies.emplace_back(original, std::make_shared<const T>(*original));
    return copies.back().second;
  }

  // An observer node, the dtype its module observes and whether it is dynamic (a
  // dynamically quantized op's input, quantized at run time: never shared with a static
  // op, nor a static observer with a dynamic op).
  struct ObserverNode {
    Node* node = nullptr;
    DType dtype = DType::kQUInt8;
    bool dynamic = false;
    // An op's output observer, which every user of the op reads.
    bool output = false;
  };

  // The entry of `n` in observer_of_ (node null: none yet), grown to cover the observer
  // nodes created since (Prepare erases no node, so an index is never reused meanwhile).
  ObserverNode& ObserverEntry(const Node* n) {
    if (n->index() >= observer_of_.size()) observer_of_.resize(gm_.graph().node_index_bound());
    return observer_of_[n->index()];
  }

  GraphModule& gm_;
  PreparedModel& out_;
  const ModuleSchemaRegistry& schemas_;  // the config's: built-in and declared types
  // Per Node::index(): the observer node watching the node's value (an observer node
  // watches its own), with its dtype.
  std::vector<ObserverNode> observer_of_;
  // Per (observer node of a value, dtype): the static observer of that value for
  // consumers of that other dtype (ObserverOf).
  absl::flat_hash_map<std::pair<const Node*, DType>, Node*> other_dtype_observers_;
  // Observer modules whose nodes ShareListInputObservers moved away.
  absl::flat_hash_set<Symbol> maybe_orphaned_;
  // Few (one per distinct spec); a deque keeps their addresses as it grows.
  std::deque<Prototype> prototypes_;
  SharedCopies<ObserverSpec> specs_;
  SharedCopies<DTypeConfig> dtype_configs_;
  const size_t max_observer_modules_;
  Module* container_ = nullptr;  // the module at out_.observer_container
  // "<container>.activation_post_process_" then the number of the last module; the
  // module name starts at name_offset_, the number at number_offset_.
  std::string path_;
  size_t name_offset_ = 0;
  size_t number_offset_ = 0;
};

}  // namespace

std::string PrepareReport::ToString() const {
  std::string s = absl::StrCat(kPreparePassName, ": ", quantized_ops, " ops quantized, ",
                               observer_nodes, " observer nodes, ", observer_modules,
                               " observer modules, ", kept_float.size(), " ops kept float\n");
  for (const KeptFloat& k : kept_float) {
    absl::StrAppend(&s, "  kept float: ", k.node, " (", k.op, "): ", k.reason, "\n");
  }
  return s;
}

namespace {

// Gives each quantized call of a module that several nodes call a module of its own (a
// clone, its tensors shared until written), so that convert can swap it for the quantized
// module of that call's observers: a module called twice (or from two aliases) otherwise
// became one quantized module that a float call, or a call with other qparams, then ran.
// A module all of whose calls are quantized keeps its first call.
absl::Status UnshareQuantizedModuleCalls(GraphModule& gm, const std::vector<Decision>& decisions) {
  auto quantizes_a_module = [](const Decision& d) {
    return !d.root_module.empty() && d.node->op() == OpKind::kCallModule;
  };
  struct Calls {
    int quantized = 0;
    int all = 0;
  };
  // Only the quantized modules' calls are counted: one lookup per call_module node.
  absl::flat_hash_map<Symbol, Calls> calls;
  for (const Decision& d : decisions) {
    if (quantizes_a_module(d)) ++calls[d.node->target()].quantized;
  }
  if (calls.empty()) return absl::OkStatus();
  gm.graph().ForEachNode([&calls](const Node* n) {
    if (n->op() != OpKind::kCallModule) return;
    if (auto it = calls.find(n->target()); it != calls.end()) ++it->second.all;
  });
  absl::flat_hash_set<Symbol> kept_first;
  for (const Decision& d : decisions) {
    if (!quantizes_a_module(d)) continue;
    const Symbol target = d.node->target();
    const Calls& c = calls[target];
    if (c.all < 2) continue;
    if (c.all == c.quantized && kept_first.insert(target).second) continue;
    ASSIGN_OR_RETURN(const Module* shared, gm.GetModule(target));
    const std::string path = gm.UniqueModulePath(target.name());
    RETURN_IF_ERROR(gm.SetModule(path, shared->Clone()));
    RETURN_IF_ERROR(gm.graph().SetTarget(d.node, Symbol::Intern(path)));
  }
  return absl::OkStatus();
}

}  // namespace

bool IsObserverModuleType(Symbol type) {
  return ObserverKindFromName(type.name()).has_value();
}

bool IsRecurrentModuleType(Symbol type) {
  static const Symbol lstm = Symbol::Intern("nn.LSTM");
  static const Symbol gru = Symbol::Intern("nn.GRU");
  return type == lstm || type == gru;
}

absl::StatusOr<PreparedModel> Prepare(GraphModule& gm, const QConfigMapping& qconfig_mapping,
                                      const BackendConfig& backend_config) {
  // A module of a type the config declares must carry that declaration's steps.
  RETURN_IF_ERROR(CheckDeclaredModules(gm, backend_config.declarations().get()));
  PreparedModel prepared;
  // At most one decision per node, reserved once: growing moved every decision made so
  // far (at 10^5 nodes 6.6 % of the pass's L1 read misses and 16 % of its memory write
  // misses). The part past the decisions made is never written, so a large reservation
  // stays untouched address space.
  std::vector<Decision> decisions;
  decisions.reserve(gm.graph().size());
  Planner planner(gm, qconfig_mapping, backend_config);
  RETURN_IF_ERROR(planner.Run(&decisions, &prepared.report));
  // From here on nothing depends on the input: a failure is a bug in this pass.
  if (absl::Status st = UnshareQuantizedModuleCalls(gm, decisions); !st.ok()) {
    return absl::InternalError(absl::StrCat("prepare: giving shared modules one per call: ",
                                            st.message()));
  }
  // The result maps sized once: at 10^6 nodes growing them rehashed (and, for the plans,
  // moved ~350-byte values) a few hundred MB. Every input and every unshared output may
  // get its own observer module.
  size_t max_observer_modules = 0;
  size_t max_observer_nodes = 0;
  for (const Decision& d : decisions) {
    const size_t weight = (d.functional_weight.producer != nullptr ? 1 : 0) +
                          (d.functional_bias.producer != nullptr ? 1 : 0);
    const size_t inputs = d.inputs.size() + d.merged_inputs.size();
    max_observer_modules += inputs + weight + (d.share_output_with_input ? 0 : 1);
    max_observer_nodes += inputs + weight + 1;
  }
  prepared.quantized_ops.reserve(decisions.size());
  prepared.observers.reserve(max_observer_modules);
  ObserverInserter inserter(gm, prepared, backend_config.module_schemas(), max_observer_nodes,
                            max_observer_modules);
  for (const Decision& d : decisions) {
    absl::Status st = inserter.Apply(d);
    if (!st.ok()) {
      return absl::InternalError(absl::StrCat("prepare: inserting observers for node '",
                                              d.node->name(), "': ", st.message()));
    }
  }
  for (const Decision& d : decisions) {
    if (absl::Status st = inserter.ApplyMergedInputs(d); !st.ok()) {
      return absl::InternalError(absl::StrCat("prepare: observing the inputs merged into node '",
                                              d.node->name(), "': ", st.message()));
    }
  }
  inserter.RemoveOrphanedObservers();
  // The ops kept float for a None qconfig say so on their nodes, for lowering, wherever
  // the model goes from here (kQConfigNoneMeta).
  for (const PrepareReport::KeptFloat& kept : prepared.report.kept_float) {
    if (kept.cause != PrepareReport::KeptFloat::Cause::kQConfigNone) continue;
    Node* n = gm.graph().FindNode(kept.node);
    if (n == nullptr) {
      return absl::InternalError(absl::StrCat("prepare: kept-float node '", kept.node, "' is gone"));
    }
    RETURN_IF_ERROR(gm.graph().SetMeta(n, kQConfigNoneMeta, Argument::Bool(true)));
  }
  // The engine the quantized model is meant for goes with the model from here on
  // (graph/NAMING.md): convert and lowering keep it, and Run uses it by default.
  // A config file extending qnnpack under its own name still runs QNNPACK's arithmetic.
  RecordEngine(EngineForBackend(backend_config.built_in_base().empty()
                                    ? backend_config.name()
                                    : backend_config.built_in_base()),
               gm);
  return prepared;
}

}  // namespace fuselage
