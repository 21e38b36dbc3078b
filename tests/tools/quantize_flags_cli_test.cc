// quantize's calibration flags as the CLI parses them (issue 23's smaller items): the
// residual example carries its input shape, a missing shape names --input-shape, the
// per-input NAME:DIMS form, --reference says lowering was skipped, and the random-sample
// flags are refused with --calibration instead of being silently ignored.
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"
#include "runtime/quantized_engine.h"
#include "tests/tools/run_cli.h"

namespace fuselage {
namespace {

constexpr char kModel[] = "tools/examples/residual.textproto";
constexpr int kExitUsage = 2;

// The engine a model file records (runtime/quantized_engine.h), read back from the file.
std::optional<QuantizedEngine> EngineRecordedIn(const std::string& path) {
  auto gm = LoadModel(path);
  EXPECT_TRUE(gm.ok()) << gm.status();
  if (!gm.ok()) return std::nullopt;
  auto engine = RecordedEngine(**gm);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? *engine : std::nullopt;
}

// quantize records the backend config's engine (qnnpack -> qnnpack, fbgemm -> onednn)
// unless --engine names one; prepare and calibrate take --engine too.
TEST(QuantizeFlagsCliTest, EngineFlagChoosesTheRecordedEngine) {
  const std::string by_backend = TempPath("engine_backend.fsl");
  ASSERT_EQ(RunFuselage({"quantize", kModel, "--backend=qnnpack", "--samples=2", "-o", by_backend})
                .code,
            0);
  EXPECT_EQ(EngineRecordedIn(by_backend), QuantizedEngine::kQnnpack);

  const std::string fbgemm = TempPath("engine_fbgemm.fsl");
  ASSERT_EQ(RunFuselage({"quantize", kModel, "--backend=fbgemm", "--samples=2", "-o", fbgemm}).code,
            0);
  EXPECT_EQ(EngineRecordedIn(fbgemm), QuantizedEngine::kOnednn);

  const std::string explicit_engine = TempPath("engine_explicit.fsl");
  CliResult r = RunFuselage({"quantize", kModel, "--backend=qnnpack", "--samples=2",
                             "--engine=onednn", "-o", explicit_engine});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(EngineRecordedIn(explicit_engine), QuantizedEngine::kOnednn);

  const std::string prepared = TempPath("engine_prepared.fsl");
  r = RunFuselage({"prepare", kModel, "--backend=fbgemm", "--engine=qnnpack", "-o", prepared});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(EngineRecordedIn(prepared), QuantizedEngine::kQnnpack);
  const std::string calibrated = TempPath("engine_calibrated.fsl");
  r = RunFuselage({"calibrate", prepared, "--samples=2", "--engine=onednn", "-o", calibrated});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(EngineRecordedIn(calibrated), QuantizedEngine::kOnednn);

  EXPECT_EQ(RunFuselage({"quantize", kModel, "--backend=qnnpack", "--engine=fast", "-o",
                         explicit_engine})
                .code,
            kExitUsage);
}

TEST(QuantizeFlagsCliTest, ResidualExampleNeedsNoInputShape) {
  const std::string q = TempPath("no_shape_flag.fsl");
  CliResult r = RunFuselage({"quantize", kModel, "--backend=qnnpack", "--samples=2", "-o", q});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "lower-to-native")) << r.out;
}

TEST(QuantizeFlagsCliTest, WrittenExampleNeedsNoInputShape) {
  const std::string example = TempPath("written_example.fsl");
  ASSERT_EQ(RunFuselage({"demo", "--write-example", example}).code, 0);
  const std::string q = TempPath("written_example_q.fsl");
  CliResult r = RunFuselage({"quantize", example, "--backend=qnnpack", "--samples=2", "-o", q});
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST(QuantizeFlagsCliTest, MissingShapeNamesInputShapeFlag) {
  std::string text = FileContents(kModel);
  const std::string meta =
      "    meta {\n      name: \"shape\"\n      value {\n        list {\n"
      "          items {\n            int_value: 1\n          }\n          items {\n            int_value: 4\n          }\n"
      "          items {\n            int_value: 8\n          }\n          items {\n            int_value: 8\n          }\n"
      "        }\n      }\n    }\n";
  ASSERT_TRUE(absl::StrContains(text, meta));
  const std::string shapeless = TempPath("shapeless.textproto");
  std::ofstream(shapeless) << absl::StrReplaceAll(text, {{meta, ""}});
  CliResult r = RunFuselage(
      {"quantize", shapeless, "--backend=qnnpack", "-o", TempPath("shapeless_q.fsl")});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_TRUE(absl::StrContains(r.err, "placeholder 'x' has no meta 'shape'")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "--input-shape=DIMS")) << r.err;
}

TEST(QuantizeFlagsCliTest, PerInputShapeFormIsAcceptedAndChecked) {
  const std::string q = TempPath("per_input.fsl");
  CliResult ok = RunFuselage(
      {"quantize", kModel, "--backend=qnnpack", "--samples=2", "--input-shape=x:2,4,8,8", "-o", q});
  EXPECT_EQ(ok.code, 0) << ok.err;

  CliResult unknown = RunFuselage(
      {"quantize", kModel, "--backend=qnnpack", "--input-shape=y:1,4,8,8", "-o", q});
  EXPECT_EQ(unknown.code, kExitUsage);
  EXPECT_TRUE(absl::StrContains(unknown.err, "the model has no input 'y'")) << unknown.err;

  CliResult twice = RunFuselage(
      {"quantize", kModel, "--backend=qnnpack", "--input-shape=x:1,4,8,8;x:1,4,8,8", "-o", q});
  EXPECT_EQ(twice.code, kExitUsage);
  EXPECT_TRUE(absl::StrContains(twice.err, "input 'x' is given twice")) << twice.err;

  CliResult bad_dim = RunFuselage(
      {"quantize", kModel, "--backend=qnnpack", "--input-shape=x:1,-4,8,8", "-o", q});
  EXPECT_EQ(bad_dim.code, kExitUsage);
  EXPECT_TRUE(absl::StrContains(bad_dim.err, "'-4' is no dimension")) << bad_dim.err;
}

TEST(QuantizeFlagsCliTest, ReferenceSaysLoweringWasSkipped) {
  const std::string q = TempPath("reference.fsl");
  CliResult r = RunFuselage(
      {"quantize", kModel, "--backend=qnnpack", "--samples=2", "--reference", "-o", q});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(absl::StrContains(r.out, "pattern(s) lowered")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "lower-to-native: skipped")) << r.out;
}

TEST(QuantizeFlagsCliTest, RandomSampleFlagsConflictWithCalibration) {
  const std::string q = TempPath("conflict.fsl");
  for (const char* flag : {"--samples=4", "--seed=3", "--input-shape=1,4,8,8"}) {
    CliResult r = RunFuselage({"quantize", kModel, "--backend=qnnpack",
                               "--calibration=never_read.npy",
                               flag, "-o", q});
    EXPECT_EQ(r.code, kExitUsage) << flag;
    EXPECT_TRUE(absl::StrContains(r.err, "conflicts with --calibration")) << r.err;
    EXPECT_TRUE(absl::StartsWith(r.err, "fuselage: ")) << r.err;
  }
}

}  // namespace
}  // namespace fuselage
