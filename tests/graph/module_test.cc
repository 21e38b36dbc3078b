// Module's children and GraphModule's path operations: the child index (a module with more
// than Module::kChildrenScannedLinearly children hashes them, a smaller one scans) must
// always agree with children(); every edit of a module in a tree bumps the module-tree
// and module-binding generations, an edit of a module in no tree neither; paths resolve component by component with errors that name the component.
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

// Edits that take a module out of a tree change what an existing path resolves to: both
// generations change.
TEST(ModuleChildrenTest, EveryChildEditInATreeBumpsBothGenerations) {
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("m", std::make_unique<Module>("nn.Module")).ok());
  Module& m = *gm.FindModule("m");  // in gm's tree
  for (int i = 0; i < 20; ++i) m.SetChild(absl::StrCat("c", i), Relu());
  const auto expect_bumped = [&gm](uint64_t binding_before, uint64_t tree_before,
                                const char* what) {
    EXPECT_GT(gm.module_bindings().binding(), binding_before) << what;
    EXPECT_GT(gm.module_bindings().tree(), tree_before) << what;
  };
  uint64_t binding = gm.module_bindings().binding(), tree = gm.module_bindings().tree();
  m.SetChild("c3", Relu());
  expect_bumped(binding, tree, "replace");
  binding = gm.module_bindings().binding(), tree = gm.module_bindings().tree();
  m.RemoveChild("c4");
  expect_bumped(binding, tree, "RemoveChild");
  binding = gm.module_bindings().binding(), tree = gm.module_bindings().tree();
  EXPECT_EQ(m.RemoveChildren({"c5", "c6"}), 2);
  expect_bumped(binding, tree, "RemoveChildren");
  binding = gm.module_bindings().binding(), tree = gm.module_bindings().tree();
  Module moved(std::move(m));
  expect_bumped(binding, tree, "move out of the tree");
  binding = gm.module_bindings().binding(), tree = gm.module_bindings().tree();
  Module replacement("nn.Module");
  replacement.SetChild("z", Relu());
  moved = std::move(replacement);  // moved's 17 children are freed; in no tree: no bump
  EXPECT_EQ(gm.module_bindings().tree(), tree);
  m.SetChild("only", Relu());  // a new path: the binding generation only
  binding = gm.module_bindings().binding(), tree = gm.module_bindings().tree();
  m = std::move(moved);  // m's child "only" leaves the tree
  expect_bumped(binding, tree, "move into a module with children in the tree");

  for (int i = 0; i < 20; ++i) ASSERT_TRUE(gm.SetModule(absl::StrCat("r", i), Relu()).ok());
  binding = gm.module_bindings().binding(), tree = gm.module_bindings().tree();
  ASSERT_TRUE(gm.RemoveModules({"r1", "r2"}).ok());
  expect_bumped(binding, tree, "RemoveModules");
}

// Edits that leave every existing path resolving to the same module object: a type
// changed, a child added under a new name, a module moved into a childless module of the
// tree (replacing a module in place) or out of one. Only the binding generation changes
// (the nodes' cached types), and the path table stays valid (module_type_cache_test checks
// FindModule(Symbol) against the walk after each).
TEST(ModuleChildrenTest, EditsKeepingEveryPathBumpTheBindingGenerationOnly) {
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("m.leaf", Relu()).ok());
  Module& m = *gm.FindModule("m");
  const auto expect_binding_only = [&gm](uint64_t binding_before, uint64_t tree_before,
                                      const char* what) {
    EXPECT_GT(gm.module_bindings().binding(), binding_before) << what;
    EXPECT_EQ(gm.module_bindings().tree(), tree_before) << what;
  };
  uint64_t binding = gm.module_bindings().binding(), tree = gm.module_bindings().tree();
  m.FindChild("leaf")->set_type(Symbol::Intern("nn.Sigmoid"));
  expect_binding_only(binding, tree, "set_type");
  binding = gm.module_bindings().binding(), tree = gm.module_bindings().tree();
  m.SetChild("new", Relu());
  expect_binding_only(binding, tree, "SetChild of a new name (scanned parent)");
  for (int i = 0; i < 10; ++i) m.SetChild(absl::StrCat("n", i), Relu());
  binding = gm.module_bindings().binding(), tree = gm.module_bindings().tree();
  m.SetChild("n10", Relu());
  expect_binding_only(binding, tree, "SetChild of a new name (indexed parent)");
  binding = gm.module_bindings().binding(), tree = gm.module_bindings().tree();
  ASSERT_TRUE(gm.SetModule("p.q.r", Relu()).ok());
  expect_binding_only(binding, tree, "SetModule creating parents");
  binding = gm.module_bindings().binding(), tree = gm.module_bindings().tree();
  Module native("nnq.Conv2d");
  native.SetChild("inner", Relu());
  *m.FindChild("leaf") = std::move(native);
  expect_binding_only(binding, tree, "move into a childless module");
  EXPECT_EQ(gm.FindModule("m.leaf")->type().name(), "nnq.Conv2d");
  EXPECT_NE(gm.FindModule("m.leaf.inner"), nullptr);
  binding = gm.module_bindings().binding(), tree = gm.module_bindings().tree();
  Module taken(std::move(*m.FindChild("new")));
  expect_binding_only(binding, tree, "move out of a childless module");
  EXPECT_EQ(taken.type().name(), "nn.ReLU");
  // And the edits that do change a path, for contrast: replacing a child by name.
  binding = gm.module_bindings().binding(), tree = gm.module_bindings().tree();
  m.SetChild("new", Relu());
  EXPECT_GT(gm.module_bindings().tree(), tree) << "replacing a child";
  binding = gm.module_bindings().binding(), tree = gm.module_bindings().tree();
  m.SetChild("n3", Relu());
  EXPECT_GT(gm.module_bindings().tree(), tree) << "replacing a child (indexed parent)";
}

// A module in no model's tree (being built, or removed from one) can change what no
// call_module node resolves to, so editing it -- or any of its children -- leaves every
// cache current; installing it bumps the generations of the model it joins.
TEST(ModuleChildrenTest, EditsOutsideEveryTreeBumpNothing) {
  GraphModule gm;
  const uint64_t binding = gm.module_bindings().binding();
  const uint64_t tree = gm.module_bindings().tree();
  auto fused = std::make_unique<Module>("nni.ConvReLU2d");
  for (int i = 0; i < 12; ++i) fused->SetChild(absl::StrCat(i), Relu());  // indexed too
  fused->SetChild("3", Relu());
  fused->FindChild("0")->set_type(Symbol::Intern("nn.Conv2d"));  // a child of it
  EXPECT_EQ(fused->RemoveChildren({"5", "6"}), 2);
  fused->set_type(Symbol::Intern("nni.LinearReLU"));
  Module moved(std::move(*fused));
  *fused = std::move(moved);
  std::unique_ptr<Module> copy = fused->Clone();
  copy->SetChild("extra", Relu());
  EXPECT_EQ(gm.module_bindings().tree(), tree);
  EXPECT_EQ(gm.module_bindings().binding(), binding);

  Module* child = fused->FindChild("0");
  ASSERT_TRUE(gm.SetModule("f", std::move(fused)).ok());
  // A new path: what nodes resolve to changes, what existing paths do does not.
  EXPECT_GT(gm.module_bindings().binding(), binding) << "installing";
  EXPECT_EQ(gm.module_bindings().tree(), tree) << "installing under a new path";
  // The installed module's children joined the model too.
  uint64_t binding_now = gm.module_bindings().binding();
  child->set_type(Symbol::Intern("nn.Sigmoid"));
  EXPECT_GT(gm.module_bindings().binding(), binding_now) << "a child of an installed module";
  std::unique_ptr<Module> removed = gm.root().RemoveChild("f");
  ASSERT_NE(removed, nullptr);
  EXPECT_GT(gm.module_bindings().tree(), tree) << "removing";
  const uint64_t tree_after_removal = gm.module_bindings().tree();
  binding_now = gm.module_bindings().binding();
  removed->SetChild("again", Relu());
  removed->set_type(Symbol::Intern("nn.Sequential"));
  removed->FindChild("0")->set_type(Symbol::Intern("nn.Tanh"));
  EXPECT_EQ(gm.module_bindings().tree(), tree_after_removal) << "removed from the tree";
  EXPECT_EQ(gm.module_bindings().binding(), binding_now) << "removed from the tree";
}

// The generations are per model (issue #22, item 12): editing one model's tree or nodes
// leaves another model's caches current, and a module moved between models belongs to
// the one it is in now.
TEST(ModuleChildrenTest, EditsOfOneModelLeaveAnotherModelsCachesCurrent) {
  GraphModule a, b;
  ASSERT_TRUE(a.SetModule("m", Relu()).ok());
  ASSERT_TRUE(b.SetModule("m", Relu()).ok());
  Node* bx = *b.graph().AddPlaceholder("x");
  Node* bm = *b.graph().AddCallModule("m", {bx});
  b.ResolveModuleTypes();
  const uint64_t binding = b.module_bindings().binding(), tree = b.module_bindings().tree();
  a.FindModule("m")->set_type(Symbol::Intern("nn.Tanh"));
  ASSERT_TRUE(a.SetModule("m", Relu()).ok());  // a replacement: a tree edit of a
  ASSERT_TRUE(a.RemoveModules({"m"}).ok());
  Node* ax = *a.graph().AddPlaceholder("x");
  ASSERT_TRUE(a.SetModule("n", Relu()).ok());
  ASSERT_TRUE(a.graph().AddCallModule("n", {ax}).ok());
  EXPECT_EQ(b.module_bindings().binding(), binding);
  EXPECT_EQ(b.module_bindings().tree(), tree);
  EXPECT_EQ(b.ModuleTypeOf(bm).name(), "nn.ReLU");
  // A module taken out of a and installed in b: an edit of it now is b's.
  std::unique_ptr<Module> moved = a.root().RemoveChild("n");
  ASSERT_NE(moved, nullptr);
  Module* raw = moved.get();
  ASSERT_TRUE(b.SetModule("k", std::move(moved)).ok());
  const uint64_t a_binding = a.module_bindings().binding();
  const uint64_t b_binding = b.module_bindings().binding();
  raw->set_type(Symbol::Intern("nn.Sigmoid"));
  EXPECT_EQ(a.module_bindings().binding(), a_binding);
  EXPECT_GT(b.module_bindings().binding(), b_binding);
}

// Creating a node that calls a module changes what nodes resolve to, not what paths do.
TEST(ModuleChildrenTest, NewCallModuleNodeBumpsTheBindingGenerationOnly) {
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("a", Relu()).ok());
  Node* x = *gm.graph().AddPlaceholder("x");
  const uint64_t binding = gm.module_bindings().binding(), tree = gm.module_bindings().tree();
  ASSERT_TRUE(gm.graph().AddCallModule("a", {x}).ok());
  EXPECT_GT(gm.module_bindings().binding(), binding);
  EXPECT_EQ(gm.module_bindings().tree(), tree);
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

// Clone(spare_tensors, spare_attributes): the same copy as Clone(), and that many fields
// can be added without moving the ones already there (no reallocation).
TEST(ModuleCloneTest, CloneWithSpareRoomCopiesTheSameAndAddsWithoutMoving) {
  Module conv("nn.Conv2d");
  conv.SetTensor("weight", Tensor::FromFloats({2}, {1.0f, 2.0f}));
  conv.SetTensor("bias", Tensor::FromFloats({1}, {0.5f}));
  conv.SetAttribute("stride", Argument::Ints({1, 1}));
  conv.SetChild("inner", Relu());
  std::unique_ptr<Module> plain = conv.Clone();
  std::unique_ptr<Module> roomy = conv.Clone(3, 2);
  for (const Module* copy : {plain.get(), roomy.get()}) {
    EXPECT_EQ(copy->type(), conv.type());
    ASSERT_EQ(copy->tensors().size(), 2u);
    EXPECT_EQ(copy->tensors()[0].first, "weight");
    EXPECT_EQ(copy->tensors()[0].second, conv.tensors()[0].second);
    EXPECT_EQ(copy->tensors()[1].first, "bias");
    ASSERT_EQ(copy->attributes().size(), 1u);
    EXPECT_EQ(copy->attributes()[0], conv.attributes()[0]);
    ASSERT_NE(copy->FindChild("inner"), nullptr);
    EXPECT_NE(copy->FindChild("inner"), conv.FindChild("inner"));
  }
  const auto* first_tensor = &roomy->tensors()[0];
  const auto* first_attribute = &roomy->attributes()[0];
  roomy->SetTensor("weight_scale", Tensor::FromFloats({1}, {0.1f}));
  roomy->SetTensor("weight_zero_point", Tensor::FromInt64s({1}, {0}));
  roomy->SetTensor("weight_axis", Tensor::FromInt64s({1}, {0}));
  roomy->SetAttribute("weight_qscheme", Argument::Int(0));
  roomy->SetAttribute("weight_dtype", Argument::Int(1));
  EXPECT_EQ(&roomy->tensors()[0], first_tensor) << "tensors were moved";
  EXPECT_EQ(&roomy->attributes()[0], first_attribute) << "attributes were moved";
  EXPECT_EQ(roomy->tensors().size(), 5u);
  EXPECT_EQ(roomy->attributes().size(), 3u);
  EXPECT_EQ(conv.tensors().size(), 2u) << "the original is untouched";
}

TEST(ModuleCloneTest, CloneAttributesCopiesTypeAndAttributesOnly) {
  Module conv("nnqr.Conv2d");
  conv.SetTensor("weight", Tensor::FromFloats({1}, {1.0f}));
  conv.SetAttribute("stride", Argument::Ints({2, 2}));
  conv.SetAttribute("groups", Argument::Int(1));
  conv.SetChild("inner", Relu());
  std::unique_ptr<Module> copy = conv.CloneAttributes(2, 1);
  EXPECT_EQ(copy->type(), conv.type());
  EXPECT_TRUE(copy->tensors().empty());
  EXPECT_TRUE(copy->children().empty());
  ASSERT_EQ(copy->attributes().size(), 2u);
  EXPECT_EQ(copy->attributes()[0].first, "stride");
  EXPECT_EQ(copy->attributes()[0].second, Argument::Ints({2, 2}));
  EXPECT_EQ(copy->GetInt("groups").value_or(-1), 1);
  const auto* first_attribute = &copy->attributes()[0];
  copy->SetTensor("weight", Tensor::FromFloats({1}, {2.0f}));
  Tensor* added = copy->FindMutableTensor("weight");
  copy->SetTensor("scale", Tensor::FromFloats({1}, {0.5f}));
  copy->SetAttribute("scale_attr", Argument::Int(3));
  EXPECT_EQ(copy->FindMutableTensor("weight"), added) << "tensors were moved";
  EXPECT_EQ(&copy->attributes()[0], first_attribute) << "attributes were moved";
  EXPECT_EQ(conv.FindTensor("weight")->data<float>()[0], 1.0f) << "the original is untouched";
  EXPECT_EQ(conv.children().size(), 1u);
}

TEST(ModuleCloneTest, ReservedFieldsAndChildrenAreAddedWithoutMoving) {
  Module fused("nni.ConvReLU2d");
  fused.ReserveTensors(3);
  fused.ReserveAttributes(2);
  fused.ReserveChildren(3);
  fused.SetTensor("a", Tensor::FromFloats({1}, {1.0f}));
  fused.SetAttribute("x", Argument::Int(1));
  Module* first_child = fused.SetChild("0", Relu());
  const auto* first_tensor = &fused.tensors()[0];
  const auto* first_attribute = &fused.attributes()[0];
  const auto* first_child_entry = &fused.children()[0];
  fused.SetTensor("b", Tensor::FromFloats({1}, {2.0f}));
  fused.SetTensor("c", Tensor::FromFloats({1}, {3.0f}));
  fused.SetAttribute("y", Argument::Int(2));
  fused.SetChild("1", Relu());
  fused.SetChild("2", Relu());
  EXPECT_EQ(&fused.tensors()[0], first_tensor);
  EXPECT_EQ(&fused.attributes()[0], first_attribute);
  EXPECT_EQ(&fused.children()[0], first_child_entry);
  EXPECT_EQ(fused.FindChild("0"), first_child);
  EXPECT_EQ(fused.children().size(), 3u);
  ASSERT_NE(fused.FindTensor("c"), nullptr);
  EXPECT_EQ(fused.FindTensor("c")->data<float>()[0], 3.0f);
  EXPECT_EQ(fused.GetInt("y").value_or(-1), 2);
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

// An observer-like prototype: 2 tensors, 3 attributes (one name past 15 characters).
std::unique_ptr<Module> ObserverLike() {
  auto m = std::make_unique<Module>("MinMaxObserver");
  m->SetAttribute("quant_min", Argument::Int(0));
  m->SetAttribute("quant_max", Argument::Int(255));
  m->SetAttribute("has_customized_qrange", Argument::Bool(false));
  m->SetTensor("min_val", Tensor::FromFloats({}, {1.0f}));
  m->SetTensor("max_val", Tensor::FromFloats({}, {2.0f}));
  return m;
}

TEST(ModuleShareTest, ClonesOfASharingModuleShareItsListsUntilOneEditsThem) {
  std::unique_ptr<Module> prototype = ObserverLike();
  prototype->ShareFieldsWithClones();
  std::unique_ptr<Module> a = prototype->Clone();
  std::unique_ptr<Module> b = prototype->Clone();
  // Shared: the very same list objects, holding what the prototype was built with.
  EXPECT_EQ(&a->tensors(), &prototype->tensors());
  EXPECT_EQ(&b->attributes(), &prototype->attributes());
  ASSERT_EQ(a->tensors().size(), 2u);
  EXPECT_EQ(a->tensors()[1].first, "max_val");
  EXPECT_EQ(a->FindTensor("min_val")->data<float>()[0], 1.0f);
  EXPECT_EQ(a->GetInt("quant_max").value_or(-1), 255);
  ASSERT_NE(a->FindAttribute("has_customized_qrange"), nullptr);
  // Looking for an absent tensor to write copies nothing.
  EXPECT_EQ(a->FindMutableTensor("absent"), nullptr);
  EXPECT_EQ(&a->tensors(), &prototype->tensors());

  // Edits of one clone: its own copy; the prototype and the other clone keep the values.
  a->SetTensor("min_val", Tensor::FromFloats({}, {-3.0f}));
  a->SetAttribute("eps", Argument::Float(0.5));
  a->FindMutableTensor("max_val")->mutable_data<float>()[0] = 7.0f;
  EXPECT_NE(&a->tensors(), &prototype->tensors());
  EXPECT_NE(&a->attributes(), &prototype->attributes());
  EXPECT_EQ(a->FindTensor("min_val")->data<float>()[0], -3.0f);
  EXPECT_EQ(a->FindTensor("max_val")->data<float>()[0], 7.0f);
  ASSERT_EQ(a->attributes().size(), 4u);
  EXPECT_EQ(a->attributes()[3].first, "eps");
  EXPECT_EQ(a->attributes()[2].first, "has_customized_qrange");
  for (const Module* unedited : {prototype.get(), b.get()}) {
    EXPECT_EQ(unedited->FindTensor("min_val")->data<float>()[0], 1.0f);
    EXPECT_EQ(unedited->FindTensor("max_val")->data<float>()[0], 2.0f);
    EXPECT_EQ(unedited->attributes().size(), 3u);
    EXPECT_EQ(unedited->FindAttribute("eps"), nullptr);
  }

  // Removing from a shared list; editing the prototype itself; the clones keep theirs.
  EXPECT_TRUE(b->RemoveTensor("min_val"));
  EXPECT_FALSE(b->RemoveTensor("min_val"));
  EXPECT_TRUE(b->RemoveAttribute("quant_min"));
  ASSERT_EQ(b->tensors().size(), 1u);
  EXPECT_EQ(b->tensors()[0].first, "max_val");
  EXPECT_EQ(b->FindAttribute("quant_min"), nullptr);
  std::unique_ptr<Module> c = prototype->Clone();
  prototype->SetAttribute("quant_max", Argument::Int(127));
  EXPECT_EQ(prototype->GetInt("quant_max").value_or(-1), 127);
  EXPECT_EQ(c->GetInt("quant_max").value_or(-1), 255);
  EXPECT_EQ(c->tensors().size(), 2u);
  EXPECT_EQ(prototype->FindTensor("min_val")->data<float>()[0], 1.0f);
}

TEST(ModuleShareTest, SharedListsOutliveTheirPrototypeAndSurviveMoves) {
  std::unique_ptr<Module> prototype = ObserverLike();
  prototype->SetChild("inner", Relu());
  prototype->ShareFieldsWithClones();
  prototype->ShareFieldsWithClones();  // again: nothing changes
  std::unique_ptr<Module> clone = prototype->Clone();
  prototype.reset();
  ASSERT_EQ(clone->tensors().size(), 2u);
  EXPECT_EQ(clone->FindTensor("max_val")->data<float>()[0], 2.0f);
  ASSERT_EQ(clone->children().size(), 1u);
  EXPECT_EQ(clone->FindChild("inner")->type().name(), "nn.ReLU");
  Module moved(std::move(*clone));
  EXPECT_EQ(moved.FindTensor("min_val")->data<float>()[0], 1.0f);
  EXPECT_EQ(moved.GetInt("quant_min").value_or(-1), 0);
  Module assigned("nn.ReLU");
  assigned = std::move(moved);
  EXPECT_EQ(assigned.type().name(), "MinMaxObserver");
  EXPECT_EQ(assigned.attributes().size(), 3u);
  assigned.SetTensor("histogram", Tensor::FromFloats({1}, {4.0f}));
  EXPECT_EQ(assigned.tensors().size(), 3u);
}

TEST(ModuleShareTest, CloneWithRoomAndCloneAttributesOfASharingModule) {
  std::unique_ptr<Module> prototype = ObserverLike();
  prototype->ShareFieldsWithClones();
  // Room asked for: a copy of its own, extended without moving.
  std::unique_ptr<Module> roomy = prototype->Clone(1, 1);
  EXPECT_NE(&roomy->tensors(), &prototype->tensors());
  ASSERT_EQ(roomy->tensors().size(), 2u);
  const auto* first_tensor = &roomy->tensors()[0];
  const auto* first_attribute = &roomy->attributes()[0];
  roomy->SetTensor("scale", Tensor::FromFloats({1}, {0.25f}));
  roomy->SetAttribute("axis", Argument::Int(0));
  EXPECT_EQ(&roomy->tensors()[0], first_tensor);
  EXPECT_EQ(&roomy->attributes()[0], first_attribute);
  EXPECT_EQ(prototype->tensors().size(), 2u);
  // CloneAttributes without room shares the attributes and has no tensors.
  std::unique_ptr<Module> attributes_only = prototype->CloneAttributes();
  EXPECT_EQ(&attributes_only->attributes(), &prototype->attributes());
  EXPECT_TRUE(attributes_only->tensors().empty());
  std::unique_ptr<Module> with_room = prototype->CloneAttributes(2, 1);
  EXPECT_NE(&with_room->attributes(), &prototype->attributes());
  EXPECT_EQ(with_room->attributes().size(), 3u);
  EXPECT_EQ(with_room->GetInt("quant_max").value_or(-1), 255);
}

// FindMutableTensors(a, b) finds what two FindMutableTensor calls find, in any order of
// the list, with one or both absent, and with a == b; a list shared with clones is copied
// only if a tensor is handed out, and the clones keep their values.
TEST(ModuleFieldsTest, FindMutableTensorsAgreesWithTwoSingleLookups) {
  Module m("nn.Conv2d");
  m.SetTensor("bias", Tensor::FromFloats({1}, {2.0f}));
  m.SetTensor("running_mean", Tensor::FromFloats({1}, {3.0f}));
  m.SetTensor("weight", Tensor::FromFloats({1}, {1.0f}));
  for (const auto& [a, b] : std::vector<std::pair<std::string, std::string>>{
           {"weight", "bias"}, {"bias", "weight"}, {"weight", "absent"},
           {"absent", "bias"}, {"absent", "other"}, {"weight", "weight"}}) {
    const std::pair<Tensor*, Tensor*> found = m.FindMutableTensors(a, b);
    EXPECT_EQ(found.first, m.FindMutableTensor(a)) << a << ", " << b;
    EXPECT_EQ(found.second, m.FindMutableTensor(b)) << a << ", " << b;
  }
  EXPECT_EQ(m.FindMutableTensors("weight", "bias").first->data<float>()[0], 1.0f);
  EXPECT_EQ(m.FindMutableTensors("weight", "bias").second->data<float>()[0], 2.0f);

  std::unique_ptr<Module> prototype = ObserverLike();
  prototype->ShareFieldsWithClones();
  std::unique_ptr<Module> clone = prototype->Clone();
  const std::pair<Tensor*, Tensor*> none = clone->FindMutableTensors("absent", "other");
  EXPECT_EQ(none.first, nullptr);
  EXPECT_EQ(none.second, nullptr);
  EXPECT_EQ(&clone->tensors(), &prototype->tensors());  // nothing handed out: still shared
  auto [max_val, min_val] = clone->FindMutableTensors("max_val", "min_val");
  EXPECT_NE(&clone->tensors(), &prototype->tensors());
  ASSERT_NE(max_val, nullptr);
  ASSERT_NE(min_val, nullptr);
  EXPECT_EQ(max_val, &clone->tensors()[1].second);
  EXPECT_EQ(min_val, &clone->tensors()[0].second);
  max_val->mutable_data<float>()[0] = 9.0f;
  EXPECT_EQ(prototype->FindTensor("max_val")->data<float>()[0], 2.0f);
}

TEST(ModuleFieldsTest, ModuleFromWholeListsHoldsThemInOrder) {
  Module::TensorList tensors;
  tensors.emplace_back("weight", Tensor::FromFloats({2}, {1.0f, 2.0f}));
  tensors.emplace_back("bias", Tensor::FromFloats({1}, {3.0f}));
  Module::AttributeList attributes;
  attributes.emplace_back("scale", Argument::Float(0.5));
  attributes.emplace_back("zero_point", Argument::Int(3));
  const float* weight_data = tensors[0].second.data<float>();
  Module m(Symbol::Intern("nnq.Linear"), std::move(tensors), std::move(attributes));
  EXPECT_EQ(m.type().name(), "nnq.Linear");
  ASSERT_EQ(m.tensors().size(), 2u);
  EXPECT_EQ(m.tensors()[0].first, "weight");
  EXPECT_EQ(m.tensors()[1].first, "bias");
  EXPECT_EQ(m.FindTensor("weight")->data<float>(), weight_data);  // moved, not copied
  ASSERT_EQ(m.attributes().size(), 2u);
  EXPECT_EQ(m.attributes()[0].first, "scale");
  EXPECT_EQ(*m.GetFloat("scale"), 0.5);
  EXPECT_EQ(*m.GetInt("zero_point"), 3);
  EXPECT_TRUE(m.children().empty());
  // Edited like any module: a present name is replaced, a new one appended.
  m.SetAttribute("scale", Argument::Float(0.25));
  m.SetTensor("extra", Tensor::FromFloats({1}, {4.0f}));
  EXPECT_EQ(m.attributes().size(), 2u);
  EXPECT_EQ(*m.GetFloat("scale"), 0.25);
  EXPECT_EQ(m.tensors()[2].first, "extra");

  const Module empty(Symbol::Intern("nn.ReLU"), {}, {});
  EXPECT_TRUE(empty.tensors().empty());
  EXPECT_TRUE(empty.attributes().empty());
}

TEST(GraphModulePathTest, RemoveModulesFreesEveryModuleOfAnyShape) {
  // More removed modules than every prefetch distance of the freeing loop, of every
  // shape: empty, with lists shared with a prototype, with own lists, with children. Each
  // is freed (the sanitizer runs of this test catch a leak or a read after free), the
  // rest stay in order and findable.
  std::unique_ptr<Module> prototype = ObserverLike();
  prototype->ShareFieldsWithClones();
  GraphModule gm;
  Node* x = *gm.graph().AddPlaceholder("x");
  ASSERT_TRUE(gm.graph().SetOutput(x).ok());
  std::vector<std::string> removed, kept;
  for (int i = 0; i < 40; ++i) {
    const std::string name = absl::StrCat("m", i);
    std::unique_ptr<Module> module;
    switch (i % 4) {
      case 0:
        module = std::make_unique<Module>("nn.ReLU");
        break;
      case 1:
        module = prototype->Clone();
        break;
      case 2:
        module = ObserverLike();
        break;
      default:
        module = std::make_unique<Module>("nn.Sequential");
        module->SetChild("0", ObserverLike());
        module->SetChild("1", std::make_unique<Module>("nn.ReLU"));
    }
    ASSERT_TRUE(gm.SetModule(name, std::move(module)).ok());
    (i % 7 == 3 ? kept : removed).push_back(name);
  }
  ASSERT_TRUE(gm.RemoveModules(removed).ok());
  ASSERT_EQ(gm.root().children().size(), kept.size());
  for (size_t i = 0; i < kept.size(); ++i) {
    EXPECT_EQ(gm.root().children()[i].first, kept[i]);
    EXPECT_NE(gm.FindModule(kept[i]), nullptr) << kept[i];
  }
  for (const std::string& name : removed) EXPECT_EQ(gm.FindModule(name), nullptr) << name;
  // The prototype's shared lists outlived the removed clones.
  EXPECT_EQ(prototype->FindTensor("max_val")->data<float>()[0], 2.0f);
  const absl::Status verified = gm.Verify();
  EXPECT_TRUE(verified.ok()) << verified;
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

// The one list of built-in namespaces: module ones, function ones, and nothing that merely
// starts like one.
TEST(BuiltinNamespaceTest, KnowsModuleAndFunctionNamespacesOnly) {
  for (const char* name : {"nn.Conv2d", "nni.ConvReLU2d", "nnq.Linear", "nniq.LinearReLU",
                           "nnqr.Conv2d", "torch.relu", "operator.add", "builtins.getattr",
                           "math.sqrt", "F.relu"}) {
    EXPECT_TRUE(InBuiltinNamespace(name)) << name;
  }
  for (const char* name : {"user.ConvAdd2d", "nnx.Conv2d", "torchvision.Foo", "Conv2d", "",
                           ".Conv2d", "nn"}) {
    EXPECT_FALSE(InBuiltinNamespace(name)) << name;
  }
}

TEST(BuiltinNamespaceTest, QuantizedModuleTypesAreTheNnqNniqAndNnqrOnes) {
  for (const char* name : {"nnq.Conv2d", "nniq.ConvReLU2d", "nnqr.Linear"}) {
    EXPECT_TRUE(IsQuantizedModuleType(name)) << name;
  }
  for (const char* name : {"nn.Conv2d", "nni.ConvReLU2d", "nnqx.Conv2d", "torch.quantize_per_tensor",
                           "user.nnq", "nnq"}) {
    EXPECT_FALSE(IsQuantizedModuleType(name)) << name;
  }
}

// x -> torch.relu -> output in `gm`; returns the relu.
Node* AddReluGraph(GraphModule& gm) {
  Graph& g = gm.graph();
  Node* relu = *g.AddCallFunction("torch.relu", {*g.AddPlaceholder("x")});
  EXPECT_TRUE(g.SetOutput(relu).ok());
  return relu;
}

// A pass's computed constant: installed at a path not yet taken (the hint, then `_1`,
// ...: never over a tensor or module already there) and read by a get_attr of that path,
// inserted before the given node.
TEST(GraphModuleTest, InsertConstantBeforeTakesAFreshPathAndReadsIt) {
  GraphModule gm;
  Node* relu = AddReluGraph(gm);
  ASSERT_TRUE(gm.SetTensor("w", Tensor::FromFloats({1}, {7.0f})).ok());

  auto first = gm.InsertConstantBefore(relu, "w", Tensor::FromFloats({2}, {1.0f, 2.0f}));
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = gm.InsertConstantBefore(relu, "w", Tensor::FromFloats({1}, {3.0f}));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*first)->op(), OpKind::kGetAttr);
  EXPECT_EQ((*first)->target().name(), "w_1");
  EXPECT_EQ((*second)->target().name(), "w_2");
  EXPECT_EQ(gm.FindTensor("w")->data<float>()[0], 7.0f);  // the existing tensor kept
  EXPECT_EQ(gm.FindTensor("w_1")->data<float>()[1], 2.0f);
  EXPECT_EQ(gm.FindTensor("w_2")->data<float>()[0], 3.0f);
  // Both before the relu, in insertion order.
  EXPECT_EQ((*first)->next(), *second);
  EXPECT_EQ((*second)->next(), relu);
  EXPECT_TRUE(gm.Verify().ok()) << gm.Verify();
}

// A constant beside a weight of a module whose name is no identifier (PyTorch allows any
// name without a dot: torchvision's regnets hold "block1-0"): the new leaf's name is made
// one, the path above it is kept, so the constant lands in that module. Rewriting the whole
// path named a module that does not exist, and PT2E's convert of regnet_y failed.
TEST(GraphModuleTest, InsertConstantBeforeKeepsTheNamesOfTheModulesAboveTheLeaf) {
  GraphModule gm;
  Node* relu = AddReluGraph(gm);
  ASSERT_TRUE(gm.SetModule("trunk", std::make_unique<Module>("nn.Module")).ok());
  ASSERT_TRUE(gm.SetModule("trunk.block1-0", std::make_unique<Module>("nn.Module")).ok());
  ASSERT_TRUE(gm.SetTensor("trunk.block1-0.w", Tensor::FromFloats({1}, {7.0f})).ok());

  auto added = gm.InsertConstantBefore(relu, "trunk.block1-0.w-int8", Tensor::FromFloats({1}, {3.0f}));
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ((*added)->target().name(), "trunk.block1-0.w_int8");
  EXPECT_EQ(gm.FindTensor("trunk.block1-0.w_int8")->data<float>()[0], 3.0f);
  EXPECT_EQ(gm.FindTensor("trunk.block1-0.w")->data<float>()[0], 7.0f);
}

}  // namespace
}  // namespace fuselage
