// The C++ ONNX writer (onnx/onnx_writer.h) on small graphs built here, each ONNX field
// checked against a value worked out by hand: the QDQ form of a lowered quantized conv
// (per-channel int8 weight, int32 bias of scale input_scale * weight_scale, the output's
// own QuantizeLinear), a relu6 on a quantized tensor moved after the QuantizeLinear as a
// Clip of the integers, a float model as plain ONNX, and the errors. The writer against
// the Python one on torchvision models: tests/python/test_onnx_cpp_writer.py.
#include "onnx/onnx_writer.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/graph_module.h"
#include "graph/tensor.h"
#include "gtest/gtest.h"

namespace fuselage {
namespace {

using onnx_subset::ModelProto;
using onnx_subset::NodeProto;
using onnx_subset::TensorProto;

std::unique_ptr<Module> ConvModule(absl::string_view type) {
  auto conv = std::make_unique<Module>(type);
  conv->SetAttribute("in_channels", Argument::Int(1));
  conv->SetAttribute("out_channels", Argument::Int(2));
  conv->SetAttribute("kernel_size", Argument::Tuple({Argument::Int(1), Argument::Int(1)}));
  conv->SetAttribute("stride", Argument::Tuple({Argument::Int(1), Argument::Int(1)}));
  conv->SetAttribute("padding", Argument::Tuple({Argument::Int(0), Argument::Int(0)}));
  conv->SetAttribute("dilation", Argument::Tuple({Argument::Int(1), Argument::Int(1)}));
  conv->SetAttribute("transposed", Argument::Bool(false));
  conv->SetAttribute("output_padding", Argument::Tuple({Argument::Int(0), Argument::Int(0)}));
  conv->SetAttribute("groups", Argument::Int(1));
  conv->SetAttribute("padding_mode", Argument::String("zeros"));
  conv->SetTensor("bias", Tensor::FromFloats({2}, {1.0f, -0.5f}));
  return conv;
}

void SetInputShape(GraphModule& gm, Node* x) {
  ASSERT_TRUE(gm.graph()
                  .SetMeta(x, "shape", Argument::List({Argument::Int(1), Argument::Int(1),
                                                       Argument::Int(2), Argument::Int(2)}))
                  .ok());
}

// x -> quantize_per_tensor(0.5, 10, quint8) -> nnq.Conv2d (weight [3, -4] int8 with
// per-channel scales [0.1, 0.2]; output scale 0.25, zero point 3) -> nn.ReLU6 ->
// dequantize -> output: what lowering makes of a conv and a relu6 fbgemm leaves unfused.
std::unique_ptr<GraphModule> LoweredConvRelu6() {
  auto gm = std::make_unique<GraphModule>();
  auto conv = ConvModule("nnq.Conv2d");
  const int8_t weight[] = {3, -4};
  auto w = Tensor::FromBytes(DType::kQInt8, {2, 1, 1, 1}, std::string(reinterpret_cast<const char*>(weight), 2),
                             QuantParams::PerChannel({0.1, 0.2}, {0, 0}, 0));
  EXPECT_TRUE(w.ok()) << w.status();
  conv->SetTensor("weight", *w);
  conv->SetAttribute("scale", Argument::Float(0.25));
  conv->SetAttribute("zero_point", Argument::Int(3));
  EXPECT_TRUE(gm->SetModule("conv", std::move(conv)).ok());
  EXPECT_TRUE(gm->SetModule("relu6", std::make_unique<Module>("nn.ReLU6")).ok());
  Graph& g = gm->graph();
  Node* x = *g.AddPlaceholder("x");
  SetInputShape(*gm, x);
  Node* q = *g.AddCallFunction("torch.quantize_per_tensor",
                               {x, Argument::Float(0.5), Argument::Int(10), Argument::Dtype(DType::kQUInt8)});
  Node* c = *g.AddCallModule("conv", {q});
  Node* r = *g.AddCallModule("relu6", {c});
  Node* dq = *g.AddCallMethod("dequantize", {r});
  EXPECT_TRUE(g.SetOutput(dq).ok());
  return gm;
}

std::map<std::string, const TensorProto*> Initializers(const ModelProto& model) {
  std::map<std::string, const TensorProto*> by_name;
  for (const TensorProto& t : model.graph().initializer()) by_name[t.name()] = &t;
  return by_name;
}

template <typename T>
std::vector<T> Values(const TensorProto& t) {
  std::vector<T> values(t.raw_data().size() / sizeof(T));
  std::memcpy(values.data(), t.raw_data().data(), values.size() * sizeof(T));
  return values;
}

std::map<std::string, std::vector<int64_t>> IntAttributes(const NodeProto& node) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& a : node.attribute()) {
    if (a.ints_size() > 0) out[a.name()] = {a.ints().begin(), a.ints().end()};
    else out[a.name()] = {a.i()};
  }
  return out;
}

TEST(OnnxWriterTest, ALoweredConvIsQdqWithPerChannelWeightsAndInt32Bias) {
  auto gm = LoweredConvRelu6();
  auto model = GraphModuleToOnnx(*gm);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->ir_version(), 8);
  ASSERT_EQ(model->opset_import_size(), 1);
  EXPECT_EQ(model->opset_import(0).version(), 17);
  std::vector<std::string> ops;
  for (const NodeProto& n : model->graph().node()) ops.push_back(absl::StrCat(n.op_type(), " ", n.name()));
  // The relu6 went after the conv's QuantizeLinear as a Clip of its integers, and the
  // DequantizeLinear -> QuantizeLinear round trip that left was dropped.
  EXPECT_EQ(ops, (std::vector<std::string>{
                     "QuantizeLinear quantize_per_tensor", "DequantizeLinear conv_dq",
                     "DequantizeLinear conv_weight", "DequantizeLinear conv_bias", "Conv conv",
                     "QuantizeLinear conv_1", "Clip relu6", "DequantizeLinear dequantize"}));
  const auto init = Initializers(*model);
  const auto& nodes = model->graph().node();

  const NodeProto& q = nodes[0];
  EXPECT_EQ(q.input(0), "x");
  EXPECT_EQ(Values<float>(*init.at(q.input(1))), std::vector<float>{0.5f});
  EXPECT_EQ(init.at(q.input(2))->data_type(), TensorProto::UINT8);
  EXPECT_EQ(Values<uint8_t>(*init.at(q.input(2))), std::vector<uint8_t>{10});

  const NodeProto& weight = nodes[2];
  EXPECT_EQ(IntAttributes(weight).at("axis"), std::vector<int64_t>{0});
  EXPECT_EQ(init.at(weight.input(0))->data_type(), TensorProto::INT8);
  EXPECT_EQ(Values<int8_t>(*init.at(weight.input(0))), (std::vector<int8_t>{3, -4}));
  EXPECT_EQ(Values<float>(*init.at(weight.input(1))), (std::vector<float>{0.1f, 0.2f}));
  EXPECT_EQ(Values<int8_t>(*init.at(weight.input(2))), (std::vector<int8_t>{0, 0}));

  // bias / (0.5 * weight scale): 1.0 / 0.05 = 20, -0.5 / 0.1 = -5.
  const NodeProto& bias = nodes[3];
  EXPECT_EQ(init.at(bias.input(0))->data_type(), TensorProto::INT32);
  EXPECT_EQ(Values<int32_t>(*init.at(bias.input(0))), (std::vector<int32_t>{20, -5}));
  EXPECT_EQ(Values<float>(*init.at(bias.input(1))), (std::vector<float>{0.5f * 0.1f, 0.5f * 0.2f}));
  EXPECT_EQ(Values<int32_t>(*init.at(bias.input(2))), (std::vector<int32_t>{0, 0}));

  const NodeProto& conv = nodes[4];
  EXPECT_EQ(std::vector<std::string>(conv.input().begin(), conv.input().end()),
            (std::vector<std::string>{"conv_dq", "conv_weight", "conv_bias"}));
  const std::map<std::string, std::vector<int64_t>> conv_attributes = {
      {"dilations", {1, 1}}, {"group", {1}}, {"kernel_shape", {1, 1}}, {"pads", {0, 0, 0, 0}},
      {"strides", {1, 1}}};
  EXPECT_EQ(IntAttributes(conv), conv_attributes);

  // The conv's result quantized with its own parameters; relu6's [0, 6] in its integers:
  // 3 + 0 / 0.25 = 3 and 3 + 6 / 0.25 = 27.
  const NodeProto& out_q = nodes[5];
  EXPECT_EQ(out_q.input(0), "conv");
  EXPECT_EQ(Values<float>(*init.at(out_q.input(1))), std::vector<float>{0.25f});
  EXPECT_EQ(Values<uint8_t>(*init.at(out_q.input(2))), std::vector<uint8_t>{3});
  const NodeProto& clip = nodes[6];
  ASSERT_EQ(clip.input_size(), 3);
  EXPECT_EQ(clip.input(0), "conv_1");
  EXPECT_EQ(Values<uint8_t>(*init.at(clip.input(1))), std::vector<uint8_t>{3});
  EXPECT_EQ(Values<uint8_t>(*init.at(clip.input(2))), std::vector<uint8_t>{27});

  // The output leaves float through its own DequantizeLinear.
  const NodeProto& out = nodes[7];
  EXPECT_EQ(out.input(0), "relu6_1");
  EXPECT_EQ(Values<float>(*init.at(out.input(1))), std::vector<float>{0.25f});
  ASSERT_EQ(model->graph().output_size(), 1);
  EXPECT_EQ(model->graph().output(0).name(), "dequantize");
  EXPECT_EQ(model->graph().output(0).type().tensor_type().elem_type(), TensorProto::FLOAT);
  ASSERT_EQ(model->graph().input_size(), 1);
  EXPECT_EQ(model->graph().input(0).name(), "x");
  EXPECT_EQ(model->graph().input(0).type().tensor_type().shape().dim_size(), 4);
  // Every initializer is read by a node (the removed nodes' parameters are gone).
  std::set<std::string> read;
  for (const NodeProto& n : nodes) read.insert(n.input().begin(), n.input().end());
  for (const auto& [name, t] : init) EXPECT_TRUE(read.count(name)) << name;
}

TEST(OnnxWriterTest, AFloatModelIsPlainOnnx) {
  GraphModule gm;
  auto conv = ConvModule("nn.Conv2d");
  conv->SetTensor("weight", Tensor::FromFloats({2, 1, 1, 1}, {0.5f, -2.0f}));
  ASSERT_TRUE(gm.SetModule("conv", std::move(conv)).ok());
  ASSERT_TRUE(gm.SetModule("relu", std::make_unique<Module>("nn.ReLU")).ok());
  Node* x = *gm.graph().AddPlaceholder("x");
  SetInputShape(gm, x);
  Node* c = *gm.graph().AddCallModule("conv", {x});
  Node* r = *gm.graph().AddCallModule("relu", {c});
  ASSERT_TRUE(gm.graph().SetOutput(Argument::Tuple({r, x})).ok());
  auto model = GraphModuleToOnnx(gm);
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<std::string> ops;
  for (const NodeProto& n : model->graph().node()) ops.push_back(absl::StrCat(n.op_type(), " ", n.name()));
  // The input returned as an output gets an Identity: an ONNX graph output names a node's.
  EXPECT_EQ(ops, (std::vector<std::string>{"Conv conv", "Relu relu", "Identity x_1"}));
  const auto init = Initializers(*model);
  EXPECT_EQ(Values<float>(*init.at("conv_weight")), (std::vector<float>{0.5f, -2.0f}));
  EXPECT_EQ(Values<float>(*init.at("conv_bias")), (std::vector<float>{1.0f, -0.5f}));
  EXPECT_EQ(init.at("conv_weight")->data_type(), TensorProto::FLOAT);
  ASSERT_EQ(model->graph().output_size(), 2);
  EXPECT_EQ(model->graph().output(0).name(), "relu");
  EXPECT_EQ(model->graph().output(1).name(), "x_1");
}

TEST(OnnxWriterTest, AnOpWithoutAnOnnxFormNamesTheNodeAndWritesNothing) {
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("act", std::make_unique<Module>("nn.GELU")).ok());
  Node* x = *gm.graph().AddPlaceholder("x");
  SetInputShape(gm, x);
  ASSERT_TRUE(gm.graph().SetOutput(*gm.graph().AddCallModule("act", {x})).ok());
  const std::string path = absl::StrCat(testing::TempDir(), "/kept.onnx");
  { std::ofstream(path) << "old"; }
  const absl::Status status = SaveOnnxModel(gm, path);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("node 'act'"), std::string::npos) << status;
  EXPECT_NE(status.message().find("nn.GELU"), std::string::npos) << status;
  std::ifstream in(path);
  std::stringstream kept;
  kept << in.rdbuf();
  EXPECT_EQ(kept.str(), "old");
}

TEST(OnnxWriterTest, AnInputWithoutARecordedShapeIsNamed) {
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("relu", std::make_unique<Module>("nn.ReLU")).ok());
  Node* x = *gm.graph().AddPlaceholder("x");
  ASSERT_TRUE(gm.graph().SetOutput(*gm.graph().AddCallModule("relu", {x})).ok());
  auto model = GraphModuleToOnnx(gm);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("placeholder 'x'"), std::string::npos) << model.status();
}

TEST(OnnxWriterTest, SavesAWholeFileThatParsesBack) {
  auto gm = LoweredConvRelu6();
  const std::string path = absl::StrCat(testing::TempDir(), "/model.onnx");
  ASSERT_TRUE(SaveOnnxModel(*gm, path).ok());
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  ModelProto read;
  ASSERT_TRUE(read.ParseFromString(bytes.str()));
  EXPECT_EQ(read.graph().node_size(), 8);
}

}  // namespace
}  // namespace fuselage
