// The quantization flow one stage per command, each from and to a model file, so every
// stage can be run and timed on its own (bench/compare_pytorch.py times them):
//   fuselage prepare MODEL --backend=NAME [--config=FILE] -o PREPARED [--time]
//   fuselage calibrate PREPARED [--calibration=... | --samples=N ...] -o CALIBRATED [--time]
//   fuselage convert PREPARED -o REFERENCE [--time]
// then `fuselage lower` (tools/cmd_quantize.h). See cmd_stages.cc.
#ifndef FUSELAGE_TOOLS_CMD_STAGES_H_
#define FUSELAGE_TOOLS_CMD_STAGES_H_

#include "tools/command.h"

namespace fuselage {

Command PrepareCommand();
Command CalibrateCommand();
Command ConvertCommand();

}  // namespace fuselage

#endif  // FUSELAGE_TOOLS_CMD_STAGES_H_
