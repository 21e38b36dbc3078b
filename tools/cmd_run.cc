// `fuselage run MODEL --input=X.npy[,X2.npy...] [--output=Y.npy[,Y2.npy...]]
//                   [--threads=N] [--engine=onednn|qnnpack] [--repeat=N] [--time]
//                   [--config=FILE[,FILE...]]`
//   Runs MODEL (float, prepared, reference or native quantized) with the interpreter and
//   the built-in kernels, one .npy input per placeholder in order. The outputs, flattened
//   as the graph returns them (`return (a, (b, c))` gives a, b, c), are written to the
//   --output files, one each; the counts must agree. A quantized output is written
//   dequantized (float32), as `y.dequantize()` would give it. Prints one line per output:
//   its shape and dtype.
//   --threads: the kernels' thread count (RunOptions::threads; default OpenMP's: every
//   core, or OMP_NUM_THREADS). --repeat runs the loaded model N times (default 1) on the
//   same inputs, for timing; the outputs are those of the last run, written once. --time
//   prints one `time run <ms> ms` line per run (StageTimes' format), after the outputs.
//   --engine: whose integer arithmetic quantized ops compute, as PyTorch's
//   torch.backends.quantized.engine (default: the engine the model records, set when it
//   was prepared: qnnpack for the qnnpack config, onednn for the others; onednn when the
//   model records none).
//   --config: the backend config files that declare the fused module types of a fused,
//   prepared or reference model (fused_module_type); the model's modules of those types
//   are checked against them. Optional: such a model carries its steps and runs without.
#include "tools/cmd_run.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "graph/status_macros.h"
#include "quantize/calibrate.h"
#include "runtime/builtin_kernels.h"
#include "runtime/interpreter.h"
#include "runtime/npy.h"
#include "runtime/quantized/quantize.h"
#include "tools/backend_flag.h"
#include "tools/quantize_flags.h"

namespace fuselage {
namespace {

// The most runs --repeat asks for: a bound on a timing loop's length, not on memory (one
// run's values are dropped before the next starts).
constexpr int64_t kMaxRepeat = 1000000;

std::vector<std::string> SplitPaths(const CommandContext& context, const std::string& list) {
  std::vector<std::string> paths;
  for (absl::string_view p : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    paths.push_back(context.ResolvePath(std::string(p)));
  }
  return paths;
}

}  // namespace

Command RunCommand() {
  Command command;
  command.name = "run";
  command.usage =
      "run MODEL --input=X.npy[,X2.npy...] [--output=Y.npy[,Y2.npy...]] [--threads=N] "
      "[--engine=onednn|qnnpack] [--repeat=N] [--time] [--config=FILE[,FILE...]]";
  command.summary = "run a model on .npy inputs and write its outputs as .npy";
  command.run = [command](const std::vector<std::string>& args,
                          CommandContext& context) -> absl::Status {
    ASSIGN_OR_RETURN(ParsedArgs parsed,
                     ParseArgs(command.name, args,
                               {{{"--input", "-i"}, true,
                                 "comma-separated .npy files, one per placeholder", "X.npy,..."},
                                {{"--output", "-o"}, true,
                                 "comma-separated .npy files, one per graph output (else printed)",
                                 "Y.npy,..."},
                                ThreadsFlagSpec(),
                                EngineFlagSpec(),
                                {{"--repeat"}, true, "run the model N times after loading", "N",
                                 "1"},
                                {{"--time"}, false,
                                 "print one 'time run <ms> ms' line per repetition"},
                                DeclaringConfigFlagSpec()}));
    RETURN_IF_ERROR(ExpectPositional(command, parsed, 1));
    if (!parsed.Has("--input")) {
      return UsageError("run: needs --input=X.npy (one file per placeholder, comma-separated)");
    }
    RunOptions options;
    ASSIGN_OR_RETURN(options.threads, ThreadsFlag(parsed));
    ASSIGN_OR_RETURN(options.engine, EngineFlag(parsed));
    ASSIGN_OR_RETURN(const int64_t repeat, IntFlag(parsed, "--repeat", 1, 1, kMaxRepeat));
    ASSIGN_OR_RETURN(const std::vector<BackendConfig> declaring,
                     DeclaringConfigsFromFlags(context, command.name, parsed));
    ASSIGN_OR_RETURN(auto gm, LoadModelArg(context, parsed.positional[0]));
    RETURN_IF_ERROR(CheckAgainstDeclaringConfigs(command.name, declaring, *gm));
    const std::vector<std::string> inputs = SplitPaths(context, parsed.flags.at("--input"));
    const size_t placeholders = gm->graph().Placeholders().size();
    if (inputs.size() != placeholders) {
      return UsageError(absl::StrCat("run: ", inputs.size(), " --input files for a model with ",
                                     placeholders, " placeholders"));
    }
    std::vector<Value> values;
    for (const std::string& path : inputs) {
      ASSIGN_OR_RETURN(Tensor t, ReadNpy(path));
      values.emplace_back(std::move(t));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<KernelRegistry> kernels, BuiltinKernels());
    // A prepared model (observers still in it) runs too.
    RETURN_IF_ERROR(RegisterObserverKernels(*kernels));
    StageTimes times;
    std::vector<Value> outputs;
    for (int64_t i = 0; i < repeat; ++i) {
      // Every run gets the same inputs (Values share their tensors: no copy of the data).
      times.Start();
      ASSIGN_OR_RETURN(outputs, Run(*gm, values, *kernels, options));
      times.Stop("run");
    }

    std::vector<std::string> output_paths;
    if (parsed.Has("--output")) {
      output_paths = SplitPaths(context, parsed.flags.at("--output"));
      if (output_paths.size() != outputs.size()) {
        return UsageError(absl::StrCat("run: ", output_paths.size(),
                                       " --output files for a model with ", outputs.size(),
                                       " outputs"));
      }
    }
    // Refused before any file is written, so a failed run leaves no partial set of outputs.
    for (size_t i = 0; i < outputs.size() && !output_paths.empty(); ++i) {
      if (!outputs[i].is_tensor()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "run: output ", i, " is a ", outputs[i].KindName(), "; only tensors are written"));
      }
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (!outputs[i].is_tensor()) {
        context.out << "output " << i << ": " << outputs[i].ToString() << "\n";
        if (!output_paths.empty()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "run: output ", i, " is a ", outputs[i].KindName(), "; only tensors are written"));
        }
        continue;
      }
      Tensor t = outputs[i].as_tensor();
      context.out << "output " << i << ": " << DTypeName(t.dtype()) << " " << t.ShapeString()
                  << "\n";
      if (output_paths.empty()) continue;
      if (t.is_quantized()) {
        ASSIGN_OR_RETURN(t, quantized::Dequantize(t));
      }
      RETURN_IF_ERROR(WriteNpy(t, output_paths[i]));
    }
    if (parsed.Has("--time")) context.out << times.ToString();
    return absl::OkStatus();
  };
  return command;
}

}  // namespace fuselage
