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

// RemoveModules(Span<const Symbol>) removes what the string overload removes and refuses
// what it refuses, with the same messages.
std::vector<Symbol> Symbols(const std::vector<std::string>& paths) {
  std::vector<Symbol> symbols;
  for (const std::string& path : paths) symbols.push_back(Symbol::Intern(path));
  return symbols;
}

TEST(RemoveModulesBySymbolTest, RemovesEveryPathIncludingNestedOnes) {
  auto gm = Sample();
  ASSERT_TRUE(gm->RemoveModules(Symbols({"a", "b.y", "d"})).ok());
  EXPECT_EQ(ChildNames(gm->root()), (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(ChildNames(*gm->FindModule("b")), (std::vector<std::string>{"x"}));
  ASSERT_TRUE(gm->RemoveModules(Symbols({"b.x", "b"})).ok());
  EXPECT_EQ(ChildNames(gm->root()), (std::vector<std::string>{"c"}));
  EXPECT_TRUE(gm->Verify().ok());
  EXPECT_TRUE(gm->RemoveModules(absl::Span<const Symbol>()).ok());
  EXPECT_EQ(ChildNames(gm->root()), (std::vector<std::string>{"c"}));
}

TEST(RemoveModulesBySymbolTest, RefusedBatchRemovesNothing) {
  auto gm = Sample();
  absl::Status used = gm->RemoveModules(Symbols({"a", "c"}));
  EXPECT_EQ(used.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(used.message().find("node 'c' still calls it"), std::string::npos) << used;
  absl::Status missing = gm->RemoveModules(Symbols({"a", "nope"}));
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("'nope'"), std::string::npos) << missing;
  // "b" encloses "b.x", which a node now calls.
  NodeSpec spec;
  spec.op = OpKind::kCallModule;
  spec.target = Symbol::Intern("b.x");
  spec.args = {Argument(gm->graph().first())};
  spec.name = "bx";
  ASSERT_TRUE(gm->graph().InsertBefore(gm->graph().output(), std::move(spec)).ok());
  absl::Status enclosing = gm->RemoveModules(Symbols({"d", "b"}));
  EXPECT_EQ(enclosing.code(), absl::StatusCode::kFailedPrecondition) << enclosing;
  EXPECT_NE(enclosing.message().find("'b.x'"), std::string::npos) << enclosing;
  EXPECT_EQ(gm->RemoveModules(Symbols({""})).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ChildNames(gm->root()), (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_EQ(ChildNames(*gm->FindModule("b")), (std::vector<std::string>{"x", "y"}));
}

// A batch refused for two reasons (a node calls a removed path, an earlier node calls a
// module inside a removed one): the error names the first of those nodes in graph order.
TEST(RemoveModulesBySymbolTest, RefusalNamesTheFirstCallerInGraphOrder) {
  auto gm = Sample();
  NodeSpec spec;
  spec.op = OpKind::kCallModule;
  spec.target = Symbol::Intern("b.x");
  spec.args = {Argument(gm->graph().first())};
  spec.name = "bx";
  Node* call_c = gm->graph().output()->prev();
  ASSERT_EQ(call_c->target(), Symbol::Intern("c"));
  ASSERT_TRUE(gm->graph().InsertBefore(call_c, std::move(spec)).ok());
  for (const auto& paths : {std::vector<std::string>{"c", "b"}, {"b", "c"}}) {
    absl::Status refused = gm->RemoveModules(Symbols(paths));
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
    EXPECT_NE(refused.message().find("node 'bx' still calls it"), std::string::npos) << refused;
    absl::Status refused_text = gm->RemoveModules(paths);
    EXPECT_EQ(refused_text.message(), refused.message());
  }
  // Without the enclosing module, the caller of the removed path is named.
  absl::Status used = gm->RemoveModules(Symbols({"a", "c"}));
  EXPECT_NE(used.message().find("node 'c' still calls it"), std::string::npos) << used;
  EXPECT_EQ(ChildNames(gm->root()), (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_TRUE(gm->Verify().ok());
}

// The caller check reads the graph's caller counts, so it must follow every edit that
// makes or stops a node calling a path: insertion before an earlier node, SetTarget and
// SetOp both ways, erasure. A refusal names the first caller in graph order, which is not
// the first one created; both RemoveModules overloads and RemoveModule agree throughout,
// and a refused removal removes nothing.
TEST(RemoveModulesBySymbolTest, CallerCheckFollowsEveryGraphEdit) {
  auto gm = std::make_unique<GraphModule>();
  for (const char* path : {"e", "f", "g"}) {
    ASSERT_TRUE(gm->SetModule(path, std::make_unique<Module>("nn.ReLU")).ok()) << path;
  }
  Graph& g = gm->graph();
  Node* x = *g.AddPlaceholder("x");
  Node* late = *g.AddCallModule("e", {x}, {}, "late");
  NodeSpec spec;
  spec.op = OpKind::kCallModule;
  spec.target = Symbol::Intern("e");
  spec.args = {Argument(x)};
  spec.name = "early";
  Node* early = *g.InsertBefore(late, std::move(spec));  // created second, first in order
  Node* relu = *g.AddCallFunction("torch.relu", {late});
  ASSERT_TRUE(g.SetOutput(relu).ok());
  const auto expect_refused = [&](const std::string& path, const std::string& caller) {
    const std::string expected =
        "cannot remove module '" + path + "': node '" + caller + "' still calls it";
    const absl::Status by_symbol = gm->RemoveModules(Symbols({"g", path}));
    EXPECT_EQ(by_symbol.code(), absl::StatusCode::kFailedPrecondition) << by_symbol;
    EXPECT_EQ(by_symbol.message(), expected);
    EXPECT_EQ(gm->RemoveModules({path, "g"}).message(), expected);
    EXPECT_EQ(gm->RemoveModule(path).message(), expected);
    EXPECT_EQ(ChildNames(gm->root()), (std::vector<std::string>{"e", "f", "g"}));
  };
  expect_refused("e", "early");
  // A node retargeted away from "e" stops calling it, onto "f" starts calling that.
  ASSERT_TRUE(g.SetTarget(early, Symbol::Intern("f")).ok());
  EXPECT_EQ(g.NumCallers(Symbol::Intern("e")), 1);
  expect_refused("e", "late");
  expect_refused("f", "early");
  // A call_function node turned into a call_module one calls its new target.
  ASSERT_TRUE(g.SetOp(relu, OpKind::kCallModule, Symbol::Intern("g")).ok());
  const absl::Status g_called = gm->RemoveModules(Symbols({"g"}));
  EXPECT_EQ(g_called.message(), "cannot remove module 'g': node 'relu' still calls it");
  ASSERT_TRUE(g.SetOp(relu, OpKind::kCallFunction, Symbol::Intern("torch.relu")).ok());
  // Erasing the callers frees each path.
  ASSERT_TRUE(g.SetArg(relu, 0, Argument(x)).ok());
  ASSERT_TRUE(g.Erase(late).ok());
  ASSERT_TRUE(g.Erase(early).ok());
  ASSERT_TRUE(gm->RemoveModules(Symbols({"e", "g"})).ok());
  ASSERT_TRUE(gm->RemoveModule("f").ok());
  EXPECT_TRUE(gm->root().children().empty());
  const absl::Status verified = gm->Verify();
  EXPECT_TRUE(verified.ok()) << verified;
}

// Paths under several parents, given in an order that alternates between them: each
// parent keeps its other children in order.
TEST(RemoveModulesBySymbolTest, AlternatingParentsKeepTheirOrder) {
  GraphModule gm;
  std::vector<std::string> paths;
  for (int i = 0; i < 12; ++i) {
    for (const char* parent : {"p", "q"}) {
      paths.push_back(std::string(parent) + "." + std::to_string(i));
      ASSERT_TRUE(gm.SetModule(paths.back(), std::make_unique<Module>("nn.ReLU")).ok());
    }
  }
  ASSERT_TRUE(gm.RemoveModules(Symbols({"p.3", "q.3", "p.0", "q.11", "p.11", "q.0"})).ok());
  const std::vector<std::string> kept = {"1", "2", "4", "5", "6", "7", "8", "9", "10"};
  EXPECT_EQ(ChildNames(*gm.FindModule("p")), kept);
  EXPECT_EQ(ChildNames(*gm.FindModule("q")), kept);
  EXPECT_EQ(gm.FindModule("p.3"), nullptr);
  EXPECT_NE(gm.FindModule("q.10"), nullptr);
}

// The check that no node calls a removed path holds whether the removed paths' symbol ids
// are close together (a bitmap of them) or spread far apart (a hash set): paths interned
// ~10^5 symbols apart, called and not called, given in descending position order and with
// a repeat.
TEST(RemoveModulesBySymbolTest, CallerCheckHoldsForIdsFarApart) {
  GraphModule gm;
  const Symbol near = Symbol::Intern("spread_near");
  for (int i = 0; i < 100000; ++i) Symbol::Intern("spread_filler_" + std::to_string(i));
  const Symbol far = Symbol::Intern("spread_far");
  ASSERT_GT(far.id() - near.id(), 64u * 2 + 4096);
  for (const char* path : {"spread_near", "keep", "spread_far"}) {
    ASSERT_TRUE(gm.SetModule(path, std::make_unique<Module>("nn.ReLU")).ok()) << path;
  }
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* call = *gm.graph().AddCallModule("spread_far", {x});
  ASSERT_TRUE(gm.graph().SetOutput(call).ok());
  const std::vector<Symbol> both = {far, near, far};
  absl::Status refused = gm.RemoveModules(absl::MakeConstSpan(both));
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_NE(refused.message().find("still calls it"), std::string::npos) << refused;
  EXPECT_EQ(ChildNames(gm.root()),
            (std::vector<std::string>{"spread_near", "keep", "spread_far"}));
  // Nothing calls them once the node calls "keep": both go, in one batch.
  ASSERT_TRUE(gm.graph().SetTarget(call, Symbol::Intern("keep")).ok());
  ASSERT_TRUE(gm.RemoveModules(absl::MakeConstSpan(both)).ok());
  EXPECT_EQ(ChildNames(gm.root()), (std::vector<std::string>{"keep"}));
  EXPECT_TRUE(gm.Verify().ok());
}

// With a current path table, RemoveModules finds each module's parent and position in
// it; positions go stale as earlier removals move siblings, and a later batch must still
// remove exactly its own modules (at the root and one level down), with the table left
// agreeing with the tree (Verify compares them).
TEST(RemoveModulesBySymbolTest, PathTablePlacesStayCorrectAcrossBatches) {
  GraphModule gm;
  for (int i = 0; i < 20; ++i) {
    const std::string name = "m" + std::to_string(i);
    ASSERT_TRUE(gm.SetModule(name, std::make_unique<Module>("nn.ReLU")).ok());
    ASSERT_TRUE(gm.SetModule("blk." + name, std::make_unique<Module>("nn.ReLU")).ok());
  }
  Node* x = *gm.graph().AddPlaceholder("x");
  std::vector<Node*> calls;
  Node* last = x;
  for (int i = 0; i < 20; ++i) {
    last = *gm.graph().AddCallModule("m" + std::to_string(i), {last});
    calls.push_back(last);
    last = *gm.graph().AddCallModule("blk.m" + std::to_string(i), {last});
    calls.push_back(last);
  }
  ASSERT_TRUE(gm.graph().SetOutput(last).ok());
  gm.ResolveModuleTypes();  // fills the path table (and the places)
  // Unhook the callers of modules i (root and blk) for `removed`, then remove them.
  const auto remove = [&](const std::vector<int>& removed) {
    std::vector<Symbol> paths;
    for (int i : removed) {
      for (int k : {2 * i, 2 * i + 1}) {
        Node* call = calls[static_cast<size_t>(k)];
        NodeSpec spec;
        spec.op = OpKind::kCallModule;
        spec.target = Symbol::Intern("m19");
        spec.args = {call->args()[0]};
        spec.name = "keep_" + std::string(call->name());
        Node* keep = *gm.graph().InsertBefore(call, std::move(spec));
        ASSERT_TRUE(gm.graph().ReplaceAllUsesWith(call, keep).ok());
        ASSERT_TRUE(gm.graph().Erase(call).ok());
        calls[static_cast<size_t>(k)] = keep;
      }
      paths.push_back(Symbol::Intern("blk.m" + std::to_string(i)));
      paths.push_back(Symbol::Intern("m" + std::to_string(i)));
    }
    ASSERT_TRUE(gm.RemoveModules(absl::MakeConstSpan(paths)).ok());
  };
  remove({5, 3});
  remove({10, 4, 18});  // positions of 10 and 18 moved by the first batch
  remove({0, 17});
  std::vector<std::string> expected;
  for (int i = 0; i < 20; ++i) {
    if (i == 0 || i == 3 || i == 4 || i == 5 || i == 10 || i == 17 || i == 18) continue;
    expected.push_back("m" + std::to_string(i));
  }
  std::vector<std::string> root = ChildNames(gm.root());
  std::vector<std::string> root_without_blk;
  for (const std::string& name : root) {
    if (name != "blk") root_without_blk.push_back(name);
  }
  EXPECT_EQ(root_without_blk, expected);
  EXPECT_EQ(ChildNames(*gm.FindModule("blk")), expected);
  for (const std::string& name : expected) {
    EXPECT_EQ(gm.FindModule(Symbol::Intern(name)), gm.FindModule(name)) << name;
    EXPECT_NE(gm.FindModule(Symbol::Intern("blk." + name)), nullptr) << name;
  }
  EXPECT_EQ(gm.FindModule(Symbol::Intern("m10")), nullptr);
  EXPECT_EQ(gm.FindModule(Symbol::Intern("blk.m18")), nullptr);
  EXPECT_TRUE(gm.Verify().ok()) << gm.Verify();
}

}  // namespace
}  // namespace fuselage
