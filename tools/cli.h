// The `fuselage` command line: dispatches `fuselage COMMAND ARGS...` to a Command and
// turns its result into output and an exit code. Kept apart from main() so tests can
// run the whole CLI in-process.
//
// Exit codes: 0 success; 1 the command failed on its input (bad model file, unwritable
// output, or memory ran out); 2 the command line is wrong (unknown command or flag, missing
// operand). Every failure prints exactly one line, `fuselage: <message>`, on `err`.
#ifndef FUSELAGE_TOOLS_CLI_H_
#define FUSELAGE_TOOLS_CLI_H_

#include <ostream>
#include <string>
#include <vector>

#include "tools/command.h"

namespace fuselage {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// The usage text: every command's usage line and summary.
std::string UsageText(const std::vector<Command>& commands);

// `args` excludes the program name. `fuselage`, `fuselage help`, `-h` and `--help` print
// the usage text (to `err` with exit 2 when no command was given, else to `out`). A
// std::bad_alloc escaping a command (sizes from input are bounded before allocating, see
// Tensor::kMaxElements, but the machine may still run out) is one line
// `fuselage: out of memory ...` and exit 1 (OutOfMemoryExit), not an abort.
// `progress` (CommandContext::progress) is where long commands report progress, or null.
int RunCli(const std::vector<std::string>& args, const std::vector<Command>& commands,
           const std::string& working_directory, std::ostream& out, std::ostream& err,
           std::ostream* progress = nullptr);

// Prints the out-of-memory line on `err` and returns kExitFailure: for RunCli, and for
// main() around what it does besides RunCli.
int OutOfMemoryExit(std::ostream& err);

}  // namespace fuselage

#endif  // FUSELAGE_TOOLS_CLI_H_
