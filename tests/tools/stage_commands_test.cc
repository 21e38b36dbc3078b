// `fuselage prepare`, `calibrate`, `convert` and `lower --time` (tools/cmd_stages.h) on
// the residual example (tools/examples/residual.textproto) fused with the example
// conv-bn-add-relu config:
//
//   x ─► identity ─┐
//   x ─► nni.ConvAddReLU2d(x, identity) ─► output          (4 nodes after fuse)
//
// Worked out by hand: prepare quantizes conv and identity (qnnpack's default qconfigs,
// HistogramObservers). x gets one observer, shared by both consumers; identity's output
// shares its input's observer module (OUTPUT_SHARE_OBSERVER_WITH_INPUT), so its output
// observer node calls activation_post_process_0 again; conv's output gets its own. So 3
// observer nodes, 2 observer modules, 7 nodes; one weighted op (conv: nn.Conv2d child
// "0" → nnqr.Conv2d) and so one plan module. Convert turns each of the 3 observer nodes
// into quantize_per_tensor + dequantize: 7 - 3 + 6 = 10 nodes. The stages run one by one
// through files must give the same lowered model file, byte for byte, as `quantize`.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"
#include "tests/tools/run_cli.h"
#include "tools/cli.h"

namespace fuselage {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kExample[] = "tools/examples/residual.textproto";
constexpr char kResidualConfig[] = "backend_configs/examples/conv_bn_add_relu.textproto";

int CountCalls(const GraphModule& gm, absl::string_view module_type) {
  int count = 0;
  for (const Node* n : gm.graph().Nodes()) {
    if (n->op() != OpKind::kCallModule) continue;
    const Module* m = gm.FindModule(n->target().name());
    count += m != nullptr && m->type().name() == module_type;
  }
  return count;
}

class StageCommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CliResult r =
        RunFuselage({"fuse", kExample, "--config=" + std::string(kResidualConfig), "-o", fused_});
    ASSERT_EQ(r.code, 0) << r.err;
  }
  const std::string fused_ = TempPath("stages_fused.fsl");
  const std::vector<std::string> calibration_ = {"--samples=2", "--seed=3",
                                                 "--input-shape=1,4,8,8"};
};

TEST_F(StageCommandsTest, StagesThroughFilesEqualTheQuantizeCommand) {
  const std::string prepared = TempPath("stages_prepared.fsl");
  CliResult r = RunFuselage({"prepare", fused_, "--backend=qnnpack",
                             "--config=" + std::string(kResidualConfig), "-o", prepared, "--time"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("prepare: 2 ops quantized, 3 observer nodes, 2 observer "
                               "modules, 0 ops kept float\n"));
  EXPECT_THAT(r.out, HasSubstr("4 -> 7 nodes"));
  EXPECT_THAT(TimedSteps(r.out), ElementsAre("load", "prepare", "store", "verify", "save"));
  {
    auto gm = LoadModel(prepared);
    ASSERT_TRUE(gm.ok()) << gm.status();
    EXPECT_EQ((*gm)->graph().size(), 7u);
    EXPECT_EQ(CountCalls(**gm, "HistogramObserver"), 3);
    const Module* plan = (*gm)->FindModule("observers.weight_post_process_0");
    ASSERT_NE(plan, nullptr);
    EXPECT_EQ(plan->type().name(), "MinMaxObserver");  // qnnpack's weight observer
    EXPECT_EQ(plan->FindAttribute("node")->as_string(), "conv");
    EXPECT_EQ(plan->FindAttribute("root_module")->as_string(), "nn.Conv2d");
    EXPECT_EQ(plan->FindAttribute("reference_module")->as_string(), "nnqr.Conv2d");
    EXPECT_EQ(plan->FindAttribute("qscheme")->as_string(), "torch.per_tensor_symmetric");
  }

  const std::string calibrated = TempPath("stages_calibrated.fsl");
  std::vector<std::string> args = {"calibrate", prepared, "-o", calibrated, "--time"};
  args.insert(args.end(), calibration_.begin(), calibration_.end());
  r = RunFuselage(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("calibrate: 2 samples\n"));
  EXPECT_THAT(TimedSteps(r.out), ElementsAre("load", "calibrate", "store", "verify", "save"));
  {
    auto gm = LoadModel(calibrated);
    ASSERT_TRUE(gm.ok()) << gm.status();
    const Module* observer = (*gm)->FindModule("observers.activation_post_process_0");
    ASSERT_NE(observer, nullptr);
    // Calibrated: a finite range and the 2048-bin histogram are in the file.
    EXPECT_LT(observer->FindTensor("min_val")->data<float>()[0], 0.0f);
    EXPECT_GT(observer->FindTensor("max_val")->data<float>()[0], 0.0f);
    ASSERT_NE(observer->FindTensor("histogram"), nullptr);
    EXPECT_EQ(observer->FindTensor("histogram")->numel(), 2048);
  }

  const std::string reference = TempPath("stages_reference.fsl");
  r = RunFuselage({"convert", calibrated, "-o", reference, "--time"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("3 observers replaced by quantize/dequantize, 1 reference "
                               "modules"));
  EXPECT_THAT(r.out, HasSubstr("7 -> 10 nodes"));
  EXPECT_THAT(TimedSteps(r.out), ElementsAre("load", "read", "convert", "verify", "save"));
  {
    auto gm = LoadModel(reference);
    ASSERT_TRUE(gm.ok()) << gm.status();
    EXPECT_EQ((*gm)->FindModule("observers"), nullptr);
    ASSERT_NE((*gm)->FindModule("conv.0"), nullptr);
    EXPECT_EQ((*gm)->FindModule("conv.0")->type().name(), "nnqr.Conv2d");
  }

  const std::string lowered = TempPath("stages_lowered.fsl");
  r = RunFuselage({"lower", reference, "--backend=qnnpack", "-o", lowered, "--time"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(TimedSteps(r.out), ElementsAre("load", "lower", "verify", "save"));

  const std::string quantized = TempPath("stages_quantize_command.fsl");
  args = {"quantize", kExample, "--backend=qnnpack", "--config=" + std::string(kResidualConfig),
          "-o", quantized};
  args.insert(args.end(), calibration_.begin(), calibration_.end());
  r = RunFuselage(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(FileContents(lowered), FileContents(quantized));
}

TEST_F(StageCommandsTest, ConvertAndCalibrateRefuseAnUnpreparedModel) {
  CliResult r = RunFuselage({"convert", fused_, "-o", TempPath("x.fsl")});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_THAT(r.err, HasSubstr("convert: " + fused_ + ": not a prepared model"));
  r = RunFuselage({"calibrate", fused_, "--samples=1", "-o", TempPath("x.fsl")});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_THAT(r.err, HasSubstr("calibrate: " + fused_ + ": not a prepared model"));
}

// `convert` on a prepared but never calibrated model used to quantize with PyTorch's
// defaults (scale 1.0, zero point 0); it is refused, naming the observer, and writes
// nothing. `calibrate` refuses an empty input and an out-of-range --samples the same way
// `quantize` does.
TEST_F(StageCommandsTest, NothingIsConvertedFromObserversThatSawNoValue) {
  const std::string prepared = TempPath("uncalibrated_prepared.fsl");
  CliResult r = RunFuselage({"prepare", fused_, "--backend=qnnpack",
                             "--config=" + std::string(kResidualConfig), "-o", prepared});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string reference = TempPath("uncalibrated_reference.fsl");
  std::remove(reference.c_str());
  r = RunFuselage({"convert", prepared, "-o", reference});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_THAT(r.err, HasSubstr("(observers.activation_post_process_0) saw no value"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(LoadModel(reference).ok()) << "convert wrote " << reference;

  const std::string calibrated = TempPath("empty_calibrated.fsl");
  r = RunFuselage({"calibrate", prepared, "--input-shape=0,4,8,8", "-o", calibrated});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_THAT(r.err, HasSubstr("gives placeholder 'x' a tensor of shape [0, 4, 8, 8], which "
                               "has no elements"));
  r = RunFuselage({"calibrate", prepared, "--samples=4294967304", "--input-shape=1,4,8,8", "-o",
                   calibrated});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_EQ(r.err, "fuselage: --samples is '4294967304'; expected an integer in [1, "
                   "1000000000]\n");
}

TEST_F(StageCommandsTest, WrongCommandLinesAreUsageErrors) {
  CliResult r = RunFuselage({"prepare", fused_, "-o", TempPath("x.fsl")});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("prepare: needs --backend=NAME"));
  r = RunFuselage({"convert", fused_});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("convert: needs -o OUT"));
  r = RunFuselage({"convert", fused_, "--backend=qnnpack", "-o", TempPath("x.fsl")});
  EXPECT_EQ(r.code, kExitUsage);  // convert takes no backend: the plan is in the model
}

}  // namespace
}  // namespace fuselage
