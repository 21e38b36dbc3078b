// Float ops against values computed by hand (the arithmetic is in the comments).
#include "runtime/float_ops.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/float_conv.h"

namespace fuselage {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

std::vector<float> Floats(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// 0, 1, 2, ... n-1 as floats (plus `start`).
std::vector<float> Iota(int n, float start = 0.0f) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = start + i;
  return v;
}

TEST(Conv2dTest, PaddingAndStride) {
  // x = [[1,2,3],[4,5,6],[7,8,9]], w = [[1,0],[0,-1]], padding 1, stride 2: output (i, j)
  // is xp[r][c] - xp[r+1][c+1] at r = 2i - 1, c = 2j - 1 of the zero-padded input:
  // (0,0): 0 - x[0][0] = -1;  (0,1): 0 - x[0][2] = -3;
  // (1,0): 0 - x[2][0] = -7;  (1,1): x[1][1] - x[2][2] = 5 - 9 = -4.
  Tensor x = Tensor::FromFloats({1, 1, 3, 3}, Iota(9, 1));
  Tensor w = Tensor::FromFloats({1, 1, 2, 2}, {1, 0, 0, -1});
  Conv2dParams p;
  p.stride = {2, 2};
  p.padding = {1, 1};
  auto y = Conv2d(x, w, nullptr, p);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{1, 1, 2, 2}));
  EXPECT_THAT(Floats(*y), ElementsAre(-1, -3, -7, -4));
}

TEST(Conv2dTest, BiasGroupsAndDepthwise) {
  // Two channels [3], [5]; depthwise 1x1 weights 2 and 10, bias 1 and -1: [7, 49].
  Tensor x = Tensor::FromFloats({1, 2, 1, 1}, {3, 5});
  Tensor w = Tensor::FromFloats({2, 1, 1, 1}, {2, 10});
  Tensor b = Tensor::FromFloats({2}, {1, -1});
  Conv2dParams p;
  p.groups = 2;
  auto y = Conv2d(x, w, &b, p);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Floats(*y), ElementsAre(7, 49));
}

TEST(Conv2dTest, Dilation) {
  // Row [1..5], kernel [1, 1] dilated by 2: x[i] + x[i+2] = 4, 6, 8.
  Tensor x = Tensor::FromFloats({1, 1, 1, 5}, Iota(5, 1));
  Tensor w = Tensor::FromFloats({1, 1, 1, 2}, {1, 1});
  Conv2dParams p;
  p.dilation = {1, 2};
  auto y = Conv2d(x, w, nullptr, p);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Floats(*y), ElementsAre(4, 6, 8));
}

TEST(Conv2dTest, WrongChannelCountIsAnError) {
  Tensor x = Tensor::FromFloats({1, 3, 2, 2}, Iota(12));
  Tensor w = Tensor::FromFloats({2, 2, 1, 1}, {1, 1, 1, 1});
  auto y = Conv2d(x, w, nullptr, {});
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("expects 2 input channels"));
}

TEST(Conv2dTest, KernelLargerThanInputIsAnError) {
  Tensor x = Tensor::FromFloats({1, 1, 2, 2}, Iota(4));
  Tensor w = Tensor::FromFloats({1, 1, 3, 3}, Iota(9));
  EXPECT_EQ(Conv2d(x, w, nullptr, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Conv2dTest, OversizedUnfoldIsAnErrorNotAnAllocation) {
  // A 1000x1000 kernel over a 3000x3000 image: 1e6 x 2001^2 column entries.
  auto x = Tensor::Zeros(DType::kFloat32, {1, 1, 3000, 3000});
  auto w = Tensor::Zeros(DType::kFloat32, {1, 1, 1000, 1000});
  ASSERT_TRUE(x.ok() && w.ok());
  auto y = Conv2d(*x, *w, nullptr, {});
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("needs more than"));
}

// A valid conv whose padding makes a 1.6e9-element output (4 x 20006 x 20006): refused
// by the tensor limit (Tensor::kMaxElements, 2^28) before the output is allocated; it
// used to abort with std::bad_alloc.
TEST(Conv2dTest, OutputPastTheTensorLimitIsRefusedBeforeAllocating) {
  auto x = Tensor::Zeros(DType::kFloat32, {1, 4, 8, 8});
  auto w = Tensor::Zeros(DType::kFloat32, {4, 4, 3, 3});
  ASSERT_TRUE(x.ok() && w.ok());
  Conv2dParams p;
  p.padding = {10000, 10000};
  auto y = Conv2d(*x, *w, nullptr, p);
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(y.status().message(), "shape [1, 4, 20006, 20006] has more than 268435456 elements");
}

// Window parameters past the limit are refused before the output-size arithmetic, which
// they would overflow (H + 2 * 2^62).
TEST(Conv2dTest, WindowParametersPastTheLimitAreRefused) {
  Tensor x = Tensor::FromFloats({1, 1, 2, 2}, Iota(4));
  Tensor w = Tensor::FromFloats({1, 1, 1, 1}, {1});
  const int64_t huge = int64_t{1} << 62;
  for (int field = 0; field < 4; ++field) {
    Conv2dParams p;
    if (field == 0) p.padding = {huge, 0};
    if (field == 1) p.stride = {1, huge};
    if (field == 2) p.dilation = {huge, 1};
    if (field == 3) p.groups = huge;
    auto y = Conv2d(x, w, nullptr, p);
    EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(y.status().message(), HasSubstr("all at most 268435456")) << field;
  }
}

TEST(Pool2dTest, WindowParametersPastTheLimitAreRefused) {
  Tensor x = Tensor::FromFloats({1, 1, 2, 2}, Iota(4));
  Pool2dParams p;
  p.kernel_size = {int64_t{1} << 62, 1};
  p.stride = {1, 1};
  p.padding = {0, 0};
  p.dilation = {1, 1};
  auto y = MaxPool2d(x, p);
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("<= 268435456"));
}

TEST(Conv2dTest, QuantizedInputIsAnError) {
  auto q = Tensor::Zeros(DType::kQUInt8, {1, 1, 2, 2}, QuantParams::PerTensor(0.1, 0));
  ASSERT_TRUE(q.ok());
  Tensor w = Tensor::FromFloats({1, 1, 1, 1}, {1});
  auto y = Conv2d(*q, w, nullptr, {});
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("torch.quint8"));
}

TEST(LinearTest, MatchesHandComputation) {
  // [1, 2] . rows [1,2], [3,4], [5,6] = 5, 11, 17; plus bias [0.5, 0, -1].
  Tensor x = Tensor::FromFloats({1, 2}, {1, 2});
  Tensor w = Tensor::FromFloats({3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor b = Tensor::FromFloats({3}, {0.5, 0, -1});
  auto y = Linear(x, w, &b);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Floats(*y), ElementsAre(5.5, 11, 16));
  auto bad = Linear(Tensor::FromFloats({1, 3}, {1, 2, 3}), w, nullptr);
  EXPECT_THAT(bad.status().message(), HasSubstr("must end in 2 features"));
  Tensor short_bias = Tensor::FromFloats({2}, {1, 1});
  EXPECT_FALSE(Linear(x, w, &short_bias).ok());
}

// Edge shapes oneDNN's matmul / convolution primitives do not take (an empty sum, an
// empty batch) and several rows through one primitive.
TEST(LinearTest, EmptySumEmptyBatchAndLeadingDims) {
  Tensor w = Tensor::FromFloats({3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor b = Tensor::FromFloats({3}, {0.5, 0, -1});
  // [2, 2, 2]: rows (1, 0), (0, 1), (1, 1), (2, -1).
  auto y = Linear(Tensor::FromFloats({2, 2, 2}, {1, 0, 0, 1, 1, 1, 2, -1}), w, &b);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{2, 2, 3}));
  EXPECT_THAT(Floats(*y), ElementsAre(1.5, 3, 4, 2.5, 4, 5, 3.5, 7, 10, 0.5, 2, 3));
  // in_features 0: every output is the bias.
  auto empty_w = Tensor::Zeros(DType::kFloat32, {3, 0});
  auto empty_x = Tensor::Zeros(DType::kFloat32, {2, 0});
  ASSERT_TRUE(empty_w.ok() && empty_x.ok());
  auto z = Linear(*empty_x, *empty_w, &b);
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_THAT(Floats(*z), ElementsAre(0.5, 0, -1, 0.5, 0, -1));
}

TEST(Conv2dTest, EmptyBatchAndAlternatingShapesThroughTheSamePrimitives) {
  auto empty = Tensor::Zeros(DType::kFloat32, {0, 1, 3, 3});
  ASSERT_TRUE(empty.ok());
  Tensor w = Tensor::FromFloats({1, 1, 2, 2}, {1, 2, 3, 4});
  auto e = Conv2d(*empty, w, nullptr, {});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->shape(), (std::vector<int64_t>{0, 1, 2, 2}));
  // A 3x3 and a 2x3 input, alternated: each call must get its own primitive's result.
  Tensor a = Tensor::FromFloats({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor c = Tensor::FromFloats({1, 1, 2, 3}, {1, 0, 1, 0, 1, 0});
  for (int i = 0; i < 2; ++i) {
    auto ya = Conv2d(a, w, nullptr, {});
    auto yc = Conv2d(c, w, nullptr, {});
    ASSERT_TRUE(ya.ok() && yc.ok());
    EXPECT_THAT(Floats(*ya), ElementsAre(37, 47, 67, 77));
    EXPECT_THAT(Floats(*yc), ElementsAre(5, 5));
  }
}

TEST(BatchNormTest, EvalModeNormalizesPerChannel) {
  // Channel 0: (3 - 1) / sqrt(4) * 2 + 0 = 2; channel 1: (-1 - 0) / sqrt(0.25) * 1 + 1 = -1.
  Tensor x = Tensor::FromFloats({1, 2, 1, 1}, {3, -1});
  Tensor mean = Tensor::FromFloats({2}, {1, 0});
  Tensor var = Tensor::FromFloats({2}, {4, 0.25});
  Tensor w = Tensor::FromFloats({2}, {2, 1});
  Tensor b = Tensor::FromFloats({2}, {0, 1});
  auto y = BatchNorm(x, mean, var, &w, &b, 0.0);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Floats(*y), ElementsAre(2, -1));
  Tensor wrong = Tensor::FromFloats({3}, {1, 1, 1});
  EXPECT_THAT(BatchNorm(x, wrong, var, nullptr, nullptr, 0.0).status().message(),
              HasSubstr("running_mean has shape [3]; expected [2]"));
}

TEST(ActivationTest, HandValues) {
  Tensor x = Tensor::FromFloats({5}, {-4, -1, 0, 1, 4});
  EXPECT_THAT(Floats(Relu(x)), ElementsAre(0, 0, 0, 1, 4));
  EXPECT_THAT(Floats(Hardtanh(x, -2, 3)), ElementsAre(-2, -1, 0, 1, 3));
  // x * clamp(x + 3, 0, 6) / 6: -4 -> 0, -1 -> -1/3, 0 -> 0, 1 -> 2/3, 4 -> 4.
  EXPECT_THAT(Floats(Hardswish(x)),
              Pointwise(FloatNear(1e-6), std::vector<float>{0, -1.0f / 3, 0, 2.0f / 3, 4}));
  EXPECT_THAT(Floats(Sigmoid(Tensor::FromFloats({1}, {0}))), ElementsAre(0.5));
  // The input is not modified (copy on write).
  EXPECT_THAT(Floats(x), ElementsAre(-4, -1, 0, 1, 4));
}

TEST(BinaryTest, BroadcastAddWithAlphaAndMul) {
  // [[1], [2]] + 10 * [[1, 2, 3]] = [[11, 21, 31], [12, 22, 32]].
  Tensor a = Tensor::FromFloats({2, 1}, {1, 2});
  Tensor b = Tensor::FromFloats({1, 3}, {1, 2, 3});
  auto sum = Add(a, b, 10.0f);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(sum->shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_THAT(Floats(*sum), ElementsAre(11, 21, 31, 12, 22, 32));
  auto product = Mul(b, a);
  ASSERT_TRUE(product.ok());
  EXPECT_THAT(Floats(*product), ElementsAre(1, 2, 3, 2, 4, 6));
  // A 3-d by 1-d broadcast (the odometer path): [2, 1, 2] * [2].
  auto p3 = Mul(Tensor::FromFloats({2, 1, 2}, {1, 2, 3, 4}), Tensor::FromFloats({2}, {10, 100}));
  ASSERT_TRUE(p3.ok());
  EXPECT_THAT(Floats(*p3), ElementsAre(10, 200, 30, 400));
  EXPECT_THAT(Floats(AddScalar(a, 0.5)), ElementsAre(1.5, 2.5));
  EXPECT_THAT(Floats(MulScalar(a, -2)), ElementsAre(-2, -4));
}

TEST(BinaryTest, MismatchedBroadcastIsAnError) {
  auto sum = Add(Tensor::FromFloats({2, 3}, Iota(6)), Tensor::FromFloats({4}, Iota(4)));
  EXPECT_EQ(sum.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(sum.status().message(), HasSubstr("do not broadcast"));
}

TEST(PoolTest, MaxAndAvg) {
  Tensor x = Tensor::FromFloats({1, 1, 4, 4}, Iota(16));
  Pool2dParams p;
  p.kernel_size = {2, 2};
  p.stride = {2, 2};
  auto max = MaxPool2d(x, p);
  ASSERT_TRUE(max.ok()) << max.status();
  EXPECT_THAT(Floats(*max), ElementsAre(5, 7, 13, 15));
  auto avg = AvgPool2d(x, p);
  ASSERT_TRUE(avg.ok()) << avg.status();
  EXPECT_THAT(Floats(*avg), ElementsAre(2.5, 4.5, 10.5, 12.5));
}

TEST(PoolTest, AvgPaddingCountsOrNot) {
  // 2x2 input, kernel 2, stride 2, padding 1: each window holds one real element.
  Tensor x = Tensor::FromFloats({1, 1, 2, 2}, {1, 2, 3, 4});
  Pool2dParams p;
  p.kernel_size = {2, 2};
  p.stride = {2, 2};
  p.padding = {1, 1};
  auto with_pad = AvgPool2d(x, p);
  ASSERT_TRUE(with_pad.ok()) << with_pad.status();
  EXPECT_THAT(Floats(*with_pad), ElementsAre(0.25, 0.5, 0.75, 1));
  p.count_include_pad = false;
  EXPECT_THAT(Floats(*AvgPool2d(x, p)), ElementsAre(1, 2, 3, 4));
  p.padding = {2, 2};  // more than half the kernel
  EXPECT_THAT(AvgPool2d(x, p).status().message(), HasSubstr("at most half of kernel_size"));
}

TEST(PoolTest, AdaptiveAvg) {
  // 1x3 row [1, 2, 6] to width 2: windows [0, 2) and [1, 3): 1.5 and 4.
  Tensor x = Tensor::FromFloats({1, 1, 1, 3}, {1, 2, 6});
  auto y = AdaptiveAvgPool2d(x, 1, 2);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Floats(*y), ElementsAre(1.5, 4));
  EXPECT_FALSE(AdaptiveAvgPool2d(Tensor::FromFloats({3}, {1, 2, 3}), 1, 1).ok());
}

TEST(MeanTest, DimsAndKeepdim) {
  Tensor x = Tensor::FromFloats({2, 3}, {1, 2, 3, 4, 5, 6});
  auto rows = Mean(x, {1}, false);
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->shape(), (std::vector<int64_t>{2}));
  EXPECT_THAT(Floats(*rows), ElementsAre(2, 5));
  auto cols = Mean(x, {-2}, true);
  ASSERT_TRUE(cols.ok());
  EXPECT_EQ(cols->shape(), (std::vector<int64_t>{1, 3}));
  EXPECT_THAT(Floats(*cols), ElementsAre(2.5, 3.5, 4.5));
  auto all = Mean(x, {}, false);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->dim(), 0);
  EXPECT_THAT(Floats(*all), ElementsAre(3.5));
  EXPECT_FALSE(Mean(x, {2}, false).ok());
  EXPECT_FALSE(Mean(x, {1, 1}, false).ok());
}

TEST(ShapeOpsTest, CatFlattenReshape) {
  Tensor a = Tensor::FromFloats({2, 1}, {1, 2});
  Tensor b = Tensor::FromFloats({2, 2}, {3, 4, 5, 6});
  auto cat = Cat({a, b}, 1);
  ASSERT_TRUE(cat.ok()) << cat.status();
  EXPECT_EQ(cat->shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_THAT(Floats(*cat), ElementsAre(1, 3, 4, 2, 5, 6));
  EXPECT_THAT(Cat({a, b}, 0).status().message(), HasSubstr("does not match tensor 0"));

  Tensor x = Tensor::FromFloats({2, 3, 4}, Iota(24));
  EXPECT_EQ(Flatten(x, 1, -1)->shape(), (std::vector<int64_t>{2, 12}));
  EXPECT_EQ(Flatten(x, 0, 1)->shape(), (std::vector<int64_t>{6, 4}));
  EXPECT_FALSE(Flatten(x, 2, 1).ok());
  EXPECT_EQ(Reshape(x, {4, -1})->shape(), (std::vector<int64_t>{4, 6}));
  EXPECT_THAT(Floats(*Reshape(x, {4, -1})), ElementsAreArray(Iota(24)));
  EXPECT_FALSE(Reshape(x, {-1, -1}).ok());
  EXPECT_FALSE(Reshape(x, {5, -1}).ok());
  EXPECT_FALSE(Reshape(x, {5, 5}).ok());
}

// x[c, 0, w] = 2c + w, c < 4, w < 2; with r = 2, out[0, i, 2w + j] = x[2i + j, 0, w]
// (torch.pixel_shuffle's definition), worked out by hand.
TEST(ShapeOpsTest, PixelShuffleAndUnshuffle) {
  Tensor x = Tensor::FromFloats({1, 4, 1, 2}, Iota(8));
  auto shuffled = PixelShuffle(x, 2);
  ASSERT_TRUE(shuffled.ok()) << shuffled.status();
  EXPECT_EQ(shuffled->shape(), (std::vector<int64_t>{1, 1, 2, 4}));
  EXPECT_THAT(Floats(*shuffled), ElementsAre(0, 2, 1, 3, 4, 6, 5, 7));
  auto back = PixelUnshuffle(*shuffled, 2);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->shape(), x.shape());
  EXPECT_THAT(Floats(*back), ElementsAreArray(Iota(8)));

  EXPECT_THAT(PixelShuffle(Tensor::FromFloats({1, 3, 1, 1}, Iota(3)), 2).status().message(),
              HasSubstr("not divisible by upscale_factor squared (4)"));
  EXPECT_THAT(PixelUnshuffle(x, 2).status().message(), HasSubstr("not divisible"));
  EXPECT_THAT(PixelShuffle(Tensor::FromFloats({4, 1}, Iota(4)), 2).status().message(),
              HasSubstr("at least 3 dims"));
  EXPECT_THAT(PixelShuffle(x, 0).status().message(), HasSubstr("must be positive"));
}

TEST(ShapeOpsTest, CatKeepsQuantizedStorage) {
  auto q = Tensor::FromBytes(DType::kQUInt8, {1, 2}, std::string("\x01\x02", 2),
                             QuantParams::PerTensor(0.5, 3));
  ASSERT_TRUE(q.ok());
  auto cat = Cat({*q, *q}, 0);
  ASSERT_TRUE(cat.ok()) << cat.status();
  EXPECT_EQ(cat->dtype(), DType::kQUInt8);
  EXPECT_EQ(cat->qparams(), QuantParams::PerTensor(0.5, 3));
  EXPECT_EQ(cat->bytes(), std::string("\x01\x02\x01\x02", 4));
}

TEST(InterpolateTest, BilinearSourceIndexFollowsAlignCorners) {
  // x = [[0, 1], [2, 3]] to 4x4. align_corners=False: scale in/out = 0.5, source
  // (o + 0.5) * 0.5 - 0.5 = -0.25 (clamped to 0), 0.25, 0.75, 1.25 (index 1, no right
  // neighbour); row 0 is [0, 0.25, 0.75, 1]. align_corners=True: source o * 1/3, row 0 is
  // [0, 1/3, 2/3, 1], and the last row is [2, 7/3, 8/3, 3].
  Tensor x = Tensor::FromFloats({1, 1, 2, 2}, {0, 1, 2, 3});
  InterpolateParams p;
  p.out_h = 4;
  p.out_w = 4;
  p.mode = "bilinear";
  auto y = Interpolate(x, p);
  ASSERT_TRUE(y.ok()) << y.status();
  std::vector<float> v = Floats(*y);
  EXPECT_THAT(std::vector<float>(v.begin(), v.begin() + 4),
              Pointwise(FloatNear(1e-6), std::vector<float>{0, 0.25, 0.75, 1}));
  p.align_corners = true;
  y = Interpolate(x, p);
  ASSERT_TRUE(y.ok()) << y.status();
  v = Floats(*y);
  EXPECT_THAT(std::vector<float>(v.begin(), v.begin() + 4),
              Pointwise(FloatNear(1e-6), std::vector<float>{0, 1.0f / 3, 2.0f / 3, 1}));
  EXPECT_THAT(std::vector<float>(v.end() - 4, v.end()),
              Pointwise(FloatNear(1e-6), std::vector<float>{2, 7.0f / 3, 8.0f / 3, 3}));
}

TEST(InterpolateTest, NearestAndUnknownMode) {
  // Nearest 1x3 -> 1x5: source floor(o * 3/5) = 0, 0, 1, 1, 2.
  Tensor x = Tensor::FromFloats({1, 1, 1, 3}, {10, 20, 30});
  InterpolateParams p;
  p.out_h = 1;
  p.out_w = 5;
  auto y = Interpolate(x, p);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Floats(*y), ElementsAre(10, 10, 20, 20, 30));
  p.mode = "bicubic";
  EXPECT_EQ(Interpolate(x, p).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(NormTest, LayerNormAndGroupNormByHand) {
  // Row [1, 3]: mean 2, biased variance 1, so (x - 2) / sqrt(1 + eps) ~ [-1, 1];
  // weight [2, 1], bias [0, 5]: [-2, 6].
  Tensor x = Tensor::FromFloats({1, 2}, {1, 3});
  Tensor w = Tensor::FromFloats({2}, {2, 1});
  Tensor b = Tensor::FromFloats({2}, {0, 5});
  auto y = LayerNorm(x, {2}, &w, &b, 0.0);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Floats(*y), Pointwise(FloatNear(1e-6), std::vector<float>{-2, 6}));
  // Group norm, 4 channels of one element in 2 groups: {1, 3} and {5, 9} -> [-1, 1, -1, 1].
  Tensor g = Tensor::FromFloats({1, 4, 1}, {1, 3, 5, 9});
  auto z = GroupNorm(g, 2, nullptr, nullptr, 0.0);
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_THAT(Floats(*z), Pointwise(FloatNear(1e-6), std::vector<float>{-1, 1, -1, 1}));
  EXPECT_THAT(GroupNorm(g, 3, nullptr, nullptr, 0.0).status().message(),
              HasSubstr("4 channels cannot be split into 3 groups"));
  EXPECT_THAT(LayerNorm(x, {3}, nullptr, nullptr, 1e-5).status().message(),
              HasSubstr("is not the trailing shape"));
}

TEST(MatMulTest, VectorOperandsLoseTheirDim) {
  // [1, 2, 3] . [4, 5, 6] = 32, a 0-d result; [[1, 2], [3, 4]] @ [1, 1] = [3, 7].
  auto dot = MatMul(Tensor::FromFloats({3}, {1, 2, 3}), Tensor::FromFloats({3}, {4, 5, 6}));
  ASSERT_TRUE(dot.ok()) << dot.status();
  EXPECT_EQ(dot->dim(), 0);
  EXPECT_THAT(Floats(*dot), ElementsAre(32));
  auto mv = MatMul(Tensor::FromFloats({2, 2}, {1, 2, 3, 4}), Tensor::FromFloats({2}, {1, 1}));
  ASSERT_TRUE(mv.ok()) << mv.status();
  EXPECT_EQ(mv->shape(), (std::vector<int64_t>{2}));
  EXPECT_THAT(Floats(*mv), ElementsAre(3, 7));
  EXPECT_THAT(MatMul(Tensor::FromFloats({2, 2}, Iota(4)), Tensor::FromFloats({3}, Iota(3)))
                  .status()
                  .message(),
              HasSubstr("cannot be multiplied"));
}

TEST(MatMulTest, BatchesBroadcastAsPyTorchsMatmul) {
  // a [2, 1, 2, 3] @ b [3, 3, 2] -> [2, 3, 2, 2]: a's matrix i pairs with b's matrix j for
  // output batch (i, j). Small integers, so every product and sum is exact in float.
  const std::vector<float> av = Iota(12, -5), bv = Iota(18, -9);
  auto y = MatMul(Tensor::FromFloats({2, 1, 2, 3}, av), Tensor::FromFloats({3, 3, 2}, bv));
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{2, 3, 2, 2}));
  std::vector<float> expected;
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int m = 0; m < 2; ++m) {
        for (int n = 0; n < 2; ++n) {
          float sum = 0;
          for (int k = 0; k < 3; ++k) sum += av[i * 6 + m * 3 + k] * bv[j * 6 + k * 2 + n];
          expected.push_back(sum);
        }
      }
    }
  }
  EXPECT_THAT(Floats(*y), ElementsAreArray(expected));
  // The same batch on both sides (one batched product): [2, 2, 3] @ [2, 3, 2].
  auto z = MatMul(Tensor::FromFloats({2, 2, 3}, av), Tensor::FromFloats({2, 3, 2}, Iota(12)));
  ASSERT_TRUE(z.ok()) << z.status();
  // Batch 1, row 0 = [1, 2, 3] times [[6, 7], [8, 9], [10, 11]] = [52, 58].
  const std::vector<float> zv = Floats(*z);
  EXPECT_THAT(std::vector<float>(zv.begin() + 4, zv.begin() + 6), ElementsAre(52, 58));
}

TEST(ShapeOpsTest, PermuteOfThreeDimsMovesEachElement) {
  // y = x.permute(2, 0, 1) for x [2, 3, 4]: y[k, i, j] = x[i, j, k] = 12 i + 4 j + k.
  auto y = Permute(Tensor::FromFloats({2, 3, 4}, Iota(24)), {2, 0, 1});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{4, 2, 3}));
  std::vector<float> expected;
  for (int k = 0; k < 4; ++k) {
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 3; ++j) expected.push_back(12 * i + 4 * j + k);
    }
  }
  EXPECT_THAT(Floats(*y), ElementsAreArray(expected));
  // The last dim kept in place (rows copied whole): x.permute(1, 0, 2).
  auto w = Permute(Tensor::FromFloats({2, 3, 4}, Iota(24)), {1, 0, 2});
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<float> wv = Floats(*w);
  EXPECT_THAT(std::vector<float>(wv.begin() + 4, wv.begin() + 8),
              ElementsAre(12, 13, 14, 15));  // w[0, 1, :] = x[1, 0, :]
}

TEST(SoftmaxTest, RowsSumToOneAndLogSoftmaxIsTheirLog) {
  // softmax([0, ln 3]) = [1/4, 3/4]; log_softmax the logs of those.
  Tensor x = Tensor::FromFloats({1, 2}, {0.0f, std::log(3.0f)});
  auto y = Softmax(x, 1);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Floats(*y), Pointwise(FloatNear(1e-7), std::vector<float>{0.25f, 0.75f}));
  auto l = LogSoftmax(x, -1);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_THAT(Floats(*l),
              Pointwise(FloatNear(1e-6), std::vector<float>{std::log(0.25f), std::log(0.75f)}));
}

TEST(ShapeOpsTest, PermuteMovesThePerChannelAxis) {
  // [2, 3] per-channel on axis 1 (3 scales), transposed to [3, 2]: the axis becomes 0.
  auto x = Tensor::Zeros(DType::kQUInt8, {2, 3},
                         QuantParams::PerChannel({0.1, 0.2, 0.3}, {0, 1, 2}, 1));
  ASSERT_TRUE(x.ok()) << x.status();
  x->mutable_data<uint8_t>()[1] = 7;  // element (0, 1)
  auto y = Permute(*x, {1, 0});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->qparams().axis, 0);
  EXPECT_EQ(y->data<uint8_t>()[2], 7);  // element (1, 0) of the transpose
  EXPECT_THAT(Permute(*x, {0, 0}).status().message(), HasSubstr("repeat dim 0"));
}

TEST(ShapeOpsTest, SplitAlongThePerChannelAxisSplitsTheScales) {
  auto x = Tensor::Zeros(DType::kQUInt8, {2, 3},
                         QuantParams::PerChannel({0.1, 0.2, 0.3}, {0, 1, 2}, 1));
  ASSERT_TRUE(x.ok()) << x.status();
  auto pieces = SplitSizes(*x, {1, 2}, 1);
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  ASSERT_EQ(pieces->size(), 2u);
  EXPECT_THAT((*pieces)[1].qparams().scales, ElementsAre(0.2, 0.3));
  EXPECT_THAT((*pieces)[1].qparams().zero_points, ElementsAre(1, 2));
  EXPECT_THAT(SplitSizes(*x, {1, 1}, 1).status().message(), HasSubstr("add up to 2"));
}

TEST(ReductionTest, SumAmaxAndPad) {
  // [[1, 5], [-2, 3]]: sum over dim 0 = [-1, 8]; amax over dim 1 = [5, 3]; amax of an
  // empty dim is an error, as in PyTorch.
  Tensor x = Tensor::FromFloats({2, 2}, {1, 5, -2, 3});
  auto s = Sum(x, {0}, false);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(Floats(*s), ElementsAre(-1, 8));
  auto m = Amax(x, {-1}, true);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->shape(), (std::vector<int64_t>{2, 1}));
  EXPECT_THAT(Floats(*m), ElementsAre(5, 3));
  auto empty = Tensor::Zeros(DType::kFloat32, {2, 0});
  ASSERT_TRUE(empty.ok());
  EXPECT_THAT(Amax(*empty, {1}, false).status().message(), HasSubstr("size 0"));
  // pad (1, -1) on the last dim of [1, 5]: a 9 in front, the 5 cropped: [9, 1].
  auto p = ConstantPad(Tensor::FromFloats({2}, {1, 5}), {1, -1}, 9.0f);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(Floats(*p), ElementsAre(9, 1));
}

TEST(ActivationTest, PreluSlopesPerChannelAndFloatWeightsOnly) {
  // [N=1, C=2, 2]: channel 0 slope 0.5, channel 1 slope -1: [-2, 3 | -4, 5] ->
  // [-1, 3 | 4, 5]. A module file's int64 weight is refused, not read as floats.
  Tensor x = Tensor::FromFloats({1, 2, 2}, {-2, 3, -4, 5});
  auto y = Prelu(x, Tensor::FromFloats({2}, {0.5, -1}));
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(Floats(*y), ElementsAre(-1, 3, 4, 5));
  EXPECT_THAT(Prelu(x, Tensor::FromFloats({3}, {1, 1, 1})).status().message(),
              HasSubstr("expected 1 or the input's 2 channels"));
  EXPECT_THAT(Prelu(x, Tensor::FromInt64s({1}, {2})).status().message(),
              HasSubstr("expected float32"));
}

}  // namespace
}  // namespace fuselage
