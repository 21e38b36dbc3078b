// MaxPool2d (runtime/float_ops.h) against the definition, element by element: for each
// output, the maximum over the window's positions inside the input (padding never wins),
// or NaN if the window holds a NaN, as PyTorch's `val > max || isnan(val)` gives. The
// kernel splits each window into rows then columns and skips bounds checks in the
// interior; these shapes put windows on every border, with stride, dilation, padding
// and ceil_mode, and NaNs on borders and inside.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/float_ops.h"

namespace fuselage {
namespace {

struct PoolCase {
  std::string name;
  int64_t h, w, kh, kw, sh, sw, ph, pw, dh, dw;
  bool ceil_mode;
};

int64_t OutputSize(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil) {
  const int64_t span = in + 2 * pad - dil * (k - 1) - 1;
  int64_t out = (ceil ? (span + stride - 1) / stride : span / stride) + 1;
  if (ceil && (out - 1) * stride >= in + pad) --out;
  return out;
}

class MaxPool2dTest : public testing::TestWithParam<PoolCase> {};

TEST_P(MaxPool2dTest, EqualsTheWindowMaximum) {
  const PoolCase& c = GetParam();
  const int64_t planes = 3;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(planes * c.h * c.w);
  for (float& v : x) v = u(rng);
  // NaNs: a corner of plane 1 and an interior point of plane 2.
  x[1 * c.h * c.w + 0] = std::numeric_limits<float>::quiet_NaN();
  x[2 * c.h * c.w + (c.h / 2) * c.w + c.w / 2] = std::numeric_limits<float>::quiet_NaN();
  Pool2dParams p;
  p.kernel_size = {c.kh, c.kw};
  p.stride = {c.sh, c.sw};
  p.padding = {c.ph, c.pw};
  p.dilation = {c.dh, c.dw};
  p.ceil_mode = c.ceil_mode;
  absl::StatusOr<Tensor> y = MaxPool2d(Tensor::FromFloats({1, planes, c.h, c.w}, x), p);
  ASSERT_TRUE(y.ok()) << y.status();
  const int64_t oh = OutputSize(c.h, c.kh, c.ph, c.sh, c.dh, c.ceil_mode);
  const int64_t ow = OutputSize(c.w, c.kw, c.pw, c.sw, c.dw, c.ceil_mode);
  ASSERT_EQ(y->shape(), (std::vector<int64_t>{1, planes, oh, ow}));
  const float* got = y->data<float>();
  int nans = 0;
  for (int64_t n = 0; n < planes; ++n) {
    for (int64_t i = 0; i < oh; ++i) {
      for (int64_t j = 0; j < ow; ++j) {
        float best = -std::numeric_limits<float>::infinity();
        bool nan = false;
        for (int64_t a = 0; a < c.kh; ++a) {
          for (int64_t b = 0; b < c.kw; ++b) {
            const int64_t r = i * c.sh - c.ph + a * c.dh, s = j * c.sw - c.pw + b * c.dw;
            if (r < 0 || r >= c.h || s < 0 || s >= c.w) continue;
            const float v = x[(n * c.h + r) * c.w + s];
            nan = nan || std::isnan(v);
            if (v > best) best = v;
          }
        }
        const float g = got[(n * oh + i) * ow + j];
        if (nan) {
          EXPECT_TRUE(std::isnan(g)) << c.name << " plane " << n << " at " << i << "," << j;
          ++nans;
        } else {
          EXPECT_EQ(g, best) << c.name << " plane " << n << " at " << i << "," << j;
        }
      }
    }
  }
  EXPECT_GE(nans, 2) << "both planted NaNs reach an output";
}

INSTANTIATE_TEST_SUITE_P(
    Windows, MaxPool2dTest,
    testing::Values(PoolCase{"resnet_stem", 17, 19, 3, 3, 2, 2, 1, 1, 1, 1, false},
                    PoolCase{"no_padding", 9, 8, 2, 2, 2, 2, 0, 0, 1, 1, false},
                    PoolCase{"stride1_wide", 7, 12, 3, 5, 1, 1, 1, 2, 1, 1, false},
                    PoolCase{"dilated", 13, 14, 3, 3, 1, 2, 1, 1, 2, 3, false},
                    PoolCase{"ceil_mode", 10, 11, 3, 3, 2, 2, 0, 1, 1, 1, true},
                    PoolCase{"kernel_as_wide_as_input", 5, 6, 2, 6, 1, 1, 1, 3, 1, 1, false}),
    [](const testing::TestParamInfo<PoolCase>& info) { return info.param.name; });

}  // namespace
}  // namespace fuselage
