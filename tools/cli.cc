#include "tools/cli.h"

#include <algorithm>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace fuselage {
namespace {

// Error messages may quote file contents; keep the promised single line.
std::string OneLine(absl::string_view message) {
  return absl::StrReplaceAll(message, {{"\r", " "}, {"\n", " "}});
}

}  // namespace

std::string UsageText(const std::vector<Command>& commands) {
  // Usage and summary on separate lines: one long usage (quantize's) would otherwise pad
  // every summary past the terminal's width.
  std::string text =
      "usage: fuselage COMMAND [ARGS...]\n"
      "\n"
      "fuselage fuses, quantizes and lowers FX-style model graphs. Commands:\n";
  for (const Command& c : commands) {
    absl::StrAppend(&text, "  ", c.usage, "\n      ", c.summary, "\n");
  }
  absl::StrAppend(&text,
                  "\n"
                  "MODEL is a fuselage model file: binary protobuf, or text form when it ends\n"
                  "in .textproto or .pbtxt (see graph/model.proto).\n");
  return text;
}

int RunCli(const std::vector<std::string>& args, const std::vector<Command>& commands,
           const std::string& working_directory, std::ostream& out, std::ostream& err,
           std::ostream* progress) {
  if (args.empty()) {
    err << UsageText(commands);
    return kExitUsage;
  }
  std::string name = args[0];
  std::vector<std::string> command_args(args.begin() + 1, args.end());
  if (name == "help" || name == "-h" || name == "--help") {
    if (command_args.empty()) {
      out << UsageText(commands);
      return kExitOk;
    }
    // `fuselage help CMD` is `fuselage CMD --help`.
    name = command_args[0];
    command_args = {"--help"};
  }
  auto command = std::find_if(commands.begin(), commands.end(),
                              [&](const Command& c) { return c.name == name; });
  if (command == commands.end()) {
    err << "fuselage: unknown command '" << OneLine(name) << "'; run 'fuselage help'\n";
    return kExitUsage;
  }
  CommandContext context{out, working_directory, progress};
  absl::Status status;
  try {
    status = command->run(command_args, context);
  } catch (const std::bad_alloc&) {
    return OutOfMemoryExit(err);
  }
  if (status.ok()) return kExitOk;
  if (IsHelpRequest(status)) {
    out << "usage: fuselage " << command->usage << "\n\n" << command->summary << "\n\n"
        << HelpText(status);
    return kExitOk;
  }
  err << "fuselage: " << OneLine(status.message()) << "\n";
  return IsUsageError(status) ? kExitUsage : kExitFailure;
}

int OutOfMemoryExit(std::ostream& err) {
  err << "fuselage: out of memory (an allocation failed); the input needs more memory than "
         "this machine gives the process\n";
  return kExitFailure;
}

}  // namespace fuselage
