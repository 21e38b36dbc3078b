// `fuselage verify`: see verify_command.cc for what it does.
#ifndef FUSELAGE_TOOLS_VERIFY_COMMAND_H_
#define FUSELAGE_TOOLS_VERIFY_COMMAND_H_

#include "tools/command.h"

namespace fuselage {

Command VerifyCommand();

}  // namespace fuselage

#endif  // FUSELAGE_TOOLS_VERIFY_COMMAND_H_
