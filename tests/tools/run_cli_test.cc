// The CLI test helpers (tests/tools/run_cli.h) against what the CLI and the file system
// independently give: exit codes and streams as tools/cli.h defines them, the bytes
// written by WriteFile, and a failure for a file that is not there.
#include "tests/tools/run_cli.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "graph/file_io.h"
#include "graph/serialization.h"
#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"
#include "tools/all_commands.h"
#include "tools/cli.h"

namespace fuselage {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kExample[] = "tools/examples/residual.textproto";
constexpr char kVerified[] =
    "tools/examples/residual.textproto: ok (7 nodes, 4 modules, 6 tensors)\n";

const Command& FindCommand(absl::string_view name) {
  static const std::vector<Command>* commands = new std::vector<Command>(AllCommands());
  for (const Command& command : *commands) {
    if (command.name == name) return command;
  }
  ADD_FAILURE() << "no command " << name;
  return commands->front();
}

TEST(RunCliTest, TempPathIsInTheTestsScratchDirectory) {
  const char* bazel_tmp = std::getenv("TEST_TMPDIR");
  ASSERT_NE(bazel_tmp, nullptr) << "run under bazel test";
  EXPECT_EQ(TempDir(), bazel_tmp);
  EXPECT_EQ(TempPath("a.fsl"), absl::StrCat(bazel_tmp, "/a.fsl"));
}

TEST(RunCliTest, FileContentsIsEveryByteAndAFailureForAMissingFile) {
  const std::string path = TempPath("bytes.bin");
  const std::string bytes("a\0b\nc", 5);
  ASSERT_TRUE(WriteFileAtomically(path, bytes).ok());
  EXPECT_EQ(FileContents(path), bytes);

  static std::string missing_contents = "not read";
  EXPECT_NONFATAL_FAILURE(missing_contents = FileContents("/nonexistent/file.fsl"),
                          "cannot open '/nonexistent/file.fsl'");
  EXPECT_EQ(missing_contents, "");
}

TEST(RunCliTest, TimedStepsReadsOnlyTheTimeLinesAndChecksTheirShape) {
  EXPECT_EQ(TimedSteps("fused 1 match\ntime load            0.123 ms\nload 5\ntime save 12.5 ms\n"),
            (std::vector<std::string>{"load", "save"}));
  EXPECT_EQ(TimedSteps("no time lines\n"), std::vector<std::string>{});
  EXPECT_NONFATAL_FAILURE(TimedSteps("time load fast\n"), "not `time <step> <ms> ms`");
  EXPECT_NONFATAL_FAILURE(TimedSteps("time load 1.0 s\n"), "not `time <step> <ms> ms`");
  EXPECT_NONFATAL_FAILURE(TimedSteps("time load -1.0 ms\n"), "time load -1.0 ms");
}

TEST(RunCliTest, RunFuselageGivesExitCodeAndBothStreams) {
  CliResult ok = RunFuselage({"verify", kExample});
  EXPECT_EQ(ok.code, kExitOk);
  EXPECT_EQ(ok.out, kVerified);
  EXPECT_EQ(ok.err, "");

  CliResult usage = RunFuselage({"verify"});
  EXPECT_EQ(usage.code, kExitUsage);
  EXPECT_EQ(usage.out, "");
  EXPECT_THAT(usage.err, StartsWith("fuselage: verify: expected 1 operand, got 0"));

  CliResult missing = RunFuselage({"verify", "/nonexistent/model.fsl"});
  EXPECT_EQ(missing.code, kExitFailure);
  EXPECT_THAT(missing.err, HasSubstr("/nonexistent/model.fsl"));
}

TEST(RunCliTest, RunFuselageResolvesRelativePathsInTheWorkingDirectory) {
  CliResult r = RunFuselage({"verify", "residual.textproto"}, "tools/examples");
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr(": ok (7 nodes"));
}

TEST(RunCliTest, InvokeCommandGivesTheCommandsOwnStatus) {
  CommandResult ok = InvokeCommand(FindCommand("verify"), {kExample});
  EXPECT_TRUE(ok.status.ok()) << ok.status;
  EXPECT_EQ(ok.out, kVerified);

  CommandResult usage = InvokeCommand(FindCommand("verify"), {});
  EXPECT_TRUE(IsUsageError(usage.status)) << usage.status;
  EXPECT_EQ(usage.out, "");
}

}  // namespace
}  // namespace fuselage
