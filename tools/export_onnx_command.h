// `fuselage export-onnx`: see export_onnx_command.cc for what it does.
#ifndef FUSELAGE_TOOLS_EXPORT_ONNX_COMMAND_H_
#define FUSELAGE_TOOLS_EXPORT_ONNX_COMMAND_H_

#include "tools/command.h"

namespace fuselage {

Command ExportOnnxCommand();

}  // namespace fuselage

#endif  // FUSELAGE_TOOLS_EXPORT_ONNX_COMMAND_H_
