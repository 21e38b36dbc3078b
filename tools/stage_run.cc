#include "tools/stage_run.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "graph/serialization.h"
#include "graph/status_macros.h"
#include "onnx/onnx_reader.h"
#include "onnx/onnx_writer.h"

namespace fuselage {

absl::StatusOr<StageRun> StageRun::Parse(const Command& command,
                                         const std::vector<std::string>& args,
                                         const StageFlags& flags) {
  std::vector<FlagSpec> specs = flags.flags;
  specs.push_back({{"-o", "--output"}, true, absl::StrCat("where to write the ", flags.output_noun),
                   "FILE"});
  if (flags.timed) {
    specs.push_back({{"--time"}, false, "print one 'time <step> <ms> ms' line per step"});
  }
  ASSIGN_OR_RETURN(ParsedArgs parsed, ParseArgs(command.name, args, specs));
  RETURN_IF_ERROR(ExpectPositional(command, parsed, 1));
  if (!parsed.Has("-o") || parsed.flags.at("-o").empty()) {
    return UsageError(absl::StrCat(command.name, ": needs -o OUT, the file to write the ",
                                   flags.output_noun, " to"));
  }
  std::string output = parsed.flags.at("-o");
  return StageRun(std::move(parsed), std::move(output));
}

absl::StatusOr<std::unique_ptr<GraphModule>> StageRun::LoadInput(const CommandContext& context) {
  times_.Start();
  ASSIGN_OR_RETURN(std::unique_ptr<GraphModule> gm, LoadModelArg(context, input()));
  times_.Stop("load");
  return gm;
}

absl::Status StageRun::VerifyAndSave(const CommandContext& context, const GraphModule& gm,
                                     absl::string_view graph) {
  times_.Start();
  if (absl::Status verified = gm.Verify(); !verified.ok()) {
    return absl::InternalError(
        absl::StrCat(graph, " fails Verify (a fuselage bug): ", verified.message()));
  }
  times_.Stop("verify");
  return Save(context, gm);
}

absl::Status StageRun::Save(const CommandContext& context, const GraphModule& gm) {
  times_.Start();
  // -o x.onnx writes ONNX (QDQ where the model is quantized), as `fuselage run x.onnx`
  // reads it; anything else a fuselage model file.
  if (IsOnnxPath(output_)) {
    RETURN_IF_ERROR(SaveOnnxModel(gm, context.ResolvePath(output_)));
  } else {
    RETURN_IF_ERROR(SaveModel(gm, context.ResolvePath(output_)));
  }
  times_.Stop("save");
  return absl::OkStatus();
}

void StageRun::PrintTimes(std::ostream& out) const {
  if (parsed_.Has("--time")) out << times_.ToString();
}

}  // namespace fuselage
