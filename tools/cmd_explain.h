// `fuselage explain`: see cmd_explain.cc for what it does.
#ifndef FUSELAGE_TOOLS_CMD_EXPLAIN_H_
#define FUSELAGE_TOOLS_CMD_EXPLAIN_H_

#include "tools/command.h"

namespace fuselage {

Command ExplainCommand();

}  // namespace fuselage

#endif  // FUSELAGE_TOOLS_CMD_EXPLAIN_H_
