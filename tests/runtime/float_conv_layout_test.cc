// Float convolutions run in oneDNN's channel-blocked layouts between the caller's NCHW
// buffers, through a plan cached per geometry (runtime/onednn/onednn.h, "Float
// convolutions go further"). Whatever layout and kernel a plan picks (blocked 16 or 8,
// plain source for few channels, padded channel blocks, oneDNN's own choice), the result
// must be the convolution: here against a direct double-precision sum, for shapes that
// steer each choice, and bit-identical on a second call served by the cached plan.
#include <cmath>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include <omp.h>

#include "gtest/gtest.h"
#include "runtime/float_conv.h"
#include "runtime/float_conv_nd.h"
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

int64_t Product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t d : v) p *= d;
  return p;
}

struct Case {
  std::string name;
  std::vector<int64_t> input;   // [N, C, *S]
  std::vector<int64_t> weight;  // [O, C / groups, *K]
  int64_t stride, padding, dilation, groups;
  bool bias;
};

// The direct definition: out[n, o, p] = bias[o] + sum over the group's channels c and
// kernel offsets k of in[n, c, p * stride - padding + k * dilation] * w[o, c, k], in double.
std::vector<double> Reference(const Case& c, const std::vector<float>& x,
                              const std::vector<float>& w, const std::vector<float>& b,
                              std::vector<int64_t>* out_shape) {
  const size_t dims = c.input.size() - 2;
  const int64_t N = c.input[0], C = c.input[1], O = c.weight[0], CG = c.weight[1];
  std::vector<int64_t> in_size(c.input.begin() + 2, c.input.end());
  std::vector<int64_t> k_size(c.weight.begin() + 2, c.weight.end());
  std::vector<int64_t> o_size(dims);
  for (size_t d = 0; d < dims; ++d) {
    o_size[d] = (in_size[d] + 2 * c.padding - c.dilation * (k_size[d] - 1) - 1) / c.stride + 1;
  }
  *out_shape = {N, O};
  out_shape->insert(out_shape->end(), o_size.begin(), o_size.end());
  const int64_t pixels = Product(o_size), taps = Product(k_size), in_pixels = Product(in_size);
  const int64_t og = O / c.groups;
  std::vector<double> out(N * O * pixels);
  std::vector<int64_t> op(dims), kp(dims);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t o = 0; o < O; ++o) {
      const int64_t group = o / og;
      for (int64_t p = 0; p < pixels; ++p) {
        for (int64_t r = p, d = dims; d-- > 0;) op[d] = r % o_size[d], r /= o_size[d];
        double sum = c.bias ? b[o] : 0.0;
        for (int64_t cg = 0; cg < CG; ++cg) {
          const int64_t ch = group * CG + cg;
          for (int64_t k = 0; k < taps; ++k) {
            for (int64_t r = k, d = dims; d-- > 0;) kp[d] = r % k_size[d], r /= k_size[d];
            int64_t offset = 0;
            bool inside = true;
            for (size_t d = 0; d < dims; ++d) {
              const int64_t i = op[d] * c.stride - c.padding + kp[d] * c.dilation;
              inside = inside && i >= 0 && i < in_size[d];
              offset = offset * in_size[d] + i;
            }
            if (!inside) continue;
            sum += static_cast<double>(x[(n * C + ch) * in_pixels + offset]) *
                   w[(o * CG + cg) * taps + k];
          }
        }
        out[(n * O + o) * pixels + p] = sum;
      }
    }
  }
  return out;
}

absl::StatusOr<Tensor> RunConv(const Case& c, const Tensor& x, const Tensor& w,
                               const Tensor* bias) {
  const size_t dims = c.input.size() - 2;
  if (dims == 2) {
    Conv2dParams p;
    p.stride = {c.stride, c.stride};
    p.padding = {c.padding, c.padding};
    p.dilation = {c.dilation, c.dilation};
    p.groups = c.groups;
    return Conv2d(x, w, bias, p);
  }
  ConvNdParams p;
  p.stride.assign(dims, c.stride);
  p.padding.assign(dims, c.padding);
  p.dilation.assign(dims, c.dilation);
  p.groups = c.groups;
  return ConvNd(x, w, bias, p, static_cast<int>(dims));
}

class FloatConvLayoutTest : public testing::TestWithParam<Case> {};

TEST_P(FloatConvLayoutTest, MatchesTheDirectSumAndRepeatsBitForBit) {
  const Case& c = GetParam();
  const std::vector<float> xv = Seeded(Product(c.input), 1);
  const std::vector<float> wv = Seeded(Product(c.weight), 2);
  const std::vector<float> bv = Seeded(c.weight[0], 3);
  const Tensor x = Tensor::FromFloats(c.input, xv);
  const Tensor w = Tensor::FromFloats(c.weight, wv);
  const Tensor b = Tensor::FromFloats({c.weight[0]}, bv);
  std::vector<int64_t> shape;
  const std::vector<double> expected = Reference(c, xv, wv, bv, &shape);

  const size_t plans_before = onednn::CachedConvPlanCount();
  absl::StatusOr<Tensor> first = RunConv(c, x, w, c.bias ? &b : nullptr);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->shape(), shape);
  const float* got = first->data<float>();
  // Each output sums CG * taps products of values in [-1, 1]: float rounding stays far
  // below 1e-4 of that many terms' scale; a wrong layout or a lost channel block is O(1).
  const double tolerance = 1e-5 * static_cast<double>(c.weight[1] * Product(
                                      std::vector<int64_t>(c.weight.begin() + 2, c.weight.end())));
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_NEAR(got[i], expected[i], tolerance) << c.name << " element " << i;
  }
  EXPECT_EQ(onednn::CachedConvPlanCount(), plans_before + 1) << "one plan per geometry";

  absl::StatusOr<Tensor> again = RunConv(c, x, w, c.bias ? &b : nullptr);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->bytes(), first->bytes()) << "the cached plan computes the same bytes";
  EXPECT_EQ(onednn::CachedConvPlanCount(), plans_before + 1) << "served from the cache";
}

// A oneDNN primitive fixes its work split and thread count when it is created, so a plan
// made at one OpenMP thread count must not serve another: one plan per count, each giving
// the same bytes (the convolution does not depend on the split).
TEST(FloatConvPlanTest, APlanPerThreadCountWithTheSameResult) {
  const Tensor x = Tensor::FromFloats({1, 32, 20, 20}, Seeded(32 * 400, 4));
  const Tensor w = Tensor::FromFloats({32, 32, 3, 3}, Seeded(32 * 32 * 9, 5));
  Conv2dParams p;
  p.padding = {1, 1};
  const int previous = omp_get_max_threads();
  const size_t before = onednn::CachedConvPlanCount();
  omp_set_num_threads(1);
  absl::StatusOr<Tensor> one = Conv2d(x, w, nullptr, p);
  omp_set_num_threads(2);
  absl::StatusOr<Tensor> two = Conv2d(x, w, nullptr, p);
  omp_set_num_threads(previous);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(onednn::CachedConvPlanCount(), before + 2);
  EXPECT_EQ(one->bytes(), two->bytes());
}

// Each case is a geometry of its own (the plan count assertion relies on it).
INSTANTIATE_TEST_SUITE_P(
    Layouts, FloatConvLayoutTest,
    testing::Values(
        // RGB input: 3 channels (a plain source, or a block padded from 3 to 8 / 16).
        Case{"first_layer", {1, 3, 23, 23}, {16, 3, 7, 7}, 2, 3, 1, 1, true},
        // Channel counts that are not a multiple of 16 or 8: padded blocks.
        Case{"padded_blocks", {2, 24, 9, 9}, {20, 24, 3, 3}, 1, 1, 1, 1, true},
        Case{"depthwise_stride2", {1, 48, 13, 13}, {48, 1, 3, 3}, 2, 1, 1, 48, false},
        Case{"grouped", {1, 32, 8, 8}, {64, 8, 3, 3}, 1, 1, 1, 4, true},
        Case{"pointwise_stride2", {1, 64, 10, 10}, {32, 64, 1, 1}, 2, 0, 1, 1, false},
        Case{"dilated", {1, 16, 12, 12}, {16, 16, 3, 3}, 1, 2, 2, 1, true},
        Case{"conv1d", {2, 16, 17}, {24, 16, 5}, 1, 2, 1, 1, true},
        Case{"conv3d", {1, 8, 5, 6, 7}, {16, 8, 3, 3, 3}, 1, 1, 1, 1, true}),
    [](const testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace fuselage
