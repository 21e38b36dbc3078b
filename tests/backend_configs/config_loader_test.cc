// The .textproto loader: the example config (qnnpack + conv-bn-add-relu, no C++), every
// kind of bad config (each an InvalidArgument naming the entry and the field), and the
// example applied by the fusion pass to the residual block.
#include "backend_configs/config_loader.h"

#include <cmath>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "backend_configs/builtin_configs.h"
#include "graph/graph_module.h"
#include "graph/module_schema.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"
#include "patterns/fuse.h"

namespace fuselage {
namespace {

constexpr char kExample[] = "backend_configs/examples/conv_bn_add_relu.textproto";

// A file on top of qnnpack with one entry whose body is `entry`.
absl::StatusOr<BackendConfig> LoadEntry(const std::string& entry) {
  return ParseBackendConfigText("base: \"qnnpack\"\npattern {\n" + entry + "\n}\n", "test.textproto");
}

// The status is InvalidArgument and its message names every fragment.
void ExpectInvalid(const absl::StatusOr<BackendConfig>& config,
                   std::initializer_list<const char*> fragments) {
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
  for (const char* fragment : fragments) {
    EXPECT_TRUE(absl::StrContains(config.status().message(), fragment))
        << "'" << fragment << "' not in: " << config.status().message();
  }
}

TEST(ConfigLoader, ExampleExtendsQnnpackWithConvBnAddRelu) {
  absl::StatusOr<BackendConfig> config = LoadBackendConfigFile(kExample);
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<BackendConfig> qnnpack = GetBackendConfig("qnnpack");
  ASSERT_TRUE(qnnpack.ok());
  EXPECT_EQ(config->name(), "qnnpack_conv_bn_add_relu");
  EXPECT_EQ(config->size(), qnnpack->size() + 2);
  EXPECT_EQ(config->FusionRules().size(), qnnpack->FusionRules().size() + 1);

  const BackendPatternConfig* fusion = config->Find("conv_bn_add_relu");
  ASSERT_NE(fusion, nullptr);
  EXPECT_TRUE(fusion->fuses);
  EXPECT_EQ(fusion->fused_module().str(), "nni.ConvAddReLU2d");
  EXPECT_EQ(fusion->rule.fuser_kind, FuserKind::kFoldBatchNormThenWrap);
  const Pattern& p = fusion->pattern();
  ASSERT_TRUE(fusion->rule.root_position.has_value());
  EXPECT_EQ(p.position(*fusion->rule.root_position).spelling, "Conv2d");
  ASSERT_TRUE(fusion->rule.extra_input_positions.has_value());
  ASSERT_EQ(fusion->rule.extra_input_positions->size(), 1u);
  EXPECT_TRUE(p.position((*fusion->rule.extra_input_positions)[0]).match_all);
  ASSERT_EQ(fusion->dtype_configs.size(), 1u);
  EXPECT_EQ(fusion->dtype_configs[0],
            DTypeConfig::Of(DType::kQUInt8, DType::kQUInt8, DType::kQInt8, DType::kFloat32));

  auto module_entries =
      config->FindForOp({OpKind::kCallModule, Symbol::Intern("nni.ConvAddReLU2d")});
  ASSERT_EQ(module_entries.size(), 1u);
  EXPECT_EQ(module_entries[0]->root_module.str(), "nn.Conv2d");
  EXPECT_EQ(module_entries[0]->reference_quantized_module.str(), "nnqr.Conv2d");
}

TEST(ConfigLoader, UnknownModuleTypeInPattern) {
  ExpectInvalid(LoadEntry(R"pb(name: "bad" pattern: "(ReLU, nn.Conv9d)" fuser: WRAP_IN_SEQUENCE
                             fused_module: "ConvReLU2d")pb"),
                {"pattern[0]", "'bad'", "field 'pattern'", "nn.Conv9d", "not registered"});
}

TEST(ConfigLoader, UnknownFunctionInPattern) {
  ExpectInvalid(LoadEntry(R"pb(name: "bad" pattern: "(torch.nn.functional.rleu, Conv2d)"
                             fuser: WRAP_IN_SEQUENCE fused_module: "ConvReLU2d")pb"),
                {"'bad'", "field 'pattern'", "the outermost op", "torch.nn.functional.rleu",
                 "not a known function"});
}

TEST(ConfigLoader, UnknownFusedRootAndReferenceModules) {
  ExpectInvalid(LoadEntry(R"pb(name: "bad" pattern: "(ReLU, (add, Conv2d, MatchAllNode))"
                             fuser: WRAP_IN_SEQUENCE fused_module: "ConvAddReLU9d")pb"),
                {"'bad'", "field 'fused_module'", "nni.ConvAddReLU9d", "not registered"});
  ExpectInvalid(LoadEntry(R"pb(name: "bad" pattern: "nni.ConvAdd2d" root_module: "Conv2D")pb"),
                {"'bad'", "field 'root_module'", "nn.Conv2D"});
  ExpectInvalid(LoadEntry(R"pb(name: "bad" pattern: "nni.ConvAdd2d"
                             reference_quantized_module: "Conv2dRef")pb"),
                {"'bad'", "field 'reference_quantized_module'", "nnqr.Conv2dRef"});
}

TEST(ConfigLoader, DuplicatePattern) {
  // (ReLU, Conv2d) is qnnpack's (nn.ReLU, nn.Conv2d), spelled differently.
  ExpectInvalid(LoadEntry(R"pb(name: "mine" pattern: "(ReLU, Conv2d)" fuser: WRAP_IN_SEQUENCE
                             fused_module: "ConvReLU2d")pb"),
                {"'mine'", "field 'pattern'", "duplicates", "(nn.ReLU, nn.Conv2d)", "qnnpack"});
  // Twice in one file without a base.
  ExpectInvalid(ParseBackendConfigText(R"pb(
      pattern { name: "a" pattern: "nn.Linear" }
      pattern { name: "b" pattern: "Linear" })pb", "dup.textproto"),
                {"dup.textproto", "pattern[1]", "'b'", "field 'pattern'", "duplicates", "'a'",
                 "backend config 'dup'"});
  // With `replace`, the base entry is redefined on purpose.
  absl::StatusOr<BackendConfig> replaced = LoadEntry(
      R"pb(name: "mine" pattern: "(ReLU, Conv2d)" replace: true fuser: WRAP_IN_SEQUENCE
         fused_module: "ConvReLU2d")pb");
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  EXPECT_EQ(replaced->size(), GetBackendConfig("qnnpack")->size());
  EXPECT_NE(replaced->Find("mine"), nullptr);
  EXPECT_EQ(replaced->Find("(nn.ReLU, nn.Conv2d)"), nullptr);
}

// The duplicate check's key (PatternKey) covers predicates, `?`, constant leaves and `$x`
// links: entries that differ only there match different nodes and are both accepted;
// respellings (predicate order, capture names, leaf names) are still duplicates.
TEST(ConfigLoader, EntriesDifferingOnlyByPredicateLinkOrConstantAreNotDuplicates) {
  const std::pair<const char*, const char*> distinct[] = {
      {"Conv2d", "Conv2d[groups > 1]"},
      {"Conv2d[groups > 1]", "Conv2d[groups > 2]"},
      {"(ReLU, (BatchNorm2d, Conv2d))", "(ReLU, (BatchNorm2d?, Conv2d))"},
      {"(mul, MatchAllNode, (sigmoid, MatchAllNode))", "(mul, $x, (sigmoid, $x))"},
      {"(add, MatchAllNode, MatchAllNode)", "(add, MatchAllNode, 3)"},
      {"(add, MatchAllNode, 3)", "(add, MatchAllNode, 6)"},
      {"(add[shape == @c.shape], Conv2d@c, MatchAllNode)",
       "(add[shape == @c.shape], MatchAllNode, Conv2d@c)"},
  };
  for (const auto& [a, b] : distinct) {
    SCOPED_TRACE(absl::StrCat(a, " vs ", b));
    absl::StatusOr<BackendConfig> config = ParseBackendConfigText(
        absl::StrCat("pattern { name: \"a\" pattern: \"", a, "\" }\n",
                     "pattern { name: \"b\" pattern: \"", b, "\" }\n"),
        "two.textproto");
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->size(), 2u);
    ASSERT_NE(config->Find("a"), nullptr);
    ASSERT_NE(config->Find("b"), nullptr);
    EXPECT_NE(PatternKey(config->Find("a")->pattern()), PatternKey(config->Find("b")->pattern()));
  }
}

TEST(ConfigLoader, RespelledPredicatesAndCapturesAreStillDuplicates) {
  const std::pair<const char*, const char*> same[] = {
      {"Conv2d[groups > 1, bias]", "nn.Conv2d[bias, groups > 1]"},
      {"(mul, $x, (sigmoid, $x))", "(mul, $y, (torch.sigmoid | F.sigmoid | method:sigmoid, $y))"},
      {"(add[shape == @c.shape], Conv2d@c, MatchAllNode)",
       "(add[shape == @conv.shape], Conv2d@conv, MatchAllNode)"},
      {"(add, MatchAllNode, 3)", "(add, MatchAllNode, 3.0)"},
      {"Conv2d[groups > 1]", "Conv2d[groups > 1.0]"},
  };
  for (const auto& [a, b] : same) {
    SCOPED_TRACE(absl::StrCat(a, " vs ", b));
    ExpectInvalid(ParseBackendConfigText(
                      absl::StrCat("pattern { name: \"a\" pattern: \"", a, "\" }\n",
                                   "pattern { name: \"b\" pattern: \"", b, "\" }\n"),
                      "dup.textproto"),
                  {"dup.textproto", "pattern[1]", "'b'", "field 'pattern'", "duplicates", "'a'"});
  }
}

// benefit (issue 21 item 5) reaches the fusion rule; unset is 0 (PyTorch's order); it is a
// fusion field, refused on an entry without a fuser.
TEST(ConfigLoader, BenefitIsReadAndNeedsAFuser) {
  absl::StatusOr<BackendConfig> config = ParseBackendConfigText(R"pb(
      pattern { name: "a" pattern: "(ReLU, BatchNorm2d)" fuser: WRAP_IN_SEQUENCE
                fused_module: "BNReLU2d" benefit: 3 }
      pattern { name: "b" pattern: "(ReLU, (BatchNorm2d, Conv2d))" fuser: FOLD_BN_THEN_WRAP
                fused_module: "ConvReLU2d" })pb", "benefit.textproto");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_NE(config->Find("a"), nullptr);
  EXPECT_EQ(config->Find("a")->rule.benefit, 3);
  EXPECT_EQ(config->Find("b")->rule.benefit, 0);
  ExpectInvalid(ParseBackendConfigText(R"pb(
      pattern { name: "c" pattern: "(ReLU, BatchNorm2d)" benefit: 1 })pb", "nofuser.textproto"),
                {"'c'", "field 'fuser'", "benefit given without a fuser"});
}

TEST(ConfigLoader, GetterPositionOutsidePattern) {
  ExpectInvalid(LoadEntry(R"pb(name: "bad" pattern: "(ReLU, (add, Conv2d, MatchAllNode))"
                             fuser: WRAP_IN_SEQUENCE fused_module: "ConvAddReLU2d"
                             root: "0.0.0")pb"),
                {"'bad'", "field 'root'", "0.0.0"});
  ExpectInvalid(LoadEntry(R"pb(name: "bad" pattern: "(ReLU, (add, Conv2d, MatchAllNode))"
                             fuser: WRAP_IN_SEQUENCE fused_module: "ConvAddReLU2d"
                             extra_input: "0.2")pb"),
                {"'bad'", "field 'extra_input'", "0.2"});
  // Inside the pattern but not a MatchAllNode: the conv cannot be an extra input.
  ExpectInvalid(LoadEntry(R"pb(name: "bad" pattern: "(ReLU, (add, Conv2d, MatchAllNode))"
                             fuser: WRAP_IN_SEQUENCE fused_module: "ConvAddReLU2d"
                             extra_input: "0.0")pb"),
                {"'bad'", "extra_input_positions"});
}

TEST(ConfigLoader, FusedModuleArityMustFitRootArgsPlusExtraInputs) {
  // ConvReLU2d takes 1 input; the conv's 1 arg plus the residual make 2.
  ExpectInvalid(LoadEntry(R"pb(name: "bad" pattern: "(ReLU, (add, Conv2d, MatchAllNode))"
                             fuser: WRAP_IN_SEQUENCE fused_module: "ConvReLU2d")pb"),
                {"'bad'", "field 'fused_module'", "nni.ConvReLU2d", "takes 1 inputs",
                 "plus 1 extra input"});
  // ConvAddReLU2d takes 2; without a MatchAllNode there is no second input.
  ExpectInvalid(LoadEntry(R"pb(name: "bad" pattern: "(ReLU, (BatchNorm2d, Conv2d))"
                             fuser: FOLD_BN_THEN_WRAP fused_module: "ConvAddReLU2d")pb"),
                {"'bad'", "field 'fused_module'", "nni.ConvAddReLU2d", "takes 2 inputs",
                 "plus 0 extra input"});
}

TEST(ConfigLoader, MalformedFiles) {
  ExpectInvalid(ParseBackendConfigText("base: \"qnnpack\"\npattern { nme: \"x\" }\n", "t.textproto"),
                {"t.textproto", "line 2"});
  ExpectInvalid(ParseBackendConfigText("base: \"tensorrt\"", "t.textproto"),
                {"field 'base'", "tensorrt"});
  ExpectInvalid(LoadEntry(R"pb(name: "bad" pattern: "(ReLU, Conv2d")pb"),
                {"'bad'", "field 'pattern'"});
  ExpectInvalid(LoadEntry(R"pb(name: "bad" pattern: "nni.ConvAdd2d"
                             dtype_config { input { dtype: "quint7" } })pb"),
                {"'bad'", "dtype_config[0].input", "quint7"});
  ExpectInvalid(LoadEntry(R"pb(name: "bad" pattern: "nni.ConvAdd2d"
                             dtype_config { weight { dtype: "qint8" quant_min_lower_bound: -200 } })pb"),
                {"'bad'", "field 'dtype_configs'", "quant_min_lower_bound", "-200"});
  ExpectInvalid(LoadEntry(R"pb(name: "bad" pattern: "nni.ConvAdd2d" fused_module: "ConvAdd2d")pb"),
                {"'bad'", "field 'fuser'"});
  EXPECT_EQ(LoadBackendConfigFile("no/such/file.textproto").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(BackendConfig, FailedAddLeavesConfigUnchanged) {
  absl::StatusOr<BackendConfig> config = GetBackendConfig("x86");
  ASSERT_TRUE(config.ok());
  const size_t size = config->size();
  BackendPatternConfig entry;
  entry.rule.name = "conv_add";
  absl::StatusOr<Pattern> pattern =
      Pattern::Parse("(add, Conv2d, MatchAllNode)", PatternFormat::kComplex);
  ASSERT_TRUE(pattern.ok());
  entry.rule.pattern = *pattern;
  entry.fuses = true;
  entry.rule.fused_module_type = Symbol::Intern("nni.ConvAdd2d");
  entry.rule.root_position = 7;  // from C++: a position past the pattern's 3
  absl::Status status = config->Add(entry);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "conv_add")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "root_position")) << status;
  EXPECT_EQ(config->size(), size);
  EXPECT_EQ(config->Find("conv_add"), nullptr);

  entry.rule.root_position.reset();  // default: the conv
  EXPECT_TRUE(config->Add(entry).ok());
  EXPECT_EQ(config->size(), size + 1);
  EXPECT_EQ(config->Add(entry).code(), absl::StatusCode::kInvalidArgument);  // duplicate now
}

// The residual block y = identity(x); out = relu(add(bn(conv(x)), y)), with a 1x1,
// one-channel conv so the folded weights can be checked by hand.
std::unique_ptr<GraphModule> ResidualBlock() {
  auto owned = std::make_unique<GraphModule>();
  GraphModule& gm = *owned;
  auto conv = std::make_unique<Module>("nn.Conv2d");
  conv->SetTensor("weight", Tensor::FromFloats({1, 1, 1, 1}, {2.0f}));
  conv->SetTensor("bias", Tensor::FromFloats({1}, {1.0f}));
  conv->SetAttribute("in_channels", Argument::Int(1));
  conv->SetAttribute("out_channels", Argument::Int(1));
  conv->SetAttribute("kernel_size", Argument::Ints({1, 1}));
  conv->SetAttribute("stride", Argument::Ints({1, 1}));
  conv->SetAttribute("padding", Argument::Ints({0, 0}));
  conv->SetAttribute("dilation", Argument::Ints({1, 1}));
  conv->SetAttribute("groups", Argument::Int(1));
  conv->SetAttribute("padding_mode", Argument::String("zeros"));
  auto bn = std::make_unique<Module>("nn.BatchNorm2d");
  bn->SetTensor("weight", Tensor::FromFloats({1}, {3.0f}));
  bn->SetTensor("bias", Tensor::FromFloats({1}, {0.5f}));
  bn->SetTensor("running_mean", Tensor::FromFloats({1}, {1.0f}));
  bn->SetTensor("running_var", Tensor::FromFloats({1}, {4.0f}));
  bn->SetAttribute("num_features", Argument::Int(1));
  bn->SetAttribute("eps", Argument::Float(0.0));
  bn->SetAttribute("momentum", Argument::Float(0.1));
  bn->SetAttribute("affine", Argument::Bool(true));
  bn->SetAttribute("track_running_stats", Argument::Bool(true));
  EXPECT_TRUE(gm.SetModule("conv", std::move(conv)).ok());
  EXPECT_TRUE(gm.SetModule("bn", std::move(bn)).ok());
  EXPECT_TRUE(gm.SetModule("identity", std::make_unique<Module>("nn.Identity")).ok());
  EXPECT_TRUE(gm.SetModule("relu", std::make_unique<Module>("nn.ReLU")).ok());
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* y = *g.AddCallModule("identity", {x});
  Node* c = *g.AddCallModule("conv", {x});
  Node* b = *g.AddCallModule("bn", {c});
  Node* add = *g.AddCallFunction("operator.add", {b, y});
  Node* relu = *g.AddCallModule("relu", {add});
  EXPECT_TRUE(g.SetOutput(relu).ok());
  return owned;
}

// The example applied by the fusion pass to the residual block.
TEST(ConfigLoader, ExampleFusesTheResidualBlock) {
  absl::StatusOr<BackendConfig> config = LoadBackendConfigFile(kExample);
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<PatternMatcher> matcher = BuildFusionMatcher(*config);
  ASSERT_TRUE(matcher.ok()) << matcher.status();

  std::unique_ptr<GraphModule> owned = ResidualBlock();
  GraphModule& gm = *owned;
  Graph& g = gm.graph();
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();

  absl::StatusOr<int> fused = FusePatterns(gm, *matcher);
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_EQ(*fused, 1);
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();

  // placeholder, identity, the fused node, output.
  ASSERT_EQ(g.size(), 4u);
  Node* f = g.output()->arg(0).as_node();
  ASSERT_EQ(f->op(), OpKind::kCallModule);
  const Module* m = gm.FindModule(f->target().name());
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->type().str(), "nni.ConvAddReLU2d");
  ASSERT_EQ(f->num_args(), 2u);  // the conv's input, then the residual
  EXPECT_EQ(f->arg(0).as_node()->name(), "x");
  EXPECT_EQ(f->arg(1).as_node()->name(), "identity");
  ASSERT_NE(f->FindMeta("pattern"), nullptr);
  EXPECT_EQ(f->FindMeta("pattern")->as_string(), "conv_bn_add_relu");
  // Folded by hand: w' = w * gamma / sqrt(var + eps) = 2 * 3 / 2 = 3,
  // b' = (b - mean) * gamma / sqrt(var + eps) + beta = 0 * 1.5 + 0.5 = 0.5.
  ASSERT_NE(m->FindChild("0"), nullptr);
  const Module& folded = *m->FindChild("0");
  EXPECT_EQ(folded.type().str(), "nn.Conv2d");
  ASSERT_NE(folded.FindTensor("weight"), nullptr);
  ASSERT_NE(folded.FindTensor("bias"), nullptr);
  EXPECT_NEAR(folded.FindTensor("weight")->data<float>()[0], 3.0f, 1e-6);
  EXPECT_NEAR(folded.FindTensor("bias")->data<float>()[0], 0.5f, 1e-6);
  ASSERT_NE(m->FindChild("1"), nullptr);
  EXPECT_EQ(m->FindChild("1")->type().str(), "nn.ReLU");
}

// The example's fusion entry, named `name`, with `fuser` as written in the file.
std::string ConvBnAddReluEntry(const std::string& name, const std::string& fuser = "FOLD_BN_THEN_WRAP") {
  return absl::StrCat("name: \"", absl::CEscape(name), "\"\n",
                      R"pb(pattern: "(ReLU, (add, (BatchNorm2d, Conv2d), MatchAllNode))"
                           fused_module: "ConvAddReLU2d"
                           root: "0.0.0"
                           extra_input: "0.1"
                           fuser: )pb",
                      fuser);
}

// Issue 22 item 1: a config string reaches the fused model (the entry name becomes the
// fused node's "pattern" meta), so the loader holds it to the model file's limit. One byte
// over is refused naming the entry's index and the field; exactly the limit loads, fuses,
// and the fused model saves and loads again.
TEST(ConfigLoader, StringsAreBoundedByTheModelFileLimit) {
  const int64_t limit = ModelLimits().max_string_length;
  ASSERT_EQ(limit, 4096);  // the documented model-file limit
  ExpectInvalid(LoadEntry(ConvBnAddReluEntry(std::string(1000000, 'n'))),
                {"test.textproto: pattern[0]: field 'name'", "1000000 bytes", "limit is 4096"});
  ExpectInvalid(LoadEntry(ConvBnAddReluEntry(std::string(limit + 1, 'n'))),
                {"pattern[0]: field 'name'", "4097 bytes"});
  // Any string field, at any depth, and the file's own fields.
  ExpectInvalid(LoadEntry(absl::StrCat(ConvBnAddReluEntry("ok"), " dtype_config { input { dtype: \"",
                                       std::string(limit + 1, 'q'), "\" } }")),
                {"pattern[0] 'ok': field 'dtype_config[0].input.dtype'", "4097 bytes"});
  ExpectInvalid(ParseBackendConfigText(absl::StrCat("name: \"", std::string(limit + 1, 'b'), "\""),
                                       "t.textproto"),
                {"t.textproto: field 'name'", "4097 bytes"});

  const std::string longest(limit, 'n');
  absl::StatusOr<BackendConfig> config = LoadEntry(ConvBnAddReluEntry(longest));
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<PatternMatcher> matcher = BuildFusionMatcher(*config);
  ASSERT_TRUE(matcher.ok()) << matcher.status();
  std::unique_ptr<GraphModule> gm = ResidualBlock();
  absl::StatusOr<int> fused = FusePatterns(*gm, *matcher);
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_EQ(*fused, 1);
  absl::StatusOr<std::unique_ptr<GraphModule>> reloaded = ParseModel(SerializeModel(*gm));
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  const Node* f = (*reloaded)->graph().output()->arg(0).as_node();
  const Argument* pattern = f->FindMeta("pattern");
  ASSERT_NE(pattern, nullptr);
  EXPECT_EQ(pattern->as_string(), longest);
}

// Invalid UTF-8 in any string is refused at load (it would make a binary model file that
// protobuf refuses to parse), shown escaped in the error.
TEST(ConfigLoader, StringsMustBeValidUtf8) {
  ExpectInvalid(LoadEntry(ConvBnAddReluEntry("conv\377relu")),
                {"test.textproto: pattern[0]: field 'name'", "conv\\xffrelu", "not valid UTF-8"});
  ExpectInvalid(LoadEntry("name: \"x\" pattern: \"nn.Conv2d\" root_module: \"Conv\\3772d\""),
                {"pattern[0] 'x': field 'root_module'", "not valid UTF-8"});
  // Valid multi-byte UTF-8 is fine.
  EXPECT_TRUE(LoadEntry(ConvBnAddReluEntry("conv\303\251relu")).ok());
}

// Proto3 keeps an enum number it has no name for; the loader used to read `fuser: 99` as
// WRAP_IN_SEQUENCE. Every enum field must hold a named value.
TEST(ConfigLoader, UnknownEnumValuesAreRefused) {
  ExpectInvalid(LoadEntry(ConvBnAddReluEntry("cbar", "99")),
                {"pattern[0] 'cbar': field 'fuser'", "99 is not a value of enum Fuser",
                 "NO_FUSION, WRAP_IN_SEQUENCE, FOLD_BN_THEN_WRAP"});
  ExpectInvalid(LoadEntry("name: \"x\" pattern: \"nn.Conv2d\" format: 5"),
                {"pattern[0] 'x': field 'format'", "5 is not a value of enum PatternFormat"});
  ExpectInvalid(LoadEntry("name: \"x\" pattern: \"nn.Conv2d\" observation_type: -1"),
                {"pattern[0] 'x': field 'observation_type'", "-1 is not a value of enum ObservationType"});
}

// wrap_in_sequence of conv-bn-add-relu would give nni.ConvAddReLU2d the children (conv,
// bn, relu); the type holds (conv, relu), so its kernel silently skipped the batch norm.
// Refused at load, naming the entry, the field and both child lists.
TEST(ConfigLoader, FusedChildrenMustFitTheFusedType) {
  ExpectInvalid(LoadEntry(ConvBnAddReluEntry("cbar", "WRAP_IN_SEQUENCE")),
                {"pattern[0]", "'cbar'", "field 'fuser'",
                 "(nn.Conv2d, nn.BatchNorm2d, nn.ReLU)", "(nn.Conv2d or nnqr.Conv2d, nn.ReLU)"});
  // Wrapping conv-bn-relu into a type with a place for the batch norm is fine ...
  const absl::StatusOr<BackendConfig> fits =
      LoadEntry(R"pb(name: "cbr" pattern: "(ReLU, (BatchNorm2d, Conv2d))" replace: true
                     fuser: WRAP_IN_SEQUENCE fused_module: "ConvBnReLU2d")pb");
  ASSERT_TRUE(fits.ok()) << fits.status();
  // Checked here once, so the fusion pass need not check each module it builds ...
  EXPECT_TRUE(fits->Find("cbr")->rule.children_checked_at_load);
  // ... unlike a pattern whose children depend on the match (the batch norm optional).
  const absl::StatusOr<BackendConfig> per_match =
      LoadEntry(R"pb(name: "cbr" pattern: "(ReLU, (BatchNorm2d?, Conv2d))" replace: true
                     fuser: WRAP_IN_SEQUENCE fused_module: "ConvBnReLU2d")pb");
  ASSERT_TRUE(per_match.ok()) << per_match.status();
  EXPECT_FALSE(per_match->Find("cbr")->rule.children_checked_at_load);
  // ... and a type of the wrong parts is not.
  ExpectInvalid(LoadEntry(R"pb(name: "cr" pattern: "(ReLU, Conv2d)"
                               fuser: WRAP_IN_SEQUENCE fused_module: "LinearReLU")pb"),
                {"'cr'", "field 'fuser'", "(nn.Conv2d, nn.ReLU)", "(nn.Linear or nnqr.Linear, nn.ReLU)"});
}

// Issue 22 item 7: the config file is read until EOF and refused at a documented size:
// /dev/zero was read as an empty config (the file was sized with tellg).
TEST(ConfigLoader, FileIsReadBoundedNotSized) {
  absl::StatusOr<BackendConfig> zero = LoadBackendConfigFile("/dev/zero");
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument) << zero.status();
  EXPECT_TRUE(absl::StrContains(zero.status().message(), "/dev/zero")) << zero.status();
  EXPECT_TRUE(absl::StrContains(zero.status().message(),
                                absl::StrCat(kMaxBackendConfigFileBytes)))
      << zero.status();
  EXPECT_EQ(LoadBackendConfigFile("no/such/file.textproto").status().code(),
            absl::StatusCode::kNotFound);
}

// Issue 22 item 10: syntax errors come back in the Status, and nothing is logged to
// stderr (protobuf's default error collector printed `[libprotobuf ERROR ...]` lines).
TEST(ConfigLoader, SyntaxErrorsAreNotLogged) {
  ::testing::internal::CaptureStderr();
  const absl::StatusOr<BackendConfig> config =
      ParseBackendConfigText("base: \"qnnpack\"\npattern { nme: \"x\" }\n", "t.textproto");
  const absl::StatusOr<std::string> base = DeclaredBackendBase("base: qnnpack }", "u.textproto");
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(logged, "");
  ExpectInvalid(config, {"t.textproto: line 2"});
  ASSERT_FALSE(base.ok());
  EXPECT_TRUE(absl::StrContains(base.status().message(), "u.textproto: line 1")) << base.status();
  EXPECT_EQ(*DeclaredBackendBase("base: \"fbgemm\"", "v"), "fbgemm");
}

// Found by config_fusion_fuzz (corpus regress-reference-conv3d-for-conv2d.textproto):
// nnqr.Conv3d as the reference of nn.Conv2d loaded, and convert then wrote a Conv3d
// holding a 2-d conv's weights, which Verify refuses.
TEST(ConfigLoader, ReferenceModuleMustBeTheRootsReferenceForm) {
  ExpectInvalid(LoadEntry(R"pb(name: "car" pattern: "nni.ConvAddReLU2d" replace: true
                               root_module: "Conv2d" reference_quantized_module: "Conv3d")pb"),
                {"pattern[0]", "'car'", "field 'reference_quantized_module'",
                 "'nnqr.Conv3d' is not the reference form of root_module 'nn.Conv2d'",
                 "expected 'nnqr.Conv2d'"});
  const absl::StatusOr<BackendConfig> fits =
      LoadEntry(R"pb(name: "car" pattern: "nni.ConvAddReLU2d" replace: true
                     root_module: "Conv2d" reference_quantized_module: "Conv2d")pb");
  EXPECT_TRUE(fits.ok()) << fits.status();
}

// ---- Issue 21: alternatives, predicates and optional positions in config files ---------

TEST(ConfigLoader, PatternLanguageExamplesLoadWithOneEntryEach) {
  for (const char* file : {"backend_configs/examples/depthwise_conv_bn_relu6.textproto",
                           "backend_configs/examples/conv_bn_act_optional.textproto"}) {
    absl::StatusOr<BackendConfig> config = LoadBackendConfigFile(file);
    ASSERT_TRUE(config.ok()) << file << ": " << config.status();
    EXPECT_EQ(config->size(), 1) << file;  // no base: only its own entry
    ASSERT_EQ(config->FusionRules().size(), 1u) << file;
    const FusionRule& rule = *config->FusionRules()[0];
    EXPECT_EQ(rule.fused_module_type.name(), "nni.ConvAct2d");
    EXPECT_EQ(rule.fuser_kind, FuserKind::kFoldBatchNormThenWrap);
    EXPECT_TRUE(rule.pattern.has_alternatives());
  }
}

TEST(ConfigLoader, UnknownPredicateSubjectIsRefusedAtLoad) {
  ExpectInvalid(LoadEntry(R"pb(name: "bad" pattern: "(ReLU, Conv2d[grups == 1])"
                             fuser: WRAP_IN_SEQUENCE fused_module: "ConvReLU2d")pb"),
                {"'bad'", "field 'pattern'", "unknown predicate subject 'grups'", "offset"});
}

TEST(ConfigLoader, MisspelledAlternativeIsRefusedAtLoad) {
  ExpectInvalid(LoadEntry(R"pb(name: "bad" pattern: "(ReLU | Relu6, Conv2d)"
                             fuser: WRAP_IN_SEQUENCE fused_module: "ConvReLU2d")pb"),
                {"'bad'", "nn.Relu6", "not registered"});
}

TEST(ConfigLoader, AlternativeWithNoPlaceInTheFusedTypeIsRefused) {
  // nni.ConvReLU2d's kernel runs a ReLU as child "1": a ReLU6 there would be a silent
  // change of the activation.
  ExpectInvalid(LoadEntry(R"pb(name: "bad" pattern: "(ReLU | ReLU6, Conv2d)"
                             fuser: WRAP_IN_SEQUENCE fused_module: "ConvReLU2d")pb"),
                {"'bad'", "nn.ReLU6"});
}

}  // namespace
}  // namespace fuselage

namespace fuselage {
namespace {

// The quantization fields PyTorch's BackendPatternConfig has beyond observation type and
// dtype configs (what backend_config_to_text writes for PyTorch's own configs).
TEST(ConfigLoader, TensorArgsObservationInputOutputObservedFixedQParams) {
  absl::StatusOr<BackendConfig> config = ParseBackendConfigText(R"pb(
    pattern {
      pattern: "operator.add"
      num_tensor_args_observation { num_tensor_args: 1 observation_type: OUTPUT_SHARE_OBSERVER_WITH_INPUT }
      num_tensor_args_observation { num_tensor_args: 2 }
      dtype_config { input { dtype: "quint8" } output { dtype: "quint8" } }
    }
    pattern { pattern: "nn.Embedding" input_output_observed: false root_module: "Embedding"
              reference_quantized_module: "Embedding" }
    pattern { pattern: "nn.Sigmoid" fixed_output_qparams { scale: 0.00390625 zero_point: 0 } }
    pattern { pattern: "method:size" observation_type: INPUT_OUTPUT_NOT_OBSERVED }
  )pb", "t.textproto");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_NE(config->Find("method:size"), nullptr);
  EXPECT_EQ(config->Find("method:size")->observation_type,
            ObservationType::kInputOutputNotObserved);
  const BackendPatternConfig* add = config->Find("operator.add");
  ASSERT_NE(add, nullptr);
  ASSERT_EQ(add->num_tensor_args_to_observation_type.size(), 2u);
  EXPECT_EQ(add->num_tensor_args_to_observation_type[0],
            std::make_pair(1, ObservationType::kOutputShareObserverWithInput));
  EXPECT_EQ(add->num_tensor_args_to_observation_type[1],
            std::make_pair(2, ObservationType::kOutputUseDifferentObserverAsInput));
  EXPECT_TRUE(add->input_output_observed);
  EXPECT_FALSE(add->fixed_output_qparams.has_value());
  EXPECT_FALSE(config->Find("nn.Embedding")->input_output_observed);
  const BackendPatternConfig* sigmoid = config->Find("nn.Sigmoid");
  ASSERT_TRUE(sigmoid->fixed_output_qparams.has_value());
  EXPECT_EQ(sigmoid->fixed_output_qparams->scale, 1.0 / 256);
  EXPECT_EQ(sigmoid->fixed_output_qparams->zero_point, 0);

  ExpectInvalid(LoadEntry(R"pb(name: "bad" pattern: "torch.mul"
                             num_tensor_args_observation { num_tensor_args: 1 }
                             num_tensor_args_observation { num_tensor_args: 1 })pb"),
                {"'bad'", "num_tensor_args_observation[1]", "given twice"});
  ExpectInvalid(LoadEntry(R"pb(name: "bad" pattern: "torch.mul"
                             num_tensor_args_observation { num_tensor_args: -1 })pb"),
                {"'bad'", "num_tensor_args_observation[0]", "must be >= 0"});
  ExpectInvalid(LoadEntry(R"pb(name: "bad" pattern: "torch.mul"
                             fixed_output_qparams { scale: 0 })pb"),
                {"'bad'", "fixed_output_qparams"});
}

// Issue 21 item 4: a file that declares a fused module type loads, the config holding it
// (tests/backend_configs/declared_type_test.cc has the whole flow); a lowering rule for a
// type nobody declared is refused by name, never loaded without effect.
TEST(ConfigLoader, DeclaredTypesLoadAndUndeclaredLoweringTargetsAreRefused) {
  absl::StatusOr<BackendConfig> typed = ParseBackendConfigText(
      "fused_module_type { name: \"loader.Conv\" child: \"nn.Conv2d\" "
      "num_inputs: 1 step { child: 0 input { arg: 0 } } observe_output: true }\n",
      "t.textproto");
  ASSERT_TRUE(typed.ok()) << typed.status();
  const ModuleSchema* schema = typed->module_schemas().Find(Symbol::Lookup("loader.Conv"));
  ASSERT_NE(schema, nullptr);
  EXPECT_NE(schema->composition, nullptr);
  absl::StatusOr<BackendConfig> lowered = ParseBackendConfigText(
      "lowering_rule { name: \"mine\" reference_module: \"user.X\" }\n", "t.textproto");
  ASSERT_FALSE(lowered.ok());
  EXPECT_EQ(lowered.status().code(), absl::StatusCode::kInvalidArgument) << lowered.status();
  EXPECT_TRUE(absl::StrContains(lowered.status().message(),
                                "t.textproto: lowering_rule[0] 'mine': field 'reference_module'"))
      << lowered.status();
}

// Each structural error of a declared type is an InvalidArgument naming the entry and
// the field.
TEST(ConfigLoader, DeclaredTypeStructureCheckedAtLoad) {
  const auto error_of = [](const std::string& body) {
    absl::StatusOr<BackendConfig> config =
        ParseBackendConfigText("fused_module_type {\n" + body + "\n}\n", "t.textproto");
    EXPECT_FALSE(config.ok());
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
    return std::string(config.status().message());
  };
  const std::string steps = R"pb(num_inputs: 2
      step { child: 0 input { arg: 0 } }
      step { op: "add" input { step: 0 } input { arg: 1 } } observe_output: true)pb";
  EXPECT_TRUE(absl::StrContains(error_of(R"pb(name: "NoNamespace" child: "nn.Conv2d" )pb" + steps),
                                "fused_module_type[0] 'NoNamespace': field 'name'"));
  EXPECT_TRUE(absl::StrContains(error_of(R"pb(name: "nni.ConvAddReLU2d" child: "nn.Conv2d" )pb" + steps),
                                "field 'name': namespace 'nni' is a built-in one"));
  EXPECT_TRUE(absl::StrContains(error_of(R"pb(name: "user.A" child: "nn.NoSuchConv" )pb" + steps),
                                "field 'child[0]': module type 'nn.NoSuchConv' is not registered"));
  EXPECT_TRUE(absl::StrContains(
      error_of(R"pb(name: "user.A" child: "nn.Conv2d" num_inputs: 2
                 step { child: 0 input { arg: 2 } } observe_output: true)pb"),
      "field 'step[0].input[0].arg': 2 is not one of the 2 inputs"));
  EXPECT_TRUE(absl::StrContains(
      error_of(R"pb(name: "user.A" child: "nn.Conv2d" num_inputs: 1
                 step { child: 0 input { step: 0 } } observe_output: true)pb"),
      "field 'step[0].input[0].step': 0 is not an earlier step"));
  EXPECT_TRUE(absl::StrContains(
      error_of(R"pb(name: "user.A" child: "nn.Conv2d" num_inputs: 1
                 step { child: 1 input { arg: 0 } } observe_output: true)pb"),
      "field 'step[0].child': 1 is not one of the 1 children"));
  EXPECT_TRUE(absl::StrContains(
      error_of(R"pb(name: "user.A" child: "nn.Conv2d" observed_input: 3 )pb" + steps),
      "field 'observed_input[0]': 3 is not one of the 2 inputs"));
}

}  // namespace
}  // namespace fuselage
