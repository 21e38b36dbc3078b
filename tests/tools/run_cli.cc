#include "tests/tools/run_cli.h"

#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"
#include "tools/all_commands.h"
#include "tools/cli.h"

namespace fuselage {

CliResult RunFuselage(const std::vector<std::string>& args, const std::string& working_directory) {
  std::ostringstream out, err;
  const int code = RunCli(args, AllCommands(), working_directory, out, err);
  return {code, out.str(), err.str()};
}

CommandResult InvokeCommand(const Command& command, const std::vector<std::string>& args) {
  std::ostringstream out;
  CommandContext context{out, ""};
  absl::Status status = command.run(args, context);
  return {std::move(status), out.str()};
}

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

std::string TempPath(const std::string& name) { return absl::StrCat(TempDir(), "/", name); }

std::string FileContents(const std::string& path) {
  // Far above any file these tests write; ReadFile refuses larger ones.
  constexpr int64_t kMaxBytes = int64_t{1} << 30;
  absl::StatusOr<std::string> bytes = ReadFile(path, kMaxBytes);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *std::move(bytes) : "";
}

}  // namespace fuselage
