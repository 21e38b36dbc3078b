// The fusion pass ("fuse-patterns"): replaces every match of a PatternMatcher's rules by
// one call_module node of the fused module.
//
//   x ─► conv ─► bn ─► add ─► relu ─► users          x ─┐
//   identity ─────────────┘                   ==>   identity ─► ConvAddReLU2d ─► users
//
// For each match (found read-only first, see matcher.h):
//  - the fused module is built by the rule's fuser (fusion_rule.h) and installed at the
//    root node's module path when only the root used that module (as PyTorch's fuse_fx
//    does), else at a fresh path. A matched module that the pass deletes with the match
//    (no other call_module node or get_attr uses it, no children) is moved into the fused
//    module, not copied; any other is copied and stays;
//  - a call_module node of it is inserted at the outermost node's position, with args =
//    the root's args followed by the extra inputs; every use of the outermost node is
//    rewired to it; the other matched nodes are erased; it takes the root node's name and
//    records the rule in meta "pattern" (Graph::SetMeta(node, "pattern", String(name)));
//  - modules no call_module or get_attr node uses any more are removed from the tree.
//
// A multi-output match (pattern.h `-> $name`; its rule fuses into fuselage.FusedSubgraph,
// fusion_rule.h) becomes one fused node whose args are the match's inputs
// (FusedSubgraphInputs), placed before the first node outside the match that reads one of
// its outputs (or at the outermost node), followed by one `operator.getitem(fused, i)` per
// output i read outside; those readers read the getitem instead.
//
//   x ─► conv ─► bn ─► relu ─► users            x ─► FusedSubgraph ─┬─► getitem 0 ─► users
//                 └──────────► add                                  └─► getitem 1 ─► add
//
// All of it is checked before the graph is touched — every root and extra-input getter,
// every fuser, that the fused type is registered and takes that many inputs, that the new
// args read no node the pass erases, that the fused module nests no deeper than a model
// file holds (ModelLimits::max_module_depth: a fused model always saves and loads). A failing fusion returns the error and leaves the
// GraphModule exactly as it was. (Mutation itself cannot fail once those checks pass; if it
// ever does, that is reported as Internal.)
//
//   ASSIGN_OR_RETURN(PatternMatcher matcher, BuildFusionMatcher(config));  // patterns/matcher.h
//   ASSIGN_OR_RETURN(int fused, FusePatterns(gm, matcher));  // 0: the graph is unchanged
//   RETURN_IF_ERROR(gm.Verify());
//
// With the overlap report (FuseOptions):
//   ASSIGN_OR_RETURN(FuseOutcome out, FusePatternsWithOptions(gm, matcher, {.report_overlaps = true}));
//   for (const MatchOverlap& o : out.overlaps) std::cout << o.ToString() << "\n";
#ifndef FUSELAGE_PATTERNS_FUSE_H_
#define FUSELAGE_PATTERNS_FUSE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph_module.h"
#include "graph/module_schema.h"
#include "patterns/matcher.h"

namespace fuselage {

inline constexpr char kFusePassName[] = "fuse-patterns";

// Returns the number of matches fused (0: the graph is unchanged).
absl::StatusOr<int> FusePatterns(
    GraphModule& gm, const PatternMatcher& matcher,
    const ModuleSchemaRegistry& schemas = ModuleSchemaRegistry::Global());

// A match that claimed nodes another rule would have matched (issue 21 item 5, `fuselage
// fuse --report-overlaps`): the winner fused, the loser, tried on the graph alone, matched
// at `loser_at` with op nodes that the winner took.
struct MatchOverlap {
  std::string winner;     // rule name of the match that fused: "conv_bn_relu"
  std::string winner_at;  // its outermost node: "relu"
  std::string loser;      // the rule that lost those nodes: "bn_relu"
  std::string loser_at;   // where the loser, alone, matched: "relu"
  std::vector<std::string> nodes;  // the op nodes both claim, in the loser's pattern order

  // "conv_bn_relu at relu took bn, relu from bn_relu at relu"
  std::string ToString() const;
};

// Every overlap of the matches `matcher` finds (what FusePatterns fuses) with the matches
// each rule would find on the graph on its own: for each rule, a scan of that rule alone,
// and each of its matches that shares op nodes (MatchAllNode bindings do not count) with a
// winning match of another rule is reported, once per (winner, loser match). Read-only;
// costs one scan per rule, so it is an option. Ordered by winner in discovery order, then
// by rule order.
std::vector<MatchOverlap> FindMatchOverlaps(const GraphModule& gm, const PatternMatcher& matcher);

struct FuseOptions {
  // Also compute FindMatchOverlaps (before fusing) into FuseOutcome::overlaps.
  bool report_overlaps = false;
};

struct FuseOutcome {
  int fused = 0;                        // as FusePatterns returns
  std::vector<MatchOverlap> overlaps;  // empty unless FuseOptions::report_overlaps
};

// FusePatterns with options. On an error the graph is unchanged.
absl::StatusOr<FuseOutcome> FusePatternsWithOptions(
    GraphModule& gm, const PatternMatcher& matcher, const FuseOptions& options,
    const ModuleSchemaRegistry& schemas = ModuleSchemaRegistry::Global());

}  // namespace fuselage

#endif  // FUSELAGE_PATTERNS_FUSE_H_
