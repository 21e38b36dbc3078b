// `fuselage prepare MODEL --backend=NAME [--config=FILE] [--qconfig-mapping=FILE]
//                  [--engine=onednn|qnnpack] -o PREPARED [--time]`
//   Prepare (quantize/prepare.h) with the --qconfig-mapping file
//   (quantize/qconfig_mapping.proto), else PyTorch 1.13's default qconfig mapping of the
//   backend, and the backend config NAME (or the --config file, whose base must be NAME),
//   on a model as it is: run `fuse` first (PyTorch's prepare_fx fuses as its first step;
//   `quantize` does both). The observers and each weighted op's plan are written into the
//   model (quantize/prepared_model.h), so the file is a complete prepared model, with the
//   engine its quantized form is to run on (--engine, else the backend config's).
// `fuselage calibrate PREPARED [--calibration=X.npy,... | --samples=N --seed=N
//                    --input-shape=DIMS] [--threads=N] [--engine=onednn|qnnpack]
//                    [--config=FILE[,FILE...]] -o CALIBRATED [--time]`
//   Runs the prepared model on the samples (the flags of `quantize`; --threads as there)
//   and writes the observers' statistics back; calibrating a calibrated model adds to its
//   statistics. --engine replaces the engine recorded at prepare.
// `fuselage convert PREPARED [--config=FILE[,FILE...]] -o REFERENCE [--time]`
//   ConvertToReference (quantize/convert.h) on a prepared, usually calibrated, model: the
//   reference quantized model `lower` takes. An observer that saw no value is refused
//   (convert_fx would give it scale 1.0 and zero point 0). A model without observers is
//   refused: it was not prepared.
// calibrate's and convert's --config: the backend config files declaring the model's
// fused module types (fused_module_type), whose declarations the model's modules are
// checked against; optional, as such a model carries its steps (prepare's --config is the
// backend config, with its declarations).
// Each prints its pass's report and a summary line; --time adds one line per step with
// its wall time, `time <step> <ms> ms`: load, then the pass (prepare, calibrate, convert),
// then verify and save (and, for prepare and calibrate, store: writing the state into
// the model's modules).
#include "tools/cmd_stages.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "pipeline/stages.h"
#include "quantize/calibrate.h"
#include "quantize/convert.h"
#include "quantize/prepare.h"
#include "quantize/prepared_model.h"
#include "quantize/qconfig.h"
#include "tools/backend_flag.h"
#include "tools/quantize_flags.h"
#include "tools/stage_run.h"

namespace fuselage {
namespace {

// The PreparedModel of a loaded model, with the command's name on the error.
absl::StatusOr<PreparedModel> ReadPrepared(absl::string_view command, const std::string& path,
                                           const GraphModule& gm) {
  auto prepared = PreparedModelFromGraph(gm);
  if (!prepared.ok()) {
    return absl::Status(prepared.status().code(),
                        absl::StrCat(command, ": ", path, ": ", prepared.status().message()));
  }
  return prepared;
}

// What a pass left that fails Verify is named so in the error (a fuselage bug).
std::string GraphAfter(absl::string_view stage) {
  return absl::StrCat("the graph after '", stage, "'");
}

// Writes the observers' state and the weight plans into the model's modules (step
// "store"), so the saved file is a complete prepared model, then verifies and saves it.
absl::Status StoreVerifyAndSave(const CommandContext& context, absl::string_view command,
                                const PreparedModel& prepared, GraphModule& gm, StageRun& stage) {
  stage.times().Start();
  RETURN_IF_ERROR(StorePreparedModel(prepared, gm));
  stage.times().Stop("store");
  return stage.VerifyAndSave(context, gm, GraphAfter(command));
}

}  // namespace

Command PrepareCommand() {
  Command command;
  command.name = "prepare";
  command.usage =
      "prepare MODEL --backend=NAME [--config=FILE] [--qconfig-mapping=FILE] "
      "[--engine=onednn|qnnpack] -o OUT [--time]";
  command.summary = "insert observers into a (fused) float model, as prepare_fx does";
  command.run = [command](const std::vector<std::string>& args,
                          CommandContext& context) -> absl::Status {
    StageFlags flags{BackendFlagSpecs()};
    flags.flags.push_back(QConfigMappingFlagSpec());
    flags.flags.push_back(EngineFlagSpec());
    ASSIGN_OR_RETURN(StageRun stage, StageRun::Parse(command, args, flags));
    ASSIGN_OR_RETURN(const std::optional<QuantizedEngine> engine, EngineFlag(stage.parsed()));
    ASSIGN_OR_RETURN(const std::string backend, RequiredBackend(stage.parsed(), command.name));
    ASSIGN_OR_RETURN(QConfigMapping mapping,
                     QConfigMappingFromFlags(context, stage.parsed(), backend, command.name));
    ASSIGN_OR_RETURN(BackendConfig config, BackendFromFlags(context, command.name, stage.parsed()));
    ASSIGN_OR_RETURN(auto gm, stage.LoadInput(context));
    const size_t nodes_before = gm->graph().size();
    stage.times().Start();
    ASSIGN_OR_RETURN(PreparedModel prepared, PrepareInMemory(*gm, mapping, config, engine));
    stage.times().Stop("prepare");
    RETURN_IF_ERROR(StoreVerifyAndSave(context, command.name, prepared, *gm, stage));
    context.out << prepared.report.ToString();
    context.out << "prepared with backend " << config.name() << ": " << nodes_before << " -> "
                << gm->graph().size() << " nodes; wrote " << stage.output() << "\n";
    stage.PrintTimes(context.out);
    return absl::OkStatus();
  };
  return command;
}

Command CalibrateCommand() {
  Command command;
  command.name = "calibrate";
  command.usage =
      "calibrate PREPARED [--calibration=X.npy,...] [--samples=N] [--seed=N] "
      "[--input-shape=DIMS] [--threads=N] [--engine=onednn|qnnpack] "
      "[--config=FILE[,FILE...]] -o OUT [--time]";
  command.summary = "run a prepared model on samples so its observers record ranges";
  command.run = [command](const std::vector<std::string>& args,
                          CommandContext& context) -> absl::Status {
    StageFlags flags{CalibrationFlagSpecs()};
    flags.flags.push_back(ThreadsFlagSpec());
    flags.flags.push_back(EngineFlagSpec());
    flags.flags.push_back(DeclaringConfigFlagSpec());
    ASSIGN_OR_RETURN(StageRun stage, StageRun::Parse(command, args, flags));
    ASSIGN_OR_RETURN(const int threads, ThreadsFlag(stage.parsed()));
    ASSIGN_OR_RETURN(const std::optional<QuantizedEngine> engine, EngineFlag(stage.parsed()));
    ASSIGN_OR_RETURN(const std::vector<BackendConfig> declaring,
                     DeclaringConfigsFromFlags(context, command.name, stage.parsed()));
    // Reading the observers back is part of the step "load" here.
    stage.times().Start();
    ASSIGN_OR_RETURN(auto gm, LoadModelArg(context, stage.input()));
    RETURN_IF_ERROR(CheckAgainstDeclaringConfigs(command.name, declaring, *gm));
    ASSIGN_OR_RETURN(PreparedModel prepared, ReadPrepared(command.name, stage.input(), *gm));
    stage.times().Stop("load");
    ASSIGN_OR_RETURN(CalibrationSamples samples,
                     SamplesFromFlags(context, stage.parsed(), *gm));
    stage.times().Start();
    ASSIGN_OR_RETURN(CalibrationReport report,
                     CalibrateInMemory(*gm, prepared, samples, threads, engine));
    stage.times().Stop("calibrate");
    RETURN_IF_ERROR(StoreVerifyAndSave(context, command.name, prepared, *gm, stage));
    context.out << report.ToString();
    context.out << "calibrated " << prepared.observers.size() << " observers; wrote "
                << stage.output() << "\n";
    stage.PrintTimes(context.out);
    return absl::OkStatus();
  };
  return command;
}

Command ConvertCommand() {
  Command command;
  command.name = "convert";
  command.usage = "convert PREPARED [--config=FILE[,FILE...]] -o OUT [--time]";
  command.summary = "convert a prepared model to a reference quantized model";
  command.run = [command](const std::vector<std::string>& args,
                          CommandContext& context) -> absl::Status {
    ASSIGN_OR_RETURN(StageRun stage,
                     StageRun::Parse(command, args, {{DeclaringConfigFlagSpec()}}));
    ASSIGN_OR_RETURN(const std::vector<BackendConfig> declaring,
                     DeclaringConfigsFromFlags(context, command.name, stage.parsed()));
    ASSIGN_OR_RETURN(auto gm, stage.LoadInput(context));
    RETURN_IF_ERROR(CheckAgainstDeclaringConfigs(command.name, declaring, *gm));
    // Reading the observers and plans back is part of what convert costs from a file.
    stage.times().Start();
    ASSIGN_OR_RETURN(PreparedModel prepared, ReadPrepared(command.name, stage.input(), *gm));
    stage.times().Stop("read");
    const size_t nodes_before = gm->graph().size();
    stage.times().Start();
    ASSIGN_OR_RETURN(ConvertReport report, ConvertToReference(*gm, prepared));
    stage.times().Stop("convert");
    RETURN_IF_ERROR(stage.VerifyAndSave(context, *gm, GraphAfter(command.name)));
    context.out << report.ToString();
    context.out << "converted to reference: " << nodes_before << " -> " << gm->graph().size()
                << " nodes; wrote " << stage.output() << "\n";
    stage.PrintTimes(context.out);
    return absl::OkStatus();
  };
  return command;
}

}  // namespace fuselage
