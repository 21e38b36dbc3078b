// LowerToNative on PyTorch 1.13's special patterns (_lower_to_native_backend.py's
// special_pattern_replacement): weightless modules become their nnq form with the
// quantize's scale and zero point (from_reference), nn.Dropout becomes nnq.Dropout and
// keeps its input's parameters, fixed-qparams ops run on the quantized tensor, and the
// default functionals become torch.ops.quantized.<name> without the kwargs their
// quantized forms lack (QOP_TO_ARG_NAMES_TO_SKIP).
#include <memory>
#include <string>
#include <vector>

#include "graph/graph_module.h"
#include "gtest/gtest.h"
#include "lowering/lower_to_native.h"
#include "lowering/lowering_rule.h"

namespace fuselage {
namespace {

Node* Quantize(Graph& g, Node* x, double scale, int64_t zp, absl::string_view name = "") {
  return *g.AddCallFunction("torch.quantize_per_tensor",
                            {x, Argument::Float(scale), Argument::Int(zp),
                             Argument::Dtype(DType::kQUInt8)},
                            {}, name);
}
Node* Dequantize(Graph& g, Node* x) { return *g.AddCallMethod("dequantize", {x}); }

std::string Listing(const Graph& g) {
  std::string s;
  for (const Node* n : g.Nodes()) s += n->ToString() + "\n";
  return s;
}

int Count(const Graph& g, absl::string_view target) {
  int n = 0;
  for (const Node* node : g.Nodes()) n += node->target().name() == target ? 1 : 0;
  return n;
}

// x → quantize(0.05, 128) → dequantize → <op> → quantize(scale, zp) → dequantize → output.
struct Pattern {
  GraphModule gm;
  Node* x_q = nullptr;
  Node* op = nullptr;
};
std::unique_ptr<Pattern> Build(OpKind kind, absl::string_view target, double scale,
                               int64_t zp, std::unique_ptr<Module> module = nullptr,
                               Kwargs kwargs = {}) {
  auto p = std::make_unique<Pattern>();
  Graph& g = p->gm.graph();
  p->x_q = Quantize(g, *g.AddPlaceholder("x"), 0.05, 128, "x_q");
  Node* dq = Dequantize(g, p->x_q);
  switch (kind) {
    case OpKind::kCallModule:
      EXPECT_TRUE(p->gm.SetModule("op", std::move(module)).ok());
      p->op = *g.AddCallModule("op", {dq});
      break;
    case OpKind::kCallMethod:
      p->op = *g.AddCallMethod(target, {dq});
      break;
    default:
      p->op = *g.AddCallFunction(target, {dq}, std::move(kwargs));
  }
  EXPECT_TRUE(g.SetOutput(Dequantize(g, Quantize(g, p->op, scale, zp))).ok());
  EXPECT_TRUE(p->gm.Verify().ok()) << p->gm.Verify();
  return p;
}

LoweringReport Lower(Pattern& p) {
  LoweringRuleRegistry rules;
  EXPECT_TRUE(RegisterNativeLoweringRules(rules).ok());
  auto report = LowerToNative(p.gm, rules);
  EXPECT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(p.gm.Verify().ok()) << p.gm.Verify() << Listing(p.gm.graph());
  EXPECT_TRUE(report->unlowered.empty()) << report->ToString();
  // The op reads the quantized input; the quantize after it is gone.
  EXPECT_EQ(p.op->arg(0).as_node(), p.x_q) << Listing(p.gm.graph());
  EXPECT_EQ(Count(p.gm.graph(), "torch.quantize_per_tensor"), 1) << Listing(p.gm.graph());
  return *report;
}

std::unique_ptr<Module> BatchNorm() {
  auto bn = std::make_unique<Module>("nn.BatchNorm2d");
  bn->SetTensor("weight", Tensor::FromFloats({2}, {1.5f, 0.5f}));
  bn->SetTensor("bias", Tensor::FromFloats({2}, {0.1f, -0.2f}));
  bn->SetTensor("running_mean", Tensor::FromFloats({2}, {0.3f, -0.4f}));
  bn->SetTensor("running_var", Tensor::FromFloats({2}, {2.0f, 0.25f}));
  bn->SetAttribute("num_features", Argument::Int(2));
  bn->SetAttribute("eps", Argument::Float(1e-5));
  bn->SetAttribute("momentum", Argument::Float(0.1));
  return bn;
}

void ExpectBatchNormFields(const Module& native, double scale, int64_t zp) {
  ASSERT_NE(native.FindTensor("running_var"), nullptr);
  EXPECT_EQ(native.FindTensor("running_var")->data<float>()[1], 0.25f);
  EXPECT_EQ(native.FindTensor("weight")->data<float>()[0], 1.5f);
  EXPECT_EQ(native.FindTensor("bias")->data<float>()[1], -0.2f);
  EXPECT_EQ(native.FindTensor("running_mean")->data<float>()[0], 0.3f);
  EXPECT_EQ(*native.GetFloat("eps"), 1e-5);
  EXPECT_EQ(*native.GetFloat("scale"), scale);
  EXPECT_EQ(*native.GetInt("zero_point"), zp);
  EXPECT_TRUE(native.children().empty());
}

TEST(SpecialPatternLoweringTest, BatchNormBecomesNnqBatchNorm2d) {
  auto p = Build(OpKind::kCallModule, "", 0.1, 3, BatchNorm());
  LoweringReport report = Lower(*p);
  EXPECT_EQ(report.lowered_per_rule.at("special:nn.BatchNorm2d"), 1);
  const Module* native = p->gm.FindModule("op");
  EXPECT_EQ(native->type().name(), "nnq.BatchNorm2d");
  ExpectBatchNormFields(*native, 0.1, 3);
}

TEST(SpecialPatternLoweringTest, BNReLU2dBecomesNniqBNReLU2dHoldingTheBatchNorm) {
  auto fused = std::make_unique<Module>("nni.BNReLU2d");
  fused->SetChild("0", BatchNorm());
  fused->SetChild("1", std::make_unique<Module>("nn.ReLU"));
  auto p = Build(OpKind::kCallModule, "", 0.2, 0, std::move(fused));
  Lower(*p);
  const Module* native = p->gm.FindModule("op");
  EXPECT_EQ(native->type().name(), "nniq.BNReLU2d");
  ExpectBatchNormFields(*native, 0.2, 0);
  const auto out = KnownOutputQParams(p->gm, p->op);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->scale, 0.2);
}

TEST(SpecialPatternLoweringTest, HardswishEluLeakyReluKeepTheirAttributes) {
  struct Case {
    const char* reference;
    const char* native;
    const char* attribute;
    double value;
  };
  for (const Case& c : {Case{"nn.Hardswish", "nnq.Hardswish", "", 0},
                        Case{"nn.ELU", "nnq.ELU", "alpha", 0.7},
                        Case{"nn.LeakyReLU", "nnq.LeakyReLU", "negative_slope", 0.2}}) {
    auto module = std::make_unique<Module>(c.reference);
    if (*c.attribute != '\0') module->SetAttribute(c.attribute, Argument::Float(c.value));
    auto p = Build(OpKind::kCallModule, "", 0.03, 7, std::move(module));
    Lower(*p);
    const Module* native = p->gm.FindModule("op");
    EXPECT_EQ(native->type().name(), c.native);
    EXPECT_EQ(*native->GetFloat("scale"), 0.03) << c.native;
    EXPECT_EQ(*native->GetInt("zero_point"), 7);
    if (*c.attribute != '\0') EXPECT_EQ(*native->GetFloat(c.attribute), c.value);
  }
}

TEST(SpecialPatternLoweringTest, DropoutBecomesNnqDropoutWithItsInputsParameters) {
  auto dropout = std::make_unique<Module>("nn.Dropout");
  dropout->SetAttribute("p", Argument::Float(0.5));
  // The quantize after it has other parameters (dropout has its own observer in
  // PyTorch's config); PyTorch drops that quantize: the identity keeps its input's.
  auto p = Build(OpKind::kCallModule, "", 0.2, 10, std::move(dropout));
  Lower(*p);
  const Module* native = p->gm.FindModule("op");
  EXPECT_EQ(native->type().name(), "nnq.Dropout");
  EXPECT_EQ(*native->GetFloat("p"), 0.5);
  const auto out = KnownOutputQParams(p->gm, p->op);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->scale, 0.05);
  EXPECT_EQ(out->zero_point, 128);
}

TEST(SpecialPatternLoweringTest, FixedQParamsOpsRunOnTheQuantizedTensor) {
  struct Case {
    OpKind kind;
    const char* target;
    double scale;
    int64_t zero_point;
  };
  // PyTorch's fixed parameters: [0, 1) -> 1/256, 0; [-1, 1) -> 2/256, 128.
  for (const Case& c : {Case{OpKind::kCallFunction, "torch.sigmoid", 1.0 / 256, 0},
                        Case{OpKind::kCallMethod, "sigmoid", 1.0 / 256, 0},
                        Case{OpKind::kCallFunction, "torch.nn.functional.hardsigmoid", 1.0 / 256, 0},
                        Case{OpKind::kCallFunction, "torch.tanh", 2.0 / 256, 128},
                        Case{OpKind::kCallMethod, "tanh", 2.0 / 256, 128}}) {
    // The quantize has the op's fixed parameters, not the input's: no requantization
    // refusal as for a pass-through op.
    auto p = Build(c.kind, c.target, c.scale, c.zero_point);
    Lower(*p);
    EXPECT_EQ(p->op->target().name(), c.target);
    const auto out = KnownOutputQParams(p->gm, p->op);
    ASSERT_TRUE(out.has_value());
    EXPECT_EQ(out->scale, c.scale);
    EXPECT_EQ(out->zero_point, c.zero_point);
  }
}

// A quantize with other parameters than the op makes (an observer a cat shared with its
// other inputs) is a real requantization: it stays, and the report says why.
TEST(SpecialPatternLoweringTest, FixedQParamsOpWithOtherParametersStaysReference) {
  auto p = Build(OpKind::kCallFunction, "torch.sigmoid", 0.01, 3);
  LoweringRuleRegistry rules;
  ASSERT_TRUE(RegisterNativeLoweringRules(rules).ok());
  auto report = LowerToNative(p->gm, rules);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->unlowered.size(), 1u) << report->ToString();
  EXPECT_NE(report->unlowered[0].reason.find("the op's own output has scale 0.00390625"),
            std::string::npos)
      << report->unlowered[0].reason;
  EXPECT_EQ(Count(p->gm.graph(), "torch.quantize_per_tensor"), 2);
}

TEST(SpecialPatternLoweringTest, DefaultFunctionalsBecomeQuantizedOpsWithoutInplace) {
  Kwargs kwargs = {{Symbol::Intern("inplace"), Argument::Bool(false)}};
  auto p = Build(OpKind::kCallFunction, "torch.nn.functional.hardswish", 0.04, 9, nullptr,
                 kwargs);
  Lower(*p);
  EXPECT_EQ(p->op->target().name(), "torch.ops.quantized.hardswish");
  EXPECT_EQ(p->op->FindKwarg("inplace"), nullptr);
  ASSERT_NE(p->op->FindKwarg("output_scale"), nullptr);
  EXPECT_EQ(*p->op->FindKwarg("output_scale"), Argument::Float(0.04));
  EXPECT_EQ(*p->op->FindKwarg("output_zero_point"), Argument::Int(9));
}

TEST(SpecialPatternLoweringTest, MeanAndShapeOpsPassThrough) {
  for (const auto& [kind, target] : std::vector<std::pair<OpKind, const char*>>{
           {OpKind::kCallMethod, "mean"}, {OpKind::kCallFunction, "torch.mean"},
           {OpKind::kCallMethod, "permute"}, {OpKind::kCallMethod, "transpose"},
           {OpKind::kCallFunction, "torch.transpose"}, {OpKind::kCallMethod, "unsqueeze"}}) {
    auto p = Build(kind, target, 0.05, 128);  // the input's parameters: shared observer
    LoweringReport report = Lower(*p);
    EXPECT_EQ(p->op->target().name(), target);
    EXPECT_EQ(report.total_lowered(), 1);
  }
}

}  // namespace
}  // namespace fuselage
