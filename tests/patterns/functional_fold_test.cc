// The passes fuselage.pt2e runs in the engine on a torch.export graph's FX form:
// FoldFunctionalBatchNorms (F.conv2d + F.batch_norm on constants, as torchao's
// prepare_pt2e folds them) and FoldConstantQuantizes (a converted weight's quantize,
// computed once by the runtime's quantize).
#include <cmath>
#include <vector>

#include "graph/graph_module.h"
#include "gtest/gtest.h"
#include "patterns/batch_norm_folding.h"
#include "quantize/quantized_constants.h"
#include "runtime/quantized/quantize.h"

namespace fuselage {
namespace {

// x -> F.conv2d(x, w, b) -> F.batch_norm(., mean, var, gamma, beta, training, 0.1, eps)
// -> output, on 2 output channels of 1 input channel, 1x1 kernels.
struct ConvBn {
  GraphModule gm;
  Node* conv = nullptr;
  Node* bn = nullptr;

  explicit ConvBn(bool training) {
    const std::vector<std::pair<const char*, std::vector<float>>> tensors = {
        {"w", {0.5f, -2.0f}}, {"b", {0.25f, 1.0f}}, {"mean", {0.1f, -0.3f}},
        {"var", {4.0f, 0.25f}}, {"gamma", {1.5f, 0.5f}}, {"beta", {0.0f, 2.0f}}};
    for (const auto& [name, values] : tensors) {
      const Shape shape = std::string(name) == "w" ? Shape{2, 1, 1, 1} : Shape{2};
      EXPECT_TRUE(gm.SetTensor(name, Tensor::FromFloats(shape, values)).ok());
    }
    Graph& g = gm.graph();
    Node* x = *g.AddPlaceholder("x");
    conv = *g.AddCallFunction("torch.nn.functional.conv2d",
                              {x, *g.AddGetAttr("w"), *g.AddGetAttr("b")}, {}, "conv");
    bn = *g.AddCallFunction("torch.nn.functional.batch_norm",
                            {conv, *g.AddGetAttr("mean"), *g.AddGetAttr("var"),
                             *g.AddGetAttr("gamma"), *g.AddGetAttr("beta"),
                             Argument::Bool(training), Argument::Float(0.1),
                             Argument::Float(1e-5)},
                            {}, "bn");
    EXPECT_TRUE(g.SetOutput(bn).ok());
  }
};

TEST(FoldFunctionalBatchNormsTest, FoldsIntoNewConvTensorsInPyTorchsOrder) {
  ConvBn model(/*training=*/false);
  absl::StatusOr<int> folded = FoldFunctionalBatchNorms(model.gm);
  ASSERT_TRUE(folded.ok()) << folded.status();
  EXPECT_EQ(*folded, 1);
  ASSERT_TRUE(model.gm.Verify().ok()) << model.gm.Verify();
  EXPECT_EQ(model.gm.graph().FindNode("bn"), nullptr);
  EXPECT_EQ(model.gm.graph().output()->arg(0).as_node(), model.conv);
  ASSERT_EQ(model.conv->arg(1).as_node()->target().name(), "conv_weight_folded");
  ASSERT_EQ(model.conv->arg(2).as_node()->target().name(), "conv_bias_folded");
  const Tensor* w = model.gm.FindTensor("conv_weight_folded");
  const Tensor* b = model.gm.FindTensor("conv_bias_folded");
  const float weight[2] = {0.5f, -2.0f}, bias[2] = {0.25f, 1.0f}, mean[2] = {0.1f, -0.3f},
              var[2] = {4.0f, 0.25f}, gamma[2] = {1.5f, 0.5f}, beta[2] = {0.0f, 2.0f};
  for (int c = 0; c < 2; ++c) {
    const float r = 1.0f / std::sqrt(var[c] + 1e-5f);
    EXPECT_EQ(w->data<float>()[c], weight[c] * (gamma[c] * r)) << c;
    EXPECT_EQ(b->data<float>()[c], ((bias[c] - mean[c]) * r) * gamma[c] + beta[c]) << c;
  }
  // The user's tensors are not written.
  EXPECT_EQ(model.gm.FindTensor("w")->data<float>()[1], -2.0f);
}

TEST(FoldFunctionalBatchNormsTest, LeavesATrainingBatchNorm) {
  ConvBn model(/*training=*/true);
  absl::StatusOr<int> folded = FoldFunctionalBatchNorms(model.gm);
  ASSERT_TRUE(folded.ok()) << folded.status();
  EXPECT_EQ(*folded, 0);
  EXPECT_NE(model.gm.graph().FindNode("bn"), nullptr);
}

TEST(FoldConstantQuantizesTest, QuantizesAWeightPerChannelOnce) {
  GraphModule gm;
  const Tensor weight = Tensor::FromFloats({2, 2}, {0.5f, -0.25f, 2.0f, -1.0f});
  ASSERT_TRUE(gm.SetTensor("w", weight).ok());
  ASSERT_TRUE(gm.SetTensor("scales", Tensor::FromFloats({2}, {0.5f / 127, 2.0f / 127})).ok());
  ASSERT_TRUE(gm.SetTensor("zero_points", Tensor::FromInt64s({2}, {0, 0})).ok());
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* q = *g.AddCallFunction("torch.quantize_per_channel",
                               {*g.AddGetAttr("w"), *g.AddGetAttr("scales"),
                                *g.AddGetAttr("zero_points"), Argument::Int(0),
                                Argument::Dtype(DType::kQInt8)},
                               {}, "q");
  Node* dq = *g.AddCallMethod("dequantize", {q});
  Node* linear = *g.AddCallFunction("torch.nn.functional.linear", {x, dq});
  ASSERT_TRUE(g.SetOutput(linear).ok());
  absl::StatusOr<int> folded = FoldConstantQuantizes(gm);
  ASSERT_TRUE(folded.ok()) << folded.status();
  EXPECT_EQ(*folded, 1);
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  const Node* constant = dq->arg(0).as_node();
  ASSERT_EQ(constant->op(), OpKind::kGetAttr);
  EXPECT_EQ(constant->target().name(), "q_weight");
  const Tensor* quantized = gm.FindTensor("q_weight");
  ASSERT_NE(quantized, nullptr);
  absl::StatusOr<Tensor> expected =
      quantized::QuantizePerChannel(weight, {0.5f / 127, 2.0f / 127}, {0, 0}, 0, DType::kQInt8);
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(quantized->bytes(), expected->bytes());
  EXPECT_EQ(quantized->qparams(), expected->qparams());
  // The get_attrs only the quantize read are gone; the tensors stay.
  int get_attrs = 0;
  for (const Node* n = g.first(); n != nullptr; n = n->next()) {
    get_attrs += n->op() == OpKind::kGetAttr;
  }
  EXPECT_EQ(get_attrs, 1);
  EXPECT_NE(gm.FindTensor("w"), nullptr);
}

}  // namespace
}  // namespace fuselage
