// Fused equals unfused, through the interpreter: random inputs, random weights and
// non-trivial batch-norm statistics; outputs agree within 1e-5 of the reference's
// largest magnitude.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "graph/graph_module.h"
#include "patterns/fuse.h"
#include "patterns/fusion_rule.h"
#include "patterns/matcher.h"
#include "runtime/builtin_kernels.h"
#include "runtime/interpreter.h"
#include "tests/patterns/test_models.h"

namespace fuselage {
namespace {

using ::fuselage::testing::BatchNorm2dModule;
using ::fuselage::testing::Conv2dModule;
using ::fuselage::testing::Must;
using ::fuselage::testing::PlainModule;
using ::fuselage::testing::RandomTensor;

constexpr double kRelativeTolerance = 1e-5;

FusionRule Rule(const char* name, const char* pattern, const char* fused_type) {
  absl::StatusOr<FusionRule> rule = MakeFusionRule(name, pattern, PatternFormat::kComplex,
                                                   fused_type, FuserKind::kFoldBatchNormThenWrap);
  EXPECT_TRUE(rule.ok()) << rule.status();
  return *rule;
}

std::vector<FusionRule> ConvRules() {
  return {Rule("conv_bn_add_relu", "(ReLU, (add, (BatchNorm2d, Conv2d), MatchAllNode))",
               "nni.ConvAddReLU2d"),
          Rule("conv_bn_relu", "(ReLU, (BatchNorm2d, Conv2d))", "nni.ConvReLU2d"),
          Rule("conv_bn", "(BatchNorm2d, Conv2d)", ""),
          Rule("linear_bn", "(BatchNorm1d, Linear)", "")};
}

class FuseNumericsTest : public ::testing::Test {
 protected:
  Graph& graph() { return gm_.graph(); }
  Node* Call(Node* in, const char* path, std::unique_ptr<Module> module) {
    EXPECT_TRUE(gm_.SetModule(path, std::move(module)).ok());
    return Must(graph().AddCallModule(path, {in}, {}, path));
  }

  // Runs the model before and after fusion on `input`; returns the number fused.
  int ExpectFusedEqualsUnfused(const Tensor& input, int expected_fusions) {
    absl::StatusOr<std::unique_ptr<KernelRegistry>> kernels = BuiltinKernels();
    EXPECT_TRUE(kernels.ok()) << kernels.status();
    EXPECT_TRUE(gm_.Verify().ok()) << gm_.Verify();
    absl::StatusOr<std::vector<Value>> before = ::fuselage::Run(gm_, {Value(input)}, **kernels);
    EXPECT_TRUE(before.ok()) << before.status();

    absl::StatusOr<PatternMatcher> matcher = PatternMatcher::Create(ConvRules());
    EXPECT_TRUE(matcher.ok()) << matcher.status();
    absl::StatusOr<int> fused = FusePatterns(gm_, *matcher);
    EXPECT_TRUE(fused.ok()) << fused.status();
    EXPECT_EQ(*fused, expected_fusions);
    EXPECT_TRUE(gm_.Verify().ok()) << gm_.Verify();

    absl::StatusOr<std::vector<Value>> after = ::fuselage::Run(gm_, {Value(input)}, **kernels);
    EXPECT_TRUE(after.ok()) << after.status();
    if (!before.ok() || !after.ok()) return -1;
    EXPECT_EQ(before->size(), after->size());
    for (size_t i = 0; i < before->size() && i < after->size(); ++i) {
      const Tensor& ref = (*before)[i].as_tensor();
      const Tensor& got = (*after)[i].as_tensor();
      EXPECT_EQ(ref.shape(), got.shape());
      if (ref.shape() != got.shape()) continue;
      double max_ref = 0, max_diff = 0;
      for (int64_t k = 0; k < ref.numel(); ++k) {
        max_ref = std::max(max_ref, std::fabs(double{ref.data<float>()[k]}));
        max_diff = std::max(max_diff, std::fabs(double{ref.data<float>()[k]} -
                                                double{got.data<float>()[k]}));
      }
      EXPECT_GT(max_ref, 0.1) << "output " << i << " is too small to compare";
      EXPECT_LE(max_diff, kRelativeTolerance * max_ref) << "output " << i;
    }
    return fused.ok() ? *fused : -1;
  }

  std::mt19937 rng_{2024};
  GraphModule gm_;
};

// y = identity(x); relu(add(bn(conv(x)), y)), then a conv-bn-relu block, then conv-bn
// whose bn is also an output.
TEST_F(FuseNumericsTest, ResNetStyleBlocks) {
  Node* x = Must(graph().AddPlaceholder("x"));
  Node* identity = Call(x, "identity", PlainModule("nn.Identity"));
  Node* bn1 = Call(Call(x, "conv1", Conv2dModule(rng_, 4, 4, 3)), "bn1", BatchNorm2dModule(rng_, 4));
  Node* add = Must(graph().AddCallFunction("operator.add", {bn1, identity}, {}, "add"));
  Node* r1 = Call(add, "relu1", PlainModule("nn.ReLU"));
  Node* r2 = Call(Call(Call(r1, "conv2", Conv2dModule(rng_, 4, 6, 3)), "bn2",
                       BatchNorm2dModule(rng_, 6)),
                  "relu2", PlainModule("nn.ReLU"));
  Node* bn3 = Call(Call(r2, "conv3", Conv2dModule(rng_, 6, 5, 1)), "bn3", BatchNorm2dModule(rng_, 5));
  Node* r3 = Call(bn3, "relu3", PlainModule("nn.ReLU"));
  Must(graph().SetOutput(Argument::Tuple({r3, bn3})));
  // bn3 has two users, so conv3-bn3 fuses as conv_bn and relu3 stays.
  EXPECT_EQ(ExpectFusedEqualsUnfused(RandomTensor(rng_, {2, 4, 7, 7}), 3), 3);
  EXPECT_EQ(graph().size(), 7u);  // x, identity, 3 fused, relu3, output
}

TEST_F(FuseNumericsTest, ResidualWrittenFirstAndTorchAdd) {
  Node* x = Must(graph().AddPlaceholder("x"));
  Node* pre = Call(x, "pre", PlainModule("nn.ReLU"));
  Node* bn = Call(Call(pre, "conv", Conv2dModule(rng_, 3, 3, 3)), "bn", BatchNorm2dModule(rng_, 3));
  Node* add = Must(graph().AddCallFunction("torch.add", {pre, bn}, {}, "add"));
  Must(graph().SetOutput(Call(add, "relu", PlainModule("nn.ReLU"))));
  EXPECT_EQ(ExpectFusedEqualsUnfused(RandomTensor(rng_, {1, 3, 5, 5}), 1), 1);
}

TEST_F(FuseNumericsTest, LinearBatchNorm1d) {
  Node* x = Must(graph().AddPlaceholder("x"));
  auto linear = std::make_unique<Module>("nn.Linear");
  linear->SetTensor("weight", RandomTensor(rng_, {6, 5}));
  linear->SetTensor("bias", RandomTensor(rng_, {6}));
  linear->SetAttribute("in_features", Argument::Int(5));
  linear->SetAttribute("out_features", Argument::Int(6));
  auto bn = BatchNorm2dModule(rng_, 6);
  bn->set_type(Symbol::Intern("nn.BatchNorm1d"));
  Node* out = Call(Call(x, "fc", std::move(linear)), "bn", std::move(bn));
  Must(graph().SetOutput(out));
  EXPECT_EQ(ExpectFusedEqualsUnfused(RandomTensor(rng_, {4, 5}), 1), 1);
}

}  // namespace
}  // namespace fuselage
