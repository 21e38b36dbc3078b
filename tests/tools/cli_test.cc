// The `fuselage` CLI, run in-process: exit codes 0 / 1 / 2, exactly one `fuselage: ...`
// line on stderr for every failure, and each command's output.
#include "tools/cli.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "graph/file_io.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"
#include "tests/tools/run_cli.h"
#include "tools/command.h"

namespace fuselage {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kExample[] = "tools/examples/residual.textproto";

// One line: "fuselage: ...\n" and nothing else.
void ExpectOneErrorLine(const CliResult& r) {
  EXPECT_THAT(r.err, StartsWith("fuselage: "));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.back(), '\n');
}

TEST(CliTest, NoArgumentsPrintsUsageAndExits2) {
  CliResult r = RunFuselage({});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("usage: fuselage COMMAND"));
  EXPECT_TRUE(r.out.empty());
}

TEST(CliTest, HelpListsEveryCommand) {
  CliResult r = RunFuselage({"help"});
  EXPECT_EQ(r.code, 0);
  for (const char* usage : {"demo [--seed N]", "print MODEL", "dot MODEL [-o FILE]", "verify MODEL"}) {
    EXPECT_THAT(r.out, HasSubstr(usage));
  }
  EXPECT_EQ(RunFuselage({"--help"}).out, r.out);
}

TEST(CliTest, UnknownCommandIsAUsageError) {
  CliResult r = RunFuselage({"frobnicate"});
  EXPECT_EQ(r.code, 2);
  ExpectOneErrorLine(r);
  EXPECT_THAT(r.err, HasSubstr("unknown command 'frobnicate'"));
}

TEST(CliTest, PrintMatchesTorchFxCode) {
  CliResult r = RunFuselage({"print", kExample});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, FileContents("tests/graph/testdata/fx_code_residual.txt"));
  EXPECT_TRUE(r.err.empty());
  CliResult readable = RunFuselage({"print", "--readable", kExample});
  EXPECT_EQ(readable.code, 0);
  EXPECT_THAT(readable.out, HasSubstr("        conv = self.conv(x)  # nn.Conv2d\n"));
}

TEST(CliTest, UsageMistakesExit2WithOneLine) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"print"},
                                             {"print", kExample, kExample},
                                             {"print", "--colour", kExample},
                                             {"dot", kExample, "-o"},
                                             {"verify"},
                                             {"demo", "--seed", "minus-one"},
                                             {"demo", "--seed", "4294967296"},
                                             {"demo", "--seed=-1"},
                                             {"demo", "extra"}}) {
    CliResult r = RunFuselage(args);
    EXPECT_EQ(r.code, 2) << args[0];
    ExpectOneErrorLine(r);
  }
  EXPECT_THAT(RunFuselage({"print"}).err, HasSubstr("usage: fuselage print MODEL"));
  EXPECT_THAT(RunFuselage({"print", "--colour", kExample}).err, HasSubstr("unknown flag '--colour'"));
}

TEST(CliTest, BadModelFileExits1WithOneLineNamingTheProblem) {
  const std::string path = absl::StrCat(TempDir(), "/bad.textproto");
  ASSERT_TRUE(WriteFileAtomically(path,
                        "format_version: 1\n"
                        "graph {\n"
                        "  nodes { name: \"x\" op: PLACEHOLDER target: \"x\" }\n"
                        "  nodes { name: \"r\" op: CALL_FUNCTION target: \"torch.relu\"\n"
                        "          args { node: \"ghost\" } }\n"
                        "}\n"
                        "root { type: \"GraphModule\" }\n")
                  .ok());
  for (const char* command : {"print", "verify", "dot"}) {
    CliResult r = RunFuselage({command, path});
    EXPECT_EQ(r.code, 1) << command;
    ExpectOneErrorLine(r);
    EXPECT_THAT(r.err, HasSubstr("node 'r' args[0]"));
    EXPECT_THAT(r.err, HasSubstr("'ghost'"));
    EXPECT_TRUE(r.out.empty());
  }
  CliResult missing = RunFuselage({"verify", "/nonexistent/model.pb"});
  EXPECT_EQ(missing.code, 1);
  ExpectOneErrorLine(missing);
  EXPECT_THAT(missing.err, HasSubstr("/nonexistent/model.pb"));
}

TEST(CliTest, VerifySummarizesAValidModel) {
  CliResult r = RunFuselage({"verify", kExample});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, absl::StrCat(kExample, ": ok (7 nodes, 4 modules, 6 tensors)\n"));
}

TEST(CliTest, DotWritesTheFileOrStdout) {
  const std::string path = absl::StrCat(TempDir(), "/residual.dot");
  CliResult r = RunFuselage({"dot", kExample, "-o", path});
  EXPECT_EQ(r.code, 0) << r.err;
  const std::string dot = FileContents(path);
  EXPECT_THAT(dot, StartsWith("digraph GraphModule {\n"));
  EXPECT_THAT(dot, HasSubstr("\"bn\" -> \"add\";"));
  EXPECT_THAT(dot, HasSubstr("type: nn.BatchNorm2d"));
  EXPECT_EQ(RunFuselage({"dot", kExample}).out, dot);
  CliResult unwritable = RunFuselage({"dot", kExample, "-o", "/nonexistent/dir/g.dot"});
  EXPECT_EQ(unwritable.code, 1);
  ExpectOneErrorLine(unwritable);
}

TEST(CliTest, RelativePathsResolveAgainstTheWorkingDirectory) {
  const std::string dir = TempDir();
  ASSERT_EQ(RunFuselage({"demo", "--write-example", "copy.textproto"}, dir).code, 0);
  CliResult r = RunFuselage({"verify", "copy.textproto"}, dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(FileContents(absl::StrCat(dir, "/copy.textproto")), FileContents(kExample));
}

TEST(CliTest, DemoLoadsVerifiesAndPrints) {
  CliResult r = RunFuselage({"demo"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("[1/3] load"));
  EXPECT_THAT(r.out, HasSubstr("[2/3] verify: ok (7 nodes)"));
  EXPECT_THAT(r.out, HasSubstr("        add = bn + identity\n"));
  EXPECT_THAT(r.out, HasSubstr("        return relu\n"));
}

// demo's --seed is read as every integer flag is (IntFlag): 2^32 used to be refused only
// by SimpleAtoi's uint32 overflow, now by the range, which the message gives.
TEST(CliTest, DemoSeedNamesItsRange) {
  CliResult r = RunFuselage({"demo", "--seed=4294967296"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_EQ(r.err, "fuselage: --seed is '4294967296'; expected an integer in [0, 4294967295]\n");
  const std::string written = absl::StrCat(TempDir(), "/demo_max_seed.fsl");
  r = RunFuselage({"demo", "--seed=4294967295", "--write-example", written});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("(seed 4294967295)"));
}

// The one integer reader of the command line: exactly an optional '-' and digits, in
// range, or nothing; never a truncated or wrapped value.
TEST(ParseIntegerTest, AcceptsOnlyDecimalIntegersInRange) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(ParseInteger("0", 0, 10), 0);
  EXPECT_EQ(ParseInteger("10", 0, 10), 10);
  EXPECT_EQ(ParseInteger("-5", -5, 5), -5);
  EXPECT_EQ(ParseInteger("007", 0, 10), 7);
  EXPECT_EQ(ParseInteger("4294967297", 0, kMax), int64_t{4294967297});
  EXPECT_EQ(ParseInteger("9223372036854775807", kMin, kMax), kMax);
  EXPECT_EQ(ParseInteger("-9223372036854775808", kMin, kMax), kMin);
  for (const char* bad : {"", "-", "+1", " 1", "1 ", "1x", "0x10", "1e3", "1.0", "1,2", "--1",
                          "9223372036854775808", "-9223372036854775809",
                          "99999999999999999999999"}) {
    EXPECT_EQ(ParseInteger(bad, kMin, kMax), std::nullopt) << "'" << bad << "'";
  }
  EXPECT_EQ(ParseInteger("11", 0, 10), std::nullopt);
  EXPECT_EQ(ParseInteger("-1", 0, 10), std::nullopt);
  EXPECT_EQ(ParseInteger(absl::string_view("1\0" "2", 3), 0, 100), std::nullopt);
}

TEST(ParseIntegerTest, IntFlagGivesTheDefaultOrAUsageErrorNamingFlagValueAndRange) {
  ParsedArgs parsed;
  auto absent = IntFlag(parsed, "--n", 7, 1, 9);
  ASSERT_TRUE(absent.ok());
  EXPECT_EQ(*absent, 7);
  parsed.flags["--n"] = "9";
  EXPECT_EQ(*IntFlag(parsed, "--n", 7, 1, 9), 9);
  parsed.flags["--n"] = "10";
  const absl::Status refused = IntFlag(parsed, "--n", 7, 1, 9).status();
  EXPECT_TRUE(IsUsageError(refused)) << refused;
  EXPECT_EQ(refused.message(), "--n is '10'; expected an integer in [1, 9]");
}

// An allocation failure that escapes a command (sizes from input are bounded, but memory
// can still run out) is one `fuselage: out of memory` line and exit 1, not an abort.
TEST(CliTest, OutOfMemoryInACommandIsOneLineAndExit1) {
  Command hungry;
  hungry.name = "hungry";
  hungry.run = [](const std::vector<std::string>&, CommandContext&) -> absl::Status {
    throw std::bad_alloc();
  };
  std::ostringstream out, err;
  const int code = RunCli({"hungry"}, {hungry}, "", out, err);
  EXPECT_EQ(code, kExitFailure);
  CliResult r{code, out.str(), err.str()};
  ExpectOneErrorLine(r);
  EXPECT_THAT(r.err, StartsWith("fuselage: out of memory"));
  EXPECT_TRUE(r.out.empty());
}

}  // namespace
}  // namespace fuselage
