// The `quantize`, `lower` and `run` subcommands, called as the CLI calls them, on the
// residual example with the example config and the committed calibration inputs.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"
#include "runtime/npy.h"
#include "tests/tools/run_cli.h"
#include "tools/cmd_quantize.h"
#include "tools/cmd_run.h"

namespace fuselage {
namespace {

constexpr char kModel[] = "tools/examples/residual.textproto";
constexpr char kConfig[] = "--config=backend_configs/examples/conv_bn_add_relu.textproto";

std::string Calibration() {
  std::string files;
  for (int i = 0; i < 8; ++i) {
    absl::StrAppend(&files, i == 0 ? "" : ",", "tests/quantize/testdata/residual_calibration_",
                    i, ".npy");
  }
  return absl::StrCat("--calibration=", files);
}

int CountModules(const GraphModule& gm, absl::string_view type) {
  int n = 0;
  for (const Node* node : gm.graph().Nodes()) {
    if (node->op() != OpKind::kCallModule) continue;
    n += gm.FindModule(node->target().name())->type().name() == type;
  }
  return n;
}

TEST(QuantizeCliTest, QuantizeThenRun) {
  const std::string q = TempPath("q.fsl");
  CommandResult r = InvokeCommand(QuantizeCommand(),
                                  {kModel, "--backend=qnnpack", kConfig, Calibration(), "-o", q});
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_NE(r.out.find("0 ops kept float"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("conv-add-relu2d: 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("calibrate: 8 samples"), std::string::npos) << r.out;
  auto gm = LoadModel(q);
  ASSERT_TRUE(gm.ok()) << gm.status();
  EXPECT_EQ(CountModules(**gm, "nniq.ConvAddReLU2d"), 1);

  const std::string y = TempPath("y.npy");
  r = InvokeCommand(RunCommand(), {q, "--input=tests/quantize/testdata/residual_test_input.npy",
                                   absl::StrCat("--output=", y)});
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.out, "output 0: torch.float32 [16, 4, 8, 8]\n");
  auto out = ReadNpy(y);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->shape(), std::vector<int64_t>({16, 4, 8, 8}));
}

// quantize --reference, then lower: the same model as quantize in one go.
TEST(QuantizeCliTest, ReferenceThenLowerEqualsQuantize) {
  const std::string ref = TempPath("ref.fsl");
  const std::string lowered = TempPath("lowered.fsl");
  const std::string direct = TempPath("direct.fsl");
  CommandResult r = InvokeCommand(QuantizeCommand(), {kModel, "--backend=qnnpack", kConfig,
                                                      Calibration(), "--reference", "-o", ref});
  ASSERT_TRUE(r.status.ok()) << r.status;
  auto reference = LoadModel(ref);
  ASSERT_TRUE(reference.ok()) << reference.status();
  EXPECT_EQ(CountModules(**reference, "nni.ConvAddReLU2d"), 1);
  EXPECT_EQ((*reference)->FindModule("conv.0")->type().name(), "nnqr.Conv2d");

  r = InvokeCommand(LowerCommand(), {ref, "--backend=qnnpack", kConfig, "-o", lowered});
  ASSERT_TRUE(r.status.ok()) << r.status;
  r = InvokeCommand(QuantizeCommand(),
                    {kModel, "--backend=qnnpack", kConfig, Calibration(), "-o", direct});
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(SerializeModel(**LoadModel(lowered)), SerializeModel(**LoadModel(direct)));
}

TEST(QuantizeCliTest, MistakesAreReported) {
  const std::string q = TempPath("bad.fsl");
  CommandResult r = InvokeCommand(QuantizeCommand(), {kModel, Calibration(), "-o", q});
  EXPECT_TRUE(IsUsageError(r.status)) << r.status;
  EXPECT_NE(r.status.message().find("--backend"), std::string::npos);
  r = InvokeCommand(QuantizeCommand(), {kModel, "--backend=qnnpack"});
  EXPECT_TRUE(IsUsageError(r.status)) << r.status;
  // No calibration files and no recorded input shape.
  r = InvokeCommand(QuantizeCommand(), {kModel, "--backend=qnnpack", "-o", q});
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status.message().find("placeholder 'x'"), std::string::npos) << r.status;
  r = InvokeCommand(QuantizeCommand(),
                    {kModel, "--backend=qnnpack", "--samples=0", "--input-shape=1,4,8,8", "-o", q});
  EXPECT_TRUE(IsUsageError(r.status)) << r.status;
  r = InvokeCommand(RunCommand(), {kModel, "--input=a.npy,b.npy"});
  EXPECT_TRUE(IsUsageError(r.status)) << r.status;
}

}  // namespace
}  // namespace fuselage
