// The matcher's FX semantics, each as a test, plus fuselage's documented differences
// from PyTorch (matcher.h) and Explain's report.
#include "patterns/matcher.h"

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "patterns/fusion_rule.h"
#include "tests/patterns/test_models.h"

namespace fuselage {
namespace {

using ::fuselage::testing::BatchNorm2dModule;
using ::fuselage::testing::Conv2dModule;
using ::fuselage::testing::Must;
using ::fuselage::testing::PlainModule;
using ::testing::HasSubstr;

class MatcherTest : public ::testing::Test {
 protected:
  void SetUp() override { x_ = Must(graph().AddPlaceholder("x")); }

  Graph& graph() { return gm_.graph(); }

  Node* Conv(Node* in, const char* path) {
    EXPECT_TRUE(gm_.SetModule(path, Conv2dModule(rng_, 3, 3, 1)).ok());
    return Must(graph().AddCallModule(path, {in}, {}, path));
  }
  Node* Bn(Node* in, const char* path) {
    EXPECT_TRUE(gm_.SetModule(path, BatchNorm2dModule(rng_, 3)).ok());
    return Must(graph().AddCallModule(path, {in}, {}, path));
  }
  Node* Module(Node* in, const char* path, const char* type) {
    EXPECT_TRUE(gm_.SetModule(path, PlainModule(type)).ok());
    return Must(graph().AddCallModule(path, {in}, {}, path));
  }
  Node* Relu(Node* in, const char* path) { return Module(in, path, "nn.ReLU"); }

  static FusionRule Rule(const char* name, const char* pattern,
                         PatternFormat format = PatternFormat::kComplex) {
    absl::StatusOr<FusionRule> rule =
        MakeFusionRule(name, pattern, format, "nni.ConvReLU2d", FuserKind::kWrapInSequence);
    EXPECT_TRUE(rule.ok()) << rule.status();
    return *rule;
  }

  std::vector<PatternMatch> Find(std::vector<FusionRule> rules) {
    absl::StatusOr<PatternMatcher> m = PatternMatcher::Create(std::move(rules));
    EXPECT_TRUE(m.ok()) << m.status();
    matcher_ = std::make_unique<PatternMatcher>(std::move(*m));
    return matcher_->FindMatches(gm_);
  }

  // Which node each op position of `m` is bound to, by name, in preorder.
  static std::vector<std::string> BoundNames(const PatternMatch& m) {
    std::vector<std::string> names;
    for (const Argument& a : m.bindings) {
      names.push_back(a.is_node() ? a.as_node()->name() : a.ToString());
    }
    return names;
  }

  std::mt19937 rng_{7};
  GraphModule gm_;
  Node* x_ = nullptr;
  std::unique_ptr<PatternMatcher> matcher_;
};

using Names = std::vector<std::string>;

// PyTorch: bn with two users blocks (ReLU, (BatchNorm2d, Conv2d)) — bn is an inner node —
// but (BatchNorm2d, Conv2d) still fuses: there bn is the outermost node, which may have
// many users.
TEST_F(MatcherTest, BnWithTwoUsersBlocksConvBnReluButConvBnStillFuses) {
  Node* conv = Conv(x_, "conv");
  Node* bn = Bn(conv, "bn");
  Node* relu = Relu(bn, "relu");
  Must(graph().SetOutput(Argument::Tuple({relu, bn})));
  const std::vector<PatternMatch> matches =
      Find({Rule("conv_bn_relu", "(ReLU, (BatchNorm2d, Conv2d))"),
            Rule("conv_bn", "(BatchNorm2d, Conv2d)")});
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_EQ(matches[0].rule->name, "conv_bn");
  EXPECT_EQ(BoundNames(matches[0]), (Names{"bn", "conv"}));
  EXPECT_TRUE(gm_.Verify().ok());
}

// Matches of different lengths share one bindings storage: each match sees exactly its own
// positions, and a copy of a match keeps them readable after the scan's vector is gone.
TEST_F(MatcherTest, EachMatchReadsItsOwnBindingsAndCopiesOutliveTheScan) {
  Node* r1 = Relu(Bn(Conv(x_, "conv1"), "bn1"), "relu1");
  Node* b2 = Bn(Conv(r1, "conv2"), "bn2");
  Node* id = Module(b2, "id", "nn.Identity");
  Node* r3 = Relu(Bn(Conv(id, "conv3"), "bn3"), "relu3");
  Must(graph().SetOutput(r3));
  PatternMatch copy;
  {
    const std::vector<PatternMatch> matches =
        Find({Rule("conv_bn_relu", "(ReLU, (BatchNorm2d, Conv2d))"),
              Rule("conv_bn", "(BatchNorm2d, Conv2d)")});
    ASSERT_EQ(matches.size(), 3u);  // from the output backwards
    EXPECT_EQ(BoundNames(matches[0]), (Names{"relu3", "bn3", "conv3"}));
    EXPECT_EQ(BoundNames(matches[1]), (Names{"bn2", "conv2"}));
    EXPECT_EQ(BoundNames(matches[2]), (Names{"relu1", "bn1", "conv1"}));
    EXPECT_EQ(matches[1].bindings.size(), 2u);
    copy = matches[1];
  }
  EXPECT_EQ(copy.rule->name, "conv_bn");
  EXPECT_EQ(BoundNames(copy), (Names{"bn2", "conv2"}));
  EXPECT_EQ(copy.outermost(), b2);
}

TEST_F(MatcherTest, ConvWithTwoUsersBlocksEverything) {
  Node* conv = Conv(x_, "conv");
  Node* bn = Bn(conv, "bn");
  Node* relu = Relu(bn, "relu");
  Must(graph().SetOutput(Argument::Tuple({relu, conv})));
  const std::vector<PatternMatch> matches =
      Find({Rule("conv_bn_relu", "(ReLU, (BatchNorm2d, Conv2d))"),
            Rule("conv_bn", "(BatchNorm2d, Conv2d)")});
  EXPECT_TRUE(matches.empty());
}

TEST_F(MatcherTest, OutermostReluWithTwoUsersStillFuses) {
  Node* relu = Relu(Bn(Conv(x_, "conv"), "bn"), "relu");
  Node* a = Module(relu, "id1", "nn.Identity");
  Node* b = Module(relu, "id2", "nn.Identity");
  Must(graph().SetOutput(Argument::Tuple({a, b})));
  const std::vector<PatternMatch> matches =
      Find({Rule("conv_bn_relu", "(ReLU, (BatchNorm2d, Conv2d))")});
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_EQ(BoundNames(matches[0]), (Names{"relu", "bn", "conv"}));
}

// Scanning from the output, relu+bn match first and claim bn; conv is left alone.
TEST_F(MatcherTest, GreedyOverlapFirstMatchFromTheOutputWins) {
  Node* relu = Relu(Bn(Conv(x_, "conv"), "bn"), "relu");
  Must(graph().SetOutput(relu));
  const std::vector<PatternMatch> matches = Find(
      {Rule("bn_relu", "(ReLU, BatchNorm2d)"), Rule("conv_bn", "(BatchNorm2d, Conv2d)")});
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_EQ(matches[0].rule->name, "bn_relu");
  EXPECT_EQ(BoundNames(matches[0]), (Names{"relu", "bn"}));
}

TEST_F(MatcherTest, LongerPatternsFirstThenRegistrationOrder) {
  Node* relu = Relu(Bn(Conv(x_, "conv"), "bn"), "relu");
  Must(graph().SetOutput(relu));
  // Registered shorter first; the longer one still wins.
  std::vector<PatternMatch> matches = Find({Rule("bn_relu", "(ReLU, BatchNorm2d)"),
                                            Rule("conv_bn_relu", "(ReLU, (BatchNorm2d, Conv2d))")});
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_EQ(matches[0].rule->name, "conv_bn_relu");
  // Same length: registration order decides.
  matches = Find({Rule("first", "(ReLU, BatchNorm2d)"), Rule("second", "(ReLU, MatchAllNode)")});
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_EQ(matches[0].rule->name, "first");
  matches = Find({Rule("second", "(ReLU, MatchAllNode)"), Rule("first", "(ReLU, BatchNorm2d)")});
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_EQ(matches[0].rule->name, "second");
}

// `add` covers torch.add, operator.add and the add method; a qualified name only itself.
TEST_F(MatcherTest, TorchAddVersusOperatorAdd) {
  Node* y = Must(graph().AddPlaceholder("y"));
  std::vector<Argument> outs;
  Node* a1 = Must(graph().AddCallFunction("torch.add", {x_, y}, {}, "torch_add"));
  outs.push_back(Must(graph().AddCallFunction("torch.relu", {a1}, {}, "r1")));
  Node* a2 = Must(graph().AddCallFunction("operator.add", {x_, y}, {}, "op_add"));
  outs.push_back(Must(graph().AddCallFunction("torch.relu", {a2}, {}, "r2")));
  Node* a3 = Must(graph().AddCallMethod("add", {x_, y}, {}, "method_add"));
  outs.push_back(Must(graph().AddCallFunction("torch.relu", {a3}, {}, "r3")));
  Node* a4 = Must(graph().AddCallFunction("torch.sub", {x_, y}, {}, "sub"));
  outs.push_back(Must(graph().AddCallFunction("torch.relu", {a4}, {}, "r4")));
  Must(graph().SetOutput(Argument::Tuple(outs)));
  ASSERT_TRUE(gm_.Verify().ok());

  std::vector<PatternMatch> matches = Find({Rule("add_relu", "(relu, add)")});
  std::vector<std::string> found;
  for (const PatternMatch& m : matches) found.push_back(m.node_at(1)->name());
  EXPECT_EQ(found, (Names{"method_add", "op_add", "torch_add"}));

  matches = Find({Rule("add_relu", "(relu, operator.add)")});
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_EQ(matches[0].node_at(1)->name(), "op_add");
}

TEST_F(MatcherTest, AlphaTwoIsNotFusedButAlphaOneIs) {
  Node* y = Must(graph().AddPlaceholder("y"));
  Node* bn = Bn(Conv(x_, "conv"), "bn");
  Node* add = Must(graph().AddCallFunction("torch.add", {bn, y},
                                           {{Symbol::Intern("alpha"), Argument::Int(2)}}, "add"));
  Node* relu = Relu(add, "relu");
  Must(graph().SetOutput(relu));
  const FusionRule rule = Rule("conv_bn_add_relu", "(ReLU, (add, (BatchNorm2d, Conv2d), MatchAllNode))");
  EXPECT_TRUE(Find({rule}).empty());
  // The report says why.
  const ExplainReport report = matcher_->Explain(gm_);
  ASSERT_EQ(report.failures.size(), 1u);
  EXPECT_EQ(report.failures[0].ToString(),
            "conv_bn_add_relu at relu: ReLU \u2192 arg 0 (add): has kwarg alpha=2, which add "
            "does not allow");
  // alpha=1 is torch.add's default and changes nothing.
  ASSERT_TRUE(graph().SetKwarg(add, "alpha", Argument::Int(1)).ok());
  EXPECT_EQ(Find({rule}).size(), 1u);
  // A pattern may allow any alpha explicitly.
  ASSERT_TRUE(graph().SetKwarg(add, "alpha", Argument::Float(2.5)).ok());
  EXPECT_TRUE(Find({rule}).empty());
  EXPECT_EQ(Find({Rule("any_alpha", "(ReLU, (add{alpha}, (BatchNorm2d, Conv2d), MatchAllNode))")})
                .size(),
            1u);
}

TEST_F(MatcherTest, InplaceKwargOfFunctionalReluIsHarmless) {
  Node* conv = Conv(x_, "conv");
  Node* relu = Must(graph().AddCallFunction(
      "torch.nn.functional.relu", {conv}, {{Symbol::Intern("inplace"), Argument::Bool(false)}}));
  Must(graph().SetOutput(relu));
  const std::vector<PatternMatch> matches =
      Find({Rule("conv_relu", "(Conv2d, F.relu)", PatternFormat::kSequence)});
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_EQ(matches[0].node_at(1), conv);
}

// PyTorch's apply_match raises AttributeError here ('float' has no attribute 'name').
TEST_F(MatcherTest, MatchAllNodeOnAConstant) {
  Node* bn = Bn(Conv(x_, "conv"), "bn");
  Node* add = Must(graph().AddCallFunction("operator.add", {bn, Argument::Float(1.5)}, {}, "add"));
  Must(graph().SetOutput(Relu(add, "relu")));
  const std::vector<PatternMatch> matches = Find(
      {Rule("conv_bn_add_relu", "(ReLU, (add, (BatchNorm2d, Conv2d), MatchAllNode))")});
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_EQ(BoundNames(matches[0]), (Names{"relu", "add", "bn", "conv", "1.5"}));
  EXPECT_EQ(matches[0].node_at(4), nullptr);
}

TEST_F(MatcherTest, CommutativeAddMatchesWithArgsSwapped) {
  Node* identity = Module(x_, "identity", "nn.Identity");
  Node* bn = Bn(Conv(x_, "conv"), "bn");
  Node* add = Must(graph().AddCallFunction("operator.add", {identity, bn}, {}, "add"));
  Must(graph().SetOutput(Relu(add, "relu")));
  const std::vector<PatternMatch> matches = Find(
      {Rule("conv_bn_add_relu", "(ReLU, (add, (BatchNorm2d, Conv2d), MatchAllNode))")});
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_EQ(BoundNames(matches[0]), (Names{"relu", "add", "bn", "conv", "identity"}));
}

TEST_F(MatcherTest, NonCommutativeOpIsNotSwapped) {
  Node* identity = Module(x_, "identity", "nn.Identity");
  Node* bn = Bn(Conv(x_, "conv"), "bn");
  Node* sub = Must(graph().AddCallFunction("torch.sub", {identity, bn}, {}, "sub"));
  Must(graph().SetOutput(Relu(sub, "relu")));
  EXPECT_TRUE(Find({Rule("r", "(ReLU, (torch.sub, (BatchNorm2d, Conv2d), MatchAllNode))")})
                  .empty());
}

// Difference (e): mul(bn, bn) — bn has one (distinct) user, but fusing would erase the bn
// the MatchAllNode input still reads.
TEST_F(MatcherTest, NodeBothMatchedAndMatchAllInputIsRejected) {
  Node* bn = Bn(Conv(x_, "conv"), "bn");
  Node* mul = Must(graph().AddCallFunction("operator.mul", {bn, bn}, {}, "mul"));
  Must(graph().SetOutput(mul));
  EXPECT_TRUE(Find({Rule("r", "(mul, (BatchNorm2d, Conv2d), MatchAllNode)")}).empty());
  const ExplainReport report = matcher_->Explain(gm_);
  ASSERT_EQ(report.failures.size(), 1u);
  EXPECT_THAT(report.failures[0].reason, HasSubstr("node bn is both matched and an input"));
}

// Difference (e), the other half: add(bn, bn) against a pattern with two (BatchNorm2d,
// Conv2d) subtrees would bind bn (and conv) to two op positions each.
TEST_F(MatcherTest, NodeFillingTwoOpPositionsIsRejected) {
  Node* bn = Bn(Conv(x_, "conv"), "bn");
  Node* add = Must(graph().AddCallFunction("operator.add", {bn, bn}, {}, "add"));
  Must(graph().SetOutput(add));
  EXPECT_TRUE(gm_.Verify().ok());
  EXPECT_TRUE(
      Find({Rule("r", "(add, (BatchNorm2d, Conv2d), (BatchNorm2d, Conv2d))")}).empty());
  const ExplainReport report = matcher_->Explain(gm_);
  ASSERT_EQ(report.failures.size(), 1u);
  EXPECT_THAT(report.failures[0].reason,
              HasSubstr("node bn would fill two pattern positions"));
}

// The scan checks difference (e) only for patterns that can break it (matcher.h): chains
// cannot, a position with two pattern args can.
TEST(PatternMayBindANodeTwiceTest, OnlyPatternsWithATwoArgPosition) {
  const auto may_bind_twice = [](const char* text) {
    absl::StatusOr<Pattern> p = Pattern::Parse(text, PatternFormat::kComplex);
    EXPECT_TRUE(p.ok()) << p.status();
    return PatternMayBindANodeTwice(*p);
  };
  EXPECT_FALSE(may_bind_twice("Conv2d"));
  EXPECT_FALSE(may_bind_twice("(ReLU, (BatchNorm2d, Conv2d))"));
  EXPECT_FALSE(may_bind_twice("(ReLU, MatchAllNode)"));
  EXPECT_TRUE(may_bind_twice("(add, (BatchNorm2d, Conv2d), MatchAllNode)"));
  EXPECT_TRUE(may_bind_twice("(ReLU, (add, (BatchNorm2d, Conv2d), MatchAllNode))"));
  EXPECT_TRUE(may_bind_twice("(mul, MatchAllNode, MatchAllNode)"));
}

// The scan rules a candidate out from the node's first arg using a copy of the pattern's
// first-arg alternatives (3 kept inline); a position with more takes the pattern's own
// list. Both must match exactly what the pattern accepts.
TEST_F(MatcherTest, FirstArgWithManyAlternativesMatchesEachOfThem) {
  FusionRule rule = Rule("relu_addish", "(ReLU, (add, MatchAllNode, MatchAllNode))");
  std::vector<PatternPosition> positions = rule.pattern.positions();
  ASSERT_EQ(positions[1].alternatives.size(), 3u);  // operator.add, torch.add, .add
  positions[1].alternatives.push_back({OpKind::kCallMethod, Symbol::Intern("add_")});
  absl::StatusOr<Pattern> four = Pattern::FromPositions(positions);
  ASSERT_TRUE(four.ok()) << four.status();
  rule.pattern = *four;
  Node* y = Must(graph().AddPlaceholder("y"));
  Node* in_place = Must(graph().AddCallMethod("add_", {x_, y}, {}, "add_inplace"));
  Node* relu1 = Relu(in_place, "relu1");
  Node* torch_add = Must(graph().AddCallFunction("torch.add", {relu1, y}, {}, "torch_add"));
  Node* relu2 = Relu(torch_add, "relu2");
  Node* sub = Must(graph().AddCallFunction("torch.sub", {relu2, y}, {}, "sub"));
  Must(graph().SetOutput(Relu(sub, "relu3")));
  ASSERT_TRUE(gm_.Verify().ok());
  const std::vector<PatternMatch> matches = Find({rule});
  ASSERT_EQ(matches.size(), 2u);  // from the output backwards; relu3(sub) does not match
  EXPECT_EQ(BoundNames(matches[0]), (Names{"relu2", "torch_add", "relu1", "y"}));
  EXPECT_EQ(BoundNames(matches[1]), (Names{"relu1", "add_inplace", "x", "y"}));
}

TEST_F(MatcherTest, PatternArgsRequireTheExactArgCount) {
  Node* y = Must(graph().AddPlaceholder("y"));
  Node* cat = Must(graph().AddCallFunction("torch.cat", {Argument::List({x_, y})}, {}, "cat"));
  Node* flat = Must(graph().AddCallFunction("torch.flatten", {cat, Argument::Int(1)}, {}, "flat"));
  Must(graph().SetOutput(flat));
  // flatten has 2 args, the pattern gives 1.
  EXPECT_TRUE(Find({Rule("r", "(torch.flatten, torch.cat)")}).empty());
  EXPECT_EQ(Find({Rule("r", "(torch.flatten, torch.cat, MatchAllNode)")}).size(), 1u);
  // A leaf without pattern args does not look at the node's args.
  EXPECT_EQ(Find({Rule("r", "torch.flatten")}).size(), 1u);
}

// The example of the issue, reproduced exactly.
TEST_F(MatcherTest, ExplainSaysWhyWithAPathAndAReason) {
  Node* y = Must(graph().AddPlaceholder("y"));
  Node* bn1 = Bn(Conv(x_, "conv1"), "bn1");
  Node* add = Must(graph().AddCallFunction("operator.add", {bn1, y}, {}, "add"));
  Node* relu = Relu(add, "relu_1");
  Node* cat = Must(graph().AddCallFunction("torch.cat", {Argument::List({relu, bn1})}, {}, "cat_3"));
  Must(graph().SetOutput(cat));
  const std::vector<PatternMatch> matches = Find(
      {Rule("conv_bn_add_relu", "(ReLU, (add, (BatchNorm2d, Conv2d), MatchAllNode))"),
       Rule("conv_bn", "(BatchNorm2d, Conv2d)")});
  ASSERT_EQ(matches.size(), 1u);
  const ExplainReport report = matcher_->Explain(gm_);
  ASSERT_EQ(report.failures.size(), 1u);
  // Swapped order was tried too (add is commutative), so the reason says so.
  EXPECT_EQ(report.failures[0].ToString(),
            "conv_bn_add_relu at relu_1: add \u2192 arg 0 (bn1): 2 users (add, cat_3); inner "
            "nodes may have 1: cat_3 reads bn1 outside the match, and position 0.0 is not a declared "
            "output (args also tried swapped)");
  EXPECT_EQ(report.failures[0].position, "0.0");
  EXPECT_EQ(report.matches_per_rule,
            (std::vector<std::pair<std::string, int>>{{"conv_bn_add_relu", 0}, {"conv_bn", 1}}));
  EXPECT_EQ(report.ToString(),
            "conv_bn_add_relu at relu_1: add \u2192 arg 0 (bn1): 2 users (add, cat_3); inner "
            "nodes may have 1: cat_3 reads bn1 outside the match, and position 0.0 is not a declared "
            "output (args also tried swapped)\n"
            "matches per pattern:\n"
            "  conv_bn_add_relu: 0\n"
            "  conv_bn: 1\n");
}

TEST_F(MatcherTest, ExplainNamesAWrongOp) {
  Node* conv = Conv(x_, "conv");
  Must(graph().SetOutput(Relu(Module(conv, "pool", "nn.MaxPool2d"), "relu")));
  Find({Rule("conv_relu", "(ReLU, Conv2d)")});
  const ExplainReport report = matcher_->Explain(gm_);
  ASSERT_EQ(report.failures.size(), 1u);
  EXPECT_EQ(report.failures[0].ToString(),
            "conv_relu at relu: ReLU \u2192 arg 0 (pool): is call_module nn.MaxPool2d; "
            "expected Conv2d");
}

TEST_F(MatcherTest, CreateRejectsBadRules) {
  FusionRule a = Rule("same", "(ReLU, Conv2d)");
  FusionRule b = Rule("same", "(ReLU, Linear)");
  absl::StatusOr<PatternMatcher> m = PatternMatcher::Create({a, b});
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("'same' is registered twice"));
  FusionRule c = Rule("c", "(ReLU, (add, Conv2d, MatchAllNode))");
  c.extra_input_positions = std::vector<int>{2};  // the conv, not a MatchAllNode
  m = PatternMatcher::Create({c});
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("extra_input_positions"));
}

// Many independent blocks: every one is found, and only once (no quadratic rescans).
TEST_F(MatcherTest, FindsEveryBlockOfALongChain) {
  Node* cur = x_;
  EXPECT_TRUE(gm_.SetModule("conv", Conv2dModule(rng_, 3, 3, 1)).ok());
  EXPECT_TRUE(gm_.SetModule("bn", BatchNorm2dModule(rng_, 3)).ok());
  EXPECT_TRUE(gm_.SetModule("relu", PlainModule("nn.ReLU")).ok());
  for (int i = 0; i < 1000; ++i) {
    cur = Must(graph().AddCallModule("conv", {cur}));
    cur = Must(graph().AddCallModule("bn", {cur}));
    cur = Must(graph().AddCallModule("relu", {cur}));
  }
  Must(graph().SetOutput(cur));
  const std::vector<PatternMatch> matches =
      Find({Rule("conv_bn_relu", "(ReLU, (BatchNorm2d, Conv2d))"),
            Rule("conv_relu", "(ReLU, Conv2d)"), Rule("conv_bn", "(BatchNorm2d, Conv2d)")});
  ASSERT_EQ(matches.size(), 1000u);
  for (const PatternMatch& m : matches) EXPECT_EQ(m.rule->name, "conv_bn_relu");
}


// The matcher reads module types from GraphModule's cache on the nodes: every kind of
// edit between two scans must be seen by the second (graph/module_binding.h).
TEST_F(MatcherTest, SeesModuleTreeEditsBetweenScans) {
  Node* conv = Conv(x_, "conv");
  Node* relu = Relu(conv, "relu");
  Must(graph().SetOutput(relu));
  matcher_ = std::make_unique<PatternMatcher>(
      *PatternMatcher::Create({Rule("conv_relu", "(ReLU, Conv2d)")}));
  const auto matches = [&] {
    EXPECT_TRUE(gm_.Verify().ok()) << gm_.Verify();
    return matcher_->FindMatches(gm_).size();
  };
  ASSERT_EQ(matches(), 1u);

  // SetModule replacing the conv with a module of another type: no match.
  ASSERT_TRUE(gm_.SetModule("conv", BatchNorm2dModule(rng_, 3)).ok());
  EXPECT_EQ(matches(), 0u);
  ASSERT_TRUE(gm_.SetModule("conv", Conv2dModule(rng_, 3, 3, 1)).ok());
  EXPECT_EQ(matches(), 1u);

  // The type of the module in place changed.
  gm_.FindModule("relu")->set_type(Symbol::Intern("nn.Identity"));
  EXPECT_EQ(matches(), 0u);
  gm_.FindModule("relu")->set_type(Symbol::Intern("nn.ReLU"));
  EXPECT_EQ(matches(), 1u);

  // The node retargeted to another module (a batch norm), then back.
  ASSERT_TRUE(gm_.SetModule("bn", BatchNorm2dModule(rng_, 3)).ok());
  ASSERT_TRUE(graph().SetTarget(conv, Symbol::Intern("bn")).ok());
  EXPECT_EQ(matches(), 0u);
  ASSERT_TRUE(graph().SetTarget(conv, Symbol::Intern("conv")).ok());
  EXPECT_EQ(matches(), 1u);

  // RemoveModules, then a conv reinstalled where the batch norm was and the node
  // retargeted to it.
  ASSERT_TRUE(gm_.RemoveModules({"bn"}).ok());
  ASSERT_TRUE(gm_.SetModule("bn", Conv2dModule(rng_, 3, 3, 1)).ok());
  ASSERT_TRUE(graph().SetTarget(conv, Symbol::Intern("bn")).ok());
  EXPECT_EQ(matches(), 1u);
}

// ---- Alternatives, predicates and optional positions (issue 21) ------------------------

TEST_F(MatcherTest, AlternativesMatchEachLeaf) {
  Node* a = Module(Conv(x_, "c1"), "r1", "nn.ReLU6");
  Relu(Conv(a, "c2"), "r2");
  Module(Conv(graph().last(), "c3"), "r3", "nn.Sigmoid");
  const std::vector<PatternMatch> matches = Find({Rule("act", "(ReLU | ReLU6, Conv2d)")});
  ASSERT_EQ(matches.size(), 2u);
  EXPECT_EQ(BoundNames(matches[0]), (Names{"r2", "c2"}));
  EXPECT_EQ(BoundNames(matches[1]), (Names{"r1", "c1"}));
}

TEST_F(MatcherTest, ModuleAttributePredicatesSelectDepthwiseConvs) {
  Node* dw = Conv(x_, "dw");
  gm_.FindModule(Symbol::Intern("dw"))->SetAttribute("groups", Argument::Int(3));
  Node* r1 = Relu(dw, "r1");
  Relu(Conv(r1, "pw"), "r2");  // groups 1
  const std::vector<PatternMatch> matches =
      Find({Rule("dw", "(ReLU, Conv2d[groups == in_channels, groups > 1])")});
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_EQ(BoundNames(matches[0]), (Names{"r1", "dw"}));
  const ExplainReport report = matcher_->Explain(gm_);
  ASSERT_EQ(report.failures.size(), 1u);
  EXPECT_EQ(report.failures[0].node, "r2");
  EXPECT_EQ(report.failures[0].position, "0");
  EXPECT_EQ(report.failures[0].reason,
            "predicate 'groups == in_channels' is false (groups = 1, in_channels = 3)");
}

TEST_F(MatcherTest, ConstantAndListPredicates) {
  // Conv() makes 1x1 convs with a bias; "nb" has none.
  Relu(Conv(x_, "c1"), "r1");
  EXPECT_TRUE(gm_.SetModule("nb", Conv2dModule(rng_, 3, 3, 1, /*bias=*/false)).ok());
  Node* nb = Must(graph().AddCallModule("nb", {graph().last()}, {}, "nb"));
  Relu(nb, "r2");
  EXPECT_EQ(Find({Rule("k", "(ReLU, Conv2d[kernel_size == (1, 1)])")}).size(), 2u);
  EXPECT_EQ(Find({Rule("k", "(ReLU, Conv2d[kernel_size != (1, 1)])")}).size(), 0u);
  EXPECT_EQ(Find({Rule("k", "(ReLU, Conv2d[kernel_size == (3, 3)])")}).size(), 0u);
  std::vector<PatternMatch> with_bias = Find({Rule("b", "(ReLU, Conv2d[bias])")});
  ASSERT_EQ(with_bias.size(), 1u);
  EXPECT_EQ(BoundNames(with_bias[0]), (Names{"r1", "c1"}));
  std::vector<PatternMatch> no_bias = Find({Rule("b", "(ReLU, Conv2d[bias == False])")});
  ASSERT_EQ(no_bias.size(), 1u);
  EXPECT_EQ(BoundNames(no_bias[0]), (Names{"r2", "nb"}));
  // <, <=, >= on numbers; int against float compares as numbers.
  EXPECT_EQ(Find({Rule("o", "(ReLU, Conv2d[out_channels < 4, out_channels >= 3.0])")}).size(), 2u);
  EXPECT_EQ(Find({Rule("o", "(ReLU, Conv2d[out_channels <= 2])")}).size(), 0u);
}

TEST_F(MatcherTest, UsersPredicateOnTheOutermostNode) {
  Node* r = Relu(Conv(x_, "c"), "r");
  Relu(r, "a");
  Relu(r, "b");
  EXPECT_EQ(Find({Rule("u", "(ReLU[users == 1], Conv2d)")}).size(), 0u);
  const ExplainReport report = matcher_->Explain(gm_);
  ASSERT_FALSE(report.failures.empty());
  EXPECT_EQ(report.failures.back().reason, "predicate 'users == 1' is false (users = 2)");
  EXPECT_EQ(Find({Rule("u", "(ReLU[users == 2], Conv2d)")}).size(), 1u);
}

TEST_F(MatcherTest, RankAndShapeComeFromNodeMeta) {
  Node* c = Conv(x_, "c");
  Relu(c, "r");
  // No recorded shape: not a match, and explain says why.
  EXPECT_EQ(Find({Rule("s", "(ReLU, Conv2d[rank == 4])")}).size(), 0u);
  const ExplainReport report = matcher_->Explain(gm_);
  ASSERT_EQ(report.failures.size(), 1u);
  EXPECT_THAT(report.failures[0].reason,
              HasSubstr("cannot be checked: node c has no recorded shape"));
  ASSERT_TRUE(graph().SetMeta(c, "shape", Argument::Ints({1, 3, 8, 8})).ok());
  EXPECT_EQ(Find({Rule("s", "(ReLU, Conv2d[rank == 4])")}).size(), 1u);
  EXPECT_EQ(Find({Rule("s", "(ReLU, Conv2d[rank == 3])")}).size(), 0u);
  EXPECT_EQ(Find({Rule("s", "(ReLU, Conv2d[shape == (1, 3, 8, 8)])")}).size(), 1u);
  EXPECT_EQ(Find({Rule("s", "(ReLU, Conv2d[shape != (1, 3, 8, 8)])")}).size(), 0u);
  EXPECT_EQ(Find({Rule("d", "(ReLU, Conv2d[dtype == torch.float32])")}).size(), 0u);  // none yet
  ASSERT_TRUE(graph().SetMeta(c, "dtype", Argument::Dtype(DType::kFloat32)).ok());
  EXPECT_EQ(Find({Rule("d", "(ReLU, Conv2d[dtype == torch.float32])")}).size(), 1u);
  EXPECT_EQ(Find({Rule("d", "(ReLU, Conv2d[dtype == float32])")}).size(), 1u);
  EXPECT_EQ(Find({Rule("d", "(ReLU, Conv2d[dtype != torch.float32])")}).size(), 0u);
  EXPECT_EQ(Find({Rule("d", "(ReLU, Conv2d[dtype == torch.float16])")}).size(), 0u);
}

TEST_F(MatcherTest, AttributeTheModuleLacksIsANonMatchWithAReason) {
  Relu(Conv(x_, "c"), "r");
  EXPECT_EQ(Find({Rule("g", "(ReLU[groups == 1], Conv2d)")}).size(), 0u);
  const ExplainReport report = matcher_->Explain(gm_);
  ASSERT_EQ(report.failures.size(), 1u);
  EXPECT_EQ(report.failures[0].reason,
            "predicate 'groups == 1' cannot be checked: nn.ReLU module r has no attribute "
            "'groups'");
}

TEST_F(MatcherTest, OptionalPositionPresentThenAbsent) {
  Node* r1 = Relu(Bn(Conv(x_, "c1"), "b1"), "r1");
  Node* r2 = Relu(Conv(r1, "c2"), "r2");
  Relu(Module(r2, "p", "nn.MaxPool2d"), "r3");
  const std::vector<PatternMatch> matches =
      Find({Rule("opt", "(ReLU, (BatchNorm2d?, Conv2d))")});
  ASSERT_EQ(matches.size(), 2u);
  EXPECT_EQ(BoundNames(matches[0]), (Names{"r2", "None", "c2"}));
  EXPECT_EQ(matches[0].node_at(1), nullptr);
  EXPECT_EQ(BoundNames(matches[1]), (Names{"r1", "b1", "c1"}));
  const ExplainReport report = matcher_->Explain(gm_);
  ASSERT_EQ(report.failures.size(), 1u);
  EXPECT_EQ(report.failures[0].node, "r3");
  EXPECT_EQ(report.failures[0].reason,
            "is call_module nn.MaxPool2d; expected BatchNorm2d (also tried absent: is "
            "call_module nn.MaxPool2d; expected Conv2d)");
}

// Explain gives both attempts at an optional position; the absent one's edge when it failed
// deeper than the present one.
TEST_F(MatcherTest, ExplainGivesTheAbsentAttemptsFailureOnItsOwnEdge) {
  Node* s = Module(x_, "s", "nn.Sigmoid");
  Node* r = Relu(Conv(s, "c"), "r");
  ASSERT_TRUE(graph().SetOutput(r).ok());
  EXPECT_TRUE(Find({Rule("opt", "(ReLU, (BatchNorm2d?, (Conv2d, MaxPool2d)))")}).empty());
  const ExplainReport report = matcher_->Explain(gm_);
  ASSERT_EQ(report.failures.size(), 1u);
  EXPECT_EQ(report.failures[0].position, "0");
  EXPECT_EQ(report.failures[0].reason,
            "is call_module nn.Conv2d; expected BatchNorm2d (also tried absent: Conv2d \u2192 "
            "arg 0 (s): is call_module nn.Sigmoid; expected MaxPool2d)");
}

TEST_F(MatcherTest, OptionalFirstArgDoesNotDefeatThePreCheck) {
  // The scan's pre-check reads the outermost op's first arg: with an optional position
  // there it must still try the rule when arg 0 is the optional position's own arg.
  Relu(Conv(x_, "c"), "r");
  EXPECT_EQ(Find({Rule("opt", "(ReLU, (BatchNorm2d?, (Conv2d, MatchAllNode)))")}).size(), 1u);
}

TEST_F(MatcherTest, AnOptionalPositionCannotBeTheRoot) {
  FusionRule rule = Rule("opt", "(ReLU, (BatchNorm2d?, Conv2d))");
  rule.root_position = 1;
  const absl::Status status = rule.Validate();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("is an optional position"));
}

TEST_F(MatcherTest, ConstantArgAndKwargPredicates) {
  Node* f = Must(graph().AddCallFunction("torch.flatten", {x_, Argument::Int(1)}, {}, "f1"));
  Must(graph().AddCallFunction("torch.flatten", {f, Argument::Int(2)}, {}, "f2"));
  Node* c = Must(graph().AddCallFunction("torch.cat", {Argument::List({Argument(x_)})},
                                         {{Symbol::Intern("dim"), Argument::Int(1)}}, "cat"));
  (void)c;
  std::vector<PatternMatch> flat = Find({Rule("f", "(torch.flatten[arg1 == 1], MatchAllNode, MatchAllNode)")});
  ASSERT_EQ(flat.size(), 1u);
  EXPECT_EQ(flat[0].outermost()->name(), "f1");
  EXPECT_EQ(Find({Rule("c", "(torch.cat{dim}[kwarg.dim == 1], MatchAllNode)")}).size(), 1u);
  EXPECT_EQ(Find({Rule("c", "(torch.cat{dim}[kwarg.dim == 0], MatchAllNode)")}).size(), 0u);
  // arg0 of f2 is a node: not a constant, so no match, with the reason.
  EXPECT_EQ(Find({Rule("f", "(torch.flatten[arg0 == 1], MatchAllNode, MatchAllNode)")}).size(), 0u);
  const ExplainReport report = matcher_->Explain(gm_);
  ASSERT_EQ(report.failures.size(), 2u);
  EXPECT_EQ(report.failures[0].reason,
            "predicate 'arg0 == 1' cannot be checked: arg 0 of f2 is a node, not a constant");
  EXPECT_EQ(Find({Rule("f", "(torch.flatten[arg5 == 1], MatchAllNode, MatchAllNode)")}).size(), 0u);
  EXPECT_THAT(matcher_->Explain(gm_).failures[0].reason, HasSubstr("has 2 args; no arg5"));
}

// Priority (issue 21 item 5): without a benefit the longest rule wins at a node whatever the
// registration order (PyTorch's order); a higher benefit on the shorter rule flips it; equal
// benefits fall back to the default order.
TEST_F(MatcherTest, BenefitComesBeforeLengthAndTiesKeepLongestFirst) {
  Node* conv = Conv(x_, "conv");
  Node* bn = Bn(conv, "bn");
  Node* relu = Relu(bn, "relu");
  ASSERT_TRUE(graph().SetOutput(relu).ok());
  const FusionRule bn_relu = Rule("bn_relu", "(ReLU, BatchNorm2d)");
  const FusionRule conv_bn_relu = Rule("conv_bn_relu", "(ReLU, (BatchNorm2d, Conv2d))");

  std::vector<PatternMatch> by_default = Find({bn_relu, conv_bn_relu});
  ASSERT_EQ(by_default.size(), 1u);
  EXPECT_EQ(by_default[0].rule->name, "conv_bn_relu");
  EXPECT_EQ(BoundNames(by_default[0]), (Names{"relu", "bn", "conv"}));

  FusionRule preferred = bn_relu;
  preferred.benefit = 1;
  std::vector<PatternMatch> flipped = Find({conv_bn_relu, preferred});
  ASSERT_EQ(flipped.size(), 1u);
  EXPECT_EQ(flipped[0].rule->name, "bn_relu");
  EXPECT_EQ(BoundNames(flipped[0]), (Names{"relu", "bn"}));

  FusionRule also_preferred = conv_bn_relu;
  also_preferred.benefit = 1;
  std::vector<PatternMatch> tie = Find({preferred, also_preferred});
  ASSERT_EQ(tie.size(), 1u);
  EXPECT_EQ(tie[0].rule->name, "conv_bn_relu");
}

// Benefit orders rules at one node; a rule starting nearer the output still claims first
// (matcher.h rule 2).
TEST_F(MatcherTest, BenefitDoesNotReorderTheScan) {
  Node* conv = Conv(x_, "conv");
  Node* bn = Bn(conv, "bn");
  Node* relu = Relu(bn, "relu");
  ASSERT_TRUE(graph().SetOutput(relu).ok());
  FusionRule conv_bn = Rule("conv_bn", "(BatchNorm2d, Conv2d)");
  conv_bn.benefit = 5;
  std::vector<PatternMatch> matches = Find({conv_bn, Rule("bn_relu", "(ReLU, BatchNorm2d)")});
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_EQ(matches[0].rule->name, "bn_relu");
}

}  // namespace
}  // namespace fuselage
