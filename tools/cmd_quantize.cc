// `fuselage quantize MODEL --backend=NAME [--config=FILE] [--calibration=FILES]
//                  [--samples=N] [--seed=N] [--input-shape=DIMS] [--reference] -o OUT`
//   The whole flow (tools/quantize_flow.h) with PyTorch 1.13's default qconfig mapping of
//   the backend (get_default_qconfig_mapping(NAME)) and the backend config NAME, or the
//   --config file (whose base must then be NAME). Calibration reads the comma-separated
//   .npy files of --calibration (with k placeholders, k files per sample), or else runs
//   --samples (default 8) seeded random inputs, uniform in [-1, 1), shaped by the
//   placeholders' meta "shape" or by --input-shape (e.g. 1,3,224,224; every placeholder).
//   --reference stops after convert-to-reference. Prints every stage's report, including
//   the ops kept float and why, and the patterns left unlowered and why.
//
// `fuselage lower REFERENCE_MODEL --backend=NAME [--config=FILE] -o OUT`
//   LowerToNative with fuselage's native lowering rules. The backend flags are checked
//   (the config must load) and name the backend in the summary; the rules themselves do
//   not depend on the backend config (as in PyTorch 1.13, whose lowering is one table).
#include "tools/cmd_quantize.h"

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "graph/serialization.h"
#include "graph/status_macros.h"
#include "lowering/lower_to_native.h"
#include "lowering/lowering_rule.h"
#include "quantize/calibrate.h"
#include "quantize/qconfig.h"
#include "tools/backend_flag.h"
#include "tools/quantize_flow.h"

namespace fuselage {
namespace {

constexpr int kDefaultSamples = 8;

absl::StatusOr<std::string> RequiredOutput(const ParsedArgs& parsed, absl::string_view command) {
  if (!parsed.Has("-o") || parsed.flags.at("-o").empty()) {
    return UsageError(absl::StrCat(command, ": needs -o OUT, the file to write the model to"));
  }
  return parsed.flags.at("-o");
}

absl::StatusOr<std::string> RequiredBackend(const ParsedArgs& parsed, absl::string_view command) {
  if (!parsed.Has("--backend") || parsed.flags.at("--backend").empty()) {
    return UsageError(absl::StrCat(
        command, ": needs --backend=NAME (fbgemm, qnnpack, x86, onednn): it chooses the "
                 "default qconfigs, and the config unless --config gives one"));
  }
  return parsed.flags.at("--backend");
}

absl::StatusOr<int64_t> IntFlag(const ParsedArgs& parsed, const std::string& flag,
                                int64_t default_value, int64_t min_value) {
  if (!parsed.Has(flag)) return default_value;
  int64_t value = 0;
  if (!absl::SimpleAtoi(parsed.flags.at(flag), &value) || value < min_value) {
    return UsageError(absl::StrCat(flag, " is '", parsed.flags.at(flag),
                                   "'; expected an integer >= ", min_value));
  }
  return value;
}

absl::StatusOr<std::vector<CalibrationSample>> SamplesFromFlags(const CommandContext& context,
                                                               const ParsedArgs& parsed,
                                                               const GraphModule& gm) {
  if (parsed.Has("--calibration")) {
    std::vector<std::string> paths;
    for (absl::string_view p : absl::StrSplit(parsed.flags.at("--calibration"), ',',
                                              absl::SkipEmpty())) {
      paths.push_back(context.ResolvePath(std::string(p)));
    }
    return NpyCalibrationSamples(gm, paths);
  }
  ASSIGN_OR_RETURN(const int64_t count, IntFlag(parsed, "--samples", kDefaultSamples, 1));
  ASSIGN_OR_RETURN(const int64_t seed, IntFlag(parsed, "--seed", 0, 0));
  absl::flat_hash_map<std::string, std::vector<int64_t>> shapes;
  if (parsed.Has("--input-shape")) {
    std::vector<int64_t> shape;
    for (absl::string_view d : absl::StrSplit(parsed.flags.at("--input-shape"), ',')) {
      int64_t dim = 0;
      if (!absl::SimpleAtoi(d, &dim) || dim < 0) {
        return UsageError(absl::StrCat("--input-shape is '", parsed.flags.at("--input-shape"),
                                       "'; expected comma-separated dimensions, e.g. 1,3,8,8"));
      }
      shape.push_back(dim);
    }
    for (const Node* p : gm.graph().Placeholders()) shapes[p->name()] = shape;
  }
  return RandomCalibrationSamples(gm, static_cast<int>(count), static_cast<uint32_t>(seed),
                                  shapes);
}

}  // namespace

Command QuantizeCommand() {
  Command command;
  command.name = "quantize";
  command.usage =
      "quantize MODEL --backend=NAME [--config=FILE] [--calibration=X.npy,...] "
      "[--samples=N] [--seed=N] [--input-shape=DIMS] [--reference] -o OUT";
  command.summary = "fuse, prepare, calibrate, convert and lower a float model";
  command.run = [command](const std::vector<std::string>& args,
                          CommandContext& context) -> absl::Status {
    std::vector<FlagSpec> specs = BackendFlagSpecs();
    specs.push_back({{"-o", "--output"}, true});
    specs.push_back({{"--calibration"}, true});
    specs.push_back({{"--samples"}, true});
    specs.push_back({{"--seed"}, true});
    specs.push_back({{"--input-shape"}, true});
    specs.push_back({{"--reference"}, false});
    ASSIGN_OR_RETURN(ParsedArgs parsed, ParseArgs(command.name, args, specs));
    RETURN_IF_ERROR(ExpectPositional(command, parsed, 1));
    ASSIGN_OR_RETURN(const std::string output, RequiredOutput(parsed, command.name));
    ASSIGN_OR_RETURN(const std::string backend, RequiredBackend(parsed, command.name));
    ASSIGN_OR_RETURN(QConfigMapping mapping, DefaultQConfigMapping(backend));
    ASSIGN_OR_RETURN(BackendConfig config, BackendFromFlags(context, command.name, parsed));
    ASSIGN_OR_RETURN(auto gm, LoadModelArg(context, parsed.positional[0]));
    ASSIGN_OR_RETURN(std::vector<CalibrationSample> samples,
                     SamplesFromFlags(context, parsed, *gm));
    const size_t nodes_before = gm->graph().size();
    QuantizeFlowOptions options;
    options.stop_at_reference = parsed.Has("--reference");
    ASSIGN_OR_RETURN(QuantizeFlowReport report,
                     RunQuantizeFlow(*gm, config, mapping, samples, options));
    RETURN_IF_ERROR(SaveModel(*gm, context.ResolvePath(output)));
    context.out << report.ToString();
    context.out << "quantized with backend " << config.name() << ": " << nodes_before
                << " -> " << gm->graph().size() << " nodes; wrote "
                << (options.stop_at_reference ? "the reference model " : "") << output
                << "\n";
    return absl::OkStatus();
  };
  return command;
}

Command LowerCommand() {
  Command command;
  command.name = "lower";
  command.usage = "lower REFERENCE_MODEL --backend=NAME [--config=FILE] -o OUT";
  command.summary = "lower a reference quantized model to native quantized ops";
  command.run = [command](const std::vector<std::string>& args,
                          CommandContext& context) -> absl::Status {
    std::vector<FlagSpec> specs = BackendFlagSpecs();
    specs.push_back({{"-o", "--output"}, true});
    ASSIGN_OR_RETURN(ParsedArgs parsed, ParseArgs(command.name, args, specs));
    RETURN_IF_ERROR(ExpectPositional(command, parsed, 1));
    ASSIGN_OR_RETURN(const std::string output, RequiredOutput(parsed, command.name));
    ASSIGN_OR_RETURN(BackendConfig config, BackendFromFlags(context, command.name, parsed));
    ASSIGN_OR_RETURN(auto gm, LoadModelArg(context, parsed.positional[0]));
    LoweringRuleRegistry rules;
    RETURN_IF_ERROR(RegisterNativeLoweringRules(rules));
    const size_t nodes_before = gm->graph().size();
    ASSIGN_OR_RETURN(LoweringReport report, LowerToNative(*gm, rules));
    if (absl::Status verified = gm->Verify(); !verified.ok()) {
      return absl::InternalError(
          absl::StrCat("lowered graph fails Verify (a fuselage bug): ", verified.message()));
    }
    RETURN_IF_ERROR(SaveModel(*gm, context.ResolvePath(output)));
    context.out << report.ToString();
    context.out << "lowered for backend " << config.name() << ": " << nodes_before << " -> "
                << gm->graph().size() << " nodes; wrote " << output << "\n";
    return absl::OkStatus();
  };
  return command;
}

}  // namespace fuselage
