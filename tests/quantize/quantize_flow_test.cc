// The whole flow (fuse → prepare → calibrate → convert → lower) on the residual example
// with the example conv-bn-add-relu config, and on a two-output model: the structure after
// each stage and the numerics of the lowered graph against the reference graph.
#include "pipeline/quantize_flow.h"

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend_configs/builtin_configs.h"
#include "backend_configs/config_loader.h"
#include "gtest/gtest.h"
#include "lowering/lower_to_native.h"
#include "quantize/observers.h"
#include "runtime/builtin_kernels.h"
#include "runtime/interpreter.h"
#include "tools/examples.h"

namespace fuselage {
namespace {

constexpr char kExampleConfig[] = "backend_configs/examples/conv_bn_add_relu.textproto";

std::string Listing(const Graph& g) {
  std::string s;
  for (const Node* n : g.Nodes()) absl::StrAppend(&s, n->ToString(), "\n");
  return s;
}

std::vector<const Node*> NodesCalling(const GraphModule& gm, absl::string_view type_or_target) {
  std::vector<const Node*> found;
  for (const Node* n : gm.graph().Nodes()) {
    if (n->op() == OpKind::kCallModule) {
      const Module* m = gm.FindModule(n->target().name());
      if (m != nullptr && m->type().name() == type_or_target) found.push_back(n);
    } else if (n->target().name() == type_or_target) {
      found.push_back(n);
    }
  }
  return found;
}

std::vector<CalibrationSample> RandomSamples(int count, uint32_t seed,
                                             std::vector<int64_t> shape) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<CalibrationSample> samples;
  for (int i = 0; i < count; ++i) {
    Tensor t = *Tensor::Zeros(DType::kFloat32, shape);
    for (int64_t k = 0; k < t.numel(); ++k) t.mutable_data<float>()[k] = uniform(rng);
    samples.push_back({t});
  }
  return samples;
}

// Runs the flow, keeping a copy of the graph after `keep_stage`.
struct FlowRun {
  QuantizeFlowReport report;
  std::unique_ptr<GraphModule> kept;
};
FlowRun RunFlow(GraphModule& gm, const BackendConfig& config, const QConfigMapping& mapping,
                const std::vector<CalibrationSample>& samples, absl::string_view keep_stage) {
  FlowRun run;
  QuantizeFlowOptions options;
  options.on_stage = [&](absl::string_view stage, const GraphModule& g) {
    EXPECT_TRUE(g.Verify().ok()) << stage << ": " << g.Verify();
    if (stage == keep_stage) run.kept = g.Clone();
    return absl::OkStatus();
  };
  auto report = RunQuantizeFlow(gm, config, mapping, samples, options);
  EXPECT_TRUE(report.ok()) << report.status();
  if (report.ok()) run.report = *report;
  return run;
}

// The residual block through the whole flow: one nniq.ConvAddReLU2d reading the input's
// quantize and the (pass-through) identity, both quantized; one dequantize, at the output.
TEST(QuantizeFlowTest, ResidualExampleLowersToOneQuantizedConvAddRelu) {
  auto gm = *BuildResidualExample(kResidualExampleSeed);
  auto config = LoadBackendConfigFile(kExampleConfig);
  ASSERT_TRUE(config.ok()) << config.status();
  auto mapping = *DefaultQConfigMapping("qnnpack");

  FlowRun run = RunFlow(*gm, *config, mapping, RandomSamples(4, 1, {2, 4, 8, 8}), "prepare");
  ASSERT_TRUE(gm->Verify().ok()) << gm->Verify();
  EXPECT_EQ(run.report.fused, 1);
  EXPECT_TRUE(run.report.prepare.kept_float.empty()) << run.report.prepare.ToString();
  EXPECT_TRUE(run.report.lowering.unlowered.empty()) << run.report.lowering.ToString();

  const auto blocks = NodesCalling(*gm, "nniq.ConvAddReLU2d");
  ASSERT_EQ(blocks.size(), 1u) << Listing(gm->graph());
  const Node* block = blocks[0];
  ASSERT_EQ(block->num_args(), 2u);
  const Node* input = block->arg(0).as_node();
  const Node* residual = block->arg(1).as_node();
  EXPECT_EQ(input->target().name(), "torch.quantize_per_tensor") << Listing(gm->graph());
  EXPECT_EQ(input->arg(0).as_node()->op(), OpKind::kPlaceholder);
  // The identity runs on the quantized tensor itself: no dequantize in between.
  EXPECT_EQ(residual->op(), OpKind::kCallModule) << Listing(gm->graph());
  EXPECT_EQ(gm->FindModule(residual->target().name())->type().name(), "nn.Identity");
  EXPECT_EQ(residual->arg(0).as_node(), input);

  const auto dequantizes = NodesCalling(*gm, "dequantize");
  ASSERT_EQ(dequantizes.size(), 1u) << Listing(gm->graph());
  EXPECT_EQ(dequantizes[0]->arg(0).as_node(), block);
  EXPECT_EQ(gm->graph().output()->arg(0).as_node(), dequantizes[0]);
  // placeholder, quantize, identity, block, dequantize, output.
  EXPECT_EQ(gm->graph().size(), 6u) << Listing(gm->graph());
  // No observer is left behind in the module tree.
  EXPECT_EQ(gm->FindModule("observers"), nullptr);

  // The prepared graph: observers after x (shared by identity and the block), after the
  // identity (the same observer module: identity shares its input's) and after the block.
  ASSERT_NE(run.kept, nullptr);
  int observer_nodes = 0;
  for (const Node* n : run.kept->graph().Nodes()) {
    if (n->op() == OpKind::kCallModule &&
        IsObserverModuleType(run.kept->FindModule(n->target().name())->type())) {
      ++observer_nodes;
    }
  }
  EXPECT_EQ(observer_nodes, 3) << Listing(run.kept->graph());
  EXPECT_EQ(run.report.prepare.observer_modules, 2);
}

// conv-bn-relu with `channels` outputs on input x.
Node* ConvBnRelu(GraphModule& gm, Node* x, const std::string& prefix, int64_t channels,
                 std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  auto draw = [&](int64_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& f : v) f = d(rng);
    return v;
  };
  auto conv = std::make_unique<Module>("nn.Conv2d");
  conv->SetTensor("weight", Tensor::FromFloats({channels, 4, 3, 3}, draw(channels * 36, -0.3f, 0.3f)));
  conv->SetTensor("bias", Tensor::FromFloats({channels}, draw(channels, -0.2f, 0.2f)));
  conv->SetAttribute("in_channels", Argument::Int(4));
  conv->SetAttribute("out_channels", Argument::Int(channels));
  conv->SetAttribute("kernel_size", Argument::Ints({3, 3}));
  conv->SetAttribute("stride", Argument::Ints({1, 1}));
  conv->SetAttribute("padding", Argument::Ints({1, 1}));
  conv->SetAttribute("dilation", Argument::Ints({1, 1}));
  conv->SetAttribute("groups", Argument::Int(1));
  conv->SetAttribute("padding_mode", Argument::String("zeros"));
  auto bn = std::make_unique<Module>("nn.BatchNorm2d");
  bn->SetTensor("weight", Tensor::FromFloats({channels}, draw(channels, 0.5f, 1.5f)));
  bn->SetTensor("bias", Tensor::FromFloats({channels}, draw(channels, -0.5f, 0.5f)));
  bn->SetTensor("running_mean", Tensor::FromFloats({channels}, draw(channels, -0.5f, 0.5f)));
  bn->SetTensor("running_var", Tensor::FromFloats({channels}, draw(channels, 0.5f, 2.0f)));
  bn->SetAttribute("num_features", Argument::Int(channels));
  bn->SetAttribute("eps", Argument::Float(1e-5));
  bn->SetAttribute("momentum", Argument::Float(0.1));
  bn->SetAttribute("affine", Argument::Bool(true));
  bn->SetAttribute("track_running_stats", Argument::Bool(true));
  EXPECT_TRUE(gm.SetModule(prefix + "_conv", std::move(conv)).ok());
  EXPECT_TRUE(gm.SetModule(prefix + "_bn", std::move(bn)).ok());
  EXPECT_TRUE(gm.SetModule(prefix + "_relu", std::make_unique<Module>("nn.ReLU")).ok());
  Graph& g = gm.graph();
  Node* c = *g.AddCallModule(prefix + "_conv", {x});
  Node* b = *g.AddCallModule(prefix + "_bn", {c});
  return *g.AddCallModule(prefix + "_relu", {b});
}

// Two conv-bn-relu branches of different widths, returned as a tuple: two output
// dequantize nodes, each with its own branch's observer parameters.
TEST(QuantizeFlowTest, TwoOutputsKeepTheirOwnQuantizationParameters) {
  GraphModule gm;
  std::mt19937 rng(7);
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* narrow = ConvBnRelu(gm, x, "narrow", 3, rng);
  Node* wide = ConvBnRelu(gm, x, "wide", 6, rng);
  ASSERT_TRUE(gm.graph().SetOutput(Argument::Tuple({narrow, wide})).ok());
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();

  auto config = *GetBackendConfig("qnnpack");
  auto mapping = *DefaultQConfigMapping("qnnpack");
  const auto samples = RandomSamples(3, 2, {1, 4, 6, 6});
  FlowRun run = RunFlow(gm, config, mapping, samples, "fuse");
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  EXPECT_EQ(run.report.fused, 2);
  EXPECT_TRUE(run.report.lowering.unlowered.empty()) << run.report.lowering.ToString();

  const Argument& result = gm.graph().output()->arg(0);
  ASSERT_TRUE(result.is_tuple());
  ASSERT_EQ(result.items().size(), 2u);
  std::vector<double> scales;
  for (int i = 0; i < 2; ++i) {
    const Node* dq = result.items()[i].as_node();
    ASSERT_EQ(dq->target().name(), "dequantize") << Listing(gm.graph());
    const Node* conv = dq->arg(0).as_node();
    const Module* native = gm.FindModule(conv->target().name());
    ASSERT_NE(native, nullptr);
    EXPECT_EQ(native->type().name(), "nniq.ConvReLU2d");
    scales.push_back(*native->GetFloat("scale"));
  }
  EXPECT_EQ(NodesCalling(gm, "dequantize").size(), 2u);
  EXPECT_NE(scales[0], scales[1]);

  // Each scale is what the branch's own observer computes: a HistogramObserver (qnnpack's
  // default, reduce_range off) fed the branch's float output (of the fused graph, whose
  // folded batch norm the observers saw) on the same samples.
  ASSERT_NE(run.kept, nullptr);
  const GraphModule& float_model = *run.kept;
  auto kernels = *BuiltinKernels();
  for (int i = 0; i < 2; ++i) {
    ObserverSpec spec = mapping.QConfigFor("nni.ConvReLU2d", "")->activation;
    auto observer = *MakeObserver(spec);
    for (const CalibrationSample& s : samples) {
      auto outputs = fuselage::Run(float_model, {Value(s[0])}, *kernels);
      ASSERT_TRUE(outputs.ok()) << outputs.status();
      ASSERT_TRUE(observer->Update((*outputs)[static_cast<size_t>(i)].as_tensor()).ok());
    }
    const ObserverQParams expected = *observer->CalculateQParams();
    EXPECT_DOUBLE_EQ(scales[static_cast<size_t>(i)], static_cast<double>(expected.scales[0]))
        << "output " << i;
  }
}

}  // namespace
}  // namespace fuselage
