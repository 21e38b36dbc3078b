// ConvNd / ConvTransposeNd on hand-computed values and on bad input (PyTorch goldens for
// the real shapes are in float_golden_test).
#include "runtime/float_conv_nd.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace fuselage {
namespace {

ConvNdParams Params1d(int64_t stride, int64_t padding = 0, int64_t output_padding = 0) {
  ConvNdParams p;
  p.stride = {stride};
  p.padding = {padding};
  p.dilation = {1};
  p.output_padding = {output_padding};
  return p;
}

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// Each input element scatters weight * x into the window it would have been read from.
TEST(ConvTransposeNdTest, ScattersWeightedInputs) {
  const Tensor x = Tensor::FromFloats({1, 1, 2}, {1, 2});
  const Tensor w = Tensor::FromFloats({1, 1, 2}, {1, 10});
  const Tensor bias = Tensor::FromFloats({1}, {0.5f});
  absl::StatusOr<Tensor> overlapping = ConvTransposeNd(x, w, nullptr, Params1d(1), 1);
  ASSERT_TRUE(overlapping.ok()) << overlapping.status();
  EXPECT_EQ(Values(*overlapping), (std::vector<float>{1, 12, 20}));
  // stride 2 leaves the windows apart; output_padding 1 adds a trailing (bias-only) slot.
  absl::StatusOr<Tensor> strided = ConvTransposeNd(x, w, &bias, Params1d(2, 0, 1), 1);
  ASSERT_TRUE(strided.ok()) << strided.status();
  EXPECT_EQ(strided->shape(), (std::vector<int64_t>{1, 1, 5}));
  EXPECT_EQ(Values(*strided), (std::vector<float>{1.5f, 10.5f, 2.5f, 20.5f, 0.5f}));
  // padding 1 crops one slot from each end.
  absl::StatusOr<Tensor> cropped = ConvTransposeNd(x, w, nullptr, Params1d(2, 1), 1);
  ASSERT_TRUE(cropped.ok()) << cropped.status();
  EXPECT_EQ(Values(*cropped), (std::vector<float>{10, 2}));
}

TEST(ConvNdTest, Conv1dSlidesTheKernel) {
  const Tensor x = Tensor::FromFloats({1, 1, 4}, {1, 2, 3, 4});
  const Tensor w = Tensor::FromFloats({1, 1, 2}, {1, 10});
  ConvNdParams p = Params1d(1, 1);
  p.output_padding.clear();
  absl::StatusOr<Tensor> y = ConvNd(x, w, nullptr, p, 1);
  ASSERT_TRUE(y.ok()) << y.status();
  // Padded input [0, 1, 2, 3, 4, 0]: x[i] + 10 * x[i + 1].
  EXPECT_EQ(Values(*y), (std::vector<float>{10, 21, 32, 43, 4}));
}

void ExpectInvalid(const absl::StatusOr<Tensor>& result, const std::string& fragment) {
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  EXPECT_NE(std::string(result.status().message()).find(fragment), std::string::npos)
      << result.status();
}

TEST(ConvNdTest, BadInputIsInvalidArgument) {
  const Tensor x = Tensor::FromFloats({1, 2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor w = Tensor::FromFloats({1, 2, 2}, {1, 1, 1, 1});
  ConvNdParams p = Params1d(1);
  p.output_padding.clear();
  ExpectInvalid(ConvNd(Tensor::FromFloats({6}, {1, 2, 3, 4, 5, 6}), w, nullptr, p, 1),
                "expected a 3-d [N, C, ...] or 2-d [C, ...] input; got [6]");
  ExpectInvalid(ConvNd(x, w, nullptr, p, 2), "expected a 4-d weight; got [1, 2, 2]");
  ExpectInvalid(ConvNd(Tensor::FromFloats({1, 3, 2}, {1, 2, 3, 4, 5, 6}), w, nullptr, p, 1),
                "expects 2 input channels");
  const Tensor bad_bias = Tensor::FromFloats({2}, {1, 2});
  ExpectInvalid(ConvNd(x, w, &bad_bias, p, 1), "bias has shape [2]; expected [1]");
  ExpectInvalid(ConvNd(x, Tensor::FromFloats({1, 2, 4}, {1, 1, 1, 1, 1, 1, 1, 1}), nullptr, p, 1),
                "smaller than the dilated kernel");
  ConvNdParams two_strides = p;
  two_strides.stride = {1, 1};
  ExpectInvalid(ConvNd(x, w, nullptr, two_strides, 1), "bad parameters stride=[1, 1]");
  // PyTorch: output_padding must be smaller than stride or dilation.
  ExpectInvalid(ConvTransposeNd(x, Tensor::FromFloats({2, 1, 2}, {1, 1, 1, 1}), nullptr,
                                Params1d(1, 0, 1), 1),
                "output_padding=[1]");
  ExpectInvalid(ConvTransposeNd(x, w, nullptr, Params1d(1), 1), "expects 1 input channels");
}

}  // namespace
}  // namespace fuselage
