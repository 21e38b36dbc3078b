#include "tests/fuzz/graph_snapshot.h"

#include "absl/strings/str_cat.h"
#include "graph/node.h"

namespace fuselage::fuzz {

std::string GraphSnapshot(const Graph& graph) {
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
