// DynamicQuantizedLinear / ChooseDynamicQParams / QuantizePerTensorDynamic: hand-checked
// values and errors. (Agreement with PyTorch's quantized::linear_dynamic on random data:
// tests/python/test_dynamic_quantize_fx.py.)
#include "runtime/quantized/dynamic_linear.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace fuselage {
namespace quantized {
namespace {

TEST(ChooseDynamicQParamsTest, HandComputed) {
  // [-1, 3] into [0, 255]: scale 4/255; zero point from min 255/4 = 63.75 -> 64.
  DynamicQParams q = ChooseDynamicQParams(-1.0f, 3.0f, 0, 255, false);
  EXPECT_FLOAT_EQ(q.scale, 4.0f / 255.0f);
  EXPECT_EQ(q.zero_point, 64);
  EXPECT_EQ(q.qmax, 255);
  // reduce_range: [0, 127]; 127/4 = 31.75 -> 32.
  q = ChooseDynamicQParams(-1.0f, 3.0f, 0, 255, true);
  EXPECT_FLOAT_EQ(q.scale, 4.0f / 127.0f);
  EXPECT_EQ(q.zero_point, 32);
  EXPECT_EQ(q.qmax, 127);
  // A range without 0 is widened to hold it; all zeros gives PyTorch's scale 0.1.
  q = ChooseDynamicQParams(2.0f, 5.1f, 0, 255, false);
  EXPECT_FLOAT_EQ(q.scale, 5.1f / 255.0f);
  EXPECT_EQ(q.zero_point, 0);
  q = ChooseDynamicQParams(0.0f, 0.0f, 0, 255, false);
  EXPECT_FLOAT_EQ(q.scale, 0.1f);
  EXPECT_EQ(q.zero_point, 0);
}

TEST(DynamicQuantizedLinearTest, HandComputed) {
  // x in [-1, 2]: scale 3/255, zero point 85; -1, 0 and 2 are exact: q = 0, 85, 255.
  const Tensor x = Tensor::FromFloats({1, 3}, {-1.0f, 0.0f, 2.0f});
  // weight [2, 3] qint8 per tensor, scale 0.5: (2, 4, -2) -> (1, 2, -1); (0, 0, 2) -> (0, 0, 1).
  auto w = Tensor::FromBytes(DType::kQInt8, {2, 3}, std::string("\x02\x04\xfe\x00\x00\x02", 6),
                             QuantParams::PerTensor(0.5, 0));
  ASSERT_TRUE(w.ok());
  const Tensor bias = Tensor::FromFloats({2}, {0.25f, -1.0f});
  auto y = DynamicQuantizedLinear(x, *w, &bias, /*reduce_range=*/false, QuantizedEngine::kOnednn);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(y->shape(), (std::vector<int64_t>{1, 2}));
  // -1*1 + 0*2 + 2*(-1) + 0.25 = -2.75; 2*1 - 1 = 1.
  EXPECT_NEAR(y->data<float>()[0], -2.75f, 1e-5f);
  EXPECT_NEAR(y->data<float>()[1], 1.0f, 1e-5f);
  // Without bias, a [2, 1, 3] input (the leading dims are rows), on QNNPACK, which
  // ignores reduce_range: the same parameters.
  const Tensor x3 = Tensor::FromFloats({2, 1, 3}, {-1.0f, 0.0f, 2.0f, 2.0f, 0.0f, -1.0f});
  auto y3 = DynamicQuantizedLinear(x3, *w, nullptr, true, QuantizedEngine::kQnnpack);
  ASSERT_TRUE(y3.ok()) << y3.status();
  ASSERT_EQ(y3->shape(), (std::vector<int64_t>{2, 1, 2}));
  EXPECT_NEAR(y3->data<float>()[0], -3.0f, 1e-5f);
  EXPECT_NEAR(y3->data<float>()[1], 2.0f, 1e-5f);
  EXPECT_NEAR(y3->data<float>()[2], 3.0f, 1e-5f);
  EXPECT_NEAR(y3->data<float>()[3], -1.0f, 1e-5f);
}

TEST(DynamicQuantizedLinearTest, Errors) {
  auto w = Tensor::FromBytes(DType::kQInt8, {2, 3}, std::string(6, '\x01'),
                             QuantParams::PerTensor(0.5, 0));
  ASSERT_TRUE(w.ok());
  const Tensor wrong_width = Tensor::FromFloats({1, 4}, {1, 2, 3, 4});
  auto y = DynamicQuantizedLinear(wrong_width, *w, nullptr, true, QuantizedEngine::kOnednn);
  ASSERT_FALSE(y.ok());
  EXPECT_NE(std::string(y.status().message()).find("in_features = 3"), std::string::npos);
  const Tensor bad_bias = Tensor::FromFloats({3}, {1, 2, 3});
  const Tensor x = Tensor::FromFloats({1, 3}, {1, 2, 3});
  EXPECT_FALSE(DynamicQuantizedLinear(x, *w, &bad_bias, true, QuantizedEngine::kOnednn).ok());
  EXPECT_FALSE(DynamicQuantizedLinear(x, x, nullptr, true, QuantizedEngine::kOnednn).ok());
}

TEST(Float16DynamicLinearTest, MultipliesInFloat) {
  // The weight comes already rounded to float16 (lowering rounds it): a float matmul.
  const Tensor x = Tensor::FromFloats({2, 2}, {1.0f, 2.0f, -0.5f, 4.0f});
  const Tensor w = Tensor::FromFloats({1, 2}, {0.5f, -0.25f});
  const Tensor bias = Tensor::FromFloats({1}, {1.0f});
  auto y = Float16DynamicLinear(x, w, &bias);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(y->shape(), (std::vector<int64_t>{2, 1}));
  EXPECT_FLOAT_EQ(y->data<float>()[0], 1.0f);     // 0.5 - 0.5 + 1
  EXPECT_FLOAT_EQ(y->data<float>()[1], -0.25f);   // -0.25 - 1 + 1
  EXPECT_FALSE(Float16DynamicLinear(x, bias, nullptr).ok());
}

TEST(QuantizePerTensorDynamicTest, ChoosesFromTheRange) {
  const Tensor x = Tensor::FromFloats({3}, {-1.0f, 0.0f, 3.0f});
  auto q = QuantizePerTensorDynamic(x, DType::kQUInt8, false, QuantizedEngine::kOnednn);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_FLOAT_EQ(static_cast<float>(q->qparams().scales[0]), 4.0f / 255.0f);
  EXPECT_EQ(q->qparams().zero_points[0], 64);
  EXPECT_FALSE(QuantizePerTensorDynamic(x, DType::kFloat32, false, QuantizedEngine::kOnednn).ok());
}

}  // namespace
}  // namespace quantized
}  // namespace fuselage
