// `fuselage fuse MODEL (--backend=NAME | --config=FILE) -o OUT [--time] [--profile]
//  [--report-overlaps]`:
// loads MODEL, fuses every match of the backend config's fusion patterns (FuseScannedModel,
// pipeline/stages.h), verifies the result and writes it to OUT. Prints one summary line:
// the matches per pattern and the node counts before and after.
//
//  --time     one line per stage with its wall time: load, matcher (building it from the
//             config), match (FindMatches alone, read-only), fuse (the whole pass, which
//             matches again), verify, save. bench/compare_pytorch.py reads these lines.
//  --profile  per pattern that was tried at least once: attempts (nodes where its
//             outermost op matched and it was tried, in the real scan), matches, and the
//             time a scan with that pattern alone takes over the unfused graph. The real
//             scan's attempts depend on the other patterns (a node claimed by one match is
//             not tried again), a per-pattern time cannot be separated out of it without
//             instrumenting the matcher, so "ms alone" is measured in isolation.
//  --report-overlaps  one line per match that took op nodes another pattern would have
//             matched on the graph alone (FindMatchOverlaps, patterns/fuse.h): which
//             pattern won where, which lost where, and the nodes they share.
#include "tools/cmd_fuse.h"

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "graph/status_macros.h"
#include "patterns/fuse.h"
#include "pipeline/stages.h"
#include "tools/backend_flag.h"
#include "tools/stage_run.h"

namespace fuselage {
namespace {

using Clock = std::chrono::steady_clock;

double MillisecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Per-pattern attempts, matches and isolated scan time over the unfused graph.
absl::StatusOr<std::string> Profile(const PatternMatcher& matcher, const GraphModule& gm) {
  const ExplainReport report = matcher.Explain(gm);
  absl::flat_hash_map<std::string, int> failures;
  for (const MatchFailure& f : report.failures) ++failures[f.rule];

  std::string out = absl::StrFormat("%-40s %9s %9s %10s\n", "pattern", "attempts", "matches",
                                    "ms alone");
  int never_tried = 0;
  for (size_t r = 0; r < matcher.rules().size(); ++r) {
    const FusionRule& rule = matcher.rules()[r];
    const int matches = report.matches_per_rule[r].second;
    const auto it = failures.find(rule.name);
    const int attempts = matches + (it == failures.end() ? 0 : it->second);
    if (attempts == 0) {
      ++never_tried;
      continue;
    }
    ASSIGN_OR_RETURN(PatternMatcher alone, PatternMatcher::Create({rule}));
    const Clock::time_point start = Clock::now();
    alone.FindMatches(gm);
    const double ms = MillisecondsSince(start);
    absl::StrAppendFormat(&out, "%-40s %9d %9d %10.3f\n", rule.name, attempts, matches, ms);
  }
  absl::StrAppend(&out, never_tried, " of ", matcher.rules().size(),
                  " patterns never tried (their outermost op is not in the graph)\n");
  return out;
}

}  // namespace

Command FuseCommand() {
  Command command;
  command.name = "fuse";
  command.usage =
      "fuse MODEL (--backend=NAME | --config=FILE) -o OUT [--time] [--profile] "
      "[--report-overlaps]";
  command.summary = "fuse the backend config's patterns (conv-bn-relu, ...) into fused modules";
  command.run = [command](const std::vector<std::string>& args,
                          CommandContext& context) -> absl::Status {
    StageFlags flags{BackendFlagSpecs()};
    flags.flags.push_back({{"--profile"}, false,
                           "per pattern tried: attempts, matches and the time of a scan with "
                           "it alone"});
    flags.flags.push_back({{"--report-overlaps"}, false,
                           "list matches that took nodes another pattern would have matched"});
    flags.output_noun = "fused model";
    ASSIGN_OR_RETURN(StageRun stage, StageRun::Parse(command, args, flags));
    ASSIGN_OR_RETURN(BackendConfig config, BackendFromFlags(context, command.name, stage.parsed()));
    ASSIGN_OR_RETURN(auto gm, stage.LoadInput(context));
    stage.times().Start();
    ASSIGN_OR_RETURN(PatternMatcher matcher, BuildFusionMatcher(config));
    stage.times().Stop("matcher");

    std::string profile;
    if (stage.parsed().Has("--profile")) {
      ASSIGN_OR_RETURN(profile, Profile(matcher, *gm));
    }
    stage.times().Start();
    const std::vector<PatternMatch> matches = matcher.FindMatches(*gm);
    stage.times().Stop("match");

    stage.times().Start();
    FuseOptions options;
    options.report_overlaps = stage.parsed().Has("--report-overlaps");
    ASSIGN_OR_RETURN(const FuseReport report,
                     FuseScannedModel(*gm, config, matcher, matches, options));
    stage.times().Stop("fuse");
    RETURN_IF_ERROR(stage.VerifyAndSave(context, *gm, "fused graph"));

    // The overlaps go after "; wrote OUT", so the summary stays the first line.
    context.out << report.Summary() << "; wrote " << stage.output() << report.OverlapLines()
                << "\n";
    stage.PrintTimes(context.out);
    if (stage.parsed().Has("--profile")) context.out << profile;
    return absl::OkStatus();
  };
  return command;
}

}  // namespace fuselage
