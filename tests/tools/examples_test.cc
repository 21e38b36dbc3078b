// The built-in residual example: the graph PyTorch's symbolic_trace makes of the same
// block, weights reproducible bit for bit from the seed, and the checked-in
// tools/examples/residual.textproto in sync with the code that writes it.
#include "tools/examples.h"

#include <cmath>
#include <string>

#include "graph/printer.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"
#include "tests/tools/run_cli.h"

namespace fuselage {
namespace {

TEST(ResidualExampleTest, GraphIsWhatTorchFxTraces) {
  auto gm = BuildResidualExample(kResidualExampleSeed);
  ASSERT_TRUE(gm.ok()) << gm.status();
  EXPECT_TRUE((*gm)->Verify().ok());
  // Written by PyTorch's own codegen (tests/graph/testdata/make_fx_goldens.py).
  const std::string golden = FileContents("tests/graph/testdata/fx_code_residual.txt");
  ASSERT_FALSE(golden.empty());
  EXPECT_EQ(PrintCode(**gm), golden);
  EXPECT_EQ((*gm)->FindModule("identity")->type().name(), "nn.Identity");
  EXPECT_EQ((*gm)->FindModule("conv")->type().name(), "nn.Conv2d");
  EXPECT_EQ((*gm)->FindModule("bn")->type().name(), "nn.BatchNorm2d");
  EXPECT_EQ((*gm)->FindModule("relu")->type().name(), "nn.ReLU");
}

TEST(ResidualExampleTest, ConvIsFourToFourThreeByThreeWithBias) {
  auto gm = *BuildResidualExample(kResidualExampleSeed);
  const Module& conv = *gm->FindModule("conv");
  EXPECT_EQ(conv.FindTensor("weight")->shape(), (std::vector<int64_t>{4, 4, 3, 3}));
  EXPECT_EQ(conv.FindTensor("bias")->shape(), (std::vector<int64_t>{4}));
  EXPECT_EQ(*conv.GetInts("padding", 2), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(*conv.GetInts("kernel_size", 2), (std::vector<int64_t>{3, 3}));
  // PyTorch's default init bound: 1 / sqrt(fan_in) = 1 / sqrt(4 * 3 * 3) = 1/6.
  const Tensor& w = *conv.FindTensor("weight");
  for (int64_t i = 0; i < w.numel(); ++i) EXPECT_LE(std::abs(w.data<float>()[i]), 1.0f / 6);
  // The first draw of std::mt19937 seeded with 0 is 2357136044 (the engine is fully
  // specified by the C++ standard), so the first weight is fixed on every platform.
  const float unit = static_cast<float>(2357136044u >> 8) / 16777216.0f;
  EXPECT_FLOAT_EQ(w.data<float>()[0], -1.0f / 6 + (2.0f / 6) * unit);
}

TEST(ResidualExampleTest, BatchNormStatisticsAreNotTrivial) {
  auto gm = *BuildResidualExample(kResidualExampleSeed);
  const Module& bn = *gm->FindModule("bn");
  for (const char* name : {"weight", "bias", "running_mean", "running_var"}) {
    const Tensor& t = *bn.FindTensor(name);
    ASSERT_EQ(t.shape(), (std::vector<int64_t>{4})) << name;
  }
  const float* var = bn.FindTensor("running_var")->data<float>();
  const float* mean = bn.FindTensor("running_mean")->data<float>();
  for (int c = 0; c < 4; ++c) {
    EXPECT_GT(var[c], 0.0f);
    EXPECT_NE(var[c], 1.0f);
    EXPECT_NE(mean[c], 0.0f);
  }
  EXPECT_EQ(*bn.GetFloat("eps"), 1e-5);
}

TEST(ResidualExampleTest, SameSeedSameBytesOtherSeedOtherWeights) {
  const std::string a = SerializeModel(**BuildResidualExample(3));
  const std::string b = SerializeModel(**BuildResidualExample(3));
  const std::string c = SerializeModel(**BuildResidualExample(4));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a.size(), c.size());
}

TEST(ResidualExampleTest, CheckedInTextprotoIsUpToDate) {
  const std::string checked_in = FileContents("tools/examples/residual.textproto");
  ASSERT_FALSE(checked_in.empty());
  EXPECT_EQ(checked_in, SerializeModelText(**BuildResidualExample(kResidualExampleSeed)))
      << "regenerate with: bazel run //tools:fuselage -- demo --write-example "
         "tools/examples/residual.textproto";
  auto loaded = ParseModelText(checked_in);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
}

}  // namespace
}  // namespace fuselage
