// What the CLI's output files look like when writing them fails (issue 22, item 6); the
// full device is a private /dev/full node (tests/graph/test_devices.h). Every
// command that writes a file (`-o`, `run --output`, `dot -o`, `demo --write-example`)
// reports a full device as one `fuselage:` line and exit 1 instead of "wrote"; a failed
// overwrite leaves the old model byte-identical and loadable with no temporary left; and
// `lower` of a model with nothing to lower refuses instead of overwriting -o.
#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"
#include "tests/graph/test_devices.h"
#include "tests/tools/run_cli.h"
#include "tools/cli.h"

namespace fuselage {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kExample[] = "tools/examples/residual.textproto";
constexpr char kConfig[] = "--config=backend_configs/examples/conv_bn_add_relu.textproto";
const std::vector<std::string> kCalibration = {"--samples=2", "--seed=3",
                                               "--input-shape=1,4,8,8"};

std::vector<std::string> QuantizeArgs(const std::string& output) {
  std::vector<std::string> args = {"quantize", kExample, "--backend=qnnpack", kConfig};
  args.insert(args.end(), kCalibration.begin(), kCalibration.end());
  args.push_back("-o");
  args.push_back(output);
  return args;
}

std::string FreshFolder(const std::string& name) {
  const std::string folder = FreshFolderForTest("output_files_" + name);
  EXPECT_FALSE(folder.empty()) << name;
  return folder;
}

// A (1, 4, 8, 8) float32 .npy of zeros, the residual example's input, written by hand.
std::string ZerosNpy() {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 4, 8, 8), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string bytes = "\x93NUMPY\x01";
  bytes += '\0';
  bytes += static_cast<char>(header.size());
  bytes += '\0';
  return bytes + header + std::string(4 * 4 * 8 * 8, '\0');
}

void ExpectOneFailureLine(const CliResult& r, const std::string& path) {
  EXPECT_EQ(r.code, kExitFailure) << r.out << r.err;
  EXPECT_THAT(r.err, StartsWith("fuselage: "));
  EXPECT_THAT(r.err, HasSubstr(path));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("wrote")));
}

TEST(OutputFilesTest, QuantizeToDevFullFails) {
  const std::string full = FullDeviceForTest();
  const CliResult r = RunFuselage(QuantizeArgs(full));
  ExpectOneFailureLine(r, full);
  EXPECT_THAT(r.err, HasSubstr("No space left on device"));
}

TEST(OutputFilesTest, EveryWritingCommandReportsDevFull) {
  const std::string model = TempPath("output_files_residual.fsl");
  ASSERT_EQ(RunFuselage({"demo", "--write-example", model}).code, kExitOk);
  const std::string input = TempPath("output_files_input.npy");
  {
    std::ofstream out(input, std::ios::binary);
    out << ZerosNpy();
  }
  // The run itself works: only the output is the problem.
  const CliResult ok = RunFuselage({"run", model, "--input=" + input});
  ASSERT_EQ(ok.code, kExitOk) << ok.err;
  const std::string full = FullDeviceForTest();
  const std::vector<std::vector<std::string>> commands = {
      {"fuse", model, kConfig, "-o", full},
      {"dot", model, "-o", full},
      {"demo", "--write-example", full},
      {"run", model, "--input=" + input, "--output=" + full},
  };
  for (const std::vector<std::string>& args : commands) {
    SCOPED_TRACE(args[0]);
    const CliResult r = RunFuselage(args);
    ExpectOneFailureLine(r, full);
    EXPECT_THAT(r.err, HasSubstr("No space left on device"));
  }
}

// A real write failure on the overwrite itself (RLIMIT_FSIZE: write() fails with EFBIG past
// 512 bytes; the quantized model is larger), as a full disk would do it.
TEST(OutputFilesTest, AFailedOverwriteKeepsTheOldModel) {
  const std::string folder = FreshFolder("overwrite");
  const std::string output = folder + "/model.fsl";
  ASSERT_EQ(RunFuselage({"fuse", kExample, kConfig, "-o", output}).code, kExitOk);
  const std::string old_bytes = FileContents(output);
  ASSERT_FALSE(old_bytes.empty());

  struct rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  struct rlimit small = saved;
  small.rlim_cur = 512;
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const CliResult r = RunFuselage(QuantizeArgs(output));
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &saved), 0);
  std::signal(SIGXFSZ, old_handler);

  ExpectOneFailureLine(r, output);
  EXPECT_THAT(r.err, HasSubstr("File too large"));
  EXPECT_EQ(FileContents(output), old_bytes);
  EXPECT_TRUE(LoadModel(output).ok());
  EXPECT_EQ(FolderEntries(folder), std::set<std::string>{"model.fsl"});

  // Without the limit the same command replaces it.
  const CliResult again = RunFuselage(QuantizeArgs(output));
  ASSERT_EQ(again.code, kExitOk) << again.err;
  EXPECT_THAT(again.out, HasSubstr("wrote " + output));
  EXPECT_NE(FileContents(output), old_bytes);
  EXPECT_EQ(FolderEntries(folder), std::set<std::string>{"model.fsl"});
}

TEST(OutputFilesTest, AnOutputFolderThatIsAFileFails) {
  const std::string folder = FreshFolder("notdir");
  const std::string plain = folder + "/plain";
  ASSERT_EQ(RunFuselage({"demo", "--write-example", plain}).code, kExitOk);
  const CliResult r = RunFuselage(QuantizeArgs(plain + "/model.fsl"));
  ExpectOneFailureLine(r, plain + "/model.fsl");
  EXPECT_THAT(r.err, HasSubstr("Not a directory"));
  EXPECT_EQ(FolderEntries(folder), std::set<std::string>{"plain"});
}

// A float model has no dequantize -> op -> quantize pattern: lower refuses it, and an
// existing -o keeps its bytes (a missing one is not created).
TEST(OutputFilesTest, LowerOfAFloatModelIsRefusedAndWritesNothing) {
  const std::string folder = FreshFolder("lower_float");
  const std::string output = folder + "/lowered.fsl";
  ASSERT_EQ(RunFuselage({"demo", "--write-example", output}).code, kExitOk);
  const std::string old_bytes = FileContents(output);

  CliResult r = RunFuselage({"lower", kExample, "--backend=qnnpack", "-o", output});
  EXPECT_EQ(r.code, kExitFailure) << r.out;
  EXPECT_THAT(r.err, StartsWith("fuselage: lower: nothing to lower in " + std::string(kExample)));
  EXPECT_THAT(r.err, HasSubstr("no quantize / dequantize reference patterns"));
  EXPECT_THAT(r.out, Not(HasSubstr("wrote")));
  EXPECT_EQ(FileContents(output), old_bytes);

  r = RunFuselage({"lower", kExample, "--backend=qnnpack", "-o", folder + "/new.fsl"});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_EQ(FolderEntries(folder), std::set<std::string>{"lowered.fsl"});
}

// The reference model of the same example still lowers (the refusal is only for nothing).
TEST(OutputFilesTest, LowerOfAReferenceModelStillWrites) {
  const std::string folder = FreshFolder("lower_reference");
  std::vector<std::string> args = QuantizeArgs(folder + "/reference.fsl");
  args.push_back("--reference");
  ASSERT_EQ(RunFuselage(args).code, kExitOk);
  const CliResult r = RunFuselage(
      {"lower", folder + "/reference.fsl", "--backend=qnnpack", "-o", folder + "/lowered.fsl"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("wrote " + folder + "/lowered.fsl"));
  EXPECT_TRUE(LoadModel(folder + "/lowered.fsl").ok());
}

}  // namespace
}  // namespace fuselage
