// EmbeddingByte / EmbeddingBagByte: hand-checked values (sum and mean, offsets with and
// without the last one, 2-D bags, per-sample weights, an empty bag) and errors.
// (Agreement with PyTorch's nnq.Embedding / nnq.EmbeddingBag on random data:
// tests/python/test_weight_only_embedding_fx.py.)
#include "runtime/quantized/embedding.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace fuselage {
namespace quantized {
namespace {

// 3 rows of 2: row r reads scale[r] * q + bias[r], bias = -zero_point * scale.
// Row 0: scale 0.5, zp 2 -> q (2, 6) = (0, 2). Row 1: scale 1, zp 0 -> q (1, 3) = (1, 3).
// Row 2: scale 0.25, zp 4 -> q (0, 8) = (-1, 1).
struct Weight {
  Tensor values = *Tensor::FromBytes(DType::kUInt8, {3, 2}, std::string("\x02\x06\x01\x03\x00\x08", 6),
                                     QuantParams());
  Tensor scales = Tensor::FromFloats({3}, {0.5f, 1.0f, 0.25f});
  Tensor zero_points = Tensor::FromFloats({3}, {2.0f, 0.0f, 4.0f});
  RowwiseQuantizedWeight view() const { return {&values, &scales, &zero_points}; }
};

std::vector<float> Floats(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

TEST(EmbeddingByteTest, LooksUpRows) {
  Weight w;
  const Tensor indices = Tensor::FromInt64s({2, 2}, {2, 0, 1, 1});
  auto y = EmbeddingByte(w.view(), indices);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(Floats(*y), (std::vector<float>{-1, 1, 0, 2, 1, 3, 1, 3}));
  const Tensor bad = Tensor::FromInt64s({1}, {3});
  EXPECT_FALSE(EmbeddingByte(w.view(), bad).ok());
}

TEST(EmbeddingBagByteTest, SumMeanOffsetsAndWeights) {
  Weight w;
  const Tensor indices = Tensor::FromInt64s({4}, {0, 1, 2, 1});
  const Tensor offsets = Tensor::FromInt64s({3}, {0, 2, 2});  // bags (0, 1), (), (2, 1)
  auto sum = EmbeddingBagByte(w.view(), indices, &offsets, EmbeddingBagMode::kSum, nullptr,
                              false);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(Floats(*sum), (std::vector<float>{1, 5, 0, 0, 0, 4}));
  auto mean = EmbeddingBagByte(w.view(), indices, &offsets, EmbeddingBagMode::kMean, nullptr,
                               false);
  ASSERT_TRUE(mean.ok()) << mean.status();
  EXPECT_EQ(Floats(*mean), (std::vector<float>{0.5, 2.5, 0, 0, 0, 2}));
  // include_last_offset: the last offset ends the last bag (here: drops index 3).
  const Tensor last = Tensor::FromInt64s({3}, {0, 2, 3});
  auto with_last = EmbeddingBagByte(w.view(), indices, &last, EmbeddingBagMode::kSum, nullptr,
                                    true);
  ASSERT_TRUE(with_last.ok()) << with_last.status();
  EXPECT_EQ(Floats(*with_last), (std::vector<float>{1, 5, -1, 1}));
  const Tensor weights = Tensor::FromFloats({4}, {2.0f, 1.0f, 1.0f, 0.5f});
  auto weighted = EmbeddingBagByte(w.view(), indices, &offsets, EmbeddingBagMode::kSum,
                                   &weights, false);
  ASSERT_TRUE(weighted.ok()) << weighted.status();
  EXPECT_EQ(Floats(*weighted), (std::vector<float>{1, 7, 0, 0, -0.5, 2.5}));
  EXPECT_FALSE(EmbeddingBagByte(w.view(), indices, &offsets, EmbeddingBagMode::kMean, &weights,
                                false).ok());
}

TEST(EmbeddingBagByteTest, TwoDimensionalBagsAndErrors) {
  Weight w;
  const Tensor bags = Tensor::FromInt64s({2, 2}, {0, 2, 1, 1});
  auto y = EmbeddingBagByte(w.view(), bags, nullptr, EmbeddingBagMode::kMean, nullptr, false);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(Floats(*y), (std::vector<float>{-0.5, 1.5, 1, 3}));
  const Tensor flat = Tensor::FromInt64s({2}, {0, 1});
  EXPECT_FALSE(
      EmbeddingBagByte(w.view(), flat, nullptr, EmbeddingBagMode::kSum, nullptr, false).ok());
  const Tensor decreasing = Tensor::FromInt64s({2}, {1, 0});
  EXPECT_FALSE(EmbeddingBagByte(w.view(), flat, &decreasing, EmbeddingBagMode::kSum, nullptr,
                                false).ok());
}

}  // namespace
}  // namespace quantized
}  // namespace fuselage
