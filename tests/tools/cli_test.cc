// The `fuselage` CLI, run in-process: exit codes 0 / 1 / 2, exactly one `fuselage: ...`
// line on stderr for every failure, and each command's output.
#include "tools/cli.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"
#include "tests/tools/run_cli.h"

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
  ASSERT_TRUE(WriteFile(path,
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

}  // namespace
}  // namespace fuselage
