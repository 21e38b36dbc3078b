// The fusion pass: structure of the result (text in, structure out), BN folding against
// hand-computed numbers, module-tree bookkeeping, and "a failing fusion changes nothing".
#include "patterns/fuse.h"

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"
#include "patterns/fusion_rule.h"
#include "patterns/matcher.h"
#include "tests/patterns/test_models.h"

namespace fuselage {
namespace {

using ::fuselage::testing::BatchNorm2dModule;
using ::fuselage::testing::Conv2dModule;
using ::fuselage::testing::Must;
using ::fuselage::testing::PlainModule;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class FuseTest : public ::testing::Test {
 protected:
  void SetUp() override { x_ = Must(graph().AddPlaceholder("x")); }
  Graph& graph() { return gm_.graph(); }

  Node* Call(Node* in, const char* path, std::unique_ptr<Module> module) {
    EXPECT_TRUE(gm_.SetModule(path, std::move(module)).ok());
    return Must(graph().AddCallModule(path, {in}, {}, path));
  }

  static FusionRule Rule(const char* name, const char* pattern, const char* fused_type,
                         FuserKind fuser = FuserKind::kFoldBatchNormThenWrap) {
    absl::StatusOr<FusionRule> rule =
        MakeFusionRule(name, pattern, PatternFormat::kComplex, fused_type, fuser);
    EXPECT_TRUE(rule.ok()) << rule.status();
    return *rule;
  }

  // fuse_conv_bn_eval by hand: 1 input channel, 2 output channels, 1x1 kernel.
  //   w = [2, -1], b = [0.5, 1]; gamma = [2, 0.5], beta = [0.1, -0.2],
  //   mean = [1, -1], var = [3, 0], eps = 1  =>  sqrt(var + eps) = [2, 1], scale = [1, 0.5]
  //   w' = [2, -0.5];  b' = [(0.5 - 1) * 1 + 0.1, (1 + 1) * 0.5 - 0.2] = [-0.4, 0.8]
  std::unique_ptr<Module> HandFoldConv() {
    auto conv = Conv2dModule(rng_, 1, 2, 1);
    conv->SetTensor("weight", Tensor::FromFloats({2, 1, 1, 1}, {2.0f, -1.0f}));
    conv->SetTensor("bias", Tensor::FromFloats({2}, {0.5f, 1.0f}));
    return conv;
  }
  std::unique_ptr<Module> HandFoldBatchNorm() {
    auto bn = BatchNorm2dModule(rng_, 2, /*eps=*/1.0);
    bn->SetTensor("weight", Tensor::FromFloats({2}, {2.0f, 0.5f}));
    bn->SetTensor("bias", Tensor::FromFloats({2}, {0.1f, -0.2f}));
    bn->SetTensor("running_mean", Tensor::FromFloats({2}, {1.0f, -1.0f}));
    bn->SetTensor("running_var", Tensor::FromFloats({2}, {3.0f, 0.0f}));
    return bn;
  }

  static FusionRule ConvBnAddReluRule() {
    return Rule("conv_bn_add_relu", "(ReLU, (add, (BatchNorm2d, Conv2d), MatchAllNode))",
                "nni.ConvAddReLU2d");
  }
  static FusionRule ConvBnReluRule() {
    return Rule("conv_bn_relu", "(ReLU, (BatchNorm2d, Conv2d))", "nni.ConvReLU2d");
  }

  // Two chained residual blocks up to the add: block 1 (conv1 -> bn1 -> relu1) and block
  // 2's conv2 -> bn2 reading it. Returns {relu1, bn2}; the test adds the add and the rest.
  std::pair<Node*, Node*> TwoChainedBlockHeads() {
    Node* r1 = Call(Call(Call(x_, "conv1", Conv2dModule(rng_, 3, 3, 1)), "bn1",
                         BatchNorm2dModule(rng_, 3)),
                    "relu1", PlainModule("nn.ReLU"));
    Node* bn2 =
        Call(Call(r1, "conv2", Conv2dModule(rng_, 3, 3, 1)), "bn2", BatchNorm2dModule(rng_, 3));
    return {r1, bn2};
  }

  absl::StatusOr<int> Fuse(std::vector<FusionRule> rules) {
    return FuseIn(gm_, std::move(rules));
  }
  // For tests that build a GraphModule of their own, one per case.
  static absl::StatusOr<int> FuseIn(GraphModule& gm, std::vector<FusionRule> rules) {
    absl::StatusOr<PatternMatcher> m = PatternMatcher::Create(std::move(rules));
    if (!m.ok()) return m.status();
    return FusePatterns(gm, *m);
  }

  // The call_module nodes of the graph, by module type.
  std::vector<Node*> NodesOfType(const char* type) {
    std::vector<Node*> found;
    for (Node* n : graph().Nodes()) {
      if (n->op() != OpKind::kCallModule) continue;
      const Module* m = gm_.FindModule(n->target().name());
      if (m != nullptr && m->type().name() == type) found.push_back(n);
    }
    return found;
  }

  std::mt19937 rng_{11};
  GraphModule gm_;
  Node* x_ = nullptr;
};

std::vector<std::string> ArgNames(const Node* n) {
  std::vector<std::string> names;
  for (const Argument& a : n->args()) names.push_back(a.is_node() ? a.as_node()->name() : a.ToString());
  return names;
}

// Same type, tensors (names, dtypes, shapes, bytes), attributes and no children.
void ExpectSameLeafModule(const Module& actual, const Module& expected) {
  EXPECT_EQ(actual.type(), expected.type());
  ASSERT_EQ(actual.tensors().size(), expected.tensors().size());
  for (size_t i = 0; i < expected.tensors().size(); ++i) {
    EXPECT_EQ(actual.tensors()[i].first, expected.tensors()[i].first);
    EXPECT_TRUE(actual.tensors()[i].second == expected.tensors()[i].second)
        << expected.tensors()[i].first;
  }
  ASSERT_EQ(actual.attributes().size(), expected.attributes().size());
  for (size_t i = 0; i < expected.attributes().size(); ++i) {
    EXPECT_EQ(actual.attributes()[i].first, expected.attributes()[i].first);
    EXPECT_EQ(actual.attributes()[i].second, expected.attributes()[i].second);
  }
  EXPECT_TRUE(actual.children().empty());
  EXPECT_TRUE(expected.children().empty());
}

// The residual model: y = identity(x); x = relu(add(bn(conv(x)), y)).
TEST_F(FuseTest, ResidualBlockBecomesOneConvAddReLU2d) {
  Node* identity = Call(x_, "identity", PlainModule("nn.Identity"));
  Node* conv = Call(x_, "conv", Conv2dModule(rng_, 3, 3, 3));
  Node* bn = Call(conv, "bn", BatchNorm2dModule(rng_, 3));
  Node* add = Must(graph().AddCallFunction("operator.add", {bn, identity}, {}, "add"));
  Node* relu = Call(add, "relu", PlainModule("nn.ReLU"));
  Must(graph().SetOutput(relu));
  ASSERT_TRUE(gm_.Verify().ok());
  const std::unique_ptr<Module> original_conv = gm_.FindModule("conv")->Clone();

  FusionRule rule = ConvBnAddReluRule();
  rule.root_position = 3;                        // the conv
  rule.extra_input_positions = std::vector<int>{4};  // the residual
  absl::StatusOr<int> fused = Fuse({rule});
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_EQ(*fused, 1);
  ASSERT_TRUE(gm_.Verify().ok()) << gm_.Verify();

  const std::vector<Node*> nodes = NodesOfType("nni.ConvAddReLU2d");
  ASSERT_EQ(nodes.size(), 1u);
  const Node* f = nodes[0];
  EXPECT_THAT(ArgNames(f), ElementsAre("x", "identity"));
  EXPECT_EQ(f->name(), "conv");  // the root's name, as FX's fuser keeps it
  ASSERT_NE(f->FindMeta("pattern"), nullptr);
  EXPECT_EQ(f->FindMeta("pattern")->as_string(), "conv_bn_add_relu");
  EXPECT_EQ(graph().output()->arg(0).as_node(), f);
  // placeholder x, identity, fused, output.
  EXPECT_EQ(graph().size(), 4u);
  // The fused module sits at the conv's path; bn and relu modules are gone.
  const Module* m = gm_.FindModule(f->target().name());
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(f->target().name(), "conv");
  ASSERT_EQ(m->children().size(), 2u);
  EXPECT_EQ(m->children()[0].first, "0");
  EXPECT_EQ(m->children()[0].second->type().name(), "nn.Conv2d");
  EXPECT_EQ(m->children()[1].first, "1");
  EXPECT_EQ(m->children()[1].second->type().name(), "nn.ReLU");
  EXPECT_TRUE(m->tensors().empty());
  EXPECT_EQ(gm_.FindModule("bn"), nullptr);
  EXPECT_EQ(gm_.FindModule("relu"), nullptr);
  EXPECT_NE(gm_.FindModule("identity"), nullptr);
  // The conv child kept its attributes and its weight changed (batch norm folded).
  const Module& folded = *m->children()[0].second;
  EXPECT_EQ(*folded.FindAttribute("kernel_size"), *original_conv->FindAttribute("kernel_size"));
  EXPECT_FALSE(*folded.FindTensor("weight") == *original_conv->FindTensor("weight"));
}

TEST_F(FuseTest, DefaultGettersGiveTheSameResidualFusion) {
  Node* identity = Call(x_, "identity", PlainModule("nn.Identity"));
  Node* bn = Call(Call(x_, "conv", Conv2dModule(rng_, 3, 3, 1)), "bn", BatchNorm2dModule(rng_, 3));
  // Residual written first: add is commutative.
  Node* add = Must(graph().AddCallMethod("add", {identity, bn}, {}, "add"));
  Must(graph().SetOutput(Call(add, "relu", PlainModule("nn.ReLU"))));
  absl::StatusOr<int> fused = Fuse({Rule(
      "conv_bn_add_relu", "(ReLU, (add, (BatchNorm2d, Conv2d), MatchAllNode))", "nni.ConvAddReLU2d")});
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_TRUE(gm_.Verify().ok()) << gm_.Verify();
  const std::vector<Node*> nodes = NodesOfType("nni.ConvAddReLU2d");
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_THAT(ArgNames(nodes[0]), ElementsAre("x", "identity"));
}

// The fold of HandFoldConv + HandFoldBatchNorm, computed by hand in the fixture.
TEST_F(FuseTest, BatchNormFoldingMatchesHandComputedValues) {
  std::unique_ptr<Module> conv = HandFoldConv();
  std::unique_ptr<Module> bn = HandFoldBatchNorm();
  Node* out = Call(Call(x_, "conv", std::move(conv)), "bn", std::move(bn));
  Must(graph().SetOutput(out));

  // (BatchNorm2d, Conv2d) with no fused type: the result is the folded nn.Conv2d itself.
  absl::StatusOr<int> fused = Fuse({Rule("conv_bn", "(BatchNorm2d, Conv2d)", "")});
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_TRUE(gm_.Verify().ok()) << gm_.Verify();
  const std::vector<Node*> convs = NodesOfType("nn.Conv2d");
  ASSERT_EQ(convs.size(), 1u);
  const Module* m = gm_.FindModule(convs[0]->target().name());
  const Tensor* w = m->FindTensor("weight");
  const Tensor* b = m->FindTensor("bias");
  ASSERT_NE(w, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(w->shape(), (std::vector<int64_t>{2, 1, 1, 1}));
  EXPECT_FLOAT_EQ(w->data<float>()[0], 2.0f);
  EXPECT_FLOAT_EQ(w->data<float>()[1], -0.5f);
  EXPECT_FLOAT_EQ(b->data<float>()[0], -0.4f);
  EXPECT_FLOAT_EQ(b->data<float>()[1], 0.8f);
  EXPECT_EQ(graph().size(), 3u);  // x, conv, output
}

TEST_F(FuseTest, TransposedConvFoldsAlongOutputChannelsDimOne) {
  // ConvTranspose2d weight is [in=2, out=2, 1, 1]: output channel c is dim 1.
  auto deconv = std::make_unique<Module>("nn.ConvTranspose2d");
  deconv->SetTensor("weight", Tensor::FromFloats({2, 2, 1, 1}, {1.0f, 2.0f, 3.0f, 4.0f}));
  deconv->SetAttribute("groups", Argument::Int(1));
  auto bn = BatchNorm2dModule(rng_, 2, /*eps=*/0.0);
  bn->SetTensor("weight", Tensor::FromFloats({2}, {1.0f, 1.0f}));
  bn->SetTensor("bias", Tensor::FromFloats({2}, {0.0f, 1.0f}));
  bn->SetTensor("running_mean", Tensor::FromFloats({2}, {0.0f, 2.0f}));
  bn->SetTensor("running_var", Tensor::FromFloats({2}, {4.0f, 1.0f}));
  Must(graph().SetOutput(Call(Call(x_, "deconv", std::move(deconv)), "bn", std::move(bn))));

  absl::StatusOr<int> fused = Fuse({Rule("convtranspose_bn", "(BatchNorm2d, ConvTranspose2d)", "")});
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_TRUE(gm_.Verify().ok()) << gm_.Verify();
  const Module* m = gm_.FindModule("deconv");
  ASSERT_NE(m, nullptr);
  // scale = (1/2, 1): channel 0 (w[i][0]) halves, channel 1 (w[i][1]) stays.
  const float* w = m->FindTensor("weight")->data<float>();
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  EXPECT_FLOAT_EQ(w[1], 2.0f);
  EXPECT_FLOAT_EQ(w[2], 1.5f);
  EXPECT_FLOAT_EQ(w[3], 4.0f);
  // b' = (0 - mean) * scale + beta = (0, -2 + 1).
  const float* b = m->FindTensor("bias")->data<float>();
  EXPECT_FLOAT_EQ(b[0], 0.0f);
  EXPECT_FLOAT_EQ(b[1], -1.0f);
}

TEST_F(FuseTest, ConvWithoutBiasGetsOne) {
  auto conv = Conv2dModule(rng_, 1, 1, 1, /*bias=*/false);
  conv->SetTensor("weight", Tensor::FromFloats({1, 1, 1, 1}, {3.0f}));
  auto bn = BatchNorm2dModule(rng_, 1, /*eps=*/0.0);
  bn->SetTensor("weight", Tensor::FromFloats({1}, {1.0f}));
  bn->SetTensor("bias", Tensor::FromFloats({1}, {0.25f}));
  bn->SetTensor("running_mean", Tensor::FromFloats({1}, {2.0f}));
  bn->SetTensor("running_var", Tensor::FromFloats({1}, {4.0f}));
  Node* relu = Call(Call(Call(x_, "conv", std::move(conv)), "bn", std::move(bn)), "relu",
                    PlainModule("nn.ReLU"));
  Must(graph().SetOutput(relu));
  absl::StatusOr<int> fused =
      Fuse({ConvBnReluRule()});
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_TRUE(gm_.Verify().ok()) << gm_.Verify();
  const Module* m = gm_.FindModule("conv");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->type().name(), "nni.ConvReLU2d");
  const Module* c = m->FindChild("0");
  ASSERT_NE(c, nullptr);
  // scale = 1 / sqrt(4) = 0.5: w' = 1.5, b' = (0 - 2) * 0.5 + 0.25 = -0.75.
  EXPECT_FLOAT_EQ(c->FindTensor("weight")->data<float>()[0], 1.5f);
  EXPECT_FLOAT_EQ(c->FindTensor("bias")->data<float>()[0], -0.75f);
  EXPECT_EQ(m->FindChild("1")->type().name(), "nn.ReLU");
}

TEST_F(FuseTest, FunctionalReluBecomesAReLUChild) {
  Node* conv = Call(x_, "conv", Conv2dModule(rng_, 3, 3, 1));
  Node* relu = Must(graph().AddCallFunction("torch.nn.functional.relu", {conv},
                                            {{Symbol::Intern("inplace"), Argument::Bool(false)}}));
  Must(graph().SetOutput(relu));
  const Tensor weight_before = *gm_.FindModule("conv")->FindTensor("weight");
  absl::StatusOr<int> fused =
      Fuse({Rule("conv_relu", "(F.relu, Conv2d)", "nni.ConvReLU2d", FuserKind::kWrapInSequence)});
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_TRUE(gm_.Verify().ok()) << gm_.Verify();
  const Module* m = gm_.FindModule("conv");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->type().name(), "nni.ConvReLU2d");
  EXPECT_EQ(m->FindChild("0")->type().name(), "nn.Conv2d");
  EXPECT_EQ(m->FindChild("1")->type().name(), "nn.ReLU");
  // Wrapping copies the conv unchanged.
  EXPECT_EQ(*m->FindChild("0")->FindTensor("weight"), weight_before);
}

// Block 2 reads block 1's outermost node twice (as conv input and as residual); after
// fusion both args are block 1's fused node.
TEST_F(FuseTest, ChainedResidualBlocksRemapInputs) {
  const auto [r1, bn2] = TwoChainedBlockHeads();
  Node* add = Must(graph().AddCallFunction("operator.add", {bn2, r1}, {}, "add"));
  Must(graph().SetOutput(Call(add, "relu2", PlainModule("nn.ReLU"))));
  absl::StatusOr<int> fused = Fuse({ConvBnAddReluRule(), ConvBnReluRule()});
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_EQ(*fused, 2);
  ASSERT_TRUE(gm_.Verify().ok()) << gm_.Verify();
  const std::vector<Node*> first = NodesOfType("nni.ConvReLU2d");
  const std::vector<Node*> second = NodesOfType("nni.ConvAddReLU2d");
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_THAT(ArgNames(first[0]), ElementsAre("x"));
  EXPECT_THAT(ArgNames(second[0]), ElementsAre("conv1", "conv1"));
  EXPECT_EQ(first[0]->FindMeta("pattern")->as_string(), "conv_bn_relu");
  EXPECT_EQ(second[0]->FindMeta("pattern")->as_string(), "conv_bn_add_relu");
  EXPECT_EQ(graph().size(), 4u);  // x, two fused nodes, output
}

// The same chain with the add's args swapped (add is commutative): the extra input, bound
// to the add's arg 0 rather than the pattern's arg 1, is the first block's outermost node
// and must become its fused node, at the end of the second fused node's args.
TEST_F(FuseTest, ChainedResidualBlocksWithSwappedAddArgsRemapTheExtraInput) {
  const auto [r1, bn2] = TwoChainedBlockHeads();
  Node* add = Must(graph().AddCallFunction("operator.add", {r1, bn2}, {}, "add"));
  Node* relu2 = Call(add, "relu2", PlainModule("nn.ReLU"));
  // A later reader of the first block's output, so that output has three users.
  Node* mul = Must(graph().AddCallFunction("operator.mul", {relu2, r1}, {}, "mul"));
  Must(graph().SetOutput(mul));
  absl::StatusOr<int> fused = Fuse({ConvBnAddReluRule(), ConvBnReluRule()});
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_EQ(*fused, 2);
  ASSERT_TRUE(gm_.Verify().ok()) << gm_.Verify();
  const std::vector<Node*> first = NodesOfType("nni.ConvReLU2d");
  const std::vector<Node*> second = NodesOfType("nni.ConvAddReLU2d");
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(first[0]->name(), "conv1");
  EXPECT_EQ(second[0]->name(), "conv2");
  // The conv's input, then the extra input: both the first fused node.
  EXPECT_THAT(ArgNames(second[0]), ElementsAre("conv1", "conv1"));
  EXPECT_THAT(ArgNames(mul), ElementsAre("conv2", "conv1"));
  EXPECT_EQ(graph().size(), 5u);  // x, two fused nodes, mul, output
}

// An extra input that is a constant is passed through as is.
TEST_F(FuseTest, AConstantExtraInputIsPassedThrough) {
  Node* bn = Call(Call(x_, "conv", Conv2dModule(rng_, 3, 3, 1)), "bn", BatchNorm2dModule(rng_, 3));
  Node* add = Must(graph().AddCallFunction("operator.add", {bn, Argument::Float(2.5)}, {}, "add"));
  Must(graph().SetOutput(Call(add, "relu", PlainModule("nn.ReLU"))));
  absl::StatusOr<int> fused = Fuse({Rule(
      "conv_bn_add_relu", "(ReLU, (add, (BatchNorm2d, Conv2d), MatchAllNode))", "nni.ConvAddReLU2d")});
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_EQ(*fused, 1);
  ASSERT_TRUE(gm_.Verify().ok()) << gm_.Verify();
  const std::vector<Node*> result = NodesOfType("nni.ConvAddReLU2d");
  ASSERT_EQ(result.size(), 1u);
  ASSERT_EQ(result[0]->num_args(), 2u);
  EXPECT_EQ(result[0]->arg(0).as_node(), x_);
  ASSERT_TRUE(result[0]->arg(1).is_float());
  EXPECT_EQ(result[0]->arg(1).as_float(), 2.5);
}

// A module called from two places is not overwritten: the fused module gets a new path.
TEST_F(FuseTest, SharedConvModuleKeepsItsPath) {
  EXPECT_TRUE(gm_.SetModule("conv", Conv2dModule(rng_, 3, 3, 1)).ok());
  EXPECT_TRUE(gm_.SetModule("relu", PlainModule("nn.ReLU")).ok());
  Node* c1 = Must(graph().AddCallModule("conv", {x_}, {}, "c1"));
  Node* r1 = Must(graph().AddCallModule("relu", {c1}, {}, "r1"));
  Node* c2 = Must(graph().AddCallModule("conv", {r1}, {}, "c2"));
  Must(graph().SetOutput(c2));
  absl::StatusOr<int> fused = Fuse({Rule("conv_relu", "(ReLU, Conv2d)", "nni.ConvReLU2d",
                                         FuserKind::kWrapInSequence)});
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_TRUE(gm_.Verify().ok()) << gm_.Verify();
  ASSERT_EQ(gm_.FindModule("conv")->type().name(), "nn.Conv2d");  // c2 still calls it
  const std::vector<Node*> f = NodesOfType("nni.ConvReLU2d");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0]->target().name(), "conv");
  EXPECT_EQ(f[0]->name(), "c1");
  // The shared conv was copied into the fused module, not taken: both hold its contents.
  ExpectSameLeafModule(*gm_.FindModule(f[0]->target().name())->FindChild("0"),
                       *gm_.FindModule("conv"));
  EXPECT_EQ(gm_.FindModule("relu"), nullptr);  // used by the match only: moved, then removed
}

// Modules only the match uses are taken into the fused module (moved, not copied): the
// fused module holds exactly their contents, the weight's data where it was, and the
// modules are gone from the tree.
TEST_F(FuseTest, WrapTakesTheModulesOnlyTheMatchUses) {
  Node* bn = Call(Call(x_, "conv", Conv2dModule(rng_, 3, 4, 3)), "bn", BatchNorm2dModule(rng_, 4));
  Must(graph().SetOutput(bn));
  const std::unique_ptr<Module> conv_before = gm_.FindModule("conv")->Clone();
  const std::unique_ptr<Module> bn_before = gm_.FindModule("bn")->Clone();
  const void* weight_data = gm_.FindModule("conv")->FindTensor("weight")->raw_data();
  absl::StatusOr<int> fused = Fuse(
      {Rule("conv_bn", "(BatchNorm2d, Conv2d)", "nni.ConvBn2d", FuserKind::kWrapInSequence)});
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_EQ(*fused, 1);
  ASSERT_TRUE(gm_.Verify().ok()) << gm_.Verify();
  const Node* f = graph().output()->arg(0).as_node();
  EXPECT_EQ(f->name(), "conv");
  EXPECT_EQ(f->target().name(), "conv");
  const Module* m = gm_.FindModule("conv");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->type().name(), "nni.ConvBn2d");
  ASSERT_EQ(m->children().size(), 2u);
  EXPECT_TRUE(m->tensors().empty());
  EXPECT_TRUE(m->attributes().empty());
  ExpectSameLeafModule(*m->FindChild("0"), *conv_before);
  ExpectSameLeafModule(*m->FindChild("1"), *bn_before);
  EXPECT_EQ(m->FindChild("0")->FindTensor("weight")->raw_data(), weight_data);
  EXPECT_EQ(gm_.FindModule("bn"), nullptr);
  EXPECT_EQ(gm_.root().children().size(), 1u);
}

// A module a get_attr reads (here: a tensor inside it) is copied into the fused module and
// stays, unchanged, where the get_attr reads it.
TEST_F(FuseTest, AModuleAGetAttrReadsIsCopiedAndKept) {
  Node* bn = Call(Call(x_, "conv", Conv2dModule(rng_, 3, 4, 3)), "bn", BatchNorm2dModule(rng_, 4));
  Node* mean = Must(graph().AddGetAttr("bn.running_mean", "mean"));
  Must(graph().SetOutput(Argument::Tuple({bn, mean})));
  const std::unique_ptr<Module> bn_before = gm_.FindModule("bn")->Clone();
  absl::StatusOr<int> fused = Fuse(
      {Rule("conv_bn", "(BatchNorm2d, Conv2d)", "nni.ConvBn2d", FuserKind::kWrapInSequence)});
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_EQ(*fused, 1);
  ASSERT_TRUE(gm_.Verify().ok()) << gm_.Verify();
  ASSERT_NE(gm_.FindModule("bn"), nullptr);
  ExpectSameLeafModule(*gm_.FindModule("bn"), *bn_before);
  ExpectSameLeafModule(*gm_.FindModule("conv")->FindChild("1"), *bn_before);
  EXPECT_TRUE(*gm_.FindTensor("bn.running_mean") == *bn_before->FindTensor("running_mean"));
}

// One ReLU module called by two matches: each fused module gets a copy, and the module is
// removed once the second fusion leaves nothing calling it. The convs, one match's each,
// are taken.
TEST_F(FuseTest, AModuleTwoMatchesCallIsCopiedIntoBothThenRemoved) {
  EXPECT_TRUE(gm_.SetModule("conv1", Conv2dModule(rng_, 3, 3, 1)).ok());
  EXPECT_TRUE(gm_.SetModule("conv2", Conv2dModule(rng_, 3, 3, 1)).ok());
  EXPECT_TRUE(gm_.SetModule("relu", PlainModule("nn.ReLU")).ok());
  const std::unique_ptr<Module> conv1_before = gm_.FindModule("conv1")->Clone();
  const std::unique_ptr<Module> conv2_before = gm_.FindModule("conv2")->Clone();
  Node* c1 = Must(graph().AddCallModule("conv1", {x_}, {}, "c1"));
  Node* r1 = Must(graph().AddCallModule("relu", {c1}, {}, "r1"));
  Node* c2 = Must(graph().AddCallModule("conv2", {r1}, {}, "c2"));
  Must(graph().SetOutput(Must(graph().AddCallModule("relu", {c2}, {}, "r2"))));
  absl::StatusOr<int> fused = Fuse({Rule("conv_relu", "(ReLU, Conv2d)", "nni.ConvReLU2d",
                                         FuserKind::kWrapInSequence)});
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_EQ(*fused, 2);
  ASSERT_TRUE(gm_.Verify().ok()) << gm_.Verify();
  EXPECT_EQ(gm_.FindModule("relu"), nullptr);
  const std::vector<Node*> f = NodesOfType("nni.ConvReLU2d");
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0]->name(), "c1");
  EXPECT_EQ(f[1]->name(), "c2");
  EXPECT_THAT(ArgNames(f[1]), ElementsAre("c1"));
  ExpectSameLeafModule(*gm_.FindModule("conv1")->FindChild("0"), *conv1_before);
  ExpectSameLeafModule(*gm_.FindModule("conv2")->FindChild("0"), *conv2_before);
  EXPECT_EQ(gm_.FindModule("conv1")->FindChild("1")->type().name(), "nn.ReLU");
  EXPECT_EQ(gm_.FindModule("conv2")->FindChild("1")->type().name(), "nn.ReLU");
  EXPECT_EQ(gm_.root().children().size(), 2u);
}

// Inputs a custom getter returns are checked like any other: none may be erased by the
// pass or come after the fused node. Each error names the input; nothing changes.
TEST_F(FuseTest, CustomGetterInputsThatFusionWouldEraseAreErrors) {
  Node* bn1 =
      Call(Call(x_, "conv1", Conv2dModule(rng_, 3, 3, 1)), "bn1", BatchNorm2dModule(rng_, 3));
  Node* relu1 = Call(bn1, "relu1", PlainModule("nn.ReLU"));
  Node* conv2 = Call(relu1, "conv2", Conv2dModule(rng_, 3, 3, 1));
  Node* relu2 = Call(conv2, "relu2", PlainModule("nn.ReLU"));
  Node* later = Call(relu2, "later", PlainModule("nn.Identity"));
  Must(graph().SetOutput(later));
  const std::string before = SerializeModelText(gm_);
  const auto fuse_with_extra = [&](Node* extra) {
    // Its fused node takes the conv's input and `extra`.
    FusionRule conv_relu = Rule("conv_relu", "(ReLU, Conv2d)", "nni.ConvAddReLU2d",
                                FuserKind::kWrapInSequence);
    conv_relu.extra_inputs_getter =
        [extra](const PatternMatch&) -> absl::StatusOr<std::vector<Argument>> {
      return std::vector<Argument>{Argument(extra)};
    };
    return Fuse({ConvBnReluRule(),
                 conv_relu});
  };
  absl::StatusOr<int> fused = fuse_with_extra(bn1);
  ASSERT_FALSE(fused.ok());
  EXPECT_EQ(fused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(fused.status().message()),
              HasSubstr("rule 'conv_relu' at node 'relu2': input 'bn1' is an inner node of "
                        "another match"));
  EXPECT_EQ(SerializeModelText(gm_), before);

  fused = fuse_with_extra(conv2);
  ASSERT_FALSE(fused.ok());
  EXPECT_THAT(std::string(fused.status().message()),
              HasSubstr("input 'conv2' is a node of the match itself"));
  EXPECT_EQ(SerializeModelText(gm_), before);

  fused = fuse_with_extra(later);
  ASSERT_FALSE(fused.ok());
  EXPECT_THAT(std::string(fused.status().message()),
              HasSubstr("input 'later' does not precede the outermost node"));
  EXPECT_EQ(SerializeModelText(gm_), before);

  // The outermost node of another match is a fine input: it becomes that fused node.
  fused = fuse_with_extra(relu1);
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_EQ(*fused, 2);
  ASSERT_TRUE(gm_.Verify().ok()) << gm_.Verify();
  const std::vector<Node*> first = NodesOfType("nni.ConvReLU2d");
  const std::vector<Node*> second = NodesOfType("nni.ConvAddReLU2d");
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(first[0]->name(), "conv1");
  EXPECT_THAT(ArgNames(second[0]), ElementsAre("conv1", "conv1"));
}

TEST_F(FuseTest, ARootOutsideTheMatchIsAnError) {
  Must(graph().SetOutput(Call(Call(x_, "conv", Conv2dModule(rng_, 3, 3, 1)), "relu",
                              PlainModule("nn.ReLU"))));
  const std::string before = SerializeModelText(gm_);
  FusionRule rule =
      Rule("conv_relu", "(ReLU, Conv2d)", "nni.ConvReLU2d", FuserKind::kWrapInSequence);
  Node* x = x_;
  rule.root_node_getter = [x](const PatternMatch&) -> absl::StatusOr<Node*> { return x; };
  absl::StatusOr<int> fused = Fuse({rule});
  ASSERT_FALSE(fused.ok());
  EXPECT_THAT(std::string(fused.status().message()),
              HasSubstr("the root node getter returned a node outside the match"));
  EXPECT_EQ(SerializeModelText(gm_), before);
}

TEST_F(FuseTest, CustomFuserAndRootGetter) {
  Node* relu = Call(Call(x_, "conv", Conv2dModule(rng_, 3, 3, 1)), "relu", PlainModule("nn.ReLU"));
  Must(graph().SetOutput(relu));
  FusionRule rule;
  rule.name = "custom";
  rule.pattern = *Pattern::Parse("(ReLU, Conv2d)", PatternFormat::kComplex);
  rule.fuser_kind = FuserKind::kCustom;
  int calls = 0;
  rule.custom_fuser = [&calls](const GraphModule& gm,
                               const PatternMatch& match) -> absl::StatusOr<std::unique_ptr<Module>> {
    ++calls;
    auto m = std::make_unique<Module>("nni.ConvReLU2d");
    m->SetChild("0", gm.FindModule(match.node_at(1)->target().name())->Clone());
    m->SetChild("1", std::make_unique<Module>("nn.ReLU"));
    m->SetAttribute("made_by", Argument::String("custom"));
    return m;
  };
  rule.root_node_getter = [](const PatternMatch& match) -> absl::StatusOr<Node*> {
    return match.node_at(1);
  };
  absl::StatusOr<int> fused = Fuse({rule});
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_TRUE(gm_.Verify().ok()) << gm_.Verify();
  EXPECT_EQ(calls, 1);
  const Module* m = gm_.FindModule("conv");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->FindAttribute("made_by")->as_string(), "custom");
}

TEST_F(FuseTest, NoMatchLeavesTheGraphAlone) {
  Must(graph().SetOutput(Call(x_, "conv", Conv2dModule(rng_, 3, 3, 1))));
  const std::string before = SerializeModelText(gm_);
  absl::StatusOr<int> fused =
      Fuse({Rule("conv_relu", "(ReLU, Conv2d)", "nni.ConvReLU2d", FuserKind::kWrapInSequence)});
  ASSERT_TRUE(fused.ok());
  EXPECT_EQ(*fused, 0);
  EXPECT_EQ(SerializeModelText(gm_), before);
}

// Two good matches and one bad one: the error names the bad one, and nothing changed.
TEST_F(FuseTest, FailingFusionLeavesTheGraphUnchanged) {
  Node* a = Call(Call(Call(x_, "conv1", Conv2dModule(rng_, 3, 3, 1)), "bn1",
                      BatchNorm2dModule(rng_, 3)),
                 "relu1", PlainModule("nn.ReLU"));
  auto bad_bn = BatchNorm2dModule(rng_, 3, /*eps=*/0.0);
  bad_bn->SetTensor("running_var", Tensor::FromFloats({3}, {1.0f, -1.0f, 1.0f}));
  Node* b = Call(Call(Call(a, "conv2", Conv2dModule(rng_, 3, 3, 1)), "bn2", std::move(bad_bn)),
                 "relu2", PlainModule("nn.ReLU"));
  Node* c = Call(Call(Call(b, "conv3", Conv2dModule(rng_, 3, 3, 1)), "bn3",
                      BatchNorm2dModule(rng_, 3)),
                 "relu3", PlainModule("nn.ReLU"));
  Must(graph().SetOutput(c));
  const std::string before = SerializeModelText(gm_);
  absl::StatusOr<int> fused =
      Fuse({ConvBnReluRule()});
  ASSERT_FALSE(fused.ok());
  EXPECT_EQ(fused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(fused.status().message()), HasSubstr("'bn2'"));
  EXPECT_THAT(std::string(fused.status().message()), HasSubstr("channel 1"));
  EXPECT_EQ(SerializeModelText(gm_), before);
  EXPECT_TRUE(gm_.Verify().ok());
}

TEST_F(FuseTest, UnregisteredFusedTypeFailsBeforeMutating) {
  Must(graph().SetOutput(Call(Call(x_, "conv", Conv2dModule(rng_, 3, 3, 1)), "relu",
                              PlainModule("nn.ReLU"))));
  const std::string before = SerializeModelText(gm_);
  absl::StatusOr<int> fused = Fuse(
      {Rule("conv_relu", "(ReLU, Conv2d)", "nni.NoSuchModule", FuserKind::kWrapInSequence)});
  ASSERT_FALSE(fused.ok());
  EXPECT_EQ(fused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(fused.status().message()),
              HasSubstr("rule 'conv_relu' at node 'relu': fused module type 'nni.NoSuchModule' "
                        "is not a registered module type"));
  EXPECT_EQ(SerializeModelText(gm_), before);
}

TEST_F(FuseTest, WrongInputCountFailsBeforeMutating) {
  Node* y = Must(graph().AddPlaceholder("y"));
  Node* conv = Call(x_, "conv", Conv2dModule(rng_, 3, 3, 1));
  Node* add = Must(graph().AddCallFunction("operator.add", {conv, y}, {}, "add"));
  Must(graph().SetOutput(Call(add, "relu", PlainModule("nn.ReLU"))));
  const std::string before = SerializeModelText(gm_);
  // nni.ConvReLU2d takes one input; this rule would give it two (x and y).
  absl::StatusOr<int> fused = Fuse({Rule("conv_add_relu", "(ReLU, (add, Conv2d, MatchAllNode))",
                                         "nni.ConvReLU2d", FuserKind::kWrapInSequence)});
  ASSERT_FALSE(fused.ok());
  EXPECT_THAT(std::string(fused.status().message()), HasSubstr("takes 1..1 inputs"));
  EXPECT_EQ(SerializeModelText(gm_), before);
}

TEST_F(FuseTest, FoldingWithoutABatchNormIsAnError) {
  Must(graph().SetOutput(Call(Call(x_, "conv", Conv2dModule(rng_, 3, 3, 1)), "relu",
                              PlainModule("nn.ReLU"))));
  const std::string before = SerializeModelText(gm_);
  absl::StatusOr<int> fused = Fuse({Rule("conv_relu", "(ReLU, Conv2d)", "nni.ConvReLU2d")});
  ASSERT_FALSE(fused.ok());
  EXPECT_THAT(std::string(fused.status().message()), HasSubstr("found no BatchNorm"));
  EXPECT_EQ(SerializeModelText(gm_), before);
}


// The fold scales the weight in place once the original conv is gone: the fused conv's
// weight is the same buffer, holding the hand-computed values w * gamma / sqrt(var + eps).
TEST_F(FuseTest, BatchNormFoldScalesAnUnsharedWeightInPlace) {
  auto conv = Conv2dModule(rng_, 1, 2, 1);
  conv->SetTensor("weight", Tensor::FromFloats({2, 1, 1, 1}, {2.0f, -1.0f}));
  auto bn = BatchNorm2dModule(rng_, 2, /*eps=*/1.0);
  bn->SetTensor("weight", Tensor::FromFloats({2}, {2.0f, 0.5f}));
  bn->SetTensor("running_var", Tensor::FromFloats({2}, {3.0f, 0.0f}));
  Must(graph().SetOutput(Call(Call(x_, "conv", std::move(conv)), "bn", std::move(bn))));
  const void* buffer = gm_.FindModule("conv")->FindTensor("weight")->raw_data();

  absl::StatusOr<int> fused = Fuse({Rule("conv_bn", "(BatchNorm2d, Conv2d)", "")});
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_TRUE(gm_.Verify().ok()) << gm_.Verify();
  const Tensor* w = gm_.FindModule("conv")->FindTensor("weight");
  EXPECT_EQ(w->raw_data(), buffer);  // scaled where it was, not copied
  EXPECT_FLOAT_EQ(w->data<float>()[0], 2.0f * (2.0f / 2.0f));
  EXPECT_FLOAT_EQ(w->data<float>()[1], -1.0f * (0.5f / 1.0f));
}

// A weight whose data another module shares is not modified: the fused conv gets a
// scaled copy, and the other module keeps the original values in the original buffer.
TEST_F(FuseTest, BatchNormFoldLeavesASharedWeightUnmodified) {
  auto conv = Conv2dModule(rng_, 1, 2, 1);
  conv->SetTensor("weight", Tensor::FromFloats({2, 1, 1, 1}, {2.0f, -1.0f}));
  auto tied = Conv2dModule(rng_, 1, 2, 1);
  tied->SetTensor("weight", *conv->FindTensor("weight"));  // shares the data
  auto bn = BatchNorm2dModule(rng_, 2, /*eps=*/1.0);
  bn->SetTensor("weight", Tensor::FromFloats({2}, {2.0f, 0.5f}));
  bn->SetTensor("running_var", Tensor::FromFloats({2}, {3.0f, 0.0f}));
  Node* folded = Call(Call(x_, "conv", std::move(conv)), "bn", std::move(bn));
  Node* other = Call(x_, "tied", std::move(tied));
  Must(graph().SetOutput(Argument::Tuple({folded, other})));
  const Tensor* tied_weight = gm_.FindModule("tied")->FindTensor("weight");
  const void* buffer = tied_weight->raw_data();
  ASSERT_EQ(gm_.FindModule("conv")->FindTensor("weight")->raw_data(), buffer);

  absl::StatusOr<int> fused = Fuse({Rule("conv_bn", "(BatchNorm2d, Conv2d)", "")});
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_EQ(*fused, 1);
  ASSERT_TRUE(gm_.Verify().ok()) << gm_.Verify();
  tied_weight = gm_.FindModule("tied")->FindTensor("weight");
  EXPECT_EQ(tied_weight->raw_data(), buffer);
  EXPECT_EQ(tied_weight->data<float>()[0], 2.0f);
  EXPECT_EQ(tied_weight->data<float>()[1], -1.0f);
  const Tensor* w = gm_.FindModule("conv")->FindTensor("weight");
  EXPECT_NE(w->raw_data(), buffer);
  EXPECT_FLOAT_EQ(w->data<float>()[0], 2.0f);
  EXPECT_FLOAT_EQ(w->data<float>()[1], -0.5f);
}

// Rows long enough for the fold's blocks of 8 (2 input channels x 3x3 = 18 per output
// channel: two blocks and a tail of 2) are scaled to exactly the float32 products
// w * (gamma * (1 / sqrt(var + eps))), PyTorch's order, whether the fold writes over the
// weight's own buffer or, the data being shared with another module, into a new one (which
// leaves the other module's values as they were).
TEST_F(FuseTest, BatchNormFoldScalesLongRowsExactlySharedOrNot) {
  constexpr int kOut = 2, kIn = 2, kPerChannel = kIn * 3 * 3;
  std::vector<float> weight(kOut * kPerChannel);
  for (size_t i = 0; i < weight.size(); ++i) weight[i] = 0.37f * static_cast<float>(i) - 5.1f;
  const std::vector<float> gamma = {1.7f, -0.3f}, var = {0.9f, 2.5f};
  const float eps = 1e-5f;
  for (const bool shared : {false, true}) {
    SCOPED_TRACE(shared ? "shared weight" : "own weight");
    GraphModule gm;
    Graph& g = gm.graph();
    Node* x = Must(g.AddPlaceholder("x"));
    auto conv = Conv2dModule(rng_, kIn, kOut, 3);
    conv->SetTensor("weight", Tensor::FromFloats({kOut, kIn, 3, 3}, weight));
    auto bn = BatchNorm2dModule(rng_, kOut, eps);
    bn->SetTensor("weight", Tensor::FromFloats({kOut}, gamma));
    bn->SetTensor("running_var", Tensor::FromFloats({kOut}, var));
    std::vector<Argument> outputs;
    if (shared) {
      auto tied = Conv2dModule(rng_, kIn, kOut, 3);
      tied->SetTensor("weight", *conv->FindTensor("weight"));
      ASSERT_TRUE(gm.SetModule("tied", std::move(tied)).ok());
      outputs.push_back(Must(g.AddCallModule("tied", {x}, {}, "tied")));
    }
    ASSERT_TRUE(gm.SetModule("conv", std::move(conv)).ok());
    ASSERT_TRUE(gm.SetModule("bn", std::move(bn)).ok());
    Node* c = Must(g.AddCallModule("conv", {x}, {}, "conv"));
    outputs.push_back(Must(g.AddCallModule("bn", {c}, {}, "bn")));
    Must(g.SetOutput(Argument::Tuple(outputs)));
    const void* buffer = gm.FindModule("conv")->FindTensor("weight")->raw_data();

    absl::StatusOr<int> fused = FuseIn(gm, {Rule("conv_bn", "(BatchNorm2d, Conv2d)", "")});
    ASSERT_TRUE(fused.ok()) << fused.status();
    ASSERT_EQ(*fused, 1);
    ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
    const Tensor* w = gm.FindModule("conv")->FindTensor("weight");
    ASSERT_EQ(w->numel(), kOut * kPerChannel);
    if (shared) {
      EXPECT_NE(w->raw_data(), buffer);
      const Tensor* tied_weight = gm.FindModule("tied")->FindTensor("weight");
      EXPECT_EQ(tied_weight->raw_data(), buffer);
      EXPECT_EQ(*tied_weight, Tensor::FromFloats({kOut, kIn, 3, 3}, weight));
    } else {
      EXPECT_EQ(w->raw_data(), buffer);
    }
    for (int o = 0; o < kOut; ++o) {
      const float scale = gamma[o] * (1.0f / std::sqrt(var[o] + eps));
      for (int k = 0; k < kPerChannel; ++k) {
        const int i = o * kPerChannel + k;
        EXPECT_EQ(w->data<float>()[i], weight[i] * scale) << "element " << i;
      }
    }
  }
}

// The folded bias (hand-computed as in BatchNormFoldingMatchesHandComputedValues:
// b' = ((b - mean) / sqrt(var + eps)) * gamma + beta = [-0.4, 0.8]) is written over the
// conv's own bias buffer when no other module shares it, and into a copy when one does,
// which keeps its values.
TEST_F(FuseTest, BatchNormFoldWritesTheBiasInPlaceUnlessShared) {
  for (const bool shared : {false, true}) {
    SCOPED_TRACE(shared ? "shared bias" : "own bias");
    GraphModule gm;
    Node* x = Must(gm.graph().AddPlaceholder("x"));
    std::unique_ptr<Module> conv = HandFoldConv();
    std::unique_ptr<Module> bn = HandFoldBatchNorm();
    const void* bias_data = conv->FindTensor("bias")->raw_data();
    std::vector<Argument> outputs;
    if (shared) {
      auto tied = Conv2dModule(rng_, 1, 2, 1);
      tied->SetTensor("bias", *conv->FindTensor("bias"));
      ASSERT_TRUE(gm.SetModule("tied", std::move(tied)).ok());
      outputs.push_back(Must(gm.graph().AddCallModule("tied", {x}, {}, "tied")));
    }
    ASSERT_TRUE(gm.SetModule("conv", std::move(conv)).ok());
    ASSERT_TRUE(gm.SetModule("bn", std::move(bn)).ok());
    Node* c = Must(gm.graph().AddCallModule("conv", {x}, {}, "conv"));
    outputs.push_back(Must(gm.graph().AddCallModule("bn", {c}, {}, "bn")));
    Must(gm.graph().SetOutput(Argument::Tuple(outputs)));

    absl::StatusOr<int> fused = FuseIn(gm, {Rule("conv_bn", "(BatchNorm2d, Conv2d)", "")});
    ASSERT_TRUE(fused.ok()) << fused.status();
    ASSERT_EQ(*fused, 1);
    ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
    const Tensor* b = gm.FindModule("conv")->FindTensor("bias");
    ASSERT_EQ(b->shape(), (std::vector<int64_t>{2}));
    EXPECT_FLOAT_EQ(b->data<float>()[0], -0.4f);
    EXPECT_FLOAT_EQ(b->data<float>()[1], 0.8f);
    if (shared) {
      EXPECT_NE(b->raw_data(), bias_data);
      const Tensor* tied_bias = gm.FindModule("tied")->FindTensor("bias");
      EXPECT_EQ(tied_bias->raw_data(), bias_data);
      EXPECT_EQ(tied_bias->data<float>()[0], 0.5f);
      EXPECT_EQ(tied_bias->data<float>()[1], 1.0f);
    } else {
      EXPECT_EQ(b->raw_data(), bias_data);
    }
  }
}

// A conv the pass moves into the fused module is folded when it is moved, from the batch
// norm's data as it was: a bias of another shape is replaced (not written over), and a
// batch-norm tensor sharing its data with the conv's bias still reads the old values.
TEST_F(FuseTest, AMovedConvIsFoldedFromTheOriginalData) {
  for (const bool beta_is_conv_bias : {false, true}) {
    SCOPED_TRACE(beta_is_conv_bias ? "bn bias shares the conv bias" : "bias of shape [2, 1]");
    GraphModule gm;
    Node* x = Must(gm.graph().AddPlaceholder("x"));
    std::unique_ptr<Module> conv = HandFoldConv();
    std::unique_ptr<Module> bn = HandFoldBatchNorm();
    if (beta_is_conv_bias) {
      bn->SetTensor("bias", *conv->FindTensor("bias"));  // beta = [0.5, 1], same data
    } else {
      conv->SetTensor("bias", Tensor::FromFloats({2, 1}, {0.5f, 1.0f}));
    }
    ASSERT_TRUE(gm.SetModule("conv", std::move(conv)).ok());
    ASSERT_TRUE(gm.SetModule("bn", std::move(bn)).ok());
    Node* c = Must(gm.graph().AddCallModule("conv", {x}, {}, "conv"));
    Must(gm.graph().SetOutput(Must(gm.graph().AddCallModule("bn", {c}, {}, "bn"))));

    absl::StatusOr<int> fused = FuseIn(gm, {Rule("conv_bn", "(BatchNorm2d, Conv2d)", "")});
    ASSERT_TRUE(fused.ok()) << fused.status();
    ASSERT_EQ(*fused, 1);
    ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
    const Module* folded = gm.FindModule("conv");
    ASSERT_NE(folded, nullptr);
    EXPECT_EQ(gm.FindModule("bn"), nullptr);
    const Tensor* w = folded->FindTensor("weight");
    EXPECT_FLOAT_EQ(w->data<float>()[0], 2.0f);
    EXPECT_FLOAT_EQ(w->data<float>()[1], -0.5f);
    const Tensor* b = folded->FindTensor("bias");
    ASSERT_EQ(b->shape(), (std::vector<int64_t>{2}));
    if (beta_is_conv_bias) {
      // b' = [(0.5 - 1) * 1 + 0.5, (1 + 1) * 0.5 + 1] = [0, 2].
      EXPECT_FLOAT_EQ(b->data<float>()[0], 0.0f);
      EXPECT_FLOAT_EQ(b->data<float>()[1], 2.0f);
    } else {
      EXPECT_FLOAT_EQ(b->data<float>()[0], -0.4f);
      EXPECT_FLOAT_EQ(b->data<float>()[1], 0.8f);
    }
  }
}

// (BatchNorm2d, Conv2d) -> nn.Conv2d of a conv only this match calls: the fused module is
// the conv's own module object, folded where it is in the tree (not moved out and back),
// with its attributes as they were and the hand-computed weight and bias.
TEST_F(FuseTest, AFoldIntoTheRootsOwnModuleLeavesItInItsSlot) {
  Must(graph().SetOutput(Call(Call(x_, "conv", HandFoldConv()), "bn", HandFoldBatchNorm())));
  const Module* before = gm_.FindModule("conv");
  const Module::AttributeList attributes = before->attributes();

  absl::StatusOr<int> fused = Fuse({Rule("conv_bn", "(BatchNorm2d, Conv2d)", "")});
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_EQ(*fused, 1);
  ASSERT_TRUE(gm_.Verify().ok()) << gm_.Verify();
  const Module* after = gm_.FindModule("conv");
  EXPECT_EQ(after, before);
  EXPECT_EQ(gm_.FindModule("bn"), nullptr);
  EXPECT_EQ(after->type().name(), "nn.Conv2d");
  EXPECT_EQ(after->attributes(), attributes);
  ASSERT_EQ(after->tensors().size(), 2u);
  EXPECT_EQ(after->tensors()[0].first, "weight");
  EXPECT_EQ(after->tensors()[1].first, "bias");
  const float* w = after->FindTensor("weight")->data<float>();
  const float* b = after->FindTensor("bias")->data<float>();
  EXPECT_FLOAT_EQ(w[0], 2.0f);
  EXPECT_FLOAT_EQ(w[1], -0.5f);
  EXPECT_FLOAT_EQ(b[0], -0.4f);
  EXPECT_FLOAT_EQ(b[1], 0.8f);
  const std::vector<Node*> convs = NodesOfType("nn.Conv2d");
  ASSERT_EQ(convs.size(), 1u);
  EXPECT_EQ(convs[0]->target().name(), "conv");
  EXPECT_EQ(convs[0]->name(), "conv");
}

// eps may be an int attribute (as GetFloat reads it): eps = 1 gives the hand-computed fold.
TEST_F(FuseTest, BatchNormFoldReadsAnIntEps) {
  std::unique_ptr<Module> bn = HandFoldBatchNorm();
  bn->SetAttribute("eps", Argument::Int(1));
  Must(graph().SetOutput(Call(Call(x_, "conv", HandFoldConv()), "bn", std::move(bn))));
  absl::StatusOr<int> fused = Fuse({Rule("conv_bn", "(BatchNorm2d, Conv2d)", "")});
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_TRUE(gm_.Verify().ok()) << gm_.Verify();
  const Module* m = gm_.FindModule("conv");
  EXPECT_FLOAT_EQ(m->FindTensor("weight")->data<float>()[1], -0.5f);
  EXPECT_FLOAT_EQ(m->FindTensor("bias")->data<float>()[1], 0.8f);
}

// Bad module data for a fold is an error naming the module and the field, found before
// the graph is touched: the graph and both modules stay as they were.
TEST_F(FuseTest, BadFoldInputsAreErrorsThatChangeNothing) {
  struct Case {
    const char* what;
    void (*spoil)(Module& conv, Module& bn);
    absl::StatusCode code;
    const char* message;
  };
  const Case cases[] = {
      {"conv without weight", [](Module& conv, Module&) { conv.RemoveTensor("weight"); },
       absl::StatusCode::kNotFound, "nn.Conv2d module has no tensor 'weight'"},
      {"running_var of 3 elements",
       [](Module&, Module& bn) { bn.SetTensor("running_var", Tensor::FromFloats({3}, {1, 1, 1})); },
       absl::StatusCode::kInvalidArgument,
       "tensor 'running_var' of module 'bn' must be float32 with 2 elements"},
      {"no running_mean", [](Module&, Module& bn) { bn.RemoveTensor("running_mean"); },
       absl::StatusCode::kInvalidArgument, "module 'bn' has no tensor 'running_mean'"},
      {"conv bias of 1 element",
       [](Module& conv, Module&) { conv.SetTensor("bias", Tensor::FromFloats({1}, {1})); },
       absl::StatusCode::kInvalidArgument,
       "tensor 'bias' of module 'conv' must be float32 with 2 elements"},
      {"eps a string", [](Module&, Module& bn) { bn.SetAttribute("eps", Argument::String("x")); },
       absl::StatusCode::kInvalidArgument, "attribute 'eps': expected a float"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    GraphModule gm;
    Node* x = Must(gm.graph().AddPlaceholder("x"));
    std::unique_ptr<Module> conv = HandFoldConv();
    std::unique_ptr<Module> bn = HandFoldBatchNorm();
    c.spoil(*conv, *bn);
    ASSERT_TRUE(gm.SetModule("conv", std::move(conv)).ok());
    ASSERT_TRUE(gm.SetModule("bn", std::move(bn)).ok());
    Node* n = Must(gm.graph().AddCallModule("conv", {x}, {}, "conv"));
    Must(gm.graph().SetOutput(Must(gm.graph().AddCallModule("bn", {n}, {}, "bn"))));
    const std::string before = SerializeModelText(gm);
    const Module* conv_before = gm.FindModule("conv");

    absl::StatusOr<int> fused = FuseIn(gm, {Rule("conv_bn", "(BatchNorm2d, Conv2d)", "")});
    ASSERT_FALSE(fused.ok());
    EXPECT_EQ(fused.status().code(), c.code) << fused.status();
    EXPECT_THAT(std::string(fused.status().message()), HasSubstr(c.message));
    EXPECT_EQ(SerializeModelText(gm), before);  // graph, module tree and tensor data
    EXPECT_EQ(gm.FindModule("conv"), conv_before);
  }
}

// FusionRule::Fuse on its own (no pass) returns the module fully folded, and leaves the
// module in the graph, whose data it shared, as it was.
TEST_F(FuseTest, FuseOutsideThePassFoldsTheWeightCompletely) {
  auto conv = Conv2dModule(rng_, 1, 2, 1);
  conv->SetTensor("weight", Tensor::FromFloats({2, 1, 1, 1}, {2.0f, -1.0f}));
  auto bn = BatchNorm2dModule(rng_, 2, /*eps=*/1.0);
  bn->SetTensor("weight", Tensor::FromFloats({2}, {2.0f, 0.5f}));
  bn->SetTensor("running_var", Tensor::FromFloats({2}, {3.0f, 0.0f}));
  Must(graph().SetOutput(Call(Call(x_, "conv", std::move(conv)), "bn", std::move(bn))));
  absl::StatusOr<PatternMatcher> m =
      PatternMatcher::Create({Rule("conv_bn", "(BatchNorm2d, Conv2d)", "")});
  ASSERT_TRUE(m.ok()) << m.status();
  const std::vector<PatternMatch> matches = m->FindMatches(gm_);
  ASSERT_EQ(matches.size(), 1u);
  absl::StatusOr<std::unique_ptr<Module>> module = matches[0].rule->Fuse(gm_, matches[0]);
  ASSERT_TRUE(module.ok()) << module.status();
  const Tensor* w = (*module)->FindTensor("weight");
  EXPECT_FLOAT_EQ(w->data<float>()[0], 2.0f);
  EXPECT_FLOAT_EQ(w->data<float>()[1], -0.5f);
  const Tensor* original = gm_.FindModule("conv")->FindTensor("weight");
  EXPECT_EQ(original->data<float>()[0], 2.0f);
  EXPECT_EQ(original->data<float>()[1], -1.0f);
}

// ---- Issue 21: one entry with alternatives and an optional batch norm ------------------

// The fused node's meta entry `key` as strings (a list of strings), or {"<absent>"}.
std::vector<std::string> MetaStrings(const Node* node, const char* key) {
  for (const Kwarg& entry : node->meta()) {
    if (entry.first.name() != key) continue;
    std::vector<std::string> out;
    for (const Argument& item : entry.second.items()) out.push_back(std::string(item.as_string()));
    return out;
  }
  return {"<absent>"};
}

TEST_F(FuseTest, OneEntryFusesConvBnRelu6AndConvHardswishRecordingWhichMatched) {
  Node* a = Call(Call(Call(x_, "conv_a", HandFoldConv()), "bn_a", HandFoldBatchNorm()), "act_a",
                 PlainModule("nn.ReLU6"));
  Node* b = Call(Call(a, "conv_b", Conv2dModule(rng_, 2, 2, 1)), "act_b",
                 PlainModule("nn.Hardswish"));
  Must(graph().SetOutput(b));
  const Tensor* original = gm_.FindModule(Symbol::Intern("conv_b"))->FindTensor("weight");
  const std::vector<float> conv_b_weight(original->data<float>(), original->data<float>() + 4);
  absl::StatusOr<int> fused = Fuse({Rule("conv_bn_act",
                                         "(ReLU | ReLU6 | Hardswish, (BatchNorm2d?, Conv2d))",
                                         "nni.ConvAct2d")});
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_EQ(*fused, 2);
  ASSERT_TRUE(gm_.Verify().ok()) << gm_.Verify();

  std::vector<const Node*> fused_nodes;
  for (Node* n = graph().first(); n != nullptr; n = n->next()) {
    if (n->op() == OpKind::kCallModule) fused_nodes.push_back(n);
  }
  ASSERT_EQ(fused_nodes.size(), 2u);
  // conv_a-bn_a-relu6: the batch norm folded (the fixture's hand-computed fold), ReLU6 kept.
  const Module* first = gm_.FindModule(fused_nodes[0]->target());
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->type().name(), "nni.ConvAct2d");
  ASSERT_EQ(first->children().size(), 2u);
  const Module* folded = first->FindChild("0");
  const float* w = folded->FindTensor("weight")->data<float>();
  const float* bias = folded->FindTensor("bias")->data<float>();
  EXPECT_FLOAT_EQ(w[0], 2.0f);
  EXPECT_FLOAT_EQ(w[1], -0.5f);
  EXPECT_FLOAT_EQ(bias[0], -0.4f);
  EXPECT_FLOAT_EQ(bias[1], 0.8f);
  EXPECT_EQ(first->FindChild("1")->type().name(), "nn.ReLU6");
  EXPECT_THAT(MetaStrings(fused_nodes[0], "pattern_alternatives"),
              ElementsAre("ReLU6", "BatchNorm2d", "Conv2d"));
  EXPECT_TRUE(MetaStrings(fused_nodes[0], "pattern_absent").empty());
  // conv_b-hardswish: no batch norm, so nothing folded: the conv as it was.
  const Module* second = gm_.FindModule(fused_nodes[1]->target());
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->type().name(), "nni.ConvAct2d");
  const float* w_b = second->FindChild("0")->FindTensor("weight")->data<float>();
  EXPECT_EQ(std::vector<float>(w_b, w_b + 4), conv_b_weight);
  EXPECT_EQ(second->FindChild("1")->type().name(), "nn.Hardswish");
  EXPECT_THAT(MetaStrings(fused_nodes[1], "pattern_alternatives"),
              ElementsAre("Hardswish", "", "Conv2d"));
  EXPECT_THAT(MetaStrings(fused_nodes[1], "pattern_absent"), ElementsAre("0"));
}

TEST_F(FuseTest, OptionalPositionWhoseAbsenceDoesNotFitTheFusedTypeFailsAndChangesNothing) {
  // wrap_in_sequence into nni.ConvBnReLU2d: with the batch norm absent the module would have
  // two children where the type holds three.
  Node* r = Call(Call(x_, "conv", Conv2dModule(rng_, 3, 3, 1)), "relu", PlainModule("nn.ReLU"));
  Must(graph().SetOutput(r));
  const std::string before = SerializeModelText(gm_);
  absl::StatusOr<int> fused = Fuse({Rule("opt", "(ReLU, (BatchNorm2d?, Conv2d))",
                                         "nni.ConvBnReLU2d", FuserKind::kWrapInSequence)});
  ASSERT_FALSE(fused.ok());
  EXPECT_THAT(fused.status().message(), HasSubstr("rule 'opt'"));
  EXPECT_THAT(fused.status().message(), HasSubstr("has 2 children; a nni.ConvBnReLU2d holds 3"));
  EXPECT_EQ(SerializeModelText(gm_), before);
  ASSERT_TRUE(gm_.Verify().ok());
}

// The overlap report (issue 21 item 5): the match that fused, and the rule that would have
// matched the same nodes alone, with the shared op nodes; the conv, which only the winner
// claims, and the placeholder are not listed.
TEST_F(FuseTest, OverlapReportNamesWinnerLoserAndSharedNodes) {
  Node* relu = Call(Call(Call(x_, "conv", Conv2dModule(rng_, 3, 3, 1)), "bn",
                         BatchNorm2dModule(rng_, 3)),
                    "relu", PlainModule("nn.ReLU"));
  ASSERT_TRUE(graph().SetOutput(relu).ok());
  FusionRule bn_relu =
      Rule("bn_relu", "(ReLU, BatchNorm2d)", "nni.BNReLU2d", FuserKind::kWrapInSequence);
  auto matcher = PatternMatcher::Create({ConvBnReluRule(), bn_relu});
  ASSERT_TRUE(matcher.ok()) << matcher.status();

  const std::vector<MatchOverlap> overlaps = FindMatchOverlaps(gm_, *matcher);
  ASSERT_EQ(overlaps.size(), 1u);
  EXPECT_EQ(overlaps[0].winner, "conv_bn_relu");
  EXPECT_EQ(overlaps[0].winner_at, "relu");
  EXPECT_EQ(overlaps[0].loser, "bn_relu");
  EXPECT_EQ(overlaps[0].loser_at, "relu");
  EXPECT_THAT(overlaps[0].nodes, ElementsAre("relu", "bn"));
  EXPECT_EQ(overlaps[0].ToString(), "conv_bn_relu at relu took relu, bn from bn_relu at relu");

  // With the benefit on bn_relu the roles swap; fusing reports the same overlaps.
  bn_relu.benefit = 1;
  auto flipped = PatternMatcher::Create({ConvBnReluRule(), bn_relu});
  ASSERT_TRUE(flipped.ok()) << flipped.status();
  auto outcome = FusePatternsWithOptions(gm_, *flipped, FuseOptions{/*report_overlaps=*/true});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->fused, 1);
  ASSERT_EQ(outcome->overlaps.size(), 1u);
  EXPECT_EQ(outcome->overlaps[0].ToString(),
            "bn_relu at relu took relu, bn from conv_bn_relu at relu");
  // bn_relu fused: the conv is left, feeding the fused node.
  EXPECT_EQ(graph().size(), 4u);  // x, conv, the fused node, output
  EXPECT_TRUE(gm_.Verify().ok());
}

TEST_F(FuseTest, NoOverlapsWithoutTheOption) {
  Node* relu = Call(Call(Call(x_, "conv", Conv2dModule(rng_, 3, 3, 1)), "bn",
                         BatchNorm2dModule(rng_, 3)),
                    "relu", PlainModule("nn.ReLU"));
  ASSERT_TRUE(graph().SetOutput(relu).ok());
  auto matcher = PatternMatcher::Create(
      {ConvBnReluRule(),
       Rule("bn_relu", "(ReLU, BatchNorm2d)", "nni.BNReLU2d", FuserKind::kWrapInSequence)});
  ASSERT_TRUE(matcher.ok()) << matcher.status();
  auto outcome = FusePatternsWithOptions(gm_, *matcher, FuseOptions{});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->fused, 1);
  EXPECT_TRUE(outcome->overlaps.empty());
}

}  // namespace
}  // namespace fuselage
