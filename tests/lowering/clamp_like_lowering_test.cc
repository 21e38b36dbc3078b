// Clamp-like ops (nn.ReLU6, nn.Hardtanh, F.relu6, F.hardtanh, F.hardtanh_, torch.clamp,
// Tensor.clamp) are lowered as PyTorch 1.13's convert_fx lowers them (copy nodes of
// _lower_to_native_backend.py): the op reads the quantized tensor and its quantize, which
// shares the input's qparams, goes. The lowered graphs run on fuselage's quantized
// kernels and are compared with PyTorch 1.13's own quantized outputs (printed by
//
//   x = torch.tensor([-1.0, -0.02, 0.0, 0.51, 0.525, 3.0, 6.0, 6.3, 6.5, 7.0])
//   q = torch.quantize_per_tensor(x, 0.05, 128, torch.quint8)   # and qint8, zp 3
//   torch.nn.ReLU6()(q).int_repr(), torch.clamp(q, min=0.52).int_repr(), ...
//
// on this machine) and, for ReLU6, with values computed by hand.
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "graph/graph_module.h"
#include "lowering/lower_to_native.h"
#include "lowering/lowering_rule.h"
#include "runtime/builtin_kernels.h"
#include "runtime/interpreter.h"
#include "runtime/quantized/clamp.h"

namespace fuselage {
namespace {

const std::vector<float> kInput = {-1.0f, -0.02f, 0.0f, 0.51f, 0.525f,
                                   3.0f,  6.0f,   6.3f, 6.5f,  7.0f};

// How the clamp-like op is called in the reference graph.
struct ClampCase {
  std::string name;  // test name
  OpKind op;
  std::string target;  // function / method target, or the module type for call_module
  std::vector<Argument> extra_args;  // after the input
  Kwargs kwargs;
  std::vector<std::pair<std::string, Argument>> module_attributes;
  std::string rule;  // the lowering rule expected to apply
  // PyTorch 1.13's int_repr of the op's output for kInput quantized with (0.05, 128,
  // quint8) and with (0.05, 3, qint8).
  std::vector<int64_t> pytorch_quint8;
  std::vector<int64_t> pytorch_qint8;
};

// x → quantize(s, zp, dtype) → dequantize → op → quantize(s, zp, dtype) → output: the
// reference graph convert_to_reference_fx makes for a shared-qparams op. The output is
// the quantized tensor, so the test reads the stored integers.
struct ReferenceGraph {
  std::unique_ptr<GraphModule> gm = std::make_unique<GraphModule>();
  Node* x_q = nullptr;
  Node* op = nullptr;
};

ReferenceGraph Build(const ClampCase& c, double scale, int64_t zp, DType dtype,
                     double out_scale) {
  ReferenceGraph r;
  Graph& g = r.gm->graph();
  auto quantize = [&](Node* in, double s, absl::string_view name) {
    return *g.AddCallFunction(
        "torch.quantize_per_tensor",
        {in, Argument::Float(s), Argument::Int(zp), Argument::Dtype(dtype)}, {}, name);
  };
  Node* x = *g.AddPlaceholder("x");
  r.x_q = quantize(x, scale, "x_q");
  Node* dq = *g.AddCallMethod("dequantize", {r.x_q});
  std::vector<Argument> args = {dq};
  args.insert(args.end(), c.extra_args.begin(), c.extra_args.end());
  if (c.op == OpKind::kCallModule) {
    auto m = std::make_unique<Module>(c.target);
    for (const auto& [name, value] : c.module_attributes) m->SetAttribute(name, value);
    EXPECT_TRUE(r.gm->SetModule("act", std::move(m)).ok());
    r.op = *g.AddCallModule("act", args, c.kwargs);
  } else if (c.op == OpKind::kCallFunction) {
    r.op = *g.AddCallFunction(c.target, args, c.kwargs);
  } else {
    r.op = *g.AddCallMethod(c.target, args, c.kwargs);
  }
  EXPECT_TRUE(g.SetOutput(quantize(r.op, out_scale, "y_q")).ok());
  EXPECT_TRUE(r.gm->Verify().ok()) << r.gm->Verify();
  return r;
}

std::vector<int64_t> StoredValues(const Tensor& t) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < t.numel(); ++i) {
    v.push_back(t.dtype() == DType::kQInt8 ? t.data<int8_t>()[i] : t.data<uint8_t>()[i]);
  }
  return v;
}

void PrintTo(const ClampCase& c, std::ostream* os) { *os << c.name; }

class ClampLikeLoweringTest : public ::testing::TestWithParam<ClampCase> {};

TEST_P(ClampLikeLoweringTest, RunsOnTheQuantizedTensorLikePyTorch) {
  const ClampCase& c = GetParam();
  for (const DType dtype : {DType::kQUInt8, DType::kQInt8}) {
    SCOPED_TRACE(DTypeName(dtype));
    const int64_t zp = dtype == DType::kQUInt8 ? 128 : 3;
    ReferenceGraph r = Build(c, 0.05, zp, dtype, 0.05);

    LoweringRuleRegistry rules;
    ASSERT_TRUE(RegisterNativeLoweringRules(rules).ok());
    auto report = LowerToNative(*r.gm, rules);
    ASSERT_TRUE(report.ok()) << report.status();
    ASSERT_TRUE(r.gm->Verify().ok()) << r.gm->Verify();
    EXPECT_EQ(report->lowered_per_rule.count(c.rule), 1u) << report->ToString();
    EXPECT_EQ(report->total_lowered(), 1) << report->ToString();
    EXPECT_TRUE(report->unlowered.empty()) << report->ToString();
    // x, x_q, the op, output: the dequantize and the op's quantize are gone, the op reads
    // x_q and is the output.
    EXPECT_EQ(r.gm->graph().size(), 4u);
    EXPECT_EQ(r.op->arg(0), Argument(r.x_q));
    EXPECT_EQ(r.gm->graph().output()->arg(0), Argument(r.op));

    auto kernels = BuiltinKernels();
    ASSERT_TRUE(kernels.ok()) << kernels.status();
    auto out = fuselage::Run(*r.gm, {Value(Tensor::FromFloats({10}, kInput))}, **kernels);
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), 1u);
    const Tensor& y = (*out)[0].as_tensor();
    ASSERT_EQ(y.dtype(), dtype);
    EXPECT_EQ(y.qparams(), QuantParams::PerTensor(0.05, zp));
    EXPECT_EQ(StoredValues(y), dtype == DType::kQUInt8 ? c.pytorch_quint8 : c.pytorch_qint8);
  }
}

Kwargs Kw(std::vector<std::pair<std::string, Argument>> items) {
  Kwargs kwargs;
  for (auto& [k, v] : items) kwargs.emplace_back(Symbol::Intern(k), std::move(v));
  return kwargs;
}

// PyTorch 1.13's outputs (see the file comment).
const std::vector<int64_t> kRelu6U8 = {128, 128, 128, 138, 138, 188, 248, 248, 248, 248};
const std::vector<int64_t> kRelu6I8 = {3, 3, 3, 13, 13, 63, 123, 123, 123, 123};
const std::vector<int64_t> kHalfTo2U8 = {118, 128, 128, 138, 138, 168, 168, 168, 168, 168};
const std::vector<int64_t> kHalfTo2I8 = {-7, 3, 3, 13, 13, 43, 43, 43, 43, 43};

INSTANTIATE_TEST_SUITE_P(
    Ops, ClampLikeLoweringTest,
    ::testing::Values(
        ClampCase{"ReLU6Module", OpKind::kCallModule, "nn.ReLU6", {}, {}, {},
                  "pass-through:nn.ReLU6", kRelu6U8, kRelu6I8},
        ClampCase{"HardtanhModule", OpKind::kCallModule, "nn.Hardtanh", {}, {},
                  {{"min_val", Argument::Float(-0.5)}, {"max_val", Argument::Float(2.0)}},
                  "pass-through:nn.Hardtanh", kHalfTo2U8, kHalfTo2I8},
        ClampCase{"FunctionalRelu6", OpKind::kCallFunction, "torch.nn.functional.relu6", {},
                  {}, {}, "pass-through:torch.nn.functional.relu6", kRelu6U8, kRelu6I8},
        ClampCase{"FunctionalHardtanh", OpKind::kCallFunction, "torch.nn.functional.hardtanh",
                  {Argument::Float(-0.5), Argument::Float(2.0)}, {}, {},
                  "pass-through:torch.nn.functional.hardtanh", kHalfTo2U8, kHalfTo2I8},
        ClampCase{"FunctionalHardtanhInPlace", OpKind::kCallFunction,
                  "torch.nn.functional.hardtanh_", {},
                  Kw({{"min_val", Argument::Float(-0.5)}, {"max_val", Argument::Float(2.0)}}),
                  {}, "pass-through:torch.nn.functional.hardtanh_", kHalfTo2U8, kHalfTo2I8},
        ClampCase{"TorchClampBoth", OpKind::kCallFunction, "torch.clamp",
                  {Argument::Float(0.0), Argument::Float(6.0)}, {}, {},
                  "pass-through:torch.clamp", kRelu6U8, kRelu6I8},
        ClampCase{"TorchClampMinOnly", OpKind::kCallFunction, "torch.clamp", {},
                  Kw({{"min", Argument::Float(0.52)}}), {}, "pass-through:torch.clamp",
                  {138, 138, 138, 138, 138, 188, 248, 254, 255, 255},
                  {13, 13, 13, 13, 13, 63, 123, 127, 127, 127}},
        ClampCase{"TorchClampMaxOnly", OpKind::kCallFunction, "torch.clamp",
                  {Argument::None(), Argument::Float(0.52)}, {}, {},
                  "pass-through:torch.clamp",
                  {108, 128, 128, 138, 138, 138, 138, 138, 138, 138},
                  {-17, 3, 3, 13, 13, 13, 13, 13, 13, 13}},
        ClampCase{"TorchClampMinAboveMax", OpKind::kCallFunction, "torch.clamp",
                  {Argument::Float(3.0), Argument::Float(1.0)}, {}, {},
                  "pass-through:torch.clamp", std::vector<int64_t>(10, 148),
                  std::vector<int64_t>(10, 23)},
        ClampCase{"MethodClamp", OpKind::kCallMethod, "clamp",
                  {Argument::Float(-0.5), Argument::Float(2.0)}, {}, {},
                  "pass-through:.clamp", kHalfTo2U8, kHalfTo2I8}),
    [](const ::testing::TestParamInfo<ClampCase>& info) { return info.param.name; });

// ReLU6 by hand: x / 0.05 rounded half to even plus 128, clamped to [0, 255], then to
// [128 (= 0.0), 248 (= 6.0)]; dequantized: 0.05 * (q - 128).
TEST(ClampLikeLoweringTest, ReLU6HandComputedAndEqualToTheReferenceGraph) {
  const ClampCase relu6{"", OpKind::kCallModule, "nn.ReLU6", {}, {}, {},
                        "pass-through:nn.ReLU6", {}, {}};
  ReferenceGraph reference = Build(relu6, 0.05, 128, DType::kQUInt8, 0.05);
  ReferenceGraph lowered = Build(relu6, 0.05, 128, DType::kQUInt8, 0.05);
  LoweringRuleRegistry rules;
  ASSERT_TRUE(RegisterNativeLoweringRules(rules).ok());
  ASSERT_TRUE(LowerToNative(*lowered.gm, rules).ok());
  ASSERT_TRUE(lowered.gm->Verify().ok()) << lowered.gm->Verify();

  auto kernels = BuiltinKernels();
  ASSERT_TRUE(kernels.ok()) << kernels.status();
  const Tensor x = Tensor::FromFloats({10}, kInput);
  auto ref_out = fuselage::Run(*reference.gm, {Value(x)}, **kernels);
  auto low_out = fuselage::Run(*lowered.gm, {Value(x)}, **kernels);
  ASSERT_TRUE(ref_out.ok()) << ref_out.status();
  ASSERT_TRUE(low_out.ok()) << low_out.status();
  // -1.0 → 108 → 128; -0.02 → -0.4 rounds to 0 → 128; 0.51 → 10.2 → 138;
  // 0.525 → 10.5 (float product 10.499999) → 138; 6.3 → 126 → 254 → 248;
  // 7.0 → 268 → 255 → 248.
  const std::vector<int64_t> by_hand = {128, 128, 128, 138, 138, 188, 248, 248, 248, 248};
  EXPECT_EQ(StoredValues((*low_out)[0].as_tensor()), by_hand);
  EXPECT_EQ(StoredValues((*ref_out)[0].as_tensor()), by_hand);
}

// A clamp whose quantize changes the parameters lowers all the same, as PyTorch 1.13's
// special_pattern_replacement drops it: the output keeps the input's parameters (0.05,
// not 0.1), and the report names the dropped quantize.
TEST(ClampLikeLoweringTest, RequantizingClampDropsItsQuantizeAndIsReported) {
  const ClampCase relu6{"", OpKind::kCallModule, "nn.ReLU6", {}, {}, {},
                        "pass-through:nn.ReLU6", {}, {}};
  ReferenceGraph r = Build(relu6, 0.05, 128, DType::kQUInt8, 0.1);
  LoweringRuleRegistry rules;
  ASSERT_TRUE(RegisterNativeLoweringRules(rules).ok());
  auto report = LowerToNative(*r.gm, rules);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(r.gm->Verify().ok()) << r.gm->Verify();
  EXPECT_EQ(report->lowered_per_rule.count("pass-through:nn.ReLU6"), 1u) << report->ToString();
  EXPECT_TRUE(report->unlowered.empty()) << report->ToString();
  ASSERT_EQ(report->quantizes_dropped_after_pass_through.size(), 1u) << report->ToString();
  EXPECT_EQ(report->quantizes_dropped_after_pass_through[0].dropped.scale, 0.1);
  EXPECT_EQ(r.gm->graph().size(), 4u);  // x, x_q, relu6, output

  auto kernels = BuiltinKernels();
  ASSERT_TRUE(kernels.ok()) << kernels.status();
  auto out = fuselage::Run(*r.gm, {Value(Tensor::FromFloats({10}, kInput))}, **kernels);
  ASSERT_TRUE(out.ok()) << out.status();
  const Tensor& y = (*out)[0].as_tensor();
  EXPECT_EQ(y.qparams(), QuantParams::PerTensor(0.05, 128));
  EXPECT_EQ(StoredValues(y), kRelu6U8);  // PyTorch's, at the input's parameters
}

// The kernel's errors.
TEST(QuantizedClampTest, RejectsMissingBoundsAndFloatInput) {
  const Tensor q = *Tensor::FromBytes(DType::kQUInt8, {2}, std::string("\x80\x90", 2),
                                      QuantParams::PerTensor(0.05, 128));
  auto none = quantized::QuantizedClamp(q, std::nullopt, std::nullopt);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(none.status().message()).find("both None"), std::string::npos);
  auto flt = quantized::QuantizedClamp(Tensor::FromFloats({1}, {1.0f}), 0.0, 1.0);
  EXPECT_EQ(flt.status().code(), absl::StatusCode::kInvalidArgument);
  auto ok = quantized::QuantizedClamp(q, 0.5, std::nullopt);  // 0.5 → 138
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(StoredValues(*ok), (std::vector<int64_t>{138, 144}));
}

}  // namespace
}  // namespace fuselage
