// DynamicQuantizedLinear's kept oneDNN state (runtime/onednn/onednn.h, MatMul /
// MatMulInt8ToFloat): the primitive is kept per shape and the int8 weight packed once, so
// calls of different row counts M on one weight reuse it; each result must still equal a
// reference computed here by hand (PyTorch's linear_dynamic arithmetic: x quantized with
// ChooseDynamicQParams into [0, 127], exact int32 accumulators, float(acc) * (x_scale *
// w_scale[n]) + bias[n]), for an owned weight (packed and cached), a borrowed one (read
// in place, never cached) and weights with zero points (the int32 path).
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "graph/tensor.h"
#include "runtime/onednn/onednn.h"
#include "runtime/quantized/dynamic_linear.h"

namespace fuselage {
namespace quantized {
namespace {

constexpr int64_t kIn = 96, kOut = 80;

std::vector<float> Seeded(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng);
  return v;
}

std::string WeightBytes(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> u(-128, 127);
  std::string bytes(static_cast<size_t>(kIn * kOut), '\0');
  for (char& c : bytes) c = static_cast<char>(static_cast<int8_t>(u(rng)));
  return bytes;
}

QuantParams PerChannel(bool with_zero_points) {
  std::vector<double> scales;
  std::vector<int64_t> zero_points;
  for (int64_t n = 0; n < kOut; ++n) {
    scales.push_back(0.002 + 0.0001 * static_cast<double>(n));
    zero_points.push_back(with_zero_points ? (n % 5) - 2 : 0);
  }
  return QuantParams::PerChannel(scales, zero_points, 0);
}

// The reference, by hand: float ops rounded one by one, exact integer accumulation.
std::vector<float> Reference(const Tensor& x, const Tensor& w, const std::vector<float>& bias) {
  const float* xs = x.data<float>();
  float lo = 0.0f, hi = 0.0f;
  for (int64_t i = 0; i < x.numel(); ++i) {
    lo = std::min(lo, xs[i]);
    hi = std::max(hi, xs[i]);
  }
  const DynamicQParams q = ChooseDynamicQParams(lo, hi, 0, 255, /*reduce_range=*/true);
  const int64_t rows = x.numel() / kIn;
  const int8_t* ws = static_cast<const int8_t*>(w.raw_data());
  std::vector<float> y(static_cast<size_t>(rows * kOut));
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int64_t> qx(kIn);
    for (int64_t k = 0; k < kIn; ++k) {
      const float v = std::nearbyint(std::fma(xs[r * kIn + k], 1.0f / q.scale,
                                              static_cast<float>(q.zero_point)));
      qx[k] = static_cast<int64_t>(std::min(std::max(v, 0.0f), static_cast<float>(q.qmax)));
    }
    for (int64_t n = 0; n < kOut; ++n) {
      int64_t acc = 0;
      for (int64_t k = 0; k < kIn; ++k) {
        acc += (qx[k] - q.zero_point) * (ws[n * kIn + k] - w.qparams().zero_points[n]);
      }
      const float scale = q.scale * static_cast<float>(w.qparams().scales[n]);
      const float v = static_cast<float>(acc) * scale;
      y[r * kOut + n] = v + bias[n];
    }
  }
  return y;
}

void ExpectMatchesReference(const Tensor& x, const Tensor& w, const std::vector<float>& bias) {
  const Tensor b = Tensor::FromFloats({kOut}, bias);
  auto y = DynamicQuantizedLinear(x, w, &b, /*reduce_range=*/true, QuantizedEngine::kOnednn);
  ASSERT_TRUE(y.ok()) << y.status();
  const std::vector<float> want = Reference(x, w, bias);
  ASSERT_EQ(y->numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(y->data<float>()[i], want[i], 1e-5f * std::max(1.0f, std::abs(want[i])))
        << "x " << x.ShapeString() << ", element " << i;
  }
}

Tensor Input(std::vector<int64_t> shape, uint32_t seed) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  return Tensor::FromFloats(shape, Seeded(static_cast<size_t>(numel), seed, -2.0f, 3.0f));
}

TEST(DynamicLinearCacheTest, OwnedWeightCallsOfDifferentRowCountsMatchTheReference) {
  auto w = Tensor::FromBytes(DType::kQInt8, {kOut, kIn}, WeightBytes(1), PerChannel(false));
  ASSERT_TRUE(w.ok());
  ASSERT_FALSE(w->borrows_bytes());
  const std::vector<float> bias = Seeded(kOut, 2, -1.0f, 1.0f);
  const size_t plans_before = onednn::CachedMatMulPlanCount();
  ExpectMatchesReference(Input({1, kIn}, 3), *w, bias);      // M = 1 (an RNN step)
  ExpectMatchesReference(Input({5, 7, kIn}, 4), *w, bias);   // M = 35
  const size_t plans = onednn::CachedMatMulPlanCount();
  EXPECT_GE(plans, plans_before + 2);
  const size_t weights = onednn::CachedWeightCount();
  // Again, other values: the kept primitives and packed weight serve them.
  ExpectMatchesReference(Input({1, kIn}, 5), *w, bias);
  ExpectMatchesReference(Input({5, 7, kIn}, 6), *w, bias);
  EXPECT_EQ(onednn::CachedMatMulPlanCount(), plans);
  EXPECT_EQ(onednn::CachedWeightCount(), weights);
}

TEST(DynamicLinearCacheTest, BorrowedWeightIsReadInPlaceAndMatchesTheReference) {
  auto owner = std::make_shared<std::string>(WeightBytes(7));
  auto w = Tensor::BorrowBytes(DType::kQInt8, {kOut, kIn}, *owner, owner, PerChannel(false));
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->borrows_bytes());
  const std::vector<float> bias = Seeded(kOut, 8, -1.0f, 1.0f);
  const size_t weights = onednn::CachedWeightCount();
  ExpectMatchesReference(Input({3, kIn}, 9), *w, bias);
  // The owner writes its bytes (as a torch user may): the next call sees the new values.
  for (char& c : *owner) c = static_cast<char>(-static_cast<int8_t>(c) / 2);
  ExpectMatchesReference(Input({3, kIn}, 9), *w, bias);
  ExpectMatchesReference(Input({1, kIn}, 10), *w, bias);
  EXPECT_EQ(onednn::CachedWeightCount(), weights);
}

TEST(DynamicLinearCacheTest, WeightZeroPointsTakeTheInt32PathAndMatchTheReference) {
  auto w = Tensor::FromBytes(DType::kQInt8, {kOut, kIn}, WeightBytes(11), PerChannel(true));
  ASSERT_TRUE(w.ok());
  const std::vector<float> bias = Seeded(kOut, 12, -1.0f, 1.0f);
  ExpectMatchesReference(Input({1, kIn}, 13), *w, bias);
  ExpectMatchesReference(Input({4, kIn}, 14), *w, bias);
}

}  // namespace
}  // namespace quantized
}  // namespace fuselage
