// The CLI side of issue 22 items 7, 9 and 10: what `--config` and `verify` report, and that
// the report is the one `fuselage:` line on stderr (nothing from protobuf's logger).
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/tools/run_cli.h"
#include "tools/cli.h"

namespace fuselage {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kExample[] = "tools/examples/residual.textproto";

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = TempPath(name);
  std::ofstream(path) << text;
  return path;
}

// Runs the CLI with the process's real stderr captured too: the CLI's own message goes to
// r.err; anything else (protobuf's logger writes straight to fd 2) lands in `logged`.
CliResult RunCapturingStderr(const std::vector<std::string>& args, std::string* logged) {
  ::testing::internal::CaptureStderr();
  CliResult r = RunFuselage(args);
  *logged = ::testing::internal::GetCapturedStderr();
  return r;
}

// Exactly one line, the CLI's `fuselage: ...` message.
void ExpectOneFuselageLine(const CliResult& r, const std::string& logged) {
  EXPECT_EQ(logged, "");
  const std::vector<std::string> lines = absl::StrSplit(r.err, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_THAT(lines[0], StartsWith("fuselage: "));
}

// Item 10: a config that does not parse, given with --backend, used to print 1-3
// `[libprotobuf ERROR ...]` lines before the `fuselage:` line.
TEST(ConfigFlagTest, ABadConfigWithBackendGivesOneLine) {
  const std::string config = WriteTemp("bad.textproto", "base: \"qnnpack\"\npattern { nme: 1 }\n");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"fuse", kExample, "--backend=qnnpack", "--config=" + config,
                                 "-o", TempPath("out.pb")},
        std::vector<std::string>{"explain", kExample, "--backend=qnnpack", "--config=" + config}}) {
    std::string logged;
    const CliResult r = RunCapturingStderr(args, &logged);
    EXPECT_EQ(r.code, kExitFailure);
    ExpectOneFuselageLine(r, logged);
    EXPECT_THAT(r.err, HasSubstr("bad.textproto: line 2"));
  }
}

// Item 1 at the CLI: an entry name with invalid UTF-8 is refused at load (it used to give
// exit 0 and a model file that did not load).
TEST(ConfigFlagTest, AnInvalidUtf8EntryNameIsRefused) {
  const std::string config = WriteTemp("utf8.textproto", R"pb(
    base: "qnnpack"
    pattern {
      name: "conv\377relu"
      pattern: "(ReLU, (add, (BatchNorm2d, Conv2d), MatchAllNode))"
      fuser: FOLD_BN_THEN_WRAP fused_module: "ConvAddReLU2d" root: "0.0.0" extra_input: "0.1"
    })pb");
  std::string logged;
  const CliResult r = RunCapturingStderr(
      {"fuse", kExample, "--config=" + config, "-o", TempPath("utf8_out.pb")}, &logged);
  EXPECT_EQ(r.code, kExitFailure);
  ExpectOneFuselageLine(r, logged);
  EXPECT_THAT(r.err, HasSubstr("pattern[0]: field 'name'"));
  EXPECT_THAT(r.err, HasSubstr("not valid UTF-8"));
}

// Item 7: /dev/zero was read as an empty config (sized with tellg).
TEST(ConfigFlagTest, DevZeroIsRefusedAtTheSizeLimit) {
  const CliResult r = RunFuselage({"fuse", kExample, "--config=/dev/zero", "-o", TempPath("z.pb")});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_THAT(r.err, HasSubstr("/dev/zero"));
  EXPECT_THAT(r.err, HasSubstr("16777216"));
}

// Item 9: a call_function target no kernel or schema knows loaded and verified.
TEST(VerifyCommandTest, AnUnknownFunctionTargetFails) {
  const std::string model = WriteTemp("typo.textproto", R"pb(
    format_version: 1
    graph {
      nodes { name: "x" op: PLACEHOLDER target: "x" }
      nodes { name: "add" op: CALL_FUNCTION target: "opgrator.add" args { node: "x" } args { node: "x" } }
      nodes { name: "output" op: OUTPUT target: "output" args { node: "add" } }
    }
    root { type: "GraphModule" })pb");
  const CliResult bad = RunFuselage({"verify", model});
  EXPECT_EQ(bad.code, kExitFailure);
  EXPECT_THAT(bad.err, HasSubstr("node 'add': call_function target 'opgrator.add' is not a known function"));

  std::string good_text = FileContents(model);
  good_text.replace(good_text.find("opgrator"), 8, "operator");
  const CliResult good = RunFuselage({"verify", WriteTemp("fixed.textproto", good_text)});
  EXPECT_EQ(good.code, kExitOk) << good.err;
  EXPECT_THAT(good.out, HasSubstr(": ok (3 nodes"));
}

// Item 9: a conv whose stride is 0 loaded and verified, and only `run` refused it.
TEST(VerifyCommandTest, AConvWithStrideZeroFails) {
  std::string text = FileContents(kExample);
  ASSERT_EQ(RunFuselage({"verify", kExample}).code, kExitOk);
  const size_t stride = text.find("name: \"stride\"");
  ASSERT_NE(stride, std::string::npos);
  const size_t value = text.find("int_value: 1", stride);
  ASSERT_NE(value, std::string::npos);
  text.replace(value, 12, "int_value: 0");
  const CliResult r = RunFuselage({"verify", WriteTemp("stride0.textproto", text)});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_THAT(r.err, HasSubstr("(nn.Conv2d): attribute 'stride'"));
  EXPECT_THAT(r.err, HasSubstr("expected every entry >= 1"));
}

}  // namespace
}  // namespace fuselage
