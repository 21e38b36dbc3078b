// Issue 21 item 4, a declared lowering rule of several native ops:
// backend_configs/examples/conv_add_relu_composed.textproto lowers its declared
// user.ConvBnAddReLU2dComposed to nnq.Conv2d (from child "0", its value quantized with the
// parameters observed on the type's step 0, qparams_of { step: 0 }) then
// torch.ops.quantized.add_relu, both inputs read quantized. Checked on the residual
// example: the lowered graph's structure and parameters; the same bytes as the built-in
// qnnpack config, which quantizes the (bn-folded) conv with its own output observer and
// add_relu apart; its numerics against the reference model's float emulation; and the
// refusals (qparams_of naming a missing, the last, or an unobserved step; a composition
// whose child is not the expected reference module, which leaves the graph unchanged).
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backend_configs/builtin_configs.h"
#include "backend_configs/config_loader.h"
#include "gmock/gmock.h"
#include "graph/graph_module.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"
#include "lowering/lower_to_native.h"
#include "lowering/declared_lowering.h"
#include "lowering/lowering_rule.h"
#include "pipeline/quantize_flow.h"
#include "pipeline/stages.h"
#include "quantize/qconfig.h"
#include "runtime/builtin_kernels.h"
#include "runtime/interpreter.h"
#include "runtime/quantized_engine.h"
#include "tests/backend_configs/declared_test_util.h"
#include "tools/examples.h"

namespace fuselage {
namespace {

using ::testing::HasSubstr;

constexpr char kExample[] = "backend_configs/examples/conv_add_relu_composed.textproto";
constexpr char kType[] = "user.ConvBnAddReLU2dComposed";
constexpr char kRule[] = "user-conv-bn-add-relu2d-composed";

std::vector<const Node*> CallsOfFunction(const GraphModule& gm, absl::string_view target) {
  std::vector<const Node*> found;
  for (const Node* n : gm.graph().Nodes()) {
    if (n->op() == OpKind::kCallFunction && n->target().name() == target) found.push_back(n);
  }
  return found;
}

// Every node as "name op target(args)", one a line: what a lowering would change.
std::string NodesText(const GraphModule& gm) {
  std::string text;
  for (const Node* n : gm.graph().Nodes()) {
    std::vector<std::string> args;
    for (const Argument& a : n->args()) args.push_back(a.ToString());
    absl::StrAppend(&text, n->name(), " ", OpKindName(n->op()), " ", n->target().name(), "(",
                    absl::StrJoin(args, ", "), ")\n");
  }
  return text;
}

class DeclaredCompositionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<BackendConfig> config = LoadBackendConfigFile(kExample);
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = std::make_unique<BackendConfig>(*std::move(config));
  }
  // The residual example quantized by the example config: to the reference model
  // (stop_at_reference) or lowered.
  std::unique_ptr<GraphModule> Quantized(bool lower, QuantizeFlowReport* report = nullptr) {
    auto gm = *BuildResidualExample(kResidualExampleSeed);
    QuantizeFlowOptions options;
    options.stop_at_reference = !lower;
    absl::StatusOr<QuantizeFlowReport> result = RunQuantizeFlow(
        *gm, *config_, *DefaultQConfigMapping("qnnpack"), RandomSamples(4, 1), options);
    EXPECT_TRUE(result.ok()) << result.status();
    if (result.ok() && report != nullptr) *report = *result;
    return gm;
  }
  std::unique_ptr<BackendConfig> config_;
};

TEST_F(DeclaredCompositionTest, RuleLoadsAsAComposition) {
  LoweringRuleRegistry rules;
  ASSERT_TRUE(RegisterNativeLoweringRules(rules).ok());
  ASSERT_TRUE(RegisterDeclaredLoweringRules(rules, config_->declared_lowering_rules()).ok());
  const LoweringRule* rule = rules.FindByName(kRule);
  ASSERT_NE(rule, nullptr);
  EXPECT_EQ(rule->action, LoweringRule::Action::kNativeComposition);
  EXPECT_EQ(rule->reference_target, kType);
  EXPECT_EQ(rule->dequantized_args, (std::vector<int>{0, 1}));
  ASSERT_EQ(rule->composition.size(), 2u);
  EXPECT_EQ(rule->composition[0].native_target, "nnq.Conv2d");
  EXPECT_FALSE(rule->composition[0].is_function);
  EXPECT_EQ(rule->composition[0].from_child, 0);
  EXPECT_EQ(rule->composition[0].child_type, "nnqr.Conv2d");
  EXPECT_EQ(rule->composition[0].qparams_of_step, 0);
  EXPECT_EQ(rule->composition[0].qparams_of_arg, -1);
  EXPECT_EQ(rule->composition[1].native_target, "torch.ops.quantized.add_relu");
  EXPECT_TRUE(rule->composition[1].is_function);
  ASSERT_EQ(rule->composition[1].inputs.size(), 2u);
  EXPECT_TRUE(rule->composition[1].inputs[0].from_step);
  EXPECT_EQ(rule->composition[1].inputs[0].index, 0);
  EXPECT_FALSE(rule->composition[1].inputs[1].from_step);
  EXPECT_EQ(rule->composition[1].inputs[1].index, 1);
}

TEST_F(DeclaredCompositionTest, LowersToConvThenAddReluReadingBothInputsQuantized) {
  QuantizeFlowReport report;
  auto gm = Quantized(/*lower=*/true, &report);
  ASSERT_TRUE(gm->Verify().ok()) << gm->Verify();
  EXPECT_TRUE(report.lowering.unlowered.empty()) << report.lowering.ToString();
  EXPECT_EQ(report.lowering.lowered_per_rule[kRule], 1) << report.lowering.ToString();
  EXPECT_TRUE(CallsOfType(*gm, kType).empty());

  const std::vector<const Node*> convs = CallsOfType(*gm, "nnq.Conv2d");
  const std::vector<const Node*> adds = CallsOfFunction(*gm, "torch.ops.quantized.add_relu");
  ASSERT_EQ(convs.size(), 1u);
  ASSERT_EQ(adds.size(), 1u);
  const Node* conv = convs[0];
  const Node* add = adds[0];
  // conv(x_q); add_relu(conv, residual_q, scale, zero_point): no dequantize before either.
  ASSERT_EQ(conv->num_args(), 1u);
  const Node* x_q = conv->arg(0).as_node();
  EXPECT_EQ(x_q->target().name(), "torch.quantize_per_tensor");
  ASSERT_EQ(add->num_args(), 4u);
  EXPECT_EQ(add->arg(0).as_node(), conv);
  const Node* residual_q = add->arg(1).as_node();
  EXPECT_EQ(residual_q->target().name(), "torch.quantize_per_tensor");
  // The conv's value takes the parameters convert recorded for the type's observed
  // step 0 (qparams_of { step: 0 }), not the residual's.
  auto reference = Quantized(/*lower=*/false);
  const std::vector<const Node*> fused = CallsOfType(*reference, kType);
  ASSERT_EQ(fused.size(), 1u);
  const Module* fused_module = reference->FindModule(fused[0]->target().name());
  ASSERT_NE(fused_module, nullptr);
  EXPECT_EQ(fused_module->FindAttribute("step_0_observer"), nullptr);
  const Argument* step_scale = fused_module->FindAttribute("step_0_scale");
  const Argument* step_zero_point = fused_module->FindAttribute("step_0_zero_point");
  ASSERT_NE(step_scale, nullptr);
  ASSERT_NE(step_zero_point, nullptr);
  const Module* conv_module = gm->FindModule(conv->target().name());
  ASSERT_NE(conv_module, nullptr);
  ASSERT_NE(conv_module->FindAttribute("scale"), nullptr);
  EXPECT_DOUBLE_EQ(conv_module->FindAttribute("scale")->as_float(), step_scale->as_float());
  EXPECT_EQ(conv_module->FindAttribute("zero_point")->as_int(), step_zero_point->as_int());
  const std::optional<OutputQParams> residual = KnownOutputQParams(*gm, residual_q);
  ASSERT_TRUE(residual.has_value());
  EXPECT_NE(step_scale->as_float(), residual->scale);
  const std::optional<OutputQParams> conv_out = KnownOutputQParams(*gm, conv);
  ASSERT_TRUE(conv_out.has_value());
  EXPECT_DOUBLE_EQ(conv_out->scale, step_scale->as_float());
  EXPECT_EQ(conv_out->zero_point, step_zero_point->as_int());
  // add_relu's output parameters are those of the quantize it replaced: read off the
  // reference model, whose quantize after the fused module holds them.
  ASSERT_EQ(fused[0]->users().size(), 1u);
  const std::optional<OutputQParams> output =
      KnownOutputQParams(*reference, fused[0]->users()[0]);
  ASSERT_TRUE(output.has_value());
  EXPECT_DOUBLE_EQ(add->arg(2).as_float(), output->scale);
  EXPECT_EQ(add->arg(3).as_int(), output->zero_point);

  // The lowered model names native types only: saved and read back, it runs the same.
  absl::StatusOr<std::unique_ptr<GraphModule>> loaded = ParseModel(SerializeModel(*gm));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Tensor x = RandomSamples(1, 5)[0][0];
  const Tensor before = RunOne(*gm, x);
  const Tensor after = RunOne(**loaded, x);
  ASSERT_EQ(before.numel(), after.numel());
  ASSERT_GT(before.numel(), 0);
  for (int64_t i = 0; i < before.numel(); ++i) {
    ASSERT_EQ(before.data<float>()[i], after.data<float>()[i]) << "element " << i;
  }
}

// The reference model with its fused call written out as the composition's float
// emulation: conv (the reference nnqr.Conv2d child, weight fake-quantized), its value
// quantized with the parameters convert recorded for step 0 (step_0_scale, step_0_zero_point)
// and dequantized, + residual, relu, then the
// reference's own output quantize. Independent of the lowering pass and of the native
// kernels; the lowered model must agree with it up to rounding of the integer conv.
std::unique_ptr<GraphModule> FloatEmulation(std::unique_ptr<GraphModule> reference) {
  Graph& g = reference->graph();
  std::vector<const Node*> fused = CallsOfType(*reference, kType);
  EXPECT_EQ(fused.size(), 1u);
  if (fused.size() != 1) return nullptr;
  Node* call = const_cast<Node*>(fused[0]);
  Node* x_dq = call->arg(0).as_node();
  Node* residual_dq = call->arg(1).as_node();
  Node* residual_q = residual_dq->arg(0).as_node();  // residual_q.dequantize()
  EXPECT_EQ(residual_q->target().name(), "torch.quantize_per_tensor");
  const std::string child = absl::StrCat(call->target().name(), ".0");
  auto insert = [&](OpKind op, absl::string_view target, NodeArgs args) {
    absl::StatusOr<Node*> n =
        g.InsertBefore(call, NodeSpec{op, Symbol::Intern(target), std::move(args), {}, {}});
    EXPECT_TRUE(n.ok()) << n.status();
    return n.ok() ? *n : nullptr;
  };
  const Module* fused_module = reference->FindModule(call->target().name());
  const Argument* step_scale = fused_module->FindAttribute("step_0_scale");
  const Argument* step_zero_point = fused_module->FindAttribute("step_0_zero_point");
  EXPECT_NE(step_scale, nullptr);
  EXPECT_NE(step_zero_point, nullptr);
  if (step_scale == nullptr || step_zero_point == nullptr) return nullptr;
  Node* conv = insert(OpKind::kCallModule, child, {Argument(x_dq)});
  Node* conv_q = insert(OpKind::kCallFunction, "torch.quantize_per_tensor",
                        {Argument(conv), *step_scale, *step_zero_point, residual_q->arg(3)});
  Node* conv_dq = insert(OpKind::kCallMethod, "dequantize", {Argument(conv_q)});
  Node* sum = insert(OpKind::kCallFunction, "operator.add",
                     {Argument(conv_dq), Argument(residual_dq)});
  Node* relu = insert(OpKind::kCallFunction, "torch.relu", {Argument(sum)});
  EXPECT_TRUE(g.ReplaceAllUsesWith(call, relu).ok());
  EXPECT_TRUE(g.Erase(call).ok());
  EXPECT_TRUE(reference->Verify().ok()) << reference->Verify();
  return reference;
}

TEST_F(DeclaredCompositionTest, LoweredEqualsTheFloatEmulationOfTheComposition) {
  auto lowered = Quantized(/*lower=*/true);
  auto emulation = FloatEmulation(Quantized(/*lower=*/false));
  ASSERT_NE(emulation, nullptr);
  const std::vector<const Node*> adds =
      CallsOfFunction(*lowered, "torch.ops.quantized.add_relu");
  ASSERT_EQ(adds.size(), 1u);
  const double output_step = adds[0]->arg(2).as_float();
  const double mid_step =
      lowered->FindModule(CallsOfType(*lowered, "nnq.Conv2d")[0]->target().name())
          ->FindAttribute("scale")
          ->as_float();
  for (uint32_t seed : {11u, 12u}) {
    const Tensor x = RandomSamples(1, seed)[0][0];
    const Tensor got = RunOne(*lowered, x);
    const Tensor want = RunOne(*emulation, x);
    ASSERT_EQ(got.numel(), want.numel());
    ASSERT_GT(got.numel(), 0);
    int64_t differing = 0;
    double max_diff = 0, max_value = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      const double d = std::fabs(double{got.data<float>()[i]} - want.data<float>()[i]);
      differing += d > 0;
      max_diff = std::max(max_diff, d);
      max_value = std::max(max_value, double{want.data<float>()[i]});
    }
    ASSERT_GT(max_value, 10 * output_step) << "seed " << seed;  // not all zero
    // The integer conv could round the intermediate differently from the float one only
    // at ties or by float error (then one intermediate step, at most one output step);
    // measured: none, the outputs are equal element for element.
    EXPECT_LE(max_diff, output_step + mid_step + 1e-6) << "seed " << seed;
    EXPECT_EQ(differing, 0) << "seed " << seed << ": " << differing << " of " << got.numel()
                            << " differ, by up to " << max_diff;
  }
}

// A reference module whose child "0" is not the reference conv the rule builds from: the
// pattern stays as it was (graph and module unchanged) and the report names the node,
// the rule, the child and what was expected.
TEST_F(DeclaredCompositionTest, WrongChildLeavesThePatternUnloweredAndSaysWhy) {
  auto gm = Quantized(/*lower=*/false);
  const std::vector<const Node*> fused = CallsOfType(*gm, kType);
  ASSERT_EQ(fused.size(), 1u);
  const std::string path(fused[0]->target().name());
  Module* module = gm->FindModule(path);
  ASSERT_NE(module, nullptr);
  // Child "0" replaced by its float form (as if convert had not run on it).
  const Module* conv = module->FindChild("0");
  ASSERT_NE(conv, nullptr);
  std::unique_ptr<Module> float_conv = conv->Clone();
  float_conv->set_type(Symbol::Intern("nn.Conv2d"));
  ASSERT_TRUE(gm->SetModule(path + ".0", std::move(float_conv)).ok());
  const std::string before = NodesText(*gm);

  LoweringRuleRegistry rules;
  ASSERT_TRUE(RegisterNativeLoweringRules(rules).ok());
  ASSERT_TRUE(RegisterDeclaredLoweringRules(rules, config_->declared_lowering_rules()).ok());
  absl::StatusOr<LoweringReport> report = LowerToNative(*gm, rules);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->lowered_per_rule[kRule], 0);
  ASSERT_EQ(CallsOfType(*gm, kType).size(), 1u);
  EXPECT_TRUE(CallsOfFunction(*gm, "torch.ops.quantized.add_relu").empty());
  bool reported = false;
  for (const LoweringReport::Unlowered& u : report->unlowered) {
    if (u.target != kType) continue;
    reported = true;
    EXPECT_EQ(u.node, fused[0]->name());
    EXPECT_THAT(u.reason, HasSubstr(absl::StrCat("rule '", kRule, "'")));
    EXPECT_THAT(u.reason, HasSubstr("native step 0 (nnq.Conv2d) is built from child '0' of " +
                                    std::string(kType) + ", which is nn.Conv2d; expected "
                                    "nnqr.Conv2d"));
  }
  EXPECT_TRUE(reported) << report->ToString();
  EXPECT_EQ(NodesText(*gm), before);
  EXPECT_EQ(gm->FindModule(path), module);
  EXPECT_EQ(module->type().name(), kType);
}

// The honest reference for the observed intermediate: the built-in qnnpack config on the
// same model and calibration data, which folds the batch norm into the conv and
// quantizes the conv (with its own output observer) and add_relu apart, lowered to
// nnq.Conv2d then quantized.add_relu. The declared composition must give the same
// parameters at every step and the same output bytes.
TEST_F(DeclaredCompositionTest, ObservedIntermediateGivesTheBytesOfTheUnfusedBuiltInPath) {
  auto composed = Quantized(/*lower=*/true);
  absl::StatusOr<BackendConfig> qnnpack = GetBackendConfig("qnnpack");
  ASSERT_TRUE(qnnpack.ok()) << qnnpack.status();
  auto builtin = *BuildResidualExample(kResidualExampleSeed);
  absl::StatusOr<QuantizeFlowReport> result = RunQuantizeFlow(
      *builtin, *qnnpack, *DefaultQConfigMapping("qnnpack"), RandomSamples(4, 1), {});
  ASSERT_TRUE(result.ok()) << result.status();

  const std::vector<const Node*> composed_convs = CallsOfType(*composed, "nnq.Conv2d");
  const std::vector<const Node*> builtin_convs = CallsOfType(*builtin, "nnq.Conv2d");
  ASSERT_EQ(composed_convs.size(), 1u);
  ASSERT_EQ(builtin_convs.size(), 1u) << NodesText(*builtin);
  const Module* a = composed->FindModule(composed_convs[0]->target().name());
  const Module* b = builtin->FindModule(builtin_convs[0]->target().name());
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  // The conv's output parameters: the built-in path's come from its own observer.
  EXPECT_EQ(a->FindAttribute("scale")->as_float(), b->FindAttribute("scale")->as_float());
  EXPECT_EQ(a->FindAttribute("zero_point")->as_int(), b->FindAttribute("zero_point")->as_int());
  const std::vector<const Node*> composed_adds =
      CallsOfFunction(*composed, "torch.ops.quantized.add_relu");
  const std::vector<const Node*> builtin_adds =
      CallsOfFunction(*builtin, "torch.ops.quantized.add_relu");
  ASSERT_EQ(composed_adds.size(), 1u);
  ASSERT_EQ(builtin_adds.size(), 1u) << NodesText(*builtin);
  EXPECT_EQ(composed_adds[0]->arg(2).as_float(), builtin_adds[0]->arg(2).as_float());
  EXPECT_EQ(composed_adds[0]->arg(3).as_int(), builtin_adds[0]->arg(3).as_int());
  // The qnnpack config records its engine in the model; the example config (no base)
  // records none. Compared under each engine's requantization arithmetic, named.
  for (const auto& [seed, engine] :
       std::vector<std::pair<uint32_t, QuantizedEngine>>{{21u, QuantizedEngine::kOnednn},
                                                         {22u, QuantizedEngine::kOnednn},
                                                         {22u, QuantizedEngine::kQnnpack},
                                                         {23u, QuantizedEngine::kQnnpack}}) {
    const Tensor x = RandomSamples(1, seed)[0][0];
    const Tensor got = RunOne(*composed, x, engine);
    const Tensor want = RunOne(*builtin, x, engine);
    ASSERT_EQ(got.numel(), want.numel());
    ASSERT_GT(got.numel(), 0);
    int64_t differing = 0;
    float max_value = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      differing += got.data<float>()[i] != want.data<float>()[i];
      max_value = std::max(max_value, want.data<float>()[i]);
    }
    EXPECT_GT(max_value, 0.0f) << "seed " << seed;  // not all zero
    EXPECT_EQ(differing, 0) << "seed " << seed << ": " << differing << " of " << got.numel();
  }
}

// The stages one at a time with the model saved and read back between each, as the
// CLI runs them (`fuselage fuse`, `prepare`, `calibrate`, `convert`, `lower`): the step's
// observer travels in the file (an observer module named by the fused module's
// step_0_observer attribute), and the lowered model is the in-memory flow's.
TEST_F(DeclaredCompositionTest, StagesThroughModelFilesGiveTheInMemoryResult) {
  auto in_memory = Quantized(/*lower=*/true);
  auto gm = *BuildResidualExample(kResidualExampleSeed);
  auto reload = [](const GraphModule& model) {
    absl::StatusOr<std::unique_ptr<GraphModule>> loaded = ParseModel(SerializeModel(model));
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return loaded.ok() ? *std::move(loaded) : nullptr;
  };
  ASSERT_TRUE(FuseModel(*gm, *config_).ok());
  gm = reload(*gm);
  ASSERT_NE(gm, nullptr);
  ASSERT_TRUE(PrepareModel(*gm, *DefaultQConfigMapping("qnnpack"), *config_).ok());
  gm = reload(*gm);
  ASSERT_NE(gm, nullptr);
  const std::vector<const Node*> fused = CallsOfType(*gm, kType);
  ASSERT_EQ(fused.size(), 1u);
  const Argument* observer_path =
      gm->FindModule(fused[0]->target().name())->FindAttribute("step_0_observer");
  ASSERT_NE(observer_path, nullptr);
  ASSERT_NE(gm->FindModule(observer_path->as_string()), nullptr);
  absl::StatusOr<CalibrationReport> calibrated = CalibrateModel(*gm, RandomSamples(4, 1));
  ASSERT_TRUE(calibrated.ok()) << calibrated.status();
  EXPECT_TRUE(calibrated->unobserved.empty());
  gm = reload(*gm);
  ASSERT_NE(gm, nullptr);
  absl::StatusOr<ConvertReport> converted = ConvertModel(*gm);
  ASSERT_TRUE(converted.ok()) << converted.status();
  gm = reload(*gm);
  ASSERT_NE(gm, nullptr);
  absl::StatusOr<LoweringReport> lowered = LowerModel(*gm, config_.get());
  ASSERT_TRUE(lowered.ok()) << lowered.status();
  EXPECT_EQ(lowered->lowered_per_rule[kRule], 1) << lowered->ToString();
  EXPECT_EQ(NodesText(*gm), NodesText(*in_memory));
  const Tensor x = RandomSamples(1, 31)[0][0];
  const Tensor got = RunOne(*gm, x);
  const Tensor want = RunOne(*in_memory, x);
  ASSERT_EQ(got.numel(), want.numel());
  ASSERT_GT(got.numel(), 0);
  for (int64_t i = 0; i < got.numel(); ++i) {
    ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << "element " << i;
  }
}

// A composed type and rule as text, with the rule's qparams_of and the type's
// observed_step given; the type name is fresh per use (a refused file registers nothing).
std::string ComposedConfig(absl::string_view type, absl::string_view observed_step,
                           absl::string_view qparams_of) {
  return absl::StrCat(R"pb(
    name: "composed_errors"
    fused_module_type {
      name: ")pb", type, R"pb("
      child: "nn.Conv2d"
      child: "nn.ReLU"
      num_inputs: 2
      step { child: 0 input { arg: 0 } }
      step { op: "add" input { step: 0 } input { arg: 1 } }
      step { child: 1 input { step: 1 } }
      observe_output: true
      )pb", observed_step, R"pb(
    }
    lowering_rule {
      name: ")pb", type, R"pb(-rule"
      reference_module: ")pb", type, R"pb("
      quantized_arg: 0
      quantized_arg: 1
      native_step { op: "nnq.Conv2d" from_child: 0 input { arg: 0 } )pb", qparams_of, R"pb( }
      native_step { op: "quantized.add_relu" input { step: 0 } input { arg: 1 } }
    }
  )pb");
}

TEST(DeclaredCompositionErrorsTest, QParamsOfAStepThatDoesNotExistIsRefused) {
  absl::StatusOr<BackendConfig> config = ParseBackendConfigText(
      ComposedConfig("user.ComposedErrA", "observed_step: 0", "qparams_of { step: 7 }"),
      "errors.textproto");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr("native_step[0].qparams_of.step"));
  EXPECT_THAT(config.status().message(),
              HasSubstr("7 is not a step of user.ComposedErrA, which has 3 steps"));
}

TEST(DeclaredCompositionErrorsTest, QParamsOfTheLastStepIsRefused) {
  absl::StatusOr<BackendConfig> config = ParseBackendConfigText(
      ComposedConfig("user.ComposedErrB", "observed_step: 0", "qparams_of { step: 2 }"),
      "errors.textproto");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr("native_step[0].qparams_of.step"));
  EXPECT_THAT(config.status().message(),
              HasSubstr("2 is the last step of user.ComposedErrB: its value is the output"));
}

TEST(DeclaredCompositionErrorsTest, QParamsOfAnUnobservedStepIsRefused) {
  absl::StatusOr<BackendConfig> config = ParseBackendConfigText(
      ComposedConfig("user.ComposedErrC", "", "qparams_of { step: 1 }"), "errors.textproto");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(),
              HasSubstr("step 1 of user.ComposedErrC is not observed; add observed_step: 1"));
}

TEST(DeclaredCompositionErrorsTest, ObservingTheOutputStepAsAnIntermediateIsRefused) {
  absl::StatusOr<BackendConfig> config = ParseBackendConfigText(
      ComposedConfig("user.ComposedErrD", "observed_step: 2", "qparams_of { arg: 1 }"),
      "errors.textproto");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr("observed_step[0]"));
  EXPECT_THAT(config.status().message(), HasSubstr("2 is not an intermediate step"));
}

}  // namespace
}  // namespace fuselage
