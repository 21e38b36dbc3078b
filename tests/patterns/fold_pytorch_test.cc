// Batch-norm folding is bit-identical to PyTorch 1.13's fuse_fx (fuse_conv_bn_weights /
// fuse_linear_bn_weights). Goldens: tests/patterns/gen_fold_goldens.py.
#include <cstring>
#include <memory>
#include <string>

#include "graph/serialization.h"
#include "gtest/gtest.h"
#include "patterns/fuse.h"
#include "patterns/fusion_rule.h"
#include "patterns/matcher.h"

namespace fuselage {
namespace {

std::unique_ptr<GraphModule> Load(const std::string& name) {
  auto gm = LoadModel("tests/patterns/testdata/" + name);
  EXPECT_TRUE(gm.ok()) << gm.status();
  return gm.ok() ? *std::move(gm) : nullptr;
}

// Counts the float32 elements of `a` and `b` whose bits differ (shapes must match).
int DifferingElements(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return -1;
  int differing = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    differing += std::memcmp(&a.data<float>()[i], &b.data<float>()[i], sizeof(float)) != 0;
  }
  return differing;
}

void ExpectFoldMatchesPyTorch(const std::string& name, const char* pattern) {
  std::unique_ptr<GraphModule> gm = Load(name + ".fsl");
  std::unique_ptr<GraphModule> expected = Load(name + "_fused_by_pytorch.fsl");
  ASSERT_NE(gm, nullptr);
  ASSERT_NE(expected, nullptr);
  absl::StatusOr<FusionRule> rule =
      MakeFusionRule("fold", pattern, PatternFormat::kComplex, "", FuserKind::kFoldBatchNormThenWrap);
  ASSERT_TRUE(rule.ok()) << rule.status();
  absl::StatusOr<PatternMatcher> matcher = PatternMatcher::Create({*rule});
  ASSERT_TRUE(matcher.ok()) << matcher.status();
  absl::StatusOr<int> fused = FusePatterns(*gm, *matcher);
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_EQ(*fused, 1);
  ASSERT_TRUE(gm->Verify().ok()) << gm->Verify();
  // PyTorch keeps the folded module at path "0", as fuselage does (the root's path).
  const Module* ours = gm->FindModule("0");
  const Module* theirs = expected->FindModule("0");
  ASSERT_NE(ours, nullptr);
  ASSERT_NE(theirs, nullptr);
  EXPECT_EQ(ours->type(), theirs->type());
  for (const char* tensor : {"weight", "bias"}) {
    ASSERT_NE(ours->FindTensor(tensor), nullptr) << tensor;
    ASSERT_NE(theirs->FindTensor(tensor), nullptr) << tensor;
    EXPECT_EQ(DifferingElements(*ours->FindTensor(tensor), *theirs->FindTensor(tensor)), 0)
        << name << " " << tensor;
  }
}

TEST(FoldPyTorchTest, ConvBatchNormIsBitIdentical) {
  ExpectFoldMatchesPyTorch("conv_bn", "(BatchNorm2d, Conv2d)");
}

TEST(FoldPyTorchTest, LinearBatchNormIsBitIdentical) {
  ExpectFoldMatchesPyTorch("linear_bn", "(BatchNorm1d, Linear)");
}

}  // namespace
}  // namespace fuselage
