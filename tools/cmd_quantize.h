// `fuselage quantize` (fuse → prepare → calibrate → convert → lower) and `fuselage lower`
// (a reference quantized model → native quantized ops): see cmd_quantize.cc.
#ifndef FUSELAGE_TOOLS_CMD_QUANTIZE_H_
#define FUSELAGE_TOOLS_CMD_QUANTIZE_H_

#include "tools/command.h"

namespace fuselage {

Command QuantizeCommand();
Command LowerCommand();

}  // namespace fuselage

#endif  // FUSELAGE_TOOLS_CMD_QUANTIZE_H_
