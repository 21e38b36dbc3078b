#include "patterns/fuse.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/module_schema.h"
#include "graph/serialization.h"
#include "graph/status_macros.h"

namespace fuselage {
namespace {


// An extra input of a fused node. A node bound at a pattern position is read at apply time
// from `consumer` (the matched node that takes it) at arg `arg_index`: by then, if it was
// the outermost node of an earlier fusion, that arg reads the fused node instead, so no
// "replaced by" map is needed. Anything else (a constant; whatever a custom extra-inputs
// getter returns) is `value`, remapped through such a map if it holds nodes.
struct ExtraInput {
  Argument value;
  const Node* consumer = nullptr;
  int arg_index = -1;
};

// One fusion, fully decided before the graph is touched.
struct PlannedFusion {
  // User-provided, so that emplace_back() (value-initialization) runs the member
  // initializers only, instead of first zero-filling all ~550 bytes (rep stos) and then
  // running them.
  PlannedFusion() {}

  const PatternMatch* match = nullptr;
  // The fused node's meta when it depends on the match (alternatives, optional positions),
  // computed while the matched modules are still in place; empty: the rule's shared meta.
  NodeMeta own_meta;
  Node* outermost = nullptr;
  Node* root = nullptr;
  // The fused node's args are the root's args, read when the fusion is applied (by then
  // they read the fused node of any earlier match whose outermost node they read), then
  // these.
  absl::InlinedVector<ExtraInput, 1> extras;
  // The fused module; null if it is the root's own module, folded in its slot
  // (PendingFusion::root_slot), or built in `storage`.
  std::unique_ptr<Module> module;
  // Where the fuser builds the fused module that goes to reuse_slot (PendingFusion::
  // storage): no heap block for a module that is only moved into the slot. Plans never
  // move (their vector is reserved once), so the address the fuser was given holds.
  std::optional<Module> storage;
  // Parts to move in when installed (with the fold of a moved conv); a copied conv's
  // weight scaling, after the last fusion.
  PendingFusion pending;
  // The module of the root node, which the fused module replaces in place (PyTorch's
  // fuse_fx installs it at the root's path when only the root used that module); nullptr:
  // the fused module goes to a fresh path.
  Module* reuse_slot = nullptr;
  // The matched op nodes in execution order, their modules resolved.
  absl::InlinedVector<MatchedOpNode, 4> nodes;
  // Bit i: the pass may delete the module of nodes[i] once nothing calls it (a leaf no
  // get_attr reads). A pattern has at most Pattern::kMaxPositions = 64 positions.
  uint64_t removable = 0;
  // Fused into kFusedSubgraphType (fusion_rule.h): the fused node's args are `extras`
  // alone (FusedSubgraphInputs), not the root's args first.
  bool subgraph = false;
};

absl::Status PlanError(const PatternMatch& match, absl::string_view what) {
  return absl::FailedPreconditionError(absl::StrCat(
      kFusePassName, ": rule '", match.rule->name, "' at node '", match.outermost()->name(),
      "': ", what));
}

absl::Status Internal(const absl::Status& status) {
  return absl::InternalError(absl::StrCat(
      kFusePassName, ": a graph mutation failed after all checks passed (a bug; the graph "
      "may be partly fused): ", status.message()));
}

// A module path not yet taken, from `hint`: hint, hint_1, hint_2, ... The per-hint counter
// keeps many fusions of one shared module linear (GraphModule::UniqueModulePath would
// rescan hint_1.. from the start each time).
std::string FreshModulePath(const GraphModule& gm, absl::string_view hint,
                            absl::flat_hash_map<std::string, int>& next_suffix) {
  int& k = next_suffix[hint];
  while (true) {
    std::string path = k == 0 ? std::string(hint) : absl::StrCat(hint, "_", k);
    ++k;
    if (gm.FindModule(path) == nullptr && gm.FindTensor(path) == nullptr) return path;
  }
}

// How many call_module nodes call each module path. The paths of one model are interned
// together (when it is built or loaded), so their symbol ids mostly form one dense range:
// then the counts are a vector indexed by id, which at 10^5..10^6 modules is one memory
// access per count where a hash map costs a probe and a cache miss. A model whose ids are
// spread out (range > 4x its call_module nodes) gets a hash map.
class ModuleUseCounts {
 public:
  explicit ModuleUseCounts(const std::vector<uint32_t>& target_ids) {
    if (target_ids.empty()) return;
    const auto [min, max] = std::minmax_element(target_ids.begin(), target_ids.end());
    const uint64_t range = static_cast<uint64_t>(*max) - *min + 1;
    dense_ = range <= 4 * static_cast<uint64_t>(target_ids.size()) + 1024;
    if (dense_) {
      min_id_ = *min;
      counts_.assign(range, 0);
      for (uint32_t id : target_ids) ++counts_[id - min_id_];
    } else {
      sparse_.reserve(target_ids.size());
      for (uint32_t id : target_ids) ++sparse_[id];
    }
  }

  // The count of `path`, which some call_module node of the graph calls. The dense case is
  // inlined (a few instructions, 4-5 times per fusion); the hash map's is not.
  ABSL_ATTRIBUTE_ALWAYS_INLINE int& operator[](Symbol path) {
    return dense_ ? counts_[path.id() - min_id_] : Sparse(path);
  }

 private:
  ABSL_ATTRIBUTE_NOINLINE int& Sparse(Symbol path) { return sparse_[path.id()]; }

  bool dense_ = false;
  uint32_t min_id_ = 0;
  std::vector<int> counts_;
  absl::flat_hash_map<uint32_t, int> sparse_;
};

// ---- Prefetching -----------------------------------------------------------------------
// At 10^5 nodes and more, the graph (~180 B a node) and its modules (~900 B a node) are far
// larger than the caches, and each loop of the pass below reaches them through pointers:
// a chain of cache misses the hardware prefetcher cannot run ahead of. The addresses of
// later iterations' nodes and modules are known (in the matches, in the plans), so each
// loop asks for them a few iterations early. A prefetch never faults and changes nothing
// but timing.
constexpr size_t kIterationsAhead = 6;

// The first `bytes` of the object at `p` (nullptr: nothing).
inline void PrefetchObject(const void* p, size_t bytes) {
  if (p == nullptr) return;
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  for (uintptr_t line = 0; line < bytes; line += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(start + line));
  }
}

// The node a few places later in the graph's list, guessing that the graph's arena keeps
// nodes side by side in list order (mostly true: nodes are created in order; an erased
// slot is reused by a node created in its place). A wrong guess is one useless prefetch;
// the address is computed as an integer and never dereferenced.
inline void PrefetchLaterNode(const Node* node) {
  PrefetchObject(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(node) +
                                               kIterationsAhead * sizeof(Node)),
                 sizeof(Node));
}

// The start of a module's tensor and attribute lists: names, shapes and buffer pointers,
// what a batch-norm fold reads (a batch norm's "eps" is its second attribute).
constexpr size_t kTensorListBytes = 512;     // a batch norm's four tensors, nearly
constexpr size_t kAttributeListBytes = 128;  // its first two attributes

inline void PrefetchFieldLists(const Module* module, bool attributes_too) {
  if (module == nullptr) return;
  const Module::TensorList& tensors = module->tensors();
  PrefetchObject(tensors.data(), std::min(kTensorListBytes, tensors.size() * sizeof(tensors[0])));
  if (!attributes_too) return;
  const Module::AttributeList& attributes = module->attributes();
  PrefetchObject(attributes.data(),
                 std::min(kAttributeListBytes, attributes.size() * sizeof(attributes[0])));
}

// Sorts a match's few op nodes into execution order (insertion sort: 2-6 elements).
void SortInExecutionOrder(const Graph& graph, absl::InlinedVector<MatchedOpNode, 4>& nodes) {
  for (size_t i = 1; i < nodes.size(); ++i) {
    for (size_t j = i; j > 0 && graph.Precedes(nodes[j].node, nodes[j - 1].node); --j) {
      std::swap(nodes[j], nodes[j - 1]);
    }
  }
}

// The meta of a fused node whose rule has alternatives or optional positions (pattern.h):
// "pattern", plus "pattern_alternatives" (the leaf matched at each op position, "" if
// absent) and "pattern_absent" (the paths of the absent optional positions).
absl::StatusOr<NodeMeta> MatchMeta(const GraphModule& gm, const PatternMatch& match) {
  const Pattern& pattern = match.rule->pattern;
  Kwargs entries = {{Symbol::Intern("pattern"), Argument::String(match.rule->name)}};
  std::vector<Argument> leaves, absent;
  for (int p = 0; p < pattern.size(); ++p) {
    const PatternPosition& position = pattern.position(p);
    if (position.match_all) continue;
    const Node* node = match.node_at(p);
    if (node == nullptr) {
      leaves.push_back(Argument::String(""));
      absent.push_back(Argument::String(pattern.PathOf(p)));
      continue;
    }
    const Symbol key =
        node->op() == OpKind::kCallModule ? gm.ModuleTypeOf(node) : node->target();
    leaves.push_back(Argument::String(position.LeafFor(OpRef{node->op(), key})));
  }
  if (pattern.has_alternatives()) {
    entries.push_back({Symbol::Intern("pattern_alternatives"), Argument::List(std::move(leaves))});
  }
  if (pattern.has_optional()) {
    entries.push_back({Symbol::Intern("pattern_absent"), Argument::List(std::move(absent))});
  }
  return NodeMeta::Make(std::move(entries));
}

// The extra input bound at MatchAllNode position `p` of `match`: if it is a node, where to
// re-read it when the fusion is applied — the matched node at the parent position, at the
// arg that holds it (the position's arg index, or the other one if a commutative op
// matched with its args swapped).
ExtraInput BoundExtraInput(const PatternMatch& match, int p) {
  ExtraInput extra{match.bindings[p]};
  if (!extra.value.is_node()) return extra;
  const PatternPosition& position = match.rule->pattern.position(p);
  const Node* consumer = position.parent >= 0 ? match.node_at(position.parent) : nullptr;
  if (consumer == nullptr) return extra;
  const Node* bound = extra.value.as_node();
  const auto reads_bound = [&](int k) {
    return k >= 0 && static_cast<size_t>(k) < consumer->num_args() &&
           consumer->arg(k).is_node() && consumer->arg(k).as_node() == bound;
  };
  int k = position.arg_index;
  if (!reads_bound(k)) {
    for (k = 0; static_cast<size_t>(k) < consumer->num_args() && !reads_bound(k); ++k) {
    }
    if (!reads_bound(k)) return extra;
  }
  extra.consumer = consumer;
  extra.arg_index = k;
  return extra;
}

// How many levels of children hang below `module` (0: none).
int SubtreeHeight(const Module& module) {
  int height = 0;
  for (const auto& entry : module.children()) {
    height = std::max(height, 1 + SubtreeHeight(*entry.second));
  }
  return height;
}

// The fused module goes to the root's module path, or to a fresh path beside it (the root
// node's name, at the top, for a functional root): FailedPrecondition if it would nest
// deeper than a model file may (ModelLimits::max_module_depth), so that every model the
// pass returns saves and loads.
absl::Status CheckFusedDepth(const PatternMatch& match, const Node& root, const Module& fused,
                             int max_depth) {
  const absl::string_view path =
      root.op() == OpKind::kCallModule ? root.target().name() : absl::string_view(root.name());
  const int depth = static_cast<int>(std::count(path.begin(), path.end(), '.')) + 1 +
                    SubtreeHeight(fused);
  if (depth <= max_depth) return absl::OkStatus();
  return PlanError(match, absl::StrCat("the fused module ", fused.type().name(), " at '", path,
                                       "' would nest modules ", depth,
                                       " deep; a model file holds at most ", max_depth,
                                       " (ModelLimits::max_module_depth)"));
}

// The fused node of a multi-output match (pattern.h `-> $name`; matcher.h rule 11) and
// one `operator.getitem(fused, i)` per output i that is read outside the match, which those
// readers read instead. The fused node goes before the first of those readers (or the
// outermost node), which the matcher checked every input of the match precedes. `replaced`
// (if non-null) maps each output node to its getitem.
absl::Status InsertMultiOutput(Graph& graph, const PlannedFusion& plan, NodeSpec spec,
                               Node** fused_node, absl::flat_hash_map<Node*, Node*>* replaced) {
  const PatternMatch& match = *plan.match;
  const std::vector<int>& outputs = match.rule->pattern.output_positions();
  const auto in_match = [&plan](const Node* n) {
    for (const MatchedOpNode& entry : plan.nodes) {
      if (entry.node == n) return true;
    }
    return false;
  };
  Node* anchor = plan.outermost;
  for (int p : outputs) {
    for (Node* user : match.node_at(p)->users()) {
      if (!in_match(user) && graph.Precedes(user, anchor)) anchor = user;
    }
  }
  ASSIGN_OR_RETURN(Node* fused, graph.InsertBeforeUnnamed(anchor, std::move(spec)));
  *fused_node = fused;
  const Symbol getitem = Symbol::Intern("operator.getitem");
  for (size_t i = 0; i < outputs.size(); ++i) {
    Node* output = match.node_at(outputs[i]);
    std::vector<Node*> readers;
    for (Node* user : output->users()) {
      if (!in_match(user)) readers.push_back(user);
    }
    if (readers.empty()) continue;
    NodeSpec item;
    item.op = OpKind::kCallFunction;
    item.target = getitem;
    item.args.push_back(Argument(fused));
    item.args.push_back(Argument::Int(static_cast<int64_t>(i)));
    ASSIGN_OR_RETURN(Node* result, graph.InsertBefore(anchor, std::move(item)));
    const auto swap = [output, result](Node* n) { return n == output ? result : n; };
    for (Node* reader : readers) {
      NodeArgs args;
      for (const Argument& a : reader->args()) args.push_back(a.MapNodes(swap));
      RETURN_IF_ERROR(graph.SetArgs(reader, std::move(args)));
      bool kwarg_reads = false;
      for (const Kwarg& kw : reader->kwargs()) {
        kw.second.ForEachNode([&](const Node* n) { kwarg_reads |= n == output; });
      }
      if (kwarg_reads) {
        Kwargs kwargs;
        for (const Kwarg& kw : reader->kwargs()) kwargs.push_back({kw.first, kw.second.MapNodes(swap)});
        RETURN_IF_ERROR(graph.SetKwargs(reader, std::move(kwargs)));
      }
    }
    if (replaced != nullptr) replaced->emplace(output, result);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int> FusePatterns(GraphModule& gm, const PatternMatcher& matcher,
                                 const ModuleSchemaRegistry& schemas) {
  const std::vector<PatternMatch> matches = matcher.FindMatches(gm);
  if (matches.empty()) return 0;
  Graph& graph = gm.graph();
  const std::vector<FusionRule>& rules = matcher.rules();
  const int max_depth = ModelLimits().max_module_depth;

  // One walk over the graph: the module paths call_module nodes call, and every get_attr
  // target with all its prefixes (a module read by a get_attr, or holding a tensor one
  // reads, is never deleted nor moved). The views point at interned symbol text, which
  // lives as long as the process.
  std::vector<uint32_t> called_paths;
  absl::flat_hash_set<absl::string_view> get_attr_paths;
  called_paths.reserve(graph.size());
  for (const Node* n = graph.first(); n != nullptr; n = n->next()) {
    PrefetchLaterNode(n);
    if (n->op() == OpKind::kCallModule) {
      called_paths.push_back(n->target().id());
    } else if (n->op() == OpKind::kGetAttr) {
      const absl::string_view t = n->target().name();
      for (size_t dot = t.find('.'); dot != absl::string_view::npos; dot = t.find('.', dot + 1)) {
        get_attr_paths.insert(t.substr(0, dot));
      }
      get_attr_paths.insert(t);
    }
  }
  ModuleUseCounts module_uses(called_paths);
  called_paths = std::vector<uint32_t>();

  // Which match each matched op node belongs to — needed only to check the inputs a custom
  // root or extra-inputs getter returns. With the built-in getters every input is an arg of
  // a node of its own match, and so cannot be an undeclared inner node of another match:
  // such a node has users inside its own match only (matcher.h, rule 3), and matches are
  // disjoint. It may be a declared output of another match (rule 11): it survives as that
  // match's getitem, which the input is re-read as (ExtraInput's consumer) or rewired to
  // (InsertMultiOutput) when that match is applied.
  absl::flat_hash_map<const Node*, int> match_of;
  const bool custom_getters =
      std::any_of(matches.begin(), matches.end(), [](const PatternMatch& m) {
        return m.rule->root_node_getter || m.rule->extra_inputs_getter;
      });
  if (custom_getters) {
    for (size_t m = 0; m < matches.size(); ++m) {
      const Pattern& pattern = matches[m].rule->pattern;
      for (int p = 0; p < pattern.size(); ++p) {
        Node* node = matches[m].node_at(p);  // nullptr: an absent optional position
        if (!pattern.position(p).match_all && node != nullptr) match_of.emplace(node, m);
      }
    }
  }

  // Per pass, per rule: the meta every fused node of the rule gets ({"pattern": rule name},
  // one block shared by all of them: a reference count per fused node, not an allocation),
  // and the schema of each fused type met (found once, not per node).
  std::vector<NodeMeta> pattern_meta;
  pattern_meta.reserve(rules.size());
  for (const FusionRule& rule : rules) {
    ASSIGN_OR_RETURN(NodeMeta meta,
                     NodeMeta::Make({{Symbol::Intern("pattern"), Argument::String(rule.name)}}));
    pattern_meta.push_back(std::move(meta));
  }
  std::vector<std::pair<Symbol, const ModuleSchema*>> schema_cache;
  const auto find_schema = [&](Symbol type) {
    for (const auto& [cached_type, schema] : schema_cache) {
      if (cached_type == type) return schema;
    }
    const ModuleSchema* schema = schemas.Find(type);
    schema_cache.emplace_back(type, schema);
    return schema;
  };

  const Symbol fused_subgraph_type = Symbol::Intern(kFusedSubgraphType);

  // ---- Plan: every check, no mutation ---------------------------------------------------
  // Matches were found from the output backwards; apply them in graph order so that a
  // match reading another's outermost node sees it already replaced.
  std::vector<PlannedFusion> plans;
  // Some extra input holds nodes and has no consumer to re-read it from (ExtraInput).
  bool remap_extras = false;
  plans.reserve(matches.size());
  // First, streaming through the matches, each one's op nodes in execution order and their
  // modules, each looked up once (O(1): the matcher resolved every path). The checking loop
  // below then knows, plans ahead, which nodes and modules it will read, and asks for them
  // early.
  for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
    if (static_cast<size_t>(matches.rend() - it) > kIterationsAhead) {
      for (const Argument& bound : it[kIterationsAhead].bindings) {
        if (bound.is_node()) PrefetchObject(bound.as_node(), sizeof(Node));
      }
    }
    const Pattern& pattern = it->rule->pattern;
    // Built in place (a plan is a few hundred bytes; one per match).
    PlannedFusion& plan = plans.emplace_back();
    plan.match = &*it;
    plan.outermost = it->outermost();
    if (pattern.has_alternatives() || pattern.has_optional()) {
      absl::StatusOr<NodeMeta> own = MatchMeta(gm, *it);
      if (!own.ok()) return Internal(own.status());
      plan.own_meta = *std::move(own);
    }
    for (int p = 0; p < pattern.size(); ++p) {
      Node* node = it->node_at(p);
      if (pattern.position(p).match_all || node == nullptr) continue;
      MatchedOpNode entry;
      entry.node = node;
      if (node->op() == OpKind::kCallModule) entry.module = gm.FindModule(node->target());
      plan.nodes.push_back(entry);
    }
    SortInExecutionOrder(graph, plan.nodes);
  }
  for (size_t i = 0; i < plans.size(); ++i) {
    PlannedFusion& plan = plans[i];
    const PatternMatch& match = *plan.match;
    // What a later plan reads, in three steps (each reads what the one before brought in):
    // its nodes, then its modules, then their tensor and attribute lists.
    if (i + kIterationsAhead < plans.size()) {
      for (const MatchedOpNode& entry : plans[i + kIterationsAhead].nodes) {
        PrefetchObject(entry.node, sizeof(Node));
      }
    }
    if (i + kIterationsAhead / 2 < plans.size()) {
      for (const MatchedOpNode& entry : plans[i + kIterationsAhead / 2].nodes) {
        PrefetchObject(entry.module, sizeof(Module));
      }
    }
    if (i + 1 < plans.size()) {
      for (const MatchedOpNode& entry : plans[i + 1].nodes) PrefetchFieldLists(entry.module, true);
    }
    const FusionRule& rule = *match.rule;
    const Pattern& pattern = rule.pattern;
    const auto in_this_match = [&plan](const Node* n) {
      for (const MatchedOpNode& entry : plan.nodes) {
        if (entry.node == n) return true;
      }
      return false;
    };

    ASSIGN_OR_RETURN(plan.root, rule.RootNode(match));
    if (plan.root == nullptr || !in_this_match(plan.root)) {
      return PlanError(match, "the root node getter returned a node outside the match");
    }
    plan.subgraph = rule.fused_module_type == fused_subgraph_type;
    if (plan.subgraph) {
      // The steps keep every node's own kwargs and constants; the inputs are what the
      // matched nodes read from outside.
      for (const SubgraphInput& input : FusedSubgraphInputs(plan.nodes)) {
        if (input.arg_index >= 0) {
          plan.extras.push_back({Argument(input.node), input.consumer, input.arg_index});
        } else {
          plan.extras.push_back({Argument(input.node)});
          remap_extras = true;
        }
      }
    } else if (!plan.root->kwargs().empty()) {
      return PlanError(match, absl::StrCat("root node '", plan.root->name(),
                                           "' has kwargs, which a fused module cannot take"));
    }
    if (plan.subgraph) {
      // extras are set above
    } else if (rule.extra_inputs_getter) {
      ASSIGN_OR_RETURN(std::vector<Argument> extras, rule.ExtraInputs(match));
      for (Argument& extra : extras) {
        if (extra.ContainsNode()) remap_extras = true;
        plan.extras.push_back({std::move(extra)});
      }
    } else {
      for (int p : rule.extra_input_positions.has_value()
                       ? *rule.extra_input_positions
                       : pattern.default_extra_input_positions()) {
        plan.extras.push_back(BoundExtraInput(match, p));
        if (plan.extras.back().consumer == nullptr && plan.extras.back().value.ContainsNode()) {
          remap_extras = true;
        }
      }
    }
    // Every node the fused node reads must survive the pass and precede its position.
    const auto check_input = [&](const Argument& arg) {
      absl::Status bad;
      arg.ForEachNode([&](const Node* n) {
        if (!bad.ok()) return;
        if (n->graph() != &graph || !graph.Precedes(n, plan.outermost)) {
          bad = PlanError(match, absl::StrCat("input '", n->name(),
                                              "' does not precede the outermost node"));
          return;
        }
        if (in_this_match(n)) {
          bad = PlanError(match, absl::StrCat("input '", n->name(),
                                              "' is a node of the match itself, which "
                                              "fusion erases"));
          return;
        }
        if (!custom_getters) return;  // see match_of
        const auto owner = match_of.find(n);
        if (owner != match_of.end() && matches[owner->second].outermost() != n) {
          bad = PlanError(match, absl::StrCat("input '", n->name(), "' is an inner node of "
                                              "another match, which fusion erases"));
        }
      });
      return bad;
    };
    if (!plan.subgraph) {
      for (const Argument& arg : plan.root->args()) RETURN_IF_ERROR(check_input(arg));
    }
    for (const ExtraInput& extra : plan.extras) RETURN_IF_ERROR(check_input(extra.value));

    // A module only this node calls, that has no children and that no get_attr reads is
    // deleted with the match: the fuser may move it into the fused module rather than copy
    // it.
    for (size_t n = 0; n < plan.nodes.size(); ++n) {
      MatchedOpNode& entry = plan.nodes[n];
      if (entry.node->op() != OpKind::kCallModule) continue;
      const Symbol path = entry.node->target();
      const bool removable =
          entry.module != nullptr && entry.module->children().empty() &&
          (get_attr_paths.empty() || !get_attr_paths.contains(path.name()));
      if (removable) plan.removable |= uint64_t{1} << n;
      entry.movable = removable && module_uses[path] == 1;
    }

    if (plan.root->op() == OpKind::kCallModule && module_uses[plan.root->target()] == 1) {
      for (const MatchedOpNode& entry : plan.nodes) {
        if (entry.node == plan.root) plan.reuse_slot = entry.module;
      }
    }
    plan.pending.root_slot = plan.reuse_slot;
    plan.pending.storage = plan.reuse_slot != nullptr ? &plan.storage : nullptr;
    ASSIGN_OR_RETURN(plan.module,
                     rule.FuseForPass(gm, match, plan.root, plan.nodes, &plan.pending));
    const bool in_place = plan.pending.fused_in_place && plan.reuse_slot != nullptr;
    const bool in_storage = plan.module == nullptr && plan.pending.fused_in_storage &&
                            plan.storage.has_value();
    if (plan.module == nullptr && !in_place && !in_storage) {
      return PlanError(match, "the fuser returned no module");
    }
    const Symbol fused_type = in_place     ? plan.reuse_slot->type()
                              : in_storage ? plan.storage->type()
                                           : plan.module->type();
    const ModuleSchema* schema = find_schema(fused_type);
    if (schema == nullptr) {
      return PlanError(match, absl::StrCat("fused module type '", fused_type.name(),
                                           "' is not a registered module type"));
    }
    // Where the loader could not check the children against the type, because they depend
    // on the match (an optional position; a leaf of several forms, as onnx.Conv's Conv1d /
    // Conv2d / Conv3d; forms with no module type, as onnx.Clip's torch.clamp:
    // FusionRule::ChildTypesFromPattern), each fused module is checked here, before
    // anything changes.
    if (!rule.children_checked_at_load && !schema->children.empty()) {
      const Module& built = in_place ? *plan.reuse_slot : in_storage ? *plan.storage : *plan.module;
      const absl::Status fits = CheckModuleAgainstSchema(
          built, *schema, absl::StrCat("fused module of type ", schema->type));
      if (!fits.ok()) return PlanError(match, fits.message());
    }
    if (!in_place) {
      RETURN_IF_ERROR(CheckFusedDepth(match, *plan.root,
                                      in_storage ? *plan.storage : *plan.module, max_depth));
    }
    const int inputs =
        static_cast<int>((plan.subgraph ? 0 : plan.root->num_args()) + plan.extras.size());
    if (inputs < schema->min_inputs ||
        (schema->max_inputs != ModuleSchema::kAnyNumber && inputs > schema->max_inputs)) {
      return PlanError(match, absl::StrCat("fused module type '", schema->type, "' takes ",
                                           schema->min_inputs, "..", schema->max_inputs,
                                           " inputs; the fused node would have ", inputs));
    }
  }

  // ---- Apply ----------------------------------------------------------------------------
  // Outermost node -> its fused node; kept only for extra inputs that hold nodes and have
  // no consumer to re-read them from (see ExtraInput).
  absl::flat_hash_map<Node*, Node*> replaced;
  if (remap_extras) replaced.reserve(plans.size());
  absl::flat_hash_map<std::string, int> next_suffix;  // for FreshModulePath
  std::vector<Symbol> unused_modules;                 // removed after the last fusion
  const auto remap = [&replaced](Node* n) {
    const auto it = replaced.find(n);
    return it == replaced.end() ? n : it->second;
  };
  for (size_t p = 0; p < plans.size(); ++p) {
    PlannedFusion& plan = plans[p];
    if (p + kIterationsAhead < plans.size()) {
      // What a later fusion reads and writes: its nodes, the modules it moves or
      // installs, the fused module built for it.
      const PlannedFusion& later = plans[p + kIterationsAhead];
      for (const MatchedOpNode& entry : later.nodes) {
        PrefetchObject(entry.node, sizeof(Node));
        PrefetchObject(entry.module, sizeof(Module));
      }
      PrefetchObject(later.module.get(), sizeof(Module));
    }
    if (p + kIterationsAhead / 2 < plans.size()) {
      // The tensor lists of the modules a nearer fusion moves or folds (their module
      // objects were asked for above, a few fusions ago).
      for (const MatchedOpNode& entry : plans[p + kIterationsAhead / 2].nodes) {
        PrefetchFieldLists(entry.module, false);
      }
    }
    Node* fused_node = nullptr;
    NodeSpec spec;
    spec.op = OpKind::kCallModule;
    // The root's args as they are now: ReplaceAllUsesWith has pointed every arg that read
    // an earlier fusion's outermost node at its fused node.
    spec.args.reserve(plan.root->num_args() + plan.extras.size());
    if (!plan.subgraph) spec.args.assign(plan.root->args().begin(), plan.root->args().end());
    for (const ExtraInput& extra : plan.extras) {
      if (extra.consumer != nullptr) {
        spec.args.push_back(extra.consumer->arg(extra.arg_index));
      } else {
        spec.args.push_back(extra.value.ContainsNode() ? extra.value.MapNodes(remap)
                                                       : extra.value);
      }
    }

    // Install the fused module, moving in the parts it takes from the tree.
    plan.pending.ApplyMoves();
    if (plan.reuse_slot != nullptr) {
      if (plan.module != nullptr) {
        *plan.reuse_slot = std::move(*plan.module);
        plan.pending.Relocate(plan.module.get(), plan.reuse_slot);
        plan.module.reset();
      } else if (plan.storage.has_value()) {
        *plan.reuse_slot = std::move(*plan.storage);
        plan.pending.Relocate(&*plan.storage, plan.reuse_slot);
        plan.storage.reset();
      }  // else the fused module is the slot's own, folded in place
      spec.target = plan.root->target();
    } else {
      const std::string path = FreshModulePath(
          gm,
          plan.root->op() == OpKind::kCallModule ? plan.root->target().name()
                                                 : absl::string_view(plan.root->name()),
          next_suffix);
      const absl::Status status = gm.SetModule(path, std::move(plan.module));
      if (!status.ok()) return Internal(status);
      spec.target = Symbol::Intern(path);
    }

    // Inserted without a name: it takes the root's as the root is erased below
    // (EraseAndPassName), so no name is made up, indexed and dropped in between.
    spec.meta = pattern_meta[plan.match->rule - rules.data()];
    if (!plan.own_meta.empty()) spec.meta = std::move(plan.own_meta);
    const Pattern& pattern = plan.match->rule->pattern;
    if (!pattern.has_declared_outputs()) {
      absl::StatusOr<Node*> fused = graph.InsertBeforeUnnamed(plan.outermost, std::move(spec));
      if (!fused.ok()) return Internal(fused.status());
      absl::StatusOr<int> rewired = graph.ReplaceAllUsesWith(plan.outermost, *fused);
      if (!rewired.ok()) return Internal(rewired.status());
      fused_node = *fused;
    } else {
      absl::Status status = InsertMultiOutput(graph, plan, std::move(spec), &fused_node,
                                              remap_extras ? &replaced : nullptr);
      if (!status.ok()) return Internal(status);
    }
    absl::StatusOr<Node*> fused = fused_node;

    // Erase last in graph order first (each erased node's users are gone by then), and
    // note the modules nothing calls any more: leaf modules no get_attr reads, as
    // torch.fx.GraphModule keeps only the submodules its graph references. The root hands
    // its name to the fused node as it goes (one name-index update, no copy of the text).
    for (size_t i = plan.nodes.size(); i-- > 0;) {
      Node* n = plan.nodes[i].node;
      if (n->op() == OpKind::kCallModule && !(plan.reuse_slot != nullptr && n == plan.root)) {
        const Symbol freed = n->target();
        if (--module_uses[freed] == 0 && (plan.removable >> i & 1) != 0) {
          unused_modules.push_back(freed);
        }
      }
      const absl::Status status =
          n == plan.root ? graph.EraseAndPassName(n, *fused) : graph.Erase(n);
      if (!status.ok()) return Internal(status);
    }
    if (remap_extras && !pattern.has_declared_outputs()) replaced.emplace(plan.outermost, *fused);
  }
  // All at once: one graph scan and one pass per parent, where removing them one by one
  // would rescan the graph and the parent's children for each.
  if (!unused_modules.empty()) {
    const absl::Status status = gm.RemoveModules(unused_modules);
    if (!status.ok()) return Internal(status);
  }
  // Batch-norm folds into a copied conv / linear (a moved one was scaled when installed)
  // scale their weights only now: the modules they were copied from are gone, so the data
  // is no longer shared and is scaled in place, not copied (a weight still shared, e.g.
  // read by a get_attr, is copied first by Tensor's copy-on-write).
  for (PlannedFusion& plan : plans) plan.pending.weight_scale.Apply();
  return static_cast<int>(plans.size());
}

namespace {

// The nodes bound at op positions of `match` (not MatchAllNode positions, which do not
// claim; an absent optional position is bound to None and yields nothing), in position order.
std::vector<const Node*> ClaimedNodes(const PatternMatch& match) {
  std::vector<const Node*> nodes;
  const Pattern& pattern = match.rule->pattern;
  for (int i = 0; i < pattern.size(); ++i) {
    if (pattern.position(i).match_all) continue;
    if (const Node* n = match.node_at(i)) nodes.push_back(n);
  }
  return nodes;
}

}  // namespace

std::string MatchOverlap::ToString() const {
  return absl::StrCat(winner, " at ", winner_at, " took ", absl::StrJoin(nodes, ", "), " from ",
                      loser, " at ", loser_at);
}

std::vector<MatchOverlap> FindMatchOverlaps(const GraphModule& gm, const PatternMatcher& matcher) {
  const std::vector<PatternMatch> winners = matcher.FindMatches(gm);
  // Which winning match claimed each node.
  absl::flat_hash_map<const Node*, int> claimed_by;
  for (size_t w = 0; w < winners.size(); ++w) {
    for (const Node* n : ClaimedNodes(winners[w])) claimed_by.emplace(n, static_cast<int>(w));
  }
  struct Found {
    int winner;
    int rule;
    MatchOverlap overlap;
  };
  std::vector<Found> found;
  const std::vector<FusionRule>& rules = matcher.rules();
  for (size_t r = 0; r < rules.size(); ++r) {
    // The rule alone: its matches as if no other rule competed. Create cannot fail for a
    // rule the matcher already validated.
    absl::StatusOr<PatternMatcher> alone = PatternMatcher::Create({rules[r]});
    if (!alone.ok()) continue;
    for (const PatternMatch& m : alone->FindMatches(gm)) {
      // Per winner, the shared nodes in this match's position order.
      absl::InlinedVector<std::pair<int, std::vector<std::string>>, 2> shared;
      for (const Node* n : ClaimedNodes(m)) {
        auto it = claimed_by.find(n);
        if (it == claimed_by.end() || winners[it->second].rule->name == rules[r].name) continue;
        auto entry = std::find_if(shared.begin(), shared.end(),
                                  [&](const auto& e) { return e.first == it->second; });
        if (entry == shared.end()) {
          shared.emplace_back(it->second, std::vector<std::string>{});
          entry = shared.end() - 1;
        }
        entry->second.push_back(n->name());
      }
      for (auto& [w, nodes] : shared) {
        MatchOverlap o{winners[w].rule->name, winners[w].outermost()->name(), rules[r].name,
                       m.outermost()->name(), std::move(nodes)};
        found.push_back(Found{w, static_cast<int>(r), std::move(o)});
      }
    }
  }
  std::stable_sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return a.winner != b.winner ? a.winner < b.winner : a.rule < b.rule;
  });
  std::vector<MatchOverlap> overlaps;
  overlaps.reserve(found.size());
  for (Found& f : found) overlaps.push_back(std::move(f.overlap));
  return overlaps;
}

absl::StatusOr<FuseOutcome> FusePatternsWithOptions(GraphModule& gm, const PatternMatcher& matcher,
                                                    const FuseOptions& options,
                                                    const ModuleSchemaRegistry& schemas) {
  FuseOutcome outcome;
  // Before fusing: the overlaps are between matches of the unfused graph.
  if (options.report_overlaps) outcome.overlaps = FindMatchOverlaps(gm, matcher);
  ASSIGN_OR_RETURN(outcome.fused, FusePatterns(gm, matcher, schemas));
  return outcome;
}

}  // namespace fuselage
