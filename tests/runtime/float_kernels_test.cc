// Float kernels as the interpreter calls them: argument binding (positional, keyword,
// scalars), shape arithmetic, fused modules, and bad input that must be an error naming
// the node. Numerics against PyTorch are in float_golden_test.
#include "runtime/float_kernels.h"

#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "graph/graph_module.h"
#include "runtime/builtin_kernels.h"
#include "runtime/interpreter.h"

namespace fuselage {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<float> Floats(const Value& v) {
  const Tensor& t = v.as_tensor();
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

class FloatKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto k = BuiltinKernels();
    ASSERT_TRUE(k.ok()) << k.status();
    kernels_ = *std::move(k);
  }
  absl::StatusOr<Value> RunGraph(const GraphModule& gm, std::vector<Value> inputs) {
    const absl::Status verified = gm.Verify();
    if (!verified.ok()) return verified;
    return RunStructured(gm, std::move(inputs), *kernels_);
  }
  std::unique_ptr<KernelRegistry> kernels_;
};

TEST_F(FloatKernelsTest, ViewWithSizeArithmetic) {
  // y = x.view(x.size(0) * 2, -1): size() yields an int, int * int stays an int.
  GraphModule gm;
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* n = *g.AddCallMethod("size", {x, Argument::Int(0)});
  Node* doubled = *g.AddCallFunction("operator.mul", {n, Argument::Int(2)});
  Node* view = *g.AddCallMethod("view", {x, doubled, Argument::Int(-1)});
  ASSERT_TRUE(g.SetOutput(view).ok());
  std::vector<float> data(24);
  for (int i = 0; i < 24; ++i) data[i] = i;
  auto out = RunGraph(gm, {Tensor::FromFloats({2, 3, 4}, data)});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->as_tensor().shape(), (std::vector<int64_t>{4, 6}));
}

TEST_F(FloatKernelsTest, ClampLikeOpsFollowPyTorch) {
  // Expected values by hand, from torch.clamp's definition min(max(x, lo), hi): a NaN
  // stays NaN; min > max gives max everywhere; one bound alone clamps one side.
  GraphModule gm;
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* both = *g.AddCallFunction("torch.clamp", {x, Argument::Float(-1.0), Argument::Float(2.0)});
  Node* only_min = *g.AddCallMethod("clamp", {x}, {{Symbol::Intern("min"), Argument::Float(0.5)}});
  Node* crossed = *g.AddCallFunction("torch.clamp", {x, Argument::Float(3.0), Argument::Float(1.0)});
  Node* hardtanh_ = *g.AddCallFunction("torch.nn.functional.hardtanh_", {x});
  ASSERT_TRUE(g.SetOutput(Argument::Tuple({both, only_min, crossed, hardtanh_})).ok());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto out = RunGraph(gm, {Tensor::FromFloats({5}, {-3.0f, -0.25f, 1.5f, 7.0f, nan})});
  ASSERT_TRUE(out.ok()) << out.status();
  using ::testing::IsNan;
  using ::testing::FloatEq;
  EXPECT_THAT(Floats(out->items()[0]),
              ElementsAre(FloatEq(-1.0f), FloatEq(-0.25f), FloatEq(1.5f), FloatEq(2.0f), IsNan()));
  EXPECT_THAT(Floats(out->items()[1]),
              ElementsAre(FloatEq(0.5f), FloatEq(0.5f), FloatEq(1.5f), FloatEq(7.0f), IsNan()));
  EXPECT_THAT(Floats(out->items()[2]),
              ElementsAre(FloatEq(1.0f), FloatEq(1.0f), FloatEq(1.0f), FloatEq(1.0f), IsNan()));
  EXPECT_THAT(Floats(out->items()[3]),
              ElementsAre(FloatEq(-1.0f), FloatEq(-0.25f), FloatEq(1.0f), FloatEq(1.0f), IsNan()));
}

TEST_F(FloatKernelsTest, ClampWithoutBoundsIsAnError) {
  GraphModule gm;
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* clamp = *g.AddCallFunction("torch.clamp", {x, Argument::None()});
  ASSERT_TRUE(g.SetOutput(clamp).ok());
  auto out = RunGraph(gm, {Tensor::FromFloats({1}, {1.0f})});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("at least one of 'min' or 'max'"));
  EXPECT_THAT(out.status().message(), HasSubstr("clamp"));
}

TEST_F(FloatKernelsTest, ScalarArithmeticFollowsPython) {
  GraphModule gm;
  Graph& g = gm.graph();
  Node* add_ints = *g.AddCallFunction("operator.add", {Argument::Int(2), Argument::Int(3)});
  Node* add_mixed = *g.AddCallFunction("operator.add", {Argument::Int(2), Argument::Float(0.5)});
  Node* alpha = *g.AddCallFunction("torch.add", {Argument::Int(1), Argument::Int(2)},
                                   {{Symbol::Intern("alpha"), Argument::Int(10)}});
  ASSERT_TRUE(g.SetOutput(Argument::Tuple({add_ints, add_mixed, alpha})).ok());
  auto out = RunGraph(gm, {});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->items()[0].is_int());
  EXPECT_EQ(out->items()[0].as_int(), 5);
  EXPECT_TRUE(out->items()[1].is_float());
  EXPECT_EQ(out->items()[1].as_float(), 2.5);
  EXPECT_EQ(out->items()[2].as_int(), 21);
}

TEST_F(FloatKernelsTest, TensorAddWithAlphaOnScalarOnEitherSide) {
  GraphModule gm;
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  // torch.add(x, 2, alpha=3) = x + 6; torch.add(1, x, alpha=2) = 1 + 2x.
  Node* right = *g.AddCallFunction("torch.add", {x, Argument::Int(2)},
                                   {{Symbol::Intern("alpha"), Argument::Int(3)}});
  Node* left = *g.AddCallFunction("torch.add", {Argument::Int(1), x},
                                  {{Symbol::Intern("alpha"), Argument::Float(2)}});
  ASSERT_TRUE(g.SetOutput(Argument::Tuple({right, left})).ok());
  auto out = RunGraph(gm, {Tensor::FromFloats({2}, {1, -1})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(Floats(out->items()[0]), ElementsAre(7, 5));
  EXPECT_THAT(Floats(out->items()[1]), ElementsAre(3, -1));
}

TEST_F(FloatKernelsTest, GetItemOnTuplesAndItsErrors) {
  GraphModule gm;
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* size = *g.AddCallMethod("size", {x});
  Node* last = *g.AddCallFunction("operator.getitem", {size, Argument::Int(-1)});
  ASSERT_TRUE(g.SetOutput(last).ok());
  auto out = RunGraph(gm, {Tensor::FromFloats({2, 5}, std::vector<float>(10))});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->as_int(), 5);

  GraphModule bad;
  Node* y = *bad.graph().AddPlaceholder("y");
  Node* size2 = *bad.graph().AddCallMethod("size", {y});
  Node* oob = *bad.graph().AddCallFunction("operator.getitem", {size2, Argument::Int(2)}, {}, "oob");
  ASSERT_TRUE(bad.graph().SetOutput(oob).ok());
  auto error = RunGraph(bad, {Tensor::FromFloats({2, 5}, std::vector<float>(10))});
  EXPECT_EQ(error.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(error.status().message(), HasSubstr("node 'oob'"));
  EXPECT_THAT(error.status().message(), HasSubstr("index 2 out of range for a tuple of 2"));
}

TEST_F(FloatKernelsTest, QuantizedTensorIntoFloatOpIsAnErrorButShapeOpsTakeIt) {
  auto q = Tensor::Zeros(DType::kQUInt8, {1, 2, 2, 2}, QuantParams::PerTensor(0.5, 3));
  ASSERT_TRUE(q.ok());
  // nn.Hardswish has no quantized overload (nnq.Hardswish is the quantized module).
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("act", std::make_unique<Module>("nn.Hardswish")).ok());
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* act = *gm.graph().AddCallModule("act", {x});
  ASSERT_TRUE(gm.graph().SetOutput(act).ok());
  auto error = RunGraph(gm, {*q});
  EXPECT_EQ(error.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(error.status().message(), HasSubstr("node 'act'"));
  EXPECT_THAT(error.status().message(), HasSubstr("torch.quint8"));

  GraphModule shape_gm;
  Node* y = *shape_gm.graph().AddPlaceholder("y");
  Node* flat = *shape_gm.graph().AddCallFunction("torch.flatten", {y, Argument::Int(1)});
  ASSERT_TRUE(shape_gm.graph().SetOutput(flat).ok());
  auto out = RunGraph(shape_gm, {*q});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->as_tensor().dtype(), DType::kQUInt8);
  EXPECT_EQ(out->as_tensor().shape(), (std::vector<int64_t>{1, 8}));
  EXPECT_EQ(out->as_tensor().qparams(), QuantParams::PerTensor(0.5, 3));
}

std::unique_ptr<Module> Conv1x1(float w) {
  auto conv = std::make_unique<Module>("nn.Conv2d");
  conv->SetTensor("weight", Tensor::FromFloats({1, 1, 1, 1}, {w}));
  return conv;
}

TEST_F(FloatKernelsTest, FusedModulesRunTheirChildren) {
  // ConvReLU2d(conv w=-2, relu) on [1, -3] = relu([-2, 6]) = [0, 6].
  auto fused = std::make_unique<Module>("nni.ConvReLU2d");
  fused->SetChild("0", Conv1x1(-2));
  fused->SetChild("1", std::make_unique<Module>("nn.ReLU"));
  // ConvAddReLU2d(conv w=3) on ([1, -3], [1, 1]) = relu([4, -8]) = [4, 0].
  auto add_relu = std::make_unique<Module>("nni.ConvAddReLU2d");
  add_relu->SetChild("0", Conv1x1(3));
  add_relu->SetChild("1", std::make_unique<Module>("nn.ReLU"));
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("cr", std::move(fused)).ok());
  ASSERT_TRUE(gm.SetModule("car", std::move(add_relu)).ok());
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* extra = *gm.graph().AddPlaceholder("extra");
  Node* cr = *gm.graph().AddCallModule("cr", {x});
  Node* car = *gm.graph().AddCallModule("car", {x, extra});
  ASSERT_TRUE(gm.graph().SetOutput(Argument::Tuple({cr, car})).ok());
  auto out = RunGraph(gm, {Tensor::FromFloats({1, 1, 1, 2}, {1, -3}),
                           Tensor::FromFloats({1, 1, 1, 2}, {1, 1})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(Floats(out->items()[0]), ElementsAre(0, 6));
  EXPECT_THAT(Floats(out->items()[1]), ElementsAre(4, 0));

  // The residual must match the conv output's shape.
  auto mismatch = RunGraph(gm, {Tensor::FromFloats({1, 1, 1, 2}, {1, -3}),
                                Tensor::FromFloats({1, 1, 2, 1}, {1, 1})});
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mismatch.status().message(), HasSubstr("node 'car'"));
  EXPECT_THAT(mismatch.status().message(), HasSubstr("differ in shape"));
}

// The QAT forms of conv-add(-relu) keep their batch norm (fuselage.fusers with is_qat):
// (x, extra) -> [relu](bn(conv(x)) + extra).
TEST_F(FloatKernelsTest, ConvBnAddModulesRunTheirBatchNorm) {
  auto batch_norm = [] {
    // (y - 1) / sqrt(4) * 2 + 0.5 = y - 0.5
    auto bn = std::make_unique<Module>("nn.BatchNorm2d");
    bn->SetTensor("running_mean", Tensor::FromFloats({1}, {1}));
    bn->SetTensor("running_var", Tensor::FromFloats({1}, {4}));
    bn->SetTensor("weight", Tensor::FromFloats({1}, {2}));
    bn->SetTensor("bias", Tensor::FromFloats({1}, {0.5}));
    bn->SetAttribute("eps", Argument::Float(0.0));
    return bn;
  };
  auto add_relu = std::make_unique<Module>("nni.ConvBnAddReLU2d");
  add_relu->SetChild("0", Conv1x1(3));
  add_relu->SetChild("1", batch_norm());
  add_relu->SetChild("2", std::make_unique<Module>("nn.ReLU"));
  auto add = std::make_unique<Module>("nni.ConvBnAdd2d");
  add->SetChild("0", Conv1x1(3));
  add->SetChild("1", batch_norm());
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("cbar", std::move(add_relu)).ok());
  ASSERT_TRUE(gm.SetModule("cba", std::move(add)).ok());
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* extra = *gm.graph().AddPlaceholder("extra");
  Node* cbar = *gm.graph().AddCallModule("cbar", {x, extra});
  Node* cba = *gm.graph().AddCallModule("cba", {x, extra});
  ASSERT_TRUE(gm.graph().SetOutput(Argument::Tuple({cbar, cba})).ok());
  // conv: [3, -9]; bn: [2.5, -9.5]; + [1, 1]: [3.5, -8.5]; relu: [3.5, 0].
  auto out = RunGraph(gm, {Tensor::FromFloats({1, 1, 1, 2}, {1, -3}),
                           Tensor::FromFloats({1, 1, 1, 2}, {1, 1})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(Floats(out->items()[0]), ElementsAre(3.5, 0));
  EXPECT_THAT(Floats(out->items()[1]), ElementsAre(3.5, -8.5));
}

TEST_F(FloatKernelsTest, MalformedFusedModulesAreErrors) {
  auto no_parts = std::make_unique<Module>("nni.LinearReLU");
  auto wrong_last = std::make_unique<Module>("nni.ConvReLU2d");
  wrong_last->SetChild("0", Conv1x1(1));
  wrong_last->SetChild("1", std::make_unique<Module>("nn.Identity"));
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("a", std::move(no_parts)).ok());
  ASSERT_TRUE(gm.SetModule("b", std::move(wrong_last)).ok());
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* a = *gm.graph().AddCallModule("a", {x});
  ASSERT_TRUE(gm.graph().SetOutput(a).ok());
  auto error = RunGraph(gm, {Tensor::FromFloats({1, 1, 1, 1}, {1})});
  // Refused before anything runs (Verify checks a fused module's parts against its
  // schema), with the count expected.
  EXPECT_THAT(error.status().message(), HasSubstr("has 0 children; a nni.LinearReLU holds 2"));

  GraphModule gm2;
  ASSERT_TRUE(gm2.SetModule("b", gm.root().FindChild("b")->Clone()).ok());
  Node* y = *gm2.graph().AddPlaceholder("y");
  Node* b = *gm2.graph().AddCallModule("b", {y});
  ASSERT_TRUE(gm2.graph().SetOutput(b).ok());
  auto error2 = RunGraph(gm2, {Tensor::FromFloats({1, 1, 1, 1}, {1})});
  EXPECT_THAT(error2.status().message(), HasSubstr("child '1' is a nn.Identity; expected nn.ReLU"));
}

// A part the fused kernel does not run is refused, not skipped: a ConvAddReLU2d holding
// (conv, bn, relu), as a WRAP_IN_SEQUENCE fuser of conv-bn-add-relu would build it, would
// otherwise run conv + add + relu with the batch norm silently left out.
TEST_F(FloatKernelsTest, AFusedModuleWithAPartItsKernelWouldSkipIsRefused) {
  auto fused = std::make_unique<Module>("nni.ConvAddReLU2d");
  fused->SetChild("0", Conv1x1(3));
  fused->SetChild("1", std::make_unique<Module>("nn.BatchNorm2d"));
  fused->SetChild("2", std::make_unique<Module>("nn.ReLU"));
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("car", std::move(fused)).ok());
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* extra = *gm.graph().AddPlaceholder("extra");
  Node* car = *gm.graph().AddCallModule("car", {x, extra});
  ASSERT_TRUE(gm.graph().SetOutput(car).ok());
  const absl::Status verified = gm.Verify();
  EXPECT_EQ(verified.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(verified.message(), HasSubstr("module 'car' (nni.ConvAddReLU2d): has 3 children"));
}

TEST_F(FloatKernelsTest, UnsupportedOptionsAreUnimplemented) {
  GraphModule gm;
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* w = *gm.graph().AddPlaceholder("w");
  Node* conv = *gm.graph().AddCallFunction("torch.nn.functional.conv2d", {x, w},
                                           {{Symbol::Intern("padding"), Argument::String("same")}});
  ASSERT_TRUE(gm.graph().SetOutput(conv).ok());
  auto out = RunGraph(gm, {Tensor::FromFloats({1, 1, 2, 2}, {1, 2, 3, 4}),
                           Tensor::FromFloats({1, 1, 1, 1}, {1})});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(out.status().message(), HasSubstr("padding='same'"));
}

TEST_F(FloatKernelsTest, FunctionalDropoutRunsOnlyInEvalMode) {
  for (bool training : {false, true}) {
    GraphModule gm;
    Node* x = *gm.graph().AddPlaceholder("x");
    Node* drop = *gm.graph().AddCallFunction(
        "torch.nn.functional.dropout", {x, Argument::Float(0.5)},
        {{Symbol::Intern("training"), Argument::Bool(training)}});
    ASSERT_TRUE(gm.graph().SetOutput(drop).ok());
    auto out = RunGraph(gm, {Tensor::FromFloats({2}, {1, -2})});
    if (training) {
      EXPECT_EQ(out.status().code(), absl::StatusCode::kUnimplemented);
    } else {
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_THAT(Floats(*out), ElementsAre(1, -2));
    }
  }
}

TEST_F(FloatKernelsTest, WrongArgKindsAreErrors) {
  GraphModule gm;
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* cat = *gm.graph().AddCallFunction("torch.cat", {x}, {}, "bad_cat");
  ASSERT_TRUE(gm.graph().SetOutput(cat).ok());
  auto out = RunGraph(gm, {Tensor::FromFloats({1}, {1})});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("node 'bad_cat'"));
  EXPECT_THAT(out.status().message(), HasSubstr("expected a list of Tensors"));

  GraphModule gm2;
  Node* y = *gm2.graph().AddPlaceholder("y");
  Node* add = *gm2.graph().AddCallFunction("operator.add", {y, Argument::String("s")});
  ASSERT_TRUE(gm2.graph().SetOutput(add).ok());
  auto out2 = RunGraph(gm2, {Tensor::FromFloats({1}, {1})});
  EXPECT_EQ(out2.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out2.status().message(), HasSubstr("expected a Tensor or a number"));
}

TEST_F(FloatKernelsTest, ModuleMissingItsWeightIsAnError) {
  // Verify() would reject this graph, so run it without: the kernel must still not crash.
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("fc", std::make_unique<Module>("nn.Linear")).ok());
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* fc = *gm.graph().AddCallModule("fc", {x});
  ASSERT_TRUE(gm.graph().SetOutput(fc).ok());
  auto out = RunStructured(gm, {Tensor::FromFloats({1, 2}, {1, 2})}, *kernels_);
  EXPECT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("node 'fc'"));
  EXPECT_THAT(out.status().message(), HasSubstr("weight"));
}

TEST_F(FloatKernelsTest, ChunkPiecesFollowPyTorch) {
  // torch.chunk(x, 3) of 5 rows: pieces of ceil(5 / 3) = 2: sizes 2, 2, 1; of 4 rows:
  // pieces of 2, so only 2 pieces come out. getitem reads one.
  GraphModule gm;
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* chunks = *g.AddCallFunction("torch.chunk", {x, Argument::Int(3)});
  Node* last = *g.AddCallFunction("operator.getitem", {chunks, Argument::Int(-1)});
  ASSERT_TRUE(g.SetOutput(Argument::Tuple({chunks, last})).ok());
  auto out = RunGraph(gm, {Tensor::FromFloats({5}, {0, 1, 2, 3, 4})});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->items()[0].items().size(), 3u);
  EXPECT_THAT(Floats(out->items()[0].items()[1]), ElementsAre(2, 3));
  EXPECT_THAT(Floats(out->items()[1]), ElementsAre(4));
  out = RunGraph(gm, {Tensor::FromFloats({4}, {0, 1, 2, 3})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->items()[0].items().size(), 2u);
}

TEST_F(FloatKernelsTest, IntArithmeticStaysIntExceptTrueDivision) {
  // Shape arithmetic: 7 - 2 = 5 (int), 7 / 2 = 3.5 (float, as Python's operator.truediv).
  GraphModule gm;
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* n = *g.AddCallMethod("size", {x, Argument::Int(0)});
  Node* diff = *g.AddCallFunction("operator.sub", {n, Argument::Int(2)});
  Node* quotient = *g.AddCallFunction("operator.truediv", {n, Argument::Int(2)});
  ASSERT_TRUE(g.SetOutput(Argument::Tuple({diff, quotient})).ok());
  std::vector<float> data(7, 1.0f);
  auto out = RunGraph(gm, {Tensor::FromFloats({7}, data)});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(out->items()[0].is_int());
  EXPECT_EQ(out->items()[0].as_int(), 5);
  ASSERT_TRUE(out->items()[1].is_float());
  EXPECT_DOUBLE_EQ(out->items()[1].as_float(), 3.5);
}

TEST_F(FloatKernelsTest, TrainingModeOpsAndBadArgsAreErrorsNamingTheNode) {
  // Stochastic depth with training=True would drop rows at random: refused, not faked.
  GraphModule gm;
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* sd = *g.AddCallFunction(
      "torchvision.ops.stochastic_depth.stochastic_depth",
      {x, Argument::Float(0.2), Argument::String("row"), Argument::Bool(true)});
  ASSERT_TRUE(g.SetOutput(sd).ok());
  auto out = RunGraph(gm, {Tensor::FromFloats({2}, {1, 2})});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(out.status().message(), HasSubstr("training=True"));
  EXPECT_THAT(out.status().message(), HasSubstr(absl::StrCat("node '", sd->name(), "'")));

  GraphModule gm2;
  Graph& g2 = gm2.graph();
  Node* y = *g2.AddPlaceholder("y");
  Node* gelu = *g2.AddCallFunction("torch.nn.functional.gelu", {y},
                                   {{Symbol::Intern("approximate"), Argument::String("fast")}});
  ASSERT_TRUE(g2.SetOutput(gelu).ok());
  out = RunGraph(gm2, {Tensor::FromFloats({2}, {1, 2})});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("gelu"));
  EXPECT_THAT(out.status().message(), HasSubstr("'fast'"));

  // Interpolate needs exactly one of size and scale_factor.
  GraphModule gm3;
  Graph& g3 = gm3.graph();
  Node* z = *g3.AddPlaceholder("z");
  Node* up = *g3.AddCallFunction("torch.nn.functional.interpolate", {z});
  ASSERT_TRUE(g3.SetOutput(up).ok());
  out = RunGraph(gm3, {Tensor::FromFloats({1, 1, 1, 2}, {1, 2})});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("exactly one of size and scale_factor"));
}

TEST_F(FloatKernelsTest, GroupNormModuleIsCheckedByVerifyAndRuns) {
  // nn.GroupNorm(2, 4) without affine on one element per channel: groups {1, 3} and
  // {5, 9} normalize to [-1, 1, -1, 1] (eps 0). num_channels 5 with 2 groups is refused
  // by Verify, naming the field, before anything runs.
  auto norm = std::make_unique<Module>("nn.GroupNorm");
  norm->SetAttribute("num_groups", Argument::Int(2));
  norm->SetAttribute("num_channels", Argument::Int(4));
  norm->SetAttribute("eps", Argument::Float(0.0));
  GraphModule gm;
  ASSERT_TRUE(gm.SetModule("gn", std::move(norm)).ok());
  Node* x = *gm.graph().AddPlaceholder("x");
  Node* gn = *gm.graph().AddCallModule("gn", {x});
  ASSERT_TRUE(gm.graph().SetOutput(gn).ok());
  auto out = RunGraph(gm, {Tensor::FromFloats({1, 4, 1}, {1, 3, 5, 9})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(Floats(*out), ElementsAre(-1, 1, -1, 1));
  gm.FindModule("gn")->SetAttribute("num_channels", Argument::Int(5));
  const absl::Status verified = gm.Verify();
  EXPECT_EQ(verified.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(verified.message(), HasSubstr("num_channels"));
  EXPECT_THAT(verified.message(), HasSubstr("multiple of num_groups (2)"));
}

TEST_F(FloatKernelsTest, ShapeOpsKeepThePerChannelAxisOnItsDim) {
  // A [3, 2] tensor quantized per channel on axis 0: unsqueeze(0) moves the axis to 1,
  // then permute(0, 2, 1) to 2, and squeeze() (dropping dim 0) back to 1.
  auto q = Tensor::Zeros(DType::kQUInt8, {3, 2},
                         QuantParams::PerChannel({0.1, 0.2, 0.3}, {0, 0, 0}, 0));
  ASSERT_TRUE(q.ok()) << q.status();
  GraphModule gm;
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* u = *g.AddCallMethod("unsqueeze", {x, Argument::Int(0)});
  Node* p = *g.AddCallMethod("permute", {u, Argument::Int(0), Argument::Int(2), Argument::Int(1)});
  Node* s = *g.AddCallFunction("torch.squeeze", {p});
  ASSERT_TRUE(g.SetOutput(Argument::Tuple({u, p, s})).ok());
  auto out = RunGraph(gm, {*q});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->items()[0].as_tensor().qparams().axis, 1);
  EXPECT_EQ(out->items()[1].as_tensor().qparams().axis, 2);
  EXPECT_EQ(out->items()[1].as_tensor().shape(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(out->items()[2].as_tensor().qparams().axis, 1);
  EXPECT_EQ(out->items()[2].as_tensor().shape(), (std::vector<int64_t>{2, 3}));
}

// x.expand(2, -1, 3) of a [2, 1] tensor: a new leading dim, the first kept, the size-1
// one repeated, as torch.Tensor.expand gives; sizes that do not fit are named.
TEST_F(FloatKernelsTest, ExpandRepeatsSizeOneAndNewDims) {
  GraphModule gm;
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* e = *g.AddCallMethod("expand", {x, Argument::Int(2), Argument::Int(-1), Argument::Int(3)});
  ASSERT_TRUE(g.SetOutput(e).ok());
  auto out = RunGraph(gm, {Tensor::FromFloats({2, 1}, {1.0f, 2.0f})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->as_tensor().shape(), (std::vector<int64_t>{2, 2, 3}));
  EXPECT_EQ(Floats(*out), (std::vector<float>{1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2}));

  GraphModule bad;
  Node* y = *bad.graph().AddPlaceholder("x");
  ASSERT_TRUE(bad.graph().SetOutput(*bad.graph().AddCallMethod("expand", {y, Argument::Ints({3, 3})})).ok());
  auto error = RunGraph(bad, {Tensor::FromFloats({2, 1}, {1.0f, 2.0f})});
  ASSERT_FALSE(error.ok());
  EXPECT_NE(error.status().message().find("expand: size 3 at dim 0 for a dim of 2"), std::string::npos)
      << error.status();
}

}  // namespace
}  // namespace fuselage
