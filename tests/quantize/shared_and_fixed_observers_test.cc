// Prepare → convert → lower as PyTorch 1.13 does it for the ops whose observers are
// shared or fixed: torch.cat's inputs and output share the first input's observer
// (prepare.py's _maybe_make_input_output_share_observers), sigmoid / tanh get their
// FixedQParamsObserver (qconfig_mapping.py: default_fixed_qparams_range_0to1_observer =
// scale 1/256, zero point 0; _neg1to1_observer = scale 2/256, zero point 128, both quint8
// over [0, 255]), and the lowered graph has the targets _lower_to_native_backend.py gives
// them. The reports' counts are checked against the graph, counted here.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend_configs/builtin_configs.h"
#include "backend_configs/config_loader.h"
#include "gtest/gtest.h"
#include "lowering/lower_to_native.h"
#include "lowering/lowering_rule.h"
#include "quantize/convert.h"
#include "quantize/observer_module.h"
#include "quantize/prepare.h"

namespace fuselage {
namespace {

std::string Listing(const Graph& g) {
  std::string s;
  for (const Node* n : g.Nodes()) absl::StrAppend(&s, n->ToString(), "\n");
  return s;
}

std::unique_ptr<Module> Conv1x1(float w) {
  auto conv = std::make_unique<Module>("nn.Conv2d");
  conv->SetTensor("weight", Tensor::FromFloats({1, 1, 1, 1}, {w}));
  conv->SetTensor("bias", Tensor::FromFloats({1}, {0.0f}));
  conv->SetAttribute("in_channels", Argument::Int(1));
  conv->SetAttribute("out_channels", Argument::Int(1));
  conv->SetAttribute("kernel_size", Argument::Ints({1, 1}));
  conv->SetAttribute("stride", Argument::Ints({1, 1}));
  conv->SetAttribute("padding", Argument::Ints({0, 0}));
  conv->SetAttribute("dilation", Argument::Ints({1, 1}));
  conv->SetAttribute("groups", Argument::Int(1));
  conv->SetAttribute("padding_mode", Argument::String("zeros"));
  return conv;
}

bool IsObserverNode(const GraphModule& gm, const Node* n) {
  if (n == nullptr || n->op() != OpKind::kCallModule) return false;
  const Module* m = gm.FindModule(n->target().name());
  return m != nullptr && IsObserverModuleType(m->type());
}

// The report's counts against the graph: observer nodes, and modules in the container.
void ExpectReportMatchesGraph(const GraphModule& gm, const PreparedModel& prepared) {
  int nodes = 0;
  for (const Node* n : gm.graph().Nodes()) nodes += IsObserverNode(gm, n) ? 1 : 0;
  EXPECT_EQ(prepared.report.observer_nodes, nodes) << Listing(gm.graph());
  const Module* container = gm.FindModule(prepared.observer_container);
  ASSERT_NE(container, nullptr);
  EXPECT_EQ(prepared.report.observer_modules, static_cast<int>(container->children().size()));
  EXPECT_EQ(prepared.observers.size(), container->children().size());
  // Every observer module is called by some node (no orphan is left behind).
  for (const auto& [name, child] : container->children()) {
    const std::string path = absl::StrCat(prepared.observer_container, ".", name);
    bool called = false;
    for (const Node* n : gm.graph().Nodes()) {
      called = called || (n->op() == OpKind::kCallModule && n->target().name() == path);
    }
    EXPECT_TRUE(called) << path << " is called by no node";
  }
}

int CountTarget(const Graph& g, absl::string_view target) {
  int count = 0;
  for (const Node* n : g.Nodes()) count += n->target().name() == target ? 1 : 0;
  return count;
}

// x → conv_a ─┐
// x → conv_b ─┴→ cat([a, b], 1) → output; b also feeds conv_c → output.
struct CatModel {
  GraphModule gm;
  Node *conv_a, *conv_b, *conv_c, *cat;
};
std::unique_ptr<CatModel> BuildCat() {
  auto m = std::make_unique<CatModel>();
  GraphModule& gm = m->gm;
  EXPECT_TRUE(gm.SetModule("conv_a", Conv1x1(0.5f)).ok());
  EXPECT_TRUE(gm.SetModule("conv_b", Conv1x1(2.0f)).ok());
  EXPECT_TRUE(gm.SetModule("conv_c", Conv1x1(1.0f)).ok());
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  m->conv_a = *g.AddCallModule("conv_a", {x});
  m->conv_b = *g.AddCallModule("conv_b", {x});
  m->cat = *g.AddCallFunction("torch.cat", {Argument::List({m->conv_a, m->conv_b}),
                                             Argument::Int(1)});
  m->conv_c = *g.AddCallModule("conv_c", {m->conv_b});
  EXPECT_TRUE(g.SetOutput(Argument::Tuple({m->cat, m->conv_c})).ok());
  EXPECT_TRUE(gm.Verify().ok()) << gm.Verify();
  return m;
}

TEST(SharedObserversTest, CatInputsAndOutputShareTheFirstInputsObserver) {
  auto m = BuildCat();
  // MinMax activations, so the shared scale below is computed by hand.
  ObserverSpec activation;
  activation.kind = ObserverKind::kMinMax;
  QConfigMapping mapping;
  mapping.SetGlobal(QConfig{activation, DefaultWeightObserver()});
  auto prepared = Prepare(m->gm, mapping, *GetBackendConfig("qnnpack"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_TRUE(m->gm.Verify().ok()) << m->gm.Verify();
  const Node* a_obs = m->cat->arg(0).items()[0].as_node();
  const Node* b_obs = m->cat->arg(0).items()[1].as_node();
  ASSERT_TRUE(IsObserverNode(m->gm, a_obs)) << Listing(m->gm.graph());
  ASSERT_TRUE(IsObserverNode(m->gm, b_obs));
  EXPECT_EQ(a_obs->arg(0).as_node(), m->conv_a);
  EXPECT_EQ(b_obs->arg(0).as_node(), m->conv_b);
  // One module for both inputs, and the output's observer is that module too.
  EXPECT_EQ(b_obs->target(), a_obs->target());
  ASSERT_EQ(m->cat->num_users(), 1);
  const Node* out_obs = m->cat->users()[0];
  ASSERT_TRUE(IsObserverNode(m->gm, out_obs));
  EXPECT_EQ(out_obs->target(), a_obs->target());
  // As in PyTorch, conv_c reads b's observer node, which now calls the shared module.
  EXPECT_EQ(m->conv_c->arg(0).as_node(), b_obs);
  // x's, the shared one, conv_c's output: 3 modules (conv_b's own was orphaned, removed);
  // nodes: x, a, b, cat output, conv_c output.
  EXPECT_EQ(prepared->report.observer_modules, 3);
  EXPECT_EQ(prepared->report.observer_nodes, 5);
  ExpectReportMatchesGraph(m->gm, *prepared);

  // Calibration ranges: the shared observer sees a's [0, 1] and b's [-2, 6]; convert
  // then gives a, b and the cat one scale: (6 - -2) / 255, zero point round(2 / s) = 64.
  for (auto& [path, observer] : prepared->observers) {
    const bool shared = path == a_obs->target();
    ASSERT_TRUE(observer->Update(Tensor::FromFloats({2}, {0.0f, 1.0f})).ok());
    if (shared) ASSERT_TRUE(observer->Update(Tensor::FromFloats({2}, {-2.0f, 6.0f})).ok());
  }
  ASSERT_TRUE(ConvertToReference(m->gm, *prepared).ok());
  LoweringRuleRegistry registry;
  ASSERT_TRUE(RegisterNativeLoweringRules(registry).ok());
  auto report = LowerToNative(m->gm, registry);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(m->gm.Verify().ok()) << m->gm.Verify() << Listing(m->gm.graph());
  EXPECT_TRUE(report->unlowered.empty()) << report->ToString();
  EXPECT_EQ(report->lowered_per_rule.at("pass-through:torch.cat"), 1) << report->ToString();
  // The cat reads the two native convs directly: no requantization between them.
  EXPECT_EQ(m->cat->arg(0).items()[0].as_node(), m->conv_a) << Listing(m->gm.graph());
  EXPECT_EQ(m->cat->arg(0).items()[1].as_node(), m->conv_b);
  const auto qa = KnownOutputQParams(m->gm, m->conv_a);
  const auto qb = KnownOutputQParams(m->gm, m->conv_b);
  ASSERT_TRUE(qa.has_value() && qb.has_value());
  EXPECT_TRUE(*qa == *qb);
  EXPECT_NEAR(qa->scale, 8.0 / 255.0, 1e-7);
  EXPECT_EQ(qa->zero_point, 64);
  EXPECT_EQ(CountTarget(m->gm.graph(), "torch.quantize_per_tensor"), 1);
  EXPECT_EQ(CountTarget(m->gm.graph(), "dequantize"), 2);  // the two outputs
}

// x → conv → <op> → output, with the default qnnpack qconfig mapping.
struct FixedModel {
  GraphModule gm;
  Node* conv;
  Node* op;
};
std::unique_ptr<FixedModel> BuildFixed(OpKind kind, absl::string_view target,
                                       std::unique_ptr<Module> module = nullptr) {
  auto m = std::make_unique<FixedModel>();
  EXPECT_TRUE(m->gm.SetModule("conv", Conv1x1(1.0f)).ok());
  Graph& g = m->gm.graph();
  Node* x = *g.AddPlaceholder("x");
  m->conv = *g.AddCallModule("conv", {x});
  switch (kind) {
    case OpKind::kCallModule:
      EXPECT_TRUE(m->gm.SetModule("op", std::move(module)).ok());
      m->op = *g.AddCallModule("op", {m->conv});
      break;
    case OpKind::kCallMethod:
      m->op = *g.AddCallMethod(target, {m->conv});
      break;
    default:
      m->op = *g.AddCallFunction(target, {m->conv});
  }
  EXPECT_TRUE(g.SetOutput(m->op).ok());
  EXPECT_TRUE(m->gm.Verify().ok()) << m->gm.Verify();
  return m;
}

struct FixedCase {
  OpKind kind;
  const char* target;  // function / method, or the module type
  double scale;
  int64_t zero_point;
};

class FixedQParamsTest : public ::testing::TestWithParam<FixedCase> {};

TEST_P(FixedQParamsTest, OutputObserverHasPyTorchsFixedParamsAndLowersToTheSameOp) {
  const FixedCase& c = GetParam();
  auto m = c.kind == OpKind::kCallModule
               ? BuildFixed(c.kind, "", std::make_unique<Module>(c.target))
               : BuildFixed(c.kind, c.target);
  auto prepared = Prepare(m->gm, *DefaultQConfigMapping("qnnpack"), *GetBackendConfig("qnnpack"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_TRUE(prepared->report.kept_float.empty()) << prepared->report.ToString();
  ASSERT_EQ(m->op->num_users(), 1);
  const Node* out_obs = m->op->users()[0];
  ASSERT_TRUE(IsObserverNode(m->gm, out_obs)) << Listing(m->gm.graph());
  const Module* module = m->gm.FindModule(out_obs->target().name());
  EXPECT_EQ(module->type().name(), "FixedQParamsObserver");
  // The module records the parameters, and reads back as the same spec.
  auto spec = ObserverSpecFromModule(*module);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->fixed_scale, c.scale);
  EXPECT_EQ(spec->fixed_zero_point, c.zero_point);
  // The input (conv's output) keeps its own, calibrated observer.
  EXPECT_NE(m->op->arg(0).as_node()->target(), out_obs->target());
  ExpectReportMatchesGraph(m->gm, *prepared);

  // Calibration data far outside [0, 1] does not move the fixed parameters.
  for (auto& [path, observer] : prepared->observers) {
    ASSERT_TRUE(observer->Update(Tensor::FromFloats({2}, {-5.0f, 7.0f})).ok());
  }
  ASSERT_TRUE(ConvertToReference(m->gm, *prepared).ok());
  const Node* q = m->op->users()[0];
  ASSERT_EQ(q->target().name(), "torch.quantize_per_tensor") << Listing(m->gm.graph());
  EXPECT_EQ(q->arg(1).as_float(), c.scale);
  EXPECT_EQ(q->arg(2).as_int(), c.zero_point);

  LoweringRuleRegistry registry;
  ASSERT_TRUE(RegisterNativeLoweringRules(registry).ok());
  auto report = LowerToNative(m->gm, registry);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(m->gm.Verify().ok()) << m->gm.Verify();
  EXPECT_TRUE(report->unlowered.empty()) << report->ToString();
  // PyTorch's convert_fx keeps the op (is_fixed_qparams_node) on the quantized tensor.
  EXPECT_EQ(m->op->arg(0).as_node(), m->conv) << Listing(m->gm.graph());
  const auto out = KnownOutputQParams(m->gm, m->op);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->scale, c.scale);
  EXPECT_EQ(out->zero_point, c.zero_point);
  EXPECT_EQ(CountTarget(m->gm.graph(), "torch.quantize_per_tensor"), 1);
  EXPECT_EQ(CountTarget(m->gm.graph(), "dequantize"), 1);
}

INSTANTIATE_TEST_SUITE_P(
    PyTorchFixedQParamsOps, FixedQParamsTest,
    ::testing::Values(FixedCase{OpKind::kCallFunction, "torch.sigmoid", 1.0 / 256, 0},
                      FixedCase{OpKind::kCallMethod, "sigmoid", 1.0 / 256, 0},
                      FixedCase{OpKind::kCallModule, "nn.Hardsigmoid", 1.0 / 256, 0},
                      FixedCase{OpKind::kCallFunction, "torch.nn.functional.hardsigmoid",
                                1.0 / 256, 0},
                      FixedCase{OpKind::kCallModule, "nn.Sigmoid", 1.0 / 256, 0},
                      FixedCase{OpKind::kCallFunction, "torch.tanh", 2.0 / 256, 128},
                      FixedCase{OpKind::kCallModule, "nn.Tanh", 2.0 / 256, 128}));

TEST(FixedQParamsTest, SoftmaxLowersToNnqSoftmaxWithFixedParams) {
  auto softmax = std::make_unique<Module>("nn.Softmax");
  softmax->SetAttribute("dim", Argument::Int(1));
  auto m = BuildFixed(OpKind::kCallModule, "", std::move(softmax));
  auto prepared = Prepare(m->gm, *DefaultQConfigMapping("qnnpack"), *GetBackendConfig("qnnpack"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  for (auto& [path, observer] : prepared->observers) {
    ASSERT_TRUE(observer->Update(Tensor::FromFloats({2}, {-5.0f, 7.0f})).ok());
  }
  ASSERT_TRUE(ConvertToReference(m->gm, *prepared).ok());
  LoweringRuleRegistry registry;
  ASSERT_TRUE(RegisterNativeLoweringRules(registry).ok());
  auto report = LowerToNative(m->gm, registry);
  ASSERT_TRUE(report.ok()) << report.status();
  const Module* native = m->gm.FindModule("op");
  ASSERT_NE(native, nullptr);
  EXPECT_EQ(native->type().name(), "nnq.Softmax");
  EXPECT_EQ(*native->GetFloat("scale"), 1.0 / 256);
  EXPECT_EQ(*native->GetInt("zero_point"), 0);
  EXPECT_EQ(*native->GetInt("dim"), 1);
}

TEST(FixedQParamsTest, AQConfigWithoutTheFixedObserverKeepsTheOpFloatWithTheReason) {
  auto m = BuildFixed(OpKind::kCallFunction, "torch.sigmoid");
  QConfigMapping mapping;
  mapping.SetGlobal(*DefaultQConfig("qnnpack"));
  auto prepared = Prepare(m->gm, mapping, *GetBackendConfig("qnnpack"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_EQ(prepared->report.kept_float.size(), 1u) << prepared->report.ToString();
  EXPECT_EQ(prepared->report.kept_float[0].node, "sigmoid");
  EXPECT_NE(prepared->report.kept_float[0].reason.find(
                "FixedQParamsObserver(scale=0.00390625, zero_point=0)"),
            std::string::npos)
      << prepared->report.kept_float[0].reason;
  ExpectReportMatchesGraph(m->gm, *prepared);
}

// Every op of the graph is either quantized or listed as kept float with its reason,
// also those the backend config has no entry for (nn.SiLU, a float-only function).
TEST(PrepareReportTest, EveryOpIsQuantizedOrNamedWithItsReason) {
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("conv", Conv1x1(1.0f)).ok());
  ASSERT_TRUE(gm.SetModule("silu", std::make_unique<Module>("nn.SiLU")).ok());
  ASSERT_TRUE(gm.SetModule("conv2", Conv1x1(2.0f)).ok());
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* conv = *g.AddCallModule("conv", {x});
  Node* silu = *g.AddCallModule("silu", {conv});
  Node* conv2 = *g.AddCallModule("conv2", {silu});
  Node* sum = *g.AddCallFunction("torch.sum", {conv2});
  ASSERT_TRUE(g.SetOutput(sum).ok());
  int ops = 0;
  for (const Node* n : g.Nodes()) {
    ops += n->op() == OpKind::kCallModule || n->op() == OpKind::kCallFunction ||
                   n->op() == OpKind::kCallMethod
               ? 1
               : 0;
  }
  auto prepared = Prepare(gm, *DefaultQConfigMapping("qnnpack"), *GetBackendConfig("qnnpack"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  const PrepareReport& r = prepared->report;
  EXPECT_EQ(r.quantized_ops + static_cast<int>(r.kept_float.size()), ops) << r.ToString();
  ASSERT_EQ(r.kept_float.size(), 2u) << r.ToString();
  EXPECT_EQ(r.kept_float[0].node, "silu");
  EXPECT_EQ(r.kept_float[0].op, "nn.SiLU");
  EXPECT_EQ(r.kept_float[0].reason, "the backend config 'qnnpack' has no entry for it");
  EXPECT_EQ(r.kept_float[1].node, "sum");
  EXPECT_NE(r.ToString().find("2 ops kept float"), std::string::npos) << r.ToString();
  ExpectReportMatchesGraph(gm, *prepared);
}

// F.conv2d with a get_attr weight under fbgemm's default qconfig (per-channel symmetric
// qint8 weights): prepare observes the weight in the graph, convert quantizes it per
// channel (get_attr scales / zero points, as PyTorch's convert), lowering folds it into a
// quantized constant and calls torch.ops.quantized.conv2d.
TEST(FunctionalWeightTest, PerChannelWeightIsObservedQuantizedAndFolded) {
  GraphModule gm;
  // Two output channels of two input channels: max |w| is 0.5 and 2.0.
  ASSERT_TRUE(gm.SetTensor("w", Tensor::FromFloats({2, 2, 1, 1}, {0.5f, 0.25f, -2.0f, 1.0f})).ok());
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* w = *g.AddGetAttr("w");
  Node* conv = *g.AddCallFunction("torch.nn.functional.conv2d", {x, w, Argument::None()});
  ASSERT_TRUE(g.SetOutput(conv).ok());
  auto prepared = Prepare(gm, *DefaultQConfigMapping("fbgemm"), *GetBackendConfig("fbgemm"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_TRUE(prepared->report.kept_float.empty()) << prepared->report.ToString();
  const Node* w_obs = conv->arg(1).as_node();
  ASSERT_TRUE(IsObserverNode(gm, w_obs)) << Listing(g);
  EXPECT_EQ(gm.FindModule(w_obs->target().name())->type().name(), "PerChannelMinMaxObserver");
  EXPECT_TRUE(conv->arg(2).is_none());
  ExpectReportMatchesGraph(gm, *prepared);
  for (auto& [path, observer] : prepared->observers) {
    const bool weight = path == w_obs->target();
    ASSERT_TRUE(observer
                    ->Update(weight ? *gm.FindTensor("w")
                                    : Tensor::FromFloats({1, 2, 1, 1}, {-1.0f, 3.0f}))
                    .ok());
  }
  ASSERT_TRUE(ConvertToReference(gm, *prepared).ok());
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  const Node* w_q = conv->arg(1).as_node()->arg(0).as_node();
  ASSERT_EQ(w_q->target().name(), "torch.quantize_per_channel") << Listing(g);
  const Tensor* scales = gm.FindTensor(w_q->arg(1).as_node()->target().name());
  ASSERT_NE(scales, nullptr);
  // Symmetric qint8 over [-128, 127]: scale = max|w| / 127.5, zero point 0.
  EXPECT_FLOAT_EQ(scales->data<float>()[0], 0.5f / 127.5f);
  EXPECT_FLOAT_EQ(scales->data<float>()[1], 2.0f / 127.5f);
  EXPECT_EQ(w_q->arg(3).as_int(), 0);

  LoweringRuleRegistry registry;
  ASSERT_TRUE(RegisterNativeLoweringRules(registry).ok());
  auto report = LowerToNative(gm, registry);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify() << Listing(g);
  EXPECT_EQ(conv->target().name(), "torch.ops.quantized.conv2d");
  EXPECT_EQ(report->constants_quantized, 1);
  const Node* folded = conv->arg(1).as_node();
  ASSERT_EQ(folded->op(), OpKind::kGetAttr) << Listing(g);
  const Tensor* qw = gm.FindTensor(folded->target().name());
  ASSERT_EQ(qw->dtype(), DType::kQInt8);
  ASSERT_EQ(qw->qparams().scales.size(), 2u);
  // 0.25 / (0.5 / 127.5) = 63.75 -> 64; 1.0 / (2.0 / 127.5) = 63.75 -> 64.
  EXPECT_EQ(qw->data<int8_t>()[1], 64);
  EXPECT_EQ(qw->data<int8_t>()[3], 64);
  EXPECT_EQ(CountTarget(g, "torch.quantize_per_channel"), 0);
  // The float weight and convert's scale / zero-point tensors are read by nothing now.
  EXPECT_EQ(gm.FindTensor("w"), nullptr);
  EXPECT_EQ(gm.FindTensor("w_scale"), nullptr);
  EXPECT_EQ(gm.FindTensor("w_zero_point"), nullptr);
  EXPECT_EQ(report->folded_tensors_removed, 3);
  EXPECT_EQ(CountTarget(g, "torch.quantize_per_tensor"), 1);
}

// A non-fusing (add, F.conv2d, MatchAllNode) entry, as X86InductorQuantizer observes its
// conv-add: the conv's output is not observed, the add's other input and the relu after
// the add are, and the residual's producer, decided after the conv, keeps one observer.
// Lowered, conv, add and relu are one conv2d_add_relu reading both inputs quantized.
TEST(FunctionalWeightTest, ConvAddEntryObservesTheConvAndAddAsOneOp) {
  auto config = ParseBackendConfigText(R"pb(
      base: "fbgemm"
      pattern {
        name: "conv-add"
        pattern: "(add, F.conv2d, MatchAllNode)"
        dtype_config {
          input { dtype: "quint8" }
          output { dtype: "quint8" }
          weight { dtype: "qint8" }
          bias: "float32"
        }
      })pb", "conv_add.textproto");
  ASSERT_TRUE(config.ok()) << config.status();
  GraphModule gm;
  ASSERT_TRUE(gm.SetTensor("w", Tensor::FromFloats({2, 2, 1, 1}, {0.5f, 0.25f, -2.0f, 1.0f})).ok());
  ASSERT_TRUE(gm.SetTensor("v", Tensor::FromFloats({2, 2, 1, 1}, {1.0f, 0.0f, 0.0f, 1.0f})).ok());
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* conv = *g.AddCallFunction("torch.nn.functional.conv2d", {x, *g.AddGetAttr("w"), Argument::None()});
  // The residual branch comes after the conv in node order (a resnet's downsample).
  Node* residual =
      *g.AddCallFunction("torch.nn.functional.conv2d", {x, *g.AddGetAttr("v"), Argument::None()});
  Node* add = *g.AddCallFunction("operator.add", {conv, residual});
  Node* relu = *g.AddCallFunction("torch.relu", {add});
  ASSERT_TRUE(g.SetOutput(relu).ok());
  auto prepared = Prepare(gm, *DefaultQConfigMapping("fbgemm"), *config);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  ExpectReportMatchesGraph(gm, *prepared);
  // conv -> add directly; the residual's output observer is the add's other input.
  EXPECT_EQ(add->arg(0), Argument(conv)) << Listing(g);
  const Node* residual_obs = add->arg(1).as_node();
  ASSERT_TRUE(IsObserverNode(gm, residual_obs)) << Listing(g);
  EXPECT_EQ(residual_obs->arg(0), Argument(residual));
  ASSERT_EQ(residual->users().size(), 1u) << Listing(g);
  // x observed once for both convs; the relu's output observed, the add's not.
  EXPECT_EQ(conv->arg(0), residual->arg(0));
  ASSERT_EQ(add->users().size(), 1u);
  EXPECT_EQ(add->users()[0], relu) << Listing(g);
  ASSERT_EQ(relu->users().size(), 1u);
  EXPECT_TRUE(IsObserverNode(gm, relu->users()[0])) << Listing(g);

  const Tensor input = Tensor::FromFloats({1, 2, 1, 1}, {-1.0f, 3.0f});
  for (auto& [path, observer] : prepared->observers) {
    Node* node = nullptr;
    for (Node* n : g.Nodes()) {
      if (n->op() == OpKind::kCallModule && n->target() == path) node = n;
    }
    ASSERT_NE(node, nullptr);
    const Node* in = node->arg(0).as_node();
    // Each observer sees its input's value: x, a weight, or a conv / relu output over x.
    Tensor seen = in->op() == OpKind::kGetAttr ? *gm.FindTensor(in->target().name()) : input;
    ASSERT_TRUE(observer->Update(seen).ok());
  }
  ASSERT_TRUE(ConvertToReference(gm, *prepared).ok());
  LoweringRuleRegistry registry;
  ASSERT_TRUE(RegisterNativeLoweringRules(registry).ok());
  auto report = LowerToNative(gm, registry);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify() << Listing(g);
  EXPECT_EQ(CountTarget(g, "torch.ops.quantized.conv2d_add_relu"), 1) << Listing(g);
  EXPECT_EQ(CountTarget(g, "torch.ops.quantized.conv2d"), 1) << Listing(g);
  EXPECT_EQ(CountTarget(g, "torch.relu"), 0) << Listing(g);
  EXPECT_TRUE(report->unlowered.empty()) << report->ToString();
}

}  // namespace
}  // namespace fuselage
