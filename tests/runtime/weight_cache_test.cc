// The reordered-weight cache of runtime/onednn (onednn.h, "Weight reuse"): a module's
// weights are reordered once, and a cached entry is never used for other values: the
// cached result equals that of an uncached copy of the same bytes, and a weight written
// in place after a call gives the new weights' result.
#include <cstddef>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/float_conv.h"
#include "runtime/onednn/onednn.h"

namespace fuselage {
namespace {

std::vector<float> Seeded(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng);
  return v;
}

Conv2dParams Same3x3() {
  Conv2dParams p;
  p.padding = {1, 1};
  return p;
}

// 64 -> 64 channels: oneDNN picks a blocked weight layout, so the weights are reordered.
constexpr int64_t kChannels = 64;

Tensor Input() { return Tensor::FromFloats({1, kChannels, 8, 8}, Seeded(kChannels * 64, 1)); }

Tensor Weight(uint32_t seed) {
  return Tensor::FromFloats({kChannels, kChannels, 3, 3}, Seeded(kChannels * kChannels * 9, seed));
}

// A tensor with the same values in a buffer of its own (never cached before).
Tensor FreshCopy(const Tensor& t) {
  auto copy = Tensor::FromBytes(t.dtype(), t.shape(), std::string(t.bytes()), t.qparams());
  EXPECT_TRUE(copy.ok());
  return *copy;
}

std::string Conv(const Tensor& x, const Tensor& w) {
  auto y = Conv2d(x, w, nullptr, Same3x3());
  EXPECT_TRUE(y.ok()) << y.status();
  return y.ok() ? std::string(y->bytes()) : "";
}

// Threads reaching a new weight (and a new plan: an input size no other test uses) at
// once, as samples calibrated at once do: each gets the one-thread result, and the cache
// ends with one entry of each, made once while the others waited.
TEST(WeightCacheTest, ThreadsReachingANewWeightTogetherShareOneReorder) {
  const Tensor x = Tensor::FromFloats({1, kChannels, 11, 13}, Seeded(kChannels * 11 * 13, 9));
  const Tensor w = Weight(10);
  const std::string expected = Conv(x, FreshCopy(w));
  const size_t weights_before = onednn::CachedWeightCount();
  const size_t plans_before = onednn::CachedConvPlanCount();
  std::vector<std::string> results(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = Conv(x, w); });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& r : results) EXPECT_EQ(r, expected);
  EXPECT_EQ(onednn::CachedWeightCount(), weights_before + 1);
  EXPECT_EQ(onednn::CachedConvPlanCount(), plans_before);  // FreshCopy's call made it
}

TEST(WeightCacheTest, ReordersAModulesWeightOnceAndReusesIt) {
  const Tensor x = Input();
  const Tensor w = Weight(2);
  const size_t before = onednn::CachedWeightCount();
  const std::string first = Conv(x, w);
  EXPECT_EQ(onednn::CachedWeightCount(), before + 1);
  EXPECT_EQ(Conv(x, w), first);
  EXPECT_EQ(onednn::CachedWeightCount(), before + 1);  // a hit, not a second entry
  // An uncached tensor of the same bytes (a second entry) computes the same.
  EXPECT_EQ(Conv(x, FreshCopy(w)), first);
}

TEST(WeightCacheTest, AWeightWrittenAfterACallGivesTheNewWeightsResult) {
  const Tensor x = Input();
  Tensor w = Weight(3);
  const std::string old_result = Conv(x, w);
  // The cache holds a reference to w's buffer, so this write detaches w (copy-on-write).
  float* data = w.mutable_data<float>();
  for (int64_t i = 0; i < w.numel(); ++i) data[i] = -data[i] * 0.5f;
  const std::string new_result = Conv(x, w);
  EXPECT_NE(new_result, old_result);
  EXPECT_EQ(new_result, Conv(x, FreshCopy(w)));
}

TEST(WeightCacheTest, DistinctWeightsOfTheSameShapeKeepTheirOwnEntries) {
  const Tensor x = Input();
  const Tensor a = Weight(4), b = Weight(5);
  const std::string a_result = Conv(x, FreshCopy(a));
  const std::string b_result = Conv(x, FreshCopy(b));
  ASSERT_NE(a_result, b_result);
  for (int i = 0; i < 2; ++i) {  // alternate, hitting both entries
    EXPECT_EQ(Conv(x, a), a_result);
    EXPECT_EQ(Conv(x, b), b_result);
  }
}

}  // namespace
}  // namespace fuselage
