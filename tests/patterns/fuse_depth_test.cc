// Issue 22 item 2: fusion must not nest the module tree deeper than a model file holds.
// A conv-bn-relu whose modules sit at depth d fuses into nni.ConvReLU2d at depth d with
// its children at d + 1. Before the fix a 21-deep one fused, and its output did not load
// ("nested too deeply": protobuf's recursion limit, 23 levels, against the documented 64).
// Now the loader accepts every depth up to ModelLimits::max_module_depth, and the pass
// refuses, naming the node and the limit, a fusion that would go past it.
#include <memory>
#include <random>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"
#include "patterns/fuse.h"
#include "patterns/fusion_rule.h"
#include "patterns/matcher.h"
#include "tests/patterns/test_models.h"

namespace fuselage {
namespace {

using testing::BatchNorm2dModule;
using testing::Conv2dModule;
using testing::Must;
using testing::PlainModule;

// x -> conv -> bn -> relu -> output, the three modules at "s1.s2...s{depth-1}.conv" etc.
// (depth components: depth - 1 nn.Sequential containers, then the module).
std::unique_ptr<GraphModule> DeepConvBnRelu(int depth) {
  std::mt19937 rng(7);
  auto gm = std::make_unique<GraphModule>();
  std::string prefix;
  for (int level = 1; level < depth; ++level) {
    const std::string path = absl::StrCat(prefix, "s", level);
    EXPECT_TRUE(gm->SetModule(path, PlainModule("nn.Sequential")).ok());
    prefix = path + ".";
  }
  EXPECT_TRUE(gm->SetModule(prefix + "conv", Conv2dModule(rng, 2, 2, 1)).ok());
  EXPECT_TRUE(gm->SetModule(prefix + "bn", BatchNorm2dModule(rng, 2)).ok());
  EXPECT_TRUE(gm->SetModule(prefix + "relu", PlainModule("nn.ReLU")).ok());
  Graph& g = gm->graph();
  Node* x = Must(g.AddPlaceholder("x"));
  Node* conv = Must(g.AddCallModule(prefix + "conv", {x}));
  Node* bn = Must(g.AddCallModule(prefix + "bn", {conv}));
  Node* relu = Must(g.AddCallModule(prefix + "relu", {bn}));
  EXPECT_TRUE(g.SetOutput(relu).ok());
  return gm;
}

PatternMatcher ConvBnReluMatcher() {
  absl::StatusOr<FusionRule> rule =
      MakeFusionRule("conv_bn_relu", "(nn.ReLU, (nn.BatchNorm2d, nn.Conv2d))",
                     PatternFormat::kComplex, "nni.ConvReLU2d", FuserKind::kFoldBatchNormThenWrap);
  EXPECT_TRUE(rule.ok()) << rule.status();
  absl::StatusOr<PatternMatcher> matcher = PatternMatcher::Create({*rule});
  EXPECT_TRUE(matcher.ok()) << matcher.status();
  return *std::move(matcher);
}

// Binary and text files of `gm` both load again.
void ExpectSavesAndLoads(const GraphModule& gm) {
  absl::StatusOr<std::unique_ptr<GraphModule>> binary = ParseModel(SerializeModel(gm));
  EXPECT_TRUE(binary.ok()) << binary.status();
  absl::StatusOr<std::unique_ptr<GraphModule>> text = ParseModelText(SerializeModelText(gm));
  EXPECT_TRUE(text.ok()) << text.status();
}

TEST(FuseDepthTest, TwentyOneDeepFusesSavesAndLoads) {
  std::unique_ptr<GraphModule> gm = DeepConvBnRelu(21);
  absl::StatusOr<int> fused = FusePatterns(*gm, ConvBnReluMatcher());
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_EQ(*fused, 1);
  ExpectSavesAndLoads(*gm);
}

// The limit itself: a model whose leaves sit at depth max_module_depth loads; fusing one
// level less deep reaches the limit exactly, saves and loads; at the limit the fusion would
// go one past it and is refused with the graph unchanged.
TEST(FuseDepthTest, TheLimitExactly) {
  const int limit = ModelLimits().max_module_depth;
  ASSERT_EQ(limit, 64);  // the documented limit

  std::unique_ptr<GraphModule> at_limit = DeepConvBnRelu(limit);
  ExpectSavesAndLoads(*at_limit);
  const std::string before = SerializeModel(*at_limit);
  absl::StatusOr<int> refused = FusePatterns(*at_limit, ConvBnReluMatcher());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  for (const std::string& fragment :
       {std::string("rule 'conv_bn_relu' at node"), std::string("nni.ConvReLU2d"),
        absl::StrCat("nest modules ", limit + 1, " deep"),
        absl::StrCat("at most ", limit)}) {
    EXPECT_TRUE(absl::StrContains(refused.status().message(), fragment))
        << fragment << " not in: " << refused.status();
  }
  EXPECT_EQ(SerializeModel(*at_limit), before);  // unchanged

  std::unique_ptr<GraphModule> below = DeepConvBnRelu(limit - 1);
  absl::StatusOr<int> fused = FusePatterns(*below, ConvBnReluMatcher());
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_EQ(*fused, 1);
  ExpectSavesAndLoads(*below);

  // One level past the limit is refused by the loader, naming it.
  std::unique_ptr<GraphModule> past = DeepConvBnRelu(limit + 1);
  absl::StatusOr<std::unique_ptr<GraphModule>> loaded = ParseModel(SerializeModel(*past));
  ASSERT_FALSE(loaded.ok());
  EXPECT_TRUE(absl::StrContains(loaded.status().message(), "deeper than 64")) << loaded.status();
}

}  // namespace
}  // namespace fuselage
