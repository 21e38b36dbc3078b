// One run of a stage command: the commands that take one MODEL operand, run a pass over
// it and write the result to `-o OUT` (fuse, prepare, calibrate, convert, lower,
// quantize). StageRun parses the flags they share, loads the input model, times each
// step, verifies and saves the result and prints the `--time` lines, so each command's
// own code is only its pass and its report.
//
// Every message is the one the commands gave before they shared this code: the CLI tests
// (tests/tools/stage_commands_test.cc, fuse_explain_test.cc) and
// bench/compare_pytorch.py read them.
#ifndef FUSELAGE_TOOLS_STAGE_RUN_H_
#define FUSELAGE_TOOLS_STAGE_RUN_H_

#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/graph_module.h"
#include "tools/command.h"
#include "tools/quantize_flags.h"

namespace fuselage {

// The command line of a stage command, beyond MODEL and -o.
struct StageFlags {
  // The command's own flags (e.g. BackendFlagSpecs()); -o/--output is always added.
  std::vector<FlagSpec> flags;
  // Whether the command takes --time (quantize does not).
  bool timed = true;
  // What -o's file will hold, for the usage error when -o is missing: "<command>: needs
  // -o OUT, the file to write the <output_noun> to".
  std::string output_noun = "model";
};

class StageRun {
 public:
  // Parses `args` against `flags`. UsageError for an unknown, repeated or value-less flag
  // (ParseArgs), for other than one MODEL operand (ExpectPositional), or for a missing or
  // empty -o; checked in that order.
  static absl::StatusOr<StageRun> Parse(const Command& command,
                                        const std::vector<std::string>& args,
                                        const StageFlags& flags);

  const ParsedArgs& parsed() const { return parsed_; }
  // The MODEL operand and -o's value, as the user typed them (the summary line prints
  // them so).
  const std::string& input() const { return parsed_.positional[0]; }
  const std::string& output() const { return output_; }
  // The steps timed so far; a command times its own pass with Start() / Stop("name").
  StageTimes& times() { return times_; }

  // Loads MODEL, resolved against the context, timed as the step "load".
  absl::StatusOr<std::unique_ptr<GraphModule>> LoadInput(const CommandContext& context);

  // Verifies `gm` (step "verify") and saves it to -o's file (step "save"). A graph that
  // fails Verify after a pass is a fuselage bug: Internal, "<graph> fails Verify (a
  // fuselage bug): <why>", where `graph` names it ("fused graph").
  absl::Status VerifyAndSave(const CommandContext& context, const GraphModule& gm,
                             absl::string_view graph);

  // Saves `gm` to -o's file, timed as the step "save". The file is replaced atomically
  // (SaveModel): on an error it keeps its old contents, so a command prints "wrote" only
  // after this returned OK.
  absl::Status Save(const CommandContext& context, const GraphModule& gm);

  // Writes the `time <step> <ms> ms` lines if --time was given, else nothing.
  void PrintTimes(std::ostream& out) const;

 private:
  StageRun(ParsedArgs parsed, std::string output)
      : parsed_(std::move(parsed)), output_(std::move(output)) {}

  ParsedArgs parsed_;
  std::string output_;
  StageTimes times_;
};

}  // namespace fuselage

#endif  // FUSELAGE_TOOLS_STAGE_RUN_H_
