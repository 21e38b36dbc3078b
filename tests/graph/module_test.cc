// Module's children and GraphModule's path operations: the child index (a module with more
// than Module::kChildrenScannedLinearly children hashes them, a smaller one scans) must
// always agree with children(); every edit of the tree bumps the module-binding
// generation; paths resolve component by component with errors that name the component.
// The expectation in the randomized test is a plain list of (name, module) kept by the
// test itself.
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/graph_module.h"
#include "graph/module.h"
#include "graph/module_binding.h"
#include "gtest/gtest.h"

namespace fuselage {
namespace {

using Reference = std::vector<std::pair<std::string, const Module*>>;

// children() equals `expected` in order, every name finds its module, absent ones nothing.
void ExpectChildren(const Module& m, const Reference& expected) {
  ASSERT_EQ(m.children().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(m.children()[i].first, expected[i].first) << "position " << i;
    EXPECT_EQ(m.children()[i].second.get(), expected[i].second) << expected[i].first;
    EXPECT_EQ(m.FindChild(expected[i].first), expected[i].second) << expected[i].first;
  }
  EXPECT_EQ(m.FindChild("absent"), nullptr);
  EXPECT_EQ(m.FindChild(""), nullptr);
}

std::unique_ptr<Module> Relu() { return std::make_unique<Module>("nn.ReLU"); }

TEST(ModuleChildrenTest, IndexAgreesWithAReferenceListThroughRandomEdits) {
  std::mt19937 rng(42);
  Module m("nn.Module");
  Reference expected;
  const auto position_of = [&expected](const std::string& name) {
    for (size_t i = 0; i < expected.size(); ++i) {
      if (expected[i].first == name) return static_cast<int>(i);
    }
    return -1;
  };
  // Grows past the linear-scan limit to a few hundred children and shrinks back to none,
  // twice, so the index is built, renumbered and dropped many times.
  for (int step = 0; step < 4000; ++step) {
    const bool growing = (step / 1000) % 2 == 0;
    const std::string name = absl::StrCat("c", rng() % 400);
    const int op = static_cast<int>(rng() % 10);
    if (op < (growing ? 6 : 2)) {  // set: add or replace
      auto child = Relu();
      const Module* raw = child.get();
      EXPECT_EQ(m.SetChild(name, std::move(child)), raw);
      const int at = position_of(name);
      if (at < 0) {
        expected.emplace_back(name, raw);
      } else {
        expected[static_cast<size_t>(at)].second = raw;
      }
    } else if (op < 8) {  // remove one
      const int at = position_of(name);
      std::unique_ptr<Module> removed = m.RemoveChild(name);
      if (at < 0) {
        EXPECT_EQ(removed, nullptr) << name;
      } else {
        EXPECT_EQ(removed.get(), expected[static_cast<size_t>(at)].second) << name;
        expected.erase(expected.begin() + at);
      }
    } else {  // remove a batch of up to 40 names, present or not
      absl::flat_hash_set<std::string> names;
      for (int k = static_cast<int>(rng() % 40); k > 0; --k) {
        names.insert(absl::StrCat("c", rng() % 400));
      }
      int present = 0;
      for (const std::string& n : names) present += position_of(n) >= 0 ? 1 : 0;
      EXPECT_EQ(m.RemoveChildren(names), present);
      Reference kept;
      for (const auto& entry : expected) {
        if (!names.contains(entry.first)) kept.push_back(entry);
      }
      expected = std::move(kept);
    }
    ExpectChildren(m, expected);
    if (testing::Test::HasFailure()) FAIL() << "at step " << step;
  }
}

TEST(ModuleChildrenTest, EveryChildEditBumpsTheModuleBindingGeneration) {
  Module m("nn.Module");
  for (int i = 0; i < 20; ++i) m.SetChild(absl::StrCat("c", i), Relu());
  uint64_t before = ModuleBindingGeneration();
  m.SetChild("c3", Relu());
  EXPECT_GT(ModuleBindingGeneration(), before) << "replace";
  before = ModuleBindingGeneration();
  m.RemoveChild("c4");
  EXPECT_GT(ModuleBindingGeneration(), before) << "RemoveChild";
  before = ModuleBindingGeneration();
  EXPECT_EQ(m.RemoveChildren({"c5", "c6"}), 2);
  EXPECT_GT(ModuleBindingGeneration(), before) << "RemoveChildren";
  before = ModuleBindingGeneration();
  Module moved(std::move(m));
  EXPECT_GT(ModuleBindingGeneration(), before) << "move";

  GraphModule gm;
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(gm.SetModule(absl::StrCat("r", i), Relu()).ok());
  before = ModuleBindingGeneration();
  ASSERT_TRUE(gm.RemoveModules({"r1", "r2"}).ok());
  EXPECT_GT(ModuleBindingGeneration(), before) << "RemoveModules";
}

// A moved module's index belongs to the module that now holds the children: both sizes
// (scanned and indexed), move construction and move assignment, and the moved-from module
// is empty and usable.
TEST(ModuleChildrenTest, MovedModulesKeepTheirChildrenFindable) {
  for (int count : {3, 30}) {
    Module from("nn.Sequential");
    Reference expected;
    for (int i = 0; i < count; ++i) {
      const std::string name = absl::StrCat(i);
      expected.emplace_back(name, from.SetChild(name, Relu()));
    }
    Module constructed(std::move(from));
    ExpectChildren(constructed, expected);
    ExpectChildren(from, {});  // NOLINT(bugprone-use-after-move): moved-from is empty.
    const Module* reused = from.SetChild("x", Relu());
    ExpectChildren(from, {{"x", reused}});

    Module assigned("nn.Module");
    assigned.SetChild("old", Relu());
    assigned = std::move(constructed);
    EXPECT_EQ(assigned.type().name(), "nn.Sequential");
    ExpectChildren(assigned, expected);
    ExpectChildren(constructed, {});  // NOLINT(bugprone-use-after-move)
  }
}

TEST(ModuleChildrenTest, CloneCopiesChildrenInOrderDeeply) {
  Module root("nn.Module");
  for (int i = 0; i < 12; ++i) {
    Module* block = root.SetChild(absl::StrCat("block", i), std::make_unique<Module>("nn.Module"));
    block->SetChild("conv", std::make_unique<Module>("nn.Conv2d"));
    block->SetChild("relu", Relu());
  }
  std::unique_ptr<Module> copy = root.Clone();
  ASSERT_EQ(copy->children().size(), 12u);
  for (int i = 0; i < 12; ++i) {
    const std::string name = absl::StrCat("block", i);
    EXPECT_EQ(copy->children()[static_cast<size_t>(i)].first, name);
    const Module* block = copy->FindChild(name);
    ASSERT_NE(block, nullptr) << name;
    EXPECT_NE(block, root.FindChild(name)) << "a copy, not the original";
    ASSERT_NE(block->FindChild("conv"), nullptr);
    EXPECT_EQ(block->FindChild("conv")->type().name(), "nn.Conv2d");
    EXPECT_EQ(block->children()[1].first, "relu");
  }
}

// Root "big" with 20 children b0..b19, each with 10 children l0..l9; "small" with 2, x and
// y; a graph x -> small.y -> output.
std::unique_ptr<GraphModule> Tree() {
  auto gm = std::make_unique<GraphModule>();
  for (int b = 0; b < 20; ++b) {
    for (int l = 0; l < 10; ++l) {
      EXPECT_TRUE(gm->SetModule(absl::StrCat("big.b", b, ".l", l), Relu()).ok());
    }
  }
  EXPECT_TRUE(gm->SetModule("small.x", Relu()).ok());
  EXPECT_TRUE(gm->SetModule("small.y", Relu()).ok());
  Node* x = *gm->graph().AddPlaceholder("x");
  Node* y = *gm->graph().AddCallModule("small.y", {x});
  EXPECT_TRUE(gm->graph().SetOutput(y).ok());
  return gm;
}

TEST(GraphModulePathTest, FindAndGetModuleResolveEachComponent) {
  auto gm = Tree();
  const Module* leaf = gm->FindModule("big.b7.l3");
  ASSERT_NE(leaf, nullptr);
  EXPECT_EQ(leaf, gm->root().FindChild("big")->FindChild("b7")->FindChild("l3"));
  EXPECT_EQ(*gm->GetModule("big.b7.l3"), leaf);
  EXPECT_EQ(gm->FindModule(""), &gm->root());
  EXPECT_EQ(gm->FindModule("big.b7"), gm->root().FindChild("big")->FindChild("b7"));
  for (const char* bad : {"big.b7.l3.z", "big..b7", "big.b7.", ".big", "big.b20", "nope"}) {
    EXPECT_EQ(gm->FindModule(bad), nullptr) << bad;
    EXPECT_FALSE(gm->GetModule(bad).ok()) << bad;
  }
  EXPECT_EQ(gm->GetModule("big.b7.l30.z").status().message(),
            "no module 'l30' under 'big.b7' (resolving 'big.b7.l30.z')");
  EXPECT_EQ(gm->GetModule("nope.a").status().message(),
            "no module 'nope' under '<root>' (resolving 'nope.a')");
  EXPECT_EQ(gm->GetModule("big..b7").status().message(),
            "no module '' under 'big' (resolving 'big..b7')");
}

TEST(GraphModulePathTest, SetModuleCreatesParentsAndRejectsBadPathsUnchanged) {
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("a.b.c", Relu()).ok());
  EXPECT_EQ(gm.FindModule("a")->type().name(), "nn.Module");
  EXPECT_EQ(gm.FindModule("a.b")->type().name(), "nn.Module");
  EXPECT_EQ(gm.FindModule("a.b.c")->type().name(), "nn.ReLU");
  for (const char* bad : {"x.y.", ".x", "x..y", "a.b.", "."}) {
    const absl::Status status = gm.SetModule(bad, Relu());
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(status.message(), absl::StrCat("SetModule: bad path '", bad, "'"));
  }
  // Nothing was created on the way to a bad path.
  EXPECT_EQ(gm.FindModule("x"), nullptr);
  EXPECT_EQ(gm.root().children().size(), 1u);
  EXPECT_EQ(gm.FindModule("a.b")->children().size(), 1u);
}

TEST(GraphModulePathTest, RemoveModulesInIndexedAndScannedParents) {
  auto gm = Tree();
  // In an indexed parent (big.b3: 10 children), a scanned one (small), the root, with a
  // repeated path and a path inside another removed path.
  ASSERT_TRUE(gm->RemoveModules({"big.b3.l0", "big.b3.l9", "big.b3.l4", "big.b3.l0",
                                 "small.x", "big.b5.l1", "big.b5", "big.b19"})
                  .ok());
  const Module* b3 = gm->FindModule("big.b3");
  ASSERT_NE(b3, nullptr);
  std::vector<std::string> names;
  for (const auto& entry : b3->children()) names.push_back(entry.first);
  EXPECT_EQ(names, (std::vector<std::string>{"l1", "l2", "l3", "l5", "l6", "l7", "l8"}));
  for (const std::string& name : names) {
    EXPECT_EQ(gm->FindModule(absl::StrCat("big.b3.", name)), b3->FindChild(name)) << name;
  }
  EXPECT_EQ(gm->FindModule("big.b3.l0"), nullptr);
  EXPECT_EQ(gm->FindModule("big.b5"), nullptr);
  EXPECT_EQ(gm->FindModule("big.b19"), nullptr);
  ASSERT_NE(gm->FindModule("big.b18.l9"), nullptr);
  EXPECT_EQ(gm->FindModule("big")->children().size(), 18u);
  EXPECT_EQ(gm->FindModule("small.x"), nullptr);
  EXPECT_NE(gm->FindModule("small.y"), nullptr);
  // A missing or a called module refuses the whole batch.
  EXPECT_EQ(gm->RemoveModules({"big.b0.l0", "small.y"}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(gm->RemoveModules({"big.b0.l0", "big.b0.l10"}).code(), absl::StatusCode::kNotFound);
  EXPECT_NE(gm->FindModule("big.b0.l0"), nullptr);
  EXPECT_EQ(gm->RemoveModules({""}).code(), absl::StatusCode::kNotFound);
  const absl::Status verified = gm->Verify();
  EXPECT_TRUE(verified.ok()) << verified;
}

}  // namespace
}  // namespace fuselage
