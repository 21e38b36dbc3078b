// quantized::QuantizedMatMul (torch.ops.quantized.matmul): a hand-computed product, batch
// broadcasting, saturation and the errors. tests/python/test_quantized_matmul.py checks it
// against PyTorch's own torch.ops.quantized.matmul.
#include "runtime/quantized/matmul.h"

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

TEST(QuantizedMatMulTest, DequantizesMultipliesAndRequantizes) {
  const Tensor a = Q(DType::kQUInt8, {2, 2}, {2, 4, 6, 8}, 0.5, 0);      // [[1, 2], [3, 4]]
  const Tensor b = Q(DType::kQUInt8, {2, 2}, {12, 12, 10, 12}, 0.5, 10);  // [[1, 1], [0, 1]]
  auto y = QuantizedMatMul(a, b, 0.5, 1);
  ASSERT_TRUE(y.ok()) << y.status();
  // [[1, 3], [3, 7]] at scale 0.5, zero point 1.
  EXPECT_EQ(IntValues(*y), (std::vector<int32_t>{3, 7, 7, 15}));
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(y->qparams().zero_points[0], 1);
}

TEST(QuantizedMatMulTest, BroadcastsBatchesAndSaturates) {
  // Two batches of a 1 x 2 row times one shared 2 x 1 column (qint8).
  const Tensor a = Q(DType::kQInt8, {2, 1, 2}, {1, 2, 100, 100}, 1.0, 0);
  const Tensor b = Q(DType::kQInt8, {2, 1}, {3, -1}, 1.0, 0);
  auto y = QuantizedMatMul(a, b, 1.0, 0);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{2, 1, 1}));
  EXPECT_EQ(IntValues(*y), (std::vector<int32_t>{1, 127}));  // 3 - 2 = 1; 200 -> 127
}

TEST(QuantizedMatMulTest, BadOperandsAreClearErrors) {
  const Tensor a = Q(DType::kQUInt8, {2, 3}, {1, 2, 3, 4, 5, 6}, 0.1, 0);
  const Tensor b_signed = Q(DType::kQInt8, {3, 1}, {1, 2, 3}, 0.1, 0);
  auto mixed = QuantizedMatMul(a, b_signed, 0.1, 0);
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(std::string(mixed.status().message()).find("second operand has dtype"),
            std::string::npos)
      << mixed.status();
  const Tensor b_wrong = Q(DType::kQUInt8, {2, 2}, {1, 2, 3, 4}, 0.1, 0);
  auto shapes = QuantizedMatMul(a, b_wrong, 0.1, 0);
  ASSERT_FALSE(shapes.ok());
  EXPECT_NE(std::string(shapes.status().message()).find("quantized matmul"), std::string::npos);
  const Tensor b = Q(DType::kQUInt8, {3, 1}, {1, 2, 3}, 0.1, 0);
  EXPECT_FALSE(QuantizedMatMul(a, b, -1.0, 0).ok());
  EXPECT_FALSE(QuantizedMatMul(a, b, 0.1, 256).ok());
  EXPECT_FALSE(QuantizedMatMul(Tensor::FromFloats({2, 3}, {1, 2, 3, 4, 5, 6}), b, 0.1, 0).ok());
}

}  // namespace
}  // namespace quantized
}  // namespace fuselage
