#include "patterns/fuse.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"

namespace fuselage {
namespace {

// One fusion, fully decided before the graph is touched.
struct PlannedFusion {
  const PatternMatch* match = nullptr;
  Node* outermost = nullptr;
  Node* root = nullptr;
  std::vector<Argument> args;          // root args + extra inputs, before remapping
  std::unique_ptr<Module> module;
  PendingWeightScale weight_scale;     // a batch-norm fold's weight half, applied last
  bool reuse_root_path = false;
  std::vector<Node*> erase_order;      // matched op nodes, last in graph order first
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

}  // namespace

absl::StatusOr<int> FusePatterns(GraphModule& gm, const PatternMatcher& matcher,
                                 const ModuleSchemaRegistry& schemas) {
  const std::vector<PatternMatch> matches = matcher.FindMatches(gm);
  if (matches.empty()) return 0;
  Graph& graph = gm.graph();

  // Which match each matched op node belongs to, so new args can be checked and remapped.
  absl::flat_hash_map<const Node*, int> match_of;
  for (size_t m = 0; m < matches.size(); ++m) {
    const Pattern& pattern = matches[m].rule->pattern;
    for (int p = 0; p < pattern.size(); ++p) {
      if (!pattern.position(p).match_all) match_of.emplace(matches[m].node_at(p), m);
    }
  }
  // How many call_module nodes use each module path.
  absl::flat_hash_map<Symbol, int> module_uses;
  absl::flat_hash_set<std::string> get_attr_paths;  // every get_attr target and its prefixes
  for (const Node* n = graph.first(); n != nullptr; n = n->next()) {
    if (n->op() == OpKind::kCallModule) {
      ++module_uses[n->target()];
    } else if (n->op() == OpKind::kGetAttr) {
      const absl::string_view t = n->target().name();
      for (size_t dot = t.find('.'); dot != absl::string_view::npos; dot = t.find('.', dot + 1)) {
        get_attr_paths.insert(std::string(t.substr(0, dot)));
      }
      get_attr_paths.insert(std::string(t));
    }
  }

  // ---- Plan: every check, no mutation ---------------------------------------------------
  // Matches were found from the output backwards; apply them in graph order so that a
  // match reading another's outermost node sees it already replaced.
  std::vector<PlannedFusion> plans;
  plans.reserve(matches.size());
  for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
    const PatternMatch& match = *it;
    const FusionRule& rule = *match.rule;
    PlannedFusion plan;
    plan.match = &match;
    plan.outermost = match.outermost();
    const int self = match_of.at(plan.outermost);
    ASSIGN_OR_RETURN(plan.root, rule.RootNode(match));
    if (plan.root == nullptr || !match_of.contains(plan.root) ||
        match_of.at(plan.root) != self) {
      return PlanError(match, "the root node getter returned a node outside the match");
    }
    if (!plan.root->kwargs().empty()) {
      return PlanError(match, absl::StrCat("root node '", plan.root->name(),
                                           "' has kwargs, which a fused module cannot take"));
    }
    ASSIGN_OR_RETURN(std::vector<Argument> extras, rule.ExtraInputs(match));
    plan.args.assign(plan.root->args().begin(), plan.root->args().end());
    for (Argument& extra : extras) plan.args.push_back(std::move(extra));
    // Every node the fused node reads must survive the pass and precede its position.
    for (const Argument& arg : plan.args) {
      absl::Status bad;
      arg.ForEachNode([&](const Node* n) {
        if (!bad.ok()) return;
        if (n->graph() != &graph || !graph.Precedes(n, plan.outermost)) {
          bad = PlanError(match, absl::StrCat("input '", n->name(),
                                              "' does not precede the outermost node"));
          return;
        }
        const auto owner = match_of.find(n);
        if (owner == match_of.end()) return;
        if (owner->second == self) {
          bad = PlanError(match, absl::StrCat("input '", n->name(),
                                              "' is a node of the match itself, which "
                                              "fusion erases"));
        } else if (matches[owner->second].outermost() != n) {
          bad = PlanError(match, absl::StrCat("input '", n->name(), "' is an inner node of "
                                              "another match, which fusion erases"));
        }
      });
      RETURN_IF_ERROR(bad);
    }
    ASSIGN_OR_RETURN(plan.module, rule.Fuse(gm, match, &plan.weight_scale));
    if (plan.module == nullptr) return PlanError(match, "the fuser returned no module");
    const ModuleSchema* schema = schemas.Find(plan.module->type());
    if (schema == nullptr) {
      return PlanError(match, absl::StrCat("fused module type '", plan.module->type().name(),
                                           "' is not a registered module type"));
    }
    const int inputs = static_cast<int>(plan.args.size());
    if (inputs < schema->min_inputs ||
        (schema->max_inputs != ModuleSchema::kAnyNumber && inputs > schema->max_inputs)) {
      return PlanError(match, absl::StrCat("fused module type '", schema->type, "' takes ",
                                           schema->min_inputs, "..", schema->max_inputs,
                                           " inputs; the fused node would have ", inputs));
    }
    plan.reuse_root_path = plan.root->op() == OpKind::kCallModule &&
                           module_uses[plan.root->target()] == 1;
    const Pattern& pattern = rule.pattern;
    for (int p = 0; p < pattern.size(); ++p) {
      if (!pattern.position(p).match_all) plan.erase_order.push_back(match.node_at(p));
    }
    std::sort(plan.erase_order.begin(), plan.erase_order.end(),
              [&graph](const Node* a, const Node* b) { return graph.Precedes(b, a); });
    plans.push_back(std::move(plan));
  }

  // ---- Apply ----------------------------------------------------------------------------
  absl::flat_hash_map<Node*, Node*> replaced;  // outermost node -> its fused node
  absl::flat_hash_map<std::string, int> next_suffix;  // for FreshModulePath
  std::vector<std::string> unused_modules;            // removed after the last fusion
  const auto remap = [&replaced](Node* n) {
    const auto it = replaced.find(n);
    return it == replaced.end() ? n : it->second;
  };
  for (PlannedFusion& plan : plans) {
    const FusionRule& rule = *plan.match->rule;
    std::vector<Argument> args;
    args.reserve(plan.args.size());
    for (const Argument& a : plan.args) args.push_back(a.MapNodes(remap));

    const std::string root_name = plan.root->name();
    const std::string path =
        plan.reuse_root_path
            ? std::string(plan.root->target().name())
            : FreshModulePath(gm,
                              plan.root->op() == OpKind::kCallModule
                                  ? plan.root->target().name()
                                  : absl::string_view(root_name),
                              next_suffix);
    absl::Status status = gm.SetModule(path, std::move(plan.module));
    if (!status.ok()) return Internal(status);

    const Symbol path_symbol = Symbol::Intern(path);
    NodeSpec spec;
    spec.op = OpKind::kCallModule;
    spec.target = path_symbol;
    spec.args = std::move(args);
    absl::StatusOr<Node*> fused = graph.InsertBefore(plan.outermost, std::move(spec));
    if (!fused.ok()) return Internal(fused.status());
    absl::StatusOr<int> rewired = graph.ReplaceAllUsesWith(plan.outermost, *fused);
    if (!rewired.ok()) return Internal(rewired.status());

    std::vector<Symbol> freed_paths;
    for (Node* n : plan.erase_order) {
      if (n->op() == OpKind::kCallModule && !(plan.reuse_root_path && n == plan.root)) {
        freed_paths.push_back(n->target());
      }
      status = graph.Erase(n);
      if (!status.ok()) return Internal(status);
    }
    graph.Rename(*fused, root_name);
    status = graph.SetMeta(*fused, "pattern", Argument::String(rule.name));
    if (!status.ok()) return Internal(status);
    replaced.emplace(plan.outermost, *fused);
    if (!plan.reuse_root_path) module_uses[path_symbol] = 1;

    // Drop modules nothing uses any more (leaf modules only, and none a get_attr reads),
    // as torch.fx.GraphModule keeps only the submodules its graph references.
    for (Symbol freed : freed_paths) {
      if (--module_uses[freed] > 0) continue;
      const absl::string_view freed_path = freed.name();
      const Module* module = gm.FindModule(freed_path);
      if (module == nullptr || !module->children().empty() ||
          get_attr_paths.contains(freed_path)) {
        continue;
      }
      unused_modules.push_back(std::string(freed_path));
    }
  }
  // All at once: one graph scan and one pass per parent, where removing them one by one
  // would rescan the graph and the parent's children for each.
  if (!unused_modules.empty()) {
    const absl::Status status = gm.RemoveModules(unused_modules);
    if (!status.ok()) return Internal(status);
  }
  // Batch-norm folds scale their weights only now: the modules they were copied from are
  // gone, so the data is no longer shared and is scaled in place, not copied (a weight
  // still shared, e.g. read by a get_attr, is copied first by Tensor's copy-on-write).
  for (PlannedFusion& plan : plans) plan.weight_scale.Apply();
  return static_cast<int>(plans.size());
}

}  // namespace fuselage
