// `fuselage dot MODEL [-o FILE]`: loads MODEL and writes it as a Graphviz digraph to
// FILE (or to stdout without -o, or with `-o -`). FILE is replaced atomically: "wrote" is
// printed only once it holds the whole picture.
#include "tools/dot_command.h"

#include "absl/strings/str_cat.h"
#include "graph/dot.h"
#include "graph/file_io.h"
#include "graph/status_macros.h"

namespace fuselage {

Command DotCommand() {
  Command command;
  command.name = "dot";
  command.usage = "dot MODEL [-o FILE]";
  command.summary = "write the graph as Graphviz DOT (render with `dot -Tsvg`)";
  command.run = [command](const std::vector<std::string>& args,
                          CommandContext& context) -> absl::Status {
    ASSIGN_OR_RETURN(ParsedArgs parsed,
                     ParseArgs(command.name, args, {{{"-o", "--output"}, true}}));
    RETURN_IF_ERROR(ExpectPositional(command, parsed, 1));
    ASSIGN_OR_RETURN(auto gm, LoadModelArg(context, parsed.positional[0]));
    const std::string dot = ToDot(*gm);
    const std::string output = parsed.Has("-o") ? parsed.flags.at("-o") : "-";
    if (output == "-") {
      context.out << dot;
      return absl::OkStatus();
    }
    if (output.empty()) return UsageError("dot: -o needs a file name");
    RETURN_IF_ERROR(WriteFileAtomically(context.ResolvePath(output), dot));
    context.out << "wrote " << output << " (" << gm->graph().size() << " nodes)\n";
    return absl::OkStatus();
  };
  return command;
}

}  // namespace fuselage
