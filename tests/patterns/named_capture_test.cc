// Named captures (`$x`, `Conv2d@c`), constant leaves and relations between positions
// (`add[shape == @c.shape]`): the grammar of patterns/pattern.h and rules 3, 10 and 11 of
// patterns/matcher.h, each checked on a graph built by hand.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "patterns/fusion_rule.h"
#include "patterns/matcher.h"
#include "patterns/pattern.h"
#include "tests/patterns/test_models.h"

namespace fuselage {
namespace {

using ::fuselage::testing::Must;
using ::fuselage::testing::PlainModule;
using ::testing::HasSubstr;

template <typename T>
T Ok(absl::StatusOr<T> value) {
  EXPECT_TRUE(value.ok()) << value.status();
  return std::move(value).value();
}

constexpr char kSilu[] = "(mul, $x, (torch.sigmoid | F.sigmoid | method:sigmoid | Sigmoid, $x))";

TEST(NamedCapturePatternTest, LaterOccurrencesPointAtTheFirst) {
  Pattern p = Ok(Pattern::Parse(kSilu, PatternFormat::kComplex));
  ASSERT_EQ(p.size(), 4);
  EXPECT_TRUE(p.position(1).match_all);
  EXPECT_EQ(p.position(1).same_as, -1);
  EXPECT_EQ(p.position(3).same_as, 1);
  // The repeated $x is the same input, not a second one.
  EXPECT_TRUE(p.default_extra_input_positions().empty());
  EXPECT_EQ(p.ToString(), kSilu);
}

TEST(NamedCapturePatternTest, OpPositionNameAndReference) {
  Pattern p = Ok(Pattern::Parse("(add, Conv2d@c, (ReLU, $c))", PatternFormat::kComplex));
  EXPECT_EQ(p.position(1).capture, "c");
  EXPECT_TRUE(p.position(1).referenced);
  EXPECT_EQ(p.position(3).same_as, 1);
  EXPECT_EQ(p.ToString(), "(add, Conv2d@c, (ReLU, $c))");
}

TEST(NamedCapturePatternTest, ConstantLeaves) {
  Pattern p = Ok(Pattern::Parse("(operator.truediv, (mul, $x, (F.relu6, (add, $x, 3))), 6.0)",
                                PatternFormat::kComplex));
  ASSERT_EQ(p.size(), 8);
  ASSERT_TRUE(p.position(6).constant.has_value());
  EXPECT_EQ(p.position(6).constant->as_int(), 3);
  ASSERT_TRUE(p.position(7).constant.has_value());
  EXPECT_EQ(p.position(7).constant->as_float(), 6.0);
  EXPECT_TRUE(p.default_extra_input_positions().empty());
  // A constant is an arg, never the op of a tuple.
  EXPECT_FALSE(Pattern::Parse("(3, ReLU)", PatternFormat::kComplex).ok());
}

TEST(NamedCapturePatternTest, Errors) {
  // An op position named twice.
  EXPECT_THAT(Pattern::Parse("(add, Conv2d@c, ReLU@c)", PatternFormat::kComplex)
                  .status().message(),
              HasSubstr("already used"));
  // A reference before the op position it names.
  EXPECT_THAT(Pattern::Parse("(add, $c, Conv2d@c)", PatternFormat::kComplex).status().message(),
              HasSubstr("before (in preorder)"));
  // A relation to a name that is no op position.
  EXPECT_THAT(Pattern::Parse("(add[shape == @z.shape], $z, ReLU)", PatternFormat::kComplex)
                  .status().message(),
              HasSubstr("not a named op position"));
  EXPECT_FALSE(Pattern::Parse("(add, $, ReLU)", PatternFormat::kComplex).ok());
  EXPECT_FALSE(Pattern::Parse("(ReLU, BatchNorm2d?@b)", PatternFormat::kComplex).ok());
}

class NamedCaptureMatchTest : public ::testing::Test {
 protected:
  void SetUp() override { x_ = Must(graph().AddPlaceholder("x")); }
  Graph& graph() { return gm_.graph(); }

  Node* Module(Node* in, const char* path, const char* type) {
    EXPECT_TRUE(gm_.SetModule(path, PlainModule(type)).ok());
    return Must(graph().AddCallModule(path, {in}, {}, path));
  }

  std::vector<PatternMatch> Find(const char* pattern) {
    FusionRule rule = Ok(MakeFusionRule("r", pattern, PatternFormat::kComplex, "nn.SiLU",
                                          FuserKind::kWrapInSequence));
    matcher_ = std::make_unique<PatternMatcher>(Ok(PatternMatcher::Create({rule})));
    return matcher_->FindMatches(gm_);
  }
  std::string Explain() { return matcher_->Explain(gm_).ToString(); }

  GraphModule gm_;
  Node* x_ = nullptr;
  std::unique_ptr<PatternMatcher> matcher_;
};

// x * sigmoid(x) in each spelling of mul and sigmoid, args in either order.
TEST_F(NamedCaptureMatchTest, SiluInEverySpelling) {
  std::vector<Node*> outs;
  const std::vector<std::pair<OpKind, const char*>> muls = {
      {OpKind::kCallFunction, "operator.mul"}, {OpKind::kCallFunction, "torch.mul"},
      {OpKind::kCallMethod, "mul"}};
  int k = 0;
  for (int s = 0; s < 4; ++s) {
    for (const auto& [op, mul] : muls) {
      Node* sig = nullptr;
      if (s == 0) sig = Must(graph().AddCallFunction("torch.sigmoid", {x_}));
      if (s == 1) sig = Must(graph().AddCallFunction("torch.nn.functional.sigmoid", {x_}));
      if (s == 2) sig = Must(graph().AddCallMethod("sigmoid", {x_}));
      if (s == 3) {
        const std::string path = absl::StrCat("sig", k);
        sig = Module(x_, path.c_str(), "nn.Sigmoid");
      }
      NodeArgs args = (k % 2 == 0) ? NodeArgs{x_, sig} : NodeArgs{sig, x_};
      outs.push_back(op == OpKind::kCallMethod ? Must(graph().AddCallMethod(mul, args))
                                               : Must(graph().AddCallFunction(mul, args)));
      ++k;
    }
  }
  std::vector<Argument> items(outs.begin(), outs.end());
  Must(graph().SetOutput(Argument::Tuple(items)));
  std::vector<PatternMatch> matches = Find(kSilu);
  ASSERT_EQ(matches.size(), 12u);
  for (const PatternMatch& m : matches) {
    EXPECT_EQ(m.node_at(1), x_);
    EXPECT_EQ(m.node_at(3), x_);
    EXPECT_EQ(m.node_at(2)->args()[0].as_node(), x_);
  }
}

TEST_F(NamedCaptureMatchTest, DifferentNodesForOneNameDoNotMatch) {
  Node* y = Must(graph().AddPlaceholder("y"));
  Node* sig = Must(graph().AddCallFunction("torch.sigmoid", {y}));
  Node* mul = Must(graph().AddCallFunction("operator.mul", {x_, sig}));
  Must(graph().SetOutput(mul));
  EXPECT_TRUE(Find(kSilu).empty());
  EXPECT_THAT(Explain(), HasSubstr("must be the same as"));
}

// Rule 3: no fusion where the sigmoid's result is also read outside the match, and
// explain names the node and its outside user.
TEST_F(NamedCaptureMatchTest, SigmoidWithOutsideUserDoesNotMatch) {
  Node* sig = Must(graph().AddCallFunction("torch.sigmoid", {x_}, {}, "sig"));
  Node* mul = Must(graph().AddCallFunction("operator.mul", {x_, sig}, {}, "mul"));
  Node* other = Must(graph().AddCallFunction("operator.add", {sig, Argument::Int(1)}, {}, "other"));
  Must(graph().SetOutput(Argument::Tuple({mul, other})));
  EXPECT_TRUE(Find(kSilu).empty());
  EXPECT_THAT(Explain(), HasSubstr("mul \u2192 arg 1 (sig): 2 users (mul, other); inner nodes may have 1"));
}

// A named op position read by two positions: its two users are both in the match.
TEST_F(NamedCaptureMatchTest, ReferencedOpPositionMayHaveUsersInsideTheMatchOnly) {
  EXPECT_TRUE(gm_.SetModule("conv", PlainModule("nn.Conv2d")).ok());
  Node* conv = Must(graph().AddCallModule("conv", {x_}, {}, "conv"));
  Node* relu = Module(conv, "relu", "nn.ReLU");
  Node* add = Must(graph().AddCallFunction("operator.add", {conv, relu}, {}, "add"));
  Must(graph().SetOutput(add));
  std::vector<PatternMatch> matches = Find("(add, Conv2d@c, (ReLU, $c))");
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_EQ(matches[0].node_at(1), conv);
  EXPECT_EQ(matches[0].node_at(3), conv);
}

TEST_F(NamedCaptureMatchTest, ReferencedOpPositionWithOutsideUserDoesNotMatch) {
  EXPECT_TRUE(gm_.SetModule("conv", PlainModule("nn.Conv2d")).ok());
  Node* conv = Must(graph().AddCallModule("conv", {x_}, {}, "conv"));
  Node* relu = Module(conv, "relu", "nn.ReLU");
  Node* add = Must(graph().AddCallFunction("operator.add", {conv, relu}, {}, "add"));
  Node* outside = Must(graph().AddCallMethod("neg", {conv}, {}, "outside"));
  Must(graph().SetOutput(Argument::Tuple({add, outside})));
  EXPECT_TRUE(Find("(add, Conv2d@c, (ReLU, $c))").empty());
  EXPECT_THAT(Explain(), HasSubstr("inner node conv has a user outside the match (outside)"));
}

TEST_F(NamedCaptureMatchTest, ConstantLeafMatchesOnlyThatConstant) {
  Node* add3 = Must(graph().AddCallFunction("operator.add", {x_, Argument::Int(3)}, {}, "a3"));
  Node* relu = Must(graph().AddCallFunction("torch.nn.functional.relu6", {add3}, {}, "r"));
  Node* add2 = Must(graph().AddCallFunction("operator.add", {x_, Argument::Float(2.0)}, {}, "a2"));
  Node* relu2 = Must(graph().AddCallFunction("torch.nn.functional.relu6", {add2}, {}, "r2"));
  Must(graph().SetOutput(Argument::Tuple({relu, relu2})));
  std::vector<PatternMatch> matches = Find("(F.relu6, (add, $x, 3.0))");
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_EQ(matches[0].outermost(), relu);
}

// Hardswish written out: x * relu6(x + 3) / 6.
TEST_F(NamedCaptureMatchTest, HardswishWrittenOut) {
  Node* add = Must(graph().AddCallFunction("operator.add", {x_, Argument::Int(3)}));
  Node* relu6 = Must(graph().AddCallFunction("torch.nn.functional.relu6", {add}));
  Node* mul = Must(graph().AddCallFunction("operator.mul", {x_, relu6}));
  Node* div = Must(graph().AddCallFunction("operator.truediv", {mul, Argument::Int(6)}));
  Must(graph().SetOutput(div));
  std::vector<PatternMatch> matches = Find(
      "(operator.truediv | torch.div | method:div, (mul, $x, (F.relu6 | ReLU6 | F.hardtanh, "
      "(add, $x, 3))), 6)");
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_EQ(matches[0].outermost(), div);
}

// Relations (rule 10): `shape == @c.shape` compares with the node bound at `Conv2d@c`.
TEST_F(NamedCaptureMatchTest, RelationBetweenPositions) {
  EXPECT_TRUE(gm_.SetModule("conv", PlainModule("nn.Conv2d")).ok());
  Node* conv = Must(graph().AddCallModule("conv", {x_}, {}, "conv"));
  Node* add = Must(graph().AddCallFunction("operator.add", {conv, x_}, {}, "add"));
  Must(graph().SetOutput(add));
  const Argument shape = Argument::Tuple({Argument::Int(1), Argument::Int(3)});
  ASSERT_TRUE(graph().SetMeta(conv, "shape", shape).ok());
  ASSERT_TRUE(graph().SetMeta(add, "shape", shape).ok());
  EXPECT_EQ(Find("(add[shape == @c.shape], Conv2d@c, MatchAllNode)").size(), 1u);
  EXPECT_TRUE(Find("(add[shape != @c.shape], Conv2d@c, MatchAllNode)").empty());
  EXPECT_THAT(Explain(), HasSubstr("predicate 'shape != @c.shape' is false"));
  ASSERT_TRUE(
      graph().SetMeta(add, "shape", Argument::Tuple({Argument::Int(1), Argument::Int(4)})).ok());
  EXPECT_TRUE(Find("(add[shape == @c.shape], Conv2d@c, MatchAllNode)").empty());
}

}  // namespace
}  // namespace fuselage
