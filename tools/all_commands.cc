#include "tools/all_commands.h"

#include "tools/cmd_explain.h"
#include "tools/cmd_fuse.h"
#include "tools/cmd_quantize.h"
#include "tools/cmd_run.h"
#include "tools/cmd_stages.h"
#include "tools/demo_command.h"
#include "tools/dot_command.h"
#include "tools/export_onnx_command.h"
#include "tools/print_command.h"
#include "tools/verify_command.h"

namespace fuselage {

std::vector<Command> AllCommands() {
  return {
      DemoCommand(),
      PrintCommand(),
      DotCommand(),
      VerifyCommand(),
      FuseCommand(),
      ExplainCommand(),
      QuantizeCommand(),
      PrepareCommand(),
      CalibrateCommand(),
      ConvertCommand(),
      LowerCommand(),
      RunCommand(),
      ExportOnnxCommand(),
  };
}

}  // namespace fuselage
