// Test helpers for the `fuselage` command-line tool: run the whole CLI in-process, or one
// Command on its own, and capture what it prints; make paths in the test's scratch
// directory; read a file the CLI wrote. Shared by the CLI tests in tests/tools and
// tests/quantize so that every one of them drives the tool the same way.
#ifndef FUSELAGE_TESTS_TOOLS_RUN_CLI_H_
#define FUSELAGE_TESTS_TOOLS_RUN_CLI_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tools/command.h"

namespace fuselage {

// What `fuselage ARGS...` did: its exit code (tools/cli.h: kExitOk, kExitFailure,
// kExitUsage) and everything it wrote to stdout and stderr.
struct CliResult {
  int code;
  std::string out;
  std::string err;
};

// Runs `fuselage ARGS...` (args exclude the program name) with every built-in command,
// as the binary would, relative paths resolved against `working_directory` (empty: the
// test's own working directory, the runfiles root).
CliResult RunFuselage(const std::vector<std::string>& args,
                      const std::string& working_directory = "");

// What one Command returned, before the CLI turns it into an exit code and a message,
// and what it wrote to its output stream.
struct CommandResult {
  absl::Status status;
  std::string out;
};

// Runs `command` alone on `args` (the arguments after the command's name), in the test's
// working directory.
CommandResult InvokeCommand(const Command& command, const std::vector<std::string>& args);

// The test's scratch directory: $TEST_TMPDIR under Bazel, else /tmp.
std::string TempDir();

// `name` in TempDir().
std::string TempPath(const std::string& name);

// The steps of the `time <step> <ms> ms` lines of a command's output, in order (the
// format bench/compare_pytorch.py parses: `^time (\w+)\s+([0-9.]+) ms$`); other lines are
// skipped. A time line of another shape, or whose figure is not a number >= 0, is a test
// failure.
std::vector<std::string> TimedSteps(const std::string& out);

// The bytes of the file at `path`; "" and a test failure naming the file if it cannot be
// read.
std::string FileContents(const std::string& path);

}  // namespace fuselage

#endif  // FUSELAGE_TESTS_TOOLS_RUN_CLI_H_
