// Graph's checks (the rest of Graph is in graph.cc): that a new node's inputs come before
// it (CheckInputsPrecede), and Verify, which checks every invariant of the graph.
#include "graph/graph.h"

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"

namespace fuselage {

using graph_internal::CountUseListSteps;

// ---- Checks -------------------------------------------------------------------------

absl::Status Graph::CheckArgPrecedes(const Argument& arg, const Node* before) const {
  absl::Status status;
  arg.ForEachNode([&](Node* input) {
    if (!status.ok()) return;
    if (input == nullptr) {
      status = absl::InvalidArgumentError(": an arg is a null node");
    } else if (input->graph_ != this) {
      status = absl::InvalidArgumentError(absl::StrCat(
          ": arg node '", input->name(), "' belongs to another graph"));
    } else if (before != nullptr && !Precedes(input, before)) {
      status = absl::FailedPreconditionError(absl::StrCat(
          ": arg node '", input->name(),
          "' does not come before it; the order must stay topological"));
    } else if (input->op_ == OpKind::kOutput) {
      status = absl::InvalidArgumentError(": the output node cannot be an arg");
    }
  });
  return status;
}

absl::Status Graph::CheckInputsPrecede(absl::Span<const Argument> args, const Kwargs& kwargs,
                                       const Node* before) const {
  for (const Argument& a : args) RETURN_IF_ERROR(CheckArgPrecedes(a, before));
  for (const Kwarg& kw : kwargs) RETURN_IF_ERROR(CheckArgPrecedes(kw.second, before));
  return absl::OkStatus();
}

namespace {

// Verify's use-list questions, each linear overall: a node with few users or inputs is
// searched as before; one with many (10^5 users of one node, an output of 10^5 values)
// is answered from a set of its users / inputs, built once per Verify on its first
// question (a search per use made Verify quadratic in a node's number of users).
class EdgeChecker {
 public:
  // True if `user` is on `input`'s use-list.
  bool Listed(const Node* input, const Node* user) {
    const auto users = input->users();
    if (users.size() <= kSearched) {
      CountUseListSteps(users.size());
      return std::find(users.begin(), users.end(), user) != users.end();
    }
    auto [it, added] = users_of_.try_emplace(input);
    if (added) {
      it->second.insert(users.begin(), users.end());
      CountUseListSteps(users.size());
    }
    CountUseListSteps(1);
    return it->second.contains(user);
  }
  // True if `user` reads `input` (in its args or kwargs).
  bool Uses(const Node* user, const Node* input) {
    auto known = inputs_of_.find(user);
    if (known == inputs_of_.end()) {
      if (!Wide(user)) {
        bool uses = false;
        size_t steps = 0;
        const auto visit = [&](Node* n) {
          uses = uses || n == input;
          ++steps;
        };
        for (const Argument& a : user->args()) a.ForEachNode(visit);
        for (const Kwarg& kw : user->kwargs()) kw.second.ForEachNode(visit);
        CountUseListSteps(steps);
        return uses;
      }
      known = inputs_of_.try_emplace(user).first;
      size_t steps = 0;
      const auto add = [&](Node* n) {
        known->second.insert(n);
        ++steps;
      };
      for (const Argument& a : user->args()) a.ForEachNode(add);
      for (const Kwarg& kw : user->kwargs()) kw.second.ForEachNode(add);
      CountUseListSteps(steps);
    }
    CountUseListSteps(1);
    return known->second.contains(input);
  }
  // True if users()[i] of `node` is also one of its users before i (asked for i = 0, 1,
  // ... of one node at a time).
  bool ListedBefore(const Node* node, size_t i) {
    const auto users = node->users();
    if (users.size() <= kSearched) {
      CountUseListSteps(i);
      return std::find(users.begin(), users.begin() + static_cast<std::ptrdiff_t>(i),
                       users[i]) != users.begin() + static_cast<std::ptrdiff_t>(i);
    }
    if (i == 0) seen_.clear();
    CountUseListSteps(1);
    return !seen_.insert(users[i]).second;
  }

 private:
  static constexpr size_t kSearched = 16;
  // More than kSearched node references in args and kwargs.
  static bool Wide(const Node* user) {
    size_t refs = 0;
    for (const Argument& a : user->args()) {
      if (CountRefs(a, &refs)) return true;
    }
    for (const Kwarg& kw : user->kwargs()) {
      if (CountRefs(kw.second, &refs)) return true;
    }
    return false;
  }
  // Adds `a`'s node references to *refs, stopping (true) once past kSearched.
  static bool CountRefs(const Argument& a, size_t* refs) {
    if (a.is_node()) return ++*refs > kSearched;
    if (!a.is_list() && !a.is_slice()) return false;
    for (const Argument& item : a.items()) {
      if (CountRefs(item, refs)) return true;
    }
    return false;
  }

  absl::flat_hash_map<const Node*, absl::flat_hash_set<const Node*>> users_of_;
  absl::flat_hash_map<const Node*, absl::flat_hash_set<const Node*>> inputs_of_;
  absl::flat_hash_set<const Node*> seen_;  // ListedBefore: the users of one node so far
};

}  // namespace

absl::Status Graph::Verify() const {
  EdgeChecker edges;
  size_t count = 0;
  const Node* prev = nullptr;
  Node* outputs_seen = nullptr;
  for (Node* n = head_; n != nullptr; prev = n, n = n->next_) {
    ++count;
    auto where = [n] { return absl::StrCat("node '", n->name_, "'"); };
    if (n->graph_ != this) {
      return absl::InternalError(absl::StrCat(where(), ": belongs to another graph"));
    }
    if (n->prev_ != prev) return absl::InternalError(absl::StrCat(where(), ": broken links"));
    // Keys strictly increase along the list, so "comes before" is a key comparison below.
    if (prev != nullptr && prev->order_key_ >= n->order_key_) {
      return absl::InternalError(absl::StrCat(where(), ": order keys not increasing"));
    }
    if (n->name_.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a node has an empty name: the ", OpKindName(n->op_), " node of target '",
          n->target_.name(), "' was inserted unnamed (InsertBeforeUnnamed) and never named"));
    }
    if (n->name_hash_ != graph_internal::NameHashOf(n->name_)) {
      return absl::InternalError(absl::StrCat(where(), ": stale name hash"));
    }
    const Node* indexed = by_name_.Find(HashedName{n->name_, n->name_hash_});
    if (indexed == nullptr) {
      return absl::InternalError(absl::StrCat(where(), ": missing from the name index"));
    }
    if (indexed != n) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate node name '", n->name_, "'"));
    }
    if (n->target_.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": empty target"));
    }
    if (n->op_ == OpKind::kOutput) {
      if (outputs_seen != nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "more than one output node: '", outputs_seen->name_, "' and '", n->name_, "'"));
      }
      outputs_seen = n;
    } else if (outputs_seen != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), " comes after the output node '", outputs_seen->name_,
          "'; the output must be last"));
    }
    // Topological order: every input is in this graph and comes earlier.
    absl::Status status;
    n->ForEachInputUse([&](Node* input) {
      if (!status.ok()) return;
      if (input == n) {
        status = absl::InvalidArgumentError(absl::StrCat(where(), " uses itself (a cycle)"));
      } else if (input->graph_ != this) {
        status = absl::InternalError(absl::StrCat(where(), " uses a node of another graph"));
      } else if (input->order_key_ >= n->order_key_) {
        status = absl::InvalidArgumentError(absl::StrCat(
            where(), " uses '", input->name_,
            "', which does not come before it: the order is not topological"));
      } else if (input->op_ == OpKind::kOutput) {
        status = absl::InvalidArgumentError(absl::StrCat(where(), " uses the output node"));
      } else if (!edges.Listed(input, n)) {
        status = absl::InternalError(absl::StrCat(
            where(), " uses '", input->name_, "' but is missing from its users"));
      }
    });
    RETURN_IF_ERROR(status);
    // Every listed user really uses this node, and is listed once.
    for (size_t i = 0; i < n->num_users(); ++i) {
      const Node* user = n->users()[i];
      if (!edges.Uses(user, n)) {
        return absl::InternalError(absl::StrCat(where(), " lists '", user->name_,
                                                "' as a user, but it does not use it"));
      }
      if (edges.ListedBefore(n, i)) {
        return absl::InternalError(absl::StrCat(where(), " lists user '", user->name_, "' twice"));
      }
    }
  }
  if (prev != tail_) return absl::InternalError("graph tail is stale");
  if (count != size_) return absl::InternalError("graph size is stale");
  if (outputs_seen == nullptr) return absl::InvalidArgumentError("the graph has no output node");
  if (outputs_seen != output_) return absl::InternalError("graph output pointer is stale");
  if (by_name_.size() != size_) return absl::InternalError("name index has stale entries");
  return VerifyCallerCounts();
}

absl::Status Graph::VerifyCallerCounts() const {
  std::vector<uint32_t> recount(callers_.size(), 0);
  for (const Node* n = head_; n != nullptr; n = n->next_) {
    if (n->op_ != OpKind::kCallModule) continue;
    const uint32_t id = n->target_.id();
    if (id >= recount.size()) {
      return absl::InternalError(absl::StrCat("node '", n->name_, "' calls '", n->target_.name(),
                                              "', which has no call_module caller count"));
    }
    ++recount[id];
  }
  for (uint32_t id = 0; id < recount.size(); ++id) {
    if (recount[id] == callers_[id]) continue;
    // Named by a node that calls it; a target no node calls any more is known by its id.
    std::string target = absl::StrCat("symbol #", id);
    for (const Node* n = head_; n != nullptr; n = n->next_) {
      if (n->op_ == OpKind::kCallModule && n->target_.id() == id) {
        target = absl::StrCat("'", n->target_.name(), "'");
        break;
      }
    }
    return absl::InternalError(absl::StrCat("call_module caller count of ", target, " is ",
                                            callers_[id], "; the graph has ", recount[id],
                                            " call_module node(s) calling it"));
  }
  return absl::OkStatus();
}

}  // namespace fuselage
