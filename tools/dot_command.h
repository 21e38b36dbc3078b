// `fuselage dot`: see dot_command.cc for what it does.
#ifndef FUSELAGE_TOOLS_DOT_COMMAND_H_
#define FUSELAGE_TOOLS_DOT_COMMAND_H_

#include "tools/command.h"

namespace fuselage {

Command DotCommand();

}  // namespace fuselage

#endif  // FUSELAGE_TOOLS_DOT_COMMAND_H_
