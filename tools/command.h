// The pieces every `fuselage` subcommand is made of: the Command record the CLI
// dispatches on, the context a command runs in, a small argument parser, and model
// loading with paths resolved as the user typed them.
//
// A subcommand is a function from its arguments to an absl::Status. It writes its
// normal output to `context.out`. A usage mistake (unknown flag, missing operand) is
// reported with UsageError(); anything else that fails (a bad model file, an unwritable
// path) is an ordinary error status. The CLI turns the first into exit code 2 and the
// second into exit code 1, each as one line `fuselage: <message>` on stderr.
#ifndef FUSELAGE_TOOLS_COMMAND_H_
#define FUSELAGE_TOOLS_COMMAND_H_

#include <functional>
#include <map>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/graph_module.h"
#include "runtime/quantized_engine.h"

namespace fuselage {

struct CommandContext {
  std::ostream& out;
  // Relative paths given by the user are taken relative to this directory; empty means
  // the process's own working directory. (Under `bazel run` the process runs in the
  // runfiles tree, so the CLI sets it from BUILD_WORKING_DIRECTORY.)
  std::string working_directory;
  // Where long commands report progress (stage lines, calibration samples); null when
  // nobody watches (stderr is not a terminal), so files and pipes get no progress lines.
  std::ostream* progress = nullptr;

  std::string ResolvePath(const std::string& path) const;
};

struct Command {
  std::string name;     // "print"
  std::string usage;    // "print MODEL [--readable]"
  std::string summary;  // one line for `fuselage help`
  std::function<absl::Status(const std::vector<std::string>& args, CommandContext& context)>
      run;
};

// An error meaning "the command line is wrong" (exit code 2), as opposed to "the input
// is wrong" (exit code 1).
absl::Status UsageError(absl::string_view message);
bool IsUsageError(const absl::Status& status);

// What ParseArgs returns for `--help` / `-h`: not an error to the user; the CLI prints
// HelpText (every flag with its meaning and default) on stdout and exits 0.
absl::Status HelpRequest(absl::string_view help_text);
bool IsHelpRequest(const absl::Status& status);
std::string HelpText(const absl::Status& status);

// A flag a command accepts: its spellings ("-o", "--output"), whether it takes a value
// (`-o FILE`, `--output=FILE`), and what `fuselage CMD --help` says of it: its meaning,
// the value's name, and the default when the flag is not given ("" = none).
struct FlagSpec {
  FlagSpec() = default;
  // The trailing parts may be left out: {{"-o", "--output"}, true, "output file", "FILE"}.
  FlagSpec(std::vector<std::string> names, bool takes_value, std::string help = "",
           std::string value_name = "VALUE", std::string default_value = "")
      : names(std::move(names)),
        takes_value(takes_value),
        help(std::move(help)),
        value_name(std::move(value_name)),
        default_value(std::move(default_value)) {}

  std::vector<std::string> names;
  bool takes_value = false;
  std::string help;
  std::string value_name = "VALUE";
  std::string default_value;
};

struct ParsedArgs {
  std::vector<std::string> positional;
  // Keyed by the flag's first spelling; value-less flags map to "".
  std::map<std::string, std::string> flags;

  bool Has(const std::string& flag) const { return flags.count(flag) > 0; }
};

// Splits `args` into flags (from `specs`) and positional operands with CLI11; "--" ends
// the flags. A UsageError names an unknown flag (with the closest known one, when one is
// close), a missing value or a repeated flag; `--help` / `-h` gives a HelpRequest.
absl::StatusOr<ParsedArgs> ParseArgs(absl::string_view command, const std::vector<std::string>& args,
                                     const std::vector<FlagSpec>& specs);

// `text` as a decimal integer in [min_value, max_value]: an optional '-', then digits and
// nothing else (no space, no '+', no trailing junk), or std::nullopt. Every integer the
// command line gives is read with it (IntFlag, --input-shape's dimensions), so no value is
// silently truncated to a narrower type.
std::optional<int64_t> ParseInteger(absl::string_view text, int64_t min_value, int64_t max_value);

// The value of the integer flag `flag` (its first spelling) in [min_value, max_value], or
// `default_value` when it is not given. A UsageError names the flag, the value and the
// accepted range for anything else.
absl::StatusOr<int64_t> IntFlag(const ParsedArgs& parsed, const std::string& flag,
                                int64_t default_value, int64_t min_value, int64_t max_value);

// --threads=N, the flag of the commands that run a model (run, calibrate, quantize).
FlagSpec ThreadsFlagSpec();

// --threads's value, 1 to kMaxThreads (runtime/interpreter.h), as RunOptions::threads
// takes it; 0 (OpenMP's default: OMP_NUM_THREADS if set, else every core) when it is not
// given. A UsageError (IntFlag's) for 0, a negative or too large count, or junk.
absl::StatusOr<int> ThreadsFlag(const ParsedArgs& parsed);

// --engine=onednn|qnnpack: whose integer arithmetic the quantized kernels compute
// (runtime/quantized_engine.h), as torch.backends.quantized.engine; std::nullopt when it
// is not given (run: the engine the model records; prepare / quantize: the backend
// config's). A UsageError naming the choices for any other value.
FlagSpec EngineFlagSpec();
absl::StatusOr<std::optional<QuantizedEngine>> EngineFlag(const ParsedArgs& parsed);

// UsageError unless there are exactly `count` positional operands.
absl::Status ExpectPositional(const Command& command, const ParsedArgs& parsed, size_t count);

// Loads (and so validates and verifies) the model at `path`, resolved against the
// context; text form for .textproto / .pbtxt, an ONNX model for .onnx (onnx/onnx_reader.h:
// a float ONNX model read into the graph fuselage.from_onnx gives), binary otherwise.
absl::StatusOr<std::unique_ptr<GraphModule>> LoadModelArg(const CommandContext& context,
                                                          const std::string& path);

}  // namespace fuselage

#endif  // FUSELAGE_TOOLS_COMMAND_H_
