// `fuselage demo [--seed N] [--write-example FILE]`: the README's main job on the
// built-in residual example. Today: build it, save it to model bytes, load them back
// (through the same validating loader every model file goes through), verify and print
// it. Later stages (fuse, quantize, lower) are added here as they land.
//
// --write-example FILE writes the example as a model file instead (text form for
// .textproto), which is how tools/examples/residual.textproto is produced.
#include "tools/demo_command.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "graph/printer.h"
#include "graph/serialization.h"
#include "graph/status_macros.h"
#include "tools/examples.h"

namespace fuselage {

Command DemoCommand() {
  Command command;
  command.name = "demo";
  command.usage = "demo [--seed N] [--write-example FILE]";
  command.summary = "run the main job on the built-in residual example";
  command.run = [command](const std::vector<std::string>& args,
                          CommandContext& context) -> absl::Status {
    ASSIGN_OR_RETURN(ParsedArgs parsed,
                     ParseArgs(command.name, args,
                               {{{"--seed"}, true}, {{"--write-example"}, true}}));
    RETURN_IF_ERROR(ExpectPositional(command, parsed, 0));
    uint32_t seed = kResidualExampleSeed;
    if (parsed.Has("--seed") && !absl::SimpleAtoi(parsed.flags.at("--seed"), &seed)) {
      return UsageError(absl::StrCat("demo: --seed is '", parsed.flags.at("--seed"),
                                     "'; expected an integer in [0, 4294967295]"));
    }
    ASSIGN_OR_RETURN(auto example, BuildResidualExample(seed));
    if (parsed.Has("--write-example")) {
      const std::string& path = parsed.flags.at("--write-example");
      RETURN_IF_ERROR(SaveModel(*example, context.ResolvePath(path)));
      context.out << "wrote the residual example (seed " << seed << ") to " << path << "\n";
      return absl::OkStatus();
    }
    std::ostream& out = context.out;
    out << "fuselage demo: the residual block conv -> bn -> add -> relu (seed " << seed
        << ")\n\n";
    const std::string bytes = SerializeModel(*example);
    out << "[1/3] load:   saved the built-in example as " << bytes.size()
        << " bytes of model file and loaded it back\n";
    ASSIGN_OR_RETURN(auto gm, ParseModel(bytes));
    RETURN_IF_ERROR(gm->Verify());
    out << "[2/3] verify: ok (" << gm->graph().size() << " nodes)\n";
    out << "[3/3] print:\n\n" << PrintReadable(*gm);
    return absl::OkStatus();
  };
  return command;
}

}  // namespace fuselage
