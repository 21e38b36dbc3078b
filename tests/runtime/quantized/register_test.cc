// RegisterQuantizedKernels: the interpreter runs quantized graphs through the bindings
// (native modules, quantized functions, overloads of float targets, reference modules),
// checked against PyTorch 1.13 goldens and hand-computed values; bad input comes back as
// an error naming the node.
#include "runtime/quantized/register.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "graph/check.h"
#include "graph/graph_module.h"
#include "graph/serialization.h"
#include "runtime/float_kernels.h"
#include "runtime/interpreter.h"
#include "runtime/quantized_engine.h"
#include "tests/runtime/quantized/golden_reader.h"

namespace fuselage {
namespace {

using quantized::GoldenCase;
using quantized::ReadGoldenFile;
using quantized::SameQuantized;

std::unique_ptr<KernelRegistry> Kernels() {
  auto registry = std::make_unique<KernelRegistry>();
  FUSELAGE_CHECK(RegisterFloatKernels(*registry).ok());
  FUSELAGE_CHECK(RegisterQuantizedKernels(*registry).ok());
  return registry;
}

GoldenCase FindCase(const std::string& file, const std::string& name) {
  auto cases = ReadGoldenFile("tests/runtime/testdata/quantized/" + file);
  FUSELAGE_CHECK(cases.ok());
  for (GoldenCase& c : *cases) {
    if (c.name == name) return c;
  }
  FUSELAGE_CHECK(false && "golden case not found");
  return {};
}

// A quantized conv module as graph/NAMING.md describes it, from a golden case.
std::unique_ptr<Module> ConvModule(const std::string& type, const GoldenCase& c) {
  auto m = std::make_unique<Module>(type);
  m->SetTensor("weight", c.tensor("weight"));
  if (const Tensor* bias = c.find_tensor("bias")) m->SetTensor("bias", *bias);
  const int64_t s = static_cast<int64_t>(c.number("stride"));
  const int64_t p = static_cast<int64_t>(c.number("padding"));
  const int64_t d = static_cast<int64_t>(c.number("dilation"));
  m->SetAttribute("stride", Argument::Ints({s, s}));
  m->SetAttribute("padding", Argument::Ints({p, p}));
  m->SetAttribute("dilation", Argument::Ints({d, d}));
  m->SetAttribute("groups", Argument::Int(static_cast<int64_t>(c.number("groups"))));
  m->SetAttribute("padding_mode", Argument::String("zeros"));
  m->SetAttribute("scale", Argument::Float(c.number("scale")));
  m->SetAttribute("zero_point", Argument::Int(static_cast<int64_t>(c.number("zero_point"))));
  return m;
}

TEST(RegisterQuantizedKernelsTest, NativeConvModulesMatchPyTorch) {
  auto kernels = Kernels();
  for (const char* name : {"basic", "relu_per_channel"}) {
    SCOPED_TRACE(name);
    const GoldenCase c = FindCase("conv.txt", name);
    GraphModule gm;
    const std::string type = c.number("relu") != 0 ? "nniq.ConvReLU2d" : "nnq.Conv2d";
    ASSERT_TRUE(gm.SetModule("conv", ConvModule(type, c)).ok());
    Node* x = *gm.graph().AddPlaceholder("x");
    Node* conv = *gm.graph().AddCallModule("conv", {x});
    ASSERT_TRUE(gm.graph().SetOutput(conv).ok());
    ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
    auto out = fuselage::Run(gm, {Value(c.tensor("x"))}, *kernels);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(SameQuantized((*out)[0].as_tensor(), c.tensor("y")));
  }
}

// The engine recorded in a model (runtime/quantized_engine.h) picks the arithmetic when
// RunOptions names none; an explicit engine overrides it. On the qnnpack tie goldens the
// recorded qnnpack engine gives PyTorch's qnnpack bytes, and onednn's differs from them
// in exactly the outputs the generator counted.
TEST(RegisterQuantizedKernelsTest, RecordedEngineIsTheDefaultAndAnExplicitOneOverridesIt) {
  auto kernels = Kernels();
  auto cases = ReadGoldenFile("tests/runtime/testdata/quantized/qnnpack_conv_ties.txt");
  ASSERT_TRUE(cases.ok()) << cases.status();
  ASSERT_FALSE(cases->empty());
  for (const GoldenCase& c : *cases) {
    SCOPED_TRACE(c.name);
    auto make_model = [&c](std::optional<QuantizedEngine> recorded) {
      auto gm = std::make_unique<GraphModule>();
      const std::string type = c.number("relu") != 0 ? "nniq.ConvReLU2d" : "nnq.Conv2d";
      FUSELAGE_CHECK(gm->SetModule("conv", ConvModule(type, c)).ok());
      Node* x = *gm->graph().AddPlaceholder("x");
      Node* conv = *gm->graph().AddCallModule("conv", {x});
      FUSELAGE_CHECK(gm->graph().SetOutput(conv).ok());
      if (recorded.has_value()) RecordEngine(*recorded, *gm);
      return gm;
    };
    auto run = [&](const GraphModule& gm, std::optional<QuantizedEngine> engine) {
      RunOptions options;
      options.engine = engine;
      auto out = fuselage::Run(gm, {Value(c.tensor("x"))}, *kernels, options);
      FUSELAGE_CHECK(out.ok());
      return (*out)[0].as_tensor();
    };
    auto count_differing = [](const Tensor& a, const Tensor& b) {
      int64_t n = 0;
      for (int64_t i = 0; i < a.numel(); ++i) n += quantized::IntAt(a, i) != quantized::IntAt(b, i);
      return n;
    };
    const auto qnnpack_model = make_model(QuantizedEngine::kQnnpack);
    // Saved and loaded: the record is part of the model file.
    auto reloaded = ParseModel(SerializeModel(*qnnpack_model));
    ASSERT_TRUE(reloaded.ok()) << reloaded.status();
    ASSERT_EQ(*RecordedEngine(**reloaded), QuantizedEngine::kQnnpack);
    const Tensor by_record = run(**reloaded, std::nullopt);
    EXPECT_TRUE(SameQuantized(by_record, c.tensor("y")));  // PyTorch's qnnpack engine
    const Tensor explicit_onednn = run(**reloaded, QuantizedEngine::kOnednn);
    EXPECT_EQ(count_differing(explicit_onednn, c.tensor("y")),
              static_cast<int64_t>(c.number("onednn_differs")));
    // Nothing recorded: onednn's arithmetic, as before the record existed.
    const auto unrecorded = make_model(std::nullopt);
    EXPECT_TRUE(SameQuantized(run(*unrecorded, std::nullopt), explicit_onednn));
    EXPECT_TRUE(SameQuantized(run(*make_model(QuantizedEngine::kOnednn), std::nullopt),
                              explicit_onednn));
    EXPECT_TRUE(SameQuantized(run(*unrecorded, QuantizedEngine::kQnnpack), by_record));
  }
}

TEST(RegisterQuantizedKernelsTest, MalformedEngineRecordIsAnErrorNamingTheAttribute) {
  auto kernels = Kernels();
  const GoldenCase c = FindCase("conv.txt", "basic");
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("conv", ConvModule("nnq.Conv2d", c)).ok());
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* conv = *gm.graph().AddCallModule("conv", {x});
  ASSERT_TRUE(gm.graph().SetOutput(conv).ok());
  gm.root().SetAttribute(kQuantizedEngineAttribute, Argument::String("fbgemm"));
  auto out = fuselage::Run(gm, {Value(c.tensor("x"))}, *kernels);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(out.status().message());
  EXPECT_NE(message.find("quantized_engine"), std::string::npos) << message;
  EXPECT_NE(message.find("fbgemm"), std::string::npos) << message;
  // An explicit engine does not read the record.
  RunOptions options;
  options.engine = QuantizedEngine::kOnednn;
  auto explicit_run = fuselage::Run(gm, {Value(c.tensor("x"))}, *kernels, options);
  ASSERT_TRUE(explicit_run.ok()) << explicit_run.status();
  EXPECT_TRUE(SameQuantized((*explicit_run)[0].as_tensor(), c.tensor("y")));
}

TEST(RegisterQuantizedKernelsTest, TwoInputConvAddReLUModule) {
  auto kernels = Kernels();
  const GoldenCase c = FindCase("conv_add.txt", "add_relu");
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("conv_add", ConvModule("nniq.ConvAddReLU2d", c)).ok());
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* extra = *gm.graph().AddPlaceholder("extra");
  Node* conv = *gm.graph().AddCallModule("conv_add", {x, extra});
  ASSERT_TRUE(gm.graph().SetOutput(conv).ok());
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  auto out = fuselage::Run(gm, {Value(c.tensor("x")), Value(c.tensor("extra"))}, *kernels);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(SameQuantized((*out)[0].as_tensor(), c.tensor("y"), &c.tensor("ambiguous")));
}

TEST(RegisterQuantizedKernelsTest, QuantizedAddThenReluOverloadThenDequantize) {
  auto kernels = Kernels();
  const GoldenCase add = FindCase("binary.txt", "add_quint8");
  // a, b -> quantized.add(a, b, scale, zp) -> out. Then relu through nn.ReLU and the
  // `relu` method on a quantized tensor (overloads), and dequantize.
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("relu", std::make_unique<Module>("nn.ReLU")).ok());
  Graph& g = gm.graph();
  Node* a = *g.AddPlaceholder("a");
  Node* b = *g.AddPlaceholder("b");
  Node* sum = *g.AddCallFunction(
      "torch.ops.quantized.add",
      {a, b, Argument::Float(add.number("scale")),
       Argument::Int(static_cast<int64_t>(add.number("zero_point")))});
  Node* relu_module = *g.AddCallModule("relu", {sum});
  Node* relu_method = *g.AddCallMethod("relu", {sum});
  Node* dq = *g.AddCallMethod("dequantize", {relu_method});
  ASSERT_TRUE(g.SetOutput(Argument::Tuple({sum, relu_module, relu_method, dq})).ok());
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  auto out = fuselage::Run(gm, {Value(add.tensor("a")), Value(add.tensor("b"))}, *kernels);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 4u);
  const Tensor& y = (*out)[0].as_tensor();
  EXPECT_TRUE(SameQuantized(y, add.tensor("y"), &add.tensor("ambiguous")));
  // relu of a quantized tensor: every value below the zero point becomes it.
  const int64_t zp = y.qparams().zero_points[0];
  for (int i : {1, 2}) {
    const Tensor& r = (*out)[i].as_tensor();
    ASSERT_EQ(r.dtype(), DType::kQUInt8);
    for (int64_t k = 0; k < y.numel(); ++k) {
      EXPECT_EQ(quantized::IntAt(r, k), std::max(quantized::IntAt(y, k), zp));
    }
  }
  const Tensor& f = (*out)[3].as_tensor();
  ASSERT_EQ(f.dtype(), DType::kFloat32);
  const float scale = static_cast<float>(y.qparams().scales[0]);
  for (int64_t k = 0; k < f.numel(); ++k) {
    EXPECT_EQ(f.data<float>()[k],
              scale * static_cast<float>(std::max(quantized::IntAt(y, k), zp) - zp));
  }
}

TEST(RegisterQuantizedKernelsTest, QuantizedMulBroadcastsLikeSqueezeExcitation) {
  // The squeeze-excitation shape of issue #18: quantized.mul(scale [1, 8, 1, 1],
  // x [1, 8, 5, 5]) through the registered function, against PyTorch's output.
  auto kernels = Kernels();
  const GoldenCase mul = FindCase("binary_broadcast.txt", "mul_0_quint8");
  GraphModule gm;
  Graph& g = gm.graph();
  Node* a = *g.AddPlaceholder("scale");
  Node* b = *g.AddPlaceholder("x");
  Node* y = *g.AddCallFunction(
      "torch.ops.quantized.mul",
      {a, b, Argument::Float(mul.number("scale")),
       Argument::Int(static_cast<int64_t>(mul.number("zero_point")))});
  ASSERT_TRUE(g.SetOutput(y).ok());
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  auto out = fuselage::Run(gm, {Value(mul.tensor("a")), Value(mul.tensor("b"))}, *kernels);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 1u);
  EXPECT_TRUE(SameQuantized((*out)[0].as_tensor(), mul.tensor("y")));
}

TEST(RegisterQuantizedKernelsTest, QuantizeWithTensorParamsPoolAndCat) {
  auto kernels = Kernels();
  // x -> quantize_per_tensor(x, scale (0-d tensor), zp (0-d tensor), quint8)
  //   -> F.max_pool2d(q, 2) -> torch.cat([p, p], 1) -> output
  GraphModule gm;
  ASSERT_TRUE(gm.SetTensor("scale", Tensor::FromFloats({}, {0.5f})).ok());
  ASSERT_TRUE(gm.SetTensor("zp", Tensor::FromInt64s({}, {10})).ok());
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* scale = *g.AddGetAttr("scale");
  Node* zp = *g.AddGetAttr("zp");
  Node* q = *g.AddCallFunction("torch.quantize_per_tensor",
                               {x, scale, zp, Argument::Dtype(DType::kQUInt8)});
  Node* pool = *g.AddCallFunction("torch.nn.functional.max_pool2d", {q, Argument::Int(2)});
  Node* cat = *g.AddCallFunction("torch.cat", {Argument::List({pool, pool}), Argument::Int(1)});
  ASSERT_TRUE(g.SetOutput(cat).ok());
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  // x = 1x1x2x2: 1.0, -2.0, 3.25, 0.5 -> q = 12, 6, 16 (6.5 -> 6, half to even), 11.
  auto out = fuselage::Run(gm, {Value(Tensor::FromFloats({1, 1, 2, 2}, {1.0f, -2.0f, 3.25f, 0.5f}))},
                 *kernels);
  ASSERT_TRUE(out.ok()) << out.status();
  const Tensor& y = (*out)[0].as_tensor();
  EXPECT_EQ(y.shape(), (std::vector<int64_t>{1, 2, 1, 1}));
  EXPECT_EQ(y.qparams(), QuantParams::PerTensor(0.5, 10));
  EXPECT_EQ(quantized::IntAt(y, 0), 16);
  EXPECT_EQ(quantized::IntAt(y, 1), 16);
}

TEST(RegisterQuantizedKernelsTest, ReferenceConvQuantizesAndDequantizesTheWeight) {
  auto kernels = Kernels();
  // nnqr.Conv2d with a 1x1 float weight 0.26 quantized per tensor (scale 0.1, zp 0,
  // qint8) -> 3 -> 0.3; no bias. x = 2 gives float(0.1f * 3) * 2.
  auto m = std::make_unique<Module>("nnqr.Conv2d");
  m->SetTensor("weight", Tensor::FromFloats({1, 1, 1, 1}, {0.26f}));
  m->SetTensor("weight_scale", Tensor::FromFloats({}, {0.1f}));
  m->SetTensor("weight_zero_point", Tensor::FromInt64s({}, {0}));
  m->SetTensor("weight_axis", Tensor::FromInt64s({}, {0}));
  m->SetAttribute("weight_qscheme", Argument::String("torch.per_tensor_affine"));
  m->SetAttribute("weight_dtype", Argument::Dtype(DType::kQInt8));
  m->SetAttribute("in_channels", Argument::Int(1));
  m->SetAttribute("out_channels", Argument::Int(1));
  m->SetAttribute("kernel_size", Argument::Ints({1, 1}));
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("ref", std::move(m)).ok());
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* conv = *gm.graph().AddCallModule("ref", {x});
  ASSERT_TRUE(gm.graph().SetOutput(conv).ok());
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  auto out = fuselage::Run(gm, {Value(Tensor::FromFloats({1, 1, 1, 1}, {2.0f}))}, *kernels);
  ASSERT_TRUE(out.ok()) << out.status();
  const float w = static_cast<float>(0.1f) * 3.0f;  // dequantized weight
  EXPECT_FLOAT_EQ((*out)[0].as_tensor().data<float>()[0], w * 2.0f);
}

TEST(RegisterQuantizedKernelsTest, ReferenceLinearPerChannelWeight) {
  auto kernels = Kernels();
  // nnqr.Linear, weight [2, 2] per channel along axis 0: row 0 scale 0.5 zp 0, row 1
  // scale 0.25 zp 1 (qint8). Row 0 (0.7, -1.2) -> q (1, -2) -> (0.5, -1.0); row 1
  // (0.3, 0.1) -> q (1 + 1, 0 + 1) -> (0.25, 0.0). Bias (1, -1).
  auto m = std::make_unique<Module>("nnqr.Linear");
  m->SetTensor("weight", Tensor::FromFloats({2, 2}, {0.7f, -1.2f, 0.3f, 0.1f}));
  m->SetTensor("bias", Tensor::FromFloats({2}, {1.0f, -1.0f}));
  m->SetTensor("weight_scale", Tensor::FromFloats({2}, {0.5f, 0.25f}));
  m->SetTensor("weight_zero_point", Tensor::FromInt64s({2}, {0, 1}));
  m->SetTensor("weight_axis", Tensor::FromInt64s({}, {0}));
  m->SetAttribute("weight_qscheme", Argument::String("torch.per_channel_affine"));
  m->SetAttribute("weight_dtype", Argument::Dtype(DType::kQInt8));
  m->SetAttribute("in_features", Argument::Int(2));
  m->SetAttribute("out_features", Argument::Int(2));
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("fc", std::move(m)).ok());
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* fc = *gm.graph().AddCallModule("fc", {x});
  ASSERT_TRUE(gm.graph().SetOutput(fc).ok());
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  // x = (2, 1): row 0: 1.0 - 1.0 + 1 = 1; row 1: 0.5 + 0 - 1 = -0.5.
  auto out = fuselage::Run(gm, {Value(Tensor::FromFloats({1, 2}, {2.0f, 1.0f}))}, *kernels);
  ASSERT_TRUE(out.ok()) << out.status();
  const Tensor& y = (*out)[0].as_tensor();
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{1, 2}));
  EXPECT_FLOAT_EQ(y.data<float>()[0], 1.0f);
  EXPECT_FLOAT_EQ(y.data<float>()[1], -0.5f);
}

TEST(RegisterQuantizedKernelsTest, FloatInputToQuantizedConvNamesTheNode) {
  auto kernels = Kernels();
  const GoldenCase c = FindCase("conv.txt", "basic");
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("conv", ConvModule("nnq.Conv2d", c)).ok());
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* conv = *gm.graph().AddCallModule("conv", {x});
  ASSERT_TRUE(gm.graph().SetOutput(conv).ok());
  auto out = fuselage::Run(gm, {Value(Tensor::FromFloats({1, 3, 1, 1}, {1.f, 2.f, 3.f}))}, *kernels);
  ASSERT_FALSE(out.ok());
  const std::string message(out.status().message());
  EXPECT_NE(message.find("conv"), std::string::npos) << message;
  EXPECT_NE(message.find("input is a torch.float32 tensor"), std::string::npos) << message;

  // A zero scale given to quantize_per_tensor.
  GraphModule gq;
  Node* y = *gq.graph().AddPlaceholder("y");
  Node* q = *gq.graph().AddCallFunction(
      "torch.quantize_per_tensor",
      {y, Argument::Float(0.0), Argument::Int(0), Argument::Dtype(DType::kQUInt8)});
  ASSERT_TRUE(gq.graph().SetOutput(q).ok());
  auto bad = fuselage::Run(gq, {Value(Tensor::FromFloats({1}, {1.f}))}, *kernels);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("scale"), std::string::npos) << bad.status();
}

// torch.ops.quantized.conv2d[_relu] in the functional form lowering writes for F.conv2d
// (graph/NAMING.md): quantized input and weight, float bias, stride / padding / dilation /
// groups, kwargs output_scale / output_zero_point. Same goldens as the module form.
TEST(RegisterQuantizedKernelsTest, FunctionalConv2dMatchesPyTorch) {
  auto kernels = Kernels();
  for (const char* name : {"basic", "relu_per_channel", "dilated_grouped", "depthwise_no_bias"}) {
    SCOPED_TRACE(name);
    const GoldenCase c = FindCase("conv.txt", name);
    GraphModule gm;
    Graph& g = gm.graph();
    Node* x = *g.AddPlaceholder("x");
    Node* w = *g.AddPlaceholder("w");
    Node* b = *g.AddPlaceholder("b");
    const bool has_bias = c.find_tensor("bias") != nullptr;
    const int64_t s = static_cast<int64_t>(c.number("stride"));
    const int64_t p = static_cast<int64_t>(c.number("padding"));
    const int64_t d = static_cast<int64_t>(c.number("dilation"));
    const char* target =
        c.number("relu") != 0 ? "torch.ops.quantized.conv2d_relu" : "torch.ops.quantized.conv2d";
    Node* conv = *g.AddCallFunction(
        target,
        {x, w, has_bias ? Argument(b) : Argument::None(), Argument::Ints({s, s}),
         Argument::Int(p), Argument::Ints({d, d}),
         Argument::Int(static_cast<int64_t>(c.number("groups")))},
        {{Symbol::Intern("output_scale"), Argument::Float(c.number("scale"))},
         {Symbol::Intern("output_zero_point"),
          Argument::Int(static_cast<int64_t>(c.number("zero_point")))}});
    ASSERT_TRUE(g.SetOutput(conv).ok());
    ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
    const Tensor unused_bias = Tensor::FromFloats({1}, {0.f});
    auto out = fuselage::Run(gm,
                             {Value(c.tensor("x")), Value(c.tensor("weight")),
                              Value(has_bias ? *c.find_tensor("bias") : unused_bias)},
                             *kernels);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(SameQuantized((*out)[0].as_tensor(), c.tensor("y")));
  }
}

// torch.ops.quantized.linear[_relu] in the functional form lowering writes for F.linear,
// bias positional, as a keyword, or None.
TEST(RegisterQuantizedKernelsTest, FunctionalLinearMatchesPyTorch) {
  auto kernels = Kernels();
  for (const char* name : {"basic", "relu_per_channel", "no_bias"}) {
    SCOPED_TRACE(name);
    const GoldenCase c = FindCase("linear.txt", name);
    GraphModule gm;
    Graph& g = gm.graph();
    Node* x = *g.AddPlaceholder("x");
    Node* w = *g.AddPlaceholder("w");
    Node* b = *g.AddPlaceholder("b");
    const bool has_bias = c.find_tensor("bias") != nullptr;
    const char* target =
        c.number("relu") != 0 ? "torch.ops.quantized.linear_relu" : "torch.ops.quantized.linear";
    std::vector<Argument> args = {x, w};
    Kwargs kwargs = {
        {Symbol::Intern("output_scale"), Argument::Float(c.number("scale"))},
        {Symbol::Intern("output_zero_point"),
         Argument::Int(static_cast<int64_t>(c.number("zero_point")))}};
    if (std::string(name) == "basic") {
      args.push_back(b);
    } else if (has_bias) {
      kwargs.emplace_back(Symbol::Intern("bias"), Argument(b));
    } else {
      args.push_back(Argument::None());
    }
    Node* linear = *g.AddCallFunction(target, std::move(args), std::move(kwargs));
    ASSERT_TRUE(g.SetOutput(linear).ok());
    ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
    const Tensor unused_bias = Tensor::FromFloats({1}, {0.f});
    auto out = fuselage::Run(gm,
                             {Value(c.tensor("x")), Value(c.tensor("weight")),
                              Value(has_bias ? *c.find_tensor("bias") : unused_bias)},
                             *kernels);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(SameQuantized((*out)[0].as_tensor(), c.tensor("y")));
  }
}

TEST(RegisterQuantizedKernelsTest, FunctionalLinearWithoutOutputScaleNamesIt) {
  auto kernels = Kernels();
  const GoldenCase c = FindCase("linear.txt", "basic");
  GraphModule gm;
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* w = *gm.graph().AddPlaceholder("w");
  Node* linear =
      *gm.graph().AddCallFunction("torch.ops.quantized.linear", {x, w},
                                  {{Symbol::Intern("output_zero_point"), Argument::Int(70)}});
  ASSERT_TRUE(gm.graph().SetOutput(linear).ok());
  auto out = fuselage::Run(gm, {Value(c.tensor("x")), Value(c.tensor("weight"))}, *kernels);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("output_scale"), std::string::npos) << out.status();
}

}  // namespace
}  // namespace fuselage
