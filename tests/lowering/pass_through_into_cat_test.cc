// Pass-through ops whose quantize has other parameters than their input, the shape
// inception_v3 and deeplabv3's ASPP give a reference graph: a cat's shared observer takes
// over the observer of a max-pool / interpolate / inner cat that feeds it (prepare shares
// observers as PyTorch 1.13 does), so the quantize after that op requantizes. PyTorch
// 1.13's convert drops that quantize (special_pattern_replacement): the op runs on its
// input's quantized tensor and keeps its parameters, and torch.cat requantizes its later
// inputs into the first one's. Lowered here the same way, checked against the reference
// graph run in float (exact where the op commutes with requantization: max-pool, cat)
// and against PyTorch 1.13's own quantized values (interpolate, where rounding twice
// differs from the reference graph by one step).
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "graph/graph_module.h"
#include "lowering/lower_to_native.h"
#include "lowering/lowering_rule.h"
#include "runtime/builtin_kernels.h"
#include "runtime/interpreter.h"

namespace fuselage {
namespace {

Node* Quantize(Graph& g, Node* x, double scale, int64_t zp, absl::string_view name = "") {
  return *g.AddCallFunction("torch.quantize_per_tensor",
                            {x, Argument::Float(scale), Argument::Int(zp),
                             Argument::Dtype(DType::kQUInt8)},
                            {}, name);
}
Node* Dequantize(Graph& g, Node* x) { return *g.AddCallMethod("dequantize", {x}); }

int Count(const Graph& g, absl::string_view target) {
  int n = 0;
  for (const Node* node : g.Nodes()) n += node->target().name() == target;
  return n;
}

std::vector<int64_t> StoredValues(const Tensor& t) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.data<uint8_t>()[i]);
  return v;
}

// Runs `gm` on float inputs; the single output, a quantized tensor.
Tensor RunToQuantized(const GraphModule& gm, std::vector<Tensor> inputs) {
  auto kernels = BuiltinKernels();
  EXPECT_TRUE(kernels.ok()) << kernels.status();
  std::vector<Value> values;
  for (Tensor& t : inputs) values.emplace_back(std::move(t));
  auto out = Run(gm, values, **kernels);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok() || out->size() != 1) return Tensor();
  return (*out)[0].as_tensor();
}

absl::StatusOr<LoweringReport> Lower(GraphModule& gm,
                                     const NativeLoweringOptions& options = {}) {
  LoweringRuleRegistry rules;
  const absl::Status registered = RegisterNativeLoweringRules(rules, options);
  if (!registered.ok()) return registered;
  return LowerToNative(gm, rules);
}

// A branch (a, quantized with the cat's parameters 0.1 / 0) and F.max_pool2d of the stem
// (x, 0.05 / 128), concatenated: inception_v3's InceptionB / InceptionD. Prepare gave the
// pool's quantize the cat's parameters. The graph's output is the cat, quantized.
struct PoolIntoCat {
  std::unique_ptr<GraphModule> gm = std::make_unique<GraphModule>();
  Node* a_q = nullptr;
  Node* x_q = nullptr;
  Node* pool = nullptr;
  Node* cat = nullptr;
};
PoolIntoCat BuildPoolIntoCat() {
  PoolIntoCat m;
  Graph& g = m.gm->graph();
  m.a_q = Quantize(g, *g.AddPlaceholder("a"), 0.1, 0, "a_q");
  m.x_q = Quantize(g, *g.AddPlaceholder("x"), 0.05, 128, "x_q");
  m.pool = *g.AddCallFunction("torch.nn.functional.max_pool2d",
                              {Dequantize(g, m.x_q), Argument::Int(2)}, {}, "max_pool2d");
  Node* pool_q = Quantize(g, m.pool, 0.1, 0);
  m.cat = *g.AddCallFunction(
      "torch.cat",
      {Argument::List({Dequantize(g, m.a_q), Dequantize(g, pool_q)}), Argument::Int(1)}, {},
      "cat");
  EXPECT_TRUE(g.SetOutput(Quantize(g, m.cat, 0.1, 0, "cat_q")).ok());
  EXPECT_TRUE(m.gm->Verify().ok()) << m.gm->Verify();
  return m;
}

const std::vector<float> kBranch = {0.3f, -0.7f, 1.9f, 0.06f};
const std::vector<float> kStem = {-1.0f, -0.3f, 0.2f,  0.9f, 1.4f,  -0.6f, 0.05f, 2.0f,
                                  0.7f,  0.33f, -1.2f, 0.0f, 0.15f, 1.1f,  -0.45f, 0.6f};

TEST(PassThroughIntoCatTest, MaxPoolKeepsItsInputsParametersAndCatRequantizesIt) {
  PoolIntoCat reference = BuildPoolIntoCat();
  const Tensor expected =
      RunToQuantized(*reference.gm, {Tensor::FromFloats({1, 1, 2, 2}, kBranch),
                                     Tensor::FromFloats({1, 1, 4, 4}, kStem)});

  PoolIntoCat m = BuildPoolIntoCat();
  auto report = Lower(*m.gm);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(m.gm->Verify().ok()) << m.gm->Verify();
  EXPECT_TRUE(report->unlowered.empty()) << report->ToString();
  EXPECT_EQ(report->lowered_per_rule.at("pass-through:torch.nn.functional.max_pool2d"), 1);
  EXPECT_EQ(report->lowered_per_rule.at("pass-through:torch.cat"), 1);
  // PyTorch's structure: the pool reads the stem's quantized tensor, the cat reads both
  // quantized tensors; only the two input quantizes are left, and no dequantize.
  const Graph& g = m.gm->graph();
  EXPECT_EQ(m.pool->arg(0), Argument(m.x_q));
  EXPECT_EQ(m.cat->arg(0), Argument::List({m.a_q, m.pool}));
  EXPECT_EQ(g.output()->arg(0), Argument(m.cat));
  EXPECT_EQ(Count(g, "torch.quantize_per_tensor"), 2);
  EXPECT_EQ(Count(g, "dequantize"), 0);
  EXPECT_EQ(KnownOutputQParams(*m.gm, m.pool), (OutputQParams{0.05, 128, DType::kQUInt8}));
  EXPECT_EQ(KnownOutputQParams(*m.gm, m.cat), (OutputQParams{0.1, 0, DType::kQUInt8}));
  ASSERT_EQ(report->quantizes_dropped_after_pass_through.size(), 1u) << report->ToString();
  EXPECT_EQ(report->quantizes_dropped_after_pass_through[0].node, "max_pool2d");
  EXPECT_EQ(report->quantizes_dropped_after_pass_through[0].dropped,
            (OutputQParams{0.1, 0, DType::kQUInt8}));

  // Max-pool commutes with requantization: the lowered graph gives the reference's values.
  const Tensor got = RunToQuantized(*m.gm, {Tensor::FromFloats({1, 1, 2, 2}, kBranch),
                                            Tensor::FromFloats({1, 1, 4, 4}, kStem)});
  EXPECT_EQ(got.qparams(), QuantParams::PerTensor(0.1, 0));
  EXPECT_EQ(got.shape(), (std::vector<int64_t>{1, 2, 2, 2}));
  EXPECT_EQ(StoredValues(got), StoredValues(expected));
  // By hand: the branch 0.3 -0.7 1.9 0.06 → 3 0 19 1 (-0.7 clamped at 0); the pool's
  // maxima 1.4 2.0 1.1 0.6 (on the stem's grid exactly) → 14 20 11 6.
  EXPECT_EQ(StoredValues(got), (std::vector<int64_t>{3, 0, 19, 1, 14, 20, 11, 6}));
}

// cat(a, cat(b, c)) with the outer cat's observer shared into the inner cat's output
// (inception_v3's InceptionE): the inner cat keeps b's parameters, the outer requantizes.
TEST(PassThroughIntoCatTest, InnerCatKeepsItsFirstInputsParameters) {
  auto build = [](std::unique_ptr<GraphModule>& gm, Node** inner) {
    gm = std::make_unique<GraphModule>();
    Graph& g = gm->graph();
    Node* a_q = Quantize(g, *g.AddPlaceholder("a"), 0.1, 0, "a_q");
    Node* b_q = Quantize(g, *g.AddPlaceholder("b"), 0.02, 10, "b_q");
    Node* c_q = Quantize(g, *g.AddPlaceholder("c"), 0.02, 10, "c_q");
    *inner = *g.AddCallFunction(
        "torch.cat", {Argument::List({Dequantize(g, b_q), Dequantize(g, c_q)}), Argument::Int(1)},
        {}, "inner");
    Node* inner_q = Quantize(g, *inner, 0.1, 0);
    Node* outer = *g.AddCallFunction(
        "torch.cat",
        {Argument::List({Dequantize(g, a_q), Dequantize(g, inner_q)}), Argument::Int(1)}, {},
        "outer");
    EXPECT_TRUE(g.SetOutput(Quantize(g, outer, 0.1, 0)).ok());
  };
  const std::vector<Tensor> inputs = {Tensor::FromFloats({1, 1, 2}, {0.3f, 2.0f}),
                                      Tensor::FromFloats({1, 1, 2}, {0.137f, -0.2f}),
                                      Tensor::FromFloats({1, 1, 2}, {0.961f, 0.071f})};
  std::unique_ptr<GraphModule> reference;
  Node* unused = nullptr;
  build(reference, &unused);
  const Tensor expected = RunToQuantized(*reference, inputs);

  std::unique_ptr<GraphModule> gm;
  Node* inner = nullptr;
  build(gm, &inner);
  auto report = Lower(*gm);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(gm->Verify().ok()) << gm->Verify();
  EXPECT_TRUE(report->unlowered.empty()) << report->ToString();
  EXPECT_EQ(report->lowered_per_rule.at("pass-through:torch.cat"), 2);
  EXPECT_EQ(KnownOutputQParams(*gm, inner), (OutputQParams{0.02, 10, DType::kQUInt8}));
  ASSERT_EQ(report->quantizes_dropped_after_pass_through.size(), 1u) << report->ToString();
  EXPECT_EQ(report->quantizes_dropped_after_pass_through[0].node, "inner");
  EXPECT_EQ(Count(gm->graph(), "dequantize"), 0);

  const Tensor got = RunToQuantized(*gm, inputs);
  EXPECT_EQ(got.qparams(), QuantParams::PerTensor(0.1, 0));
  EXPECT_EQ(StoredValues(got), StoredValues(expected));
  // By hand: a 0.3 2.0 → 3 20; b 0.137 → 0.14 on b's grid → 1, -0.2 → 0 (clamped);
  // c 0.961 → 0.96 → 10, 0.071 → 0.08 → 1.
  EXPECT_EQ(StoredValues(got), (std::vector<int64_t>{3, 20, 1, 0, 10, 1}));
}

// deeplabv3's ASPPPooling: F.interpolate (bilinear) as the cat's last input. PyTorch 1.13
// interpolates the quantized tensor at its own parameters, then cat requantizes; its
// values (torch.cat(aq, F.interpolate(xq, ...)).int_repr(), engine onednn) differ from the
// reference graph's by one step in places, and fuselage's must be PyTorch's.
TEST(PassThroughIntoCatTest, InterpolateIntoCatGivesPyTorchsValues) {
  auto gm = std::make_unique<GraphModule>();
  Graph& g = gm->graph();
  Node* a_q = Quantize(g, *g.AddPlaceholder("a"), 0.02, 60, "a_q");
  Node* x_q = Quantize(g, *g.AddPlaceholder("x"), 0.05, 128, "x_q");
  Kwargs kwargs;
  kwargs.emplace_back(Symbol::Intern("size"), Argument::Ints({4, 4}));
  kwargs.emplace_back(Symbol::Intern("mode"), Argument::String("bilinear"));
  kwargs.emplace_back(Symbol::Intern("align_corners"), Argument::Bool(false));
  Node* up = *g.AddCallFunction("torch.nn.functional.interpolate", {Dequantize(g, x_q)},
                                kwargs, "interpolate");
  Node* up_q = Quantize(g, up, 0.02, 60);
  Node* cat = *g.AddCallFunction(
      "torch.cat", {Argument::List({Dequantize(g, a_q), Dequantize(g, up_q)}), Argument::Int(1)},
      {}, "cat");
  ASSERT_TRUE(g.SetOutput(Quantize(g, cat, 0.02, 60)).ok());

  auto report = Lower(*gm);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(gm->Verify().ok()) << gm->Verify();
  EXPECT_TRUE(report->unlowered.empty()) << report->ToString();
  EXPECT_EQ(up->arg(0), Argument(x_q));
  EXPECT_EQ(cat->arg(0), Argument::List({a_q, up}));
  EXPECT_EQ(Count(g, "dequantize"), 0);

  const Tensor got = RunToQuantized(
      *gm, {Tensor::FromFloats({1, 1, 4, 4}, {0.3f, -0.7f, 1.9f, 0.05f, 1.2f, 0.4f, 1.0f, -0.1f,
                                              0.8f, -0.9f, 2.5f, 0.0f, -0.3f, 0.6f, 1.7f, -1.1f}),
            Tensor::FromFloats({1, 1, 2, 2}, {-1.0f, 0.9f, 1.4f, -0.45f})});
  EXPECT_EQ(got.qparams(), QuantParams::PerTensor(0.02, 60));
  // PyTorch 1.13's (the reference graph gives 10, 34, 81, 105, ...).
  const std::vector<int64_t> pytorch = {
      75,  25, 155, 62, 120, 80,  110, 55, 100, 15, 185, 60, 45,  90,  145, 5,
      10,  35, 80, 105, 40,  52,  75,  88, 100, 88, 65,  55, 130, 108, 60,  38};
  EXPECT_EQ(StoredValues(got), pytorch);
}

// torch.stack has no kernel that requantizes: items with other parameters than the first
// one's keep it a reference pattern, and the report says why.
TEST(PassThroughIntoCatTest, StackOfItemsWithOtherParametersStays) {
  GraphModule gm;
  Graph& g = gm.graph();
  Node* a_q = Quantize(g, *g.AddPlaceholder("a"), 0.1, 0, "a_q");
  Node* b_q = Quantize(g, *g.AddPlaceholder("b"), 0.05, 128, "b_q");
  Node* stack = *g.AddCallFunction(
      "torch.stack", {Argument::List({Dequantize(g, a_q), Dequantize(g, b_q)})}, {}, "stack");
  ASSERT_TRUE(g.SetOutput(Quantize(g, stack, 0.1, 0)).ok());
  const size_t before = g.size();
  auto report = Lower(gm);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->total_lowered(), 0);
  ASSERT_EQ(report->unlowered.size(), 1u) << report->ToString();
  EXPECT_EQ(report->unlowered[0].node, "stack");
  EXPECT_NE(report->unlowered[0].reason.find("does not requantize its inputs"),
            std::string::npos)
      << report->ToString();
  EXPECT_TRUE(report->quantizes_dropped_after_pass_through.empty());
  EXPECT_EQ(g.size(), before);
}

// x.flatten() (the method) is no special pattern of PyTorch 1.13's lowering: after it,
// as after the avg-pool of regnet_y_400mf's head, a quantize with other parameters (the
// next op's input observer, prepare having kept the flatten float) stays, as in PyTorch's
// converted model; one with the input's parameters goes.
TEST(PassThroughIntoCatTest, MethodFlattenKeepsARequantizingQuantize) {
  for (const double scale : {0.05, 0.04}) {
    SCOPED_TRACE(scale);
    GraphModule gm;
    Graph& g = gm.graph();
    Node* x_q = Quantize(g, *g.AddPlaceholder("x"), 0.05, 128, "x_q");
    Node* flat = *g.AddCallMethod("flatten", {Dequantize(g, x_q), Argument::Int(1)});
    ASSERT_TRUE(g.SetOutput(Dequantize(g, Quantize(g, flat, scale, 128))).ok());
    auto report = Lower(gm);
    ASSERT_TRUE(report.ok()) << report.status();
    ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
    EXPECT_TRUE(report->quantizes_dropped_after_pass_through.empty());
    if (scale == 0.05) {
      EXPECT_EQ(report->total_lowered(), 1) << report->ToString();
      EXPECT_EQ(flat->arg(0), Argument(x_q));
    } else {
      EXPECT_EQ(report->total_lowered(), 0) << report->ToString();
      ASSERT_EQ(report->unlowered.size(), 1u) << report->ToString();
      EXPECT_NE(report->unlowered[0].reason.find("PyTorch 1.13 does not lower the op"),
                std::string::npos)
          << report->ToString();
      EXPECT_EQ(Count(g, "dequantize"), 2);
    }
  }
}

// An average pool observed apart from its input (ONNX Runtime's GlobalAveragePool:
// QLinearGlobalAveragePool has an output scale of its own). PyTorch 1.13's lowering drops
// its quantize; with drop_requantizing_quantizes false the pattern stays dequantize ->
// pool -> quantize, its values the reference graph's, and a quantize with the input's
// parameters still goes.
TEST(PassThroughIntoCatTest, KeptRequantizationLeavesAPoolWithItsOwnOutputParameters) {
  NativeLoweringOptions keep;
  keep.drop_requantizing_quantizes = false;
  for (const double scale : {0.01, 0.05}) {
    SCOPED_TRACE(scale);
    auto build = [scale](GraphModule& gm) {
      Graph& g = gm.graph();
      Node* x_q = Quantize(g, *g.AddPlaceholder("x"), 0.05, 128, "x_q");
      Node* pool = *g.AddCallFunction("torch.nn.functional.adaptive_avg_pool2d",
                                      {Dequantize(g, x_q), Argument::Int(1)}, {}, "pool");
      EXPECT_TRUE(g.SetOutput(Quantize(g, pool, scale, 128, "pool_q")).ok());
      return std::make_pair(x_q, pool);
    };
    GraphModule reference;
    build(reference);
    const Tensor expected = RunToQuantized(reference, {Tensor::FromFloats({1, 1, 4, 4}, kStem)});

    GraphModule gm;
    const auto [x_q, pool] = build(gm);
    auto report = Lower(gm, keep);
    ASSERT_TRUE(report.ok()) << report.status();
    ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
    EXPECT_TRUE(report->quantizes_dropped_after_pass_through.empty()) << report->ToString();
    if (scale == 0.05) {
      EXPECT_EQ(report->total_lowered(), 1) << report->ToString();
      EXPECT_EQ(pool->arg(0), Argument(x_q));
      continue;
    }
    EXPECT_EQ(report->total_lowered(), 0) << report->ToString();
    ASSERT_EQ(report->unlowered.size(), 1u) << report->ToString();
    EXPECT_EQ(report->unlowered[0].node, "pool");
    EXPECT_EQ(Count(gm.graph(), "dequantize"), 1);
    EXPECT_EQ(KnownOutputQParams(gm, gm.graph().output()->arg(0).as_node()),
              (OutputQParams{0.01, 128, DType::kQUInt8}));
    const Tensor got = RunToQuantized(gm, {Tensor::FromFloats({1, 1, 4, 4}, kStem)});
    EXPECT_EQ(StoredValues(got), StoredValues(expected));

    // The default (PyTorch 1.13's) drops it: the pool keeps its input's parameters.
    GraphModule as_pytorch;
    build(as_pytorch);
    auto dropped = Lower(as_pytorch);
    ASSERT_TRUE(dropped.ok()) << dropped.status();
    EXPECT_EQ(dropped->total_lowered(), 1) << dropped->ToString();
    ASSERT_EQ(dropped->quantizes_dropped_after_pass_through.size(), 1u);
    EXPECT_EQ(dropped->quantizes_dropped_after_pass_through[0].kept,
              (OutputQParams{0.05, 128, DType::kQUInt8}));
  }
}

// A quantize that changes the dtype is no parameter change the op can pass on: the
// pattern stays, with the reason.
TEST(PassThroughIntoCatTest, QuantizeToAnotherDtypeKeepsThePatternFloat) {
  GraphModule gm;
  Graph& g = gm.graph();
  Node* x_q = Quantize(g, *g.AddPlaceholder("x"), 0.05, 128, "x_q");
  Node* pool = *g.AddCallFunction("torch.nn.functional.max_pool2d",
                                  {Dequantize(g, x_q), Argument::Int(2)}, {}, "max_pool2d");
  ASSERT_TRUE(g.SetOutput(*g.AddCallFunction("torch.quantize_per_tensor",
                                             {pool, Argument::Float(0.05), Argument::Int(0),
                                              Argument::Dtype(DType::kQInt8)}))
                  .ok());
  const size_t before = g.size();
  auto report = Lower(gm);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->total_lowered(), 0);
  ASSERT_EQ(report->unlowered.size(), 1u) << report->ToString();
  EXPECT_NE(report->unlowered[0].reason.find("the op keeps its input's dtype"),
            std::string::npos)
      << report->ToString();
  EXPECT_EQ(g.size(), before);
}

// `x.shape` of a quantized op's output reads the quantized tensor, as PyTorch 1.13's
// _lower_getattr_tensor_metadta_op makes it (deeplabv3's ASPPPooling takes its
// interpolate's size so): the dequantize that only fed it goes. A shape read of a float
// tensor stays as it is.
TEST(PassThroughIntoCatTest, ShapeReadOfADequantizeReadsTheQuantizedTensor) {
  GraphModule gm;
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* float_shape = *g.AddCallFunction("builtins.getattr", {x, Argument::String("shape")});
  Node* x_q = Quantize(g, x, 0.05, 128, "x_q");
  Node* shape =
      *g.AddCallFunction("builtins.getattr", {Dequantize(g, x_q), Argument::String("shape")});
  ASSERT_TRUE(g.SetOutput(Argument::Tuple({float_shape, shape, Dequantize(g, x_q)})).ok());
  auto report = Lower(gm);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(gm.Verify().ok()) << gm.Verify();
  EXPECT_EQ(report->shape_reads_of_dequantize_moved, 1);
  EXPECT_EQ(shape->arg(0), Argument(x_q));
  EXPECT_EQ(float_shape->arg(0), Argument(x));
  EXPECT_EQ(Count(g, "dequantize"), 1);  // the output's
  EXPECT_NE(report->ToString().find("shape reads moved from a dequantize"), std::string::npos)
      << report->ToString();
}

}  // namespace
}  // namespace fuselage
