// A model of a type a backend config declares (fused_module_type;
// backend_configs/examples/conv_add_relu_new_type.textproto's user.ConvBnAddReLU2d) staged
// by the CLI one command per process: fuse -> prepare -> calibrate -> convert -> lower ->
// run. Each process after `fuse` loads a model holding the declared type, whose modules
// carry their steps: it runs without the config; convert and lower read the declaration
// (`--config`, tools/backend_flag.h).
// The expectation is independent of the staging: `quantize` in one process with the
// same flags and samples, whose lowered model file and run output must be the same bytes.
//
// The `fuselage` binary is run as a subprocess, not in-process (tests/tools/run_cli.h),
// because declarations are process-wide: in one process, the first --config would make
// every later command see the type.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "graph/tensor.h"
#include "gtest/gtest.h"
#include "runtime/npy.h"
#include "tests/tools/run_cli.h"

namespace fuselage {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kBinary[] = "tools/fuselage";
constexpr char kResidual[] = "tools/examples/residual.textproto";
constexpr char kConfig[] = "backend_configs/examples/conv_add_relu_new_type.textproto";

// `s` in single quotes for /bin/sh.
std::string ShellQuoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// `fuselage ARGS...` in a process of its own, its stdout and stderr captured.
CliResult RunProcess(const std::vector<std::string>& args) {
  static int calls = 0;
  const std::string out_path = TempPath("process_out_" + std::to_string(calls));
  const std::string err_path = TempPath("process_err_" + std::to_string(calls++));
  std::string command = ShellQuoted(kBinary);
  for (const std::string& a : args) command += " " + ShellQuoted(a);
  command += " > " + ShellQuoted(out_path) + " 2> " + ShellQuoted(err_path);
  const int status = std::system(command.c_str());
  CliResult result;
  result.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = FileContents(out_path);
  result.err = FileContents(err_path);
  return result;
}

const std::string& Config() {
  static const std::string* flag = new std::string(std::string("--config=") + kConfig);
  return *flag;
}

// The residual example's input, 1x4x8x8, not symmetric around 0 so relu matters.
std::string WriteInput() {
  std::vector<float> values(4 * 8 * 8);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = static_cast<float>((static_cast<int>(i * 37 % 101) - 40)) / 50.0f;
  }
  const std::string path = TempPath("declared_x.npy");
  EXPECT_TRUE(WriteNpy(Tensor::FromFloats(Shape({1, 4, 8, 8}), values), path).ok());
  return path;
}

const std::vector<std::string> kSamples = {"--samples=4", "--seed=7", "--input-shape=1,4,8,8"};

std::vector<std::string> With(std::vector<std::string> args,
                              const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(DeclaredTypeStagesTest, StagedByTheCliEqualsQuantizeInOneProcess) {
  const std::string fused = TempPath("declared_fused.fsl");
  const std::string prepared = TempPath("declared_prepared.fsl");
  const std::string calibrated = TempPath("declared_calibrated.fsl");
  const std::string reference = TempPath("declared_reference.fsl");
  const std::string lowered = TempPath("declared_lowered.fsl");
  const std::string quantized = TempPath("declared_quantized.fsl");

  CliResult r = RunProcess({"fuse", kResidual, Config(), "-o", fused});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("user_conv_bn_add_relu: 1"));
  r = RunProcess({"prepare", fused, "--backend=qnnpack", Config(), "-o", prepared});
  ASSERT_EQ(r.code, 0) << r.err;
  r = RunProcess(With({"calibrate", prepared, Config(), "-o", calibrated}, kSamples));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("calibrate: 4 samples"));
  r = RunProcess({"convert", calibrated, Config(), "-o", reference});
  ASSERT_EQ(r.code, 0) << r.err;
  r = RunProcess({"lower", reference, "--backend=qnnpack", Config(), "-o", lowered});
  ASSERT_EQ(r.code, 0) << r.err;

  r = RunProcess(With({"quantize", kResidual, "--backend=qnnpack", Config(), "--quiet", "-o",
                       quantized},
                      kSamples));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(FileContents(lowered), FileContents(quantized));

  const std::string x = WriteInput();
  const std::string staged_y = TempPath("declared_staged_y.npy");
  const std::string quantized_y = TempPath("declared_quantized_y.npy");
  r = RunProcess({"run", lowered, "--input=" + x, "--output=" + staged_y});
  ASSERT_EQ(r.code, 0) << r.err;
  r = RunProcess({"run", quantized, "--input=" + x, "--output=" + quantized_y});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string staged_bytes = FileContents(staged_y);
  ASSERT_FALSE(staged_bytes.empty());
  EXPECT_EQ(staged_bytes, FileContents(quantized_y));
  // Not a constant: the quantized output is mostly nonzero for this input (relu of a
  // conv plus a residual of mixed sign).
  auto y = ReadNpy(staged_y);
  ASSERT_TRUE(y.ok()) << y.status();
  int nonzero = 0;
  for (int64_t i = 0; i < y->numel(); ++i) nonzero += y->data<float>()[i] != 0.0f;
  EXPECT_GT(nonzero, 0);
  EXPECT_LT(nonzero, y->numel());

  // The reference model (still user.ConvBnAddReLU2d) runs with its config, as the
  // lowered one does: the native op reads the same quantized values.
  const std::string reference_y = TempPath("declared_reference_y.npy");
  r = RunProcess({"run", reference, Config(), "--input=" + x, "--output=" + reference_y});
  ASSERT_EQ(r.code, 0) << r.err;
}

std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// The model carries its declared modules' steps: a process that never loads the config
// runs and calibrates it, giving the same bytes as one that does.
TEST(DeclaredTypeStagesTest, ModelsRunAndCalibrateWithoutTheirConfig) {
  const std::string fused = TempPath("bare_fused.fsl");
  const std::string prepared = TempPath("bare_prepared.fsl");
  CliResult r = RunProcess({"fuse", kResidual, Config(), "-o", fused});
  ASSERT_EQ(r.code, 0) << r.err;
  r = RunProcess({"prepare", fused, "--backend=qnnpack", Config(), "-o", prepared});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string x = WriteInput();

  const std::string with_y = TempPath("bare_with_y.npy");
  const std::string without_y = TempPath("bare_without_y.npy");
  r = RunProcess({"run", fused, Config(), "--input=" + x, "--output=" + with_y});
  ASSERT_EQ(r.code, 0) << r.err;
  r = RunProcess({"run", fused, "--input=" + x, "--output=" + without_y});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(FileBytes(without_y), FileBytes(with_y));

  const std::string with_cal = TempPath("bare_with_cal.fsl");
  const std::string without_cal = TempPath("bare_without_cal.fsl");
  r = RunProcess(With({"calibrate", prepared, Config(), "-o", with_cal}, kSamples));
  ASSERT_EQ(r.code, 0) << r.err;
  r = RunProcess(With({"calibrate", prepared, "-o", without_cal}, kSamples));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(FileBytes(without_cal), FileBytes(with_cal));
}

TEST(DeclaredTypeStagesTest, ConfigListsTakeSeveralFilesAndRefuseBadOnes) {
  const std::string fused = TempPath("list_fused.fsl");
  CliResult r = RunProcess({"fuse", kResidual, Config(), "-o", fused});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string x = WriteInput();
  // Two files, the second a built-in-based config declaring nothing.
  r = RunProcess({"run", fused,
                  Config() + ",backend_configs/examples/conv_bn_add_relu.textproto",
                  "--input=" + x});
  EXPECT_EQ(r.code, 0) << r.err;

  r = RunProcess({"run", fused, Config() + ",", "--input=" + x});
  EXPECT_EQ(r.code, 2) << r.err;  // a usage error
  EXPECT_THAT(r.err, HasSubstr("has an empty file name"));

  const std::string missing = TempPath("no_such_config.textproto");
  r = RunProcess({"convert", fused, "--config=" + missing, "-o", TempPath("list_out.fsl")});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("convert: --config: "));
  EXPECT_THAT(r.err, HasSubstr(missing));
  EXPECT_THAT(r.err, Not(HasSubstr("prepare it first")));  // refused before the model is read
}

}  // namespace
}  // namespace fuselage
