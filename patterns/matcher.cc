#include "patterns/matcher.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/status_macros.h"

namespace fuselage {
namespace {

constexpr size_t kMaxUsersListed = 4;
// Bindings per storage block of a scan (24 bytes each): ~100 KB, one allocation per ~1000
// matches.
constexpr size_t kBindingsPerBlock = 4096;

bool IsNumber(const Argument& a) { return a.is_int() || a.is_float(); }

// Equality of a node's kwarg value with a pattern constant; 1 == 1.0 as in Python.
bool ConstantEquals(const Argument& value, const Argument& allowed) {
  if (IsNumber(value) && IsNumber(allowed)) return value.as_float() == allowed.as_float();
  return value == allowed;
}

// The first kwarg of `node` that `position` does not allow, or nullptr.
const Kwarg* FirstDisallowedKwarg(const PatternPosition& position, const Node* node) {
  for (const Kwarg& kw : node->kwargs()) {
    bool allowed = false;
    for (const AllowedKwarg& a : position.allowed_kwargs) {
      if (a.key == kw.first && (!a.value.has_value() || ConstantEquals(kw.second, *a.value))) {
        allowed = true;
        break;
      }
    }
    if (!allowed) return &kw;
  }
  return nullptr;
}

std::string UsersList(const Node* node) {
  std::vector<std::string> names;
  for (const Node* user : node->users()) {
    if (names.size() == kMaxUsersListed) {
      names.push_back("...");
      break;
    }
    names.push_back(user->name());
  }
  return absl::StrJoin(names, ", ");
}

std::string ArgRepr(const Argument& arg) {
  return arg.is_node() ? arg.as_node()->name() : arg.ToString();
}

}  // namespace

// The users of `node` that are not `inside` the match, listed for a message.
template <typename Inside>
std::string OutsideUsersList(const Node* node, Inside&& inside) {
  std::vector<std::string> names;
  for (const Node* user : node->users()) {
    if (inside(user)) continue;
    if (names.size() == kMaxUsersListed) {
      names.push_back("...");
      break;
    }
    names.push_back(user->name());
  }
  return absl::StrJoin(names, ", ");
}

bool PatternNeedsWholeMatchCheck(const Pattern& pattern) {
  if (pattern.has_declared_outputs()) return true;  // where the fused node can go (rule 11)
  for (const PatternPosition& p : pattern.positions()) {
    if (p.referenced || p.has_relations) return true;
  }
  return false;
}

bool PatternMayBindANodeTwice(const Pattern& pattern) {
  for (const PatternPosition& p : pattern.positions()) {
    if (p.args.size() >= 2) return true;
  }
  return false;
}

std::string MatchFailure::ToString() const {
  return absl::StrCat(rule, " at ", node, ": ", path, ": ", reason);
}

std::string ExplainReport::ToString() const {
  std::string out;
  for (const MatchFailure& f : failures) absl::StrAppend(&out, f.ToString(), "\n");
  absl::StrAppend(&out, "matches per pattern:\n");
  for (const auto& [rule, count] : matches_per_rule) {
    absl::StrAppend(&out, "  ", rule, ": ", count, "\n");
  }
  return out;
}

// One scan of one graph: the mutable state of FindMatches / Explain.
class PatternMatcher::Scan {
 public:
  Scan(const PatternMatcher& matcher, const GraphModule& gm, ExplainReport* explain)
      : matcher_(matcher), gm_(gm), explain_(explain) {
    // Sized once for the longest pattern: an attempt binds only its rule's positions, so
    // the buffer is never resized.
    size_t longest = 0;
    for (const FusionRule& rule : matcher_.rules_) {
      longest = std::max(longest, static_cast<size_t>(rule.pattern.size()));
    }
    bindings_.resize(longest, nullptr);
  }

  std::vector<PatternMatch> Run() {
    std::vector<PatternMatch> matches;
    // Every match's bindings, side by side in blocks that never reallocate, so each match's
    // view stays valid as more are added.
    auto storage = std::make_shared<std::vector<std::vector<Argument>>>();
    // Module types come from the cache on the nodes (one hash lookup per call_module node
    // if the module tree changed since the last scan, none otherwise).
    gm_.ResolveModuleTypes();
    const Graph& graph = gm_.graph();
    const auto later = [&graph](const Node* a, const Node* b) { return graph.Precedes(a, b); };
    for (Node* node = graph.last(); node != nullptr; node = node->prev()) {
      PrefetchEarlierNodes(node);
      // Inner nodes of earlier matches precede their outermost node, so the scan meets them
      // later, latest first: the pending claim that comes last in the graph order is
      // always the next claimed node the scan reaches. A heap keyed by that order replaces
      // a node -> match hash set (a cache miss per node on large graphs).
      if (!pending_claims_.empty() && pending_claims_.front() == node) {
        std::pop_heap(pending_claims_.begin(), pending_claims_.end(), later);
        pending_claims_.pop_back();
        continue;
      }
      const auto [begin, end] = matcher_.Candidates(node->op(), KeyOf(node));
      if (begin == end) continue;
      // Read once per node, not once per candidate rule.
      const FirstArg first_arg = ReadFirstArg(node);
      bool node_arg_set = false;
      for (const Candidate* it = begin; it != end; ++it) {
        // Most attempts fail at the outermost op's first arg; decide those without entering
        // MatchAt. (Explain needs MatchAt's reasons, so it always takes the full path.)
        if (explain_ == nullptr && !FirstArgMayMatch(*it, first_arg)) continue;
        const FusionRule& rule = matcher_.rules_[it->rule];
        if (!node_arg_set) {
          node_arg_ = Argument(node);
          node_arg_set = true;
        }
        failure_set_ = false;
        if (MatchAt(rule, 0, node_arg_, -1) &&
            (!matcher_.check_distinct_[it->rule] || CheckDistinct(rule)) &&
            (!matcher_.check_whole_[it->rule] || CheckWholeMatch(rule))) {
          for (int p = 1; p < rule.pattern.size(); ++p) {
            // An absent optional position is bound to None: nothing to claim.
            if (!rule.pattern.position(p).match_all && bindings_[p]->is_node()) {
              pending_claims_.push_back(bindings_[p]->as_node());
              std::push_heap(pending_claims_.begin(), pending_claims_.end(), later);
            }
          }
          // A declared output may have users outside its match, which may lead a later
          // attempt back to it (rule 3): remember it as taken.
          for (size_t o = 1; o < rule.pattern.output_positions().size(); ++o) {
            claimed_outputs_.insert(bindings_[rule.pattern.output_positions()[o]]->as_node());
          }
          const size_t size = static_cast<size_t>(rule.pattern.size());
          if (storage->empty() || storage->back().size() + size > storage->back().capacity()) {
            storage->emplace_back().reserve(std::max(kBindingsPerBlock, size));
          }
          std::vector<Argument>& block = storage->back();
          const size_t offset = block.size();
          for (size_t p = 0; p < size; ++p) block.push_back(*bindings_[p]);
          PatternMatch& match = matches.emplace_back();
          match.rule = &rule;
          match.bindings = absl::MakeConstSpan(block.data() + offset, size);
          break;
        }
        if (explain_ != nullptr) {
          failure_.rule = rule.name;
          failure_.node = node->name();
          explain_->failures.push_back(failure_);
        }
      }
    }
    const std::shared_ptr<const void> shared = std::move(storage);
    for (PatternMatch& match : matches) match.storage = shared;
    return matches;
  }

 private:
  // The scan walks backwards over nodes that the graph's arena mostly keeps side by side in
  // creation order, but a step reaches the next one through a pointer, which the hardware
  // prefetcher cannot follow ahead of the loads. Asking for the memory a few slots below
  // the current node hides most of the misses at 10^6 nodes (A/B medians of 5, 8 pairs:
  // 21.7 -> 25.5 M nodes/s); where the guess is wrong it costs one useless prefetch.
  // Integer arithmetic: the address may lie outside the arena's block, which a prefetch
  // of a never-dereferenced address tolerates.
  static void PrefetchEarlierNodes(const Node* node) {
    constexpr uintptr_t kNodesAhead = 6;
    const uintptr_t ahead = reinterpret_cast<uintptr_t>(node) - kNodesAhead * sizeof(Node);
    for (uintptr_t line = 0; line < sizeof(Node); line += 64) {
      __builtin_prefetch(reinterpret_cast<const void*>(ahead + line));
    }
  }

  // The index key of a node: the module type for call_module, else the target.
  Symbol KeyOf(const Node* node) const {
    return node->op() == OpKind::kCallModule ? gm_.ModuleTypeOf(node) : node->target();
  }

  // What FirstArgMayMatch needs of the node the scan is at.
  struct FirstArg {
    size_t num_args;    // of the node
    bool inner_candidate;  // arg 0 is a node with one user, so it may fill an inner position
    OpRef op;           // arg 0's op and key, if inner_candidate
  };

  FirstArg ReadFirstArg(const Node* node) const {
    FirstArg first{node->num_args(), false, OpRef{}};
    if (first.num_args == 0 || !node->arg(0).is_node()) return first;
    const Node* input = node->arg(0).as_node();
    if (input->num_users() != 1) return first;
    first.inner_candidate = true;
    first.op = OpRef{input->op(), KeyOf(input)};
    return first;
  }

  using Candidate = PatternMatcher::Candidate;

  // False only where MatchAt(rule, 0, node) is certain to fail at the outermost op's first
  // pattern arg: for a non-commutative outermost op whose first pattern arg is an op
  // position, the node must have as many args as the pattern gives, and its arg 0 must be
  // a node with one user (an inner node) whose op that position accepts. These are exactly
  // MatchAt's checks there, so skipping on false changes no result.
  // The candidate carries these facts of its rule's pattern (MakeCandidate).
  bool FirstArgMayMatch(const Candidate& candidate, const FirstArg& node_first_arg) const {
    if (candidate.num_args < 0) return true;
    if (node_first_arg.num_args != static_cast<size_t>(candidate.num_args)) return false;
    if (candidate.num_alternatives < 0) return true;  // MatchAllNode
    if (!node_first_arg.inner_candidate) return false;
    if (candidate.num_alternatives > Candidate::kInlineAlternatives) {
      const Pattern& pattern = matcher_.rules_[candidate.rule].pattern;
      return Accepts(pattern.position(pattern.outermost().args[0]), node_first_arg.op);
    }
    for (int i = 0; i < candidate.num_alternatives; ++i) {
      if (candidate.alternatives[i] == node_first_arg.op) return true;
    }
    return false;
  }

  // PatternPosition::Matches, inlined into the scan (the out-of-line call was 7 % of a
  // scan's instructions).
  static bool Accepts(const PatternPosition& position, OpRef op) {
    for (const OpRef& alternative : position.alternatives) {
      if (alternative == op) return true;
    }
    return false;
  }

  // Records why position `pos` failed (explain mode only; the first failure wins).
  // `reason()` builds the text; it is only called in explain mode, so a plain scan builds
  // no strings.
  template <typename Reason>
  bool Fail(const FusionRule& rule, int pos, const Argument& arg, int node_arg_index,
            Reason&& reason) {
    if (explain_ == nullptr || failure_set_) return false;  // the only part a scan runs
    RecordFailure(rule, pos, arg, node_arg_index, reason());
    return false;
  }

  void RecordFailure(const FusionRule& rule, int pos, const Argument& arg, int node_arg_index,
                     std::string reason) {
    failure_set_ = true;
    const Pattern& pattern = rule.pattern;
    const PatternPosition& p = pattern.position(pos);
    failure_.position = pattern.PathOf(pos);
    failure_.path = p.parent < 0
                        ? absl::StrCat(p.spelling, " (", ArgRepr(arg), ")")
                        : absl::StrCat(pattern.position(p.parent).spelling, " \u2192 arg ",
                                       node_arg_index, " (", ArgRepr(arg), ")");
    failure_.reason = std::move(reason);
  }

  // Matches position `pos` of `rule` against `arg` (arg `node_arg_index` of the node
  // bound to the parent position), binding it and its subtree into bindings_.
  bool MatchAt(const FusionRule& rule, int pos, const Argument& arg, int node_arg_index) {
    const PatternPosition& p = rule.pattern.position(pos);
    if (p.optional) return MatchOptional(rule, pos, arg, node_arg_index);
    return MatchPresent(rule, pos, arg, node_arg_index);
  }

  // An optional position: present first; if that fails, absent -- bound to None, its arg 0
  // matched against the same edge. The choice is made here, not revisited if a later
  // sibling fails. When both fail, the present attempt's failure stands, its reason followed
  // by the absent attempt's.
  bool MatchOptional(const FusionRule& rule, int pos, const Argument& arg, int node_arg_index) {
    if (MatchPresent(rule, pos, arg, node_arg_index)) return true;
    MatchFailure present;
    const bool present_set = failure_set_;
    if (explain_ != nullptr) present = failure_;
    failure_set_ = false;
    bindings_[pos] = &none_;
    if (MatchAt(rule, rule.pattern.position(pos).args[0], arg, node_arg_index)) return true;
    if (explain_ != nullptr && present_set) {
      // Both attempts' reasons: the absent one's edge too when it failed further down.
      std::string absent = failure_set_ ? failure_.reason : "";
      const int replacement = rule.pattern.position(pos).args[0];  // read from the same edge
      if (failure_set_ && failure_.position != rule.pattern.PathOf(replacement)) {
        absent = absl::StrCat(failure_.path, ": ", absent);
      }
      failure_ = std::move(present);
      failure_.reason += absent.empty() ? " (also tried absent)"
                                        : absl::StrCat(" (also tried absent: ", absent, ")");
    }
    failure_set_ = present_set || failure_set_;
    return false;
  }

  bool MatchPresent(const FusionRule& rule, int pos, const Argument& arg, int node_arg_index) {
    const PatternPosition& p = rule.pattern.position(pos);
    if (p.match_all) {
      if (p.constant.has_value() && (arg.ContainsNode() || !ConstantEquals(arg, *p.constant))) {
        return Fail(rule, pos, arg, node_arg_index, [&] {
          return absl::StrCat("is ", ArgRepr(arg), "; expected the constant ", p.spelling);
        });
      }
      if (p.same_as >= 0 && !SameBinding(arg, *bindings_[p.same_as])) {
        return Fail(rule, pos, arg, node_arg_index, [&] {
          return absl::StrCat("is ", ArgRepr(arg), "; ", p.spelling, " must be the same as at ",
                              rule.pattern.PathOf(p.same_as), " (",
                              ArgRepr(*bindings_[p.same_as]), ")");
        });
      }
      bindings_[pos] = &arg;
      return true;
    }
    if (!arg.is_node()) {
      return Fail(rule, pos, arg, node_arg_index,
                  [&] { return absl::StrCat("is the constant ", arg.ToString(),
                                          ", not a node; expected ", p.spelling); });
    }
    Node* node = arg.as_node();
    if (pos != 0) {
      // A referenced position's node is read by several positions; whether all its users
      // are inside the match is known only once the match is whole (CheckWholeMatch).
      if (node->num_users() != 1 && !p.referenced && p.output_index < 0) {
        // Its one user inside the match is its parent: every other user is outside.
        return Fail(rule, pos, arg, node_arg_index, [&] {
          // The nearest enclosing position bound to a node (an absent optional one is None).
          int up = p.parent;
          while (up > 0 && !bindings_[up]->is_node()) up = rule.pattern.position(up).parent;
          const Node* parent = bindings_[up]->as_node();
          return absl::StrCat(node->num_users(), " users (", UsersList(node),
                              "); inner nodes may have 1: ",
                              OutsideUsersList(node, [parent](const Node* u) { return u == parent; }),
                              " reads ", node->name(), " outside the match, and position ",
                              rule.pattern.PathOf(pos), " is not a declared output");
        });
      }
      // A node with several users may be a declared output of an earlier match (only those
      // are read outside their match): it is taken.
      if (node->num_users() != 1 && !claimed_outputs_.empty() && claimed_outputs_.contains(node)) {
        return Fail(rule, pos, arg, node_arg_index, [&] {
          return absl::StrCat("is ", node->name(), ", a declared output of another match");
        });
      }
      // No check for "already in another match" is needed here: an inner candidate has
      // one user, on the path to the current node; were it in an earlier match, that user
      // would be too, and so on up to the current node, which the scan would then have
      // skipped. (The outermost node of an earlier match comes later in the graph than
      // the current node, so it is never an input of it.)
      if (!Accepts(p, OpRef{node->op(), KeyOf(node)})) {
        return Fail(rule, pos, arg, node_arg_index,
                    [&] { return absl::StrCat("is ", OpKindName(node->op()), " ",
                                            KeyOf(node).empty() ? node->target().name()
                                                                : KeyOf(node).name(),
                                            "; expected ", p.spelling); });
      }
    } else if (!rule.outermost_may_have_many_users && node->num_users() > 1) {
      return Fail(rule, pos, arg, node_arg_index,
                  [&] { return absl::StrCat(node->num_users(), " users (", UsersList(node),
                                          "); this rule allows the outermost node 1"); });
    }
    if (node->has_kwargs()) {
      if (const Kwarg* bad = FirstDisallowedKwarg(p, node)) {
        return Fail(rule, pos, arg, node_arg_index,
                    [&] { return absl::StrCat("has kwarg ", bad->first.name(), "=",
                                            bad->second.ToString(), ", which ", p.spelling,
                                            " does not allow"); });
      }
    }
    if (!p.predicates.empty() && !CheckPredicates(rule, pos, arg, node_arg_index, node)) {
      return false;
    }
    bindings_[pos] = &arg;
    if (p.args.empty()) return true;
    if (node->num_args() != p.args.size()) {
      return Fail(rule, pos, arg, node_arg_index,
                  [&] { return absl::StrCat("has ", node->num_args(), " args; the pattern gives ",
                                          p.args.size()); });
    }
    if (p.commutative && p.args.size() == 2) return MatchCommutative(rule, p, node);
    for (size_t i = 0; i < p.args.size(); ++i) {
      if (!MatchAt(rule, p.args[i], node->arg(i), static_cast<int>(i))) return false;
    }
    return true;
  }

  // The value of predicate subject `subject` on `node` (pattern.h lists them), or nullopt
  // with `*missing` saying why the node has none.
  std::optional<Argument> SubjectValue(const Node* node, absl::string_view subject,
                                       std::string* missing) const {
    if (subject == "users") return Argument::Int(static_cast<int64_t>(node->num_users()));
    if (subject == "rank" || subject == "shape") {
      for (const Kwarg& entry : node->meta()) {
        if (entry.first.name() != "shape" || !entry.second.is_list()) continue;
        if (subject == "shape") return entry.second;
        return Argument::Int(static_cast<int64_t>(entry.second.items().size()));
      }
      *missing = absl::StrCat("node ", node->name(), " has no recorded shape (meta \"shape\")");
      return std::nullopt;
    }
    if (absl::StartsWith(subject, "kwarg.")) {
      const absl::string_view key = subject.substr(6);
      for (const Kwarg& kw : node->kwargs()) {
        if (kw.first.name() != key) continue;
        if (kw.second.ContainsNode()) {
          *missing = absl::StrCat("kwarg ", key, " of ", node->name(), " is a node, not a constant");
          return std::nullopt;
        }
        return kw.second;
      }
      *missing = absl::StrCat("node ", node->name(), " has no kwarg '", key, "'");
      return std::nullopt;
    }
    if (absl::StartsWith(subject, "arg")) {  // IsKnownPredicateSubject checked the digits
      int index = 0;
      if (absl::SimpleAtoi(subject.substr(3), &index) && index >= 0 &&
          static_cast<size_t>(index) < node->num_args()) {
        const Argument& value = node->arg(index);
        if (!value.ContainsNode()) return value;
        *missing = absl::StrCat("arg ", index, " of ", node->name(), " is a node, not a constant");
        return std::nullopt;
      }
      *missing = absl::StrCat("node ", node->name(), " has ", node->num_args(), " args; no ",
                              subject);
      return std::nullopt;
    }
    if (subject == "dtype") {
      for (const Kwarg& entry : node->meta()) {
        if (entry.first.name() == "dtype" && entry.second.is_dtype()) return entry.second;
      }
      *missing = absl::StrCat("node ", node->name(), " has no recorded dtype (meta \"dtype\")");
      return std::nullopt;
    }
    const Module* module =
        node->op() == OpKind::kCallModule ? gm_.FindModule(node->target()) : nullptr;
    if (module == nullptr) {
      *missing = absl::StrCat(OpKindName(node->op()), " node ", node->name(),
                              " has no module to read '", subject, "' from");
      return std::nullopt;
    }
    if (subject == "bias") return Argument::Bool(module->FindTensor("bias") != nullptr);
    if (const Argument* value = module->FindAttribute(subject)) return *value;
    *missing = absl::StrCat(module->type().name(), " module ", node->target().name(),
                            " has no attribute '", subject, "'");
    return std::nullopt;
  }

  // Python's == on the values predicates compare: numbers as numbers, lists and tuples
  // element by element.
  static bool ValuesEqual(const Argument& a, const Argument& b) {
    if (a.is_list() && b.is_list()) {
      const absl::Span<const Argument> x = a.items(), y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!ValuesEqual(x[i], y[i])) return false;
      }
      return true;
    }
    if (a.is_bool() || b.is_bool()) return a.is_bool() && b.is_bool() && a.as_bool() == b.as_bool();
    return ConstantEquals(a, b);
  }

  static bool Holds(PredicateOp op, const Argument& a, const Argument& b) {
    switch (op) {
      case PredicateOp::kTrue:
        return a.is_bool() ? a.as_bool() : IsNumber(a) && a.as_float() != 0;
      case PredicateOp::kEq:
        return ValuesEqual(a, b);
      case PredicateOp::kNe:
        return !ValuesEqual(a, b);
      default:
        break;
    }
    if (!IsNumber(a) || !IsNumber(b)) return false;
    const double x = a.as_float(), y = b.as_float();
    switch (op) {
      case PredicateOp::kLt: return x < y;
      case PredicateOp::kLe: return x <= y;
      case PredicateOp::kGt: return x > y;
      case PredicateOp::kGe: return x >= y;
      default: return false;
    }
  }

  // Every predicate of position `pos` on `node`; the first that fails is the reason, with
  // the values it saw.
  bool CheckPredicates(const FusionRule& rule, int pos, const Argument& arg, int node_arg_index,
                       const Node* node) {
    const PatternPosition& p = rule.pattern.position(pos);
    for (const PositionPredicate& predicate : p.predicates) {
      if (predicate.other_position >= 0) continue;  // a relation: CheckWholeMatch
      std::string missing;
      const std::optional<Argument> lhs = SubjectValue(node, predicate.subject, &missing);
      std::optional<Argument> rhs = predicate.constant;
      if (lhs.has_value() && !predicate.other_subject.empty()) {
        rhs = SubjectValue(node, predicate.other_subject, &missing);
      }
      if (!lhs.has_value() || !rhs.has_value()) {
        return Fail(rule, pos, arg, node_arg_index, [&] {
          return absl::StrCat("predicate '", predicate.text, "' cannot be checked: ", missing);
        });
      }
      if (Holds(predicate.op, *lhs, *rhs)) continue;
      return Fail(rule, pos, arg, node_arg_index, [&] {
        std::string saw = absl::StrCat(predicate.subject, " = ", lhs->ToString());
        if (!predicate.other_subject.empty()) {
          absl::StrAppend(&saw, ", ", predicate.other_subject, " = ", rhs->ToString());
        }
        return absl::StrCat("predicate '", predicate.text, "' is false (", saw, ")");
      });
    }
    return true;
  }

  // Two occurrences of one `$name`: the very same node, or equal constants (1 == 1.0).
  static bool SameBinding(const Argument& a, const Argument& b) {
    if (a.is_node() || b.is_node()) return a.is_node() && b.is_node() && a.as_node() == b.as_node();
    if (a.ContainsNode() || b.ContainsNode()) return a == b;
    return ValuesEqual(a, b);
  }

  // Rules 3 and 10 of the header, which need every position bound: each referenced inner
  // node has no user outside the match, and each relation predicate holds.
  bool CheckWholeMatch(const FusionRule& rule) {
    const Pattern& pattern = rule.pattern;
    op_nodes_.clear();
    for (int p = 0; p < pattern.size(); ++p) {
      if (!pattern.position(p).match_all && bindings_[p]->is_node()) {
        op_nodes_.push_back(bindings_[p]->as_node());
      }
    }
    const auto inside = [this](const Node* n) {
      return std::find(op_nodes_.begin(), op_nodes_.end(), n) != op_nodes_.end();
    };
    for (int p = 1; p < pattern.size(); ++p) {
      const PatternPosition& position = pattern.position(p);
      if (!position.referenced || position.output_index >= 0 || !bindings_[p]->is_node()) {
        continue;
      }
      const Node* node = bindings_[p]->as_node();
      for (const Node* user : node->users()) {
        if (inside(user)) continue;
        return Fail(rule, p, *bindings_[p], position.arg_index, [&] {
          return absl::StrCat("inner node ", node->name(), " has a user outside the match (",
                              OutsideUsersList(node, inside), "); its users: ",
                              UsersList(node));
        });
      }
    }
    if (pattern.has_declared_outputs() && !CheckOutputsPlacement(rule, inside)) return false;
    for (int p = 0; p < pattern.size(); ++p) {
      const PatternPosition& position = pattern.position(p);
      if (!position.has_relations || !bindings_[p]->is_node()) continue;
      const Node* node = bindings_[p]->as_node();
      for (const PositionPredicate& predicate : position.predicates) {
        if (predicate.other_position < 0) continue;
        const Argument& other_arg = *bindings_[predicate.other_position];
        std::string missing;
        std::optional<Argument> lhs = SubjectValue(node, predicate.subject, &missing);
        std::optional<Argument> rhs;
        if (lhs.has_value()) {
          if (other_arg.is_node()) {
            rhs = SubjectValue(other_arg.as_node(), predicate.other_subject, &missing);
          } else {
            missing = absl::StrCat("@", predicate.other_name, " is not bound to a node");
          }
        }
        if (!lhs.has_value() || !rhs.has_value()) {
          return Fail(rule, p, *bindings_[p], position.arg_index, [&] {
            return absl::StrCat("predicate '", predicate.text, "' cannot be checked: ",
                                missing);
          });
        }
        if (Holds(predicate.op, *lhs, *rhs)) continue;
        return Fail(rule, p, *bindings_[p], position.arg_index, [&] {
          return absl::StrCat("predicate '", predicate.text, "' is false (", predicate.subject,
                              " = ", lhs->ToString(), ", @", predicate.other_name, ".",
                              predicate.other_subject, " = ", rhs->ToString(), " on ",
                              other_arg.as_node()->name(), ")");
        });
      }
    }
    return true;
  }

  // Rule 11 of the header: the fused node of a multi-output match replaces every matched
  // node at once, so it must come before the first node that reads a declared output
  // outside the match, and every input of the match must come before that node.
  template <typename Inside>
  bool CheckOutputsPlacement(const FusionRule& rule, Inside&& inside) {
    const Pattern& pattern = rule.pattern;
    const Graph& graph = gm_.graph();
    const Node* first_reader = nullptr;
    int first_reader_output = -1;
    for (size_t o = 1; o < pattern.output_positions().size(); ++o) {
      const Node* output = bindings_[pattern.output_positions()[o]]->as_node();
      for (const Node* user : output->users()) {
        if (inside(user)) continue;
        if (first_reader == nullptr || graph.Precedes(user, first_reader)) {
          first_reader = user;
          first_reader_output = pattern.output_positions()[o];
        }
      }
    }
    // A multi-output match reading another's declared output: the fused node of the one
    // applied first may move its readers ahead of where the matcher checked the other's
    // inputs, so the pass could not place the second; it is not fused (conservative).
    if (!claimed_outputs_.empty()) {
      for (const Node* op_node : op_nodes_) {
        const Node* taken = nullptr;
        for (const Argument& a : op_node->args()) {
          a.ForEachNode([&](const Node* n) {
            if (taken == nullptr && claimed_outputs_.contains(n)) taken = n;
          });
        }
        if (taken == nullptr) continue;
        return Fail(rule, 0, *bindings_[0], -1, [&] {
          return absl::StrCat(op_node->name(), " reads ", taken->name(), ", a declared output of "
                              "another multi-output match; two multi-output matches chained "
                              "that way are not fused");
        });
      }
    }
    if (first_reader == nullptr) return true;
    for (const Node* op_node : op_nodes_) {
      const Node* late = nullptr;
      const auto check = [&](const Node* input) {
        if (late == nullptr && !inside(input) && !graph.Precedes(input, first_reader)) {
          late = input;
        }
      };
      for (const Argument& a : op_node->args()) a.ForEachNode(check);
      for (const Kwarg& kw : op_node->kwargs()) kw.second.ForEachNode(check);
      if (late == nullptr) continue;
      const int pos = first_reader_output;
      return Fail(rule, pos, *bindings_[pos], pattern.position(pos).arg_index, [&] {
        return absl::StrCat("declared output $", pattern.position(pos).capture, " (",
                            bindings_[pos]->as_node()->name(), ") is read outside the match by ",
                            first_reader->name(), ", which comes before ", late->name(),
                            ", an input of the match (", op_node->name(),
                            " reads it): no single fused node can replace the match");
      });
    }
    return true;
  }

  // Args as written first, then swapped. When both fail, the first order's reason stands.
  bool MatchCommutative(const FusionRule& rule, const PatternPosition& p, const Node* node) {
    if (MatchAt(rule, p.args[0], node->arg(0), 0) && MatchAt(rule, p.args[1], node->arg(1), 1)) {
      return true;
    }
    MatchFailure first;
    const bool first_set = failure_set_;
    if (explain_ != nullptr) first = failure_;
    failure_set_ = false;
    if (MatchAt(rule, p.args[0], node->arg(1), 1) && MatchAt(rule, p.args[1], node->arg(0), 0)) {
      return true;
    }
    if (explain_ != nullptr) {
      failure_ = std::move(first);
      failure_.reason += " (args also tried swapped)";
    }
    failure_set_ = first_set;
    return false;
  }

  // Difference (e) of the header: no node fills two op positions, and no op node of the
  // match is what a MatchAllNode position binds.
  bool CheckDistinct(const FusionRule& rule) {
    const Pattern& pattern = rule.pattern;
    op_nodes_.clear();
    for (int p = 0; p < pattern.size(); ++p) {
      if (!pattern.position(p).match_all && bindings_[p]->is_node()) {
        op_nodes_.push_back(bindings_[p]->as_node());
      }
    }
    for (size_t i = 0; i < op_nodes_.size(); ++i) {
      for (size_t j = i + 1; j < op_nodes_.size(); ++j) {
        if (op_nodes_[i] == op_nodes_[j]) {
          return Fail(rule, 0, *bindings_[0], -1,
                      [&] { return absl::StrCat("node ", op_nodes_[i]->name(),
                                              " would fill two pattern positions"); });
        }
      }
    }
    for (int p = 0; p < pattern.size(); ++p) {
      // A repeated `$name` binds what its first occurrence binds, by design.
      if (pattern.position(p).same_as >= 0) continue;
      if (!pattern.position(p).match_all || !bindings_[p]->ContainsNode()) continue;
      const Node* reused = nullptr;
      bindings_[p]->ForEachNode([&](const Node* n) {
        if (std::find(op_nodes_.begin(), op_nodes_.end(), n) != op_nodes_.end()) reused = n;
      });
      if (reused != nullptr) {
        return Fail(rule, 0, *bindings_[0], -1,
                    [&] { return absl::StrCat("node ", reused->name(),
                                            " is both matched and an input (MatchAllNode) of "
                                            "the match"); });
      }
    }
    return true;
  }

  const PatternMatcher& matcher_;
  const GraphModule& gm_;
  ExplainReport* explain_;
  // What each pattern position is bound to, by pattern position: the arg of the node it
  // was read from (stable: the scan changes nothing), or node_arg_ for the outermost op.
  // Pointers, so an attempt copies no Argument; a match copies them once.
  std::vector<const Argument*> bindings_;
  Argument node_arg_;  // the node the scan is at, as an Argument
  const Argument none_;  // what an absent optional position is bound to
  std::vector<const Node*> op_nodes_;                // reused by CheckDistinct
  std::vector<Node*> pending_claims_;  // inner nodes of matches the scan has yet to meet
  // The declared outputs (rule 11) of the matches found so far: inner nodes that, unlike
  // others, may be reached again from a node outside their match.
  absl::flat_hash_set<const Node*> claimed_outputs_;
  MatchFailure failure_;
  bool failure_set_ = false;
};

absl::StatusOr<PatternMatcher> PatternMatcher::Create(std::vector<FusionRule> rules) {
  absl::flat_hash_set<std::string> names;
  for (const FusionRule& rule : rules) {
    RETURN_IF_ERROR(rule.Validate());
    if (!names.insert(rule.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("fusion rule name '", rule.name, "' is registered twice"));
    }
  }
  PatternMatcher matcher;
  matcher.rules_ = std::move(rules);
  for (const FusionRule& rule : matcher.rules_) {
    matcher.check_distinct_.push_back(PatternMayBindANodeTwice(rule.pattern) ? 1 : 0);
    matcher.check_whole_.push_back(PatternNeedsWholeMatchCheck(rule.pattern) ? 1 : 0);
  }
  // Trial order: higher benefit first, then longest first, then registration order.
  std::vector<int> order(matcher.rules_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const FusionRule& ra = matcher.rules_[a];
    const FusionRule& rb = matcher.rules_[b];
    if (ra.benefit != rb.benefit) return ra.benefit > rb.benefit;
    return ra.pattern.length() > rb.pattern.length();
  });
  // Bucket by (op kind, outermost symbol) into a CSR table per op kind.
  std::vector<std::pair<uint32_t, int>> entries[8];
  for (int r : order) {
    for (const OpRef& op : matcher.rules_[r].pattern.outermost().alternatives) {
      std::vector<std::pair<uint32_t, int>>& bucket = entries[static_cast<int>(op.op)];
      // A rule listed twice for the same symbol (duplicate alternatives) is tried once.
      bool seen = false;
      for (const auto& e : bucket) seen |= (e.first == op.target.id() && e.second == r);
      if (!seen) bucket.emplace_back(op.target.id(), r);
    }
  }
  for (int k = 0; k < 8; ++k) {
    if (entries[k].empty()) continue;
    std::stable_sort(entries[k].begin(), entries[k].end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    const uint32_t max_id = entries[k].back().first;
    matcher.offsets_[k].assign(max_id + 2, 0);
    for (const auto& e : entries[k]) ++matcher.offsets_[k][e.first + 1];
    for (uint32_t id = 0; id <= max_id; ++id) {
      matcher.offsets_[k][id + 1] += matcher.offsets_[k][id];
    }
    for (const auto& e : entries[k]) {
      matcher.candidates_[k].push_back(MakeCandidate(matcher.rules_, e.second));
    }
  }
  return matcher;
}

PatternMatcher::Candidate PatternMatcher::MakeCandidate(const std::vector<FusionRule>& rules,
                                                        int rule) {
  Candidate c{rule, -1, -1, {}};
  const Pattern& pattern = rules[rule].pattern;
  const PatternPosition& outermost = pattern.outermost();
  if (outermost.args.empty() || outermost.commutative) return c;
  c.num_args = static_cast<int16_t>(outermost.args.size());  // <= Pattern::kMaxPositions
  const PatternPosition& first = pattern.position(outermost.args[0]);
  if (first.match_all) return c;
  // An optional first arg may be absent, so its op proves nothing; a referenced one may have
  // several users: only the count is checked.
  if (first.optional || first.referenced || first.output_index >= 0) return c;
  c.num_alternatives = static_cast<int16_t>(first.alternatives.size());
  for (int i = 0; i < c.num_alternatives && i < Candidate::kInlineAlternatives; ++i) {
    c.alternatives[i] = first.alternatives[i];
  }
  return c;
}

std::vector<PatternMatch> PatternMatcher::FindMatches(const GraphModule& gm) const {
  Scan scan(*this, gm, nullptr);
  return scan.Run();
}

ExplainReport PatternMatcher::Explain(const GraphModule& gm) const {
  ExplainReport report;
  Scan scan(*this, gm, &report);
  const std::vector<PatternMatch> matches = scan.Run();
  for (const FusionRule& rule : rules_) {
    int count = 0;
    for (const PatternMatch& m : matches) count += (m.rule == &rule);
    report.matches_per_rule.emplace_back(rule.name, count);
  }
  return report;
}

}  // namespace fuselage
