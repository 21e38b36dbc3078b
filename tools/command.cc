#include "tools/command.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "CLI/CLI.hpp"
#include "graph/serialization.h"
#include "graph/status_macros.h"
#include "onnx/onnx_reader.h"
#include "runtime/interpreter.h"

namespace fuselage {
namespace {

constexpr absl::string_view kUsagePayload = "fuselage.dev/usage-error";
constexpr absl::string_view kHelpPayload = "fuselage.dev/help";

}  // namespace

std::string CommandContext::ResolvePath(const std::string& path) const {
  if (path.empty() || path[0] == '/' || working_directory.empty()) return path;
  return absl::StrCat(working_directory, "/", path);
}

absl::Status UsageError(absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kUsagePayload, absl::Cord("1"));
  return status;
}

bool IsUsageError(const absl::Status& status) {
  return status.GetPayload(kUsagePayload).has_value();
}

absl::Status HelpRequest(absl::string_view help_text) {
  absl::Status status = absl::CancelledError("help requested");
  status.SetPayload(kHelpPayload, absl::Cord(help_text));
  return status;
}

bool IsHelpRequest(const absl::Status& status) {
  return status.GetPayload(kHelpPayload).has_value();
}

std::string HelpText(const absl::Status& status) {
  const auto text = status.GetPayload(kHelpPayload);
  return text.has_value() ? std::string(*text) : std::string();
}

namespace {

// Edits (insert, delete, substitute) turning `a` into `b`.
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// "unknown flag '--thread'; did you mean '--threads'?" when a spelling is within a third
// of the typed name's length (at least 1, at most 3 edits), else without the suggestion.
std::string UnknownFlagMessage(absl::string_view command, absl::string_view name,
                               const std::vector<FlagSpec>& specs) {
  std::string message = absl::StrCat(command, ": unknown flag '", name, "'");
  const size_t limit = std::min<size_t>(3, std::max<size_t>(1, name.size() / 3));
  std::string best;
  size_t best_distance = limit + 1;
  for (const FlagSpec& spec : specs) {
    for (const std::string& spelling : spec.names) {
      const size_t distance = EditDistance(name, spelling);
      if (distance < best_distance) {
        best_distance = distance;
        best = spelling;
      }
    }
  }
  if (!best.empty()) absl::StrAppend(&message, "; did you mean '", best, "'?");
  return message;
}

bool LooksLikeFlag(absl::string_view arg) { return arg.size() >= 2 && arg[0] == '-'; }

}  // namespace

absl::StatusOr<ParsedArgs> ParseArgs(absl::string_view command, const std::vector<std::string>& args,
                                     const std::vector<FlagSpec>& specs) {
  CLI::App app{"", absl::StrCat("fuselage ", command)};
  app.set_help_flag("-h,--help", "print this help and exit");
  app.allow_extras(true);  // operands, and unknown flags reported by name below
  ParsedArgs parsed;
  std::vector<std::string> values(specs.size());
  std::vector<CLI::Option*> options;
  for (size_t i = 0; i < specs.size(); ++i) {
    const FlagSpec& spec = specs[i];
    const std::string names = absl::StrJoin(spec.names, ",");
    CLI::Option* option;
    if (spec.takes_value) {
      const std::string help =
          spec.default_value.empty() ? spec.help
                                     : absl::StrCat(spec.help, " (default: ", spec.default_value, ")");
      option = app.add_option(names, values[i], help);
      // expected(0, 1): `--threads=` (an empty value) reaches the flag's own check, which
      // names the flag and what it expects, instead of CLI11's "1 required N missing".
      option->type_name(spec.value_name)->expected(0, 1)->allow_extra_args(false);
    } else {
      option = app.add_flag(names, spec.help)->disable_flag_override();
    }
    option->multi_option_policy(CLI::MultiOptionPolicy::Throw);
    options.push_back(option);
  }
  // "--" ends the flags; what follows is operands even if it starts with '-'. (CLI11 would
  // keep the "--" itself among the extras, since extras are allowed.)
  const auto end_of_flags = std::find(args.begin(), args.end(), std::string("--"));
  std::vector<std::string> reversed(std::make_reverse_iterator(end_of_flags), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    return HelpRequest(app.help());
  } catch (const CLI::Error& e) {  // ParseError and anything else CLI11 throws
    return UsageError(absl::StrCat(command, ": ", e.what()));
  }
  // Operands are what CLI11 leaves over, as typed: a positional option of CLI11's would
  // rewrite some ("[a,b]" becomes the two operands a and b).
  for (const std::string& arg : app.remaining()) {
    if (LooksLikeFlag(arg)) {
      return UsageError(UnknownFlagMessage(command, arg.substr(0, arg.find('=')), specs));
    }
    parsed.positional.push_back(arg);
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    if (options[i]->count() > 0) parsed.flags[specs[i].names.front()] = values[i];
  }
  if (end_of_flags != args.end()) {
    parsed.positional.insert(parsed.positional.end(), end_of_flags + 1, args.end());
  }
  return parsed;
}

std::optional<int64_t> ParseInteger(absl::string_view text, int64_t min_value,
                                   int64_t max_value) {
  // SimpleAtoi alone would also accept surrounding spaces and a '+': a flag's value must
  // be exactly an integer, as typed.
  const absl::string_view digits = absl::StartsWith(text, "-") ? text.substr(1) : text;
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(),
                                     [](char c) { return absl::ascii_isdigit(c); })) {
    return std::nullopt;
  }
  int64_t value = 0;  // SimpleAtoi fails on int64 overflow: no wrap-around.
  if (!absl::SimpleAtoi(text, &value) || value < min_value || value > max_value) {
    return std::nullopt;
  }
  return value;
}

absl::StatusOr<int64_t> IntFlag(const ParsedArgs& parsed, const std::string& flag,
                                int64_t default_value, int64_t min_value, int64_t max_value) {
  auto it = parsed.flags.find(flag);
  if (it == parsed.flags.end()) return default_value;
  std::optional<int64_t> value = ParseInteger(it->second, min_value, max_value);
  if (!value.has_value()) {
    return UsageError(absl::StrCat(flag, " is '", it->second, "'; expected an integer in [",
                                   min_value, ", ", max_value, "]"));
  }
  return *value;
}

FlagSpec ThreadsFlagSpec() {
  return {{"--threads"}, true, "threads for the kernels (1 to 1024)", "N",
          "OMP_NUM_THREADS, else every core"};
}

absl::StatusOr<int> ThreadsFlag(const ParsedArgs& parsed) {
  ASSIGN_OR_RETURN(const int64_t threads, IntFlag(parsed, "--threads", 0, 1, kMaxThreads));
  return static_cast<int>(threads);
}

FlagSpec EngineFlagSpec() {
  return {{"--engine"}, true,
          "whose integer arithmetic quantized ops compute, as torch.backends.quantized.engine: "
          "onednn or qnnpack; onnxruntime: ONNX Runtime's CPU int8 kernels",
          "NAME", "the engine the model records (qnnpack config: qnnpack; others: onednn)"};
}

absl::StatusOr<std::optional<QuantizedEngine>> EngineFlag(const ParsedArgs& parsed) {
  if (!parsed.Has("--engine")) return std::optional<QuantizedEngine>();
  const std::string& value = parsed.flags.at("--engine");
  std::optional<QuantizedEngine> engine = QuantizedEngineFromName(value);
  if (!engine.has_value()) {
    return UsageError(
        absl::StrCat("--engine is '", value, "'; expected onednn, qnnpack or onnxruntime"));
  }
  return engine;
}

absl::Status ExpectPositional(const Command& command, const ParsedArgs& parsed, size_t count) {
  if (parsed.positional.size() == count) return absl::OkStatus();
  return UsageError(absl::StrCat(command.name, ": expected ", count, " operand",
                                 count == 1 ? "" : "s", ", got ", parsed.positional.size(),
                                 "; usage: fuselage ", command.usage));
}

absl::StatusOr<std::unique_ptr<GraphModule>> LoadModelArg(const CommandContext& context,
                                                          const std::string& path) {
  const std::string resolved = context.ResolvePath(path);
  if (IsOnnxPath(resolved)) return LoadOnnxModel(resolved);
  return LoadModel(resolved);
}

}  // namespace fuselage
