// The tutorial "Your own lowering rule" (docs/tutorials/lowering_rule.md shows this file
// verbatim; tests/docs/docs_in_sync_test.sh checks that it does).
//
// After convert, the fused module of the first tutorial, user.ConvMulReLU2d, sits in its
// reference pattern
//
//     dq(x_q), dq(s_q) -> user.ConvMulReLU2d (child "0" an nnqr.Conv2d) -> quantize
//
// One rule in the public registry lowers it to a native userq.ConvMulReLU2d that reads both
// quantized tensors directly and carries its output's scale and zero point.
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/graph_module.h"
#include "graph/module_schema.h"
#include "graph/printer.h"
#include "graph/status_macros.h"
#include "gtest/gtest.h"
#include "lowering/lower_to_native.h"
#include "lowering/lowering_rule.h"

namespace {

using fuselage::Argument;
using fuselage::DType;
using fuselage::GraphModule;
using fuselage::LoweringRule;
using fuselage::Module;
using fuselage::Node;
using fuselage::Tensor;

// Step 1: the two module types: the fused float / reference module (as in the first
// tutorial) and the native one lowering produces (it must carry the quantized weight).
absl::Status RegisterSchemas() {
  fuselage::ModuleSchema fused;
  fused.type = "user.ConvMulReLU2d";
  fused.min_inputs = fused.max_inputs = 2;
  fused.children = {{"nn.Conv2d", "nnqr.Conv2d"}, {"nn.ReLU"}};
  fuselage::ModuleSchema native;
  native.type = "userq.ConvMulReLU2d";
  native.min_inputs = native.max_inputs = 2;
  native.required_tensors = {"weight"};
  auto& schemas = fuselage::ModuleSchemaRegistry::Global();
  RETURN_IF_ERROR(schemas.Register(std::move(fused)));
  return schemas.Register(std::move(native));
}

// Step 2: the rule. A call_module of user.ConvMulReLU2d whose child "0" is a reference
// conv, with args 0 and 1 dequantized tensors, becomes a call_module of
// userq.ConvMulReLU2d. With no `build_module`, BuildNativeWeightedModule quantizes the
// reference conv's weight (as PyTorch's from_reference does) and sets scale / zero_point.
LoweringRule ConvMulReLURule() {
  LoweringRule rule;
  rule.name = "user-conv-mul-relu2d";
  rule.action = LoweringRule::Action::kNativeModule;
  rule.reference_op = fuselage::OpKind::kCallModule;
  rule.reference_target = "user.ConvMulReLU2d";
  rule.inner_type = "nnqr.Conv2d";
  rule.dequantized_args = {0, 1};
  rule.native_target = "userq.ConvMulReLU2d";
  return rule;
}

// Step 3: a reference model, as convert leaves it: the reference conv's float weight 0.5
// with its weight quantization parameters (scale 0.1, zero point 0), inputs quantized with
// (0.05, 10) and (0.07, 20), the output with (0.3, 7).
std::unique_ptr<Module> ReferenceConv() {
  auto conv = std::make_unique<Module>("nnqr.Conv2d");
  conv->SetTensor("weight", Tensor::FromFloats({1, 1, 1, 1}, {0.5f}));
  conv->SetTensor("bias", Tensor::FromFloats({1}, {-1.0f}));
  conv->SetTensor("weight_scale", Tensor::FromFloats({1}, {0.1f}));
  conv->SetTensor("weight_zero_point", Tensor::FromInt64s({1}, {0}));
  conv->SetTensor("weight_axis", Tensor::FromInt64s({}, {0}));
  conv->SetAttribute("weight_qscheme", Argument::String("torch.per_channel_affine"));
  conv->SetAttribute("weight_dtype", Argument::Dtype(DType::kQInt8));
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

absl::StatusOr<Node*> Quantize(fuselage::Graph& g, Node* x, double scale, int64_t zero_point,
                               absl::string_view name) {
  return g.AddCallFunction("torch.quantize_per_tensor",
                           {x, Argument::Float(scale), Argument::Int(zero_point),
                            Argument::Dtype(DType::kQUInt8)},
                           {}, name);
}

absl::StatusOr<std::unique_ptr<GraphModule>> MakeReferenceModel() {
  auto gm = std::make_unique<GraphModule>();
  auto fused = std::make_unique<Module>("user.ConvMulReLU2d");
  fused->SetChild("0", ReferenceConv());
  fused->SetChild("1", std::make_unique<Module>("nn.ReLU"));
  RETURN_IF_ERROR(gm->SetModule("block", std::move(fused)));
  fuselage::Graph& g = gm->graph();
  ASSIGN_OR_RETURN(Node * x, g.AddPlaceholder("x"));
  ASSIGN_OR_RETURN(Node * s, g.AddPlaceholder("s"));
  ASSIGN_OR_RETURN(Node * x_q, Quantize(g, x, 0.05, 10, "x_q"));
  ASSIGN_OR_RETURN(Node * s_q, Quantize(g, s, 0.07, 20, "s_q"));
  ASSIGN_OR_RETURN(Node * x_dq, g.AddCallMethod("dequantize", {x_q}));
  ASSIGN_OR_RETURN(Node * s_dq, g.AddCallMethod("dequantize", {s_q}));
  ASSIGN_OR_RETURN(Node * y, g.AddCallModule("block", {x_dq, s_dq}));
  ASSIGN_OR_RETURN(Node * y_q, Quantize(g, y, 0.3, 7, "y_q"));
  ASSIGN_OR_RETURN(Node * out, g.AddCallMethod("dequantize", {y_q}));
  RETURN_IF_ERROR(g.SetOutput(out).status());
  RETURN_IF_ERROR(gm->Verify());
  return gm;
}

// Step 4: lower with the built-in rules plus ours.
TEST(LoweringRuleTutorial, UserFusedModuleLowersWithBothInputsQuantized) {
  ASSERT_TRUE(RegisterSchemas().ok());
  fuselage::LoweringRuleRegistry rules;
  ASSERT_TRUE(fuselage::RegisterNativeLoweringRules(rules).ok());

  // Without our rule the pattern stays as it is, and the report says why.
  absl::StatusOr<std::unique_ptr<GraphModule>> unlowered = MakeReferenceModel();
  ASSERT_TRUE(unlowered.ok()) << unlowered.status();
  absl::StatusOr<fuselage::LoweringReport> report = fuselage::LowerToNative(**unlowered, rules);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->unlowered.size(), 1u) << report->ToString();
  EXPECT_EQ(report->unlowered[0].node, "block");
  EXPECT_NE(report->ToString().find("no lowering rule for call_module user.ConvMulReLU2d"),
            std::string::npos)
      << report->ToString();

  // With it.
  ASSERT_TRUE(rules.Register(ConvMulReLURule()).ok());
  absl::StatusOr<std::unique_ptr<GraphModule>> made = MakeReferenceModel();
  ASSERT_TRUE(made.ok()) << made.status();
  GraphModule& gm = **made;
  report = fuselage::LowerToNative(gm, rules);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->lowered_per_rule.at("user-conv-mul-relu2d"), 1);
  EXPECT_TRUE(report->unlowered.empty()) << report->ToString();
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();

  // Both inputs arrive quantized; the quantize after the op is absorbed; one dequantize
  // is left, at the output.
  EXPECT_EQ(fuselage::PrintCode(gm),
            "def forward(self, x, s):\n"
            "    x_q = torch.quantize_per_tensor(x, 0.05, 10, torch.quint8)\n"
            "    s_q = torch.quantize_per_tensor(s, 0.07, 20, torch.quint8)\n"
            "    block = self.block(x_q, s_q)\n"
            "    dequantize_2 = block.dequantize()\n"
            "    return dequantize_2\n");

  // The native module: the output's qparams, and the weight quantized by hand:
  // round(0.5 / 0.1) = 5.
  const Module* native = gm.FindModule("block");
  ASSERT_NE(native, nullptr);
  EXPECT_EQ(native->type().name(), "userq.ConvMulReLU2d");
  EXPECT_DOUBLE_EQ(*native->GetFloat("scale"), 0.3);
  EXPECT_EQ(*native->GetInt("zero_point"), 7);
  const Tensor* weight = native->FindTensor("weight");
  ASSERT_NE(weight, nullptr);
  EXPECT_EQ(weight->dtype(), DType::kQInt8);
  EXPECT_EQ(weight->data<int8_t>()[0], 5);
}

}  // namespace
