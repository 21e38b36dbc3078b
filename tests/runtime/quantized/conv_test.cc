// QuantizedConv2d / QuantizedConvAdd2d: hand-checked values, PyTorch 1.13 goldens
// (nnq.Conv2d / nniq.ConvReLU2d, engine onednn: conv.txt, and at requantization ties:
// conv_ties.txt; the reference pattern of ConvAdd2d: conv_add.txt) and errors.
#include "runtime/quantized/conv.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/quantized/quantize.h"
#include "tests/runtime/quantized/golden_reader.h"

namespace fuselage {
namespace quantized {
namespace {

Tensor QU8(std::vector<int64_t> shape, const std::vector<uint8_t>& values, double scale,
           int64_t zp) {
  auto t = Tensor::FromBytes(DType::kQUInt8, std::move(shape),
                             std::string(values.begin(), values.end()),
                             QuantParams::PerTensor(scale, zp));
  EXPECT_TRUE(t.ok());
  return *t;
}

Tensor QI8(std::vector<int64_t> shape, const std::vector<int8_t>& values, QuantParams q) {
  std::string bytes(values.size(), '\0');
  for (size_t i = 0; i < values.size(); ++i) bytes[i] = static_cast<char>(values[i]);
  auto t = Tensor::FromBytes(DType::kQInt8, std::move(shape), bytes, std::move(q));
  EXPECT_TRUE(t.ok());
  return *t;
}

std::vector<int64_t> Ints(const Tensor& t) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(IntAt(t, i));
  return out;
}

Conv2dParams ParamsOf(const GoldenCase& c) {
  Conv2dParams p;
  const int64_t stride = static_cast<int64_t>(c.number("stride"));
  const int64_t padding = static_cast<int64_t>(c.number("padding"));
  const int64_t dilation = static_cast<int64_t>(c.number("dilation"));
  p.stride = {stride, stride};
  p.padding = {padding, padding};
  p.dilation = {dilation, dilation};
  p.groups = static_cast<int64_t>(c.number("groups"));
  return p;
}

// sum((x - x_zp) * (w - w_zp[o])) by direct loops over an NCHW input, the independent
// reference for the oneDNN-computed accumulators below.
std::vector<int64_t> DirectAccumulators(const std::vector<uint8_t>& x, int64_t x_zp,
                                        const std::vector<int64_t>& x_shape,
                                        const std::vector<int8_t>& w,
                                        const std::vector<int64_t>& w_zp,
                                        const std::vector<int64_t>& w_shape,
                                        const Conv2dParams& p) {
  const int64_t n_ = x_shape[0], c_ = x_shape[1], h_ = x_shape[2], w_ = x_shape[3];
  const int64_t o_ = w_shape[0], cg = w_shape[1], kh_ = w_shape[2], kw_ = w_shape[3];
  const int64_t oh_ = (h_ + 2 * p.padding[0] - p.dilation[0] * (kh_ - 1) - 1) / p.stride[0] + 1;
  const int64_t ow_ = (w_ + 2 * p.padding[1] - p.dilation[1] * (kw_ - 1) - 1) / p.stride[1] + 1;
  const int64_t og = o_ / p.groups;
  std::vector<int64_t> acc;
  for (int64_t n = 0; n < n_; ++n) {
    for (int64_t o = 0; o < o_; ++o) {
      for (int64_t oh = 0; oh < oh_; ++oh) {
        for (int64_t ow = 0; ow < ow_; ++ow) {
          int64_t sum = 0;
          for (int64_t ci = 0; ci < cg; ++ci) {
            const int64_t c = (o / og) * cg + ci;
            for (int64_t kh = 0; kh < kh_; ++kh) {
              for (int64_t kw = 0; kw < kw_; ++kw) {
                const int64_t ih = oh * p.stride[0] - p.padding[0] + kh * p.dilation[0];
                const int64_t iw = ow * p.stride[1] - p.padding[1] + kw * p.dilation[1];
                if (ih < 0 || ih >= h_ || iw < 0 || iw >= w_) continue;  // a real zero
                sum += (x[((n * c_ + c) * h_ + ih) * w_ + iw] - x_zp) *
                       (w[((o * cg + ci) * kh_ + kh) * kw_ + kw] - w_zp[o]);
              }
            }
          }
          acc.push_back(sum);
        }
      }
    }
  }
  EXPECT_GT(c_, 0);
  return acc;
}

// Pseudo-random bytes in [lo, hi] (a fixed LCG, so the test is deterministic).
template <typename T>
std::vector<T> Bytes(size_t n, int lo, int hi, uint32_t seed) {
  std::vector<T> v(n);
  for (auto& e : v) {
    seed = seed * 1664525u + 1013904223u;
    e = static_cast<T>(lo + static_cast<int>((seed >> 8) % static_cast<uint32_t>(hi - lo + 1)));
  }
  return v;
}

// A padding that makes a 1.6e9-element output is refused before the accumulators are
// allocated (the tensor limit, Tensor::kMaxElements = 2^28), naming the shape.
TEST(QuantizedConv2dTest, OutputPastTheTensorLimitIsRefusedBeforeAllocating) {
  const Tensor x = QU8({1, 4, 1, 1}, {10, 10, 10, 10}, 0.5, 10);
  const Tensor w =
      QI8({4, 4, 1, 1}, std::vector<int8_t>(16, 1), QuantParams::PerTensor(0.25, 0));
  Conv2dParams p;
  p.padding = {10000, 10000};
  auto y = QuantizedConv2d(x, w, nullptr, p, 0.125, 3, /*relu=*/false);
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(y.status().message().find(
                "shape [1, 4, 20001, 20001] has more than 268435456 elements"),
            std::string::npos)
      << y.status();
}

TEST(QuantizedConv2dTest, HandComputed1x1And2x2) {
  // x: 1x1x2x2 quint8 values 12, 14, 8, 10 with scale 0.5, zp 10 -> real 1, 2, -1, 0.
  const Tensor x = QU8({1, 1, 2, 2}, {12, 14, 8, 10}, 0.5, 10);
  // weight: 2 output channels, 1x1 kernels 2 and -3 (scale 0.25) -> real 0.5 and -0.75.
  const Tensor w = QI8({2, 1, 1, 1}, {2, -3}, QuantParams::PerTensor(0.25, 0));
  const Tensor bias = Tensor::FromFloats({2}, {0.25f, 0.0f});
  // Output scale 0.125, zp 3. Channel 0: real 0.5*x + 0.25 = 0.75, 1.25, -0.25, 0.25
  // -> /0.125 = 6, 10, -2, 2 -> +3 = 9, 13, 1, 5. Channel 1: -0.75*x = -0.75, -1.5,
  // 0.75, 0 -> -6, -12, 6, 0 -> -3, -9, 9, 3 -> clamped at 0: 0, 0, 9, 3.
  auto y = QuantizedConv2d(x, w, &bias, Conv2dParams{}, 0.125, 3, /*relu=*/false);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{1, 2, 2, 2}));
  EXPECT_EQ(y->qparams(), QuantParams::PerTensor(0.125, 3));
  EXPECT_EQ(Ints(*y), (std::vector<int64_t>{9, 13, 1, 5, 0, 0, 9, 3}));
  // With relu, values below the zero point (real < 0) become the zero point.
  auto yr = QuantizedConv2d(x, w, &bias, Conv2dParams{}, 0.125, 3, /*relu=*/true);
  ASSERT_TRUE(yr.ok()) << yr.status();
  EXPECT_EQ(Ints(*yr), (std::vector<int64_t>{9, 13, 3, 5, 3, 3, 9, 3}));

  // A 2x2 kernel of ones over the same input with padding 0: sum = 1 + 2 - 1 + 0 = 2
  // real (acc = 8 in units of 0.5 * 0.25), / 0.125 = 16 -> + 3 = 19.
  const Tensor ones = QI8({1, 1, 2, 2}, {4, 4, 4, 4}, QuantParams::PerTensor(0.25, 0));
  auto sum = QuantizedConv2d(x, ones, nullptr, Conv2dParams{}, 0.125, 3, false);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(Ints(*sum), (std::vector<int64_t>{19}));
}

TEST(QuantizedConv2dTest, MatchesPyTorchGoldens) {
  auto cases = ReadGoldenFile("tests/runtime/testdata/quantized/conv.txt");
  ASSERT_TRUE(cases.ok()) << cases.status();
  ASSERT_EQ(cases->size(), 5u);
  for (const GoldenCase& c : *cases) {
    SCOPED_TRACE(c.name);
    const Tensor& expected = c.tensor("y");
    auto y = QuantizedConv2d(c.tensor("x"), c.tensor("weight"), c.find_tensor("bias"),
                             ParamsOf(c), c.number("scale"),
                             static_cast<int64_t>(c.number("zero_point")),
                             c.number("relu") != 0);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(SameQuantized(*y, expected));  // exact: same integers
  }
}

TEST(QuantizedConv2dTest, TieRoundsHalfToEvenAfterAddingTheZeroPoint) {
  // onednn adds the output zero point in float before rounding (output_requantizer.h).
  // x = 3, 5 (scale 0.5, zp 0), w = 1 (scale 0.25), output scale 0.25: every scale is a
  // power of two, so v = acc * 0.5 = 1.5, 2.5 exactly; + zp 11 = 12.5, 13.5 -> half to
  // even: 12, 14. Rounding first and adding the zero point after would give 13, 13.
  const Tensor x = QU8({1, 1, 1, 2}, {3, 5}, 0.5, 0);
  const Tensor w = QI8({1, 1, 1, 1}, {1}, QuantParams::PerTensor(0.25, 0));
  auto y = QuantizedConv2d(x, w, nullptr, Conv2dParams{}, 0.25, 11, /*relu=*/false);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(Ints(*y), (std::vector<int64_t>{12, 14}));
}

TEST(QuantizedConv2dTest, MatchesPyTorchOnednnAtTies) {
  // conv_ties.txt: outputs on or within float ulps of a .5 tie (see the generator).
  auto cases = ReadGoldenFile("tests/runtime/testdata/quantized/conv_ties.txt");
  ASSERT_TRUE(cases.ok()) << cases.status();
  ASSERT_EQ(cases->size(), 8u);
  int64_t fbgemm_differs = 0, int_zp_differs = 0, double_recip_differs = 0;
  for (const GoldenCase& c : *cases) {
    SCOPED_TRACE(c.name);
    auto y = QuantizedConv2d(c.tensor("x"), c.tensor("weight"), c.find_tensor("bias"),
                             ParamsOf(c), c.number("scale"),
                             static_cast<int64_t>(c.number("zero_point")),
                             c.number("relu") != 0);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(SameQuantized(*y, c.tensor("y")));  // exact, ties included
    fbgemm_differs += static_cast<int64_t>(c.number("fbgemm_differs"));
    int_zp_differs += static_cast<int64_t>(c.number("int_zp_differs"));
    double_recip_differs += static_cast<int64_t>(c.number("double_recip_differs"));
  }
  // The goldens separate the formula from its near misses (counted by the generator).
  EXPECT_GT(fbgemm_differs, 0);
  EXPECT_GT(int_zp_differs, 0);
  EXPECT_GT(double_recip_differs, 0);
}

TEST(QuantizedConvAdd2dTest, HandComputed) {
  // Conv part as in HandComputed1x1And2x2 (channel 0 only): real 0.75, 1.25, -0.25, 0.25.
  const Tensor x = QU8({1, 1, 2, 2}, {12, 14, 8, 10}, 0.5, 10);
  const Tensor w = QI8({1, 1, 1, 1}, {2}, QuantParams::PerTensor(0.25, 0));
  const Tensor bias = Tensor::FromFloats({1}, {0.25f});
  // extra: quint8 1, 0, 0, 0 with scale 0.25, zp 2 -> real -0.25, -0.5, -0.5, -0.5.
  const Tensor extra = QU8({1, 1, 2, 2}, {1, 0, 0, 0}, 0.25, 2);
  // sum = 0.5, 0.75, -0.75, -0.25 -> / 0.25 = 2, 3, -3, -1 -> + 4 = 6, 7, 1, 3.
  auto y = QuantizedConvAdd2d(x, extra, w, &bias, Conv2dParams{}, 0.25, 4, false);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(Ints(*y), (std::vector<int64_t>{6, 7, 1, 3}));
  auto yr = QuantizedConvAdd2d(x, extra, w, &bias, Conv2dParams{}, 0.25, 4, true);
  ASSERT_TRUE(yr.ok()) << yr.status();
  EXPECT_EQ(Ints(*yr), (std::vector<int64_t>{6, 7, 4, 4}));
}

TEST(QuantizedConvAdd2dTest, MatchesPyTorchReferencePattern) {
  auto cases = ReadGoldenFile("tests/runtime/testdata/quantized/conv_add.txt");
  ASSERT_TRUE(cases.ok()) << cases.status();
  ASSERT_EQ(cases->size(), 2u);
  for (const GoldenCase& c : *cases) {
    SCOPED_TRACE(c.name);
    auto y = QuantizedConvAdd2d(c.tensor("x"), c.tensor("extra"), c.tensor("weight"),
                                c.find_tensor("bias"), ParamsOf(c), c.number("scale"),
                                static_cast<int64_t>(c.number("zero_point")),
                                c.number("relu") != 0);
    ASSERT_TRUE(y.ok()) << y.status();
    // Exact except where the float sum is within 1e-3 step of a half ("ambiguous"):
    // PyTorch's float conv sums in its own order, ours scales an exact accumulator.
    EXPECT_TRUE(SameQuantized(*y, c.tensor("y"), &c.tensor("ambiguous")));
  }
}

// With power-of-two scales the requantization is exact: v = acc / 256 (a dyadic
// rational, exact in float and double), so this checks oneDNN's accumulators (grouped,
// strided, padded, dilated) against the direct loops.
TEST(QuantizedConv2dTest, GroupedStridedPaddedAccumulatorsMatchDirectLoops) {
  const std::vector<int64_t> x_shape = {2, 4, 7, 6}, w_shape = {6, 2, 3, 2};
  const auto x = Bytes<uint8_t>(2 * 4 * 7 * 6, 0, 255, 1);
  const auto w = Bytes<int8_t>(6 * 2 * 3 * 2, -128, 127, 2);
  Conv2dParams p;
  p.stride = {2, 1};
  p.padding = {1, 2};
  p.dilation = {1, 2};
  p.groups = 2;
  const std::vector<int64_t> zero(6, 0);
  auto y = QuantizedConv2d(QU8(x_shape, x, 0.5, 3),
                           QI8(w_shape, w, QuantParams::PerTensor(1.0 / 1024, 0)), nullptr, p,
                           0.125, 128, false);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{2, 6, 4, 8}));
  // 0.5 / 1024 / 0.125 = 1 / 256; out = clamp(nearbyint(acc / 256 + 128), 0, 255).
  const std::vector<int64_t> acc = DirectAccumulators(x, 3, x_shape, w, zero, w_shape, p);
  std::vector<int64_t> expected;
  int64_t inside = 0;
  for (int64_t a : acc) {
    const int64_t q = static_cast<int64_t>(std::nearbyint(a / 256.0 + 128));
    expected.push_back(std::min<int64_t>(std::max<int64_t>(q, 0), 255));
    inside += q > 0 && q < 255;
  }
  EXPECT_EQ(Ints(*y), expected);
  EXPECT_GT(inside, 100);  // mostly unsaturated: the comparison sees real accumulators
}

TEST(QuantizedConv2dTest, NonZeroWeightZeroPointsPerChannel) {
  // oneDNN takes no weight zero point; the kernel folds it in. Small values keep the
  // accumulators inside quint8 so every output is compared unsaturated.
  const std::vector<int64_t> x_shape = {1, 2, 4, 4}, w_shape = {4, 1, 2, 2};
  const auto x = Bytes<uint8_t>(32, 5, 12, 3);
  const auto w = Bytes<int8_t>(16, -3, 4, 4);
  const std::vector<int64_t> w_zp = {0, 2, -3, 1};
  Conv2dParams p;
  p.padding = {1, 1};
  p.groups = 2;
  auto y = QuantizedConv2d(
      QU8(x_shape, x, 0.5, 8),
      QI8(w_shape, w, QuantParams::PerChannel({0.25, 0.25, 0.25, 0.25}, w_zp, 0)), nullptr, p,
      0.125, 128, false);
  ASSERT_TRUE(y.ok()) << y.status();
  std::vector<int64_t> expected;
  for (int64_t a : DirectAccumulators(x, 8, x_shape, w, w_zp, w_shape, p)) {
    ASSERT_GT(a + 128, 0);
    ASSERT_LT(a + 128, 255);
    expected.push_back(a + 128);
  }
  EXPECT_EQ(Ints(*y), expected);
}

// PyTorch 1.13's onednn engine caches its conv primitive without the output zero point
// and, called again with only that changed, computes with the stale one. Here the two
// calls share every shape and parameter but the output zero point.
TEST(QuantizedConv2dTest, OnlyTheOutputZeroPointChangesBetweenCalls) {
  const std::vector<int64_t> x_shape = {1, 3, 5, 5}, w_shape = {2, 3, 3, 3};
  const auto x = Bytes<uint8_t>(75, 0, 20, 5);
  const auto w = Bytes<int8_t>(54, -2, 2, 6);
  const std::vector<int64_t> zero(2, 0);
  Conv2dParams p;
  p.padding = {1, 1};
  const Tensor qx = QU8(x_shape, x, 0.5, 10);
  const Tensor qw = QI8(w_shape, w, QuantParams::PerTensor(0.25, 0));
  const std::vector<int64_t> acc = DirectAccumulators(x, 10, x_shape, w, zero, w_shape, p);
  for (int64_t zp : {100, 40, 100, 160}) {
    auto y = QuantizedConv2d(qx, qw, nullptr, p, 0.125, zp, false);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(y->qparams().zero_points[0], zp);
    std::vector<int64_t> expected;
    for (int64_t a : acc) {
      expected.push_back(std::min<int64_t>(std::max<int64_t>(a + zp, 0), 255));
    }
    EXPECT_EQ(Ints(*y), expected) << "output zero point " << zp;
  }
}

// The output scale is part of oneDNN 2.6's conv primitive (no run-time scales), so it is
// part of the cached plan's key (runtime/onednn/onednn.h): calls that differ only in it
// must each get their own. x_scale * w_scale / out_scale is a power of two here, so the
// requantized value is exact: acc * multiplier + zero point, saturated.
TEST(QuantizedConv2dTest, OnlyTheOutputScaleChangesBetweenCalls) {
  const std::vector<int64_t> x_shape = {1, 3, 5, 5}, w_shape = {2, 3, 3, 3};
  const auto x = Bytes<uint8_t>(75, 0, 20, 5);
  const auto w = Bytes<int8_t>(54, -2, 2, 6);
  const std::vector<int64_t> zero(2, 0);
  Conv2dParams p;
  p.padding = {1, 1};
  const Tensor qx = QU8(x_shape, x, 0.5, 10);
  const Tensor qw = QI8(w_shape, w, QuantParams::PerTensor(0.25, 0));
  const std::vector<int64_t> acc = DirectAccumulators(x, 10, x_shape, w, zero, w_shape, p);
  for (double out_scale : {0.125, 0.0625, 0.03125, 0.125}) {
    auto y = QuantizedConv2d(qx, qw, nullptr, p, out_scale, 100, false);
    ASSERT_TRUE(y.ok()) << y.status();
    const int64_t multiplier = static_cast<int64_t>(0.125 / out_scale);
    std::vector<int64_t> expected;
    for (int64_t a : acc) {
      expected.push_back(std::min<int64_t>(std::max<int64_t>(a * multiplier + 100, 0), 255));
    }
    EXPECT_EQ(Ints(*y), expected) << "output scale " << out_scale;
  }
}

TEST(QuantizedConv2dTest, BadInputErrorsNameOpAndField) {
  const Tensor x = QU8({1, 2, 3, 3}, std::vector<uint8_t>(18, 10), 0.5, 10);
  const Tensor w = QI8({4, 2, 1, 1}, std::vector<int8_t>(8, 1), QuantParams::PerTensor(0.1, 0));
  auto expect_error = [](const absl::StatusOr<Tensor>& r, const std::string& needle) {
    ASSERT_FALSE(r.ok()) << "expected an error containing '" << needle << "'";
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status();
  };
  // A float input.
  const Tensor float_x = Tensor::FromFloats({1, 2, 1, 1}, {1.f, 2.f});
  expect_error(QuantizedConv2d(float_x, w, nullptr, {}, 0.1, 0, false),
               "quantized conv2d: input is a torch.float32 tensor");
  // Wrong channel count: weight wants 2 * groups input channels.
  const Tensor w3 = QI8({4, 3, 1, 1}, std::vector<int8_t>(12, 1), QuantParams::PerTensor(0.1, 0));
  expect_error(QuantizedConv2d(x, w3, nullptr, {}, 0.1, 0, false), "input has 2 channels");
  // Zero output scale.
  expect_error(QuantizedConv2d(x, w, nullptr, {}, 0.0, 0, false), "output scale");
  // Zero weight scale.
  const Tensor w0 = QI8({4, 2, 1, 1}, std::vector<int8_t>(8, 1), QuantParams::PerTensor(0.0, 0));
  expect_error(QuantizedConv2d(x, w0, nullptr, {}, 0.1, 0, false), "weight scale");
  // Bias of the wrong size.
  const Tensor bias3 = Tensor::FromFloats({3}, {1.f, 2.f, 3.f});
  expect_error(QuantizedConv2d(x, w, &bias3, {}, 0.1, 0, false), "bias has shape [3]");
  // A quint8 weight.
  expect_error(QuantizedConv2d(x, x, nullptr, {}, 0.1, 0, false), "expected torch.qint8");
  // Extra input of the wrong shape.
  expect_error(QuantizedConvAdd2d(x, x, w, nullptr, {}, 0.1, 0, true), "extra input has shape");
  // Kernel larger than the input.
  const Tensor w_big = QI8({1, 2, 5, 5}, std::vector<int8_t>(50, 1), QuantParams::PerTensor(0.1, 0));
  expect_error(QuantizedConv2d(x, w_big, nullptr, {}, 0.1, 0, false), "non-empty output");
}

}  // namespace
}  // namespace quantized
}  // namespace fuselage
