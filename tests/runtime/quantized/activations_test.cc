// Quantized activations, batch norm and mean: hand-computed values, PyTorch 1.13 goldens
// (activations.txt: nnq.Hardswish / ELU / LeakyReLU / Sigmoid modules, F.leaky_relu,
// torch.sigmoid, F.hardsigmoid, torch.tanh on quantized tensors, nnq.Softmax and
// quantized::softmax; batch_norm.txt:
// nnq.BatchNorm2d / 3d, nniq.BNReLU2d; mean.txt: Tensor.mean over dims) and errors.
#include "runtime/quantized/activations.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "runtime/quantized/normalization.h"
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

std::vector<int64_t> Ints(const Tensor& t) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(IntAt(t, i));
  return out;
}

std::vector<GoldenCase> Cases(const std::string& file) {
  auto cases = ReadGoldenFile("tests/runtime/testdata/quantized/" + file);
  EXPECT_TRUE(cases.ok()) << cases.status();
  return cases.ok() ? *cases : std::vector<GoldenCase>{};
}

TEST(QuantizedActivationsTest, HandComputed) {
  // x (scale 0.5, zp 10) = -4, -1, 0, 1.5, 4 for 2, 8, 10, 13, 18.
  const Tensor x = QU8({5}, {2, 8, 10, 13, 18}, 0.5, 10);
  // hardswish: 0, -1 * 2 / 6 = -0.333, 0, 1.5 * 4.5 / 6 = 1.125, 4; at scale 0.25, zp 8:
  // 8, 8 - 1.33 -> 7, 8, 8 + 4.5 -> 12 (half to even), 24.
  auto hs = QuantizedHardswish(x, 0.25, 8);
  ASSERT_TRUE(hs.ok()) << hs.status();
  EXPECT_EQ(Ints(*hs), (std::vector<int64_t>{8, 7, 8, 12, 24}));
  EXPECT_EQ(hs->qparams(), QuantParams::PerTensor(0.25, 8));
  // hardsigmoid: 0, 1/3, 1/2, 3/4, 1 at the fixed 1/256, zp 0: 0, 85, 128, 192, 255
  // (256 saturates).
  auto hsig = QuantizedHardsigmoid(x);
  ASSERT_TRUE(hsig.ok()) << hsig.status();
  EXPECT_EQ(hsig->qparams(), QuantParams::PerTensor(1.0 / 256, 0));
  EXPECT_EQ(Ints(*hsig), (std::vector<int64_t>{0, 85, 128, 192, 255}));
  // tanh(0) = 0 -> the fixed zero point 128 (scale 2/256).
  auto t = QuantizedTanh(x);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->qparams(), QuantParams::PerTensor(2.0 / 256, 128));
  EXPECT_EQ(Ints(*t)[2], 128);
  // leaky_relu, slope 0.5, input qparams: -2, -0.5, 0, 1.5, 4 -> 6, 9, 10, 13, 18.
  auto lr = QuantizedLeakyRelu(x, 0.5);
  ASSERT_TRUE(lr.ok()) << lr.status();
  EXPECT_EQ(Ints(*lr), (std::vector<int64_t>{6, 9, 10, 13, 18}));
}

TEST(QuantizedActivationsTest, MatchPyTorch) {
  for (const GoldenCase& c : Cases("activations.txt")) {
    SCOPED_TRACE(c.name);
    const Tensor& x = c.tensor("x");
    struct Op {
      std::string name;
      absl::StatusOr<Tensor> y;
    };
    const std::vector<Op> ops = {
        {"hardswish_module",
         QuantizedHardswish(x, c.number("hardswish_module.scale"),
                            static_cast<int64_t>(c.number("hardswish_module.zero_point")))},
        {"elu_module", QuantizedElu(x, c.number("elu_module.scale"),
                                    static_cast<int64_t>(c.number("elu_module.zero_point")),
                                    c.number("elu_module.alpha"))},
        {"leaky_relu_module",
         QuantizedLeakyRelu(x, c.number("leaky_relu_module.negative_slope"),
                            c.number("leaky_relu_module.scale"),
                            static_cast<int64_t>(c.number("leaky_relu_module.zero_point")))},
        {"leaky_relu_function",
         QuantizedLeakyRelu(x, c.number("leaky_relu_function.negative_slope"))},
        {"sigmoid", QuantizedSigmoid(x)},
        {"sigmoid_module",
         QuantizedSigmoid(x, QuantParams::PerTensor(
                                 c.number("sigmoid_module.output_scale"),
                                 static_cast<int64_t>(
                                     c.number("sigmoid_module.output_zero_point"))))},
        {"hardsigmoid", QuantizedHardsigmoid(x)},
        {"tanh", QuantizedTanh(x)},
        {"gelu", QuantizedGelu(x, false)},
        {"gelu_tanh", QuantizedGelu(x, true)},
        {"softmax_module",
         QuantizedSoftmax(x, static_cast<int64_t>(c.number("softmax_module.dim")),
                          c.number("softmax_module.scale"),
                          static_cast<int64_t>(c.number("softmax_module.zero_point")))},
        {"softmax_last",
         QuantizedSoftmax(x, static_cast<int64_t>(c.number("softmax_last.dim")),
                          c.number("softmax_last.scale"),
                          static_cast<int64_t>(c.number("softmax_last.zero_point")))},
    };
    for (const Op& op : ops) {
      SCOPED_TRACE(op.name);
      ASSERT_TRUE(op.y.ok()) << op.y.status();
      EXPECT_TRUE(MostlySameQuantized(*op.y, c.tensor(op.name)));
    }
  }
}

TEST(QuantizedActivationsTest, Errors) {
  const Tensor f = Tensor::FromFloats({2}, {1.0f, 2.0f});
  EXPECT_FALSE(QuantizedSigmoid(f).ok());
  const Tensor x = QU8({1}, {3}, 0.5, 0);
  auto bad_scale = QuantizedHardswish(x, 0.0, 0);
  ASSERT_FALSE(bad_scale.ok());
  EXPECT_NE(bad_scale.status().message().find("output scale"), std::string::npos)
      << bad_scale.status();
  EXPECT_FALSE(QuantizedElu(x, 0.1, 300, 1.0).ok());  // zero point outside quint8
}

TEST(QuantizedBatchNormTest, HandComputed) {
  // One channel, mean 1, var 3 (eps 1: sigma 2), weight 4, bias 0.5; x scale 0.5, zp 10;
  // output scale 0.25, zp 20. y = (x - 1) / 2 * 4 + 0.5 = 2x - 1.5.
  // x = -1, 0, 1 (q 8, 10, 12) -> -3.5, -1.5, 0.5 -> 20 - 14, 20 - 6, 20 + 2 = 6, 14, 22;
  // relu: 20, 20, 22.
  const Tensor x = QU8({1, 1, 1, 3}, {8, 10, 12}, 0.5, 10);
  const Tensor w = Tensor::FromFloats({1}, {4.0f}), b = Tensor::FromFloats({1}, {0.5f});
  const Tensor mean = Tensor::FromFloats({1}, {1.0f}), var = Tensor::FromFloats({1}, {3.0f});
  auto y = QuantizedBatchNorm(x, &w, &b, mean, var, 1.0, 0.25, 20, false);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(Ints(*y), (std::vector<int64_t>{6, 14, 22}));
  auto yr = QuantizedBatchNorm(x, &w, &b, mean, var, 1.0, 0.25, 20, true);
  ASSERT_TRUE(yr.ok()) << yr.status();
  EXPECT_EQ(Ints(*yr), (std::vector<int64_t>{20, 20, 22}));
  // Errors: the statistics must have one entry per channel.
  const Tensor two = Tensor::FromFloats({2}, {1.0f, 1.0f});
  auto bad = QuantizedBatchNorm(x, &w, &b, two, var, 1.0, 0.25, 20, false);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("running_mean"), std::string::npos) << bad.status();
}

TEST(QuantizedBatchNormTest, MatchPyTorch) {
  for (const GoldenCase& c : Cases("batch_norm.txt")) {
    SCOPED_TRACE(c.name);
    auto y = QuantizedBatchNorm(c.tensor("x"), &c.tensor("weight"), &c.tensor("bias"),
                                c.tensor("running_mean"), c.tensor("running_var"),
                                c.number("eps"), c.number("scale"),
                                static_cast<int64_t>(c.number("zero_point")),
                                c.number("relu") != 0);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(MostlySameQuantized(*y, c.tensor("y")));
  }
}

TEST(QuantizedNormsTest, MatchPyTorch) {
  for (const GoldenCase& c : Cases("norms.txt")) {
    SCOPED_TRACE(c.name);
    const Tensor& x = c.tensor("x");
    const double eps = c.number("eps"), scale = c.number("scale");
    const int64_t zp = static_cast<int64_t>(c.number("zero_point"));
    absl::StatusOr<Tensor> y;
    if (c.name.rfind("layer_norm", 0) == 0) {
      const int64_t k = static_cast<int64_t>(c.number("normalized_dims"));
      const std::vector<int64_t> shape(x.shape().end() - k, x.shape().end());
      y = QuantizedLayerNorm(x, shape, &c.tensor("weight"), &c.tensor("bias"), eps, scale, zp);
    } else if (c.name.rfind("group_norm", 0) == 0) {
      y = QuantizedGroupNorm(x, static_cast<int64_t>(c.number("groups")), &c.tensor("weight"),
                             &c.tensor("bias"), eps, scale, zp);
    } else {
      y = QuantizedInstanceNorm(x, &c.tensor("weight"), &c.tensor("bias"), eps, scale, zp);
    }
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(MostlySameQuantized(*y, c.tensor("y")));
  }
}

TEST(QuantizedNormsTest, HandComputedAndErrors) {
  // One row 8, 12 (scale 0.5, zp 10): mean 10 -> centred -2, 2; var 4 (steps), so
  // std = sqrt(4 * 0.25 + 0) = 1 and inv = 0.5: v = -1, 1; output scale 0.5, zp 100 ->
  // 98, 102.
  const Tensor x = QU8({1, 2}, {8, 12}, 0.5, 10);
  auto y = QuantizedLayerNorm(x, {2}, nullptr, nullptr, 0.0, 0.5, 100);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(Ints(*y), (std::vector<int64_t>{98, 102}));
  auto bad = QuantizedLayerNorm(x, {3}, nullptr, nullptr, 1e-5, 0.5, 100);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("normalized_shape"), std::string::npos) << bad.status();
  auto bad_groups = QuantizedGroupNorm(QU8({1, 3, 1}, {1, 2, 3}, 0.5, 0), 2, nullptr, nullptr,
                                       1e-5, 0.5, 0);
  ASSERT_FALSE(bad_groups.ok());
  EXPECT_NE(bad_groups.status().message().find("groups"), std::string::npos)
      << bad_groups.status();
}

TEST(QuantizedMeanTest, MatchPyTorch) {
  for (const GoldenCase& c : Cases("mean.txt")) {
    SCOPED_TRACE(c.name);
    std::vector<int64_t> dims;
    if (c.text("dims") != "all") {
      for (absl::string_view d : absl::StrSplit(c.text("dims"), ',')) {
        dims.push_back(std::stoll(std::string(d)));
      }
    }
    auto y = QuantizedMean(c.tensor("x"), dims, c.number("keepdim") != 0);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(MostlySameQuantized(*y, c.tensor("y")));
  }
}

}  // namespace
}  // namespace quantized
}  // namespace fuselage
