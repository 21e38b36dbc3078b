// BuildNativeWeightedModule's weight quantization against a plain per-element reference
// (PyTorch's quantize_val: zero_point + nearbyint(w * (1.0f / float(scale))), clamped),
// on random weights plus the values where a fast rounding path could differ: exact .5
// ties and values beyond the int32 range, per tensor and per channel on every axis,
// qint8 and quint8. (Values whose scaled form leaves the int64 range, infinities and NaN
// are undefined behaviour in PyTorch's quantize_val too, so they are not asserted.)
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "graph/module.h"
#include "graph/tensor.h"
#include "lowering/lowering_rule.h"

namespace fuselage {
namespace {

// The reference: one element at a time, the channel from the flat index.
std::vector<int64_t> ReferenceQuantize(const std::vector<float>& w,
                                       const std::vector<int64_t>& shape, bool per_channel,
                                       int64_t axis, const std::vector<float>& scales,
                                       const std::vector<int64_t>& zero_points, int64_t qmin,
                                       int64_t qmax) {
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t channels = shape[static_cast<size_t>(axis)];
  std::vector<int64_t> q(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    const size_t c =
        per_channel ? static_cast<size_t>((static_cast<int64_t>(i) / inner) % channels) : 0;
    const float inv_scale = 1.0f / scales[c];
    const int64_t rounded = static_cast<int64_t>(std::nearbyint(w[i] * inv_scale));
    q[i] = std::min(std::max(zero_points[c] + rounded, qmin), qmax);
  }
  return q;
}

std::unique_ptr<Module> ReferenceWeighted(const std::vector<float>& w,
                                          const std::vector<int64_t>& shape, bool per_channel,
                                          int64_t axis, const std::vector<float>& scales,
                                          const std::vector<int64_t>& zero_points,
                                          DType dtype) {
  auto m = std::make_unique<Module>("nnqr.Conv2d");
  m->SetTensor("weight", Tensor::FromFloats(shape, w));
  const int64_t n = static_cast<int64_t>(scales.size());
  m->SetTensor("weight_scale", Tensor::FromFloats({n}, scales));
  m->SetTensor("weight_zero_point", Tensor::FromInt64s({n}, zero_points));
  m->SetTensor("weight_axis", Tensor::FromInt64s({}, {axis}));
  m->SetAttribute("weight_qscheme", Argument::String(per_channel ? "torch.per_channel_affine"
                                                                 : "torch.per_tensor_affine"));
  m->SetAttribute("weight_dtype", Argument::Dtype(dtype));
  m->SetAttribute("groups", Argument::Int(1));
  return m;
}

std::vector<int64_t> StoredValues(const Tensor& t) {
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = t.dtype() == DType::kQInt8 ? t.data<int8_t>()[i] : t.data<uint8_t>()[i];
  }
  return v;
}

// Random weights around the quantization grid, with exact ties and extreme values mixed
// in at fixed positions.
std::vector<float> Weights(size_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 60.0f * scale);
  std::vector<float> w(n);
  for (float& x : w) x = normal(rng);
  // Ties (x.5 after scaling, up to float rounding of the product), both sides of the
  // 2^30 boundary of the fast path, far beyond int32, and signed zeros.
  const float specials[] = {0.5f * scale,   -0.5f * scale,   1.5f * scale,  -2.5f * scale,
                            0x1p30f * scale, -0x1p30f * scale, 3e9f * scale, -3e9f * scale,
                            1e15f * scale,  -1e15f * scale,  0.0f,          -0.0f};
  for (size_t i = 0; i < std::size(specials) && 3 * i < n; ++i) w[3 * i] = specials[i];
  return w;
}

struct Case {
  std::vector<int64_t> shape;
  bool per_channel;
  int64_t axis;
  DType dtype;
};

class WeightQuantizationTest : public ::testing::TestWithParam<Case> {};

TEST_P(WeightQuantizationTest, MatchesPerElementReference) {
  const Case& c = GetParam();
  int64_t numel = 1;
  for (int64_t d : c.shape) numel *= d;
  const int64_t channels = c.per_channel ? c.shape[static_cast<size_t>(c.axis)] : 1;
  std::vector<float> scales;
  std::vector<int64_t> zero_points;
  for (int64_t i = 0; i < channels; ++i) {
    // Scales with an inexact reciprocal, and zero points inside and outside the range
    // (a zero point past the range must still clamp, not wrap).
    scales.push_back(0.013f * static_cast<float>(i + 1) / 3.0f);
    zero_points.push_back(c.dtype == DType::kQInt8 ? (i % 3) - 1
                                                   : 128 + 3 * (i % 4) - 300 * (i == 2));
  }
  const std::vector<float> w = Weights(static_cast<size_t>(numel), scales[0], 7);
  auto reference = ReferenceWeighted(w, c.shape, c.per_channel, c.axis, scales, zero_points,
                                     c.dtype);
  // Only a transposed conv's native module takes a per-channel axis other than 0.
  const char* native_type = c.per_channel && c.axis != 0 ? "nnq.ConvTranspose2d" : "nnq.Conv2d";
  auto native = BuildNativeWeightedModule(native_type, *reference,
                                          OutputQParams{0.05, 3, DType::kQUInt8});
  ASSERT_TRUE(native.ok()) << native.status();
  if (c.per_channel && c.axis != 0) {
    // A conv or linear needs one scale per output channel: nnq.Conv2d refuses the axis.
    auto refused = BuildNativeWeightedModule("nnq.Conv2d", *reference,
                                             OutputQParams{0.05, 3, DType::kQUInt8});
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find(absl::StrCat("along axis ", c.axis)),
              std::string::npos) << refused.status();
  }
  const Tensor* qweight = (*native)->FindTensor("weight");
  ASSERT_NE(qweight, nullptr);
  EXPECT_EQ(qweight->dtype(), c.dtype);
  EXPECT_EQ(qweight->shape(), c.shape);
  ASSERT_EQ(qweight->nbytes(), static_cast<size_t>(numel));
  const std::vector<int64_t> expected =
      ReferenceQuantize(w, c.shape, c.per_channel, c.axis, scales, zero_points,
                        DTypeMin(c.dtype), DTypeMax(c.dtype));
  EXPECT_EQ(StoredValues(*qweight), expected);

  // The quantization parameters travel with the tensor.
  const QuantParams& qp = qweight->qparams();
  EXPECT_EQ(qp.scheme, c.per_channel ? QScheme::kPerChannelAffine : QScheme::kPerTensorAffine);
  ASSERT_EQ(qp.scales.size(), scales.size());
  for (size_t i = 0; i < scales.size(); ++i) {
    EXPECT_EQ(qp.scales[i], static_cast<double>(scales[i]));
  }
  EXPECT_EQ(qp.zero_points, zero_points);
  if (c.per_channel) EXPECT_EQ(qp.axis, c.axis);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, WeightQuantizationTest,
    ::testing::Values(Case{{8, 8, 3, 3}, false, 0, DType::kQInt8},
                      Case{{8, 8, 3, 3}, true, 0, DType::kQInt8},
                      Case{{4, 6, 3, 3}, true, 1, DType::kQInt8},   // outer > 1
                      Case{{4, 6, 2, 5}, true, 3, DType::kQInt8},   // inner == 1
                      Case{{5, 7}, true, 0, DType::kQUInt8},
                      Case{{5, 7}, false, 0, DType::kQUInt8},
                      Case{{3, 4, 2, 2}, true, 1, DType::kQUInt8},
                      // Runs the sixteen-wide path takes whole and with a tail: per
                      // tensor, 2368 values; per channel, 51 per channel (3 groups of
                      // 16 + 3), channel 2's zero point -166 clamping everything to 0.
                      Case{{64, 37}, false, 0, DType::kQUInt8},
                      Case{{16, 3, 17}, true, 0, DType::kQUInt8},
                      Case{{16, 3, 17}, true, 0, DType::kQInt8}));

// Non-finite and huge weights (undefined behaviour in a plain int64 conversion): NaN
// becomes the zero point, +inf / huge the top of the range, -inf / -huge the bottom.
TEST(WeightQuantizationTest, NonFiniteWeightsSaturate) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> w = {std::numeric_limits<float>::quiet_NaN(), inf, -inf, 1e30f,
                                -1e30f, 0.3f};
  auto reference = ReferenceWeighted(w, {6}, false, 0, {0.1f}, {5}, DType::kQInt8);
  auto native = BuildNativeWeightedModule("nnq.Linear", *reference,
                                          OutputQParams{1.0, 0, DType::kQUInt8});
  ASSERT_TRUE(native.ok()) << native.status();
  EXPECT_EQ(StoredValues(*(*native)->FindTensor("weight")),
            (std::vector<int64_t>{5, 127, -128, 127, -128, 8}));
}

// A hand-computed case, independent of the reference function above: scale 0.1 (its
// float reciprocal is 10.0f exactly after rounding), zero point 0.
TEST(WeightQuantizationTest, HandComputedTiesRoundHalfToEven) {
  const std::vector<float> w = {0.05f, 0.15f, 0.25f, -0.05f, -0.15f, 12.8f, -12.9f, 0.0f};
  auto reference = ReferenceWeighted(w, {8}, false, 0, {0.1f}, {0}, DType::kQInt8);
  auto native = BuildNativeWeightedModule("nnq.Linear", *reference,
                                          OutputQParams{1.0, 0, DType::kQUInt8});
  ASSERT_TRUE(native.ok()) << native.status();
  // 0.05f * 10 = 0.5 (ties to 0), 0.15f * 10 = 1.5 (to 2), 0.25f * 10 = 2.5 (to 2),
  // -0.5 to 0, -1.5 to -2, 128 clamps to 127, -129 clamps to -128.
  EXPECT_EQ(StoredValues(*(*native)->FindTensor("weight")),
            (std::vector<int64_t>{0, 2, 2, 0, -2, 127, -128, 0}));
}

// The builder reads the reference module's fields (in one scan of its tensors and
// attributes): a fused module's child "0", the bias and attributes copied, the weight
// quantization attributes dropped; each missing field named in the error.
TEST(WeightQuantizationTest, ReadsFusedChildAndNamesMissingFields) {
  auto inner = ReferenceWeighted({0.5f, -0.5f}, {2}, false, 0, {0.25f}, {1}, DType::kQInt8);
  inner->SetTensor("bias", Tensor::FromFloats({2}, {1.5f, -2.0f}));
  Module fused("nni.ConvReLU2d");
  fused.SetChild("0", std::move(inner));
  fused.SetChild("1", std::make_unique<Module>("nn.ReLU"));
  auto native = BuildNativeWeightedModule("nniq.ConvReLU2d", fused,
                                          OutputQParams{0.5, 3, DType::kQUInt8});
  ASSERT_TRUE(native.ok()) << native.status();
  const Module& m = **native;
  EXPECT_EQ(m.type().name(), "nniq.ConvReLU2d");
  // 0.5 / 0.25 + 1 = 3, -0.5 / 0.25 + 1 = -1.
  EXPECT_EQ(StoredValues(*m.FindTensor("weight")), (std::vector<int64_t>{3, -1}));
  EXPECT_EQ(*m.FindTensor("bias"), Tensor::FromFloats({2}, {1.5f, -2.0f}));
  EXPECT_EQ(m.tensors().size(), 2u);
  EXPECT_EQ(m.FindAttribute("weight_qscheme"), nullptr);
  EXPECT_EQ(m.FindAttribute("weight_dtype"), nullptr);
  EXPECT_EQ(*m.GetInt("groups"), 1);
  EXPECT_DOUBLE_EQ(*m.GetFloat("scale"), 0.5);
  EXPECT_EQ(*m.GetInt("zero_point"), 3);
  EXPECT_TRUE(m.children().empty());

  const OutputQParams out{1.0, 0, DType::kQUInt8};
  for (const char* tensor : {"weight", "weight_scale", "weight_zero_point"}) {
    auto reference = ReferenceWeighted({0.5f}, {1}, false, 0, {0.25f}, {0}, DType::kQInt8);
    ASSERT_TRUE(reference->RemoveTensor(tensor));
    auto built = BuildNativeWeightedModule("nnq.Linear", *reference, out);
    ASSERT_FALSE(built.ok()) << tensor;
    EXPECT_EQ(built.status().code(), absl::StatusCode::kNotFound) << built.status();
    EXPECT_EQ(built.status().message(),
              std::string("nnqr.Conv2d module has no tensor '") + tensor + "'");
  }
  auto per_channel = ReferenceWeighted({0.5f, 0.5f}, {2}, true, 0, {0.25f, 0.5f}, {0, 0},
                                       DType::kQInt8);
  ASSERT_TRUE(per_channel->RemoveTensor("weight_axis"));
  auto built = BuildNativeWeightedModule("nnq.Linear", *per_channel, out);
  ASSERT_FALSE(built.ok());
  EXPECT_EQ(built.status().message(), "nnqr.Conv2d module has no tensor 'weight_axis'");

  auto no_qscheme = ReferenceWeighted({0.5f}, {1}, false, 0, {0.25f}, {0}, DType::kQInt8);
  ASSERT_TRUE(no_qscheme->RemoveAttribute("weight_qscheme"));
  built = BuildNativeWeightedModule("nnq.Linear", *no_qscheme, out);
  ASSERT_FALSE(built.ok());
  EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(built.status().message().find("'weight_qscheme' must be a string"),
            absl::string_view::npos)
      << built.status();
}

// The native module's field lists, in order: the reference's attributes without the
// weight quantization ones, then scale and zero_point appended -- or, where the
// reference already has them, set in their places -- and the tensors weight, bias. (The
// model file keeps this order, so the CLI's output depends on it.)
TEST(WeightQuantizationTest, NativeFieldsKeepTheReferenceOrder) {
  auto attribute_names = [](const Module& m) {
    std::vector<std::string> names;
    for (const auto& [name, value] : m.attributes()) names.push_back(name);
    return names;
  };
  auto tensor_names = [](const Module& m) {
    std::vector<std::string> names;
    for (const auto& [name, tensor] : m.tensors()) names.push_back(name);
    return names;
  };
  const OutputQParams out{0.5, 3, DType::kQUInt8};

  auto plain = ReferenceWeighted({0.5f}, {1}, false, 0, {0.25f}, {0}, DType::kQInt8);
  plain->SetAttribute("stride", Argument::Ints({1, 1}));
  auto native = BuildNativeWeightedModule("nnq.Conv2d", *plain, out);
  ASSERT_TRUE(native.ok()) << native.status();
  EXPECT_EQ(attribute_names(**native),
            (std::vector<std::string>{"groups", "stride", "scale", "zero_point"}));
  EXPECT_EQ(*(*native)->FindAttribute("stride"), Argument::Ints({1, 1}));
  EXPECT_EQ(tensor_names(**native), (std::vector<std::string>{"weight"}));

  // A reference that carries scale / zero_point already (before and after the weight
  // quantization attributes) keeps their positions, with the output's values.
  auto with_qparams = std::make_unique<Module>("nnqr.Linear");
  with_qparams->SetTensor("bias", Tensor::FromFloats({1}, {2.0f}));
  with_qparams->SetTensor("weight", Tensor::FromFloats({1}, {0.5f}));
  with_qparams->SetTensor("weight_scale", Tensor::FromFloats({1}, {0.25f}));
  with_qparams->SetTensor("weight_zero_point", Tensor::FromInt64s({1}, {0}));
  with_qparams->SetAttribute("zero_point", Argument::Int(9));
  with_qparams->SetAttribute("weight_qscheme", Argument::String("torch.per_tensor_affine"));
  with_qparams->SetAttribute("in_features", Argument::Int(1));
  with_qparams->SetAttribute("weight_dtype", Argument::Dtype(DType::kQInt8));
  with_qparams->SetAttribute("scale", Argument::Float(7.0));
  native = BuildNativeWeightedModule("nnq.Linear", *with_qparams, out);
  ASSERT_TRUE(native.ok()) << native.status();
  EXPECT_EQ(attribute_names(**native),
            (std::vector<std::string>{"zero_point", "in_features", "scale"}));
  EXPECT_EQ(*(*native)->GetInt("zero_point"), 3);
  EXPECT_DOUBLE_EQ(*(*native)->GetFloat("scale"), 0.5);
  // weight first, then bias, whatever the reference's order.
  EXPECT_EQ(tensor_names(**native), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(*(*native)->FindTensor("bias"), Tensor::FromFloats({1}, {2.0f}));
}

}  // namespace
}  // namespace fuselage
