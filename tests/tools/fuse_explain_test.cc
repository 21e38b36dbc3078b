// `fuselage fuse` and `fuselage explain` on the residual example
// (tools/examples/residual.textproto):
//
//   x ─► conv ─► bn ─► add ─► relu ─► output
//   x ─► identity ────┘
//
// Expectations, worked out by hand from that graph and the configs:
//  - native (PyTorch 1.13's patterns) has no conv-bn-add-relu. At relu every pattern whose
//    outermost op is nn.ReLU is tried and fails on arg 0 (an operator.add, not a conv /
//    bn / linear): conv-relu and conv-bn-relu in 1d/2d/3d, linear-relu, bn-relu 2d/3d,
//    9 in all. At bn, (nn.BatchNorm2d, nn.Conv2d) matches: conv and bn become one folded
//    nn.Conv2d, 7 nodes -> 6.
//  - backend_configs/examples/conv_bn_add_relu.textproto adds the residual pattern, which
//    is longest and so tried first at relu and matches; the shorter ReLU patterns are then
//    not tried (0 partial matches) and conv, bn, add, relu become one nni.ConvAddReLU2d
//    taking (x, identity): 7 nodes -> 4 (x, identity, conv, output).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"
#include "tests/tools/run_cli.h"

namespace fuselage {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kExample[] = "tools/examples/residual.textproto";
constexpr char kResidualConfig[] = "backend_configs/examples/conv_bn_add_relu.textproto";

bool FileExists(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return false;
  std::fclose(f);
  return true;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

TEST(FuseCommandTest, NativeFoldsConvBnAndKeepsAddRelu) {
  const std::string out_path = TempPath("native.fsl");
  CliResult r = RunFuselage({"fuse", kExample, "--backend=native", "-o", out_path});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "fused 1 match ((nn.BatchNorm2d, nn.Conv2d): 1) with backend native: 7 -> 6 "
                   "nodes; wrote " + out_path + "\n");

  auto gm = LoadModel(out_path);
  ASSERT_TRUE(gm.ok()) << gm.status();
  ASSERT_TRUE((*gm)->Verify().ok());
  EXPECT_EQ((*gm)->graph().size(), 6u);
  EXPECT_EQ((*gm)->graph().FindNode("bn"), nullptr);
  const Node* conv = (*gm)->graph().FindNode("conv");
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ((*gm)->FindModule(conv->target().name())->type().name(), "nn.Conv2d");
  const Node* add = (*gm)->graph().FindNode("add");
  ASSERT_NE(add, nullptr);
  ASSERT_EQ(add->num_args(), 2u);
  EXPECT_EQ(add->arg(0).as_node(), conv);
  EXPECT_NE((*gm)->graph().FindNode("relu"), nullptr);
}

TEST(FuseCommandTest, ConfigFileFusesTheWholeResidualTail) {
  const std::string out_path = TempPath("residual.fsl");
  CliResult r = RunFuselage({"fuse", kExample, "--config", kResidualConfig, "-o", out_path});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("fused 1 match (conv_bn_add_relu: 1) with backend "
                                "qnnpack_conv_bn_add_relu: 7 -> 4 nodes"));

  auto gm = LoadModel(out_path);
  ASSERT_TRUE(gm.ok()) << gm.status();
  ASSERT_TRUE((*gm)->Verify().ok());
  const Graph& graph = (*gm)->graph();
  EXPECT_EQ(graph.size(), 4u);
  const Node* fused = graph.FindNode("conv");
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ((*gm)->FindModule(fused->target().name())->type().name(), "nni.ConvAddReLU2d");
  ASSERT_EQ(fused->num_args(), 2u);
  EXPECT_EQ(fused->arg(0).as_node(), graph.FindNode("x"));
  EXPECT_EQ(fused->arg(1).as_node(), graph.FindNode("identity"));
  for (const char* gone : {"bn", "add", "relu"}) EXPECT_EQ(graph.FindNode(gone), nullptr) << gone;
}

TEST(FuseCommandTest, BackendMatchingTheConfigsBaseIsAccepted) {
  CliResult r = RunFuselage({"fuse", kExample, "--backend=qnnpack", "--config", kResidualConfig,
                             "-o", TempPath("both.fsl")});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("conv_bn_add_relu: 1"));
}

TEST(FuseCommandTest, TimePrintsEveryStage) {
  CliResult r =
      RunFuselage({"fuse", kExample, "--backend=native", "-o", TempPath("t.fsl"), "--time"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(TimedSteps(r.out),
            (std::vector<std::string>{"load", "matcher", "match", "fuse", "verify", "save"}));
}

TEST(FuseCommandTest, ProfileCountsAttemptsAndMatchesPerPattern) {
  CliResult r =
      RunFuselage({"fuse", kExample, "--backend=native", "-o", TempPath("p.fsl"), "--profile"});
  ASSERT_EQ(r.code, 0) << r.err;
  // Rows: pattern, attempts, matches, ms alone. Each pattern tried here was tried once.
  std::vector<std::string> tried;
  for (const std::string& line : Lines(r.out)) {
    if (line.empty() || line[0] != '(') continue;
    const size_t end = line.find("  ");
    ASSERT_NE(end, std::string::npos) << line;
    std::vector<std::string> numbers = absl::StrSplit(line.substr(end), ' ', absl::SkipEmpty());
    ASSERT_EQ(numbers.size(), 3u) << line;
    const std::string pattern = line.substr(0, end);
    EXPECT_EQ(numbers[0], "1") << pattern;
    EXPECT_EQ(numbers[1], pattern == "(nn.BatchNorm2d, nn.Conv2d)" ? "1" : "0") << pattern;
    tried.push_back(pattern);
  }
  // 9 ReLU-outermost patterns at relu, plus conv-bn at bn.
  EXPECT_EQ(tried.size(), 10u) << r.out;
  EXPECT_THAT(r.out, HasSubstr(" patterns never tried (their outermost op is not in the graph)"));
}

// With the residual config, conv_bn_add_relu wins at relu and takes bn and conv, which
// the native conv-bn pattern alone would have matched at bn: one overlap. With native
// alone nothing overlaps (no ReLU pattern matches at relu).
TEST(FuseCommandTest, ReportOverlapsNamesWinnerLoserAndSharedNodes) {
  CliResult r = RunFuselage({"fuse", kExample, std::string("--config=") + kResidualConfig, "-o",
                             TempPath("o.fsl"), "--report-overlaps"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_GE(lines.size(), 2u) << r.out;
  EXPECT_THAT(lines[0], HasSubstr("; wrote "));
  EXPECT_EQ(lines[1],
            "  overlap: conv_bn_add_relu at relu took bn, conv from (nn.BatchNorm2d, nn.Conv2d) "
            "at bn");

  CliResult native = RunFuselage(
      {"fuse", kExample, "--backend=native", "-o", TempPath("n.fsl"), "--report-overlaps"});
  ASSERT_EQ(native.code, 0) << native.err;
  EXPECT_THAT(native.out, Not(HasSubstr("overlap:")));
}

TEST(FuseCommandTest, UsageMistakesExit2) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"fuse", kExample, "--backend=native"},                    // no -o
           {"fuse", kExample, "-o", TempPath("x.fsl")},                // no backend
           {"fuse", "--backend=native", "-o", TempPath("x.fsl")},      // no model
           {"fuse", kExample, "--backend=", "-o", TempPath("x.fsl")},  // empty name
           {"fuse", kExample, "--backend=native", "-o", TempPath("x.fsl"), "--fast"}}) {
    CliResult r = RunFuselage(args);
    EXPECT_EQ(r.code, 2) << args.back() << ": " << r.err;
    EXPECT_THAT(r.err, StartsWith("fuselage: "));
  }
  // Fuse's own wording of a missing -o (not quantize's "the model"); an unknown flag is named.
  EXPECT_EQ(RunFuselage({"fuse", kExample, "--backend=native"}).err,
            "fuselage: fuse: needs -o OUT, the file to write the fused model to\n");
  EXPECT_EQ(
      RunFuselage({"fuse", kExample, "--backend=native", "-o", TempPath("x.fsl"), "--fast"}).err,
      "fuselage: fuse: unknown flag '--fast'\n");
}

TEST(FuseCommandTest, BadInputExits1NamingItAndWritesNothing) {
  const std::string out_path = TempPath("never.fsl");
  std::remove(out_path.c_str());
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  for (const Case& c : std::vector<Case>{
           {{"fuse", kExample, "--backend=tpu", "-o", out_path}, "tpu"},
           {{"fuse", "no/such/model.fsl", "--backend=native", "-o", out_path}, "no/such/model.fsl"},
           {{"fuse", kExample, "--config=no/such.textproto", "-o", out_path}, "no/such.textproto"},
           {{"fuse", kExample, "--backend=native", "--config", kResidualConfig, "-o", out_path},
            "extends backend 'qnnpack', not --backend=native"}}) {
    CliResult r = RunFuselage(c.args);
    EXPECT_EQ(r.code, 1) << c.expected;
    EXPECT_THAT(r.err, StartsWith("fuselage: "));
    EXPECT_THAT(r.err, HasSubstr(c.expected));
    EXPECT_FALSE(FileExists(out_path)) << c.expected;
  }
}

TEST(ExplainCommandTest, NativeSaysWhyEveryReluPatternFailsAtRelu) {
  CliResult r = RunFuselage({"explain", kExample, "--backend=native"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("backend native, 7 nodes, 9 partial matches:\n"));
  EXPECT_THAT(r.out, HasSubstr("(nn.ReLU, (nn.BatchNorm2d, nn.Conv2d)) at relu: nn.ReLU → arg 0 "
                               "(add): is call_function operator.add; expected "
                               "nn.BatchNorm2d\n"));
  EXPECT_THAT(r.out, HasSubstr("(nn.ReLU, nn.Linear) at relu: nn.ReLU → arg 0 (add): is "
                               "call_function operator.add; expected nn.Linear\n"));
  EXPECT_THAT(r.out, HasSubstr("matches per pattern:\n"));
  EXPECT_THAT(r.out, HasSubstr("  (nn.BatchNorm2d, nn.Conv2d): 1\n"));
  EXPECT_THAT(r.out, HasSubstr("  (nn.ReLU, (nn.BatchNorm2d, nn.Conv2d)): 0\n"));
  // Every failure line is at relu: no other node starts a pattern that fails.
  int failure_lines = 0;
  for (const std::string& line : Lines(r.out)) {
    if (line.find(" at ") == std::string::npos) continue;
    ++failure_lines;
    EXPECT_THAT(line, HasSubstr(" at relu: nn.ReLU → arg 0 (add)"));
  }
  EXPECT_EQ(failure_lines, 9);
}

TEST(ExplainCommandTest, ResidualConfigMatchesAndLeavesNothingPartial) {
  CliResult r = RunFuselage({"explain", kExample, "--config", kResidualConfig});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("backend qnnpack_conv_bn_add_relu, 7 nodes, 0 partial "
                                "matches:\nmatches per pattern:\n"));
  EXPECT_THAT(r.out, HasSubstr("  conv_bn_add_relu: 1\n"));
  EXPECT_THAT(r.out, HasSubstr("  (nn.BatchNorm2d, nn.Conv2d): 0\n"));
}

TEST(ExplainCommandTest, DoesNotChangeTheModelAndRejectsMistakes) {
  CliResult r = RunFuselage({"explain", kExample});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--backend=NAME or --config=FILE"));
  r = RunFuselage({"explain", "no/such/model.fsl", "--backend=native"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("no/such/model.fsl"));
  // Explain is read-only: the example still has its 7 unfused nodes afterwards.
  ASSERT_EQ(RunFuselage({"explain", kExample, "--backend=native"}).code, 0);
  EXPECT_THAT(RunFuselage({"verify", kExample}).out, HasSubstr("(7 nodes"));
}

}  // namespace
}  // namespace fuselage
