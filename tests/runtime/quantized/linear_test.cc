// QuantizedLinear: hand-checked values, PyTorch 1.13 goldens (nnq.Linear /
// nniq.LinearReLU, engine onednn: linear.txt, and at requantization ties:
// linear_ties.txt) and errors.
#include "runtime/quantized/linear.h"

#include <cstdint>
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

// A [3, 2, 37] quint8 input through weights with non-zero per-channel zero points (which
// oneDNN's matmul does not take; the kernel folds them in), and the same call again with
// only the output zero point changed. Power-of-two scales make the requantization exact:
// out = acc + zp, checked against direct loops.
TEST(QuantizedLinearTest, WeightZeroPointsAndOutputZeroPointChangeMatchDirectLoops) {
  const int64_t rows = 6, in = 37, out = 5;
  std::string x_bytes, w_bytes;
  uint32_t seed = 11;
  auto next = [&seed](int lo, int hi) {
    seed = seed * 1664525u + 1013904223u;
    return lo + static_cast<int>((seed >> 8) % static_cast<uint32_t>(hi - lo + 1));
  };
  for (int64_t i = 0; i < rows * in; ++i) x_bytes.push_back(static_cast<char>(next(17, 25)));
  for (int64_t i = 0; i < out * in; ++i) w_bytes.push_back(static_cast<char>(next(-2, 3)));
  // All-zero weight zero points take oneDNN's fused requantization, the others the
  // accumulate-then-requantize path.
  for (const std::vector<int64_t>& w_zp :
       {std::vector<int64_t>{0, 0, 0, 0, 0}, std::vector<int64_t>{0, 1, -1, 2, 0}}) {
    auto qx = Tensor::FromBytes(DType::kQUInt8, {3, 2, in}, x_bytes,
                                QuantParams::PerTensor(0.5, 21));
    auto qw = Tensor::FromBytes(DType::kQInt8, {out, in}, w_bytes,
                                QuantParams::PerChannel(std::vector<double>(out, 0.25), w_zp, 0));
    ASSERT_TRUE(qx.ok() && qw.ok());
    std::vector<int64_t> acc;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t n = 0; n < out; ++n) {
        int64_t sum = 0;
        for (int64_t k = 0; k < in; ++k) {
          sum += (static_cast<uint8_t>(x_bytes[r * in + k]) - 21) *
                 (static_cast<int8_t>(w_bytes[n * in + k]) - w_zp[n]);
        }
        acc.push_back(sum);
      }
    }
    for (int64_t zp : {128, 90, 128}) {
      auto y = QuantizedLinear(*qx, *qw, nullptr, 0.125, zp, false);
      ASSERT_TRUE(y.ok()) << y.status();
      EXPECT_EQ(y->shape(), (std::vector<int64_t>{3, 2, out}));
      std::vector<int64_t> expected;
      for (int64_t a : acc) {
        ASSERT_GT(a + zp, 0);
        ASSERT_LT(a + zp, 255);
        expected.push_back(a + zp);
      }
      EXPECT_EQ(Ints(*y), expected) << "output zero point " << zp;
    }
  }
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
