// PatternMatcher: finds the matches of a set of fusion rules in a graph, read-only, and
// explains why a rule did not match where its outermost op did.
//
// Semantics (PyTorch FX's fuse_fx `_find_matches` / `_is_match`):
//  1. Nodes are scanned from the output backwards (reverse topological order).
//  2. At each node not already in a match, the rules whose outermost op can be that node
//     are tried, longest pattern first (length = leaves including MatchAllNode, as
//     PyTorch's sorted_patterns_dict), ties in registration order. The first rule that
//     matches wins; the scan moves on. A rule's `benefit` (FusionRule; config field
//     `benefit`) comes before length: higher benefit is tried first. Benefit orders rules
//     at one node only: a match found earlier in the scan (nearer the output) still
//     claims its nodes before a higher-benefit rule starting at a later node is tried.
//  3. A node belongs to at most one match. **Users outside the match:** only the outputs
//     of a match may be read outside it: the outermost node and the declared outputs
//     (pattern.h `-> $name`, rule 11). Every other inner node (every op position but the
//     outermost that is not declared) may have no user outside the match — so it is never
//     a graph output and never read by a node the fusion keeps; otherwise the match fails
//     and Explain names the node, its users and the one outside:
//       "ReLU → arg 0 (bn): 2 users (relu, add); inner nodes may have 1: add reads bn
//        outside the match, and position 0 is not a declared output".
//     An undeclared inner node read by one
//     position must have exactly one user (its parent); a named op position read again by
//     `$name` (pattern.h) may have several, all op nodes of the match (checked once the
//     match is whole). `mul(x, sigmoid(x))` with the sigmoid also read by another node does
//     not match. The outermost node may have any number of users. Wildcards (MatchAllNode,
//     `$x`) are not claimed and may have any users.
//  4. An op position with pattern args requires the node to have exactly that many
//     positional args, each matching recursively; one without pattern args does not look
//     at the node's args.
//  5. MatchAllNode matches any arg and does not claim it (it may be in another match).
//  6. call_module nodes match by their module's *type*; call_function by qualified name;
//     call_method by method name. Symbols are compared, never strings.
//  7. Rules are indexed by their outermost op: a node is only tried against rules that
//     can start there.
//  8. (issue 21; pattern.h has the syntax) A position with alternatives (`ReLU | ReLU6`)
//     accepts a node any of its leaves accepts. A position's predicates are checked after
//     its op and kwargs matched, in order; the first false one (or one whose subject the
//     node lacks: a module without that attribute, a node without a recorded shape) fails
//     the position, and Explain gives its text and the values it saw:
//       "predicate 'groups == in_channels' is false (groups = 1, in_channels = 32)".
//  9. An optional position (`BatchNorm2d?`) is tried present first, then absent: bound to
//     None, its arg 0 matched against the same edge (so that node is an inner node as
//     usual). The choice is made at the position and not revisited when a later sibling
//     fails; when both fail Explain gives the present attempt's reason plus the absent
//     one's: " (also tried absent: is call_module nn.MaxPool2d; expected Conv2d)", with
//     the absent attempt's edge first when it failed on another edge. An absent position
//     claims nothing.
// 10. (issue 21) A named capture's later occurrence `$name` must bind what its first
//     occurrence bound: the same node, or an equal constant; a constant leaf (`3`) only an
//     equal constant. Relations (`shape == @c.shape`) are checked after the whole pattern
//     matched, the first false one failing the match with the values it saw.
// 11. (issue 21) Multi-output patterns: a declared output is an inner node that may have
//     any users, inside and outside the match; a match carries it at its position
//     (PatternMatch::node_at(pattern.output_positions()[i]) is output i). Once matched it
//     stays claimed: a later attempt that reaches it (through an outside user) fails with
//     "a declared output of another match". The fused node replaces every matched node at
//     once, so it goes before the first outside reader of a declared output; a match with
//     an input that does not come before that reader (the reader feeds the match: no
//     single node can replace it) fails, and Explain names the output, the reader and the
//     input. The outermost node's users are unrestricted, as before. A multi-output match
//     whose op nodes read a declared output of a match found earlier is not taken (the
//     first fused node may move that reader ahead of where the second's inputs are).
//
// Where fuselage deliberately differs from PyTorch 1.13 (each a bug there):
//  a. Keyword args are not ignored: a node matches an op position only if the position
//     allows each of its kwargs (pattern.h). PyTorch fuses `torch.add(x, y, alpha=2)` as
//     if it were `x + y`; here it does not match.
//  b. MatchAllNode bound to a constant (`add(bn(conv(x)), 1.0)`) is an ordinary binding.
//     PyTorch's apply_match reads `.name` off the constant and raises AttributeError.
//  c. Commutative binary ops (add, mul) match with their two args in either order, args
//     as written tried first: `add(identity, bn(conv(x)))` matches
//     `(add, (BatchNorm2d, Conv2d), MatchAllNode)`. PyTorch needs a second, swapped
//     pattern for it.
//  d. `add` / `mul` / `relu` name every spelling (operator.add, torch.add, the add method)
//     where PyTorch patterns name one Python object each.
//  e. A match is rejected if one node would fill two op positions, or an op node of the
//     match is also what a MatchAllNode position binds (e.g. `mul(bn, bn)`): fusing those
//     would erase a node the fused node still reads. PyTorch does not check.
//
// Performance: rules are indexed in dense per-op-kind tables keyed by symbol id; the
// scan keeps one reusable binding buffer and copies a match's bindings into blocks shared
// by all the matches of the scan (no allocation per match);
// matching is linear in nodes times (small) pattern size.
//
//   ASSIGN_OR_RETURN(BackendConfig config, GetBackendConfig("qnnpack"));
//   ASSIGN_OR_RETURN(PatternMatcher matcher, BuildFusionMatcher(config));
//   std::vector<PatternMatch> matches = matcher.FindMatches(gm);  // read-only
//   std::cout << matcher.Explain(gm).ToString();  // where each pattern failed, and why
#ifndef FUSELAGE_PATTERNS_MATCHER_H_
#define FUSELAGE_PATTERNS_MATCHER_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph_module.h"
#include "patterns/fusion_rule.h"
#include "patterns/pattern.h"

namespace fuselage {

// Why a rule did not match at a node where its outermost op did.
struct MatchFailure {
  std::string rule;         // "conv_bn_add_relu"
  std::string node;         // where the outermost op matched: "relu_1"
  std::string path;         // the failing edge: "add → arg 0 (bn1)"
  std::string position;     // the failing pattern position as a dotted path: "0.0"
  std::string reason;       // "2 users (add, cat_3); inner nodes may have 1"

  // "conv_bn_add_relu at relu_1: add → arg 0 (bn1): 2 users (add, cat_3); inner nodes may
  // have 1"
  std::string ToString() const;
};

// What `fuselage explain` prints: every failure, then the matches per rule.
struct ExplainReport {
  std::vector<MatchFailure> failures;  // in scan order (from the output backwards)
  std::vector<std::pair<std::string, int>> matches_per_rule;  // registration order
  std::string ToString() const;
};

// False when no match of `pattern` can break difference (e), whatever the graph: every
// position has at most one pattern arg, so the positions form a chain p0 -> p1 -> ... -> pk
// and the node bound at p(i+1) is an arg of the node bound at p(i). A graph's args precede
// their users (Graph keeps it; Verify checks it), so each bound node strictly precedes the
// one bound above it: the op nodes are pairwise distinct, and a MatchAllNode (only ever at
// the end of the chain, having no pattern args) binds an arg of the lowest op node, so any
// node it holds precedes every op node of the match. True for a pattern with a position
// of two or more pattern args (add(bn(conv), MatchAllNode), mul(bn, bn), ...), where two
// subtrees can reach one node; the matcher checks those matches (CheckDistinct).
bool PatternMayBindANodeTwice(const Pattern& pattern);

class PatternMatcher {
 public:
  // Validates every rule (FusionRule::Validate) and that names are unique, then builds
  // the index. The rules are copied.
  static absl::StatusOr<PatternMatcher> Create(std::vector<FusionRule> rules);

  // All matches, in discovery order (from the output backwards). The graph is not touched.
  // Each match's `rule` points into this matcher, which must outlive the matches.
  std::vector<PatternMatch> FindMatches(const GraphModule& gm) const;

  // Runs the same scan and reports, for each node tried, every rule whose outermost op
  // matched there but whose whole pattern did not (rules tried after the winning one are
  // not tried, so not reported), plus the count of matches per rule.
  ExplainReport Explain(const GraphModule& gm) const;

  const std::vector<FusionRule>& rules() const { return rules_; }

 private:
  class Scan;

  PatternMatcher() = default;
  // One rule to try at a node, with what the scan needs to rule it out from the node's
  // first arg without entering the pattern (Scan::FirstArgMayMatch), copied out of the
  // rule's pattern so that deciding reads one small record.
  struct Candidate {
    static constexpr int kInlineAlternatives = 3;  // add, mul and relu have 3
    int rule;  // index into rules_
    // The arg count the outermost op's pattern args require, or -1 when the pre-check does
    // not apply (no pattern args, or a commutative op).
    int16_t num_args;
    // The outermost op's first pattern arg: -1 if it is a MatchAllNode; else how many
    // alternatives it accepts, the first kInlineAlternatives of them in `alternatives`.
    int16_t num_alternatives;
    OpRef alternatives[kInlineAlternatives];
  };

  // Candidate rules for a node of kind `op` whose key (target, or module type for
  // call_module) is `key`, in trial order; empty if none.
  std::pair<const Candidate*, const Candidate*> Candidates(OpKind op, Symbol key) const {
    const int k = static_cast<int>(op) & 7;
    const std::vector<uint32_t>& offsets = offsets_[k];
    const uint32_t id = key.id();
    if (key.empty() || static_cast<size_t>(id) + 1 >= offsets.size()) return {nullptr, nullptr};
    const Candidate* base = candidates_[k].data();
    return {base + offsets[id], base + offsets[id + 1]};
  }
  static Candidate MakeCandidate(const std::vector<FusionRule>& rules, int rule);

  std::vector<FusionRule> rules_;
  // Per op kind: offsets_[op][id] .. offsets_[op][id + 1] delimit the candidates in
  // candidates_[op] for symbol id `id`, in trial order.
  std::vector<uint32_t> offsets_[8];
  std::vector<Candidate> candidates_[8];
  // By rule index: PatternMayBindANodeTwice(rule.pattern), so the scan checks difference
  // (e) only where a match can break it.
  std::vector<char> check_distinct_;
  // By rule index: the pattern has a referenced op position or a relation predicate, so a
  // match is checked whole (rules 3 and 10) before it is accepted.
  std::vector<char> check_whole_;
};

}  // namespace fuselage

#endif  // FUSELAGE_PATTERNS_MATCHER_H_
