// GraphModule::ModuleTypeOf and its cache on the nodes: whatever changes the module a
// call_module node resolves to — replacing the module, changing its type, moving a module
// tree in, removing and reinstalling, retargeting the node, a new node — the next
// ModuleTypeOf (with or without ResolveModuleTypes in between) answers from the tree as
// it is now, and Verify() finds the cache consistent. The expectation in each test is
// FindModule(path)->type(), the uncached lookup. The same for GraphModule::ModuleOf and
// FindModule(Symbol) (the path -> module table ResolveModuleTypes fills): each answers the
// module the uncached path walk finds.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "graph/graph_module.h"
#include "graph/module.h"
#include "tests/graph/test_graphs.h"

namespace fuselage {
namespace {

Symbol Type(const char* name) { return Symbol::Intern(name); }

class ModuleTypeCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    x_ = *gm_.graph().AddPlaceholder("x");
    ASSERT_TRUE(gm_.SetModule("a", std::make_unique<Module>("nn.ReLU")).ok());
    ASSERT_TRUE(gm_.SetModule("b", std::make_unique<Module>("nn.Identity")).ok());
    a_ = *gm_.graph().AddCallModule("a", {x_}, {}, "a");
    b_ = *gm_.graph().AddCallModule("b", {a_}, {}, "b");
    ASSERT_TRUE(gm_.graph().SetOutput(b_).ok());
    gm_.ResolveModuleTypes();
  }

  // ModuleTypeOf agrees with the tree, and ModuleOf / FindModule(Symbol) with the
  // uncached path walk, before and after re-resolving, and Verify passes.
  void ExpectType(const Node* node, const char* expected) {
    EXPECT_EQ(gm_.ModuleTypeOf(node), Type(expected)) << node->name() << " (stale cache)";
    ExpectModule(node, "stale cache");
    gm_.ResolveModuleTypes();
    EXPECT_EQ(gm_.ModuleTypeOf(node), Type(expected)) << node->name() << " (resolved)";
    ExpectModule(node, "resolved");
    absl::Status verified = gm_.Verify();
    EXPECT_TRUE(verified.ok()) << verified;
  }
  void ExpectModule(const Node* node, const char* when) {
    const Module* walked = gm_.FindModule(node->target().name());
    EXPECT_EQ(gm_.ModuleOf(node), walked) << node->name() << " (" << when << ")";
    EXPECT_EQ(gm_.FindModule(node->target()), walked) << node->name() << " (" << when << ")";
    absl::StatusOr<Module*> got = gm_.GetModule(node->target());
    if (walked == nullptr) {
      EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound) << node->name();
    } else {
      EXPECT_TRUE(got.ok() && *got == walked) << node->name() << " (" << when << ")";
    }
  }

  // A call_module node calling `target` with `input`, inserted before the output.
  Node* InsertCall(const char* target, Node* input, const char* name) {
    NodeSpec spec;
    spec.op = OpKind::kCallModule;
    spec.target = Symbol::Intern(target);
    spec.args = {Argument(input)};
    spec.name = name;
    return *gm_.graph().InsertBefore(gm_.graph().output(), std::move(spec));
  }

  GraphModule gm_;
  Node* x_ = nullptr;
  Node* a_ = nullptr;
  Node* b_ = nullptr;
};

TEST_F(ModuleTypeCacheTest, ResolvesCallModuleNodesOnly) {
  ExpectType(a_, "nn.ReLU");
  ExpectType(b_, "nn.Identity");
  EXPECT_TRUE(gm_.ModuleTypeOf(x_).empty());
  EXPECT_TRUE(gm_.ModuleTypeOf(gm_.graph().output()).empty());
}

TEST_F(ModuleTypeCacheTest, SetModuleReplacingWithAnotherTypeIsSeen) {
  ASSERT_EQ(gm_.ModuleTypeOf(a_), Type("nn.ReLU"));
  ASSERT_TRUE(gm_.SetModule("a", std::make_unique<Module>("nn.Sigmoid")).ok());
  ExpectType(a_, "nn.Sigmoid");
  ExpectType(b_, "nn.Identity");
}

TEST_F(ModuleTypeCacheTest, SetTypeOnAModuleInTheTreeIsSeen) {
  gm_.FindModule("b")->set_type(Type("nn.Hardswish"));
  ExpectType(b_, "nn.Hardswish");
}

TEST_F(ModuleTypeCacheTest, ChildReplacedThroughTheParentModuleIsSeen) {
  gm_.root().SetChild("a", std::make_unique<Module>("nn.Identity"));
  ExpectType(a_, "nn.Identity");
}

TEST_F(ModuleTypeCacheTest, RootMovedInIsSeen) {
  // What the model loader does: build a tree, then move it into root().
  Module tree("GraphModule");
  tree.SetChild("a", std::make_unique<Module>("nn.Hardtanh"));
  tree.SetChild("b", std::make_unique<Module>("nn.Flatten"));
  ASSERT_EQ(gm_.ModuleTypeOf(a_), Type("nn.ReLU"));
  gm_.root() = std::move(tree);
  ExpectType(a_, "nn.Hardtanh");
  ExpectType(b_, "nn.Flatten");
}

TEST_F(ModuleTypeCacheTest, RetargetedNodeIsSeen) {
  ASSERT_EQ(gm_.ModuleTypeOf(b_), Type("nn.Identity"));
  ASSERT_TRUE(gm_.graph().SetTarget(b_, Symbol::Intern("a")).ok());
  ExpectType(b_, "nn.ReLU");
}

TEST_F(ModuleTypeCacheTest, RemovedThenReinstalledUnderTheSamePathIsSeen) {
  ASSERT_TRUE(gm_.graph().SetArgs(gm_.graph().output(), {Argument(a_)}).ok());
  ASSERT_TRUE(gm_.graph().Erase(b_).ok());
  ASSERT_TRUE(gm_.RemoveModules({"b"}).ok());
  ASSERT_TRUE(gm_.SetModule("b", std::make_unique<Module>("nn.Dropout")).ok());
  Node* b2 = *gm_.graph().InsertBefore(gm_.graph().output(), NodeSpec{
      OpKind::kCallModule, Symbol::Intern("b"), {Argument(a_)}, {}, "b2"});
  ExpectType(b2, "nn.Dropout");
}

TEST_F(ModuleTypeCacheTest, NewNodeOfAnotherGraphModuleIsResolved) {
  // The cache is per GraphModule; an edit of another one only makes this one re-check.
  GraphModule other;
  ASSERT_TRUE(other.SetModule("a", std::make_unique<Module>("nn.Sigmoid")).ok());
  Node* ox = *other.graph().AddPlaceholder("x");
  Node* oa = *other.graph().AddCallModule("a", {ox}, {}, "a");
  EXPECT_EQ(other.ModuleTypeOf(oa), Type("nn.Sigmoid"));
  ExpectType(a_, "nn.ReLU");
  // A node of another graph is answered from this module tree, never from the cache.
  EXPECT_EQ(gm_.ModuleTypeOf(oa), Type("nn.ReLU"));
}

TEST_F(ModuleTypeCacheTest, TargetWithoutAModuleHasTheEmptyType) {
  ASSERT_TRUE(gm_.graph().SetTarget(b_, Symbol::Intern("no.such.module")).ok());
  EXPECT_TRUE(gm_.ModuleTypeOf(b_).empty());
  gm_.ResolveModuleTypes();
  EXPECT_TRUE(gm_.ModuleTypeOf(b_).empty());
  EXPECT_FALSE(gm_.Verify().ok());  // The dangling target itself is still an error.
}

// ModuleOf answers from the path table while the tree is unedited, however many nodes
// are created or retargeted meanwhile: it is the table's pointer, and the table was filled
// from the tree.
TEST_F(ModuleTypeCacheTest, ModuleOfIsTheTreesModuleAndNoneForOtherOps) {
  Module* a = gm_.FindModule("a");
  Module* b = gm_.FindModule("b");
  EXPECT_EQ(gm_.ModuleOf(a_), a);
  EXPECT_EQ(gm_.ModuleOf(b_), b);
  EXPECT_EQ(gm_.ModuleOf(x_), nullptr);
  EXPECT_EQ(gm_.ModuleOf(gm_.graph().output()), nullptr);
  EXPECT_EQ(gm_.FindModule(Symbol()), &gm_.root()) << "\"\" is the root, as FindModule(\"\")";
  // New nodes (the binding generation moves, the tree's does not).
  Node* a2 = InsertCall("a", b_, "a2");
  EXPECT_EQ(gm_.ModuleOf(a2), a);
  ExpectType(a2, "nn.ReLU");
}

TEST_F(ModuleTypeCacheTest, ModuleOfAPathNoNodeCalledAtResolveTimeIsWalked) {
  ASSERT_TRUE(gm_.SetModule("block.c", std::make_unique<Module>("nn.Tanh")).ok());
  gm_.ResolveModuleTypes();  // fills the table with "a" and "b" only
  Node* c = InsertCall("block.c", b_, "c");
  EXPECT_EQ(gm_.ModuleOf(c), gm_.FindModule("block.c"));
  EXPECT_EQ(gm_.FindModule(Symbol::Intern("block")), gm_.FindModule("block"));
  EXPECT_EQ(gm_.FindModule(Symbol::Intern("block.nope")), nullptr);
  ExpectType(c, "nn.Tanh");
}

TEST_F(ModuleTypeCacheTest, ModuleOfAReplacedModuleIsTheNewOne) {
  ASSERT_EQ(gm_.ModuleOf(a_), gm_.FindModule("a"));
  auto sigmoid = std::make_unique<Module>("nn.Sigmoid");
  const Module* installed = sigmoid.get();
  ASSERT_TRUE(gm_.SetModule("a", std::move(sigmoid)).ok());  // frees the cached one
  EXPECT_EQ(gm_.ModuleOf(a_), installed);
  ExpectType(a_, "nn.Sigmoid");
  // Replaced through a parent reached without GraphModule, and removed.
  gm_.root().SetChild("b", std::make_unique<Module>("nn.Identity"));
  EXPECT_EQ(gm_.ModuleOf(b_), gm_.root().FindChild("b"));
  gm_.ResolveModuleTypes();
  ASSERT_NE(gm_.root().RemoveChild("b"), nullptr);
  EXPECT_EQ(gm_.ModuleOf(b_), nullptr);
  EXPECT_EQ(gm_.GetModule(b_->target()).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ModuleTypeCacheTest, ModuleOfARetargetedNodeIsItsNewTargetsModule) {
  ASSERT_EQ(gm_.ModuleOf(b_), gm_.FindModule("b"));
  ASSERT_TRUE(gm_.graph().SetTarget(b_, Symbol::Intern("a")).ok());
  EXPECT_EQ(gm_.ModuleOf(b_), gm_.FindModule("a"));
  ExpectType(b_, "nn.ReLU");
}

// Building a fused module on the side (what the fusion pass does between matching and
// rewriting) leaves the table current: no walk, same answers.
TEST_F(ModuleTypeCacheTest, ModulesBuiltOutsideTheTreeLeaveTheCachesCurrent) {
  const uint64_t tree = gm_.module_bindings().tree();
  const uint64_t binding = gm_.module_bindings().binding();
  auto fused = std::make_unique<Module>("nni.LinearReLU");
  fused->SetChild("0", gm_.FindModule("a")->Clone());
  fused->SetChild("1", std::make_unique<Module>("nn.ReLU"));
  fused->set_type(Type("nni.ConvReLU2d"));
  EXPECT_EQ(gm_.module_bindings().tree(), tree);
  EXPECT_EQ(gm_.module_bindings().binding(), binding);
  ExpectType(a_, "nn.ReLU");
}

// Replacing a module in place (lowering moves the native module into the reference
// module's object) or adding modules under new paths (prepare's observers) leaves every
// existing path on the same module object: the path table stays current and still gives
// the walk's answers; only the nodes' cached types are re-resolved.
TEST_F(ModuleTypeCacheTest, ModuleReplacedInPlaceKeepsThePathTableCurrent) {
  Module* a = gm_.FindModule("a");
  const uint64_t tree = gm_.module_bindings().tree();
  Module native("nn.Sigmoid");
  native.SetChild("inner", std::make_unique<Module>("nn.Tanh"));
  *a = std::move(native);
  EXPECT_EQ(gm_.module_bindings().tree(), tree) << "the path table stays current";
  EXPECT_EQ(gm_.FindModule(a_->target()), a);
  ExpectType(a_, "nn.Sigmoid");
  ExpectType(b_, "nn.Identity");
  Node* inner = InsertCall("a.inner", b_, "inner");  // a path that resolved to nothing
  ExpectType(inner, "nn.Tanh");
  gm_.FindModule("b")->set_type(Type("nn.ReLU"));
  EXPECT_EQ(gm_.module_bindings().tree(), tree);
  ExpectType(b_, "nn.ReLU");
}

TEST_F(ModuleTypeCacheTest, ModulesAddedUnderNewPathsKeepThePathTableCurrent) {
  const uint64_t tree = gm_.module_bindings().tree();
  Module* container = gm_.root().SetChild("observers", std::make_unique<Module>("nn.Module"));
  Node* last = b_;
  for (int i = 0; i < 12; ++i) {  // past kChildrenScannedLinearly: the container indexes
    const std::string name = absl::StrCat("obs_", i);
    container->SetChild(name, std::make_unique<Module>(i % 2 == 0 ? "nn.Identity" : "nn.Tanh"));
    last = InsertCall(absl::StrCat("observers.", name).c_str(), last, name.c_str());
    ExpectModule(last, "added");
  }
  EXPECT_EQ(gm_.module_bindings().tree(), tree);
  ExpectType(last, "nn.Tanh");
  ExpectType(a_, "nn.ReLU");
}

// What the fusion pass does: erase the nodes calling some leaf modules, then remove those
// modules. The path table stays current for every other path, and answers nothing (not a
// freed module) for the removed ones, nor later for a module installed at such a path.
TEST_F(ModuleTypeCacheTest, RemovedLeavesLeaveTheOtherPathsInTheTable) {
  ASSERT_TRUE(gm_.SetModule("c", std::make_unique<Module>("nn.Tanh")).ok());
  ASSERT_TRUE(gm_.SetModule("block.d", std::make_unique<Module>("nn.Tanh")).ok());
  Node* c = InsertCall("c", b_, "c");
  Node* d = InsertCall("block.d", c, "d");
  gm_.ResolveModuleTypes();
  const Symbol c_path = c->target();
  const Symbol d_path = d->target();
  ASSERT_TRUE(gm_.graph().Erase(d).ok());
  ASSERT_TRUE(gm_.graph().Erase(c).ok());
  const Symbol removed[] = {c_path, d_path};
  ASSERT_TRUE(gm_.RemoveModules(absl::MakeConstSpan(removed)).ok());
  EXPECT_EQ(gm_.FindModule(c_path), nullptr);
  EXPECT_EQ(gm_.FindModule(d_path), nullptr);
  ASSERT_NE(gm_.FindModule("block"), nullptr);
  ExpectModule(a_, "after removal");
  ExpectModule(b_, "after removal");
  absl::Status verified = gm_.Verify();
  EXPECT_TRUE(verified.ok()) << verified;
  Module* again = gm_.root().SetChild("c", std::make_unique<Module>("nn.Sigmoid"));
  EXPECT_EQ(gm_.FindModule(c_path), again);
  Node* c2 = InsertCall("c", b_, "c2");
  ExpectType(c2, "nn.Sigmoid");
  ExpectType(a_, "nn.ReLU");
  // By text too, and a removed module with children leaves every path as it was.
  ASSERT_TRUE(gm_.graph().Erase(c2).ok());
  ASSERT_TRUE(gm_.RemoveModules(std::vector<std::string>{"c", "block"}).ok());
  EXPECT_EQ(gm_.FindModule(c_path), nullptr);
  EXPECT_EQ(gm_.FindModule(Symbol::Intern("block")), nullptr);
  ExpectType(b_, "nn.Identity");
}

// Moving a module with children out of the tree, or another module into its place, frees
// or detaches its subtree: the table must not answer the old child any more.
TEST_F(ModuleTypeCacheTest, ModuleWithChildrenReplacedInPlaceVoidsItsChildrensPaths) {
  ASSERT_TRUE(gm_.SetModule("block.c", std::make_unique<Module>("nn.Tanh")).ok());
  Node* c = InsertCall("block.c", b_, "c");
  gm_.ResolveModuleTypes();
  ASSERT_EQ(gm_.ModuleOf(c), gm_.FindModule("block.c"));
  *gm_.FindModule("block") = Module("nn.ReLU");  // block.c is freed
  EXPECT_EQ(gm_.FindModule(c->target()), nullptr);
  EXPECT_EQ(gm_.ModuleOf(c), nullptr);
  EXPECT_TRUE(gm_.ModuleTypeOf(c).empty());
  gm_.ResolveModuleTypes();
  EXPECT_EQ(gm_.FindModule(c->target()), nullptr);

  ASSERT_TRUE(gm_.SetModule("block.c", std::make_unique<Module>("nn.Tanh")).ok());
  ExpectType(c, "nn.Tanh");
  Module taken(std::move(*gm_.FindModule("block")));  // block.c leaves the tree with it
  EXPECT_EQ(gm_.FindModule(c->target()), nullptr);
  EXPECT_EQ(gm_.ModuleOf(c), nullptr);
  EXPECT_EQ(taken.FindChild("c")->type(), Type("nn.Tanh"));
}

// After ResolveModuleTypes, every call's module through the path table (by Symbol) and its
// cached type are those of the module found by walking its dotted path as text.
void ExpectTableAgreesWithTextWalk(GraphModule& gm, const std::vector<Node*>& calls) {
  gm.ResolveModuleTypes();
  for (const Node* n : calls) {
    const Module* walked = gm.FindModule(n->target().name());
    ASSERT_NE(walked, nullptr) << n->target();
    EXPECT_EQ(gm.FindModule(n->target()), walked) << n->target();
    EXPECT_EQ(gm.ModuleTypeOf(n), walked->type()) << n->target();
  }
}

// ResolveModuleTypes fills the path table by one walk of the tree (a path built from its
// parent's, looked up, never interned), stops at called modules and after a budget of
// modules, and resolves by text what the walk did not reach: every called path must
// still answer the uncached walk's module, whatever the shape of the tree.
TEST(PathTableWalkTest, NestedCalledAndUncalledPathsAllResolve) {
  GraphModule gm;
  for (const char* path : {"layer1.0.conv1", "layer1.0.bn1", "layer1.0.downsample.0",
                           "layer1.1.conv1", "layer2.0.conv1", "fc"}) {
    ASSERT_TRUE(gm.SetModule(path, std::make_unique<Module>("nn.ReLU")).ok());
  }
  // A called module with a child that is called too (the walk does not descend into a
  // called module), and paths no node calls (layer1.1.conv1, layer1.0.bn1).
  ASSERT_TRUE(gm.SetModule("fused", std::make_unique<Module>("nn.Sequential")).ok());
  ASSERT_TRUE(gm.SetModule("fused.0", std::make_unique<Module>("nn.Tanh")).ok());
  Node* x = *gm.graph().AddPlaceholder("x");
  std::vector<Node*> calls;
  for (const char* target : {"layer2.0.conv1", "layer1.0.conv1", "fused", "fused.0",
                             "layer1.0.downsample.0", "fc", "layer1.0.conv1"}) {
    x = *gm.graph().AddCallModule(target, {x}, {}, "");
    calls.push_back(x);
  }
  ASSERT_TRUE(gm.graph().SetOutput(x).ok());
  ExpectTableAgreesWithTextWalk(gm, calls);
  EXPECT_EQ(gm.ModuleTypeOf(calls[3]), Type("nn.Tanh"));
  absl::Status verified = gm.Verify();
  EXPECT_TRUE(verified.ok()) << verified;
}

// The walk looks a module's children up in groups and keeps the paths of the modules it
// descends into side by side: parents of more children than a group, several levels of
// long names (no small-string storage), siblings descended into in turn.
TEST(PathTableWalkTest, WideAndDeepTreesWithLongNamesAllResolve) {
  GraphModule gm;
  Node* x = *gm.graph().AddPlaceholder("x");
  std::vector<Node*> calls;
  for (int stage = 0; stage < 3; ++stage) {
    for (int block = 0; block < 40; ++block) {
      const std::string prefix =
          absl::StrCat("stage_with_a_long_name_", stage, ".block_", block);
      // Every third block is called whole; the others only in a grandchild.
      const std::string path =
          block % 3 == 0 ? prefix : absl::StrCat(prefix, ".inner_module_of_the_block.act");
      ASSERT_TRUE(gm.SetModule(path, std::make_unique<Module>(block % 2 ? "nn.Tanh" : "nn.ReLU"))
                      .ok());
      ASSERT_TRUE(gm.SetModule(absl::StrCat(prefix, "_uncalled"),
                               std::make_unique<Module>("nn.Identity"))
                      .ok());
      x = *gm.graph().AddCallModule(path, {x}, {}, "");
      calls.push_back(x);
    }
  }
  ASSERT_TRUE(gm.graph().SetOutput(x).ok());
  ExpectTableAgreesWithTextWalk(gm, calls);
  absl::Status verified = gm.Verify();
  EXPECT_TRUE(verified.ok()) << verified;
}

TEST(PathTableWalkTest, ManyUncalledModulesExhaustTheWalkAndTheRestIsResolvedByText) {
  GraphModule gm;
  // 300 uncalled modules come first in child order, then the called ones (deeper).
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(gm.SetModule(absl::StrCat("unused", i), std::make_unique<Module>("nn.ReLU")).ok());
  }
  Node* x = *gm.graph().AddPlaceholder("x");
  std::vector<Node*> calls;
  for (int i = 0; i < 20; ++i) {
    const std::string path = absl::StrCat("blocks.", i, ".act");
    ASSERT_TRUE(gm.SetModule(path, std::make_unique<Module>(i % 2 ? "nn.Tanh" : "nn.ReLU")).ok());
    x = *gm.graph().AddCallModule(path, {x}, {}, "");
    calls.push_back(x);
  }
  // A called path that names no module.
  ASSERT_TRUE(gm.SetModule("gone", std::make_unique<Module>("nn.ReLU")).ok());
  Node* gone = *gm.graph().AddCallModule("gone", {x}, {}, "");
  ASSERT_TRUE(gm.graph().SetOutput(gone).ok());
  ASSERT_NE(gm.root().RemoveChild("gone"), nullptr);
  gm.ResolveModuleTypes();
  for (const Node* n : calls) {
    const Module* walked = gm.FindModule(n->target().name());
    ASSERT_NE(walked, nullptr);
    EXPECT_EQ(gm.FindModule(n->target()), walked) << n->target();
    EXPECT_EQ(gm.ModuleTypeOf(n), walked->type()) << n->target();
  }
  EXPECT_EQ(gm.FindModule(gone->target()), nullptr);
  EXPECT_TRUE(gm.ModuleTypeOf(gone).empty());
}

// Paths whose symbol ids lie far apart (interned at very different times): the table is
// not built, and every answer is still the walk's.
TEST(ModuleOfSpreadIdsTest, FarApartPathsAreWalkedCorrectly) {
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("early", std::make_unique<Module>("nn.ReLU")).ok());
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* early = *gm.graph().AddCallModule("early", {x}, {}, "early");
  for (int i = 0; i < 3000; ++i) Symbol::Intern(absl::StrCat("spread_ids_filler_", i));
  ASSERT_TRUE(gm.SetModule("late", std::make_unique<Module>("nn.Tanh")).ok());
  Node* late = *gm.graph().AddCallModule("late", {early}, {}, "late");
  ASSERT_TRUE(gm.graph().SetOutput(late).ok());
  ASSERT_GT(late->target().id() - early->target().id(), 3000u);
  gm.ResolveModuleTypes();
  EXPECT_EQ(gm.ModuleOf(early), gm.FindModule("early"));
  EXPECT_EQ(gm.ModuleOf(late), gm.FindModule("late"));
  EXPECT_EQ(gm.ModuleTypeOf(late), Type("nn.Tanh"));
  EXPECT_TRUE(gm.Verify().ok());
}

TEST(RemoveModulesNestingTest, RefusesToRemoveAModuleEnclosingOneANodeCalls) {
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("block.conv", std::make_unique<Module>("nn.ReLU")).ok());
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* conv = *gm.graph().AddCallModule("block.conv", {x}, {}, "conv");
  ASSERT_TRUE(gm.graph().SetOutput(conv).ok());
  absl::Status removed = gm.RemoveModules({"block"});
  EXPECT_EQ(removed.code(), absl::StatusCode::kFailedPrecondition) << removed;
  EXPECT_NE(removed.message().find("block.conv"), absl::string_view::npos) << removed;
  ASSERT_NE(gm.FindModule("block.conv"), nullptr);
  EXPECT_TRUE(gm.Verify().ok());
}

}  // namespace
}  // namespace fuselage
