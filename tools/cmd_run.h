// `fuselage run`: runs a model on .npy inputs; see cmd_run.cc.
#ifndef FUSELAGE_TOOLS_CMD_RUN_H_
#define FUSELAGE_TOOLS_CMD_RUN_H_

#include "tools/command.h"

namespace fuselage {

Command RunCommand();

}  // namespace fuselage

#endif  // FUSELAGE_TOOLS_CMD_RUN_H_
