// `fuselage export-onnx MODEL -o OUT.onnx`: writes MODEL (a fuselage model file or an
// ONNX file) as ONNX through onnx/onnx_writer.h, what fuselage.to_onnx writes: a float
// model as plain ONNX, a reference or lowered quantized one as QDQ. OUT is replaced only
// by a complete new file; on any error nothing is written.
#include "tools/export_onnx_command.h"

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "onnx/onnx_reader.h"
#include "tools/stage_run.h"

namespace fuselage {

Command ExportOnnxCommand() {
  Command command;
  command.name = "export-onnx";
  command.usage = "export-onnx MODEL -o OUT.onnx";
  command.summary = "write a model as ONNX (QDQ where it is quantized) for ONNX Runtime";
  command.run = [command](const std::vector<std::string>& args,
                          CommandContext& context) -> absl::Status {
    StageFlags flags;
    flags.output_noun = "ONNX model";
    ASSIGN_OR_RETURN(StageRun stage, StageRun::Parse(command, args, flags));
    if (!IsOnnxPath(stage.output()))
      return UsageError(absl::StrCat(command.name, ": -o ", stage.output(),
                                     ": expected a path ending in .onnx"));
    ASSIGN_OR_RETURN(auto gm, stage.LoadInput(context));
    RETURN_IF_ERROR(stage.Save(context, *gm));
    context.out << "wrote " << stage.output() << " (ONNX opset 17, " << gm->graph().size()
                << " fuselage nodes)\n";
    return absl::OkStatus();
  };
  return command;
}

}  // namespace fuselage
