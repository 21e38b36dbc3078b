// quantized::QuantizedPrelu (nnq.PReLU / quantized::prelu): hand-computed values of ATen's
// integer formula, the per-channel broadcast along dimension 1, and the errors.
// tests/python/test_quantized_prelu.py checks it against PyTorch's own nnq.PReLU.
#include "runtime/quantized/prelu.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/quantized/quant_math.h"

namespace fuselage {
namespace quantized {
namespace {

Tensor Q(DType dtype, std::vector<int64_t> shape, const std::vector<int32_t>& values,
         double scale, int64_t zp) {
  return FromIntValues(dtype, std::move(shape), QuantParams::PerTensor(scale, zp), values);
}

TEST(QuantizedPreluTest, MatchesTheIntegerFormulaByHand) {
  // x: scale 0.1, zp 128; channel 0 holds 130, 120 (0.2, -0.8), channel 1 140, 110.
  const Tensor x = Q(DType::kQUInt8, {1, 2, 1, 2}, {130, 120, 140, 110}, 0.1, 128);
  // Slopes (64 - 100) * 0.01 = -0.36 and (200 - 100) * 0.01 = 1.0; the weight's "1" is
  // quantize(1.0) = 200, so (one - w_zp) = 100. Multiplier 0.1 * 0.01 / 0.05 = 0.02.
  const Tensor w = Q(DType::kQUInt8, {2}, {64, 200}, 0.01, 100);
  auto y = QuantizedPrelu(x, w, 0.05, 10);
  ASSERT_TRUE(y.ok()) << y.status();
  // 130: 2 * 100 * 0.02 = 4 -> 14.   120: -8 * -36 * 0.02 = 5.76 -> 6 -> 16.
  // 140: 12 * 100 * 0.02 = 24 -> 34. 110: -18 * 100 * 0.02 = -36 -> -26, clamped to 0.
  EXPECT_EQ(IntValues(*y), (std::vector<int32_t>{14, 16, 34, 0}));
  EXPECT_EQ(y->qparams().scales[0], 0.05);
  EXPECT_EQ(y->qparams().zero_points[0], 10);
  EXPECT_EQ(y->shape(), x.shape());
}

TEST(QuantizedPreluTest, ChannelSlopesGoAlongDimensionOneForEveryBatchAndPosition) {
  // 2 x 2 x 3: every element is one step below the zero point (x = -1 at scale 1).
  const Tensor x = Q(DType::kQUInt8, {2, 2, 3}, std::vector<int32_t>(12, 9), 1.0, 10);
  // Slopes 2 and 5 (scale 1, zp 0: PyTorch's from_reference weight qparams).
  const Tensor w = Q(DType::kQUInt8, {2}, {2, 5}, 1.0, 0);
  auto y = QuantizedPrelu(x, w, 1.0, 100);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(IntValues(*y),
            (std::vector<int32_t>{98, 98, 98, 95, 95, 95, 98, 98, 98, 95, 95, 95}));
}

TEST(QuantizedPreluTest, OneSlopeAppliesEverywhere) {
  const Tensor x = Q(DType::kQInt8, {3}, {-4, 0, 6}, 0.5, 0);
  const Tensor w = Q(DType::kQInt8, {1}, {-2}, 0.25, 0);  // slope -0.5; "1" = 4
  auto y = QuantizedPrelu(x, w, 0.5, 0);
  ASSERT_TRUE(y.ok()) << y.status();
  // -4 * -2 * (0.5 * 0.25 / 0.5) = 2;  6 * 4 * 0.25 = 6.
  EXPECT_EQ(IntValues(*y), (std::vector<int32_t>{2, 0, 6}));
}

TEST(QuantizedPreluTest, BadInputsAreClearErrors) {
  const Tensor x = Q(DType::kQUInt8, {1, 2, 2}, {1, 2, 3, 4}, 0.1, 0);
  const Tensor three = Q(DType::kQUInt8, {3}, {1, 1, 1}, 1.0, 0);
  auto wrong_count = QuantizedPrelu(x, three, 0.1, 0);
  ASSERT_FALSE(wrong_count.ok());
  EXPECT_NE(std::string(wrong_count.status().message()).find("weight has 3 entries"),
            std::string::npos)
      << wrong_count.status();

  const Tensor signed_w = Q(DType::kQInt8, {2}, {1, 1}, 1.0, 0);
  auto wrong_dtype = QuantizedPrelu(x, signed_w, 0.1, 0);
  ASSERT_FALSE(wrong_dtype.ok());
  EXPECT_NE(std::string(wrong_dtype.status().message()).find("weight has dtype"),
            std::string::npos)
      << wrong_dtype.status();

  const Tensor w = Q(DType::kQUInt8, {2}, {1, 1}, 1.0, 0);
  EXPECT_FALSE(QuantizedPrelu(x, w, 0.0, 0).ok());    // output scale
  EXPECT_FALSE(QuantizedPrelu(x, w, 0.1, 300).ok());  // output zero point
  EXPECT_FALSE(QuantizedPrelu(Q(DType::kQUInt8, {}, {3}, 0.1, 0), w, 0.1, 0).ok());
  EXPECT_FALSE(QuantizedPrelu(Tensor::FromFloats({1, 2}, {1.0f, 2.0f}), w, 0.1, 0).ok());
}

}  // namespace
}  // namespace quantized
}  // namespace fuselage
