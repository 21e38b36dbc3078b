// Quantized conv1d / conv3d (+relu) and transposed conv 1d / 2d / 3d against PyTorch 1.13's
// onednn engine (conv_nd.txt: nnq.Conv1d, nniq.ConvReLU1d, nnq.Conv3d, nniq.ConvReLU3d,
// nnq.ConvTranspose1d / 2d / 3d; output_padding against onednn's formula on the exact
// accumulators, since PyTorch's onednn engine refuses it), a hand-computed transposed conv
// and errors.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/quantized/conv.h"
#include "tests/runtime/quantized/golden_reader.h"

namespace fuselage {
namespace quantized {
namespace {

TEST(QuantizedConvNdTest, MatchPyTorch) {
  auto cases = ReadGoldenFile("tests/runtime/testdata/quantized/conv_nd.txt");
  ASSERT_TRUE(cases.ok()) << cases.status();
  ASSERT_EQ(cases->size(), 9u);
  for (const GoldenCase& c : *cases) {
    SCOPED_TRACE(c.name);
    const Tensor& x = c.tensor("x");
    const size_t spatial = static_cast<size_t>(x.dim() - 2);
    QuantizedConvParams p;
    p.stride.assign(spatial, static_cast<int64_t>(c.number("stride")));
    p.padding.assign(spatial, static_cast<int64_t>(c.number("padding")));
    p.dilation.assign(spatial, static_cast<int64_t>(c.number("dilation")));
    p.output_padding.assign(spatial, static_cast<int64_t>(c.number("output_padding")));
    p.groups = static_cast<int64_t>(c.number("groups"));
    const double scale = c.number("scale");
    const int64_t zp = static_cast<int64_t>(c.number("zero_point"));
    absl::StatusOr<Tensor> y =
        c.number("transposed") != 0
            ? QuantizedConvTransposeNd(x, c.tensor("weight"), c.find_tensor("bias"), p, scale, zp)
            : QuantizedConvNd(x, c.tensor("weight"), c.find_tensor("bias"), p, scale, zp,
                              c.number("relu") != 0);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(MostlySameQuantized(*y, c.tensor("y")));
  }
}

TEST(QuantizedConvNdTest, TransposedHandComputed) {
  // x [1, 1, 2] = 1, 2 (scale 1, zp 3: q 4, 5); weight [1, 1, 2] = 1, -1 (scale 1);
  // stride 2 -> [1, -1, 2, -2]; output scale 1, zp 10 -> 11, 9, 12, 8. With padding 1
  // the window is [1, 3): 9, 12.
  auto x = Tensor::FromBytes(DType::kQUInt8, {1, 1, 2}, std::string("\4\5", 2),
                             QuantParams::PerTensor(1.0, 3));
  auto w = Tensor::FromBytes(DType::kQInt8, {1, 1, 2}, std::string("\1\xff", 2),
                             QuantParams::PerTensor(1.0, 0));
  ASSERT_TRUE(x.ok() && w.ok());
  QuantizedConvParams p;
  p.stride = {2};
  p.padding = {0};
  p.dilation = {1};
  auto y = QuantizedConvTransposeNd(*x, *w, nullptr, p, 1.0, 10);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(y->shape(), (Shape{1, 1, 4}));
  std::vector<int64_t> got;
  for (int64_t i = 0; i < 4; ++i) got.push_back(IntAt(*y, i));
  EXPECT_EQ(got, (std::vector<int64_t>{11, 9, 12, 8}));
  p.padding = {1};
  auto cropped = QuantizedConvTransposeNd(*x, *w, nullptr, p, 1.0, 10);
  ASSERT_TRUE(cropped.ok()) << cropped.status();
  ASSERT_EQ(cropped->shape(), (Shape{1, 1, 2}));
  EXPECT_EQ(IntAt(*cropped, 0), 9);
  EXPECT_EQ(IntAt(*cropped, 1), 12);
}

TEST(QuantizedConvNdTest, Errors) {
  auto x = Tensor::FromBytes(DType::kQUInt8, {1, 2, 4}, std::string(8, '\1'),
                             QuantParams::PerTensor(1.0, 0));
  auto w = Tensor::FromBytes(DType::kQInt8, {3, 2, 2}, std::string(12, '\1'),
                             QuantParams::PerTensor(1.0, 0));
  ASSERT_TRUE(x.ok() && w.ok());
  QuantizedConvParams p;
  p.stride = {1, 1};  // two entries for a 1-d conv
  p.padding = {0};
  p.dilation = {1};
  auto bad = QuantizedConvNd(*x, *w, nullptr, p, 0.1, 0, false);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("expected 1 entries"), std::string::npos) << bad.status();
  p.stride = {2};
  p.output_padding = {2};  // not smaller than stride
  auto wt = Tensor::FromBytes(DType::kQInt8, {2, 3, 2}, std::string(12, '\1'),
                              QuantParams::PerTensor(1.0, 0));
  ASSERT_TRUE(wt.ok());
  auto bad_pad = QuantizedConvTransposeNd(*x, *wt, nullptr, p, 0.1, 0);
  ASSERT_FALSE(bad_pad.ok());
  EXPECT_NE(bad_pad.status().message().find("output_padding"), std::string::npos)
      << bad_pad.status();
}

}  // namespace
}  // namespace quantized
}  // namespace fuselage
