// LowerToNative on dq → nn.PReLU → quantize: the pattern becomes an nnq.PReLU reading the
// quantized input, with the weight quantized as PyTorch 1.13's nnq.PReLU.from_reference
// does (scale 1.0, zero point 0, quint8: slopes rounded half to even and clamped to
// [0, 255]), and an nn.PReLU with a non-float weight stays unlowered with the graph untouched.
#include "lowering/prelu_lowering.h"

#include <memory>
#include <string>
#include <vector>

#include "graph/graph_module.h"
#include "gtest/gtest.h"
#include "lowering/lower_to_native.h"
#include "lowering/lowering_rule.h"

namespace fuselage {
namespace {

std::string Listing(const Graph& g) {
  std::string s;
  for (const Node* n : g.Nodes()) s += n->ToString() + "\n";
  return s;
}

// x → quantize(0.05, 128) → dequantize → prelu → quantize(0.03, 7) → dequantize → output.
struct Pattern {
  GraphModule gm;
  Node* x_q = nullptr;
  Node* prelu = nullptr;
};
std::unique_ptr<Pattern> Build(std::unique_ptr<Module> prelu) {
  auto p = std::make_unique<Pattern>();
  Graph& g = p->gm.graph();
  auto quantize = [&g](Node* x, double scale, int64_t zp) {
    return *g.AddCallFunction("torch.quantize_per_tensor",
                              {x, Argument::Float(scale), Argument::Int(zp),
                               Argument::Dtype(DType::kQUInt8)});
  };
  p->x_q = quantize(*g.AddPlaceholder("x"), 0.05, 128);
  EXPECT_TRUE(p->gm.SetModule("prelu", std::move(prelu)).ok());
  p->prelu = *g.AddCallModule("prelu", {*g.AddCallMethod("dequantize", {p->x_q})});
  EXPECT_TRUE(g.SetOutput(*g.AddCallMethod("dequantize", {quantize(p->prelu, 0.03, 7)})).ok());
  EXPECT_TRUE(p->gm.Verify().ok()) << p->gm.Verify();
  return p;
}

std::unique_ptr<Module> PRelu(std::vector<float> slopes) {
  auto m = std::make_unique<Module>("nn.PReLU");
  const int64_t n = static_cast<int64_t>(slopes.size());
  m->SetTensor("weight", Tensor::FromFloats({n}, slopes));
  m->SetAttribute("num_parameters", Argument::Int(n));
  return m;
}

TEST(PReluLoweringTest, BecomesNnqPReluWithPyTorchsWeightQuantization) {
  auto p = Build(PRelu({-0.5f, 0.3f, 1.5f, 2.0f}));
  LoweringRuleRegistry rules;
  ASSERT_TRUE(RegisterNativeLoweringRules(rules).ok());
  auto report = LowerToNative(p->gm, rules);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->unlowered.empty()) << report->ToString();
  EXPECT_EQ(report->lowered_per_rule.at("prelu"), 1);
  ASSERT_TRUE(p->gm.Verify().ok()) << p->gm.Verify();
  // The module reads the quantized input; its quantize is gone (only x's is left).
  EXPECT_EQ(p->prelu->arg(0).as_node(), p->x_q) << Listing(p->gm.graph());
  int quantizes = 0;
  for (const Node* n : p->gm.graph().Nodes()) {
    quantizes += n->target().name() == "torch.quantize_per_tensor" ? 1 : 0;
  }
  EXPECT_EQ(quantizes, 1) << Listing(p->gm.graph());

  const Module* native = p->gm.FindModule("prelu");
  ASSERT_NE(native, nullptr);
  EXPECT_EQ(native->type().name(), "nnq.PReLU");
  EXPECT_EQ(*native->GetFloat("scale"), 0.03);
  EXPECT_EQ(*native->GetInt("zero_point"), 7);
  EXPECT_EQ(*native->GetInt("num_parameters"), 4);
  const Tensor* w = native->FindTensor("weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype(), DType::kQUInt8);
  // MinMaxObserver over [-0.5, 2.0] on quint8: scale 2.5 / 255, zero point
  // round(0.5 / scale) = 51; then q = round(w / scale) + 51: -51 + 51, 30.6 -> 31 + 51,
  // 153 + 51, 204 + 51 (worked out by hand; PyTorch 2's from_reference gives the same).
  EXPECT_FLOAT_EQ(static_cast<float>(w->qparams().scales[0]), 2.5f / 255.0f);
  EXPECT_EQ(w->qparams().zero_points[0], 51);
  const std::vector<uint8_t> want = {0, 82, 204, 255};
  ASSERT_EQ(w->numel(), 4);
  EXPECT_EQ(std::vector<uint8_t>(w->data<uint8_t>(), w->data<uint8_t>() + 4), want);
}

TEST(PReluLoweringTest, ANonFloatWeightLeavesThePatternAndIsReported) {
  auto int_weight = std::make_unique<Module>("nn.PReLU");
  int_weight->SetTensor("weight", Tensor::FromInt64s({2}, {1, 2}));
  auto p = Build(std::move(int_weight));
  const std::string before = Listing(p->gm.graph());
  LoweringRuleRegistry rules;
  ASSERT_TRUE(RegisterNativeLoweringRules(rules).ok());
  auto report = LowerToNative(p->gm, rules);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->unlowered.size(), 1u) << report->ToString();
  EXPECT_NE(report->unlowered[0].reason.find("expected a non-empty torch.float32"),
            std::string::npos)
      << report->ToString();
  EXPECT_EQ(Listing(p->gm.graph()), before);
  EXPECT_EQ(p->gm.FindModule("prelu")->type().name(), "nn.PReLU");
}

TEST(PReluLoweringTest, BuilderRejectsAMissingWeight) {
  Module m("nn.PReLU");
  auto built = BuildQuantizedPRelu(m, OutputQParams{0.1, 0, DType::kQUInt8});
  ASSERT_FALSE(built.ok());
  EXPECT_NE(std::string(built.status().message()).find("nn.PReLU module has no tensor 'weight'"),
            std::string::npos)
      << built.status();
}

}  // namespace
}  // namespace fuselage
