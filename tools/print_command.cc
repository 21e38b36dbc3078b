// `fuselage print MODEL [--readable]`: loads MODEL and prints its forward function as
// torch.fx would (PrintCode), or with --readable the class form with module types
// (PrintReadable).
#include "tools/print_command.h"

#include "graph/printer.h"
#include "graph/status_macros.h"

namespace fuselage {

Command PrintCommand() {
  Command command;
  command.name = "print";
  command.usage = "print MODEL [--readable]";
  command.summary = "print the model's forward function as torch.fx code";
  command.run = [command](const std::vector<std::string>& args,
                          CommandContext& context) -> absl::Status {
    ASSIGN_OR_RETURN(ParsedArgs parsed, ParseArgs(command.name, args, {{{"--readable"}, false,
                                                  "print tensors' values, not only their shapes"}}));
    RETURN_IF_ERROR(ExpectPositional(command, parsed, 1));
    ASSIGN_OR_RETURN(auto gm, LoadModelArg(context, parsed.positional[0]));
    context.out << (parsed.Has("--readable") ? PrintReadable(*gm) : PrintCode(*gm));
    return absl::OkStatus();
  };
  return command;
}

}  // namespace fuselage
