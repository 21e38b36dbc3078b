// Shared helpers of the graph tests: small models built with the public API, and an
// independent check of use-lists.
#ifndef FUSELAGE_TESTS_GRAPH_TEST_GRAPHS_H_
#define FUSELAGE_TESTS_GRAPH_TEST_GRAPHS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "graph/graph.h"
#include "graph/graph_module.h"

namespace fuselage {
namespace testing {

// The conv -> bn -> add -> relu residual block, FX-style (the same graph as
// tests/graph/testdata/make_fx_goldens.py's Residual), with small constant weights:
//   x; identity = self.identity(x); conv = self.conv(x); bn = self.bn(conv);
//   add = bn + identity; relu = self.relu(add); return relu
std::unique_ptr<GraphModule> MakeConvBnAddRelu();

// The names of `nodes`, in order.
std::vector<std::string> Names(absl::Span<Node* const> nodes);

// Recomputes every node's users from the args and kwargs of all nodes (not from the
// graph's own bookkeeping) and returns "" if each users() list holds exactly those
// nodes, each once, or a description of the first difference.
std::string UseListMismatch(const Graph& graph);

}  // namespace testing
}  // namespace fuselage

#endif  // FUSELAGE_TESTS_GRAPH_TEST_GRAPHS_H_
