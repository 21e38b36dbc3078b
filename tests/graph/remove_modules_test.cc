// GraphModule::RemoveModules (batch removal) and Module::RemoveChildren: what goes, what
// stays and in which order, and that a refused batch removes nothing.
#include <memory>
#include <string>
#include <vector>

#include "graph/graph_module.h"
#include "gtest/gtest.h"

namespace fuselage {
namespace {

std::vector<std::string> ChildNames(const Module& m) {
  std::vector<std::string> names;
  for (const auto& entry : m.children()) names.push_back(entry.first);
  return names;
}

// Root children a, b, c, d; "b" has children x, y; node "call_c" calls "c".
std::unique_ptr<GraphModule> Sample() {
  auto gm = std::make_unique<GraphModule>();
  for (const char* path : {"a", "b", "b.x", "b.y", "c", "d"}) {
    EXPECT_TRUE(gm->SetModule(path, std::make_unique<Module>("nn.ReLU")).ok()) << path;
  }
  Node* x = *gm->graph().AddPlaceholder("x");
  Node* call = *gm->graph().AddCallModule("c", {x});
  EXPECT_TRUE(gm->graph().SetOutput(call).ok());
  return gm;
}

TEST(RemoveChildrenTest, RemovesTheNamedOnesKeepingOrderAndLookup) {
  Module m("nn.Module");
  for (const char* name : {"p", "q", "r", "s", "t"}) {
    m.SetChild(name, std::make_unique<Module>("nn.ReLU"));
  }
  EXPECT_EQ(m.RemoveChildren({"q", "s", "absent"}), 2);
  EXPECT_EQ(ChildNames(m), (std::vector<std::string>{"p", "r", "t"}));
  EXPECT_EQ(m.FindChild("q"), nullptr);
  ASSERT_NE(m.FindChild("t"), nullptr);
  EXPECT_EQ(m.FindChild("t"), m.children()[2].second.get());
  EXPECT_EQ(m.RemoveChildren({}), 0);
}

TEST(RemoveModulesTest, RemovesEveryPathIncludingNestedOnes) {
  auto gm = Sample();
  ASSERT_TRUE(gm->RemoveModules({"a", "b.y", "d"}).ok());
  EXPECT_EQ(ChildNames(gm->root()), (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(ChildNames(*gm->FindModule("b")), (std::vector<std::string>{"x"}));
  // A path and a path inside it: both go, whatever the order given.
  ASSERT_TRUE(gm->RemoveModules({"b.x", "b"}).ok());
  EXPECT_EQ(ChildNames(gm->root()), (std::vector<std::string>{"c"}));
  EXPECT_TRUE(gm->Verify().ok());
}

TEST(RemoveModulesTest, RefusedBatchRemovesNothing) {
  auto gm = Sample();
  absl::Status used = gm->RemoveModules({"a", "c"});
  EXPECT_EQ(used.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(used.message().find("node 'c' still calls it"), std::string::npos) << used;
  absl::Status missing = gm->RemoveModules({"a", "nope"});
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("'nope'"), std::string::npos) << missing;
  EXPECT_EQ(ChildNames(gm->root()), (std::vector<std::string>{"a", "b", "c", "d"}));
}

}  // namespace
}  // namespace fuselage
