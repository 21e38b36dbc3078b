// The `quantize`, `lower` and `run` subcommands, called as the CLI calls them, on the
// residual example with the example config and the committed calibration inputs.
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"
#include "runtime/npy.h"
#include "tests/tools/run_cli.h"
#include "tools/cmd_quantize.h"
#include "tools/cli.h"
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
  // (No calibration files and no recorded input shape: tests/tools/quantize_flags_cli_test;
  // the residual example now records its shape.)
  r = InvokeCommand(QuantizeCommand(),
                    {kModel, "--backend=qnnpack", "--samples=0", "--input-shape=1,4,8,8", "-o", q});
  EXPECT_TRUE(IsUsageError(r.status)) << r.status;
  r = InvokeCommand(RunCommand(), {kModel, "--input=a.npy,b.npy"});
  EXPECT_TRUE(IsUsageError(r.status)) << r.status;
}

// Every integer flag of quantize (--samples, --seed, --input-shape's dimensions) is
// parsed into a wide type and range-checked: out-of-range, non-numeric and trailing-junk
// values are usage errors (exit 2) naming the flag, the value and the accepted range.
// (--samples=4294967297 used to run 1 sample, --samples=4294967304 equal --samples=8,
// --seed=4294967296 equal --seed=0.)
TEST(QuantizeCliTest, IntegerFlagsAreRangeCheckedNotTruncated) {
  const std::string q = TempPath("flags.fsl");
  struct Case {
    std::string flag;
    std::string expected;
  };
  const std::string samples_range = "'; expected an integer in [1, 1000000000]";
  const std::string seed_range = "'; expected an integer in [0, 4294967295]";
  std::vector<Case> cases;
  for (const char* v : {"4294967297", "4294967304", "0", "-1", "8x", " 8", "+8", "", "1000000001",
                        "99999999999999999999", "0x8", "8.0"}) {
    cases.push_back({absl::StrCat("--samples=", v), absl::StrCat("--samples is '", v, samples_range)});
  }
  for (const char* v : {"4294967296", "-1", "1e3", "7 ", "18446744073709551616"}) {
    cases.push_back({absl::StrCat("--seed=", v), absl::StrCat("--seed is '", v, seed_range)});
  }
  for (const char* v : {"2147483648", "1,-4,8,8", "1,4,8,8x", "1,,8", "268435457"}) {
    cases.push_back({absl::StrCat("--input-shape=", v),
                     absl::StrCat("--input-shape is '", v,
                                  "'; expected comma-separated dimensions in [0, 268435456], e.g. 1,3,8,8")});
  }
  for (const Case& c : cases) {
    std::vector<std::string> args = {"quantize", kModel, "--backend=qnnpack", c.flag, "-o", q};
    if (c.flag.rfind("--input-shape", 0) != 0) args.insert(args.end() - 2, "--input-shape=1,4,8,8");
    CliResult r = RunFuselage(args);
    EXPECT_EQ(r.code, kExitUsage) << c.flag;
    EXPECT_EQ(r.err, absl::StrCat("fuselage: ", c.expected, "\n")) << c.flag;
  }
  // The ends of each range are accepted: seed 2^32 - 1 is its own seed, not 0's (the
  // calibrated model differs), and --samples counts what it says.
  auto quantize = [&](const std::string& seed, const std::string& samples) {
    CommandResult r = InvokeCommand(QuantizeCommand(),
                                    {kModel, "--backend=qnnpack", "--input-shape=1,4,8,8",
                                     seed, samples, "-o", q});
    EXPECT_TRUE(r.status.ok()) << seed << " " << samples << ": " << r.status;
    EXPECT_NE(r.out.find(absl::StrCat("calibrate: ", samples.substr(10), " samples\n")),
              std::string::npos)
        << r.out;
    return FileContents(q);
  };
  const std::string seed_max = quantize("--seed=4294967295", "--samples=1");
  const std::string seed_zero = quantize("--seed=0", "--samples=1");
  EXPECT_NE(seed_max, seed_zero);
  EXPECT_EQ(quantize("--seed=0", "--samples=1"), seed_zero);
  quantize("--seed=0", "--samples=3");
}

// Empty calibration is refused, naming the placeholder: a random input shaped [0, ...],
// and a (0, 4, 8, 8) .npy file (both used to give exit 0 and quantize_per_tensor(x, 1.0,
// 0)). With --samples=10^9 the refusal still comes at once: samples are made one at a
// time, not all before the first runs.
TEST(QuantizeCliTest, EmptyCalibrationIsRefused) {
  const std::string q = TempPath("empty.fsl");
  const std::string empty_npy = TempPath("empty.npy");
  ASSERT_TRUE(WriteNpy(*Tensor::Zeros(DType::kFloat32, {0, 4, 8, 8}), empty_npy).ok());
  const std::string expected =
      "fuselage: calibrate: sample 0 gives placeholder 'x' a tensor of shape [0, 4, 8, 8], "
      "which has no elements; expected at least one value to observe\n";
  for (const std::vector<std::string>& calibration :
       std::vector<std::vector<std::string>>{{"--input-shape=0,4,8,8"},
                                             {"--input-shape=0,4,8,8", "--samples=1000000000"},
                                             {absl::StrCat("--calibration=", empty_npy)}}) {
    std::vector<std::string> args = {"quantize", kModel, "--backend=qnnpack", "-o", q};
    args.insert(args.end() - 2, calibration.begin(), calibration.end());
    CliResult r = RunFuselage(args);
    EXPECT_EQ(r.code, kExitFailure) << calibration[0];
    EXPECT_EQ(r.err, expected) << calibration[0];
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

// residual.textproto with `old_text` replaced by `new_text` (which must occur), written
// to a scratch file.
std::string EditedModel(const std::string& name, const std::string& old_text,
                        const std::string& new_text) {
  const std::string text = FileContents(kModel);
  EXPECT_NE(text.find(old_text), std::string::npos) << old_text;
  const std::string path = TempPath(name);
  std::ofstream(path) << absl::StrReplaceAll(text, {{old_text, new_text}});
  return path;
}

// Sizes from input past Tensor::kMaxElements (2^28 elements) are refused before anything
// is allocated (each of these used to abort with an uncaught std::bad_alloc): an input
// shape, a shape recorded on the placeholder, and a valid conv whose padding 10000 makes
// a 1.6·10^9-element output, under `run` and `quantize`.
TEST(QuantizeCliTest, SizesPastTheTensorLimitAreRefusedBeforeAllocating) {
  const std::string q = TempPath("huge.fsl");
  CliResult r = RunFuselage({"quantize", kModel, "--backend=qnnpack",
                             "--input-shape=1,4,20000,20000", "-o", q});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_EQ(r.err, "fuselage: calibrate: placeholder 'x': shape [1, 4, 20000, 20000] has more "
                   "than 268435456 elements\n");

  const std::string recorded = EditedModel(
      "recorded_shape.textproto",
      "          items {\n            int_value: 1\n          }\n          items {\n            int_value: 4\n          }\n"
      "          items {\n            int_value: 8\n          }\n          items {\n            int_value: 8\n          }\n",
      "          items {\n            int_value: 2147483648\n          }\n");
  r = RunFuselage({"quantize", recorded, "--backend=qnnpack", "-o", q});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_EQ(r.err, "fuselage: calibrate: placeholder 'x': shape [2147483648] has more than "
                   "268435456 elements\n");

  const std::string padded = EditedModel(
      "padded.textproto",
      "name: \"padding\"\n        value {\n          list {\n            items {\n"
      "              int_value: 1\n            }\n            items {\n"
      "              int_value: 1\n",
      "name: \"padding\"\n        value {\n          list {\n            items {\n"
      "              int_value: 10000\n            }\n            items {\n"
      "              int_value: 10000\n");
  r = RunFuselage({"quantize", padded, "--backend=qnnpack", "--input-shape=1,4,8,8", "-o", q});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_EQ(r.err, "fuselage: node 'conv' (call_module conv): shape [1, 4, 20006, 20006] has "
                   "more than 268435456 elements\n");
  r = RunFuselage({"run", padded, "--input=tests/quantize/testdata/residual_test_input.npy"});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_EQ(r.err, "fuselage: node 'conv' (call_module conv): shape [16, 4, 20006, 20006] has "
                   "more than 268435456 elements\n");
}

}  // namespace
}  // namespace fuselage
