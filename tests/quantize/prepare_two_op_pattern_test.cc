// Prepare with two-op quantization patterns of the backend config, e.g. (ReLU, add):
// PyTorch 1.13's prepare_fx quantizes the pair as one op, observing the relu's output and
// nothing between the two, and convert_fx lowers it to quantized::add_relu. Before this
// was handled, fuselage observed the add's output (with negative values: zero point 104
// on the residual example) and made the relu share that observer, so the lowered model's
// output scale and zero point differed from PyTorch's (found by tests/conformance).
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend_configs/backend_config.h"
#include "backend_configs/builtin_configs.h"
#include "gtest/gtest.h"
#include "pipeline/quantize_flow.h"
#include "quantize/observers.h"
#include "quantize/prepare.h"
#include "tools/examples.h"

namespace fuselage {
namespace {

std::string Listing(const Graph& g) {
  std::string s;
  for (const Node* n : g.Nodes()) absl::StrAppend(&s, n->ToString(), "\n");
  return s;
}

// The MinMax qconfig: quint8 per-tensor affine activations, default weights.
QConfigMapping MinMaxMapping() {
  ObserverSpec activation;
  activation.kind = ObserverKind::kMinMax;
  activation.dtype = DType::kQUInt8;
  QConfigMapping mapping;
  mapping.SetGlobal(QConfig{activation, DefaultWeightObserver()});
  return mapping;
}

std::vector<CalibrationSample> RandomSamples(int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<CalibrationSample> samples;
  for (int i = 0; i < count; ++i) {
    Tensor t = *Tensor::Zeros(DType::kFloat32, {2, 4, 8, 8});
    for (int64_t k = 0; k < t.numel(); ++k) t.mutable_data<float>()[k] = uniform(rng);
    samples.push_back({t});
  }
  return samples;
}

bool IsObserverNode(const GraphModule& gm, const Node* n) {
  return n->op() == OpKind::kCallModule &&
         IsObserverModuleType(gm.FindModule(n->target().name())->type());
}

// qnnpack (no conv-add fusion): conv-bn is folded, then add → relu is one quantized op.
TEST(PrepareTwoOpPatternTest, AddThenReluIsObservedOnlyAfterTheRelu) {
  auto gm = *BuildResidualExample(kResidualExampleSeed);
  const BackendConfig config = *GetBackendConfig("qnnpack");
  std::unique_ptr<GraphModule> prepared;
  QuantizeFlowOptions options;
  options.on_stage = [&](absl::string_view stage, const GraphModule& g) {
    EXPECT_TRUE(g.Verify().ok()) << stage << ": " << g.Verify();
    if (stage == "prepare") prepared = g.Clone();
    return absl::OkStatus();
  };
  auto report = RunQuantizeFlow(*gm, config, MinMaxMapping(), RandomSamples(2, 3), options);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(gm->Verify().ok()) << gm->Verify();

  // Prepared: the relu reads the add directly; the relu's output is observed.
  ASSERT_NE(prepared, nullptr);
  const Node* add = prepared->graph().FindNode("add");
  const Node* relu = prepared->graph().FindNode("relu");
  ASSERT_NE(add, nullptr);
  ASSERT_NE(relu, nullptr);
  ASSERT_EQ(add->users().size(), 1u) << Listing(prepared->graph());
  EXPECT_EQ(add->users()[0], relu) << Listing(prepared->graph());
  ASSERT_EQ(relu->users().size(), 1u);
  EXPECT_TRUE(IsObserverNode(*prepared, relu->users()[0])) << Listing(prepared->graph());

  // Lowered: one quantized::add_relu, no separate add or relu. Its output follows a relu
  // (values >= 0), so MinMax gives zero point 0.
  const Node* add_relu = nullptr;
  for (const Node* n : gm->graph().Nodes()) {
    EXPECT_NE(n->target().name(), "torch.ops.quantized.add") << Listing(gm->graph());
    EXPECT_NE(n->target().name(), "relu") << Listing(gm->graph());
    if (n->target().name() == "torch.ops.quantized.add_relu") add_relu = n;
  }
  ASSERT_NE(add_relu, nullptr) << Listing(gm->graph());
  ASSERT_EQ(add_relu->num_args(), 4u);
  EXPECT_EQ(add_relu->arg(3).as_int(), 0) << Listing(gm->graph());
  EXPECT_GT(add_relu->arg(2).as_float(), 0.0);
  EXPECT_TRUE(report->lowering.unlowered.empty()) << report->lowering.ToString();
}

// x → add → relu → add → relu → output: two (ReLU, add) pairs in one graph.
std::unique_ptr<GraphModule> TwoAddReluPairs() {
  auto gm = std::make_unique<GraphModule>();
  EXPECT_TRUE(gm->SetModule("relu", std::make_unique<Module>("nn.ReLU")).ok());
  EXPECT_TRUE(gm->SetModule("relu_b", std::make_unique<Module>("nn.ReLU")).ok());
  Graph& g = gm->graph();
  Node* x = *g.AddPlaceholder("x");
  Node* add = *g.AddCallFunction("operator.add", {x, x});
  Node* relu = *g.AddCallModule("relu", {add});
  Node* add_b = *g.AddCallFunction("operator.add", {relu, relu});
  Node* relu_b = *g.AddCallModule("relu_b", {add_b});
  EXPECT_TRUE(g.SetOutput(relu_b).ok());
  return gm;
}

// qnnpack's (ReLU, add) entry, or nullptr.
const BackendPatternConfig* ReluAddEntry(const BackendConfig& config) {
  for (const BackendPatternConfig& entry : config.configs()) {
    const Pattern& pattern = entry.pattern();
    if (entry.fuses || pattern.size() != 2 || pattern.position(1).match_all) continue;
    if (pattern.position(0).Matches(OpRef{OpKind::kCallModule, Symbol::Intern("nn.ReLU")}) &&
        pattern.position(1).Matches(
            OpRef{OpKind::kCallFunction, Symbol::Intern("operator.add")})) {
      return &entry;
    }
  }
  return nullptr;
}

// Every pair merges, the second one with the dtype config found for the first (the
// planner keeps one answer per entry and activation spec).
TEST(PrepareTwoOpPatternTest, EveryPairIsOneQuantizedOp) {
  auto gm = TwoAddReluPairs();
  const BackendConfig config = *GetBackendConfig("qnnpack");
  auto prepared = Prepare(*gm, MinMaxMapping(), config);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_TRUE(gm->Verify().ok()) << gm->Verify();
  const DTypeConfig* quint8_config = nullptr;
  for (const DTypeConfig& c : ReluAddEntry(config)->dtype_configs) {
    if (c.input.dtype == DType::kQUInt8 && c.output.dtype == DType::kQUInt8) {
      quint8_config = &c;
      break;
    }
  }
  ASSERT_NE(quint8_config, nullptr);
  const Graph& g = gm->graph();
  for (const auto& [add_name, relu_name] : {std::pair{"add", "relu"}, {"add_1", "relu_b"}}) {
    const Node* add = g.FindNode(add_name);
    const Node* relu = g.FindNode(relu_name);
    ASSERT_NE(add, nullptr) << Listing(g);
    ASSERT_NE(relu, nullptr) << Listing(g);
    ASSERT_EQ(add->users().size(), 1u) << Listing(g);
    EXPECT_EQ(add->users()[0], relu) << Listing(g);
    ASSERT_EQ(relu->users().size(), 1u) << Listing(g);
    EXPECT_TRUE(IsObserverNode(*gm, relu->users()[0])) << Listing(g);
    // The plan is the add's, carrying the pair entry's first quint8 → quint8 config.
    auto plan = prepared->quantized_ops.find(add->name());
    ASSERT_NE(plan, prepared->quantized_ops.end()) << add->name();
    ASSERT_NE(plan->second.dtype_config, nullptr);
    EXPECT_EQ(*plan->second.dtype_config, *quint8_config) << plan->second.dtype_config->ToString();
  }
  // x's observer, then one after each relu: none between an add and its relu.
  EXPECT_EQ(prepared->report.observer_nodes, 3) << Listing(g);
  EXPECT_EQ(prepared->report.quantized_ops, 2);
}

// A pair whose entry accepts none of the activation's dtypes is no pair: the add is
// quantized alone (its own entry accepts quint8) and the relu on its own, at each pair
// (the refusal is remembered, not reworded per node).
TEST(PrepareTwoOpPatternTest, PairEntryRefusingTheDTypeKeepsTheOpsApart) {
  BackendConfig config = *GetBackendConfig("qnnpack");
  const BackendPatternConfig* relu_add = ReluAddEntry(config);
  ASSERT_NE(relu_add, nullptr);
  BackendPatternConfig refusing = *relu_add;
  refusing.dtype_configs = {DTypeConfig::Of(DType::kQInt8, DType::kQInt8)};
  ASSERT_TRUE(config.SetOrReplace(std::move(refusing)).ok());

  auto gm = TwoAddReluPairs();
  auto prepared = Prepare(*gm, MinMaxMapping(), config);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_TRUE(gm->Verify().ok()) << gm->Verify();
  const Graph& g = gm->graph();
  for (const char* name : {"add", "add_1"}) {
    const Node* add = g.FindNode(name);
    ASSERT_NE(add, nullptr) << Listing(g);
    ASSERT_EQ(add->users().size(), 1u) << Listing(g);
    EXPECT_TRUE(IsObserverNode(*gm, add->users()[0])) << name << "\n" << Listing(g);
  }
  EXPECT_EQ(prepared->report.quantized_ops, 4) << Listing(g);
}

}  // namespace
}  // namespace fuselage
