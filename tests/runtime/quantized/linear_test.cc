// QuantizedLinear: hand-checked values, PyTorch 1.13 goldens (nnq.Linear /
// nniq.LinearReLU, engine onednn: linear.txt, and at requantization ties:
// linear_ties.txt) and errors.
#include "runtime/quantized/linear.h"

#include <string>
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

TEST(QuantizedLinearTest, HandComputed) {
  // x: [2, 3] quint8, scale 0.5, zp 1: rows (3, 1, 5) -> real (1, 0, 2) and (1, 1, 1) -> 0.
  auto x = Tensor::FromBytes(DType::kQUInt8, {2, 3}, std::string("\x03\x01\x05\x01\x01\x01", 6),
                             QuantParams::PerTensor(0.5, 1));
  ASSERT_TRUE(x.ok());
  // weight [2, 3] qint8 per channel: row 0 (1, 2, 3) scale 0.5 -> (0.5, 1, 1.5);
  // row 1 (-2, 0, 2) scale 0.25 -> (-0.5, 0, 0.5).
  auto w = Tensor::FromBytes(DType::kQInt8, {2, 3}, std::string("\x01\x02\x03\xfe\x00\x02", 6),
                             QuantParams::PerChannel({0.5, 0.25}, {0, 0}, 0));
  ASSERT_TRUE(w.ok());
  const Tensor bias = Tensor::FromFloats({2}, {0.5f, -1.0f});
  // Row 0: 0.5*1 + 1.5*2 + 0.5 = 4; -0.5*1 + 0.5*2 - 1 = -0.5.
  // Row 1: bias only: 0.5 and -1. Output scale 0.25, zp 10: 26, 8, 12, 6.
  auto y = QuantizedLinear(*x, *w, &bias, 0.25, 10, false);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(Ints(*y), (std::vector<int64_t>{26, 8, 12, 6}));
  auto yr = QuantizedLinear(*x, *w, &bias, 0.25, 10, true);
  ASSERT_TRUE(yr.ok()) << yr.status();
  EXPECT_EQ(Ints(*yr), (std::vector<int64_t>{26, 10, 12, 10}));
}

TEST(QuantizedLinearTest, MatchesPyTorchGoldens) {
  auto cases = ReadGoldenFile("tests/runtime/testdata/quantized/linear.txt");
  ASSERT_TRUE(cases.ok()) << cases.status();
  ASSERT_EQ(cases->size(), 3u);
  for (const GoldenCase& c : *cases) {
    SCOPED_TRACE(c.name);
    auto y = QuantizedLinear(c.tensor("x"), c.tensor("weight"), c.find_tensor("bias"),
                             c.number("scale"), static_cast<int64_t>(c.number("zero_point")),
                             c.number("relu") != 0);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(SameQuantized(*y, c.tensor("y")));
  }
}

TEST(QuantizedLinearTest, MatchesPyTorchOnednnAtTies) {
  // linear_ties.txt: outputs on or within float ulps of a .5 tie (see the generator).
  auto cases = ReadGoldenFile("tests/runtime/testdata/quantized/linear_ties.txt");
  ASSERT_TRUE(cases.ok()) << cases.status();
  ASSERT_EQ(cases->size(), 4u);
  int64_t fbgemm_differs = 0, int_zp_differs = 0;
  for (const GoldenCase& c : *cases) {
    SCOPED_TRACE(c.name);
    auto y = QuantizedLinear(c.tensor("x"), c.tensor("weight"), c.find_tensor("bias"),
                             c.number("scale"), static_cast<int64_t>(c.number("zero_point")),
                             c.number("relu") != 0);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(SameQuantized(*y, c.tensor("y")));  // exact, ties included
    fbgemm_differs += static_cast<int64_t>(c.number("fbgemm_differs"));
    int_zp_differs += static_cast<int64_t>(c.number("int_zp_differs"));
  }
  // The goldens separate the formula from its near misses (counted by the generator).
  EXPECT_GT(fbgemm_differs, 0);
  EXPECT_GT(int_zp_differs, 0);
}

// 2^14 rows times 2^15 output features: 2^29 accumulators, past the tensor limit (2^28),
// refused before they are allocated, from inputs of 16 KiB and 32 KiB.
TEST(QuantizedLinearTest, OutputPastTheTensorLimitIsRefusedBeforeAllocating) {
  auto x = Tensor::FromBytes(DType::kQUInt8, {1 << 14, 1}, std::string(1 << 14, '\x01'),
                             QuantParams::PerTensor(0.5, 1));
  auto w = Tensor::FromBytes(DType::kQInt8, {1 << 15, 1}, std::string(1 << 15, '\x01'),
                             QuantParams::PerTensor(0.5, 0));
  ASSERT_TRUE(x.ok() && w.ok());
  auto y = QuantizedLinear(*x, *w, nullptr, 0.25, 10, false);
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(y.status().message().find("shape [16384, 32768] has more than 268435456 elements"),
            std::string::npos)
      << y.status();
}

TEST(QuantizedLinearTest, BadInputErrors) {
  auto x = Tensor::FromBytes(DType::kQUInt8, {1, 3}, std::string(3, '\x01'),
                             QuantParams::PerTensor(0.5, 1));
  auto w = Tensor::FromBytes(DType::kQInt8, {2, 4}, std::string(8, '\x01'),
                             QuantParams::PerTensor(0.5, 0));
  ASSERT_TRUE(x.ok() && w.ok());
  auto mismatch = QuantizedLinear(*x, *w, nullptr, 0.1, 0, false);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("in_features = 4"), std::string::npos)
      << mismatch.status();
  const Tensor float_x = Tensor::FromFloats({1, 4}, {1.f, 2.f, 3.f, 4.f});
  auto float_input = QuantizedLinear(float_x, *w, nullptr, 0.1, 0, false);
  ASSERT_FALSE(float_input.ok());
  EXPECT_NE(float_input.status().message().find("quantized linear: input"), std::string::npos);
  auto quint8_weight = QuantizedLinear(*x, *x, nullptr, 0.1, 0, true);
  ASSERT_FALSE(quint8_weight.ok());
  EXPECT_NE(quint8_weight.status().message().find("quantized linear_relu: weight"),
            std::string::npos)
      << quint8_weight.status();
}

}  // namespace
}  // namespace quantized
}  // namespace fuselage
