// `fuselage CMD --help`, `fuselage help CMD` and flag mistakes, as parsed by CLI11
// (tools/command.h: ParseArgs). The expectations come from each command's own usage line
// (tools/all_commands.h), written independently of its flag table: every flag the usage
// line names must be listed, with a meaning, by the command's help.
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/tools/run_cli.h"
#include "tools/all_commands.h"
#include "tools/cli.h"

namespace fuselage {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// "--backend", "-o", ... as the usage line spells them.
std::set<std::string> FlagsInUsage(const std::string& usage) {
  std::set<std::string> flags;
  const std::regex flag(R"((^|[\s\[(|])(--?[a-z][a-z-]*))");
  for (auto it = std::sregex_iterator(usage.begin(), usage.end(), flag);
       it != std::sregex_iterator(); ++it) {
    flags.insert((*it)[2]);
  }
  return flags;
}

TEST(CliHelpTest, EveryCommandListsEveryFlagOfItsUsageWithAMeaning) {
  for (const Command& command : AllCommands()) {
    const CliResult r = RunFuselage({command.name, "--help"});
    ASSERT_EQ(r.code, kExitOk) << command.name << ": " << r.err;
    EXPECT_EQ(r.err, "") << command.name;
    EXPECT_THAT(r.out, HasSubstr("usage: fuselage " + command.usage)) << command.name;
    EXPECT_THAT(r.out, HasSubstr(command.summary)) << command.name;
    for (const std::string& flag : FlagsInUsage(command.usage)) {
      // The flag's line: its spelling, then (after the value's name) a description.
      const std::regex line("(^|\\n)\\s+(-[a-z],)?" + flag + "[ ,][^\\n]*[a-z]{3,}[^\\n]*");
      EXPECT_TRUE(std::regex_search(r.out, line))
          << command.name << ": " << flag << " is not listed with a meaning in\n"
          << r.out;
    }
  }
}

TEST(CliHelpTest, HelpCommandIsTheCommandsOwnHelp) {
  const CliResult via_help = RunFuselage({"help", "quantize"});
  const CliResult via_flag = RunFuselage({"quantize", "-h"});
  EXPECT_EQ(via_help.code, kExitOk);
  EXPECT_EQ(via_help.out, via_flag.out);
  // Defaults are stated: --samples' is quantize's 8 random samples.
  EXPECT_THAT(via_help.out, HasSubstr("(default: 8)"));
  // `fuselage help` alone is still the list of commands.
  EXPECT_THAT(RunFuselage({"help"}).out, HasSubstr("Commands:"));
  EXPECT_EQ(RunFuselage({"help", "nosuch"}).code, kExitUsage);
}

TEST(CliHelpTest, UnknownFlagGetsTheClosestSpelling) {
  const std::string model = "tools/examples/residual.textproto";
  CliResult r = RunFuselage({"run", model, "--input=x.npy", "--thread=2"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_EQ(r.err, "fuselage: run: unknown flag '--thread'; did you mean '--threads'?\n");
  r = RunFuselage({"fuse", model, "--backnd=native", "-o", TempPath("f.fsl")});
  EXPECT_EQ(r.err, "fuselage: fuse: unknown flag '--backnd'; did you mean '--backend'?\n");
  // Nothing close: no suggestion.
  r = RunFuselage({"print", model, "--zzzzzz"});
  EXPECT_EQ(r.err, "fuselage: print: unknown flag '--zzzzzz'\n");
}

TEST(CliHelpTest, ValueMistakesAreUsageErrorsNamingTheFlag) {
  const std::string model = "tools/examples/residual.textproto";
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"run", model, "--input"},                                  // no value
           {"run", model, "--input=a.npy", "--input=b.npy"},           // given twice
           {"run", model, "--input=a.npy", "--time=yes"}}) {           // a flag with a value
    const CliResult r = RunFuselage(args);
    EXPECT_EQ(r.code, kExitUsage) << args.back() << ": " << r.err;
    const std::string flag = args.back().substr(0, args.back().find('='));
    EXPECT_THAT(r.err, HasSubstr(flag == "--input" ? "input" : "time")) << r.err;
  }
}

TEST(CliHelpTest, DoubleDashEndsTheFlags) {
  // After "--", "-x" is an operand (a model file that does not exist), not a flag.
  const CliResult r = RunFuselage({"print", "--", "-x"});
  EXPECT_EQ(r.code, kExitFailure) << r.err;
  EXPECT_THAT(r.err, HasSubstr("-x"));
  EXPECT_THAT(r.err, Not(HasSubstr("unknown flag")));
}

// Operands reach the command as typed: CLI11's positional options would split a
// bracketed "[a,b]" into two operands (found by cli_flags_fuzz).
TEST(CliHelpTest, OperandsAreKeptAsTyped) {
  CliResult r = RunFuselage({"print", "[a,b].fsl"});
  EXPECT_EQ(r.code, kExitFailure) << r.err;
  EXPECT_THAT(r.err, HasSubstr("[a,b].fsl"));
  r = RunFuselage({"print", "[a,b]"});
  EXPECT_EQ(r.code, kExitFailure) << r.err;
  EXPECT_THAT(r.err, HasSubstr("'[a,b]'")) << r.err;
  r = RunFuselage({"print", "[a]", "[b]"});
  EXPECT_EQ(r.code, kExitUsage) << r.err;
  EXPECT_THAT(r.err, HasSubstr("expected 1 operand, got 2")) << r.err;
}

}  // namespace
}  // namespace fuselage
