// quantize_per_tensor / quantize_per_channel / dequantize: hand-checked values and
// PyTorch 1.13 goldens (tests/runtime/testdata/quantized/quantize.txt).
#include "runtime/quantized/quantize.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "tests/runtime/quantized/golden_reader.h"

namespace fuselage {
namespace quantized {
namespace {

std::vector<int64_t> Ints(const Tensor& t) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(IntAt(t, i));
  return out;
}

std::vector<float> Floats(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

TEST(QuantizePerTensorTest, RoundsHalfToEvenAndClamps) {
  // x / 0.5 = 0.5, 1.5, -0.5, 2.5, 200, -200 -> 0, 2, -0, 2 (half to even), 200, -200.
  const Tensor x = Tensor::FromFloats({6}, {0.25f, 0.75f, -0.25f, 1.25f, 100.f, -100.f});
  auto q = QuantizePerTensor(x, 0.5, 10, DType::kQUInt8);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->dtype(), DType::kQUInt8);
  EXPECT_EQ(q->qparams(), QuantParams::PerTensor(0.5, 10));
  EXPECT_EQ(Ints(*q), (std::vector<int64_t>{10, 12, 10, 12, 210, 0}));

  auto dq = Dequantize(*q);
  ASSERT_TRUE(dq.ok()) << dq.status();
  EXPECT_EQ(dq->dtype(), DType::kFloat32);
  EXPECT_EQ(Floats(*dq), (std::vector<float>{0.f, 1.f, 0.f, 1.f, 100.f, -5.f}));
}

TEST(QuantizePerTensorTest, QInt8AndQInt32Ranges) {
  const Tensor x = Tensor::FromFloats({3}, {-1000.f, 1000.f, 3.f});
  auto q8 = QuantizePerTensor(x, 1.0, -1, DType::kQInt8);
  ASSERT_TRUE(q8.ok()) << q8.status();
  EXPECT_EQ(Ints(*q8), (std::vector<int64_t>{-128, 127, 2}));
  auto q32 = QuantizePerTensor(x, 0.25, 5, DType::kQInt32);
  ASSERT_TRUE(q32.ok()) << q32.status();
  EXPECT_EQ(Ints(*q32), (std::vector<int64_t>{-3995, 4005, 17}));
}

TEST(QuantizePerChannelTest, EachChannelItsOwnParameters) {
  // Shape [2, 2], axis 1: column 0 scale 0.5 zp 0, column 1 scale 0.1 zp 3.
  const Tensor x = Tensor::FromFloats({2, 2}, {1.0f, 0.2f, -0.75f, -0.1f});
  auto q = QuantizePerChannel(x, {0.5, 0.1}, {0, 3}, 1, DType::kQInt8);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->qparams().scheme, QScheme::kPerChannelAffine);
  // 1.0/0.5 = 2; 0.2/0.1 = 2 (+3); -0.75/0.5 = -1.5 -> -2; -0.1/0.1 = -1 (+3).
  EXPECT_EQ(Ints(*q), (std::vector<int64_t>{2, 5, -2, 2}));
  auto dq = Dequantize(*q);
  ASSERT_TRUE(dq.ok()) << dq.status();
  EXPECT_FLOAT_EQ(dq->data<float>()[2], -1.0f);
  EXPECT_FLOAT_EQ(dq->data<float>()[3], -0.1f);
}

TEST(QuantizeErrorsTest, NameOpAndField) {
  const Tensor x = Tensor::FromFloats({2}, {1.f, 2.f});
  auto zero_scale = QuantizePerTensor(x, 0.0, 0, DType::kQUInt8);
  ASSERT_FALSE(zero_scale.ok());
  EXPECT_EQ(zero_scale.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(zero_scale.status().message().find("quantize_per_tensor: scale"), std::string::npos)
      << zero_scale.status();

  auto bad_zp = QuantizePerTensor(x, 1.0, 300, DType::kQUInt8);
  ASSERT_FALSE(bad_zp.ok());
  EXPECT_NE(bad_zp.status().message().find("zero_point"), std::string::npos);

  auto bad_dtype = QuantizePerTensor(x, 1.0, 0, DType::kFloat32);
  ASSERT_FALSE(bad_dtype.ok());
  EXPECT_NE(bad_dtype.status().message().find("dtype"), std::string::npos);

  auto q = QuantizePerTensor(x, 1.0, 0, DType::kQUInt8);
  ASSERT_TRUE(q.ok());
  auto requantize = QuantizePerTensor(*q, 1.0, 0, DType::kQUInt8);
  ASSERT_FALSE(requantize.ok());
  EXPECT_NE(requantize.status().message().find("input has dtype torch.quint8"),
            std::string::npos)
      << requantize.status();

  auto dq_float = Dequantize(x);
  ASSERT_FALSE(dq_float.ok());
  EXPECT_NE(dq_float.status().message().find("dequantize: input"), std::string::npos)
      << dq_float.status();

  auto wrong_count = QuantizePerChannel(x, {1.0, 1.0, 1.0}, {0, 0, 0}, 0, DType::kQInt8);
  ASSERT_FALSE(wrong_count.ok());
  EXPECT_NE(wrong_count.status().message().find("expected 2"), std::string::npos)
      << wrong_count.status();
  auto bad_axis = QuantizePerChannel(x, {1.0, 1.0}, {0, 0}, 1, DType::kQInt8);
  EXPECT_FALSE(bad_axis.ok());
}

TEST(QuantizeGoldenTest, MatchesPyTorch) {
  auto cases = ReadGoldenFile("tests/runtime/testdata/quantized/quantize.txt");
  ASSERT_TRUE(cases.ok()) << cases.status();
  ASSERT_EQ(cases->size(), 7u);
  for (const GoldenCase& c : *cases) {
    SCOPED_TRACE(c.name);
    const Tensor& expected = c.tensor("q");
    absl::StatusOr<Tensor> q;
    if (expected.qparams().scheme == QScheme::kPerTensorAffine) {
      q = QuantizePerTensor(c.tensor("x"), c.number("scale"),
                            static_cast<int64_t>(c.number("zero_point")), expected.dtype());
    } else {
      q = QuantizePerChannel(c.tensor("x"), expected.qparams().scales,
                             expected.qparams().zero_points, expected.qparams().axis,
                             expected.dtype());
    }
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_TRUE(SameQuantized(*q, expected));
    auto dq = Dequantize(expected);
    ASSERT_TRUE(dq.ok()) << dq.status();
    // Dequantize is bitwise equal to PyTorch's float output.
    EXPECT_EQ(dq->bytes(), c.tensor("dq").bytes());
  }
}

// x.to(torch.float16), values worked by hand: float16 has 10 mantissa bits, so between 1
// and 2 its step is 2^-10; halfway values round to the even neighbour; past 65504 (its
// largest finite value) a value rounds to infinity from the tie at 65520 on, or
// saturates (the fp16 weight prepack's clamp); below 2^-14 the step is 2^-24.
TEST(CastToFloat16Test, RoundsToNearestEvenOverflowsAndSaturates) {
  const float step = 1.0f / 1024;
  EXPECT_EQ(RoundToFloat16(1.0f + step / 2), 1.0f);                     // tie, 1.0 even
  EXPECT_EQ(RoundToFloat16(1.0f + 3 * step / 2), 1.0f + 2 * step);      // tie, up to even
  EXPECT_EQ(RoundToFloat16(1.0f + 0.6f * step), 1.0f + step);           // nearest
  EXPECT_EQ(RoundToFloat16(-1.0f - 0.6f * step), -1.0f - step);
  EXPECT_EQ(RoundToFloat16(65519.0f), 65504.0f);
  EXPECT_TRUE(std::isinf(RoundToFloat16(65520.0f)));
  EXPECT_TRUE(std::isinf(RoundToFloat16(-1e6f)) && RoundToFloat16(-1e6f) < 0);
  EXPECT_EQ(RoundToFloat16(1e6f, /*saturate=*/true), 65504.0f);
  EXPECT_EQ(RoundToFloat16(3.0f / 16777216.0f), 3.0f / 16777216.0f);   // subnormal, exact
  EXPECT_EQ(RoundToFloat16(2.5f / 16777216.0f), 2.0f / 16777216.0f);   // subnormal tie
  EXPECT_TRUE(std::isnan(RoundToFloat16(std::nanf(""))));

  auto y = CastToFloat16(Tensor::FromFloats({2, 2}, {1.0f + step / 2, 65520.0f, 0.1f, -2.0f}));
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->dtype(), DType::kFloat32);  // carried as float32
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{2, 2}));
  const std::vector<float> v = Floats(*y);
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_TRUE(std::isinf(v[1]));
  EXPECT_EQ(v[2], 0.0999755859375f);  // 0.1 in float16: 1638 * 2^-14
  EXPECT_EQ(v[3], -2.0f);
  EXPECT_FALSE(CastToFloat16(Tensor::FromInt64s({1}, {1})).ok());
}

}  // namespace
}  // namespace quantized
}  // namespace fuselage
