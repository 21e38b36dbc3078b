// `fuselage print`: see print_command.cc for what it does.
#ifndef FUSELAGE_TOOLS_PRINT_COMMAND_H_
#define FUSELAGE_TOOLS_PRINT_COMMAND_H_

#include "tools/command.h"

namespace fuselage {

Command PrintCommand();

}  // namespace fuselage

#endif  // FUSELAGE_TOOLS_PRINT_COMMAND_H_
