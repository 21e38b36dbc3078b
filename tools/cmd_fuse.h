// `fuselage fuse`: see cmd_fuse.cc for what it does.
#ifndef FUSELAGE_TOOLS_CMD_FUSE_H_
#define FUSELAGE_TOOLS_CMD_FUSE_H_

#include "tools/command.h"

namespace fuselage {

Command FuseCommand();

}  // namespace fuselage

#endif  // FUSELAGE_TOOLS_CMD_FUSE_H_
