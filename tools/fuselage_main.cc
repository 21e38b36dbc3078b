// The `fuselage` command-line tool. All logic lives in tools/cli.cc and the commands.
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "tools/all_commands.h"
#include "tools/cli.h"

int main(int argc, char** argv) {
  // RunCli turns a std::bad_alloc of a command into its one line; this catches one from
  // building the arguments or the command table, so no allocation failure aborts.
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    // Under `bazel run` the process starts in the runfiles tree; resolve the user's
    // relative paths against the directory the command was typed in.
    const char* working_directory = std::getenv("BUILD_WORKING_DIRECTORY");
    return fuselage::RunCli(args, fuselage::AllCommands(),
                            working_directory != nullptr ? working_directory : "", std::cout,
                            std::cerr, isatty(STDERR_FILENO) ? &std::cerr : nullptr);
  } catch (const std::bad_alloc&) {
    return fuselage::OutOfMemoryExit(std::cerr);
  }
}
