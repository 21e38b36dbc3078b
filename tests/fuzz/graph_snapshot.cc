#include "tests/fuzz/graph_snapshot.h"

#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

namespace fuselage::fuzz {
namespace {

// Argument's operator== compares floats with ==, under which NaN differs from itself and
// -0.0 equals 0.0; a snapshot must compare the stored bits. Nodes compare by identity and
// are never dereferenced.
bool SameArgument(const Argument& a, const Argument& b) {
  if (a.kind() != b.kind()) return false;
  if (a.is_float()) {
    const double x = a.as_float(), y = b.as_float();
    return std::memcmp(&x, &y, sizeof x) == 0;
  }
  if (!a.is_list()) return a == b;
  if (a.is_tuple() != b.is_tuple() || a.items().size() != b.items().size()) return false;
  for (size_t i = 0; i < a.items().size(); ++i) {
    if (!SameArgument(a.items()[i], b.items()[i])) return false;
  }
  return true;
}

bool SameArguments(absl::Span<const Argument> a, absl::Span<const Argument> b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!SameArgument(a[i], b[i])) return false;
  }
  return true;
}

bool SameKwargs(absl::Span<const Kwarg> a, absl::Span<const Kwarg> b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first || !SameArgument(a[i].second, b[i].second)) return false;
  }
  return true;
}

template <typename T>
absl::Span<const T> Slice(const std::vector<T>& all, size_t begin, size_t size) {
  return absl::MakeConstSpan(all).subspan(begin, size);
}

}  // namespace

void GraphSnapshot::Take(const Graph& graph) {
  size_ = graph.size();
  output_ = graph.output();
  args_.clear();
  kwargs_.clear();
  users_.clear();
  // Most nodes have up to two args and users: one allocation each, usually.
  args_.reserve(2 * graph.size());
  users_.reserve(2 * graph.size());
  // NodeStates past node_count_ are kept, not destroyed, so their names' storage is reused.
  node_count_ = 0;
  for (const Node* n = graph.first(); n != nullptr; n = n->next()) {
    if (node_count_ == nodes_.size()) nodes_.emplace_back();
    NodeState& state = nodes_[node_count_++];
    state.node = n;
    state.op = n->op();
    state.target = n->target();
    state.name.assign(n->name());
    state.args = {args_.size(), n->num_args()};
    args_.insert(args_.end(), n->args().begin(), n->args().end());
    state.kwargs = {kwargs_.size(), n->kwargs().size()};
    kwargs_.insert(kwargs_.end(), n->kwargs().begin(), n->kwargs().end());
    state.meta = {kwargs_.size(), n->meta().size()};
    kwargs_.insert(kwargs_.end(), n->meta().begin(), n->meta().end());
    state.users = {users_.size(), n->num_users()};
    users_.insert(users_.end(), n->users().begin(), n->users().end());
  }
}

std::string GraphSnapshot::DifferenceAt(size_t index, const GraphSnapshot& other) const {
  const NodeState& a = nodes_[index];
  const NodeState& b = other.nodes_[index];
  const char* what = nullptr;
  if (a.node != b.node) {
    what = "a different node object";
  } else if (a.op != b.op) {
    what = "op differs";
  } else if (a.target != b.target) {
    what = "target differs";
  } else if (a.name != b.name) {
    what = "name differs";
  } else if (!SameArguments(Slice(args_, a.args.begin, a.args.size),
                            Slice(other.args_, b.args.begin, b.args.size))) {
    what = "args differ";
  } else if (!SameKwargs(Slice(kwargs_, a.kwargs.begin, a.kwargs.size),
                         Slice(other.kwargs_, b.kwargs.begin, b.kwargs.size))) {
    what = "kwargs differ";
  } else if (!SameKwargs(Slice(kwargs_, a.meta.begin, a.meta.size),
                         Slice(other.kwargs_, b.meta.begin, b.meta.size))) {
    what = "meta differs";
  } else if (Slice(users_, a.users.begin, a.users.size) !=
             Slice(other.users_, b.users.begin, b.users.size)) {
    what = "users differ";
  }
  if (what == nullptr) return "";
  return absl::StrCat("node ", index, " ('", a.name, "' / '", b.name, "'): ", what);
}

std::string GraphSnapshot::FirstDifference(const GraphSnapshot& other) const {
  if (size_ != other.size_ || node_count_ != other.node_count_) {
    return absl::StrCat("size ", size_, " / ", other.size_, " (", node_count_, " / ",
                        other.node_count_, " nodes in order)");
  }
  for (size_t i = 0; i < node_count_; ++i) {
    std::string difference = DifferenceAt(i, other);
    if (!difference.empty()) return difference;
  }
  if (output_ != other.output_) return "the output node differs";
  return "";
}

std::string GraphText(const Graph& graph) {
  std::string out = absl::StrCat(graph.size(), " nodes, output ",
                                 graph.output() ? graph.output()->name() : "<none>", "\n");
  for (const Node* n = graph.first(); n != nullptr; n = n->next()) {
    absl::StrAppend(&out, n->ToString(), " users=[");
    for (const Node* user : n->users()) absl::StrAppend(&out, user->name(), ",");
    absl::StrAppend(&out, "] meta={");
    for (const Kwarg& kw : n->meta()) {
      absl::StrAppend(&out, kw.first.name(), ":", kw.second.ToString(), ",");
    }
    absl::StrAppend(&out, "}\n");
  }
  return out;
}

}  // namespace fuselage::fuzz
