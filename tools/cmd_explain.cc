// `fuselage explain MODEL (--backend=NAME | --config=FILE)`: runs the fusion matcher of
// the backend config over MODEL, read-only, and prints, for every node where a pattern's
// outermost op matched but the whole pattern did not, the rule, the node, the failing
// edge as a path and the reason; then the number of matches per pattern
// (PatternMatcher::Explain, patterns/matcher.h). The model is not changed.
#include "tools/cmd_explain.h"

#include "graph/status_macros.h"
#include "pipeline/stages.h"
#include "tools/backend_flag.h"

namespace fuselage {

Command ExplainCommand() {
  Command command;
  command.name = "explain";
  command.usage = "explain MODEL (--backend=NAME | --config=FILE)";
  command.summary = "say why each fusion pattern did or did not match, node by node";
  command.run = [command](const std::vector<std::string>& args,
                          CommandContext& context) -> absl::Status {
    ASSIGN_OR_RETURN(ParsedArgs parsed, ParseArgs(command.name, args, BackendFlagSpecs()));
    RETURN_IF_ERROR(ExpectPositional(command, parsed, 1));
    ASSIGN_OR_RETURN(BackendConfig config, BackendFromFlags(context, command.name, parsed));
    ASSIGN_OR_RETURN(auto gm, LoadModelArg(context, parsed.positional[0]));
    ASSIGN_OR_RETURN(const ExplainResult result, ExplainModel(*gm, config));
    context.out << result.ToString();
    return absl::OkStatus();
  };
  return command;
}

}  // namespace fuselage
