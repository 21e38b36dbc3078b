#include "tests/graph/test_graphs.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/check.h"
#include "graph/module.h"
#include "graph/tensor.h"

namespace fuselage {
namespace testing {

std::unique_ptr<GraphModule> MakeConvBnAddRelu() {
  auto gm = std::make_unique<GraphModule>();
  auto conv = std::make_unique<Module>("nn.Conv2d");
  conv->SetTensor("weight", Tensor::FromFloats({1, 1, 1, 1}, {0.5f}));
  conv->SetTensor("bias", Tensor::FromFloats({1}, {0.25f}));
  conv->SetAttribute("kernel_size", Argument::Ints({1, 1}));
  auto bn = std::make_unique<Module>("nn.BatchNorm2d");
  bn->SetTensor("weight", Tensor::FromFloats({1}, {2.0f}));
  bn->SetTensor("bias", Tensor::FromFloats({1}, {-1.0f}));
  bn->SetTensor("running_mean", Tensor::FromFloats({1}, {0.5f}));
  bn->SetTensor("running_var", Tensor::FromFloats({1}, {4.0f}));
  bn->SetAttribute("eps", Argument::Float(1e-5));
  FUSELAGE_CHECK(gm->SetModule("identity", std::make_unique<Module>("nn.Identity")).ok());
  FUSELAGE_CHECK(gm->SetModule("conv", std::move(conv)).ok());
  FUSELAGE_CHECK(gm->SetModule("bn", std::move(bn)).ok());
  FUSELAGE_CHECK(gm->SetModule("relu", std::make_unique<Module>("nn.ReLU")).ok());
  Graph& g = gm->graph();
  Node* x = *g.AddPlaceholder("x");
  Node* identity = *g.AddCallModule("identity", {x});
  Node* c = *g.AddCallModule("conv", {x});
  Node* b = *g.AddCallModule("bn", {c});
  Node* add = *g.AddCallFunction("operator.add", {b, identity});
  Node* relu = *g.AddCallModule("relu", {add});
  FUSELAGE_CHECK(g.SetOutput(relu).ok());
  return gm;
}

std::vector<std::string> Names(absl::Span<Node* const> nodes) {
  std::vector<std::string> names;
  for (const Node* n : nodes) names.push_back(n->name());
  return names;
}

std::string UseListMismatch(const Graph& graph) {
  std::map<const Node*, std::set<const Node*>> expected;
  for (const Node* n = graph.first(); n != nullptr; n = n->next()) {
    expected[n];
    auto record = [&](Node* input) { expected[input].insert(n); };
    for (const Argument& a : n->args()) a.ForEachNode(record);
    for (const Kwarg& kw : n->kwargs()) kw.second.ForEachNode(record);
  }
  for (const auto& [node, users] : expected) {
    std::set<const Node*> actual(node->users().begin(), node->users().end());
    if (actual.size() != node->users().size()) {
      return absl::StrCat("'", node->name(), "' lists a user twice");
    }
    if (actual != users) {
      return absl::StrCat("'", node->name(), "' has users [",
                          absl::StrJoin(Names(node->users()), ", "), "]; expected ",
                          users.size(), " distinct users");
    }
  }
  return "";
}

}  // namespace testing
}  // namespace fuselage
