// `fuselage quantize MODEL --backend=NAME [--config=FILE] [--qconfig-mapping=FILE]
//                  [--calibration=FILES]
//                  [--samples=N] [--seed=N] [--input-shape=DIMS] [--threads=N]
//                  [--engine=onednn|qnnpack] [--reference] [--quiet] [--json] -o OUT`
//   The whole flow (pipeline/quantize_flow.h) with the --qconfig-mapping file
//   (quantize/qconfig_mapping.proto), else PyTorch 1.13's default qconfig mapping of
//   the backend (get_default_qconfig_mapping(NAME)), and the backend config NAME, or the
//   --config file (whose base must then be NAME). Calibration reads the comma-separated
//   .npy files of --calibration (with k placeholders, k files per sample), or else runs
//   --samples (default 8) seeded random inputs, uniform in [-1, 1), shaped by the
//   placeholders' meta "shape" or by --input-shape: DIMS for every placeholder (e.g.
//   1,3,224,224) or NAME:DIMS;NAME:DIMS per input (e.g. x:1,3,8,8;y:1,4). --samples,
//   --seed and --input-shape are refused with --calibration (its files give the samples).
//   --threads is calibration's thread count (default: OpenMP's, every core or
//   OMP_NUM_THREADS); with MinMax-family observers only (e.g. ORT's MinMax settings),
//   that many samples run at once, a thread each, with the statistics of one at a time
//   (quantize/calibrate.h). --engine is the engine recorded in the model for its runs
//   (default: the backend config's, qnnpack -> qnnpack, others -> onednn). --reference stops after convert-to-reference. Prints every stage's report, including
//   the ops kept float and why, and the patterns left unlowered and why; with --json, the
//   same as one JSON object (QuantizeFlowJson, pipeline/progress.h) with each stage's wall
//   time, and nothing else on stdout. When stderr is a terminal, progress goes there (a
//   line per stage, the calibration samples with rate and time left); --quiet silences it.
//
// `fuselage lower REFERENCE_MODEL --backend=NAME [--config=FILE] -o OUT [--time]`
//   LowerToNative with fuselage's native lowering rules. The backend flags are checked
//   (the config must load) and name the backend in the summary; the rules themselves do
//   not depend on the backend config (as in PyTorch 1.13, whose lowering is one table).
//   --time prints one line per step (load, lower, verify, save) with its wall time.
//   A model with no reference pattern at all (e.g. a float model) is refused and -o is
//   left as it was.
#include "tools/cmd_quantize.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "backend_configs/declared_types.h"
#include "lowering/declared_lowering.h"
#include "lowering/lower_to_native.h"
#include "lowering/lowering_rule.h"
#include "pipeline/progress.h"
#include "pipeline/quantize_flow.h"
#include "pipeline/stages.h"
#include "quantize/calibrate.h"
#include "quantize/qconfig.h"
#include "tools/backend_flag.h"
#include "tools/quantize_flags.h"
#include "tools/stage_run.h"

namespace fuselage {
namespace {

// `lower` of a model with no reference pattern (a float model, or one not yet converted)
// would write its input back unchanged under -o and exit 0; it is refused instead, before
// anything is written.
absl::Status CheckSomethingWasLowered(const LoweringReport& report, const std::string& input) {
  if (!LoweredNothing(report)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "lower: nothing to lower in ", input,
      ": it has no quantize / dequantize reference patterns (dequantize -> op -> "
      "quantize_per_tensor); lower takes a reference quantized model, the output of "
      "`convert` or `quantize --reference`; nothing was written"));
}

}  // namespace

Command QuantizeCommand() {
  Command command;
  command.name = "quantize";
  command.usage =
      "quantize MODEL --backend=NAME [--config=FILE] [--qconfig-mapping=FILE] "
      "[--calibration=X.npy,...] "
      "[--samples=N] [--seed=N] [--input-shape=DIMS|NAME:DIMS;...] [--threads=N] [--engine=onednn|qnnpack] [--reference] [--quiet] [--json] -o OUT";
  command.summary = "fuse, prepare, calibrate, convert and lower a float model";
  command.run = [command](const std::vector<std::string>& args,
                          CommandContext& context) -> absl::Status {
    StageFlags flags{BackendFlagSpecs(), /*timed=*/false};
    for (FlagSpec& spec : CalibrationFlagSpecs()) flags.flags.push_back(std::move(spec));
    flags.flags.push_back(ThreadsFlagSpec());
    flags.flags.push_back(EngineFlagSpec());
    flags.flags.push_back({{"--reference"}, false,
                           "stop after convert: write the reference quantized model"});
    flags.flags.push_back({{"--quiet"}, false,
                           "no progress on stderr (given only when stderr is a terminal)"});
    flags.flags.push_back({{"--json"}, false,
                           "print the report of every stage, with its wall time, as JSON"});
    flags.flags.push_back(QConfigMappingFlagSpec());
    ASSIGN_OR_RETURN(StageRun stage, StageRun::Parse(command, args, flags));
    ASSIGN_OR_RETURN(const int threads, ThreadsFlag(stage.parsed()));
    ASSIGN_OR_RETURN(const std::optional<QuantizedEngine> engine, EngineFlag(stage.parsed()));
    ASSIGN_OR_RETURN(const std::string backend, RequiredBackend(stage.parsed(), command.name));
    ASSIGN_OR_RETURN(QConfigMapping mapping,
                     QConfigMappingFromFlags(context, stage.parsed(), backend, command.name));
    ASSIGN_OR_RETURN(BackendConfig config, BackendFromFlags(context, command.name, stage.parsed()));
    ASSIGN_OR_RETURN(auto gm, stage.LoadInput(context));
    ASSIGN_OR_RETURN(CalibrationSamples samples,
                     SamplesFromFlags(context, stage.parsed(), *gm));
    const size_t nodes_before = gm->graph().size();
    QuantizeFlowOptions options;
    options.stop_at_reference = stage.parsed().Has("--reference");
    options.threads = threads;
    options.engine = engine;
    FlowProgress progress(stage.parsed().Has("--quiet") ? nullptr : context.progress);
    progress.Attach(options);
    ASSIGN_OR_RETURN(QuantizeFlowReport report,
                     RunQuantizeFlow(*gm, config, mapping, samples, options));
    RETURN_IF_ERROR(stage.Save(context, *gm));
    if (stage.parsed().Has("--json")) {
      context.out << QuantizeFlowJson(report, progress.stage_seconds());
      return absl::OkStatus();
    }
    if (options.stop_at_reference) {
      // The flow never ran lowering: its empty report would read "0 pattern(s) lowered".
      context.out << "fuse: " << report.fused << " matches fused\n"
                  << report.prepare.ToString() << report.calibration.ToString()
                  << report.convert.ToString()
                  << "lower-to-native: skipped (--reference keeps the reference model)\n";
    } else {
      context.out << report.ToString();
    }
    context.out << "quantized with backend " << config.name() << ": " << nodes_before << " -> "
                << gm->graph().size() << " nodes; wrote "
                << (options.stop_at_reference ? "the reference model " : "") << stage.output()
                << "\n";
    return absl::OkStatus();
  };
  return command;
}

Command LowerCommand() {
  Command command;
  command.name = "lower";
  command.usage = "lower REFERENCE_MODEL --backend=NAME [--config=FILE] -o OUT [--time]";
  command.summary = "lower a reference quantized model to native quantized ops";
  command.run = [command](const std::vector<std::string>& args,
                          CommandContext& context) -> absl::Status {
    ASSIGN_OR_RETURN(StageRun stage, StageRun::Parse(command, args, {BackendFlagSpecs()}));
    ASSIGN_OR_RETURN(BackendConfig config, BackendFromFlags(context, command.name, stage.parsed()));
    ASSIGN_OR_RETURN(auto gm, stage.LoadInput(context));
    LoweringRuleRegistry rules;
    RETURN_IF_ERROR(RegisterNativeLoweringRules(rules));
    RETURN_IF_ERROR(CheckDeclaredModules(*gm, config.declarations().get()));
    RETURN_IF_ERROR(RegisterDeclaredLoweringRules(rules, config.declared_lowering_rules()));
    const size_t nodes_before = gm->graph().size();
    stage.times().Start();
    ASSIGN_OR_RETURN(LoweringReport report, LowerToNative(*gm, rules));
    stage.times().Stop("lower");
    RETURN_IF_ERROR(CheckSomethingWasLowered(report, stage.input()));
    RETURN_IF_ERROR(stage.VerifyAndSave(context, *gm, "lowered graph"));
    context.out << report.ToString();
    context.out << "lowered for backend " << config.name() << ": " << nodes_before << " -> "
                << gm->graph().size() << " nodes; wrote " << stage.output() << "\n";
    stage.PrintTimes(context.out);
    return absl::OkStatus();
  };
  return command;
}

}  // namespace fuselage
