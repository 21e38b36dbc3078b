// Issue 21 item 4: a fused module type declared in a config file, end to end, with no
// C++ — backend_configs/examples/conv_add_relu_new_type.textproto's user.ConvBnAddReLU2d
// on the residual example (conv -> bn -> add(identity) -> relu): fused equals unfused in
// float, the flow lowers it to one nniq.ConvAddReLU2d reading both inputs quantized, and
// the result equals, byte for byte, the same model through the built-in
// nni.ConvAddReLU2d path, and is close to float (SQNR). Plus the load-time checks, the
// scope rules (same declaration twice, different declaration) and the model-file rule.
#include <atomic>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "backend_configs/config_loader.h"
#include "backend_configs/declared_types.h"
#include "gmock/gmock.h"
#include "graph/graph_module.h"
#include "graph/module_schema.h"
#include "gtest/gtest.h"
#include "lowering/declared_lowering.h"
#include "lowering/lowering_rule.h"
#include "patterns/fuse.h"
#include "pipeline/quantize_flow.h"
#include "pipeline/stages.h"
#include "quantize/qconfig.h"
#include "runtime/builtin_kernels.h"
#include "runtime/interpreter.h"
#include "tests/backend_configs/declared_test_util.h"
#include "tools/examples.h"

namespace fuselage {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kExample[] = "backend_configs/examples/conv_add_relu_new_type.textproto";
constexpr char kType[] = "user.ConvBnAddReLU2d";

std::string ExampleText() {
  absl::StatusOr<std::string> text = ReadBackendConfigFile(kExample);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : std::string();
}

// The same config with the built-in type instead of the declared one (and no
// declarations): the independent path the declared one must reproduce.
std::string BuiltinEquivalentText() {
  std::string text = ExampleText();
  for (const char* block : {"fused_module_type {", "lowering_rule {"}) {
    const size_t start = text.find(block);
    const size_t end = text.find("\n}\n", start);
    EXPECT_NE(start, std::string::npos);
    text.erase(start, end + 3 - start);
  }
  return absl::StrReplaceAll(text, {{kType, "nni.ConvAddReLU2d"}});
}

TEST(DeclaredTypeTest, TheConfigHoldsSchemaCompositionAndLoweringRule) {
  absl::StatusOr<BackendConfig> config = LoadBackendConfigFile(kExample);
  ASSERT_TRUE(config.ok()) << config.status();
  // Scoped to the config: nothing process-wide.
  EXPECT_EQ(ModuleSchemaRegistry::Global().Find(Symbol::Intern(kType)), nullptr);
  const ModuleSchema* schema = config->module_schemas().Find(Symbol::Lookup(kType));
  ASSERT_NE(schema, nullptr);
  EXPECT_EQ(schema->min_inputs, 2);
  EXPECT_EQ(schema->max_inputs, 2);
  EXPECT_EQ(schema->declared_in, kExample);
  EXPECT_EQ(schema->children,
            (std::vector<std::vector<std::string>>{{"nn.Conv2d", "nnqr.Conv2d"}, {"nn.ReLU"}}));
  ASSERT_NE(schema->composition, nullptr);
  ASSERT_EQ(schema->composition->steps.size(), 3u);
  EXPECT_EQ(schema->composition->steps[1].function, "operator.add");

  LoweringRuleRegistry rules;
  ASSERT_TRUE(RegisterNativeLoweringRules(rules).ok());
  EXPECT_EQ(rules.FindByName("user-conv-bn-add-relu2d"), nullptr);
  ASSERT_TRUE(RegisterDeclaredLoweringRules(rules, config->declared_lowering_rules()).ok());
  const LoweringRule* rule = rules.FindByName("user-conv-bn-add-relu2d");
  ASSERT_NE(rule, nullptr);
  EXPECT_EQ(rule->reference_target, kType);
  EXPECT_EQ(rule->inner_type, "nnqr.Conv2d");
  EXPECT_EQ(rule->native_target, "nniq.ConvAddReLU2d");
  EXPECT_EQ(rule->dequantized_args, (std::vector<int>{0, 1}));

  // The same declaration again (the file loaded twice) is fine.
  EXPECT_TRUE(LoadBackendConfigFile(kExample).ok());
}

TEST(DeclaredTypeTest, FusedEqualsUnfusedInFloat) {
  absl::StatusOr<BackendConfig> config = LoadBackendConfigFile(kExample);
  ASSERT_TRUE(config.ok()) << config.status();
  auto unfused = *BuildResidualExample(kResidualExampleSeed);
  auto fused = unfused->Clone();
  auto matcher = BuildFusionMatcher(*config);
  ASSERT_TRUE(matcher.ok()) << matcher.status();
  absl::StatusOr<int> count = FusePatterns(*fused, *matcher, config->module_schemas());
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(*count, 1);
  ASSERT_TRUE(fused->Verify().ok()) << fused->Verify();
  ASSERT_EQ(CallsOfType(*fused, kType).size(), 1u);
  EXPECT_EQ(CallsOfType(*fused, "nn.BatchNorm2d").size(), 0u);

  const Tensor x = RandomSamples(1, 3)[0][0];
  const Tensor want = RunOne(*unfused, x);
  const Tensor got = RunOne(*fused, x);
  ASSERT_EQ(got.numel(), want.numel());
  ASSERT_GT(want.numel(), 0);
  double max_abs = 0, max_err = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    max_abs = std::max(max_abs, std::fabs(double{want.data<float>()[i]}));
    max_err = std::max(max_err, std::fabs(double{got.data<float>()[i]} - want.data<float>()[i]));
  }
  ASSERT_GT(max_abs, 0.1);  // the block is not trivially zero
  EXPECT_LE(max_err, 1e-5 * max_abs) << "max error " << max_err << " of " << max_abs;
}

TEST(DeclaredTypeTest, QuantizesAndLowersWithBothInputsQuantizedLikeTheBuiltinType) {
  absl::StatusOr<BackendConfig> declared = LoadBackendConfigFile(kExample);
  ASSERT_TRUE(declared.ok()) << declared.status();
  absl::StatusOr<BackendConfig> builtin = ParseBackendConfigText(BuiltinEquivalentText(), kExample);
  ASSERT_TRUE(builtin.ok()) << builtin.status();
  const QConfigMapping mapping = *DefaultQConfigMapping("qnnpack");
  const std::vector<CalibrationSample> samples = RandomSamples(4, 1);

  auto float_model = *BuildResidualExample(kResidualExampleSeed);
  auto gm = float_model->Clone();
  absl::StatusOr<QuantizeFlowReport> report = RunQuantizeFlow(*gm, *declared, mapping, samples);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(gm->Verify().ok()) << gm->Verify();
  EXPECT_EQ(report->fused, 1);
  EXPECT_TRUE(report->lowering.unlowered.empty()) << report->lowering.ToString();
  EXPECT_EQ(report->lowering.lowered_per_rule["user-conv-bn-add-relu2d"], 1)
      << report->lowering.ToString();

  // One native op; neither of its inputs is a dequantize: x's quantize, and the identity
  // running on that quantized tensor.
  const std::vector<const Node*> blocks = CallsOfType(*gm, "nniq.ConvAddReLU2d");
  ASSERT_EQ(blocks.size(), 1u);
  ASSERT_EQ(blocks[0]->num_args(), 2u);
  for (int k = 0; k < 2; ++k) {
    const Node* in = blocks[0]->arg(k).as_node();
    EXPECT_NE(in->target().name(), "dequantize") << "arg " << k;
  }
  EXPECT_EQ(blocks[0]->arg(0).as_node()->target().name(), "torch.quantize_per_tensor");
  EXPECT_TRUE(CallsOfType(*gm, kType).empty());

  auto builtin_gm = float_model->Clone();
  absl::StatusOr<QuantizeFlowReport> builtin_report =
      RunQuantizeFlow(*builtin_gm, *builtin, mapping, samples);
  ASSERT_TRUE(builtin_report.ok()) << builtin_report.status();
  ASSERT_EQ(CallsOfType(*builtin_gm, "nniq.ConvAddReLU2d").size(), 1u);

  for (uint32_t seed : {11u, 12u}) {
    const Tensor x = RandomSamples(1, seed)[0][0];
    const Tensor got = RunOne(*gm, x);
    const Tensor same = RunOne(*builtin_gm, x);
    const Tensor reference = RunOne(*float_model, x);
    ASSERT_EQ(got.numel(), same.numel());
    ASSERT_EQ(got.numel(), reference.numel());
    int differing = 0;
    double signal = 0, noise = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      const float g = got.data<float>()[i];
      differing += g != same.data<float>()[i];
      const double r = reference.data<float>()[i];
      signal += r * r;
      noise += (g - r) * (g - r);
    }
    EXPECT_EQ(differing, 0) << "seed " << seed;
    const double sqnr_db = 10 * std::log10(signal / std::max(noise, 1e-30));
    EXPECT_GE(sqnr_db, 35.0) << "seed " << seed;  // measured: 45.8 to 46.4 dB through the CLI
  }
}

// The reference form (convert's output, child "0" an nnqr.Conv2d) runs through the
// composite kernel too, and agrees with the lowered native op to within one output step.
TEST(DeclaredTypeTest, ReferenceModelRunsThroughTheCompositeKernel) {
  absl::StatusOr<BackendConfig> declared = LoadBackendConfigFile(kExample);
  ASSERT_TRUE(declared.ok()) << declared.status();
  const QConfigMapping mapping = *DefaultQConfigMapping("qnnpack");
  const std::vector<CalibrationSample> samples = RandomSamples(4, 1);
  auto reference = *BuildResidualExample(kResidualExampleSeed);
  auto lowered = reference->Clone();
  QuantizeFlowOptions to_reference;
  to_reference.stop_at_reference = true;
  ASSERT_TRUE(RunQuantizeFlow(*reference, *declared, mapping, samples, to_reference).ok());
  ASSERT_TRUE(RunQuantizeFlow(*lowered, *declared, mapping, samples).ok());
  const std::vector<const Node*> blocks = CallsOfType(*reference, kType);
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(reference->FindModule(blocks[0]->target().name())->FindChild("0")->type().name(),
            "nnqr.Conv2d");

  const Tensor x = RandomSamples(1, 21)[0][0];
  const Tensor from_reference = RunOne(*reference, x);
  const Tensor from_native = RunOne(*lowered, x);
  ASSERT_EQ(from_reference.numel(), from_native.numel());
  ASSERT_GT(from_native.numel(), 0);
  // Both outputs lie on the output's quantization grid; rounding may differ by one step.
  double max_value = 0, max_diff = 0;
  for (int64_t i = 0; i < from_native.numel(); ++i) {
    max_value = std::max(max_value, double{from_native.data<float>()[i]});
    max_diff = std::max(max_diff, std::fabs(double{from_reference.data<float>()[i]} -
                                            from_native.data<float>()[i]));
  }
  const std::vector<const Node*> native = CallsOfType(*lowered, "nniq.ConvAddReLU2d");
  ASSERT_EQ(native.size(), 1u);
  const Argument* scale = lowered->FindModule(native[0]->target().name())->FindAttribute("scale");
  ASSERT_NE(scale, nullptr);
  ASSERT_TRUE(scale->is_float());
  ASSERT_GT(max_value, 10 * scale->as_float());  // the output is not all zero
  EXPECT_LE(max_diff, 1.001 * scale->as_float()) << "max diff " << max_diff;
}

// A config text holding one declaration, `body` inside fused_module_type { }.
std::string Declaring(absl::string_view body, absl::string_view extra = "") {
  return absl::StrCat("fused_module_type {\n", body, "\n}\n", extra);
}

constexpr char kValidBody[] = R"(
  name: "test.ConvAddRelu"
  child: "nn.Conv2d"  child: "nn.ReLU"
  num_inputs: 2
  step { child: 0 input { arg: 0 } }
  step { op: "add" input { step: 0 } input { arg: 1 } }
  step { child: 1 input { step: 1 } }
  observe_output: true)";

std::string ErrorOf(const std::string& text, absl::string_view source = "t.textproto") {
  absl::StatusOr<BackendConfig> config = ParseBackendConfigText(text, source);
  EXPECT_FALSE(config.ok());
  return config.ok() ? std::string("(loaded)") : std::string(config.status().message());
}

TEST(DeclaredTypeTest, LoadRefusesBadDeclarationsNamingEntryAndField) {
  auto with = [](absl::string_view from, absl::string_view to) {
    return Declaring(absl::StrReplaceAll(kValidBody, {{from, to}}));
  };
  EXPECT_THAT(ErrorOf(with("child: \"nn.ReLU\"", "child: \"nn.NoSuchThing\"")),
              HasSubstr("fused_module_type[0] 'test.ConvAddRelu': field 'child[1]': module "
                        "type 'nn.NoSuchThing' is not registered"));
  EXPECT_THAT(ErrorOf(with("input { arg: 1 }", "input { arg: 2 }")),
              HasSubstr("field 'step[1].input[1].arg': 2 is not one of the 2 inputs"));
  EXPECT_THAT(ErrorOf(with("input { step: 0 }", "input { step: 2 }")),
              HasSubstr("field 'step[1].input[0].step': 2 is not an earlier step"));
  EXPECT_THAT(ErrorOf(with("op: \"add\"", "op: \"frobnicate\"")),
              HasSubstr("field 'step[1].op': unknown op 'frobnicate'; expected one of add"));
  EXPECT_THAT(ErrorOf(with("name: \"test.ConvAddRelu\"", "name: \"nni.Mine\"")),
              HasSubstr("field 'name': namespace 'nni' is a built-in one"));
  EXPECT_THAT(ErrorOf(with("name: \"test.ConvAddRelu\"", "name: \"NoNamespace\"")),
              HasSubstr("field 'name': must be \"namespace.Type\""));
  EXPECT_THAT(ErrorOf(with("step { child: 1 input { step: 1 } }", "step { op: \"relu\" input { step: 1 } }")),
              HasSubstr("field 'child[1]': no step runs this child"));
  EXPECT_THAT(ErrorOf(with("observe_output: true", "observe_output: true observed_input: 1")),
              HasSubstr("field 'observed_input': observes 1 of the 2 inputs"));
  // A clash with a type registered in C++ (built-in types all live in refused namespaces).
  ModuleSchema registered;
  registered.type = "cpp.Registered";
  ASSERT_TRUE(ModuleSchemaRegistry::Global().Register(registered).ok());
  EXPECT_THAT(ErrorOf(with("name: \"test.ConvAddRelu\"", "name: \"cpp.Registered\"")),
              HasSubstr("fused_module_type[0] 'cpp.Registered': field 'name': clashes with a "
                        "built-in (or C++-registered) module type"));
  // The valid body itself loads (the errors above come from the one change each makes).
  EXPECT_TRUE(ParseBackendConfigText(Declaring(kValidBody), "t.textproto").ok());
}

TEST(DeclaredTypeTest, LoadRefusesBadLoweringRules) {
  const std::string type = Declaring(absl::StrReplaceAll(kValidBody, {{"test.ConvAddRelu", "test.Lowered"}}));
  auto rule = [&](absl::string_view body) {
    return absl::StrCat(type, "lowering_rule {\n", body, "\n}\n");
  };
  EXPECT_THAT(ErrorOf(rule(R"(name: "r" reference_module: "test.Lowered" quantized_arg: 0
      native_step { op: "nniq.NoSuchOp" from_child: 0 })")),
              HasSubstr("lowering_rule[0] 'r': field 'native_step[0].op': unknown native op "
                        "'nniq.NoSuchOp'"));
  EXPECT_THAT(ErrorOf(rule(R"(name: "r" reference_module: "user.Undeclared" quantized_arg: 0
      native_step { op: "nniq.ConvAddReLU2d" from_child: 0 })")),
              HasSubstr("field 'reference_module': 'user.Undeclared' is not a fused_module_type "
                        "this file declares"));
  EXPECT_THAT(ErrorOf(rule(R"(name: "r" reference_module: "test.Lowered" quantized_arg: 2
      native_step { op: "nniq.ConvAddReLU2d" from_child: 0 })")),
              HasSubstr("field 'quantized_arg[0]': 2 is not one of the 2 inputs"));
  EXPECT_THAT(ErrorOf(rule(R"(name: "r" reference_module: "test.Lowered" quantized_arg: 0
      native_step { op: "nnq.Conv2d" from_child: 0 })")),
              HasSubstr("nnq.Conv2d takes 1 to 1 inputs; test.Lowered has 2"));
}

// A rule of several native_steps (nnq.Conv2d from child 0, then quantized.add_relu):
// every malformed variant is refused naming rule and field, registering nothing; the
// well-formed one loads as a composition rule.
TEST(DeclaredTypeTest, LoadChecksCompositionsOfNativeOps) {
  const std::string type =
      Declaring(absl::StrReplaceAll(kValidBody, {{"test.ConvAddRelu", "test.Composed"}}));
  constexpr char kComposed[] = R"(name: "composed" reference_module: "test.Composed"
      quantized_arg: 0 quantized_arg: 1
      native_step { op: "nnq.Conv2d" from_child: 0 input { arg: 0 } qparams_of { arg: 1 } }
      native_step { op: "quantized.add_relu" input { step: 0 } input { arg: 1 } })";
  auto with = [&](absl::string_view from, absl::string_view to) {
    const std::string body = absl::StrReplaceAll(kComposed, {{from, to}});
    EXPECT_NE(body, kComposed) << "'" << from << "' is not in the rule";
    return absl::StrCat(type, "lowering_rule {\n", body, "\n}\n");
  };
  const std::string prefix = "t.textproto: lowering_rule[0] 'composed': ";
  EXPECT_THAT(ErrorOf(with("op: \"quantized.add_relu\"", "op: \"quantized.frobnicate\"")),
              HasSubstr(prefix + "field 'native_step[1].op': unknown native op "
                                 "'quantized.frobnicate'; expected a registered nnq.* / nniq.* "
                                 "module type or one of quantized.add, quantized.add_relu"));
  EXPECT_THAT(ErrorOf(with("input { step: 0 } input { arg: 1 }",
                           "input { step: 1 } input { arg: 1 }")),
              HasSubstr(prefix + "field 'native_step[1].input[0].step': 1 is not an earlier step"));
  EXPECT_THAT(ErrorOf(with("quantized_arg: 1", "")),
              HasSubstr(prefix + "field 'native_step[0].qparams_of.arg': 1 is not one of the "
                                 "quantized_arg (0)"));
  EXPECT_THAT(ErrorOf(with(" qparams_of { arg: 1 }", "")),
              HasSubstr(prefix + "field 'native_step[0].qparams_of': an intermediate value "
                                 "needs the observed value whose quantization parameters it "
                                 "takes ({ step: k } an observed_step of the type, or "
                                 "{ arg: i })"));
  EXPECT_THAT(ErrorOf(with("input { arg: 1 } }", "input { arg: 1 } qparams_of { arg: 0 } }")),
              HasSubstr(prefix + "field 'native_step[1].qparams_of': the last step's value is "
                                 "the output"));
  EXPECT_THAT(ErrorOf(with("input { step: 0 } input { arg: 1 }",
                           "input { arg: 0 } input { arg: 1 }")),
              HasSubstr(prefix + "field 'native_step[0]': no later step reads its value"));
  EXPECT_THAT(ErrorOf(with("input { step: 0 } input { arg: 1 }", "input { step: 0 }")),
              HasSubstr(prefix + "field 'native_step[1].input': quantized.add_relu takes 2 "
                                 "inputs; 1 given"));
  EXPECT_THAT(ErrorOf(with("op: \"quantized.add_relu\"",
                           "op: \"quantized.add_relu\" from_child: 0")),
              HasSubstr(prefix + "field 'native_step[1].from_child': quantized.add_relu is a "
                                 "function; it takes no child's weights"));
  EXPECT_THAT(ErrorOf(with("from_child: 0 input { arg: 0 }", "from_child: 1 input { arg: 0 }")),
              HasSubstr(prefix + "field 'native_step[0].from_child[0]': 1 is not a child of "
                                 "test.Composed with a reference form"));
  EXPECT_THAT(ErrorOf(with("from_child: 0 input { arg: 0 }", "input { arg: 0 }")),
              HasSubstr(prefix + "field 'native_step[0].from_child': a native module is built "
                                 "from exactly one child's weights"));
  EXPECT_THAT(ErrorOf(with("input { arg: 0 } qparams",
                           "input { arg: 0 } input { arg: 1 } qparams")),
              HasSubstr(prefix + "field 'native_step[0].input': nnq.Conv2d takes 1 to 1 inputs; "
                                 "2 given"));
  EXPECT_THAT(ErrorOf(with("from_child: 0 input { arg: 0 } ", "from_child: 0 ")),
              HasSubstr(prefix + "field 'native_step[0].input': a step of a composition lists "
                                 "its inputs"));
  EXPECT_THAT(ErrorOf(with("input { step: 0 } input { arg: 1 }", "input { step: 0 } input { }")),
              HasSubstr(prefix + "field 'native_step[1].input[1]': names neither an arg nor a "
                                 "step"));
  // A rule with no native_step at all.
  EXPECT_THAT(ErrorOf(absl::StrCat(type, R"(lowering_rule { name: "composed"
      reference_module: "test.Composed" quantized_arg: 0 })")),
              HasSubstr(prefix + "field 'native_step': needs at least one native op"));
  // Well formed: loads, the config holding the type and a composition rule
  // (declared_composition_test lowers and runs one).
  absl::StatusOr<BackendConfig> config = ParseBackendConfigText(
      absl::StrCat(type, "lowering_rule {\n", kComposed, "\n}\n"), "t.textproto");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_NE(config->module_schemas().Find(Symbol::Lookup("test.Composed")), nullptr);
  LoweringRuleRegistry rules;
  ASSERT_TRUE(RegisterDeclaredLoweringRules(rules, config->declared_lowering_rules()).ok());
  const LoweringRule* rule = rules.FindByName("composed");
  ASSERT_NE(rule, nullptr);
  EXPECT_EQ(rule->action, LoweringRule::Action::kNativeComposition);
  EXPECT_EQ(rule->composition.size(), 2u);
}

// Declarations are scoped to their config: two configs may declare one name differently,
// each config knowing its own (nothing process-wide).
TEST(DeclaredTypeTest, TwoConfigsDeclareOneNameDifferentlyEachItsOwn) {
  const std::string first = Declaring(absl::StrReplaceAll(kValidBody, {{"test.ConvAddRelu", "test.Twice"}}));
  const std::string second = absl::StrReplaceAll(first, {{"op: \"add\"", "op: \"mul\""}});
  absl::StatusOr<BackendConfig> a = ParseBackendConfigText(first, "first.textproto");
  absl::StatusOr<BackendConfig> b = ParseBackendConfigText(second, "second.textproto");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  const Symbol type = Symbol::Intern("test.Twice");
  EXPECT_EQ(a->module_schemas().Find(type)->composition->steps[1].function, "operator.add");
  EXPECT_EQ(b->module_schemas().Find(type)->composition->steps[1].function, "operator.mul");
  EXPECT_EQ(ModuleSchemaRegistry::Global().Find(type), nullptr);
  // A name declared twice in one file is refused.
  absl::StatusOr<BackendConfig> twice =
      ParseBackendConfigText(absl::StrCat(first, first), "twice.textproto");
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(twice.status().message(),
              HasSubstr("twice.textproto: fused_module_type[1] 'test.Twice': field 'name': "
                        "declared twice in this file"));
}

TEST(DeclaredTypeTest, ConcurrentLoadsOfOneDeclarationAllSucceed) {
  const std::string text = Declaring(absl::StrReplaceAll(kValidBody, {{"test.ConvAddRelu", "test.Threads"}}));
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      if (ParseBackendConfigText(text, absl::StrCat("thread", t)).ok()) ++ok;
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(ok.load(), 8);
}

// A model file carries each declared module's steps: a module of a type no loaded config
// declares runs by its steps, with no config; one with neither steps nor schema is refused.
TEST(DeclaredTypeTest, ModuleOfAnUndeclaredTypeRunsByItsSteps) {
  GraphModule gm;
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* r = *gm.graph().AddPlaceholder("residual");
  auto block = std::make_unique<Module>("elsewhere.NeverDeclared");
  block->SetChild("0", std::make_unique<Module>("nn.ReLU"));
  ASSERT_TRUE(gm.SetModule("block", std::move(block)).ok());
  Node* y = *gm.graph().AddCallModule("block", {x, r});
  ASSERT_TRUE(gm.graph().SetOutput(Argument(y)).ok());
  const absl::Status unknown = gm.Verify();
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.message(), HasSubstr("unknown module type 'elsewhere.NeverDeclared'"));

  // relu(x + residual), as fusion writes a declared type's steps.
  const auto ref = [](const char* tag, int i) {
    return Argument::Tuple({Argument::String(tag), Argument::Int(i)});
  };
  Module* m = gm.FindModule("block");
  m->SetAttribute(kStepsAttribute,
                  Argument::List({Argument::Tuple({Argument::String("call_function"),
                                                   Argument::String("operator.add"),
                                                   Argument::List({ref("input", 0), ref("input", 1)}),
                                                   Argument::List({})}),
                                  Argument::Tuple({Argument::String("call_module"),
                                                   Argument::String("0"),
                                                   Argument::List({ref("step", 0)}),
                                                   Argument::List({})})}));
  m->SetAttribute(kOutputsAttribute, Argument::List({Argument::Int(1)}));
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  auto kernels = BuiltinKernels();
  ASSERT_TRUE(kernels.ok());
  absl::StatusOr<std::vector<Value>> out =
      fuselage::Run(gm, {Tensor::FromFloats({1, 4}, {1, -2, 3, -4}), Tensor::FromFloats({1, 4}, {-2, 1, 1, 1})},
          **kernels);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 1u);
  const std::vector<float> expected = {0, 0, 4, 0};  // relu(x + residual), by hand
  const Tensor& t = (*out)[0].as_tensor();
  ASSERT_EQ(t.numel(), 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(t.data<float>()[i], expected[i]) << i;
}

// With its config, a module's steps must be its declaration's: one fused under another
// declaration of the same name is refused by prepare and lowering, naming the config;
// without a config it runs by the steps it carries.
TEST(DeclaredTypeTest, StepsThatDifferFromTheConfigsDeclarationAreRefused) {
  absl::StatusOr<BackendConfig> config = LoadBackendConfigFile(kExample);
  ASSERT_TRUE(config.ok()) << config.status();
  auto gm = *BuildResidualExample(kResidualExampleSeed);
  ASSERT_TRUE(FuseModel(*gm, *config).ok());
  const std::vector<const Node*> blocks = CallsOfType(*gm, kType);
  ASSERT_EQ(blocks.size(), 1u);
  Module* block = gm->FindModule(blocks[0]->target().name());
  ASSERT_TRUE(CheckDeclaredModules(*gm, config->declarations().get()).ok());
  const Argument steps = *block->FindAttribute(kStepsAttribute);
  std::vector<Argument> shorter(steps.items().begin(), steps.items().end() - 1);
  block->SetAttribute(kStepsAttribute, Argument::List(std::move(shorter)));
  block->SetAttribute(kOutputsAttribute, Argument::List({Argument::Int(1)}));
  EXPECT_TRUE(gm->Verify().ok()) << gm->Verify();

  const absl::Status checked = CheckDeclaredModules(*gm, config->declarations().get());
  ASSERT_FALSE(checked.ok());
  EXPECT_THAT(checked.message(), HasSubstr("its steps differ from the declaration of '"));
  EXPECT_THAT(checked.message(), HasSubstr(kExample));
  const absl::StatusOr<PrepareReport> prepared =
      PrepareModel(*gm, *DefaultQConfigMapping("qnnpack"), *config);
  ASSERT_FALSE(prepared.ok());
  EXPECT_THAT(prepared.status().message(), HasSubstr("its steps differ from the declaration"));
}

// A config may not declare a type in a built-in namespace (InBuiltinNamespace).
TEST(DeclaredTypeTest, ATypeInABuiltinNamespaceCannotBeDeclared) {
  for (const char* type : {"nn.NotAModule", "math.NotAModule", "F.NotAModule"}) {
    const std::string text = Declaring(absl::StrReplaceAll(kValidBody, {{"test.ConvAddRelu", type}}));
    const auto declared = ParseBackendConfigText(text, "builtin_namespace.textproto");
    ASSERT_FALSE(declared.ok()) << type;
    EXPECT_THAT(declared.status().message(), HasSubstr("is a built-in one")) << type;
  }
}

// Fusing through the flow writes the declaration's steps on the fused module: those of
// the example's fused_module_type, written out by hand.
TEST(DeclaredTypeTest, FusionWritesTheDeclaredSteps) {
  absl::StatusOr<BackendConfig> declared = LoadBackendConfigFile(kExample);
  ASSERT_TRUE(declared.ok()) << declared.status();
  auto gm = *BuildResidualExample(kResidualExampleSeed);
  QuantizeFlowOptions options;
  bool checked = false;
  options.on_stage = [&](absl::string_view stage, const GraphModule& g) {
    if (stage != "fuse") return absl::OkStatus();
    const std::vector<const Node*> blocks = CallsOfType(g, kType);
    EXPECT_EQ(blocks.size(), 1u);
    if (blocks.size() != 1) return absl::OkStatus();
    const Module* block = g.FindModule(blocks[0]->target().name());
    const Argument* steps = block->FindAttribute(kStepsAttribute);
    const Argument* outputs = block->FindAttribute(kOutputsAttribute);
    EXPECT_NE(steps, nullptr);
    EXPECT_NE(outputs, nullptr);
    if (steps == nullptr || outputs == nullptr) return absl::OkStatus();
    EXPECT_EQ(steps->ToString(),
              "[('call_module', '0', [('input', 0)], []), "
              "('call_function', 'operator.add', [('step', 0), ('input', 1)], []), "
              "('call_module', '1', [('step', 1)], [])]");
    EXPECT_EQ(outputs->ToString(), "[2]");
    checked = true;
    return absl::OkStatus();
  };
  ASSERT_TRUE(RunQuantizeFlow(*gm, *declared, *DefaultQConfigMapping("qnnpack"),
                              RandomSamples(2, 1), options)
                  .ok());
  EXPECT_TRUE(checked);
}

}  // namespace
}  // namespace fuselage
