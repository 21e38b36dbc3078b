// `fuselage demo`: see demo_command.cc for what it does.
#ifndef FUSELAGE_TOOLS_DEMO_COMMAND_H_
#define FUSELAGE_TOOLS_DEMO_COMMAND_H_

#include "tools/command.h"

namespace fuselage {

Command DemoCommand();

}  // namespace fuselage

#endif  // FUSELAGE_TOOLS_DEMO_COMMAND_H_
