// The pattern tree and its text syntax: both formats, leaf names, positions and paths,
// default root / extra inputs, and clear errors.
#include "patterns/pattern.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fuselage {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

OpRef Fn(const char* target) { return {OpKind::kCallFunction, Symbol::Intern(target)}; }
OpRef Method(const char* target) { return {OpKind::kCallMethod, Symbol::Intern(target)}; }
OpRef Mod(const char* type) { return {OpKind::kCallModule, Symbol::Intern(type)}; }

TEST(PatternTest, ParsesComplexFormatOutermostFirst) {
  absl::StatusOr<Pattern> p =
      Pattern::Parse("(ReLU, (add, (BatchNorm2d, Conv2d), MatchAllNode))",
                     PatternFormat::kComplex);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->size(), 5);
  EXPECT_EQ(p->position(0).spelling, "ReLU");
  EXPECT_EQ(p->position(1).spelling, "add");
  EXPECT_EQ(p->position(2).spelling, "BatchNorm2d");
  EXPECT_EQ(p->position(3).spelling, "Conv2d");
  EXPECT_TRUE(p->position(4).match_all);
  EXPECT_THAT(p->position(0).args, ElementsAre(1));
  EXPECT_THAT(p->position(1).args, ElementsAre(2, 4));
  EXPECT_THAT(p->position(2).args, ElementsAre(3));
  EXPECT_TRUE(p->position(3).args.empty());
  EXPECT_TRUE(p->position(0).Matches(Mod("nn.ReLU")));
  EXPECT_TRUE(p->position(3).Matches(Mod("nn.Conv2d")));
  EXPECT_FALSE(p->position(3).Matches(Fn("nn.Conv2d")));
  EXPECT_EQ(p->position(4).parent, 1);
  EXPECT_EQ(p->position(4).arg_index, 1);
  EXPECT_EQ(p->ToString(), "(ReLU, (add, (BatchNorm2d, Conv2d), MatchAllNode))");
}

TEST(PatternTest, SequenceFormatIsAChainInExecutionOrder) {
  absl::StatusOr<Pattern> p =
      Pattern::Parse("(Conv2d, BatchNorm2d, ReLU)", PatternFormat::kSequence);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->ToString(), "(ReLU, (BatchNorm2d, Conv2d))");
  // The same flat tuple in the complex format reads outermost first.
  absl::StatusOr<Pattern> complex = Pattern::Parse("(Conv2d, ReLU)", PatternFormat::kComplex);
  ASSERT_TRUE(complex.ok()) << complex.status();
  EXPECT_TRUE(complex->outermost().Matches(Mod("nn.Conv2d")));
  EXPECT_TRUE(complex->position(1).Matches(Mod("nn.ReLU")));
}

TEST(PatternTest, SingleLeafIsAOneOpPatternInBothFormats) {
  for (PatternFormat f : {PatternFormat::kComplex, PatternFormat::kSequence}) {
    absl::StatusOr<Pattern> p = Pattern::Parse("  Linear ", f);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->size(), 1);
    EXPECT_TRUE(p->outermost().Matches(Mod("nn.Linear")));
  }
}

TEST(PatternTest, AddNamesEverySpellingAndIsCommutative) {
  absl::StatusOr<PatternPosition> add = ResolvePatternLeaf("add");
  ASSERT_TRUE(add.ok()) << add.status();
  EXPECT_TRUE(add->Matches(Fn("operator.add")));
  EXPECT_TRUE(add->Matches(Fn("torch.add")));
  EXPECT_TRUE(add->Matches(Method("add")));
  EXPECT_FALSE(add->Matches(Fn("torch.sub")));
  EXPECT_TRUE(add->commutative);
  absl::StatusOr<PatternPosition> mul = ResolvePatternLeaf("mul");
  ASSERT_TRUE(mul.ok());
  EXPECT_TRUE(mul->Matches(Fn("operator.mul")) && mul->Matches(Fn("torch.mul")) &&
              mul->Matches(Method("mul")));
  EXPECT_TRUE(mul->commutative);
  // A qualified name is exactly that function, still commutative.
  absl::StatusOr<PatternPosition> torch_add = ResolvePatternLeaf("torch.add");
  ASSERT_TRUE(torch_add.ok());
  EXPECT_TRUE(torch_add->Matches(Fn("torch.add")));
  EXPECT_FALSE(torch_add->Matches(Fn("operator.add")));
  EXPECT_TRUE(torch_add->commutative);
  // sub is not commutative.
  absl::StatusOr<PatternPosition> sub = ResolvePatternLeaf("torch.sub");
  ASSERT_TRUE(sub.ok());
  EXPECT_FALSE(sub->commutative);
}

// torch.export's spellings name the op's FX form with all its spellings: one pattern, never
// an enumeration of add / add_ / operator.add.
TEST(PatternTest, AtenNamesResolveToTheFxFormAndItsSpellings) {
  absl::StatusOr<PatternPosition> add = ResolvePatternLeaf("aten.add_.Tensor");
  ASSERT_TRUE(add.ok()) << add.status();
  EXPECT_TRUE(add->Matches(Fn("operator.add")));
  EXPECT_TRUE(add->Matches(Fn("torch.add")));
  EXPECT_TRUE(add->Matches(Method("add")));
  EXPECT_TRUE(add->commutative);
  EXPECT_EQ(add->spelling, "aten.add_.Tensor");
  absl::StatusOr<PatternPosition> relu = ResolvePatternLeaf("aten.relu_.default");
  ASSERT_TRUE(relu.ok()) << relu.status();
  EXPECT_TRUE(relu->Matches(Fn("torch.relu")) && relu->Matches(Fn("torch.nn.functional.relu")));
  absl::StatusOr<PatternPosition> conv = ResolvePatternLeaf("aten.conv2d.default");
  ASSERT_TRUE(conv.ok()) << conv.status();
  EXPECT_TRUE(conv->Matches(Fn("torch.nn.functional.conv2d")));
  EXPECT_FALSE(conv->Matches(Mod("nn.Conv2d")));
  absl::StatusOr<Pattern> chain =
      Pattern::Parse("(aten.relu_.default, (aten.add_.Tensor, aten.conv2d.default, "
                     "MatchAllNode))", PatternFormat::kComplex);
  ASSERT_TRUE(chain.ok()) << chain.status();
  EXPECT_EQ(chain->size(), 4);
  absl::StatusOr<PatternPosition> unknown = ResolvePatternLeaf("aten.cumsum.default");
  EXPECT_THAT(unknown.status().message(),
              HasSubstr("unknown pattern leaf 'aten.cumsum.default': not an aten op fuselage "
                        "reads"));
}

// ONNX's spellings name every form fuselage.from_onnx gives the op: a module for Conv and
// Relu, the module or function Clip becomes, the functions Add does.
TEST(PatternTest, OnnxNamesResolveToTheFormsFromOnnxGives) {
  absl::StatusOr<PatternPosition> conv = ResolvePatternLeaf("onnx.Conv");
  ASSERT_TRUE(conv.ok()) << conv.status();
  EXPECT_TRUE(conv->Matches(Mod("nn.Conv1d")) && conv->Matches(Mod("nn.Conv2d")) &&
              conv->Matches(Mod("nn.Conv3d")));
  EXPECT_FALSE(conv->Matches(Fn("torch.nn.functional.conv2d")));
  EXPECT_EQ(conv->spelling, "onnx.Conv");
  absl::StatusOr<PatternPosition> add = ResolvePatternLeaf("onnx.Add");
  ASSERT_TRUE(add.ok()) << add.status();
  EXPECT_TRUE(add->Matches(Fn("operator.add")) && add->Matches(Method("add")));
  EXPECT_TRUE(add->commutative);
  absl::StatusOr<PatternPosition> sub = ResolvePatternLeaf("onnx.Sub");
  ASSERT_TRUE(sub.ok()) << sub.status();
  EXPECT_FALSE(sub->commutative);
  absl::StatusOr<PatternPosition> clip = ResolvePatternLeaf("onnx.Clip");
  ASSERT_TRUE(clip.ok()) << clip.status();
  EXPECT_TRUE(clip->Matches(Mod("nn.ReLU6")) && clip->Matches(Mod("nn.Hardtanh")) &&
              clip->Matches(Fn("torch.clamp")));
  absl::StatusOr<PatternPosition> relu = ResolvePatternLeaf("onnx.Relu");
  ASSERT_TRUE(relu.ok()) << relu.status();
  EXPECT_TRUE(relu->Matches(Mod("nn.ReLU")) && relu->Matches(Fn("torch.relu")));
  EXPECT_FALSE(relu->Matches(Mod("nn.ReLU6")));
  absl::StatusOr<Pattern> chain = Pattern::Parse(
      "(onnx.Relu | onnx.Clip, (onnx.Add, onnx.Conv, MatchAllNode))", PatternFormat::kComplex);
  ASSERT_TRUE(chain.ok()) << chain.status();
  EXPECT_EQ(chain->size(), 4);
  absl::StatusOr<PatternPosition> unknown = ResolvePatternLeaf("onnx.Einsum");
  EXPECT_THAT(unknown.status().message(),
              HasSubstr("unknown pattern leaf 'onnx.Einsum': not an ONNX op fuselage reads"));
}

TEST(PatternTest, ReluSpellings) {
  absl::StatusOr<PatternPosition> relu = ResolvePatternLeaf("relu");
  ASSERT_TRUE(relu.ok());
  EXPECT_TRUE(relu->Matches(Fn("torch.relu")));
  EXPECT_TRUE(relu->Matches(Fn("torch.nn.functional.relu")));
  EXPECT_TRUE(relu->Matches(Method("relu")));
  EXPECT_FALSE(relu->Matches(Mod("nn.ReLU")));
  for (const char* spelling : {"F.relu", "torch.nn.functional.relu"}) {
    absl::StatusOr<PatternPosition> f = ResolvePatternLeaf(spelling);
    ASSERT_TRUE(f.ok()) << spelling;
    EXPECT_THAT(f->alternatives, ElementsAre(Fn("torch.nn.functional.relu"))) << spelling;
  }
  absl::StatusOr<PatternPosition> module = ResolvePatternLeaf("ReLU");
  ASSERT_TRUE(module.ok());
  EXPECT_THAT(module->alternatives, ElementsAre(Mod("nn.ReLU")));
}

TEST(PatternTest, QualifiedAndExplicitNames) {
  absl::StatusOr<PatternPosition> fused = ResolvePatternLeaf("nni.ConvReLU2d");
  ASSERT_TRUE(fused.ok());
  EXPECT_THAT(fused->alternatives, ElementsAre(Mod("nni.ConvReLU2d")));
  absl::StatusOr<PatternPosition> method = ResolvePatternLeaf("method:flatten");
  ASSERT_TRUE(method.ok());
  EXPECT_THAT(method->alternatives, ElementsAre(Method("flatten")));
  absl::StatusOr<PatternPosition> module = ResolvePatternLeaf("module:MyBlock");
  ASSERT_TRUE(module.ok());
  EXPECT_THAT(module->alternatives, ElementsAre(Mod("MyBlock")));
  absl::StatusOr<PatternPosition> op = ResolvePatternLeaf("_operator.add");
  ASSERT_TRUE(op.ok());
  EXPECT_THAT(op->alternatives, ElementsAre(Fn("operator.add")));
}

TEST(PatternTest, KwargAllowances) {
  absl::StatusOr<Pattern> p = Pattern::Parse("(add{alpha=2, out}, Conv2d, MatchAllNode)",
                                             PatternFormat::kComplex);
  ASSERT_TRUE(p.ok()) << p.status();
  const std::vector<AllowedKwarg>& kw = p->outermost().allowed_kwargs;
  // Built-in alpha=1 first, then the two the author added.
  ASSERT_EQ(kw.size(), 3u);
  EXPECT_EQ(kw[0].key.name(), "alpha");
  EXPECT_EQ(*kw[0].value, Argument::Int(1));
  EXPECT_EQ(kw[1].key.name(), "alpha");
  EXPECT_EQ(*kw[1].value, Argument::Int(2));
  EXPECT_EQ(kw[2].key.name(), "out");
  EXPECT_FALSE(kw[2].value.has_value());
  EXPECT_EQ(p->ToString(), "(add{alpha=2, out}, Conv2d, MatchAllNode)");
}

TEST(PatternTest, StringKwargsPrintWithAQuoteTheyDoNotContain) {
  // Found by pattern_parser_fuzz: a double-quoted value holding a single quote printed
  // inside single quotes and did not parse back.
  absl::StatusOr<Pattern> p =
      Pattern::Parse(R"((ReLU{mode="it's"}, Conv2d))", PatternFormat::kComplex);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->ToString(), R"((ReLU{mode="it's"}, Conv2d))");
  absl::StatusOr<Pattern> reparsed = Pattern::Parse(p->ToString(), PatternFormat::kComplex);
  ASSERT_TRUE(reparsed.ok()) << reparsed.status();
  EXPECT_EQ(reparsed->ToString(), p->ToString());
  absl::StatusOr<Pattern> single =
      Pattern::Parse(R"((ReLU{mode='a"b'}, Conv2d))", PatternFormat::kComplex);
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ(single->ToString(), R"((ReLU{mode='a"b'}, Conv2d))");
}

TEST(PatternTest, PathsAndDefaultGetters) {
  absl::StatusOr<Pattern> p =
      Pattern::Parse("(ReLU, (add, (BatchNorm2d, Conv2d), MatchAllNode))",
                     PatternFormat::kComplex);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p->PositionAtPath(""), 0);
  EXPECT_EQ(*p->PositionAtPath("0"), 1);
  EXPECT_EQ(*p->PositionAtPath("0.0.0"), 3);
  EXPECT_EQ(*p->PositionAtPath("0.1"), 4);
  EXPECT_EQ(p->PathOf(3), "0.0.0");
  EXPECT_EQ(p->PathOf(0), "");
  absl::StatusOr<int> bad = p->PositionAtPath("0.2");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("'0.2'"));
  // Root = the leaf down the arg-0 chain (the conv), not PyTorch's MatchAllNode.
  EXPECT_EQ(p->DefaultRootPosition(), 3);
  EXPECT_THAT(p->DefaultExtraInputPositions(), ElementsAre(4));

  absl::StatusOr<Pattern> two = Pattern::Parse(
      "(add, (mul, Conv2d, MatchAllNode), MatchAllNode)", PatternFormat::kComplex);
  ASSERT_TRUE(two.ok());
  // Chain add -> mul -> conv; extras innermost chain node first: mul's arg 1, then add's.
  EXPECT_EQ(two->DefaultRootPosition(), 2);
  EXPECT_THAT(two->DefaultExtraInputPositions(), ElementsAre(3, 4));
}

TEST(PatternTest, ErrorsNameTheProblem) {
  struct Case {
    const char* text;
    PatternFormat format;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"(ReLU, foo)", PatternFormat::kComplex, "unknown pattern leaf 'foo'"},
      {"(MatchAllNode, Conv2d)", PatternFormat::kComplex, "cannot be MatchAllNode"},
      {"(ReLU, (BatchNorm2d, Conv2d)", PatternFormat::kComplex, "expected ',' or ')'"},
      {"(ReLU, Conv2d) x", PatternFormat::kComplex, "unexpected text"},
      {"()", PatternFormat::kComplex, "empty tuple"},
      {"(Conv2d, (BatchNorm2d, ReLU))", PatternFormat::kSequence, "flat tuple"},
      {"((ReLU, Conv2d), Conv2d)", PatternFormat::kComplex, "must be an op"},
      {"(ReLU, (MatchAllNode, Conv2d))", PatternFormat::kComplex, "cannot have args"},
      {"add{alpha=}", PatternFormat::kComplex, "expected a constant"},
      {"", PatternFormat::kComplex, "expected a leaf name"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Pattern> p = Pattern::Parse(c.text, c.format);
    ASSERT_FALSE(p.ok()) << c.text;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(c.expected)) << c.text;
  }
}

TEST(PatternTest, DeepNestingIsAnErrorNotACrash) {
  std::string text;
  for (int i = 0; i < 10000; ++i) text += "(ReLU, ";
  text += "Conv2d";
  for (int i = 0; i < 10000; ++i) text += ")";
  absl::StatusOr<Pattern> p = Pattern::Parse(text, PatternFormat::kComplex);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PatternTest, FromPositionsRejectsNonPreorder) {
  std::vector<PatternPosition> positions(2);
  positions[0] = *ResolvePatternLeaf("ReLU");
  positions[1] = *ResolvePatternLeaf("Conv2d");
  positions[0].args = {1};
  absl::StatusOr<Pattern> ok = Pattern::FromPositions(positions);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->position(1).parent, 0);
  positions[0].args = {0};
  EXPECT_FALSE(Pattern::FromPositions(positions).ok());
  positions[0].args = {};
  EXPECT_FALSE(Pattern::FromPositions(positions).ok());  // position 1 unreachable
}

// ---- Alternatives, predicates and optional positions (issue 21) ------------------------

TEST(PatternV2Test, AlternativesUniteTheLeavesAndRememberWhichOne) {
  absl::StatusOr<Pattern> p =
      Pattern::Parse("(ReLU | ReLU6 | Hardswish, Conv2d)", PatternFormat::kComplex);
  ASSERT_TRUE(p.ok()) << p.status();
  const PatternPosition& act = p->position(0);
  EXPECT_THAT(act.leaves, ElementsAre("ReLU", "ReLU6", "Hardswish"));
  EXPECT_TRUE(act.Matches(Mod("nn.ReLU")));
  EXPECT_TRUE(act.Matches(Mod("nn.ReLU6")));
  EXPECT_TRUE(act.Matches(Mod("nn.Hardswish")));
  EXPECT_FALSE(act.Matches(Mod("nn.Sigmoid")));
  EXPECT_EQ(act.LeafFor(Mod("nn.ReLU6")), "ReLU6");
  EXPECT_EQ(act.LeafFor(Mod("nn.Hardswish")), "Hardswish");
  EXPECT_TRUE(p->has_alternatives());
  EXPECT_FALSE(p->has_optional());
  EXPECT_EQ(p->ToString(), "(ReLU | ReLU6 | Hardswish, Conv2d)");
}

TEST(PatternV2Test, AliasLeavesAlternateWithModules) {
  absl::StatusOr<Pattern> p = Pattern::Parse("(relu | ReLU, Conv2d)", PatternFormat::kComplex);
  ASSERT_TRUE(p.ok()) << p.status();
  const PatternPosition& act = p->position(0);
  // relu's three spellings plus the module: four alternatives.
  EXPECT_EQ(act.alternatives.size(), 4u);
  EXPECT_EQ(act.LeafFor(Method("relu")), "relu");
  EXPECT_EQ(act.LeafFor(Mod("nn.ReLU")), "ReLU");
  // relu's built-in allowance (inplace) is kept for the position.
  ASSERT_FALSE(act.allowed_kwargs.empty());
  EXPECT_EQ(act.allowed_kwargs[0].key.name(), "inplace");
  // Commutative only if every leaf is: add | mul is, add | ReLU would not be.
  absl::StatusOr<Pattern> binary =
      Pattern::Parse("(add | mul, Conv2d, MatchAllNode)", PatternFormat::kComplex);
  ASSERT_TRUE(binary.ok()) << binary.status();
  EXPECT_TRUE(binary->position(0).commutative);
}

TEST(PatternV2Test, PredicatesParseAndRoundTrip) {
  const char* text =
      "(ReLU, Conv2d[groups == in_channels, groups > 1, kernel_size == (3, 3), bias, "
      "users <= 2, rank != 4, dtype == torch.float32])";
  absl::StatusOr<Pattern> p = Pattern::Parse(text, PatternFormat::kComplex);
  ASSERT_TRUE(p.ok()) << p.status();
  const std::vector<PositionPredicate>& preds = p->position(1).predicates;
  ASSERT_EQ(preds.size(), 7u);
  EXPECT_TRUE(preds[6].constant.is_dtype());
  EXPECT_EQ(preds[0].subject, "groups");
  EXPECT_EQ(preds[0].op, PredicateOp::kEq);
  EXPECT_EQ(preds[0].other_subject, "in_channels");
  EXPECT_EQ(preds[1].op, PredicateOp::kGt);
  EXPECT_EQ(preds[1].constant.as_int(), 1);
  ASSERT_TRUE(preds[2].constant.is_list());
  EXPECT_EQ(preds[2].constant.items().size(), 2u);
  EXPECT_EQ(preds[2].constant.items()[1].as_int(), 3);
  EXPECT_EQ(preds[3].op, PredicateOp::kTrue);
  EXPECT_EQ(preds[4].op, PredicateOp::kLe);
  EXPECT_EQ(preds[5].op, PredicateOp::kNe);
  EXPECT_EQ(p->ToString(), text);
  absl::StatusOr<Pattern> again = Pattern::Parse(p->ToString(), PatternFormat::kComplex);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->ToString(), text);
  // Predicates work in the sequence format too, and spaces are optional.
  absl::StatusOr<Pattern> seq =
      Pattern::Parse("(Conv2d[groups>1],BatchNorm2d,ReLU)", PatternFormat::kSequence);
  ASSERT_TRUE(seq.ok()) << seq.status();
  EXPECT_EQ(seq->ToString(), "(ReLU, (BatchNorm2d, Conv2d[groups > 1]))");
}

TEST(PatternV2Test, PredicateErrorsNameTheTokenAndOffset) {
  struct Case {
    const char* text;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {"(ReLU, Conv2d[grups == 1])", "unknown predicate subject 'grups' (expected"},
           {"(ReLU, Conv2d[grups == 1])", "at offset 14"},
           {"(ReLU, Conv2d[groups])", "needs a comparison"},
           {"(ReLU, Conv2d[arg999 == 1])", "unknown predicate subject 'arg999'"},
           {"(ReLU, Conv2d[kwarg. == 1])", "unknown predicate subject 'kwarg.'"},
           {"(ReLU, Conv2d[kernel_size < (3, 3)])", "a tuple compares with == or != only"},
           {"(ReLU, Conv2d[groups == 1)", "expected ',' or ']' at offset 25"},
           {"(ReLU, Conv2d[groups == banana])", "expected a constant"},
           {"(ReLU | , Conv2d)", "expected a leaf name or '(' at offset 8"},
           {"(ReLU | MatchAllNode, Conv2d)", "MatchAllNode cannot be an alternative"},
           {"(ReLU, MatchAllNode[users == 1])", "MatchAllNode takes no predicates"},
       }) {
    absl::StatusOr<Pattern> p = Pattern::Parse(c.text, PatternFormat::kComplex);
    ASSERT_FALSE(p.ok()) << c.text;
    EXPECT_THAT(p.status().message(), HasSubstr(c.message)) << c.text;
  }
}

TEST(PatternV2Test, OptionalPositions) {
  absl::StatusOr<Pattern> p =
      Pattern::Parse("(ReLU, (BatchNorm2d?, Conv2d))", PatternFormat::kComplex);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->position(1).optional);
  EXPECT_FALSE(p->position(0).optional);
  EXPECT_TRUE(p->has_optional());
  EXPECT_EQ(p->ToString(), "(ReLU, (BatchNorm2d?, Conv2d))");
  // Sequence format: conv-[bn]-relu.
  absl::StatusOr<Pattern> seq =
      Pattern::Parse("(Conv2d, BatchNorm2d?, ReLU | ReLU6)", PatternFormat::kSequence);
  ASSERT_TRUE(seq.ok()) << seq.status();
  EXPECT_EQ(seq->ToString(), "(ReLU | ReLU6, (BatchNorm2d?, Conv2d))");
  // Optional needs exactly one pattern arg and cannot be the outermost op.
  for (const char* bad : {"(ReLU?, Conv2d)", "(ReLU, BatchNorm2d?)",
                          "(ReLU, (add?, Conv2d, MatchAllNode))", "(ReLU, (BatchNorm2d?, MatchAllNode))"}) {
    absl::StatusOr<Pattern> q = Pattern::Parse(bad, PatternFormat::kComplex);
    ASSERT_FALSE(q.ok()) << bad;
    EXPECT_THAT(q.status().message(), HasSubstr("optional position needs exactly one")) << bad;
  }
}

}  // namespace
}  // namespace fuselage
