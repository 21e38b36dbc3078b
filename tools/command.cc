#include "tools/command.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "graph/serialization.h"
#include "graph/status_macros.h"
#include "runtime/interpreter.h"

namespace fuselage {
namespace {

constexpr absl::string_view kUsagePayload = "fuselage.dev/usage-error";

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

absl::StatusOr<ParsedArgs> ParseArgs(absl::string_view command, const std::vector<std::string>& args,
                                     const std::vector<FlagSpec>& specs) {
  ParsedArgs parsed;
  bool flags_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (flags_done || arg.size() < 2 || arg[0] != '-') {
      parsed.positional.push_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_done = true;
      continue;
    }
    // "--name=value" carries its value inline.
    const size_t equals = arg.find('=');
    const std::string name = arg.substr(0, equals);
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& s : specs) {
      for (const std::string& n : s.names) {
        if (n == name) spec = &s;
      }
    }
    if (spec == nullptr) {
      return UsageError(absl::StrCat(command, ": unknown flag '", name, "'"));
    }
    const std::string& key = spec->names.front();
    if (parsed.Has(key)) return UsageError(absl::StrCat(command, ": flag '", name, "' given twice"));
    if (!spec->takes_value) {
      if (equals != std::string::npos) {
        return UsageError(absl::StrCat(command, ": flag '", name, "' takes no value"));
      }
      parsed.flags[key] = "";
    } else if (equals != std::string::npos) {
      parsed.flags[key] = arg.substr(equals + 1);
    } else if (i + 1 < args.size()) {
      parsed.flags[key] = args[++i];
    } else {
      return UsageError(absl::StrCat(command, ": flag '", name, "' needs a value"));
    }
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

FlagSpec ThreadsFlagSpec() { return {{"--threads"}, true}; }

absl::StatusOr<int> ThreadsFlag(const ParsedArgs& parsed) {
  ASSIGN_OR_RETURN(const int64_t threads, IntFlag(parsed, "--threads", 0, 1, kMaxThreads));
  return static_cast<int>(threads);
}

FlagSpec EngineFlagSpec() { return {{"--engine"}, true}; }

absl::StatusOr<std::optional<QuantizedEngine>> EngineFlag(const ParsedArgs& parsed) {
  if (!parsed.Has("--engine")) return std::optional<QuantizedEngine>();
  const std::string& value = parsed.flags.at("--engine");
  std::optional<QuantizedEngine> engine = QuantizedEngineFromName(value);
  if (!engine.has_value()) {
    return UsageError(
        absl::StrCat("--engine is '", value, "'; expected onednn or qnnpack"));
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
  return LoadModel(context.ResolvePath(path));
}

}  // namespace fuselage
