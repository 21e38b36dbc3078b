// The ONNX writer (onnx/onnx_writer.h) on small graphs built here, each ONNX field
// checked against a value worked out by hand: the QDQ form of a lowered quantized conv
// (per-channel int8 weight, int32 bias of scale input_scale * weight_scale, the output's
// own QuantizeLinear), a relu6 on a quantized tensor moved after the QuantizeLinear as a
// Clip of the integers, a float model as plain ONNX, the ops written as several ONNX nodes
// (GELU, SiLU), the multi-output ops (chunk, split) and what they take from the record
// run (interpolate's and expand's sizes), and the errors. On torchvision models, against
// ONNX Runtime and PyTorch: tests/python/test_onnx_cpp_writer.py, test_onnx_export.py.
#include "onnx/onnx_writer.h"

#include <cmath>
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

void SetInputShape(GraphModule& gm, Node* x, std::vector<int64_t> shape = {1, 1, 2, 2}) {
  std::vector<Argument> dims;
  for (int64_t d : shape) dims.push_back(Argument::Int(d));
  ASSERT_TRUE(gm.graph().SetMeta(x, "shape", Argument::List(dims)).ok());
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
  auto shuffle = std::make_unique<Module>("nn.PixelShuffle");  // the run has a kernel
  shuffle->SetAttribute("upscale_factor", Argument::Int(2));
  ASSERT_TRUE(gm.SetModule("act", std::move(shuffle)).ok());
  Node* x = *gm.graph().AddPlaceholder("x");
  SetInputShape(gm, x, {1, 4, 2, 2});
  ASSERT_TRUE(gm.graph().SetOutput(*gm.graph().AddCallModule("act", {x})).ok());
  const std::string path = absl::StrCat(testing::TempDir(), "/kept.onnx");
  { std::ofstream(path) << "old"; }
  const absl::Status status = SaveOnnxModel(gm, path);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("node 'act'"), std::string::npos) << status;
  EXPECT_NE(status.message().find("nn.PixelShuffle has no ONNX mapping"), std::string::npos) << status;
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


std::vector<std::string> Ops(const ModelProto& model) {
  std::vector<std::string> ops;
  for (const NodeProto& n : model.graph().node()) ops.push_back(absl::StrCat(n.op_type(), " ", n.name()));
  return ops;
}

std::vector<std::string> Inputs(const NodeProto& node) {
  return {node.input().begin(), node.input().end()};
}

std::vector<std::string> Outputs(const NodeProto& node) {
  return {node.output().begin(), node.output().end()};
}

Kwargs OneKwarg(absl::string_view name, Argument value) {
  return {{Symbol::Intern(name), std::move(value)}};
}

// x -> quantize_per_tensor(0.5, 10, quint8) -> chunk(2, dim=1) -> [1], [0] -> quantized.cat
// along dim 1 (0.5, 10) -> dequantize: the halves swapped.
TEST(OnnxWriterTest, AChunkOfAQuantizedTensorSplitsItsIntegers) {
  GraphModule gm;
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  SetInputShape(gm, x, {1, 4, 2, 2});
  Node* q = *g.AddCallFunction("torch.quantize_per_tensor",
                               {x, Argument::Float(0.5), Argument::Int(10), Argument::Dtype(DType::kQUInt8)});
  Node* chunk = *g.AddCallMethod("chunk", {q, Argument::Int(2)}, OneKwarg("dim", Argument::Int(1)));
  Node* a = *g.AddCallFunction("operator.getitem", {chunk, Argument::Int(0)});
  Node* b = *g.AddCallFunction("operator.getitem", {chunk, Argument::Int(-1)});
  Node* cat = *g.AddCallFunction("torch.ops.quantized.cat",
                                 {Argument::List({b, a}), Argument::Int(1), Argument::Float(0.5), Argument::Int(10)});
  ASSERT_TRUE(g.SetOutput(*g.AddCallMethod("dequantize", {cat})).ok());
  auto model = GraphModuleToOnnx(gm);
  ASSERT_TRUE(model.ok()) << model.status();
  // The concat's DequantizeLinear -> Concat -> QuantizeLinear of one grid stays for ORT's
  // QLinearConcat; the split works on the integers, no DequantizeLinear before it.
  EXPECT_EQ(Ops(*model), (std::vector<std::string>{
                             "QuantizeLinear quantize_per_tensor", "Split chunk_0",
                             "DequantizeLinear cat_0_dq", "DequantizeLinear cat_1_dq", "Concat cat",
                             "QuantizeLinear cat_1", "DequantizeLinear dequantize"}));
  const auto& nodes = model->graph().node();
  const auto init = Initializers(*model);
  const NodeProto& split = nodes[1];
  EXPECT_EQ(Inputs(split)[0], "quantize_per_tensor");
  EXPECT_EQ(Outputs(split), (std::vector<std::string>{"chunk_0", "chunk_1"}));
  EXPECT_EQ(Values<int64_t>(*init.at(split.input(1))), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(IntAttributes(split).at("axis"), std::vector<int64_t>{1});
  // Part 1 (index -1) first, each dequantized with the 0.5 / 10 it keeps.
  EXPECT_EQ(nodes[2].input(0), "chunk_1");
  EXPECT_EQ(nodes[3].input(0), "chunk_0");
  EXPECT_EQ(Values<float>(*init.at(nodes[2].input(1))), std::vector<float>{0.5f});
  EXPECT_EQ(Values<uint8_t>(*init.at(nodes[3].input(2))), std::vector<uint8_t>{10});
  EXPECT_EQ(IntAttributes(nodes[4]).at("axis"), std::vector<int64_t>{1});
}

// torch.split(x, 3, dim=-1) of a float [1, 2, 7]: parts of 3, 3 and 1; narrow(x, 2, -4, 2):
// elements 3 and 4 of the last dim.
TEST(OnnxWriterTest, SplitAndNarrowOfAFloatTensor) {
  GraphModule gm;
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  SetInputShape(gm, x, {1, 2, 7});
  Node* split = *g.AddCallFunction("torch.functional.split", {x, Argument::Int(3)},
                                   OneKwarg("dim", Argument::Int(-1)));
  Node* last = *g.AddCallFunction("operator.getitem", {split, Argument::Int(2)});
  Node* narrow = *g.AddCallFunction("torch.narrow", {x, Argument::Int(2), Argument::Int(-4), Argument::Int(2)});
  ASSERT_TRUE(g.SetOutput(Argument::Tuple({last, narrow})).ok());
  auto model = GraphModuleToOnnx(gm);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(Ops(*model), (std::vector<std::string>{"Split split_0", "Slice narrow"}));
  const auto& nodes = model->graph().node();
  const auto init = Initializers(*model);
  EXPECT_EQ(Values<int64_t>(*init.at(nodes[0].input(1))), (std::vector<int64_t>{3, 3, 1}));
  EXPECT_EQ(IntAttributes(nodes[0]).at("axis"), std::vector<int64_t>{2});
  EXPECT_EQ(Outputs(nodes[0]).size(), 3u);
  EXPECT_EQ(Values<int64_t>(*init.at(nodes[1].input(1))), std::vector<int64_t>{3});  // 7 - 4
  EXPECT_EQ(Values<int64_t>(*init.at(nodes[1].input(2))), std::vector<int64_t>{5});
  EXPECT_EQ(Values<int64_t>(*init.at(nodes[1].input(3))), std::vector<int64_t>{2});
  // The outputs: the last part (shape [1, 2, 1]) and the slice.
  ASSERT_EQ(model->graph().output_size(), 2);
  EXPECT_EQ(model->graph().output(0).name(), "split_2");
  const auto& dims = model->graph().output(0).type().tensor_type().shape().dim();
  ASSERT_EQ(dims.size(), 3);
  EXPECT_EQ(dims[2].dim_value(), 1);
  EXPECT_EQ(model->graph().output(1).name(), "narrow");
}

// nn.GELU (erf) and F.gelu(approximate='tanh') written out, F.silu as x * sigmoid(x),
// nn.LeakyReLU / F.elu with their slopes.
TEST(OnnxWriterTest, ActivationsWithoutAnOpset17OpAreWrittenOut) {
  GraphModule gm;
  auto gelu = std::make_unique<Module>("nn.GELU");
  gelu->SetAttribute("approximate", Argument::String("none"));
  ASSERT_TRUE(gm.SetModule("gelu", std::move(gelu)).ok());
  auto leaky = std::make_unique<Module>("nn.LeakyReLU");
  leaky->SetAttribute("negative_slope", Argument::Float(0.25));
  ASSERT_TRUE(gm.SetModule("leaky", std::move(leaky)).ok());
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  SetInputShape(gm, x);
  Node* a = *g.AddCallModule("gelu", {x});
  Node* b = *g.AddCallFunction("torch.nn.functional.gelu", {a}, OneKwarg("approximate", Argument::String("tanh")));
  Node* c = *g.AddCallFunction("torch.nn.functional.silu", {b});
  Node* d = *g.AddCallModule("leaky", {c});
  Node* e = *g.AddCallFunction("torch.nn.functional.elu", {d, Argument::Float(0.5)});
  ASSERT_TRUE(g.SetOutput(e).ok());
  auto model = GraphModuleToOnnx(gm);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(Ops(*model), (std::vector<std::string>{
                             "Mul gelu_scaled", "Erf gelu_erf", "Mul gelu_half", "Add gelu_1p", "Mul gelu",
                             "Mul gelu_1_sq", "Mul gelu_1_cube", "Mul gelu_1_k", "Add gelu_1_inner",
                             "Mul gelu_1_scaled", "Tanh gelu_1_tanh", "Mul gelu_1_half", "Add gelu_1_1p",
                             "Mul gelu_1", "Sigmoid silu_sigmoid", "Mul silu", "LeakyRelu leaky", "Elu elu"}));
  const auto& nodes = model->graph().node();
  const auto init = Initializers(*model);
  auto scalar = [&](const NodeProto& n, int i) { return Values<float>(*init.at(n.input(i))).at(0); };
  EXPECT_FLOAT_EQ(scalar(nodes[0], 1), static_cast<float>(1 / std::sqrt(2.0)));
  EXPECT_FLOAT_EQ(scalar(nodes[2], 1), 0.5f);
  EXPECT_FLOAT_EQ(scalar(nodes[3], 1), 1.0f);
  EXPECT_EQ(Inputs(nodes[4]), (std::vector<std::string>{"gelu_half", "gelu_1p"}));
  EXPECT_FLOAT_EQ(scalar(nodes[7], 1), 0.044715f);
  EXPECT_FLOAT_EQ(scalar(nodes[9], 1), static_cast<float>(std::sqrt(2.0 / 3.14159265358979323846)));
  EXPECT_EQ(Inputs(nodes[15]), (std::vector<std::string>{"gelu_1", "silu_sigmoid"}));
  EXPECT_FLOAT_EQ(nodes[16].attribute(0).f(), 0.25f);
  EXPECT_FLOAT_EQ(nodes[17].attribute(0).f(), 0.5f);
}

// nn.LayerNorm([2]) without affine parameters: ones and zeros of the normalized shape;
// F.interpolate(scale_factor=2) a Resize to the recorded [1, 1, 4, 4]; x.expand(3, -1, -1,
// -1) an Expand to the recorded [3, 1, 2, 2]; F.max_pool2d's defaults (stride = kernel).
TEST(OnnxWriterTest, ShapesComeFromTheRecordRun) {
  GraphModule gm;
  auto norm = std::make_unique<Module>("nn.LayerNorm");
  norm->SetAttribute("normalized_shape", Argument::Tuple({Argument::Int(2)}));
  norm->SetAttribute("eps", Argument::Float(1e-3));
  norm->SetAttribute("elementwise_affine", Argument::Bool(false));
  ASSERT_TRUE(gm.SetModule("norm", std::move(norm)).ok());
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  SetInputShape(gm, x);
  Node* n = *g.AddCallModule("norm", {x});
  Node* up = *g.AddCallFunction("torch.nn.functional.interpolate", {n},
                                {{Symbol::Intern("scale_factor"), Argument::Float(2.0)},
                                 {Symbol::Intern("mode"), Argument::String("nearest")}});
  Node* pool = *g.AddCallFunction("torch.nn.functional.max_pool2d", {up, Argument::Int(2)});
  Node* expand = *g.AddCallMethod("expand", {x, Argument::Int(3), Argument::Int(-1), Argument::Int(-1),
                                             Argument::Int(-1)});
  ASSERT_TRUE(g.SetOutput(Argument::Tuple({pool, expand})).ok());
  auto model = GraphModuleToOnnx(gm);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(Ops(*model), (std::vector<std::string>{"LayerNormalization norm", "Resize interpolate",
                                                   "MaxPool max_pool2d", "Expand expand"}));
  const auto& nodes = model->graph().node();
  const auto init = Initializers(*model);
  EXPECT_EQ(Values<float>(*init.at(nodes[0].input(1))), (std::vector<float>{1.0f, 1.0f}));
  EXPECT_EQ(Values<float>(*init.at(nodes[0].input(2))), (std::vector<float>{0.0f, 0.0f}));
  EXPECT_EQ(IntAttributes(nodes[0]).at("axis"), std::vector<int64_t>{-1});
  EXPECT_EQ(Inputs(nodes[1]), (std::vector<std::string>{"norm", "", "", "sizes"}));
  EXPECT_EQ(Values<int64_t>(*init.at("sizes")), (std::vector<int64_t>{1, 1, 4, 4}));
  std::map<std::string, std::string> strings;
  for (const auto& a : nodes[1].attribute()) strings[a.name()] = a.s();
  EXPECT_EQ(strings, (std::map<std::string, std::string>{{"coordinate_transformation_mode", "asymmetric"},
                                                         {"mode", "nearest"}, {"nearest_mode", "floor"}}));
  const std::map<std::string, std::vector<int64_t>> pool_attributes = {
      {"ceil_mode", {0}}, {"dilations", {1, 1}}, {"kernel_shape", {2, 2}}, {"pads", {0, 0, 0, 0}},
      {"strides", {2, 2}}};
  EXPECT_EQ(IntAttributes(nodes[2]), pool_attributes);
  EXPECT_EQ(Inputs(nodes[3])[0], "x");
  EXPECT_EQ(Values<int64_t>(*init.at(nodes[3].input(1))), (std::vector<int64_t>{3, 1, 2, 2}));
}

TEST(OnnxWriterTest, IndexingATensorAndATrainingStochasticDepthAreNamed) {
  for (const bool index : {true, false}) {
    GraphModule gm;
    Graph& g = gm.graph();
    Node* x = *g.AddPlaceholder("x");
    SetInputShape(gm, x);
    Node* y = index ? *g.AddCallFunction("operator.getitem", {x, Argument::Int(0)})
                    : *g.AddCallFunction("torchvision.ops.stochastic_depth.stochastic_depth",
                                         {x, Argument::Float(0.0), Argument::String("row")});
    ASSERT_TRUE(g.SetOutput(y).ok());
    auto model = GraphModuleToOnnx(gm);
    if (index) {
      ASSERT_FALSE(model.ok());
      EXPECT_NE(model.status().message().find("node 'getitem' (call_function operator.getitem): "
                                              "indexing a tensor has no ONNX mapping"),
                std::string::npos) << model.status();
    } else {
      // p = 0: the identity, which the run and the writer both accept.
      ASSERT_TRUE(model.ok()) << model.status();
      EXPECT_EQ(model->graph().node_size(), 1);  // the Identity the output needs
    }
  }
}

}  // namespace
}  // namespace fuselage
