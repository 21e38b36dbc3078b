// Multi-output patterns (issue 21 item 3; patterns/pattern.h `-> $name`, patterns/matcher.h
// rules 3 and 11): parsing, matching, the rejections and their explanations, and fusion into
// one fuselage.FusedSubgraph module whose outputs its readers take through getitem, run by
// the interpreter against the unfused graph (the same kernels run, so the values are equal
// bit for bit). Both forms: the results of a chunk (GLU) and an inner node also read
// outside (a conv-bn-relu whose batch norm feeds a residual add).
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "graph/graph_module.h"
#include "patterns/fuse.h"
#include "patterns/fusion_rule.h"
#include "patterns/matcher.h"
#include "patterns/pattern.h"
#include "runtime/builtin_kernels.h"
#include "runtime/interpreter.h"
#include "tests/patterns/test_models.h"

namespace fuselage {
namespace {

using ::fuselage::testing::BatchNorm2dModule;
using ::fuselage::testing::Conv2dModule;
using ::fuselage::testing::Must;
using ::fuselage::testing::PlainModule;
using ::fuselage::testing::RandomTensor;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

template <typename T>
T Ok(absl::StatusOr<T> value) {
  EXPECT_TRUE(value.ok()) << value.status();
  return std::move(value).value();
}

constexpr char kConvBnReluWithBn[] = "(ReLU, (BatchNorm2d@bn, Conv2d)) -> $bn";
// x.chunk(2, dim=-1) -> a * sigmoid(b), with b also declared an output.
constexpr char kGlu[] =
    "(mul, (operator.getitem, (torch.chunk{dim}@c, $x, 2), 0), "
    "(sigmoid, (operator.getitem@b, $c, 1)))";

FusionRule SubgraphRule(const char* name, absl::string_view pattern) {
  return Ok(MakeFusionRule(name, pattern, PatternFormat::kComplex, kFusedSubgraphType,
                           FuserKind::kWrapInSequence));
}

TEST(MultiOutputPatternTest, DeclaredOutputsParseAndPrint) {
  Pattern p = Ok(Pattern::Parse(kConvBnReluWithBn, PatternFormat::kComplex));
  EXPECT_TRUE(p.has_declared_outputs());
  EXPECT_THAT(p.output_positions(), ElementsAre(0, 1));
  EXPECT_EQ(p.position(1).output_index, 1);
  EXPECT_EQ(p.position(2).output_index, -1);
  EXPECT_EQ(p.ToString(), kConvBnReluWithBn);
  Pattern two = Ok(Pattern::Parse("(ReLU, (BatchNorm2d@bn, Conv2d@c)) -> $c, $bn",
                                  PatternFormat::kComplex));
  EXPECT_THAT(two.output_positions(), ElementsAre(0, 2, 1));  // in the order declared
  // A pattern without `->` keeps its one output.
  Pattern plain = Ok(Pattern::Parse("(ReLU, (BatchNorm2d@bn, Conv2d))", PatternFormat::kComplex));
  EXPECT_FALSE(plain.has_declared_outputs());
  EXPECT_THAT(plain.output_positions(), ElementsAre(0));
  EXPECT_EQ(plain.position(1).output_index, -1);
}

TEST(MultiOutputPatternTest, BadDeclarationsAreErrors) {
  const auto error = [](const char* text) {
    return std::string(Pattern::Parse(text, PatternFormat::kComplex).status().message());
  };
  EXPECT_THAT(error("(ReLU, (BatchNorm2d, Conv2d)) -> $bn"), HasSubstr("names no position"));
  EXPECT_THAT(error("(add, (ReLU, $x), $x) -> $x"), HasSubstr("is a wildcard"));
  EXPECT_THAT(error("(ReLU@r, Conv2d) -> $r"), HasSubstr("always output 0"));
  EXPECT_THAT(error("(ReLU, Conv2d@c) -> $c, $c"), HasSubstr("declared twice"));
  EXPECT_THAT(error("(ReLU, Conv2d@c) -> c"), HasSubstr("expected '$name'"));
  EXPECT_THAT(error("(ReLU, Conv2d@c) ->"), HasSubstr("expected '$name'"));
}

TEST(MultiOutputPatternTest, OnlyTheFusedSubgraphTypeTakesDeclaredOutputs) {
  absl::StatusOr<FusionRule> rule = MakeFusionRule(
      "r", kConvBnReluWithBn, PatternFormat::kComplex, "nni.ConvReLU2d",
      FuserKind::kFoldBatchNormThenWrap);
  ASSERT_FALSE(rule.ok());
  EXPECT_THAT(rule.status().message(), HasSubstr(kFusedSubgraphType));
}

class MultiOutputTest : public ::testing::Test {
 protected:
  Graph& graph() { return gm_.graph(); }
  Node* Call(Node* in, const char* path, std::unique_ptr<Module> module) {
    EXPECT_TRUE(gm_.SetModule(path, std::move(module)).ok());
    return Must(graph().AddCallModule(path, {in}, {}, path));
  }

  // x -> conv -> bn -> relu; out = (relu, add(bn, x)): the batch norm is read by the relu
  // (in the pattern) and by the residual add (outside it), which comes before the relu
  // when `reader_first`.
  void BuildConvBnReluWithResidual(bool reader_first) {
    x_ = Must(graph().AddPlaceholder("x"));
    bn_ = Call(Call(x_, "conv", Conv2dModule(rng_, 4, 4, 3)), "bn", BatchNorm2dModule(rng_, 4));
    if (reader_first) add_ = Must(graph().AddCallFunction("operator.add", {bn_, x_}, {}, "add"));
    relu_ = Call(bn_, "relu", PlainModule("nn.ReLU"));
    if (!reader_first) add_ = Must(graph().AddCallFunction("operator.add", {bn_, x_}, {}, "add"));
    Must(graph().SetOutput(Argument::Tuple({relu_, add_})));
    input_ = RandomTensor(rng_, {2, 4, 6, 6});
  }

  // x -> chunk(x, 2, dim=-1) -> a, b; out = (a * sigmoid(b), b + 1) when `b_read_outside`,
  // else a * sigmoid(b).
  void BuildGlu(bool b_read_outside) {
    x_ = Must(graph().AddPlaceholder("x"));
    Node* chunk = Must(graph().AddCallFunction("torch.chunk", {x_, Argument::Int(2)},
                                               {{Symbol::Intern("dim"), Argument::Int(-1)}},
                                               "chunk"));
    Node* a = Must(graph().AddCallFunction("operator.getitem", {chunk, Argument::Int(0)}, {}, "a"));
    Node* b = Must(graph().AddCallFunction("operator.getitem", {chunk, Argument::Int(1)}, {}, "b"));
    Node* sig = Must(graph().AddCallFunction("torch.sigmoid", {b}, {}, "sig"));
    Node* mul = Must(graph().AddCallFunction("operator.mul", {a, sig}, {}, "mul"));
    if (b_read_outside) {
      add_ = Must(graph().AddCallFunction("operator.add", {b, Argument::Float(1.0)}, {}, "add"));
      Must(graph().SetOutput(Argument::Tuple({mul, add_})));
    } else {
      Must(graph().SetOutput(mul));
    }
    input_ = RandomTensor(rng_, {3, 8});
  }

  std::string Explain(std::vector<FusionRule> rules) {
    PatternMatcher matcher = Ok(PatternMatcher::Create(std::move(rules)));
    return matcher.Explain(gm_).ToString();
  }

  // Fuses with `rules`, checks the graph, and that the fused graph computes what the
  // unfused one did, bit for bit. Returns the number fused.
  int FuseAndCompare(std::vector<FusionRule> rules) {
    std::unique_ptr<KernelRegistry> kernels = Ok(BuiltinKernels());
    EXPECT_TRUE(gm_.Verify().ok()) << gm_.Verify();
    const std::vector<Value> before = Ok(::fuselage::Run(gm_, {Value(input_)}, *kernels));
    PatternMatcher matcher = Ok(PatternMatcher::Create(std::move(rules)));
    const int fused = Ok(FusePatterns(gm_, matcher));
    EXPECT_TRUE(gm_.Verify().ok()) << gm_.Verify();
    const std::vector<Value> after = Ok(::fuselage::Run(gm_, {Value(input_)}, *kernels));
    EXPECT_EQ(before.size(), after.size());
    for (size_t i = 0; i < before.size() && i < after.size(); ++i) {
      const Tensor& ref = before[i].as_tensor();
      const Tensor& got = after[i].as_tensor();
      EXPECT_EQ(ref.shape(), got.shape()) << "output " << i;
      if (ref.shape() != got.shape()) continue;
      EXPECT_EQ(std::memcmp(ref.data<float>(), got.data<float>(), ref.numel() * sizeof(float)), 0)
          << "output " << i << " differs";
    }
    return fused;
  }

  // The fused node (the one call_module of fuselage.FusedSubgraph).
  Node* FusedNode() {
    Node* found = nullptr;
    for (Node* n = graph().first(); n != nullptr; n = n->next()) {
      if (n->op() == OpKind::kCallModule &&
          gm_.FindModule(n->target())->type() == Symbol::Intern(kFusedSubgraphType)) {
        EXPECT_EQ(found, nullptr) << "two fused subgraphs";
        found = n;
      }
    }
    return found;
  }

  std::mt19937 rng_{21};
  GraphModule gm_;
  Tensor input_;
  Node* x_ = nullptr;
  Node* bn_ = nullptr;
  Node* relu_ = nullptr;
  Node* add_ = nullptr;
};

TEST_F(MultiOutputTest, UndeclaredInnerNodeReadOutsideIsRejectedAndExplained) {
  BuildConvBnReluWithResidual(false);
  const std::string report =
      Explain({SubgraphRule("conv_bn_relu", "(ReLU, (BatchNorm2d, Conv2d))")});
  EXPECT_THAT(report, HasSubstr("conv_bn_relu at relu: ReLU \u2192 arg 0 (bn): 2 users (relu, "
                                "add); inner nodes may have 1: add reads bn outside the match, "
                                "and position 0 is not a declared output"));
  EXPECT_THAT(report, HasSubstr("conv_bn_relu: 0"));
}

TEST_F(MultiOutputTest, InnerNodeDeclaredAsOutputMatchesAndFuses) {
  BuildConvBnReluWithResidual(false);
  std::vector<FusionRule> rules = {SubgraphRule("conv_bn_relu_bn", kConvBnReluWithBn)};
  PatternMatcher matcher = Ok(PatternMatcher::Create(rules));
  const std::vector<PatternMatch> matches = matcher.FindMatches(gm_);
  ASSERT_EQ(matches.size(), 1u);
  // The match carries both outputs: the relu (0) and the batch norm (1).
  ASSERT_EQ(matches[0].num_outputs(), 2u);
  EXPECT_EQ(matches[0].output(0), relu_);
  EXPECT_EQ(matches[0].output(1), bn_);

  EXPECT_EQ(FuseAndCompare(rules), 1);
  Node* fused = FusedNode();
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(fused->num_args(), 1u);
  EXPECT_EQ(fused->arg(0).as_node(), x_);
  // Each output read outside has its getitem; the add reads output 1.
  ASSERT_EQ(fused->num_users(), 2u);
  for (const Node* user : fused->users()) {
    EXPECT_EQ(user->target(), Symbol::Intern("operator.getitem"));
  }
  EXPECT_EQ(add_->arg(0).as_node()->target(), Symbol::Intern("operator.getitem"));
  EXPECT_EQ(add_->arg(0).as_node()->arg(1).as_int(), 1);
  const Module* module = gm_.FindModule(fused->target());
  EXPECT_EQ(module->type(), Symbol::Intern(kFusedSubgraphType));
  EXPECT_NE(module->FindChild("0"), nullptr);  // conv
  EXPECT_NE(module->FindChild("2"), nullptr);  // relu
  EXPECT_EQ(module->FindChild("3"), nullptr);
}

TEST_F(MultiOutputTest, FusedNodeGoesBeforeAnOutsideReaderThatPrecedesTheOutermost) {
  BuildConvBnReluWithResidual(true);  // conv, bn, add, relu
  EXPECT_EQ(FuseAndCompare({SubgraphRule("conv_bn_relu_bn", kConvBnReluWithBn)}), 1);
  Node* fused = FusedNode();
  ASSERT_NE(fused, nullptr);
  EXPECT_TRUE(graph().Precedes(fused, add_));
}

TEST_F(MultiOutputTest, ReaderBeforeAnInputOfTheMatchIsRejected) {
  // conv -> bn; u = relu_out(bn); y = neg(u); add(bn, y): one fused node would have to
  // come before u (which reads bn) and after y (which it reads).
  Node* x = Must(graph().AddPlaceholder("x"));
  Node* bn = Call(Call(x, "conv", Conv2dModule(rng_, 4, 4, 3)), "bn", BatchNorm2dModule(rng_, 4));
  Node* u = Call(bn, "u", PlainModule("nn.ReLU"));
  Node* y = Must(graph().AddCallFunction("torch.neg", {u}, {}, "y"));
  Node* add = Must(graph().AddCallFunction("operator.add", {bn, y}, {}, "add"));
  Must(graph().SetOutput(add));
  std::vector<FusionRule> rules = {
      SubgraphRule("conv_bn_add", "(add, (BatchNorm2d@bn, Conv2d), MatchAllNode) -> $bn")};
  EXPECT_THAT(Explain(rules),
              HasSubstr("declared output $bn (bn) is read outside the match by u, which comes "
                        "before y, an input of the match (add reads it)"));
  PatternMatcher matcher = Ok(PatternMatcher::Create(rules));
  EXPECT_TRUE(matcher.FindMatches(gm_).empty());
}

TEST_F(MultiOutputTest, GluChunkFusesIntoOneSubgraph) {
  BuildGlu(false);
  EXPECT_EQ(FuseAndCompare({SubgraphRule("glu", kGlu)}), 1);
  Node* fused = FusedNode();
  ASSERT_NE(fused, nullptr);
  // One input (x); the chunk's 2 and dim=-1 stay in the steps. One output: no getitem.
  ASSERT_EQ(fused->num_args(), 1u);
  EXPECT_EQ(fused->arg(0).as_node(), x_);
  EXPECT_EQ(graph().size(), 3u);  // x, fused, output
}

TEST_F(MultiOutputTest, GluWithAChunkResultReadOutside) {
  BuildGlu(true);
  // Undeclared: b's second user (the add) is outside, so there is no match.
  EXPECT_THAT(Explain({SubgraphRule("glu", kGlu)}),
              HasSubstr("add reads b outside the match, and position 1.0 is not a declared output"));
  // Declared: one fused node with two outputs, the add reading output 1.
  EXPECT_EQ(FuseAndCompare({SubgraphRule("glu_b", absl::StrCat(kGlu, " -> $b"))}), 1);
  Node* fused = FusedNode();
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(add_->arg(0).as_node()->arg(0).as_node(), fused);
  EXPECT_EQ(add_->arg(0).as_node()->arg(1).as_int(), 1);
}

TEST_F(MultiOutputTest, ADeclaredOutputIsNotClaimedTwice) {
  // conv -> bn -> relu, and a second relu2(bn): conv-bn-relu -> $bn claims bn; a rule
  // (ReLU, BatchNorm2d) at relu2 must not take bn again.
  x_ = Must(graph().AddPlaceholder("x"));
  bn_ = Call(Call(x_, "conv", Conv2dModule(rng_, 4, 4, 3)), "bn", BatchNorm2dModule(rng_, 4));
  relu_ = Call(bn_, "relu", PlainModule("nn.ReLU"));
  Node* relu2 = Call(bn_, "relu2", PlainModule("nn.ReLU"));
  Must(graph().SetOutput(Argument::Tuple({relu_, relu2})));
  input_ = RandomTensor(rng_, {1, 4, 5, 5});
  std::vector<FusionRule> rules = {
      SubgraphRule("bn_relu_out", "(ReLU, (BatchNorm2d@b, Conv2d)) -> $b"),
      SubgraphRule("bn_relu2", "(ReLU, BatchNorm2d@b) -> $b")};
  PatternMatcher matcher = Ok(PatternMatcher::Create(rules));
  const std::vector<PatternMatch> matches = matcher.FindMatches(gm_);
  // The scan meets relu2 first (from the output backwards): bn_relu2 takes bn there, and
  // at relu, bn is a declared output of that match, so neither rule takes it again.
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_EQ(matches[0].outermost(), relu2);
  EXPECT_THAT(matcher.Explain(gm_).ToString(), HasSubstr("a declared output of another match"));
  EXPECT_EQ(FuseAndCompare(rules), 1);
}

TEST_F(MultiOutputTest, ChainedMultiOutputBlocksBothFuse) {
  // conv1 -> bn1 -> relu1, with bn1 also read by conv2 -> bn2 -> relu2, and bn2 read by the
  // output: both blocks are conv-bn-relu -> $bn. relu2's block is found first; bn1 is read
  // by conv2, an op node of that match but not a declared output of it, so relu1's block
  // matches too, and the second fused node reads the first's output 1.
  x_ = Must(graph().AddPlaceholder("x"));
  Node* bn1 = Call(Call(x_, "conv1", Conv2dModule(rng_, 4, 4, 3)), "bn1", BatchNorm2dModule(rng_, 4));
  Node* relu1 = Call(bn1, "relu1", PlainModule("nn.ReLU"));
  Node* bn2 = Call(Call(bn1, "conv2", Conv2dModule(rng_, 4, 4, 3)), "bn2", BatchNorm2dModule(rng_, 4));
  Node* relu2 = Call(bn2, "relu2", PlainModule("nn.ReLU"));
  Must(graph().SetOutput(Argument::Tuple({relu1, relu2, bn2})));
  input_ = RandomTensor(rng_, {1, 4, 5, 5});
  std::vector<FusionRule> rules = {SubgraphRule("conv_bn_relu_bn", kConvBnReluWithBn)};
  PatternMatcher matcher = Ok(PatternMatcher::Create(rules));
  ASSERT_EQ(matcher.FindMatches(gm_).size(), 2u);
  EXPECT_EQ(FuseAndCompare(rules), 2);
}

TEST_F(MultiOutputTest, AMultiOutputMatchReadingAClaimedOutputIsNotTaken) {
  // x, conv, bn, s = sigmoid(bn), v = mul(s, x), w = relu(s), relu(bn): the conv block
  // (found first) claims bn as its declared output; the mul block's sigmoid reads bn, so the
  // mul block (itself multi-output: s is read by w) is not taken (matcher.h rule 11).
  x_ = Must(graph().AddPlaceholder("x"));
  bn_ = Call(Call(x_, "conv", Conv2dModule(rng_, 4, 4, 3)), "bn", BatchNorm2dModule(rng_, 4));
  Node* s = Must(graph().AddCallFunction("torch.sigmoid", {bn_}, {}, "s"));
  Node* v = Must(graph().AddCallFunction("operator.mul", {s, x_}, {}, "v"));
  Node* w = Must(graph().AddCallFunction("torch.relu", {s}, {}, "w"));
  relu_ = Call(bn_, "relu", PlainModule("nn.ReLU"));
  Must(graph().SetOutput(Argument::Tuple({relu_, v, w})));
  input_ = RandomTensor(rng_, {1, 4, 5, 5});
  std::vector<FusionRule> rules = {
      SubgraphRule("conv_bn_relu_bn", kConvBnReluWithBn),
      SubgraphRule("sigmoid_mul", "(mul, (sigmoid@s, MatchAllNode), MatchAllNode) -> $s")};
  PatternMatcher matcher = Ok(PatternMatcher::Create(rules));
  const std::vector<PatternMatch> matches = matcher.FindMatches(gm_);
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_EQ(matches[0].outermost(), relu_);
  EXPECT_THAT(matcher.Explain(gm_).ToString(),
              HasSubstr("sigmoid_mul at v: mul (v): s reads bn, a declared output of another "
                        "multi-output match"));
  EXPECT_EQ(FuseAndCompare(rules), 1);
}

// The kernel refuses a malformed fused subgraph with an error naming the step, not an
// abort: here step 0 reads step 1, which has not run.
TEST_F(MultiOutputTest, AMalformedFusedSubgraphIsAnErrorNamingTheStep) {
  auto module = std::make_unique<Module>(kFusedSubgraphType);
  const auto ref = [](const char* tag, int64_t i) {
    return Argument::Tuple({Argument::String(tag), Argument::Int(i)});
  };
  const auto step = [](Argument args) {
    return Argument::Tuple({Argument::String("call_function"), Argument::String("torch.sigmoid"),
                            std::move(args), Argument::List({})});
  };
  module->SetAttribute("steps", Argument::List({step(Argument::List({ref("step", 1)})),
                                                step(Argument::List({ref("input", 0)}))}));
  module->SetAttribute("outputs", Argument::List({Argument::Int(1)}));
  x_ = Must(graph().AddPlaceholder("x"));
  Must(graph().SetOutput(Call(x_, "fused", std::move(module))));
  ASSERT_TRUE(gm_.Verify().ok()) << gm_.Verify();
  std::unique_ptr<KernelRegistry> kernels = Ok(BuiltinKernels());
  absl::StatusOr<std::vector<Value>> out =
      ::fuselage::Run(gm_, {Value(RandomTensor(rng_, {2, 3}))}, *kernels);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(),
              HasSubstr("fuselage.FusedSubgraph: step 0: ref ('step', 1): expected an index "
                        "below 0"));
}

}  // namespace
}  // namespace fuselage
