#include "tests/tools/run_cli.h"

#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "graph/file_io.h"
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

std::vector<std::string> TimedSteps(const std::string& out) {
  std::vector<std::string> steps;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    if (!absl::StartsWith(line, "time ")) continue;
    std::vector<absl::string_view> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (words.size() != 4 || words[3] != "ms") {
      ADD_FAILURE() << "not `time <step> <ms> ms`: " << line;
      continue;
    }
    double ms = -1;
    EXPECT_TRUE(absl::SimpleAtod(words[2], &ms) && ms >= 0) << line;
    steps.emplace_back(words[1]);
  }
  return steps;
}

std::string FileContents(const std::string& path) {
  // Far above any file these tests write; ReadFile refuses larger ones.
  constexpr int64_t kMaxBytes = int64_t{1} << 30;
  absl::StatusOr<std::string> bytes = ReadFileBounded(path, kMaxBytes);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *std::move(bytes) : "";
}

}  // namespace fuselage
