// Every subcommand of the `fuselage` binary, in the order `fuselage help` lists them.
// A new subcommand (fuse, explain, quantize, lower, run) adds its factory here.
#ifndef FUSELAGE_TOOLS_ALL_COMMANDS_H_
#define FUSELAGE_TOOLS_ALL_COMMANDS_H_

#include <vector>

#include "tools/command.h"

namespace fuselage {

std::vector<Command> AllCommands();

}  // namespace fuselage

#endif  // FUSELAGE_TOOLS_ALL_COMMANDS_H_
