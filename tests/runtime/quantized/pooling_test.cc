// Quantized max / avg / adaptive avg pooling: hand-checked values, PyTorch 1.13 goldens
// (unary.txt: F.max_pool2d, F.avg_pool2d, F.adaptive_avg_pool2d on quantized tensors)
// and errors.
#include "runtime/quantized/pooling.h"

#include <cstdint>
#include <random>
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

Tensor Plane3x3() {
  // 1x1x3x3 quint8, zp 4: 1 2 3 / 4 5 6 / 7 8 9.
  auto t = Tensor::FromBytes(DType::kQUInt8, {1, 1, 3, 3},
                             std::string("\x01\x02\x03\x04\x05\x06\x07\x08\x09", 9),
                             QuantParams::PerTensor(0.5, 4));
  EXPECT_TRUE(t.ok());
  return *t;
}

TEST(QuantizedPoolTest, HandComputed) {
  const Tensor x = Plane3x3();
  Pool2dParams p;
  p.kernel_size = {2, 2};
  p.stride = {1, 1};
  auto mx = QuantizedMaxPool2d(x, p);
  ASSERT_TRUE(mx.ok()) << mx.status();
  EXPECT_EQ(mx->qparams(), x.qparams());
  EXPECT_EQ(Ints(*mx), (std::vector<int64_t>{5, 6, 8, 9}));

  // Averages of 2x2 windows: (1+2+4+5)/4 = 3, 4, 6, 7.
  auto avg = QuantizedAvgPool2d(x, p);
  ASSERT_TRUE(avg.ok()) << avg.status();
  EXPECT_EQ(Ints(*avg), (std::vector<int64_t>{3, 4, 6, 7}));

  // Padding 1, kernel 2, stride 2, count_include_pad: windows {1}, {2,3}, {4,7}, {5,6,8,9}
  // each divided by 4 after subtracting the zero point per in-bounds element:
  // (1-4)/4 + 4 = 3.25 -> 3; (5-8)/4 + 4 = 3.25 -> 3; (11-8)/4 + 4 = 4.75 -> 5;
  // (28-16)/4 + 4 = 7.
  p.padding = {1, 1};
  p.stride = {2, 2};
  auto padded = QuantizedAvgPool2d(x, p);
  ASSERT_TRUE(padded.ok()) << padded.status();
  EXPECT_EQ(Ints(*padded), (std::vector<int64_t>{3, 3, 5, 7}));
  // Without counting the padding: 1, 2.5 -> 2 (half to even), 5.5 -> 6, 7.
  p.count_include_pad = false;
  auto unpadded = QuantizedAvgPool2d(x, p);
  ASSERT_TRUE(unpadded.ok()) << unpadded.status();
  EXPECT_EQ(Ints(*unpadded), (std::vector<int64_t>{1, 2, 6, 7}));

  // Global adaptive average: 45 / 9 = 5.
  auto global = QuantizedAdaptiveAvgPool2d(x, {1, 1});
  ASSERT_TRUE(global.ok()) << global.status();
  EXPECT_EQ(global->shape(), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(Ints(*global), (std::vector<int64_t>{5}));
}

TEST(QuantizedPoolTest, MatchesPyTorchGoldens) {
  auto cases = ReadGoldenFile("tests/runtime/testdata/quantized/unary.txt");
  ASSERT_TRUE(cases.ok()) << cases.status();
  int checked = 0;
  for (const GoldenCase& c : *cases) {
    SCOPED_TRACE(c.name);
    const std::string& op = c.text("op");
    absl::StatusOr<Tensor> y;
    if (op == "adaptive_avg_pool" || op == "adaptive_avg_pool_global") {
      y = QuantizedAdaptiveAvgPool2d(c.tensor("x"), {static_cast<int64_t>(c.number("out_h")),
                                                     static_cast<int64_t>(c.number("out_w"))});
    } else if (op.rfind("max_pool", 0) == 0 || op.rfind("avg_pool", 0) == 0) {
      Pool2dParams p;
      const int64_t k = static_cast<int64_t>(c.number("kernel"));
      const int64_t s = static_cast<int64_t>(c.number("stride"));
      const int64_t pad = static_cast<int64_t>(c.number("padding"));
      p.kernel_size = {k, k};
      p.stride = {s, s};
      p.padding = {pad, pad};
      p.ceil_mode = c.number("ceil_mode") != 0;
      if (op.rfind("max_pool", 0) == 0) {
        const int64_t d = static_cast<int64_t>(c.number("dilation"));
        p.dilation = {d, d};
        y = QuantizedMaxPool2d(c.tensor("x"), p);
      } else {
        p.count_include_pad = c.number("count_include_pad") != 0;
        const int64_t divisor = static_cast<int64_t>(c.number("divisor_override"));
        if (divisor != 0) p.divisor_override = divisor;
        y = QuantizedAvgPool2d(c.tensor("x"), p);
      }
    } else {
      continue;  // relu / hardtanh: elementwise_test
    }
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(SameQuantized(*y, c.tensor("y")));
    ++checked;
  }
  EXPECT_EQ(checked, 14);
}

// `t` [N, C, H, W] with its bytes moved to [N, H, W, C] (shape and qparams kept), index
// by index: what a channels-last value holds.
Tensor ChannelsLastCopy(const Tensor& t) {
  const int64_t n = t.shape()[0], c = t.shape()[1], h = t.shape()[2], w = t.shape()[3];
  std::string bytes(static_cast<size_t>(t.numel()), '\0');
  const auto* src = static_cast<const char*>(t.raw_data());
  for (int64_t in = 0; in < n; ++in) {
    for (int64_t ic = 0; ic < c; ++ic) {
      for (int64_t p = 0; p < h * w; ++p) {
        bytes[(in * h * w + p) * c + ic] = src[(in * c + ic) * h * w + p];
      }
    }
  }
  return *Tensor::FromBytes(t.dtype(), t.shape(), bytes, t.qparams());
}

TEST(QuantizedPoolTest, ChannelsLastMaxPoolIsTheRowMajorOneInThatLayout) {
  struct Case {
    std::array<int64_t, 2> kernel, stride, padding, dilation;
    bool ceil_mode;
  };
  const Case cases[] = {
      {{3, 3}, {2, 2}, {1, 1}, {1, 1}, false},  // resnet's stem
      {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true},   // ceil mode: a last window past the edge
      {{2, 3}, {1, 2}, {0, 1}, {2, 1}, false},  // dilated, uneven
      {{1, 1}, {1, 1}, {0, 0}, {1, 1}, true},
  };
  std::mt19937 gen(11);
  for (DType dtype : {DType::kQUInt8, DType::kQInt8}) {
    std::string bytes(2 * 19 * 7 * 8, '\0');
    for (char& b : bytes) b = static_cast<char>(gen());
    const Tensor x =
        *Tensor::FromBytes(dtype, {2, 19, 7, 8}, bytes, QuantParams::PerTensor(0.1, 0));
    for (const Case& c : cases) {
      SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " kernel " << c.kernel[0] << "x"
                                      << c.kernel[1] << " ceil " << c.ceil_mode);
      Pool2dParams p;
      p.kernel_size = c.kernel;
      p.stride = c.stride;
      p.padding = c.padding;
      p.dilation = c.dilation;
      p.ceil_mode = c.ceil_mode;
      auto row_major = QuantizedMaxPool2d(x, p);
      ASSERT_TRUE(row_major.ok()) << row_major.status();
      auto channels_last = QuantizedMaxPool2dChannelsLast(ChannelsLastCopy(x), p);
      ASSERT_TRUE(channels_last.ok()) << channels_last.status();
      EXPECT_EQ(*channels_last, ChannelsLastCopy(*row_major));
    }
  }
  // A 3-D input has no channels-last layout.
  auto three_d = QuantizedMaxPool2dChannelsLast(Plane3x3().Reshaped({1, 3, 3}).value(), {});
  ASSERT_FALSE(three_d.ok());
  EXPECT_NE(three_d.status().message().find("expected a 4-D quint8 / qint8 tensor"),
            std::string::npos)
      << three_d.status();
}

TEST(QuantizedPoolTest, BadInputErrors) {
  const Tensor f = Tensor::FromFloats({1, 1, 2, 2}, {1.f, 2.f, 3.f, 4.f});
  Pool2dParams p;
  p.kernel_size = {2, 2};
  p.stride = {2, 2};
  auto float_input = QuantizedMaxPool2d(f, p);
  ASSERT_FALSE(float_input.ok());
  EXPECT_NE(float_input.status().message().find("quantized max_pool2d: input"),
            std::string::npos);
  p.padding = {2, 2};
  auto big_pad = QuantizedAvgPool2d(Plane3x3(), p);
  ASSERT_FALSE(big_pad.ok());
  EXPECT_NE(big_pad.status().message().find("padding"), std::string::npos);
  p.padding = {0, 0};
  p.divisor_override = 0;
  EXPECT_FALSE(QuantizedAvgPool2d(Plane3x3(), p).ok());
  EXPECT_FALSE(QuantizedAdaptiveAvgPool2d(Plane3x3(), {0, 1}).ok());
}

}  // namespace
}  // namespace quantized
}  // namespace fuselage
