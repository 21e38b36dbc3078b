// Channels-last activations (runtime/layout.h): the byte moves against hand-written
// orders; the interpreter's dispatch (channels-last overloads get the layout, every other
// kernel, the observer and the outputs get row-major tensors); and a quantized CNN block
// run with and without the layout, on both engines, giving the same bytes at every node.
#include "runtime/layout.h"

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "graph/check.h"
#include "graph/graph_module.h"
#include "graph/status_macros.h"
#include "runtime/float_kernels.h"
#include "runtime/interpreter.h"
#include "runtime/quantized/quant_math.h"
#include "runtime/quantized/register.h"

namespace fuselage {
namespace {

const QuantParams kQ = QuantParams::PerTensor(0.5, 3);

// A quint8 [N, C, H, W] tensor whose stored values are 0, 1, 2, ... in row-major order.
Tensor Iota(std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<int32_t> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<int32_t>(i % 256);
  return quantized::FromIntValues(DType::kQUInt8, shape, kQ, values);
}

// The stored value at row-major index i of a quint8 tensor.
int64_t Stored(const Tensor& t, int64_t i) { return t.data<uint8_t>()[i]; }

std::vector<int> Bytes(const Tensor& t) {
  const auto* b = static_cast<const uint8_t*>(t.raw_data());
  return std::vector<int>(b, b + t.nbytes());
}

TEST(LayoutTest, MovesBytesToChannelsLastAndBack) {
  // [1, 2, 2, 3]: channel 0 holds 0..5, channel 1 holds 6..11 (h-major, then w).
  const Tensor x = Iota({1, 2, 2, 3});
  auto cl = ToChannelsLastBytes(x);
  ASSERT_TRUE(cl.ok()) << cl.status();
  // Each pixel's two channels side by side.
  EXPECT_EQ(Bytes(*cl), (std::vector<int>{0, 6, 1, 7, 2, 8, 3, 9, 4, 10, 5, 11}));
  EXPECT_EQ(cl->shape(), x.shape());
  EXPECT_EQ(cl->qparams(), x.qparams());
  EXPECT_EQ(FromChannelsLastBytes(*cl), x);
  const Value back = ToRowMajor(Value::ChannelsLast(*cl));
  ASSERT_TRUE(back.is_tensor());
  EXPECT_EQ(back.as_tensor(), x);
}

TEST(LayoutTest, OnlyEightBitPerTensorFourDTensorsCanBeChannelsLast) {
  EXPECT_TRUE(CanBeChannelsLast(Iota({2, 3, 4, 5})));
  EXPECT_FALSE(CanBeChannelsLast(Iota({3, 4, 5})));
  EXPECT_FALSE(CanBeChannelsLast(Tensor::FromFloats({1, 1, 1, 2}, {1.0f, 2.0f})));
  const Tensor per_channel = quantized::FromIntValues(
      DType::kQUInt8, {1, 2, 1, 1}, QuantParams::PerChannel({0.5, 0.25}, {0, 0}, 1), {1, 2});
  EXPECT_FALSE(CanBeChannelsLast(per_channel));
  auto refused = ToChannelsLastBytes(per_channel);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("expected a 4-D quint8 / qint8 tensor quantized per "
                                            "tensor"),
            std::string::npos)
      << refused.status();
}

TEST(LayoutTest, ToRowMajorReachesIntoLists) {
  const Tensor x = Iota({1, 2, 2, 2});
  const Value cl = Value::ChannelsLast(*ToChannelsLastBytes(x));
  const Value nested = Value::Tuple({Value::Int(7), Value::List({cl, Value(x)})});
  EXPECT_TRUE(HasChannelsLast({nested}));
  const Value plain = ToRowMajor(nested);
  EXPECT_FALSE(HasChannelsLast({plain}));
  ASSERT_TRUE(plain.is_tuple());
  EXPECT_EQ(plain.items()[0].as_int(), 7);
  EXPECT_EQ(plain.items()[1].items()[0].as_tensor(), x);
  EXPECT_EQ(plain.items()[1].items()[1].as_tensor(), x);
}

// An elementwise kernel: each stored value plus the second tensor's (if any), plus one.
FunctionKernel AddOneKernel() {
  return [](const KernelContext&, absl::Span<const Value> args,
            const ValueKwargs&) -> absl::StatusOr<Value> {
    if (args.empty() || !args[0].is_tensor()) {
      return absl::InvalidArgumentError("expected a row-major tensor first");
    }
    const Tensor& a = args[0].as_tensor();
    const Tensor* b = args.size() > 1 && args[1].is_tensor() ? &args[1].as_tensor() : nullptr;
    std::vector<int32_t> out(static_cast<size_t>(a.numel()));
    for (int64_t i = 0; i < a.numel(); ++i) {
      out[i] = (Stored(a, i) + (b ? Stored(*b, i % b->numel()) : 0) + 1) % 256;
    }
    return Value(quantized::FromIntValues(a.dtype(), a.shape(), a.qparams(), out));
  };
}

TEST(LayoutTest, KeepingChannelsLastComputesInTheLayoutAndFallsBackForBroadcasts) {
  GraphModule gm;
  KernelRegistry registry;
  const KernelContext ctx{**gm.graph().AddPlaceholder("x"), gm, registry};
  const FunctionKernel kernel = KeepingChannelsLast(AddOneKernel());
  const Tensor a = Iota({1, 2, 2, 3});
  const Tensor b = Iota({1, 2, 2, 3});
  const Value a_cl = Value::ChannelsLast(*ToChannelsLastBytes(a));

  // Channels-last in: channels-last out, holding a + 1 at each position.
  auto unary = kernel(ctx, {a_cl}, {});
  ASSERT_TRUE(unary.ok()) << unary.status();
  ASSERT_TRUE(unary->is_channels_last());
  const Tensor unary_plain = ToRowMajor(*unary).as_tensor();
  for (int64_t i = 0; i < a.numel(); ++i) EXPECT_EQ(Stored(unary_plain, i), i + 1);

  // One input in each layout: the row-major one is moved; a + b + 1 = 2i + 1.
  auto mixed = kernel(ctx, {a_cl, Value(b)}, {});
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  ASSERT_TRUE(mixed->is_channels_last());
  const Tensor mixed_plain = ToRowMajor(*mixed).as_tensor();
  for (int64_t i = 0; i < a.numel(); ++i) EXPECT_EQ(Stored(mixed_plain, i), 2 * i + 1);

  // A broadcast operand ([1, 1, 1, 3]: one value per w): row-major in, row-major out.
  const Tensor row = Iota({1, 1, 1, 3});
  auto broadcast = kernel(ctx, {a_cl, Value(row)}, {});
  ASSERT_TRUE(broadcast.ok()) << broadcast.status();
  ASSERT_TRUE(broadcast->is_tensor());
  for (int64_t i = 0; i < a.numel(); ++i) {
    EXPECT_EQ(Stored(broadcast->as_tensor(), i), i + i % 3 + 1);
  }

  // No channels-last input: the kernel as it is.
  auto plain = kernel(ctx, {Value(a)}, {});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_TRUE(plain->is_tensor());

  // A channels-last tensor only inside a list arg: the kernel gets the list row-major.
  const FunctionKernel first_item = KeepingChannelsLast(
      FunctionKernel([](const KernelContext&, absl::Span<const Value> args,
                        const ValueKwargs&) -> absl::StatusOr<Value> {
        if (!args[0].is_list() || !args[0].items()[0].is_tensor()) {
          return absl::InvalidArgumentError("expected a list of row-major tensors");
        }
        return args[0].items()[0];
      }));
  auto listed = first_item(ctx, {Value::List({a_cl})}, {});
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_TRUE(listed->is_tensor());
  EXPECT_EQ(listed->as_tensor(), a);
}

TEST(LayoutTest, KeepingChannelsLastRefusesAKernelThatChangesTheShape) {
  GraphModule gm;
  KernelRegistry registry;
  const KernelContext ctx{**gm.graph().AddPlaceholder("x"), gm, registry};
  const FunctionKernel flatten = KeepingChannelsLast(
      FunctionKernel([](const KernelContext&, absl::Span<const Value> args,
                        const ValueKwargs&) -> absl::StatusOr<Value> {
        return Value(*args[0].as_tensor().Reshaped({args[0].as_tensor().numel()}));
      }));
  auto out = flatten(ctx, {Value::ChannelsLast(*ToChannelsLastBytes(Iota({1, 2, 2, 2})))}, {});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(out.status().message().find("not elementwise"), std::string::npos) << out.status();
}

// The interpreter's dispatch, with kernels that report the layout they were given:
// test.to_cl (a channels-last overload) makes its input channels-last; test.cl_only (an
// overload) requires channels-last; test.plain (no overload) requires row-major.
TEST(LayoutTest, InterpreterGivesTheLayoutOnlyToChannelsLastOverloads) {
  KernelRegistry registry;
  const auto fail = [](absl::string_view what) -> FunctionKernel {
    return [what](const KernelContext&, absl::Span<const Value>,
                  const ValueKwargs&) -> absl::StatusOr<Value> {
      return absl::InternalError(absl::StrCat("the plain kernel of ", what, " ran"));
    };
  };
  ASSERT_TRUE(registry.RegisterFunction(OpKind::kCallFunction, "test.to_cl", fail("to_cl")).ok());
  ASSERT_TRUE(registry
                  .RegisterChannelsLastFunctionOverload(
                      OpKind::kCallFunction, Symbol::Intern("test.to_cl"),
                      [](const KernelContext&, absl::Span<const Value> args,
                         const ValueKwargs&) -> absl::StatusOr<Value> {
                        if (!args[0].is_tensor()) return absl::InternalError("not row-major");
                        ASSIGN_OR_RETURN(Tensor t, ToChannelsLastBytes(args[0].as_tensor()));
                        return Value::ChannelsLast(std::move(t));
                      })
                  .ok());
  ASSERT_TRUE(registry.RegisterFunction(OpKind::kCallFunction, "test.cl_only", fail("cl_only")).ok());
  ASSERT_TRUE(registry
                  .RegisterChannelsLastFunctionOverload(
                      OpKind::kCallFunction, Symbol::Intern("test.cl_only"),
                      [](const KernelContext&, absl::Span<const Value> args,
                         const ValueKwargs&) -> absl::StatusOr<Value> {
                        if (!args[0].is_channels_last()) return absl::InternalError("row-major");
                        return args[0];
                      })
                  .ok());
  ASSERT_TRUE(registry
                  .RegisterFunction(OpKind::kCallFunction, "test.plain",
                                    [](const KernelContext&, absl::Span<const Value> args,
                                       const ValueKwargs&) -> absl::StatusOr<Value> {
                                      if (!args[0].is_tensor()) {
                                        return absl::InternalError("not row-major");
                                      }
                                      return args[0];
                                    })
                  .ok());

  GraphModule gm;
  Graph& g = gm.graph();
  Node* x = *g.AddPlaceholder("x");
  Node* cl = *g.AddCallFunction("test.to_cl", {x});
  Node* kept = *g.AddCallFunction("test.cl_only", {cl});
  Node* plain = *g.AddCallFunction("test.plain", {kept});
  Node* again = *g.AddCallFunction("test.cl_only", {kept});  // after plain made it row-major
  ASSERT_TRUE(g.SetOutput(Argument::Tuple({plain, kept, again})).ok());
  const Tensor input = Iota({1, 3, 2, 2});

  // `again` finds `kept` row-major (moved once for test.plain): test.cl_only refuses it,
  // which shows the store keeps the moved value.
  RunOptions options;
  std::vector<std::string> observed_kinds;
  options.observer = [&](const Node&, const Value& v) {
    observed_kinds.emplace_back(v.KindName());
    return absl::OkStatus();
  };
  auto refused = fuselage::Run(gm, {Value(input)}, registry, options);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("node 'cl_only_1'"), std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("row-major"), std::string::npos) << refused.status();
  // The observer saw row-major tensors only (x, to_cl, cl_only, plain).
  EXPECT_EQ(observed_kinds, (std::vector<std::string>{"Tensor", "Tensor", "Tensor", "Tensor"}));

  ASSERT_TRUE(g.ReplaceAllUsesWith(again, kept).ok());
  ASSERT_TRUE(g.Erase(again).ok());
  auto out = fuselage::Run(gm, {Value(input)}, registry);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 3u);
  for (const Value& v : *out) {  // the outputs are row-major, equal to the input
    ASSERT_TRUE(v.is_tensor()) << v.ToString();
    EXPECT_EQ(v.as_tensor(), input);
  }

  // Without the layout, test.to_cl's plain kernel runs.
  options.keep_channels_last = false;
  auto without = fuselage::Run(gm, {Value(input)}, registry, options);
  ASSERT_FALSE(without.ok());
  EXPECT_NE(without.status().message().find("the plain kernel of to_cl ran"), std::string::npos)
      << without.status();
}

// ---- A quantized CNN block, with and without the layout ----

std::unique_ptr<Module> ConvModule(const std::string& type, int64_t in_c, int64_t out_c,
                                   int64_t k, int64_t pad, int64_t groups,
                                   int64_t weight_zero_point, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> value(-20, 20);
  const int64_t n = out_c * (in_c / groups) * k * k;
  std::vector<int32_t> w(static_cast<size_t>(n));
  for (int32_t& v : w) v = value(gen);
  std::vector<double> scales;
  std::vector<int64_t> zero_points;
  for (int64_t o = 0; o < out_c; ++o) {
    scales.push_back(0.01 + 0.001 * static_cast<double>(o));
    zero_points.push_back(weight_zero_point);
  }
  const QuantParams wq = weight_zero_point == 0
                             ? QuantParams::PerChannel(scales, zero_points, 0)
                             : QuantParams::PerTensor(0.02, weight_zero_point);
  auto m = std::make_unique<Module>(type);
  m->SetTensor("weight",
               quantized::FromIntValues(DType::kQInt8, {out_c, in_c / groups, k, k}, wq, w));
  std::vector<float> bias(static_cast<size_t>(out_c));
  for (int64_t o = 0; o < out_c; ++o) bias[o] = 0.05f * static_cast<float>(o % 5) - 0.1f;
  m->SetTensor("bias", Tensor::FromFloats({out_c}, bias));
  m->SetAttribute("stride", Argument::Ints({1, 1}));
  m->SetAttribute("padding", Argument::Ints({pad, pad}));
  m->SetAttribute("dilation", Argument::Ints({1, 1}));
  m->SetAttribute("groups", Argument::Int(groups));
  m->SetAttribute("scale", Argument::Float(0.09 + 0.01 * static_cast<double>(seed % 3)));
  m->SetAttribute("zero_point", Argument::Int(seed % 2 == 0 ? 0 : 60));
  return m;
}

// quantize -> conv_relu -> max pool (padded, ceil mode) -> conv -> add_relu(conv, pool)
// -> F.relu -> grouped conv -> { conv with a weight zero point (row-major path),
// adaptive avg pool (no overload) } -> outputs, one of them a channels-last value.
std::unique_ptr<GraphModule> CnnBlock() {
  auto gm = std::make_unique<GraphModule>();
  FUSELAGE_CHECK(gm->SetModule("conv1", ConvModule("nniq.ConvReLU2d", 8, 16, 3, 1, 1, 0, 1)).ok());
  auto pool = std::make_unique<Module>("nn.MaxPool2d");
  pool->SetAttribute("kernel_size", Argument::Ints({3, 3}));
  pool->SetAttribute("stride", Argument::Ints({2, 2}));
  pool->SetAttribute("padding", Argument::Ints({1, 1}));
  pool->SetAttribute("dilation", Argument::Ints({1, 1}));
  pool->SetAttribute("ceil_mode", Argument::Bool(true));
  FUSELAGE_CHECK(gm->SetModule("pool", std::move(pool)).ok());
  FUSELAGE_CHECK(gm->SetModule("conv2", ConvModule("nnq.Conv2d", 16, 16, 1, 0, 1, 0, 2)).ok());
  FUSELAGE_CHECK(gm->SetModule("conv3", ConvModule("nnq.Conv2d", 16, 16, 3, 1, 4, 0, 3)).ok());
  FUSELAGE_CHECK(gm->SetModule("conv4", ConvModule("nnq.Conv2d", 16, 8, 3, 1, 1, 2, 4)).ok());
  auto avg = std::make_unique<Module>("nn.AdaptiveAvgPool2d");
  avg->SetAttribute("output_size", Argument::Ints({1, 1}));
  FUSELAGE_CHECK(gm->SetModule("avg", std::move(avg)).ok());
  Graph& g = gm->graph();
  Node* x = *g.AddPlaceholder("x");
  Node* q = *g.AddCallFunction("torch.quantize_per_tensor",
                               {x, Argument::Float(0.05), Argument::Int(64),
                                Argument::Dtype(DType::kQUInt8)});
  Node* c1 = *g.AddCallModule("conv1", {q});
  Node* p = *g.AddCallModule("pool", {c1});
  Node* c2 = *g.AddCallModule("conv2", {p});
  Node* a = *g.AddCallFunction("torch.ops.quantized.add_relu",
                               {c2, p, Argument::Float(0.12), Argument::Int(5)});
  Node* r = *g.AddCallFunction("torch.nn.functional.relu", {a});
  Node* c3 = *g.AddCallModule("conv3", {r});
  Node* c4 = *g.AddCallModule("conv4", {c3});
  Node* v = *g.AddCallModule("avg", {c3});
  Node* d4 = *g.AddCallMethod("dequantize", {c4});
  FUSELAGE_CHECK(g.SetOutput(Argument::Tuple({d4, v, a})).ok());
  FUSELAGE_CHECK(gm->Verify().ok());
  return gm;
}

// Runs `gm` on a random [2, 8, 9, 9] input on both engines, with and without the
// channels-last layout: every node's value and the outputs are the same bytes.
void ExpectSameBytesWithAndWithoutTheLayout(const GraphModule& gm,
                                            const KernelRegistry& kernels, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> value(-1.5f, 3.0f);
  std::vector<float> x(2 * 8 * 9 * 9);
  for (float& f : x) f = value(gen);
  const Tensor input = Tensor::FromFloats({2, 8, 9, 9}, x);

  for (QuantizedEngine engine : {QuantizedEngine::kOnednn, QuantizedEngine::kQnnpack}) {
    SCOPED_TRACE(QuantizedEngineName(engine));
    auto run = [&](bool keep) {
      std::vector<Value> values;
      RunOptions options;
      options.engine = engine;
      options.keep_channels_last = keep;
      options.observer = [&values](const Node&, const Value& v) {
        values.push_back(v);
        return absl::OkStatus();
      };
      auto out = RunStructured(gm, {Value(input)}, kernels, options);
      FUSELAGE_CHECK(out.ok());
      values.push_back(*out);
      return values;
    };
    const std::vector<Value> with = run(true), without = run(false);
    ASSERT_EQ(with.size(), without.size());
    for (size_t i = 0; i < with.size(); ++i) {
      SCOPED_TRACE(testing::Message() << "value " << i);
      std::vector<Value> a, b;
      FlattenValue(with[i], &a);
      FlattenValue(without[i], &b);
      ASSERT_EQ(a.size(), b.size());
      for (size_t j = 0; j < a.size(); ++j) {
        ASSERT_TRUE(a[j].is_tensor()) << a[j].ToString();
        EXPECT_EQ(a[j].as_tensor(), b[j].as_tensor());
      }
    }
  }
}

TEST(LayoutTest, QuantizedBlockGivesTheSameBytesWithAndWithoutTheLayout) {
  KernelRegistry kernels;
  ASSERT_TRUE(RegisterFloatKernels(kernels).ok());
  ASSERT_TRUE(RegisterQuantizedKernels(kernels).ok());
  const std::unique_ptr<GraphModule> gm = CnnBlock();
  ExpectSameBytesWithAndWithoutTheLayout(*gm, kernels, /*seed=*/7);

  // And the layout is used: the conv's overload gives a channels-last value.
  const Node* conv1 = nullptr;
  for (const Node* n = gm->graph().first(); n != nullptr; n = n->next()) {
    if (n->target().name() == "conv1") conv1 = n;
  }
  ASSERT_NE(conv1, nullptr);
  const Tensor q = quantized::FromIntValues(DType::kQUInt8, {1, 8, 4, 4},
                                            QuantParams::PerTensor(0.05, 64),
                                            std::vector<int32_t>(128, 70));
  const ModuleKernel* overload =
      kernels.SelectChannelsLastModule(Symbol::Intern("nniq.ConvReLU2d"), {Value(q)});
  ASSERT_NE(overload, nullptr);
  const KernelContext ctx{*conv1, *gm, kernels};
  auto y = (*overload)(ctx, *gm->FindModule("conv1"), {Value(q)}, {});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_TRUE(y->is_channels_last()) << y->ToString();
}

// The functional int8 convs lowering writes for F.conv2d (what a PT2E model lowered by
// fuselage holds): quantize -> conv2d_relu -> conv2d (grouped, strided) -> dequantize,
// the weights per-channel get_attr constants. With the layout the convs hand each other
// channels-last values; the bytes are those of the row-major run.
std::unique_ptr<GraphModule> FunctionalConvChain() {
  auto gm = std::make_unique<GraphModule>();
  std::unique_ptr<Module> a = ConvModule("nnq.Conv2d", 8, 16, 3, 1, 1, 0, 5);
  std::unique_ptr<Module> b = ConvModule("nnq.Conv2d", 16, 16, 3, 1, 4, 0, 6);
  FUSELAGE_CHECK(gm->SetTensor("w1", *a->FindTensor("weight")).ok());
  FUSELAGE_CHECK(gm->SetTensor("b1", *a->FindTensor("bias")).ok());
  FUSELAGE_CHECK(gm->SetTensor("w2", *b->FindTensor("weight")).ok());
  FUSELAGE_CHECK(gm->SetTensor("b2", *b->FindTensor("bias")).ok());
  Graph& g = gm->graph();
  Node* x = *g.AddPlaceholder("x");
  Node* q = *g.AddCallFunction("torch.quantize_per_tensor",
                               {x, Argument::Float(0.05), Argument::Int(64),
                                Argument::Dtype(DType::kQUInt8)});
  auto conv = [&](const char* target, Node* in, const char* w, const char* bias,
                  int64_t stride, int64_t groups, double scale, int64_t zero_point) {
    return *g.AddCallFunction(
        target,
        {in, *g.AddGetAttr(w), *g.AddGetAttr(bias), Argument::Ints({stride, stride}),
         Argument::Ints({1, 1}), Argument::Ints({1, 1}), Argument::Int(groups)},
        {{Symbol::Intern("output_scale"), Argument::Float(scale)},
         {Symbol::Intern("output_zero_point"), Argument::Int(zero_point)}});
  };
  Node* c1 = conv("torch.ops.quantized.conv2d_relu", q, "w1", "b1", 1, 1, 0.08, 0);
  Node* c2 = conv("torch.ops.quantized.conv2d", c1, "w2", "b2", 2, 4, 0.11, 60);
  FUSELAGE_CHECK(g.SetOutput(*g.AddCallMethod("dequantize", {c2})).ok());
  FUSELAGE_CHECK(gm->Verify().ok());
  return gm;
}

TEST(LayoutTest, FunctionalConvsGiveTheSameBytesWithAndWithoutTheLayout) {
  KernelRegistry kernels;
  ASSERT_TRUE(RegisterFloatKernels(kernels).ok());
  ASSERT_TRUE(RegisterQuantizedKernels(kernels).ok());
  const std::unique_ptr<GraphModule> gm = FunctionalConvChain();
  ExpectSameBytesWithAndWithoutTheLayout(*gm, kernels, /*seed=*/11);
  // And the layout is used: the functional conv's overload gives a channels-last value.
  const Tensor q = quantized::FromIntValues(DType::kQUInt8, {1, 8, 4, 4},
                                            QuantParams::PerTensor(0.05, 64),
                                            std::vector<int32_t>(128, 70));
  const FunctionKernel* overload = kernels.SelectChannelsLastFunction(
      OpKind::kCallFunction, Symbol::Intern("torch.ops.quantized.conv2d_relu"), {Value(q)});
  ASSERT_NE(overload, nullptr);
  const Node* c1 = nullptr;
  for (const Node* n = gm->graph().first(); n != nullptr; n = n->next()) {
    if (n->target().name() == "torch.ops.quantized.conv2d_relu") c1 = n;
  }
  ASSERT_NE(c1, nullptr);
  const KernelContext ctx{*c1, *gm, kernels};
  const std::vector<Value> args = {Value(q), Value(*gm->FindTensor("w1")),
                                   Value(*gm->FindTensor("b1"))};
  const ValueKwargs kwargs = {{Symbol::Intern("output_scale"), Value::Float(0.08)},
                              {Symbol::Intern("output_zero_point"), Value::Int(0)}};
  auto y = (*overload)(ctx, args, kwargs);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_TRUE(y->is_channels_last()) << y->ToString();
}

}  // namespace
}  // namespace fuselage
