// The bindings RegisterQuantizedKernels adds for the ops real models run on quantized
// tensors (issue #18): quantized activation and batch-norm modules with their attributes
// and buffers as the bridge exports them, fixed-qparams overloads of float targets,
// mean, interpolate / adaptive_max_pool2d, and pass-through shape ops that keep values
// and qparams. Numerics against PyTorch 1.13 goldens (tests/runtime/gen_quantized_goldens.py).
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "graph/check.h"
#include "graph/graph_module.h"
#include "runtime/float_kernels.h"
#include "runtime/interpreter.h"
#include "runtime/quantized/register.h"
#include "tests/runtime/quantized/golden_reader.h"

namespace fuselage {
namespace {

using quantized::GoldenCase;
using quantized::IntAt;
using quantized::MostlySameQuantized;
using quantized::ReadGoldenFile;

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

// Runs x -> <one call> -> output on `input`.
absl::StatusOr<Value> RunOne(GraphModule& gm, const KernelRegistry& kernels, const Tensor& input,
                             const std::function<absl::StatusOr<Node*>(Graph&, Node*)>& call) {
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  absl::StatusOr<Node*> y = call(g, x);
  if (!y.ok()) return y.status();
  if (absl::StatusOr<Node*> out = g.SetOutput(*y); !out.ok()) return out.status();
  if (absl::Status s = gm.Verify(); !s.ok()) return s;
  absl::StatusOr<std::vector<Value>> out = fuselage::Run(gm, {Value(input)}, kernels);
  if (!out.ok()) return out.status();
  return (*out)[0];
}

absl::StatusOr<Value> RunModule(std::unique_ptr<Module> m, const KernelRegistry& kernels,
                                const Tensor& input) {
  GraphModule gm;
  if (absl::Status s = gm.SetModule("m", std::move(m)); !s.ok()) return s;
  return RunOne(gm, kernels, input,
                [](Graph& g, Node* x) { return g.AddCallModule("m", {x}); });
}

TEST(RegisterQuantizedOpsTest, ActivationModulesAndOverloadsMatchPyTorch) {
  auto kernels = Kernels();
  for (const char* tag : {"quint8", "qint8"}) {
    SCOPED_TRACE(tag);
    const GoldenCase c = FindCase("activations.txt", tag);
    const Tensor& x = c.tensor("x");
    // nnq.Hardswish / nnq.ELU: scale and zero_point attributes.
    auto hs = std::make_unique<Module>("nnq.Hardswish");
    hs->SetAttribute("scale", Argument::Float(c.number("hardswish_module.scale")));
    hs->SetAttribute("zero_point",
                     Argument::Int(static_cast<int64_t>(c.number("hardswish_module.zero_point"))));
    auto y = RunModule(std::move(hs), *kernels, x);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(MostlySameQuantized(y->as_tensor(), c.tensor("hardswish_module")));

    auto elu = std::make_unique<Module>("nnq.ELU");
    elu->SetAttribute("scale", Argument::Float(c.number("elu_module.scale")));
    elu->SetAttribute("zero_point",
                      Argument::Int(static_cast<int64_t>(c.number("elu_module.zero_point"))));
    elu->SetAttribute("alpha", Argument::Float(c.number("elu_module.alpha")));
    y = RunModule(std::move(elu), *kernels, x);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(MostlySameQuantized(y->as_tensor(), c.tensor("elu_module")));

    // nnq.LeakyReLU keeps scale / zero_point as 0-d buffers.
    auto lr = std::make_unique<Module>("nnq.LeakyReLU");
    lr->SetTensor("scale", Tensor::FromFloats({}, {static_cast<float>(
                                                      c.number("leaky_relu_module.scale"))}));
    lr->SetTensor("zero_point", Tensor::FromInt64s({}, {static_cast<int64_t>(c.number(
                                                          "leaky_relu_module.zero_point"))}));
    lr->SetAttribute("negative_slope",
                     Argument::Float(c.number("leaky_relu_module.negative_slope")));
    y = RunModule(std::move(lr), *kernels, x);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(MostlySameQuantized(y->as_tensor(), c.tensor("leaky_relu_module")));

    auto sig = std::make_unique<Module>("nnq.Sigmoid");
    sig->SetAttribute("output_scale", Argument::Float(c.number("sigmoid_module.output_scale")));
    sig->SetAttribute("output_zero_point", Argument::Int(static_cast<int64_t>(
                                               c.number("sigmoid_module.output_zero_point"))));
    y = RunModule(std::move(sig), *kernels, x);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(MostlySameQuantized(y->as_tensor(), c.tensor("sigmoid_module")));

    auto softmax = std::make_unique<Module>("nnq.Softmax");
    softmax->SetAttribute("dim", Argument::Int(static_cast<int64_t>(c.number("softmax_module.dim"))));
    softmax->SetAttribute("scale", Argument::Float(c.number("softmax_module.scale")));
    softmax->SetAttribute("zero_point", Argument::Int(static_cast<int64_t>(
                                            c.number("softmax_module.zero_point"))));
    y = RunModule(std::move(softmax), *kernels, x);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(MostlySameQuantized(y->as_tensor(), c.tensor("softmax_module")));

    auto gelu = std::make_unique<Module>("nn.GELU");
    gelu->SetAttribute("approximate", Argument::String("tanh"));
    y = RunModule(std::move(gelu), *kernels, x);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(MostlySameQuantized(y->as_tensor(), c.tensor("gelu_tanh")));
    {
      GraphModule gm;
      y = RunOne(gm, *kernels, x, [](Graph& g, Node* in) {
        return g.AddCallFunction("torch.nn.functional.gelu", {in});
      });
      ASSERT_TRUE(y.ok()) << y.status();
      EXPECT_TRUE(MostlySameQuantized(y->as_tensor(), c.tensor("gelu")));
    }

    // Float module types on a quantized input: the fixed-qparams kernels.
    for (const auto& [type, key] : std::vector<std::pair<std::string, std::string>>{
             {"nn.Sigmoid", "sigmoid"}, {"nn.Hardsigmoid", "hardsigmoid"}, {"nn.Tanh", "tanh"}}) {
      SCOPED_TRACE(type);
      y = RunModule(std::make_unique<Module>(type), *kernels, x);
      ASSERT_TRUE(y.ok()) << y.status();
      EXPECT_TRUE(MostlySameQuantized(y->as_tensor(), c.tensor(key)));
    }
    // Functions and methods.
    struct Call {
      OpKind op;
      std::string target;
      std::string key;
    };
    for (const Call& call : std::vector<Call>{
             {OpKind::kCallFunction, "torch.sigmoid", "sigmoid"},
             {OpKind::kCallMethod, "sigmoid", "sigmoid"},
             {OpKind::kCallFunction, "torch.nn.functional.hardsigmoid", "hardsigmoid"},
             {OpKind::kCallFunction, "torch.tanh", "tanh"},
             {OpKind::kCallMethod, "tanh", "tanh"}}) {
      SCOPED_TRACE(call.target);
      GraphModule gm;
      y = RunOne(gm, *kernels, x, [&](Graph& g, Node* in) {
        return call.op == OpKind::kCallMethod ? g.AddCallMethod(call.target, {in})
                                              : g.AddCallFunction(call.target, {in});
      });
      ASSERT_TRUE(y.ok()) << y.status();
      EXPECT_TRUE(MostlySameQuantized(y->as_tensor(), c.tensor(call.key)));
    }
    GraphModule gm;
    y = RunOne(gm, *kernels, x, [&](Graph& g, Node* in) {
      return g.AddCallFunction(
          "torch.nn.functional.leaky_relu",
          {in, Argument::Float(c.number("leaky_relu_function.negative_slope"))});
    });
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(MostlySameQuantized(y->as_tensor(), c.tensor("leaky_relu_function")));
  }
}

TEST(RegisterQuantizedOpsTest, BatchNormModulesMatchPyTorch) {
  auto kernels = Kernels();
  for (const char* name : {"bn2d_c3", "bnrelu2d_c21", "bn3d_c6"}) {
    SCOPED_TRACE(name);
    const GoldenCase c = FindCase("batch_norm.txt", name);
    const std::string type = c.number("relu") != 0           ? "nniq.BNReLU2d"
                             : std::string(name) == "bn3d_c6" ? "nnq.BatchNorm3d"
                                                              : "nnq.BatchNorm2d";
    auto m = std::make_unique<Module>(type);
    for (const char* t : {"weight", "bias", "running_mean", "running_var"}) {
      m->SetTensor(t, c.tensor(t));
    }
    // As PyTorch keeps them: scale / zero_point buffers, eps an attribute.
    m->SetTensor("scale", Tensor::FromFloats({}, {static_cast<float>(c.number("scale"))}));
    m->SetTensor("zero_point",
                 Tensor::FromInt64s({}, {static_cast<int64_t>(c.number("zero_point"))}));
    m->SetAttribute("eps", Argument::Float(c.number("eps")));
    auto y = RunModule(std::move(m), *kernels, c.tensor("x"));
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(MostlySameQuantized(y->as_tensor(), c.tensor("y")));
  }
  // A 3-D input to nnq.BatchNorm2d is an error naming the module type.
  const GoldenCase c = FindCase("batch_norm.txt", "bn2d_c3");
  auto m = std::make_unique<Module>("nnq.BatchNorm2d");
  for (const char* t : {"weight", "bias", "running_mean", "running_var"}) {
    m->SetTensor(t, c.tensor(t));
  }
  m->SetAttribute("scale", Argument::Float(0.1));
  m->SetAttribute("zero_point", Argument::Int(0));
  auto x3 = Tensor::FromBytes(DType::kQUInt8, {1, 3, 2}, std::string(6, '\1'),
                              QuantParams::PerTensor(0.5, 0));
  ASSERT_TRUE(x3.ok());
  auto bad = RunModule(std::move(m), *kernels, *x3);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("nnq.BatchNorm2d"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("4-D"), std::string::npos) << bad.status();
}

TEST(RegisterQuantizedOpsTest, NormModulesAndLayerNormFunctionMatchPyTorch) {
  auto kernels = Kernels();
  const std::vector<std::pair<std::string, std::string>> modules = {
      {"layer_norm_two_dims_qint8", "nnq.LayerNorm"},
      {"group_norm", "nnq.GroupNorm"},
      {"instance_norm2d", "nnq.InstanceNorm2d"},
      {"instance_norm1d", "nnq.InstanceNorm1d"}};
  for (const auto& [name, type] : modules) {
    SCOPED_TRACE(name);
    const GoldenCase c = FindCase("norms.txt", name);
    auto m = std::make_unique<Module>(type);
    m->SetTensor("weight", c.tensor("weight"));
    m->SetTensor("bias", c.tensor("bias"));
    m->SetAttribute("eps", Argument::Float(c.number("eps")));
    m->SetAttribute("scale", Argument::Float(c.number("scale")));
    m->SetAttribute("zero_point", Argument::Int(static_cast<int64_t>(c.number("zero_point"))));
    if (type == "nnq.LayerNorm") {
      const Shape& shape = c.tensor("x").shape();
      const int64_t k = static_cast<int64_t>(c.number("normalized_dims"));
      m->SetAttribute("normalized_shape",
                      Argument::Ints(std::vector<int64_t>(shape.end() - k, shape.end())));
    }
    if (type == "nnq.GroupNorm") {
      m->SetAttribute("num_groups", Argument::Int(static_cast<int64_t>(c.number("groups"))));
    }
    auto y = RunModule(std::move(m), *kernels, c.tensor("x"));
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(MostlySameQuantized(y->as_tensor(), c.tensor("y")));
  }
  // convnext_tiny's form: quantized.layer_norm(x, (96,), weight=, bias=, eps=,
  // output_scale=, output_zero_point=) with get_attr tensors.
  const GoldenCase c = FindCase("norms.txt", "layer_norm_channels_last");
  GraphModule gm;
  ASSERT_TRUE(gm.SetTensor("w", c.tensor("weight")).ok());
  ASSERT_TRUE(gm.SetTensor("b", c.tensor("bias")).ok());
  ASSERT_TRUE(gm.SetTensor("s", Tensor::FromFloats({}, {static_cast<float>(c.number("scale"))}))
                  .ok());
  ASSERT_TRUE(
      gm.SetTensor("z", Tensor::FromInt64s({}, {static_cast<int64_t>(c.number("zero_point"))}))
          .ok());
  auto y = RunOne(gm, *kernels, c.tensor("x"), [&](Graph& g, Node* in) -> absl::StatusOr<Node*> {
    return g.AddCallFunction(
        "torch.ops.quantized.layer_norm", {in, Argument::Ints({96})},
        {{Symbol::Intern("weight"), *g.AddGetAttr("w")},
         {Symbol::Intern("bias"), *g.AddGetAttr("b")},
         {Symbol::Intern("eps"), Argument::Float(c.number("eps"))},
         {Symbol::Intern("output_scale"), *g.AddGetAttr("s")},
         {Symbol::Intern("output_zero_point"), *g.AddGetAttr("z")}});
  });
  ASSERT_TRUE(y.ok()) << y.status();
  // The output scale came through a float32 0-d tensor, as PyTorch's does.
  EXPECT_TRUE(MostlySameQuantized(y->as_tensor(), c.tensor("y")));
}

TEST(RegisterQuantizedOpsTest, MeanMethodMatchesPyTorch) {
  auto kernels = Kernels();
  const GoldenCase c = FindCase("mean.txt", "hw_keepdim_quint8");
  GraphModule gm;
  auto y = RunOne(gm, *kernels, c.tensor("x"), [](Graph& g, Node* in) {
    return g.AddCallMethod("mean", {in, Argument::Ints({2, 3}), Argument::Bool(true)});
  });
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_TRUE(MostlySameQuantized(y->as_tensor(), c.tensor("y")));
  const GoldenCase d = FindCase("mean.txt", "c_qint8");
  GraphModule gm2;
  y = RunOne(gm2, *kernels, d.tensor("x"), [](Graph& g, Node* in) {
    return g.AddCallFunction("torch.mean", {in, Argument::Ints({1})});
  });
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_TRUE(MostlySameQuantized(y->as_tensor(), d.tensor("y")));
}

TEST(RegisterQuantizedOpsTest, InterpolateAndAdaptiveMaxPoolMatchPyTorch) {
  auto kernels = Kernels();
  for (const char* tag : {"quint8", "qint8"}) {
    for (const char* base : {"nearest_scale2", "nearest_size", "bilinear_size",
                             "bilinear_align", "adaptive_max_pool"}) {
      const std::string name = std::string(base) + "_" + tag;
      SCOPED_TRACE(name);
      const GoldenCase c = FindCase("resample.txt", name);
      const std::string mode = c.text("mode");
      GraphModule gm;
      auto y = RunOne(gm, *kernels, c.tensor("x"), [&](Graph& g, Node* in) {
        if (mode == "adaptive_max") {
          return g.AddCallFunction(
              "torch.nn.functional.adaptive_max_pool2d",
              {in, Argument::Ints({static_cast<int64_t>(c.number("out_h")),
                                   static_cast<int64_t>(c.number("out_w"))})});
        }
        Kwargs kwargs = {{Symbol::Intern("mode"), Argument::String(mode)}};
        if (c.scalars.count("scale") != 0) {
          kwargs.push_back({Symbol::Intern("scale_factor"), Argument::Float(c.number("scale"))});
        } else {
          kwargs.push_back({Symbol::Intern("size"),
                            Argument::Ints({static_cast<int64_t>(c.number("out_h")),
                                            static_cast<int64_t>(c.number("out_w"))})});
        }
        if (c.scalars.count("align_corners") != 0) {
          kwargs.push_back({Symbol::Intern("align_corners"),
                            Argument::Bool(c.number("align_corners") != 0)});
        }
        return g.AddCallFunction("torch.nn.functional.interpolate", {in}, kwargs);
      });
      ASSERT_TRUE(y.ok()) << y.status();
      EXPECT_TRUE(MostlySameQuantized(y->as_tensor(), c.tensor("y")));
    }
  }
}

TEST(RegisterQuantizedOpsTest, ConvNdModulesAndFunctionsMatchPyTorch) {
  auto kernels = Kernels();
  const std::vector<std::pair<std::string, std::string>> modules = {
      {"conv1d", "nnq.Conv1d"},
      {"conv_relu1d_grouped", "nniq.ConvReLU1d"},
      {"conv3d", "nnq.Conv3d"},
      {"conv_relu3d_strided", "nniq.ConvReLU3d"},
      {"conv_transpose1d", "nnq.ConvTranspose1d"},
      {"conv_transpose2d_grouped", "nnq.ConvTranspose2d"},
      {"conv_transpose3d", "nnq.ConvTranspose3d"},
      {"conv_transpose2d_output_padding", "nnq.ConvTranspose2d"}};
  for (const auto& [name, type] : modules) {
    SCOPED_TRACE(name);
    const GoldenCase c = FindCase("conv_nd.txt", name);
    const size_t spatial = static_cast<size_t>(c.tensor("x").dim() - 2);
    // As the bridge exports them: PyTorch's tuples, one entry per spatial dim.
    auto m = std::make_unique<Module>(type);
    m->SetTensor("weight", c.tensor("weight"));
    if (const Tensor* bias = c.find_tensor("bias")) m->SetTensor("bias", *bias);
    for (const char* key : {"stride", "padding", "dilation", "output_padding"}) {
      m->SetAttribute(key, Argument::Ints(std::vector<int64_t>(
                               spatial, static_cast<int64_t>(c.number(key)))));
    }
    m->SetAttribute("groups", Argument::Int(static_cast<int64_t>(c.number("groups"))));
    m->SetAttribute("padding_mode", Argument::String("zeros"));
    m->SetAttribute("scale", Argument::Float(c.number("scale")));
    m->SetAttribute("zero_point", Argument::Int(static_cast<int64_t>(c.number("zero_point"))));
    auto y = RunModule(std::move(m), *kernels, c.tensor("x"));
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(MostlySameQuantized(y->as_tensor(), c.tensor("y")));
  }
  // torch.ops.quantized.conv3d(input, weight, bias, stride, padding, dilation, groups,
  // output_scale=, output_zero_point=).
  const GoldenCase c = FindCase("conv_nd.txt", "conv3d");
  GraphModule gm;
  ASSERT_TRUE(gm.SetTensor("w", c.tensor("weight")).ok());
  ASSERT_TRUE(gm.SetTensor("b", c.tensor("bias")).ok());
  auto y = RunOne(gm, *kernels, c.tensor("x"), [&](Graph& g, Node* in) -> absl::StatusOr<Node*> {
    Node* w = *g.AddGetAttr("w");
    Node* b = *g.AddGetAttr("b");
    return g.AddCallFunction(
        "torch.ops.quantized.conv3d",
        {in, w, b, Argument::Int(static_cast<int64_t>(c.number("stride"))),
         Argument::Int(static_cast<int64_t>(c.number("padding"))),
         Argument::Int(static_cast<int64_t>(c.number("dilation"))),
         Argument::Int(static_cast<int64_t>(c.number("groups")))},
        {{Symbol::Intern("output_scale"), Argument::Float(c.number("scale"))},
         {Symbol::Intern("output_zero_point"),
          Argument::Int(static_cast<int64_t>(c.number("zero_point")))}});
  });
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_TRUE(MostlySameQuantized(y->as_tensor(), c.tensor("y")));
}

// Pools and mean as a converted model runs them: on channels-last inputs (PyTorch's
// quantized convs write that layout), where PyTorch's NHWC kernels round as pooling.h says.
TEST(RegisterQuantizedOpsTest, PoolsAndMeanMatchPyTorchOnChannelsLastInputs) {
  auto kernels = Kernels();
  for (const char* name : {"quint8_2x2", "quint8_7x9", "qint8_2x2", "qint8_7x9"}) {
    SCOPED_TRACE(name);
    const GoldenCase c = FindCase("channels_last.txt", name);
    const Tensor& x = c.tensor("x");
    struct Call {
      std::string key;
      std::function<absl::StatusOr<Node*>(Graph&, Node*)> add;
    };
    const std::vector<Call> calls = {
        {"adaptive_1",
         [](Graph& g, Node* in) {
           return g.AddCallFunction("torch.nn.functional.adaptive_avg_pool2d",
                                    {in, Argument::Int(1)});
         }},
        {"adaptive_2x3",
         [](Graph& g, Node* in) {
           return g.AddCallFunction("torch.nn.functional.adaptive_avg_pool2d",
                                    {in, Argument::Ints({2, 3})});
         }},
        {"avg_2_s1",
         [](Graph& g, Node* in) {
           return g.AddCallFunction("torch.nn.functional.avg_pool2d",
                                    {in, Argument::Int(2), Argument::Int(1)});
         }},
        {"avg_3_s2_p1_exclude_ceil",
         [](Graph& g, Node* in) {
           return g.AddCallFunction("torch.nn.functional.avg_pool2d",
                                    {in, Argument::Int(3), Argument::Int(2), Argument::Int(1),
                                     Argument::Bool(true), Argument::Bool(false)});
         }},
        {"mean_hw",
         [](Graph& g, Node* in) {
           return g.AddCallMethod("mean", {in, Argument::Ints({2, 3}), Argument::Bool(true)});
         }},
    };
    for (const Call& call : calls) {
      SCOPED_TRACE(call.key);
      GraphModule gm;
      auto y = RunOne(gm, *kernels, x, call.add);
      ASSERT_TRUE(y.ok()) << y.status();
      EXPECT_TRUE(MostlySameQuantized(y->as_tensor(), c.tensor(call.key)));
    }
    // nn.AdaptiveAvgPool2d takes the same path.
    auto m = std::make_unique<Module>("nn.AdaptiveAvgPool2d");
    m->SetAttribute("output_size", Argument::Ints({1, 1}));
    auto y = RunModule(std::move(m), *kernels, x);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(MostlySameQuantized(y->as_tensor(), c.tensor("adaptive_1")));
  }
}

TEST(RegisterQuantizedOpsTest, PassThroughOpsKeepValuesAndQParams) {
  auto kernels = Kernels();
  // x: [1, 2, 1, 3] quint8 (scale 0.5, zp 3) holding 0..5.
  auto x = Tensor::FromBytes(DType::kQUInt8, {1, 2, 1, 3}, std::string("\0\1\2\3\4\5", 6),
                             QuantParams::PerTensor(0.5, 3));
  ASSERT_TRUE(x.ok());
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("drop", std::make_unique<Module>("nnq.Dropout")).ok());
  Graph& g = gm.graph();
  Node* in = *g.AddPlaceholder("x");
  Node* drop = *g.AddCallModule("drop", {in});
  Node* perm = *g.AddCallMethod("permute", {drop, Argument::Int(0), Argument::Int(3),
                                            Argument::Int(2), Argument::Int(1)});
  Node* tr = *g.AddCallFunction("torch.transpose", {drop, Argument::Int(1), Argument::Int(3)});
  Node* sq = *g.AddCallMethod("squeeze", {drop, Argument::Int(2)});
  Node* unsq = *g.AddCallFunction("torch.unsqueeze", {sq, Argument::Int(0)});
  Node* chunks = *g.AddCallMethod("chunk", {drop, Argument::Int(2), Argument::Int(1)});
  Node* second = *g.AddCallFunction("operator.getitem", {chunks, Argument::Int(1)});
  Node* contig = *g.AddCallMethod("contiguous", {second});
  Node* flat = *g.AddCallFunction("torch.flatten", {contig, Argument::Int(1)});
  ASSERT_TRUE(g.SetOutput(Argument::Tuple({perm, tr, unsq, flat})).ok());
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  auto out = fuselage::Run(gm, {Value(*x)}, *kernels);
  ASSERT_TRUE(out.ok()) << out.status();
  auto ints = [](const Value& v) {
    std::vector<int64_t> r;
    for (int64_t i = 0; i < v.as_tensor().numel(); ++i) r.push_back(IntAt(v.as_tensor(), i));
    return r;
  };
  for (const Value& v : *out) {
    ASSERT_TRUE(v.is_tensor());
    EXPECT_EQ(v.as_tensor().dtype(), DType::kQUInt8);
    EXPECT_EQ(v.as_tensor().qparams(), QuantParams::PerTensor(0.5, 3));
  }
  // permute(0, 3, 2, 1): [1, 3, 1, 2] = 0 3 | 1 4 | 2 5; transpose(1, 3) the same.
  EXPECT_EQ((*out)[0].as_tensor().shape(), (Shape{1, 3, 1, 2}));
  EXPECT_EQ(ints((*out)[0]), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(ints((*out)[1]), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ((*out)[2].as_tensor().shape(), (Shape{1, 1, 2, 3}));
  EXPECT_EQ(ints((*out)[2]), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  // chunk(2, dim 1)[1] = the second channel, flattened from dim 1: [1, 3] = 3 4 5.
  EXPECT_EQ((*out)[3].as_tensor().shape(), (Shape{1, 3}));
  EXPECT_EQ(ints((*out)[3]), (std::vector<int64_t>{3, 4, 5}));
}

}  // namespace
}  // namespace fuselage
