// Fuzz target: the `fuselage` command line's flag parsing, not the commands' work. The
// input is an argument vector: byte 0 picks the command whose flags are parsed (0:
// quantize, 1: calibrate, 2: demo), the rest is split on NUL and newline into arguments.
// They go through what those commands parse with — StageRun::Parse / ParseArgs, then
// RequiredBackend, SamplesFromFlags (on a one-placeholder model; the samples are only
// described, never made, so nothing is read or allocated) and IntFlag — and every argument
// through ParseInteger.
// Properties:
//  - nothing crashes; every refusal is an InvalidArgument with a message, and a refusal of
//    the command line itself (ParseArgs, StageRun::Parse, IntFlag) is a UsageError; --help
//    gives a HelpRequest whose text lists the flags;
//  - parsed flags are keyed by a spelling the command declares, positional operands are
//    arguments as given;
//  - an accepted integer is the value the text spells (printing it gives the text back,
//    leading zeros aside) and lies in its range: --samples is the sample count (1 to
//    kMaxCalibrationSamples), --seed in [0, 2^32 - 1], --input-shape dimensions in
//    [0, Tensor::kMaxElements].
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "graph/graph_module.h"
#include "graph/tensor.h"
#include "quantize/calibrate.h"
#include "tests/fuzz/fuzz_check.h"
#include "tools/backend_flag.h"
#include "tools/command.h"
#include "tools/quantize_flags.h"
#include "tools/stage_run.h"

namespace fuselage::fuzz {
namespace {

// `text` as ParseInteger accepts it, written the way StrCat prints its value: no leading
// zeros, "-0" as "0".
std::string Canonical(absl::string_view text) {
  const bool negative = !text.empty() && text[0] == '-';
  if (negative) text.remove_prefix(1);
  while (text.size() > 1 && text[0] == '0') text.remove_prefix(1);
  if (text == "0") return "0";
  return absl::StrCat(negative ? "-" : "", text);
}

void CheckRefusal(const absl::Status& status, bool usage, absl::string_view where) {
  if (IsHelpRequest(status)) {  // --help / -h: the help text, not a refusal
    FUZZ_CHECK(absl::StrContains(HelpText(status), "--help"),
               absl::StrCat(where, ": help without its flags: ", HelpText(status)));
    return;
  }
  FUZZ_CHECK(status.code() == absl::StatusCode::kInvalidArgument && !status.message().empty(),
             absl::StrCat(where, ": refused with ", status.ToString()));
  if (usage) {
    FUZZ_CHECK(IsUsageError(status), absl::StrCat(where, ": not a usage error: ", status.ToString()));
  }
}

// ParseInteger on any text: an accepted value is the one the text spells.
void CheckParseInteger(const std::string& arg) {
  std::optional<int64_t> any = ParseInteger(arg, std::numeric_limits<int64_t>::min(),
                                            std::numeric_limits<int64_t>::max());
  if (any.has_value()) {
    FUZZ_CHECK(absl::StrCat(*any) == Canonical(arg),
               absl::StrCat("ParseInteger('", arg, "') = ", *any));
  }
  std::optional<int64_t> small = ParseInteger(arg, -3, 3);
  FUZZ_CHECK(small.has_value() == (any.has_value() && *any >= -3 && *any <= 3),
             absl::StrCat("ParseInteger('", arg, "', -3, 3) disagrees with the full range"));
}

void CheckParsed(const ParsedArgs& parsed, const std::vector<FlagSpec>& specs,
                 const std::vector<std::string>& args) {
  for (const auto& [key, value] : parsed.flags) {
    bool declared = false;
    for (const FlagSpec& spec : specs) declared |= spec.names.front() == key;
    FUZZ_CHECK(declared, absl::StrCat("undeclared flag key '", key, "'"));
  }
  for (const std::string& operand : parsed.positional) {
    bool given = false;
    for (const std::string& arg : args) given |= arg == operand;
    FUZZ_CHECK(given, absl::StrCat("operand '", operand, "' is no argument"));
  }
}

// The model SamplesFromFlags describes samples for: x -> output, no recorded shape.
const GraphModule& OnePlaceholderModel() {
  static const GraphModule* gm = [] {
    auto* m = new GraphModule();
    Node* x = *m->graph().AddPlaceholder("x");
    FUZZ_CHECK(m->graph().SetOutput(x).ok(), "building the model");
    return m;
  }();
  return *gm;
}

// --samples, --seed, --input-shape, --calibration as SamplesFromFlags reads them.
void CheckCalibrationFlags(const ParsedArgs& parsed) {
  std::ostringstream out;
  CommandContext context{out, ""};
  absl::StatusOr<CalibrationSamples> samples =
      SamplesFromFlags(context, parsed, OnePlaceholderModel());
  if (!samples.ok()) {
    CheckRefusal(samples.status(), /*usage=*/false, "SamplesFromFlags");
    return;
  }
  FUZZ_CHECK(samples->size() >= 1 && samples->size() <= kMaxCalibrationSamples,
             absl::StrCat(samples->size(), " samples"));
  if (parsed.Has("--calibration")) return;  // one sample per file, files never read here
  FUZZ_CHECK(parsed.Has("--input-shape"), "random samples without a shape");
  if (parsed.Has("--samples")) {
    FUZZ_CHECK(absl::StrCat(samples->size()) == Canonical(parsed.flags.at("--samples")),
               absl::StrCat("--samples='", parsed.flags.at("--samples"), "' gave ",
                            samples->size(), " samples"));
  }
  if (parsed.Has("--seed")) {
    std::optional<int64_t> seed = ParseInteger(parsed.flags.at("--seed"), 0, UINT32_MAX);
    FUZZ_CHECK(seed.has_value(), absl::StrCat("--seed='", parsed.flags.at("--seed"), "' accepted"));
  }
}

Command NamedCommand(const char* name) {
  Command command;
  command.name = name;
  command.usage = name;
  return command;
}

void QuantizeOrCalibrate(bool quantize, const std::vector<std::string>& args) {
  StageFlags flags;
  if (quantize) {
    flags.flags = BackendFlagSpecs();
    flags.timed = false;
  }
  for (FlagSpec& spec : CalibrationFlagSpecs()) flags.flags.push_back(std::move(spec));
  if (quantize) flags.flags.push_back({{"--reference"}, false});
  absl::StatusOr<StageRun> stage =
      StageRun::Parse(NamedCommand(quantize ? "quantize" : "calibrate"), args, flags);
  if (!stage.ok()) {
    CheckRefusal(stage.status(), /*usage=*/true, "StageRun::Parse");
    return;
  }
  std::vector<FlagSpec> all = flags.flags;
  all.push_back({{"-o", "--output"}, true});
  all.push_back({{"--time"}, false});
  CheckParsed(stage->parsed(), all, args);
  if (quantize) {
    absl::StatusOr<std::string> backend = RequiredBackend(stage->parsed(), "quantize");
    if (!backend.ok()) CheckRefusal(backend.status(), /*usage=*/true, "RequiredBackend");
  }
  CheckCalibrationFlags(stage->parsed());
}

void Demo(const std::vector<std::string>& args) {
  const std::vector<FlagSpec> specs = {{{"--seed"}, true}, {{"--write-example"}, true}};
  absl::StatusOr<ParsedArgs> parsed = ParseArgs("demo", args, specs);
  if (!parsed.ok()) {
    CheckRefusal(parsed.status(), /*usage=*/true, "ParseArgs");
    return;
  }
  CheckParsed(*parsed, specs, args);
  absl::StatusOr<int64_t> seed = IntFlag(*parsed, "--seed", 5, 0, UINT32_MAX);
  if (!seed.ok()) {
    CheckRefusal(seed.status(), /*usage=*/true, "IntFlag");
    return;
  }
  FUZZ_CHECK(*seed >= 0 && *seed <= UINT32_MAX, absl::StrCat("seed ", *seed));
  if (parsed->Has("--seed")) {
    FUZZ_CHECK(absl::StrCat(*seed) == Canonical(parsed->flags.at("--seed")),
               absl::StrCat("--seed '", parsed->flags.at("--seed"), "' read as ", *seed));
  }
}

}  // namespace
}  // namespace fuselage::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t command = data[0] % 3;
  std::vector<std::string> args;
  std::string arg;
  for (size_t i = 1; i < size; ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == '\0' || c == '\n') {
      args.push_back(std::move(arg));
      arg.clear();
    } else {
      arg.push_back(c);
    }
  }
  if (size > 1) args.push_back(std::move(arg));
  for (const std::string& a : args) fuselage::fuzz::CheckParseInteger(a);
  if (command == 2) {
    fuselage::fuzz::Demo(args);
  } else {
    fuselage::fuzz::QuantizeOrCalibrate(command == 0, args);
  }
  return 0;
}
