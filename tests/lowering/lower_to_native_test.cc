// LowerToNative on hand-built reference graphs (the shape PyTorch 1.13's
// convert_to_reference_fx produces), asserting the lowered structure exactly and the
// native modules' contents against hand-computed values.
#include "lowering/lower_to_native.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "graph/graph_module.h"
#include "lowering/lowering_rule.h"
#include "quantize/qconfig.h"

namespace fuselage {
namespace {

#define ASSERT_OK_AND_ASSIGN(lhs, expr)       \
  auto lhs##_or = (expr);                     \
  ASSERT_TRUE(lhs##_or.ok()) << lhs##_or.status(); \
  auto lhs = *lhs##_or

Tensor Floats(std::vector<int64_t> shape, std::vector<float> v) {
  return Tensor::FromFloats(std::move(shape), v);
}

// nnqr.Conv2d 2→2 channels, 1x1, per-channel weights: channel 0 scale 0.1, channel 1
// scale 0.02, zero points 0.
std::unique_ptr<Module> ReferenceConv() {
  auto conv = std::make_unique<Module>("nnqr.Conv2d");
  conv->SetTensor("weight", Floats({2, 2, 1, 1}, {0.25f, -0.3f, 0.5f, 3.0f}));
  conv->SetTensor("bias", Floats({2}, {0.5f, -1.0f}));
  conv->SetTensor("weight_scale", Floats({2}, {0.1f, 0.02f}));
  conv->SetTensor("weight_zero_point", Tensor::FromInt64s({2}, {0, 0}));
  conv->SetTensor("weight_axis", Tensor::FromInt64s({}, {0}));
  conv->SetAttribute("weight_qscheme", Argument::String("torch.per_channel_affine"));
  conv->SetAttribute("weight_dtype", Argument::Dtype(DType::kQInt8));
  conv->SetAttribute("in_channels", Argument::Int(2));
  conv->SetAttribute("out_channels", Argument::Int(2));
  conv->SetAttribute("kernel_size", Argument::Ints({1, 1}));
  conv->SetAttribute("stride", Argument::Ints({1, 1}));
  conv->SetAttribute("padding", Argument::Ints({0, 0}));
  conv->SetAttribute("dilation", Argument::Ints({1, 1}));
  conv->SetAttribute("groups", Argument::Int(1));
  conv->SetAttribute("padding_mode", Argument::String("zeros"));
  return conv;
}

std::unique_ptr<Module> Fused(absl::string_view type, std::unique_ptr<Module> inner,
                              bool with_relu) {
  auto fused = std::make_unique<Module>(type);
  fused->SetChild("0", std::move(inner));
  if (with_relu) fused->SetChild("1", std::make_unique<Module>("nn.ReLU"));
  return fused;
}

Node* Quantize(Graph& g, Node* x, double scale, int64_t zp, absl::string_view name = "") {
  return *g.AddCallFunction("torch.quantize_per_tensor",
                            {x, Argument::Float(scale), Argument::Int(zp),
                             Argument::Dtype(DType::kQUInt8)},
                            {}, name);
}
Node* Dequantize(Graph& g, Node* x) { return *g.AddCallMethod("dequantize", {x}); }

int Count(const Graph& g, OpKind op, absl::string_view target) {
  int n = 0;
  for (const Node* node : g.Nodes()) n += node->op() == op && node->target().name() == target;
  return n;
}

std::string Listing(const Graph& g) {
  std::string s;
  for (const Node* n : g.Nodes()) s += n->ToString() + "\n";
  return s;
}

// x_q = quantize(x, 0.05, 128) and conv = F.conv2d(dequantize(x_q), dequantize(quantize(w,
// 0.01, 0, qint8))), w a 1x1x1x1 constant 0.5 of `gm`.
struct FunctionalConv {
  Node* x_q;
  Node* conv;
};
FunctionalConv AddFunctionalConv(GraphModule& gm) {
  EXPECT_TRUE(gm.SetTensor("w", Floats({1, 1, 1, 1}, {0.5f})).ok());
  Graph& g = gm.graph();
  Node* x_q = Quantize(g, *g.AddPlaceholder("x"), 0.05, 128, "x_q");
  Node* w_q = *g.AddCallFunction("torch.quantize_per_tensor",
                                 {*g.AddGetAttr("w"), Argument::Float(0.01), Argument::Int(0),
                                  Argument::Dtype(DType::kQInt8)});
  Node* conv = *g.AddCallFunction("torch.nn.functional.conv2d",
                                  {Dequantize(g, x_q), Dequantize(g, w_q), Argument::None()});
  return {x_q, conv};
}

std::unique_ptr<LoweringRuleRegistry> NativeRules() {
  auto r = std::make_unique<LoweringRuleRegistry>();
  EXPECT_TRUE(RegisterNativeLoweringRules(*r).ok());
  return r;
}

// The residual block: relu(conv(x) + x) fused into nni.ConvAddReLU2d, converted to
// reference (two dequantize nodes of the same quantized input).
TEST(LowerToNativeTest, ResidualConvAddReluTakesBothInputsQuantized) {
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("block", Fused("nni.ConvAddReLU2d", ReferenceConv(), true)).ok());
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* x_q = Quantize(g, x, 0.05, 128, "x_q");
  Node* dq1 = Dequantize(g, x_q);
  Node* dq2 = Dequantize(g, x_q);
  Node* y = *g.AddCallModule("block", {dq1, dq2});
  Node* y_q = Quantize(g, y, 0.1, 0);
  Node* out = Dequantize(g, y_q);
  ASSERT_TRUE(g.SetOutput(out).ok());
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();

  auto rules = NativeRules();
  ASSERT_OK_AND_ASSIGN(report, LowerToNative(gm, *rules));
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify() << "\n" << Listing(g);

  EXPECT_EQ(report.lowered_per_rule.at("conv-add-relu2d"), 1);
  EXPECT_EQ(report.total_lowered(), 1);
  EXPECT_TRUE(report.unlowered.empty()) << report.ToString();
  // x, x_q, block, dequantize, output — nothing else.
  ASSERT_EQ(g.size(), 5u) << Listing(g);
  EXPECT_EQ(Count(g, OpKind::kCallModule, "block"), 1);
  EXPECT_EQ(Count(g, OpKind::kCallMethod, "dequantize"), 1);
  ASSERT_EQ(y->num_args(), 2u);
  EXPECT_EQ(y->arg(0), Argument(x_q));
  EXPECT_EQ(y->arg(1), Argument(x_q));
  const Node* output_value = g.output()->arg(0).as_node();
  EXPECT_EQ(output_value->target().name(), "dequantize");
  EXPECT_EQ(output_value->arg(0), Argument(y));

  const Module* native = gm.FindModule("block");
  ASSERT_NE(native, nullptr);
  EXPECT_EQ(native->type().name(), "nniq.ConvAddReLU2d");
  EXPECT_DOUBLE_EQ(*native->GetFloat("scale"), 0.1);
  EXPECT_EQ(*native->GetInt("zero_point"), 0);
  EXPECT_EQ(*native->GetInt("out_channels"), 2);
  const Tensor* w = native->FindTensor("weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype(), DType::kQInt8);
  EXPECT_EQ(w->qparams().scheme, QScheme::kPerChannelAffine);
  // 0.25/0.1 = 2.5 → 2 (half to even); -0.3/0.1 → -3; 0.5/0.02 → 25; 3.0/0.02 = 150 → 127.
  const int8_t* q = w->data<int8_t>();
  EXPECT_EQ(std::vector<int>(q, q + 4), std::vector<int>({2, -3, 25, 127}));
  EXPECT_EQ(*native->FindTensor("bias"), Floats({2}, {0.5f, -1.0f}));
  EXPECT_EQ(native->FindAttribute("weight_qscheme"), nullptr);
}

// Two fused nodes share one meta block ({"pattern": ...}, as the fusion pass gives every
// node of a rule). Lowering gives each its own output_qparams after the pattern entry,
// and neither's qparams leak into the other's meta.
TEST(LowerToNativeTest, NativeNodesSharingPatternMetaEachGetTheirOwnOutputQParams) {
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("block1", Fused("nni.ConvAddReLU2d", ReferenceConv(), true)).ok());
  ASSERT_TRUE(gm.SetModule("block2", Fused("nni.ConvAddReLU2d", ReferenceConv(), true)).ok());
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* x_q = Quantize(g, x, 0.05, 128, "x_q");
  Node* y1 = *g.AddCallModule("block1", {Dequantize(g, x_q), Dequantize(g, x_q)});
  Node* y1_q = Quantize(g, y1, 0.25, 3);
  Node* y2 = *g.AddCallModule("block2", {Dequantize(g, y1_q), Dequantize(g, y1_q)});
  Node* y2_q = Quantize(g, y2, 0.5, 7);
  ASSERT_TRUE(g.SetOutput(Dequantize(g, y2_q)).ok());
  const Symbol pattern = Symbol::Intern("pattern");
  ASSERT_OK_AND_ASSIGN(meta, NodeMeta::Make({{pattern, Argument::String("conv_add_relu")}}));
  ASSERT_TRUE(g.SetMeta(y1, meta).ok());
  ASSERT_TRUE(g.SetMeta(y2, meta).ok());
  ASSERT_TRUE(y1->shared_meta().shared());
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();

  auto rules = NativeRules();
  ASSERT_OK_AND_ASSIGN(report, LowerToNative(gm, *rules));
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify() << "\n" << Listing(g);
  EXPECT_EQ(report.lowered_per_rule.at("conv-add-relu2d"), 2);

  const Symbol qparams = Symbol::Intern("output_qparams");
  const auto expect_meta = [&](const Node* n, double scale, int64_t zp) {
    ASSERT_EQ(n->meta().size(), 2u) << n->ToString();
    EXPECT_EQ(n->meta()[0].first, pattern);
    EXPECT_EQ(n->meta()[0].second, Argument::String("conv_add_relu"));
    EXPECT_EQ(n->meta()[1].first, qparams);
    EXPECT_EQ(n->meta()[1].second,
              Argument::Tuple({Argument::Float(scale), Argument::Int(zp),
                               Argument::Dtype(DType::kQUInt8)}));
  };
  expect_meta(y1, 0.25, 3);
  expect_meta(y2, 0.5, 7);
  // The block they shared is unchanged.
  ASSERT_EQ(meta.entries().size(), 1u);
  EXPECT_EQ(meta.entries()[0].first, pattern);
}

// A user's own two-input fused module lowers through the public registry only.
TEST(LowerToNativeTest, UserRegisteredTwoInputModuleLowersWithBothInputsQuantized) {
  ASSERT_TRUE(ModuleSchemaRegistry::Global().Register({"user.ConvMul2d", 2, 2, {}}).ok());
  ASSERT_TRUE(ModuleSchemaRegistry::Global().Register({"userq.ConvMul2d", 2, 2, {"weight"}}).ok());
  auto build = [](const LoweringRuleRegistry& rules) {
    auto gm = std::make_unique<GraphModule>();
    EXPECT_TRUE(gm->SetModule("fused", Fused("user.ConvMul2d", ReferenceConv(), false)).ok());
    Graph& g = gm->graph();
    Node* a = *g.AddPlaceholder("a");
    Node* b = *g.AddPlaceholder("b");
    Node* a_q = Quantize(g, a, 0.05, 10, "a_q");
    Node* b_q = Quantize(g, b, 0.07, 20, "b_q");
    Node* y = *g.AddCallModule("fused", {Dequantize(g, a_q), Dequantize(g, b_q)});
    EXPECT_TRUE(g.SetOutput(Dequantize(g, Quantize(g, y, 0.3, 7))).ok());
    (void)rules;
    return gm;
  };

  // Without the rule: left as it is, and reported.
  auto builtin = NativeRules();
  auto gm = build(*builtin);
  const std::string before = Listing(gm->graph());
  ASSERT_OK_AND_ASSIGN(unlowered, LowerToNative(*gm, *builtin));
  EXPECT_EQ(Listing(gm->graph()), before);
  EXPECT_EQ(gm->FindModule("fused")->type().name(), "user.ConvMul2d");
  ASSERT_EQ(unlowered.unlowered.size(), 1u);
  EXPECT_EQ(unlowered.unlowered[0].node, "fused");
  EXPECT_NE(unlowered.unlowered[0].reason.find("no lowering rule for call_module user.ConvMul2d"),
            std::string::npos)
      << unlowered.ToString();

  // With the rule, registered by the same public API the built-ins use.
  LoweringRule rule;
  rule.name = "user-conv-mul2d";
  rule.action = LoweringRule::Action::kNativeModule;
  rule.reference_op = OpKind::kCallModule;
  rule.reference_target = "user.ConvMul2d";
  rule.inner_type = "nnqr.Conv2d";
  rule.dequantized_args = {0, 1};
  rule.native_target = "userq.ConvMul2d";
  ASSERT_TRUE(builtin->Register(rule).ok());
  EXPECT_EQ(builtin->Register(rule).code(), absl::StatusCode::kAlreadyExists);

  gm = build(*builtin);
  ASSERT_OK_AND_ASSIGN(report, LowerToNative(*gm, *builtin));
  ASSERT_TRUE(gm->Verify().ok()) << gm->Verify();
  EXPECT_EQ(report.lowered_per_rule.at("user-conv-mul2d"), 1);
  EXPECT_TRUE(report.unlowered.empty()) << report.ToString();
  const Graph& g = gm->graph();
  const Node* fused = g.FindNode("fused");
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(fused->arg(0), Argument(g.FindNode("a_q")));
  EXPECT_EQ(fused->arg(1), Argument(g.FindNode("b_q")));
  EXPECT_EQ(Count(g, OpKind::kCallMethod, "dequantize"), 1);
  const Module* native = gm->FindModule("fused");
  EXPECT_EQ(native->type().name(), "userq.ConvMul2d");
  EXPECT_DOUBLE_EQ(*native->GetFloat("scale"), 0.3);
  EXPECT_EQ(*native->GetInt("zero_point"), 7);
}

TEST(LowerToNativeTest, RegistryRejectsInconsistentRules) {
  LoweringRuleRegistry registry;
  LoweringRule rule;
  rule.name = "bad";
  rule.reference_target = "nnqr.Conv2d";
  rule.dequantized_args = {};
  rule.native_target = "nnq.Conv2d";
  absl::Status st = registry.Register(rule);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("dequantized_args"), std::string::npos) << st;
  rule.dequantized_args = {0};
  rule.reference_op = OpKind::kCallFunction;  // a module rule needs call_module
  EXPECT_EQ(registry.Register(rule).code(), absl::StatusCode::kInvalidArgument);
  rule.reference_op = OpKind::kCallModule;
  rule.native_target = "";
  EXPECT_EQ(registry.Register(rule).code(), absl::StatusCode::kInvalidArgument);
  // A relu is absorbed only by a function rule or a module rule built by the default
  // builder (a custom builder would build the module without the relu).
  rule.native_target = "nnq.Conv2d";
  rule.native_relu_target = "nniq.ConvReLU2d";
  rule.build_module = [](const Module& ref, const OutputQParams&) {
    return absl::StatusOr<std::unique_ptr<Module>>(std::make_unique<Module>(ref.type()));
  };
  st = registry.Register(rule);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("native_relu_target"), std::string::npos) << st;
  rule.build_module = nullptr;
  rule.action = LoweringRule::Action::kPassThrough;
  EXPECT_EQ(registry.Register(rule).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.size(), 0u);
}

// Two outputs, each with its own quantization parameters and its own dequantize.
TEST(LowerToNativeTest, EveryOutputKeepsItsOwnQuantizationParameters) {
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("conv_a", ReferenceConv()).ok());
  ASSERT_TRUE(gm.SetModule("conv_b", ReferenceConv()).ok());
  Graph& g = gm.graph();
  Node* x_q = Quantize(g, *g.AddPlaceholder("x"), 0.05, 128, "x_q");
  Node* a = *g.AddCallModule("conv_a", {Dequantize(g, x_q)});
  Node* b = *g.AddCallModule("conv_b", {Dequantize(g, x_q)});
  Node* out_a = Dequantize(g, Quantize(g, a, 0.1, 3));
  Node* out_b = Dequantize(g, Quantize(g, b, 0.25, 9));
  ASSERT_TRUE(g.SetOutput(Argument::Tuple({out_a, out_b})).ok());

  auto rules = NativeRules();
  ASSERT_OK_AND_ASSIGN(report, LowerToNative(gm, *rules));
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  EXPECT_EQ(report.lowered_per_rule.at("conv2d"), 2);
  EXPECT_EQ(gm.FindModule("conv_a")->type().name(), "nnq.Conv2d");
  EXPECT_DOUBLE_EQ(*gm.FindModule("conv_a")->GetFloat("scale"), 0.1);
  EXPECT_DOUBLE_EQ(*gm.FindModule("conv_b")->GetFloat("scale"), 0.25);
  EXPECT_EQ(*gm.FindModule("conv_b")->GetInt("zero_point"), 9);
  const Argument& result = g.output()->arg(0);
  ASSERT_TRUE(result.is_tuple());
  ASSERT_EQ(result.items().size(), 2u);
  EXPECT_EQ(result.items()[0].as_node()->target().name(), "dequantize");
  EXPECT_EQ(result.items()[0].as_node()->arg(0), Argument(a));
  EXPECT_EQ(result.items()[1].as_node()->target().name(), "dequantize");
  EXPECT_EQ(result.items()[1].as_node()->arg(0), Argument(b));
  EXPECT_EQ(a->arg(0), Argument(x_q));
  EXPECT_EQ(b->arg(0), Argument(x_q));
  EXPECT_EQ(Count(g, OpKind::kCallMethod, "dequantize"), 2);
  ASSERT_TRUE(KnownOutputQParams(gm, a).has_value());
  EXPECT_EQ(KnownOutputQParams(gm, a)->zero_point, 3);
}

// With a user's rule for tuple construction, every tuple access is lowered before any
// pattern, so the packer's accesses further on no longer count as users of its value:
//   t = builtins.tuple([x.dequantize()]); t_q = quantize(t); y = t[0]
// lowers t (one user after tuple lowering), although `y` comes after t_q. (The pass
// otherwise lowers patterns in the same walk as tuple accesses.)
TEST(LowerToNativeTest, PackerRuleSeesTupleAccessesLoweredFirst) {
  GraphModule gm;
  Graph& g = gm.graph();
  Node* x_q = Quantize(g, *g.AddPlaceholder("x"), 0.05, 7, "x_q");
  Node* a = Dequantize(g, x_q);
  Node* t = *g.AddCallFunction("builtins.tuple", {Argument::List({a})}, {}, "t");
  Node* t_q = Quantize(g, t, 0.05, 7, "t_q");
  Node* y = *g.AddCallFunction("operator.getitem", {t, Argument::Int(0)}, {}, "y");
  ASSERT_TRUE(g.SetOutput(Argument::Tuple({t_q, y})).ok());
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();

  auto rules = NativeRules();
  LoweringRule packer;
  packer.name = "pass-through:builtins.tuple";
  packer.action = LoweringRule::Action::kPassThrough;
  packer.reference_op = OpKind::kCallFunction;
  packer.reference_target = "builtins.tuple";
  packer.list_of_dequantized = true;
  ASSERT_TRUE(rules->Register(std::move(packer)).ok());
  ASSERT_OK_AND_ASSIGN(report, LowerToNative(gm, *rules));
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify() << "\n" << Listing(g);
  EXPECT_EQ(report.tuple_accesses_removed, 1);
  EXPECT_EQ(report.lowered_per_rule.count("pass-through:builtins.tuple"), 1u)
      << report.ToString();
  EXPECT_TRUE(report.unlowered.empty()) << report.ToString();
  // The output reads t (now packing x_q) and the dequantized item directly.
  EXPECT_EQ(t->arg(0), Argument::List({x_q}));
  EXPECT_EQ(g.output()->arg(0), Argument::Tuple({t, a}));
}

// Dead code: what the pass leaves unread (the dequantize a lowered op no longer reads) and
// what was dead before it ran (a chain and a dequantize nobody reads) all go, and the
// count says so; what the output reads stays.
TEST(LowerToNativeTest, RemovesEveryDeadNodeOldAndNew) {
  GraphModule gm;
  auto pool = std::make_unique<Module>("nn.MaxPool2d");
  pool->SetAttribute("kernel_size", Argument::Int(2));
  ASSERT_TRUE(gm.SetModule("pool", std::move(pool)).ok());
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* unused_relu = *g.AddCallFunction("torch.relu", {x}, {}, "unused_relu");
  *g.AddCallFunction("torch.sigmoid", {unused_relu}, {}, "unused_sigmoid");
  Node* x_q = Quantize(g, x, 0.05, 128, "x_q");
  *g.AddCallMethod("dequantize", {x_q}, {}, "unused_dq");
  Node* pooled = *g.AddCallModule("pool", {Dequantize(g, x_q)}, {}, "pooled");
  Node* out = Dequantize(g, Quantize(g, pooled, 0.05, 128));
  ASSERT_TRUE(g.SetOutput(out).ok());
  ASSERT_EQ(g.size(), 10u);

  auto rules = NativeRules();
  ASSERT_OK_AND_ASSIGN(report, LowerToNative(gm, *rules));
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  EXPECT_EQ(report.total_lowered(), 1);
  // unused_relu, unused_sigmoid, unused_dq, and the dequantize pooled read before.
  EXPECT_EQ(report.dead_nodes_removed, 4) << Listing(g);
  // x, x_q, pooled, dequantize, output.
  EXPECT_EQ(g.size(), 5u) << Listing(g);
  EXPECT_EQ(g.FindNode("unused_relu"), nullptr);
  EXPECT_EQ(g.FindNode("unused_dq"), nullptr);
  EXPECT_EQ(pooled->arg(0), Argument(x_q));
  EXPECT_EQ(g.output()->arg(0), Argument(out));
}

// add → relu on two dequantized tensors becomes torch.ops.quantized.add_relu(qa, qb, s, zp).
TEST(LowerToNativeTest, BinaryAddReluBecomesQuantizedAddRelu) {
  GraphModule gm;
  Graph& g = gm.graph();
  Node* a_q = Quantize(g, *g.AddPlaceholder("a"), 0.05, 10, "a_q");
  Node* b_q = Quantize(g, *g.AddPlaceholder("b"), 0.07, 20, "b_q");
  Node* add = *g.AddCallFunction("operator.add", {Dequantize(g, a_q), Dequantize(g, b_q)});
  Node* relu = *g.AddCallFunction("torch.relu", {add});
  ASSERT_TRUE(g.SetOutput(Dequantize(g, Quantize(g, relu, 0.2, 5))).ok());

  auto rules = NativeRules();
  ASSERT_OK_AND_ASSIGN(report, LowerToNative(gm, *rules));
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  EXPECT_EQ(report.lowered_per_rule.at("add:operator.add"), 1);
  EXPECT_EQ(add->op(), OpKind::kCallFunction);
  EXPECT_EQ(add->target().name(), "torch.ops.quantized.add_relu");
  ASSERT_EQ(add->num_args(), 4u);
  EXPECT_EQ(add->arg(0), Argument(a_q));
  EXPECT_EQ(add->arg(1), Argument(b_q));
  EXPECT_EQ(add->arg(2), Argument::Float(0.2));
  EXPECT_EQ(add->arg(3), Argument::Int(5));
  EXPECT_EQ(Count(g, OpKind::kCallFunction, "torch.relu"), 0);
  EXPECT_EQ(g.output()->arg(0).as_node()->arg(0), Argument(add));
  // a, b, a_q, b_q, add, dequantize, output.
  EXPECT_EQ(g.size(), 7u);
}

// `x + 3` and `2 * x` (a number on either side, relu absorbed) become
// torch.ops.quantized.add_relu(qx, 3) / mul(2, qx) with no output scale / zero point, as
// PyTorch lowers them; the quantize after each goes whatever its parameters, and the
// lowered node carries the parameters ATen's add_scalar / mul_scalar give it.
TEST(LowerToNativeTest, BinaryOpWithANumberMakesItsOwnOutputQParams) {
  GraphModule gm;
  Graph& g = gm.graph();
  Node* x_q = Quantize(g, *g.AddPlaceholder("x"), 0.05, 100, "x_q");
  Node* add = *g.AddCallFunction("operator.add", {Dequantize(g, x_q), Argument::Int(3)}, {},
                                 "add");
  Node* relu = *g.AddCallFunction("torch.relu", {add});
  // The shared observer gave the sum x's parameters: this quantize would clamp it.
  Node* add_q = Quantize(g, relu, 0.05, 100, "add_q");
  Node* mul = *g.AddCallFunction("torch.mul", {Argument::Float(2.0), Dequantize(g, add_q)}, {},
                                 "mul");
  ASSERT_TRUE(g.SetOutput(Dequantize(g, Quantize(g, mul, 0.05, 100))).ok());

  auto rules = NativeRules();
  ASSERT_OK_AND_ASSIGN(report, LowerToNative(gm, *rules));
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  EXPECT_EQ(report.lowered_per_rule.at("add-scalar:operator.add"), 1) << report.ToString();
  EXPECT_EQ(report.lowered_per_rule.at("mul-scalar-first:torch.mul"), 1) << report.ToString();
  EXPECT_EQ(add->target().name(), "torch.ops.quantized.add_relu") << Listing(g);
  ASSERT_EQ(add->num_args(), 2u);
  EXPECT_EQ(add->arg(0), Argument(x_q));
  EXPECT_EQ(add->arg(1), Argument::Int(3));
  EXPECT_EQ(mul->target().name(), "torch.ops.quantized.mul");
  ASSERT_EQ(mul->num_args(), 2u);
  EXPECT_EQ(mul->arg(0), Argument::Float(2.0));
  EXPECT_EQ(mul->arg(1), Argument(add));
  EXPECT_EQ(Count(g, OpKind::kCallFunction, "torch.quantize_per_tensor"), 1) << Listing(g);
  // 3 / 0.05 = 60 quantized steps: the zero point moves from 100 to 40, scale kept.
  EXPECT_EQ(KnownOutputQParams(gm, add), (OutputQParams{0.05, 40, DType::kQUInt8}));
  // Times 2: scale doubled, zero point kept.
  EXPECT_EQ(KnownOutputQParams(gm, mul), (OutputQParams{0.1, 40, DType::kQUInt8}));
}

// torch.add(x, 3, alpha=2) is not add(qx, 3): it stays a reference pattern, as does an
// add of a number whose qconfig was None.
TEST(LowerToNativeTest, BinaryOpWithANumberAndOtherArgsStaysReference) {
  for (const bool with_alpha : {true, false}) {
    GraphModule gm;
    Graph& g = gm.graph();
    Node* x_q = Quantize(g, *g.AddPlaceholder("x"), 0.05, 100, "x_q");
    Kwargs kwargs;
    if (with_alpha) kwargs.emplace_back(Symbol::Intern("alpha"), Argument::Int(2));
    Node* add = *g.AddCallFunction("torch.add", {Dequantize(g, x_q), Argument::Int(3)},
                                   std::move(kwargs), "add");
    ASSERT_TRUE(g.SetOutput(Dequantize(g, Quantize(g, add, 0.05, 100))).ok());
    if (!with_alpha) {
      ASSERT_TRUE(g.SetMeta(add, kQConfigNoneMeta, Argument::Bool(true)).ok());
    }
    auto rules = NativeRules();
    ASSERT_OK_AND_ASSIGN(report, LowerToNative(gm, *rules));
    ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
    EXPECT_EQ(add->target().name(), "torch.add") << Listing(g);
    ASSERT_EQ(report.unlowered.size(), 1u) << report.ToString();
    const char* why = with_alpha ? "keyword args (alpha)" : "qconfig is None";
    EXPECT_NE(report.unlowered[0].reason.find(why), std::string::npos)
        << report.unlowered[0].reason;
  }
}

// torch.add(a, b, alpha=2) of two dequantized tensors stays a reference pattern:
// quantized.add(qa, qb, scale, zero_point) has no alpha.
TEST(LowerToNativeTest, TensorAddWithAlphaStaysReference) {
  GraphModule gm;
  Graph& g = gm.graph();
  Node* a_q = Quantize(g, *g.AddPlaceholder("a"), 0.05, 10, "a_q");
  Node* b_q = Quantize(g, *g.AddPlaceholder("b"), 0.07, 20, "b_q");
  Kwargs kwargs;
  kwargs.emplace_back(Symbol::Intern("alpha"), Argument::Int(2));
  Node* add = *g.AddCallFunction("torch.add", {Dequantize(g, a_q), Dequantize(g, b_q)},
                                 std::move(kwargs), "add");
  ASSERT_TRUE(g.SetOutput(Dequantize(g, Quantize(g, add, 0.2, 5))).ok());
  auto rules = NativeRules();
  ASSERT_OK_AND_ASSIGN(report, LowerToNative(gm, *rules));
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  EXPECT_EQ(add->target().name(), "torch.add") << Listing(g);
  ASSERT_EQ(report.unlowered.size(), 1u) << report.ToString();
  EXPECT_NE(report.unlowered[0].reason.find("alpha"), std::string::npos)
      << report.unlowered[0].reason;
}

// An add whose qconfig was None (prepare's meta kQConfigNoneMeta) stays a reference
// pattern although both inputs are dequantized and a quantize follows, as PyTorch's
// should_skip_lowering keeps it; the report says why. A pass-through op so named (PyTorch's
// special patterns ignore the qconfig) still lowers.
TEST(LowerToNativeTest, AddWhoseQConfigWasNoneStaysFloat) {
  GraphModule gm;
  auto max_pool = std::make_unique<Module>("nn.MaxPool2d");
  max_pool->SetAttribute("kernel_size", Argument::Int(2));
  ASSERT_TRUE(gm.SetModule("pool", std::move(max_pool)).ok());
  Graph& g = gm.graph();
  Node* a_q = Quantize(g, *g.AddPlaceholder("a"), 0.05, 10, "a_q");
  Node* b_q = Quantize(g, *g.AddPlaceholder("b"), 0.07, 20, "b_q");
  Node* add = *g.AddCallFunction("operator.add", {Dequantize(g, a_q), Dequantize(g, b_q)},
                                 {}, "add");
  Node* add_q = Quantize(g, add, 0.2, 5, "add_q");
  Node* pool = *g.AddCallModule("pool", {Dequantize(g, add_q)}, {}, "pool");
  ASSERT_TRUE(g.SetOutput(Dequantize(g, Quantize(g, pool, 0.2, 5))).ok());

  for (Node* n : {add, pool}) {
    ASSERT_TRUE(g.SetMeta(n, kQConfigNoneMeta, Argument::Bool(true)).ok());
  }
  auto rules = NativeRules();
  ASSERT_OK_AND_ASSIGN(report, LowerToNative(gm, *rules));
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  EXPECT_EQ(add->target().name(), "operator.add") << Listing(g);
  EXPECT_EQ(report.lowered_per_rule.count("add:operator.add"), 0u);
  ASSERT_EQ(report.unlowered.size(), 1u) << report.ToString();
  EXPECT_EQ(report.unlowered[0].node, "add");
  EXPECT_NE(report.unlowered[0].reason.find("qconfig is None"), std::string::npos)
      << report.unlowered[0].reason;
  EXPECT_EQ(Count(g, OpKind::kCallFunction, "torch.ops.quantized.add"), 0);
  // The pool reads the add's quantized value directly; its own quantize went.
  EXPECT_EQ(pool->arg(0), Argument(add_q)) << Listing(g);

  // Without the meta the same graph lowers the add.
  GraphModule gm2;
  Graph& g2 = gm2.graph();
  Node* a2 = Quantize(g2, *g2.AddPlaceholder("a"), 0.05, 10, "a_q");
  Node* b2 = Quantize(g2, *g2.AddPlaceholder("b"), 0.07, 20, "b_q");
  Node* add2 = *g2.AddCallFunction("operator.add", {Dequantize(g2, a2), Dequantize(g2, b2)},
                                   {}, "add");
  ASSERT_TRUE(g2.SetOutput(Dequantize(g2, Quantize(g2, add2, 0.2, 5))).ok());
  ASSERT_OK_AND_ASSIGN(report2, LowerToNative(gm2, *rules));
  EXPECT_EQ(add2->target().name(), "torch.ops.quantized.add") << Listing(g2);
}

// Pools and flatten run on quantized tensors and their quantize goes, as in PyTorch
// 1.13: one that requantizes (flatten's here) too, the op's output then keeps its input's
// parameters and the report names it; a dequantize → quantize pair with the parameters
// its input carries disappears; a real requantization between two quantized ops stays.
TEST(LowerToNativeTest, PassThroughOpsAndDequantizeQuantizePairs) {
  GraphModule gm;
  auto pool = std::make_unique<Module>("nn.MaxPool2d");
  pool->SetAttribute("kernel_size", Argument::Int(2));
  ASSERT_TRUE(gm.SetModule("pool", std::move(pool)).ok());
  Graph& g = gm.graph();
  Node* x_q = Quantize(g, *g.AddPlaceholder("x"), 0.05, 128, "x_q");
  Node* pooled = *g.AddCallModule("pool", {Dequantize(g, x_q)});
  Node* pooled_q = Quantize(g, pooled, 0.05, 128);
  Node* flat =
      *g.AddCallFunction("torch.flatten", {Dequantize(g, pooled_q), Argument::Int(1)}, {}, "flatten");
  Node* flat_q = Quantize(g, flat, 0.5, 0);  // requantizes: goes all the same
  // flatten's output keeps (0.05, 128): this pair goes, the next one requantizes.
  Node* again = Quantize(g, Dequantize(g, flat_q), 0.05, 128, "again");
  Node* requantized = Quantize(g, Dequantize(g, again), 0.5, 0, "requantized");
  ASSERT_TRUE(g.SetOutput(Dequantize(g, requantized)).ok());

  auto rules = NativeRules();
  ASSERT_OK_AND_ASSIGN(report, LowerToNative(gm, *rules));
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  EXPECT_EQ(report.lowered_per_rule.at("pass-through:nn.MaxPool2d"), 1);
  EXPECT_EQ(report.lowered_per_rule.at("pass-through:torch.flatten"), 1);
  EXPECT_EQ(report.dequantize_quantize_pairs_removed, 1);
  EXPECT_TRUE(report.unlowered.empty()) << report.ToString();
  EXPECT_EQ(pooled->arg(0), Argument(x_q));
  EXPECT_EQ(flat->arg(0), Argument(pooled));
  const OutputQParams input{0.05, 128, DType::kQUInt8};
  EXPECT_EQ(KnownOutputQParams(gm, flat), input);
  ASSERT_EQ(report.quantizes_dropped_after_pass_through.size(), 1u) << report.ToString();
  const LoweringReport::DroppedQuantize& dropped = report.quantizes_dropped_after_pass_through[0];
  EXPECT_EQ(dropped.node, "flatten");
  EXPECT_EQ(dropped.target, "torch.flatten");
  EXPECT_EQ(dropped.kept, input);
  EXPECT_EQ(dropped.dropped, (OutputQParams{0.5, 0, DType::kQUInt8}));
  EXPECT_NE(report.ToString().find("quantize dropped after pass-through op: flatten"),
            std::string::npos)
      << report.ToString();
  // x, x_q, pool, flatten, dequantize, requantized, dequantize, output.
  EXPECT_EQ(g.FindNode("again"), nullptr);
  EXPECT_EQ(requantized->arg(0).as_node()->target().name(), "dequantize");
  EXPECT_EQ(requantized->arg(0).as_node()->arg(0), Argument(flat));
  EXPECT_EQ(g.output()->arg(0).as_node()->arg(0), Argument(requantized));
  EXPECT_EQ(g.size(), 8u) << Listing(g);
}

// A pass-through op after a lowered op carries the same output qparams meta as its
// input (the tuple is shared, not rebuilt); one after a plain quantize gets its own.
TEST(LowerToNativeTest, PassThroughOpKeepsItsInputsOutputQParams) {
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("conv", ReferenceConv()).ok());
  auto pool = std::make_unique<Module>("nn.MaxPool2d");
  pool->SetAttribute("kernel_size", Argument::Int(2));
  ASSERT_TRUE(gm.SetModule("pool", std::move(pool)).ok());
  Graph& g = gm.graph();
  Node* x_q = Quantize(g, *g.AddPlaceholder("x"), 0.05, 128, "x_q");
  Node* first_pool = *g.AddCallModule("pool", {Dequantize(g, x_q)});
  Node* conv = *g.AddCallModule("conv", {Dequantize(g, Quantize(g, first_pool, 0.05, 128))});
  Node* conv_q = Quantize(g, conv, 0.1, 3);
  Node* pooled = *g.AddCallModule("pool", {Dequantize(g, conv_q)});
  ASSERT_TRUE(g.SetOutput(Dequantize(g, Quantize(g, pooled, 0.1, 3))).ok());

  auto rules = NativeRules();
  ASSERT_OK_AND_ASSIGN(report, LowerToNative(gm, *rules));
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  EXPECT_EQ(report.lowered_per_rule.at("pass-through:nn.MaxPool2d"), 2) << report.ToString();
  EXPECT_EQ(report.lowered_per_rule.at("conv2d"), 1) << report.ToString();
  const Argument expected = Argument::Tuple(
      {Argument::Float(0.1), Argument::Int(3), Argument::Dtype(DType::kQUInt8)});
  ASSERT_NE(conv->FindMeta("output_qparams"), nullptr);
  ASSERT_NE(pooled->FindMeta("output_qparams"), nullptr);
  EXPECT_EQ(*conv->FindMeta("output_qparams"), expected);
  EXPECT_EQ(*pooled->FindMeta("output_qparams"), expected);
  ASSERT_NE(first_pool->FindMeta("output_qparams"), nullptr);
  EXPECT_EQ(*first_pool->FindMeta("output_qparams"),
            Argument::Tuple({Argument::Float(0.05), Argument::Int(128),
                             Argument::Dtype(DType::kQUInt8)}));
  EXPECT_EQ(pooled->arg(0), Argument(conv));
}

// A fused module whose child "0" is not a reference module stays, with the reason.
TEST(LowerToNativeTest, FusedModuleWithFloatInnerModuleIsReportedNotLowered) {
  GraphModule gm;
  auto float_conv = ReferenceConv();
  float_conv->set_type(Symbol::Intern("nn.Conv2d"));
  ASSERT_TRUE(gm.SetModule("conv_relu", Fused("nni.ConvReLU2d", std::move(float_conv), true)).ok());
  Graph& g = gm.graph();
  Node* x_q = Quantize(g, *g.AddPlaceholder("x"), 0.05, 128);
  Node* y = *g.AddCallModule("conv_relu", {Dequantize(g, x_q)});
  ASSERT_TRUE(g.SetOutput(Dequantize(g, Quantize(g, y, 0.1, 0))).ok());
  const std::string before = Listing(g);

  auto rules = NativeRules();
  ASSERT_OK_AND_ASSIGN(report, LowerToNative(gm, *rules));
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  EXPECT_EQ(Listing(g), before);
  EXPECT_EQ(report.total_lowered(), 0);
  ASSERT_EQ(report.unlowered.size(), 1u);
  EXPECT_NE(report.unlowered[0].reason.find("child '0' of nni.ConvReLU2d is nn.Conv2d; "
                                            "expected nnqr.Conv2d"),
            std::string::npos)
      << report.ToString();
  EXPECT_EQ(gm.FindModule("conv_relu")->type().name(), "nni.ConvReLU2d");
}

// An unfused reference conv and the relu after it (prepare observed the pair as one op:
// Conv -> BatchNorm -> ReLU, whose batch norm fusion leaves the relu) become one
// nniq.ConvReLU2d with the quantize's parameters; the relu node goes.
TEST(LowerToNativeTest, ReluAfterAReferenceConvJoinsItAsConvReLU) {
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("conv", ReferenceConv()).ok());
  ASSERT_TRUE(gm.SetModule("relu", std::make_unique<Module>("nn.ReLU")).ok());
  Graph& g = gm.graph();
  Node* x_q = Quantize(g, *g.AddPlaceholder("x"), 0.05, 128);
  Node* conv = *g.AddCallModule("conv", {Dequantize(g, x_q)});
  Node* relu = *g.AddCallModule("relu", {conv});
  ASSERT_TRUE(g.SetOutput(Dequantize(g, Quantize(g, relu, 0.1, 0))).ok());

  auto rules = NativeRules();
  ASSERT_OK_AND_ASSIGN(report, LowerToNative(gm, *rules));
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  EXPECT_EQ(report.total_lowered(), 1) << report.ToString();
  const Module* native = gm.FindModule("conv");
  ASSERT_NE(native, nullptr);
  EXPECT_EQ(native->type().name(), "nniq.ConvReLU2d");
  EXPECT_DOUBLE_EQ(native->FindAttribute("scale")->as_float(), 0.1);
  EXPECT_EQ(native->FindAttribute("zero_point")->as_int(), 0);
  EXPECT_EQ(Count(g, OpKind::kCallModule, "relu"), 0) << Listing(g);
  // x_q -> conv -> dequantize -> output.
  const Node* lowered = g.FindNode("conv");
  ASSERT_NE(lowered, nullptr);
  EXPECT_EQ(lowered->arg(0).as_node(), x_q) << Listing(g);
  EXPECT_EQ(Count(g, OpKind::kCallFunction, "torch.quantize_per_tensor"), 1) << Listing(g);
}

// The relu's input read elsewhere in float: the conv alone cannot take the relu; it
// lowers by itself and the relu stays between a dequantize and the quantize.
TEST(LowerToNativeTest, ReluAfterAReferenceConvWithAnotherUserStaysApart) {
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("conv", ReferenceConv()).ok());
  Graph& g = gm.graph();
  Node* x_q = Quantize(g, *g.AddPlaceholder("x"), 0.05, 128);
  Node* conv = *g.AddCallModule("conv", {Dequantize(g, x_q)});
  Node* relu = *g.AddCallFunction("torch.relu", {conv});
  ASSERT_TRUE(g.SetOutput(Argument::Tuple(
                  {Argument(Dequantize(g, Quantize(g, relu, 0.1, 0))), Argument(conv)}))
                  .ok());

  auto rules = NativeRules();
  ASSERT_OK_AND_ASSIGN(report, LowerToNative(gm, *rules));
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  EXPECT_EQ(gm.FindModule("conv")->type().name(), "nnqr.Conv2d") << report.ToString();
  EXPECT_EQ(Count(g, OpKind::kCallFunction, "torch.relu"), 1) << Listing(g);
}

// Functional conv: quantized input and weight, output qparams as kwargs.
TEST(LowerToNativeTest, FunctionalConvUsesQuantizedInputAndWeight) {
  GraphModule gm;
  ASSERT_TRUE(gm.SetTensor("w", Floats({1, 1, 1, 1}, {0.5f})).ok());
  Graph& g = gm.graph();
  Node* x_q = Quantize(g, *g.AddPlaceholder("x"), 0.05, 128, "x_q");
  Node* w = *g.AddGetAttr("w");
  Node* w_q = *g.AddCallFunction("torch.quantize_per_tensor",
                                 {w, Argument::Float(0.01), Argument::Int(0),
                                  Argument::Dtype(DType::kQInt8)}, {}, "w_q");
  Node* conv = *g.AddCallFunction("torch.nn.functional.conv2d",
                                  {Dequantize(g, x_q), Dequantize(g, w_q), Argument::None()});
  ASSERT_TRUE(g.SetOutput(Dequantize(g, Quantize(g, conv, 0.1, 2))).ok());

  auto rules = NativeRules();
  ASSERT_OK_AND_ASSIGN(report, LowerToNative(gm, *rules));
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  EXPECT_EQ(report.lowered_per_rule.at("functional-conv2d"), 1);
  EXPECT_EQ(conv->target().name(), "torch.ops.quantized.conv2d");
  EXPECT_EQ(conv->arg(0), Argument(x_q));
  // The constant weight is quantized once (PyTorch's fold_weight): a get_attr of a qint8
  // tensor holding round(0.5 / 0.01) = 50 at scale 0.01; w_q is gone.
  (void)w_q;
  EXPECT_EQ(g.FindNode("w_q"), nullptr);
  EXPECT_EQ(report.constants_quantized, 1);
  const Node* w_folded = conv->arg(1).as_node();
  ASSERT_EQ(w_folded->op(), OpKind::kGetAttr);
  const Tensor* qw = gm.FindTensor(w_folded->target().name());
  ASSERT_NE(qw, nullptr);
  ASSERT_EQ(qw->dtype(), DType::kQInt8);
  EXPECT_EQ(qw->data<int8_t>()[0], 50);
  EXPECT_DOUBLE_EQ(qw->qparams().scales[0], 0.01);
  // The float weight is read by nothing any more: gone, as from PyTorch's converted model.
  EXPECT_EQ(gm.FindTensor("w"), nullptr);
  EXPECT_EQ(report.folded_tensors_removed, 1);
  ASSERT_NE(conv->FindKwarg("output_scale"), nullptr);
  EXPECT_EQ(*conv->FindKwarg("output_scale"), Argument::Float(0.1));
  EXPECT_EQ(*conv->FindKwarg("output_zero_point"), Argument::Int(2));
}

// F.conv2d -> F.hardtanh(0, 6) -> quantize (X86InductorQuantizer's conv-hardtanh, observed
// after the clamp): the conv lowers under a quantize of the same parameters and the
// hardtanh runs on its int8 result; the clamp's own quantize goes (it passes its input's
// parameters through).
TEST(LowerToNativeTest, FunctionalConvUnderAHardtanhLowersAndTheClampRunsQuantized) {
  GraphModule gm;
  Graph& g = gm.graph();
  const auto [x_q, conv] = AddFunctionalConv(gm);
  Node* clamp = *g.AddCallFunction("torch.nn.functional.hardtanh",
                                   {conv, Argument::Float(0.0), Argument::Float(6.0)});
  ASSERT_TRUE(g.SetOutput(Dequantize(g, Quantize(g, clamp, 6.0 / 255, 0))).ok());

  auto rules = NativeRules();
  ASSERT_OK_AND_ASSIGN(report, LowerToNative(gm, *rules));
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  EXPECT_EQ(report.lowered_per_rule.at("functional-conv2d"), 1) << report.ToString();
  EXPECT_TRUE(report.unlowered.empty()) << report.ToString();
  ASSERT_EQ(Count(g, OpKind::kCallFunction, "torch.ops.quantized.conv2d"), 1) << Listing(g);
  const Node* native = clamp->arg(0).as_node();
  EXPECT_EQ(native->target().name(), "torch.ops.quantized.conv2d");
  EXPECT_EQ(native->arg(0), Argument(x_q));
  EXPECT_EQ(*native->FindKwarg("output_scale"), Argument::Float(6.0 / 255));
  EXPECT_EQ(*native->FindKwarg("output_zero_point"), Argument::Int(0));
  // Only the input's quantize is left; the output dequantizes the clamp directly.
  EXPECT_EQ(Count(g, OpKind::kCallFunction, "torch.quantize_per_tensor"), 1) << Listing(g);
  EXPECT_EQ(g.output()->arg(0).as_node()->arg(0), Argument(clamp));
}

// A clamp over an op no rule lowers (a float sub of a dequantized value and a constant
// tensor) leaves the graph as it was, with nothing reported: the quantize after the clamp
// ends no reference pattern, as before the clamp was looked through.
TEST(LowerToNativeTest, ClampOverAnOpThatDoesNotLowerLeavesTheGraphAsItWas) {
  GraphModule gm;
  ASSERT_TRUE(gm.SetTensor("c", Floats({1}, {0.5f})).ok());
  Graph& g = gm.graph();
  Node* x_q = Quantize(g, *g.AddPlaceholder("x"), 0.05, 128, "x_q");
  Node* op = *g.AddCallFunction("torch.sub", {Dequantize(g, x_q), *g.AddGetAttr("c")});
  Node* clamp = *g.AddCallFunction("torch.nn.functional.hardtanh",
                                   {op, Argument::Float(0.0), Argument::Float(6.0)});
  ASSERT_TRUE(g.SetOutput(Dequantize(g, Quantize(g, clamp, 6.0 / 255, 0))).ok());
  const std::string before = Listing(g);

  auto rules = NativeRules();
  ASSERT_OK_AND_ASSIGN(report, LowerToNative(gm, *rules));
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  EXPECT_EQ(report.total_lowered(), 0);
  EXPECT_EQ(Listing(g), before);
  EXPECT_TRUE(report.unlowered.empty()) << report.ToString();
}

// getitem over a packed tuple is seen through.
// F.conv2d read only by a residual add (+ relu) whose other input is dequantized: one
// conv2d_add_relu reading both quantized, at the add's place (the residual is computed
// after the conv here, as a downsample branch is in a traced resnet).
TEST(LowerToNativeTest, FunctionalConvAbsorbsTheResidualAddAndRelu) {
  GraphModule gm;
  ASSERT_TRUE(gm.SetTensor("w", Floats({1, 1, 1, 1}, {0.5f})).ok());
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* x_q = Quantize(g, x, 0.05, 128, "x_q");
  Node* w_q = *g.AddCallFunction("torch.quantize_per_tensor",
                                 {*g.AddGetAttr("w"), Argument::Float(0.01), Argument::Int(0),
                                  Argument::Dtype(DType::kQInt8)});
  Node* conv = *g.AddCallFunction("torch.nn.functional.conv2d",
                                  {Dequantize(g, x_q), Dequantize(g, w_q), Argument::None()});
  Node* residual_q = Quantize(g, *g.AddCallFunction("torch.neg", {x}), 0.02, 128, "r_q");
  Node* add = *g.AddCallFunction("operator.add", {conv, Dequantize(g, residual_q)});
  Node* relu = *g.AddCallFunction("torch.relu", {add});
  ASSERT_TRUE(g.SetOutput(Dequantize(g, Quantize(g, relu, 0.1, 0))).ok());

  auto rules = NativeRules();
  ASSERT_OK_AND_ASSIGN(report, LowerToNative(gm, *rules));
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  EXPECT_EQ(report.lowered_per_rule.at("functional-conv2d"), 1);
  EXPECT_EQ(Count(g, OpKind::kCallFunction, "torch.nn.functional.conv2d"), 0);
  EXPECT_EQ(Count(g, OpKind::kCallFunction, "torch.relu"), 0);
  ASSERT_EQ(Count(g, OpKind::kCallFunction, "torch.ops.quantized.conv2d_add_relu"), 1);
  EXPECT_EQ(add->target().name(), "torch.ops.quantized.conv2d_add_relu");
  EXPECT_EQ(add->arg(0), Argument(x_q));
  EXPECT_EQ(add->arg(1), Argument(residual_q));
  ASSERT_EQ(add->num_args(), 4u);  // input, accumulator, folded weight, bias
  EXPECT_EQ(add->arg(2).as_node()->op(), OpKind::kGetAttr);
  EXPECT_EQ(*add->FindKwarg("output_scale"), Argument::Float(0.1));
  EXPECT_EQ(*add->FindKwarg("output_zero_point"), Argument::Int(0));
  EXPECT_EQ(g.output()->arg(0).as_node()->arg(0), Argument(add));
  (void)relu;
}

// The conv's float value read elsewhere too keeps conv and add in reference form, with
// the reason.
TEST(LowerToNativeTest, ConvWithAnotherUserDoesNotAbsorbTheAdd) {
  GraphModule gm;
  Graph& g = gm.graph();
  const auto [x_q, conv] = AddFunctionalConv(gm);
  Node* add = *g.AddCallFunction("operator.add", {Dequantize(g, x_q), conv});
  ASSERT_TRUE(g.SetOutput(Argument::Tuple({Argument(Dequantize(g, Quantize(g, add, 0.1, 0))),
                                           Argument(conv)}))
                  .ok());

  auto rules = NativeRules();
  ASSERT_OK_AND_ASSIGN(report, LowerToNative(gm, *rules));
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  EXPECT_EQ(report.total_lowered(), 0);
  EXPECT_EQ(add->target().name(), "operator.add");
  ASSERT_EQ(report.unlowered.size(), 1u);
  EXPECT_NE(report.unlowered[0].reason.find("'" + conv->name() + "' has other users"),
            std::string::npos)
      << report.ToString();
}

TEST(LowerToNativeTest, TupleLoweringSeesThroughPacking) {
  GraphModule gm;
  Graph& g = gm.graph();
  Node* a = *g.AddPlaceholder("a");
  Node* b = *g.AddPlaceholder("b");
  Node* packed = *g.AddCallFunction("builtins.tuple", {Argument::List({a, b})});
  const std::string packed_name = packed->name();
  Node* second = *g.AddCallFunction("operator.getitem", {packed, Argument::Int(1)});
  Node* relu = *g.AddCallFunction("torch.relu", {second});
  ASSERT_TRUE(g.SetOutput(relu).ok());
  auto rules = NativeRules();
  ASSERT_OK_AND_ASSIGN(report, LowerToNative(gm, *rules));
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  EXPECT_EQ(report.tuple_accesses_removed, 1);
  EXPECT_EQ(relu->arg(0), Argument(b));
  EXPECT_EQ(g.FindNode(packed_name), nullptr);  // dead, removed
}

}  // namespace
}  // namespace fuselage
