// `fuselage verify MODEL`: loads MODEL, which validates every field and runs
// GraphModule::Verify (structure, module attributes and tensors against their schemas),
// checks every call_function target against the known functions (FunctionRegistry), and
// reports the first problem or a one-line summary.
#include "tools/verify_command.h"

#include "absl/strings/str_cat.h"
#include "backend_configs/known_functions.h"
#include "graph/status_macros.h"

namespace fuselage {
namespace {

// Counts modules below `module` (itself excluded) and their tensors.
void CountModules(const Module& module, int* modules, int* tensors) {
  *tensors += static_cast<int>(module.tensors().size());
  for (const auto& entry : module.children()) {
    ++*modules;
    CountModules(*entry.second, modules, tensors);
  }
}

}  // namespace

Command VerifyCommand() {
  Command command;
  command.name = "verify";
  command.usage = "verify MODEL";
  command.summary = "check the model file and the graph's invariants";
  command.run = [command](const std::vector<std::string>& args,
                          CommandContext& context) -> absl::Status {
    ASSIGN_OR_RETURN(ParsedArgs parsed, ParseArgs(command.name, args, {}));
    RETURN_IF_ERROR(ExpectPositional(command, parsed, 1));
    ASSIGN_OR_RETURN(auto gm, LoadModelArg(context, parsed.positional[0]));
    // Loading ran GraphModule::Verify (module attributes and tensors against their
    // schemas included); the functions it calls are checked one level up (known_functions.h).
    const absl::Status functions = VerifyFunctionTargets(*gm);
    if (!functions.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(parsed.positional[0], ": ", functions.message()));
    }
    int modules = 0;
    int tensors = 0;
    CountModules(gm->root(), &modules, &tensors);
    context.out << parsed.positional[0] << ": ok (" << gm->graph().size() << " nodes, "
                << modules << " modules, " << tensors << " tensors)\n";
    return absl::OkStatus();
  };
  return command;
}

}  // namespace fuselage
