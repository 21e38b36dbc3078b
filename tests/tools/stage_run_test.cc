// StageRun (tools/stage_run.h), the command line, load, verify, save and --time lines
// the stage commands share, checked on its own: the order of its usage errors, the
// messages the commands print (tests/tools/stage_commands_test.cc and
// fuse_explain_test.cc check them through the CLI), the steps it times, the file it
// writes against the model it was given, and a graph that fails Verify is not written.
#include "tools/stage_run.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "graph/file_io.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"
#include "tests/tools/run_cli.h"

namespace fuselage {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kExample[] = "tools/examples/residual.textproto";

Command Named(const std::string& name) {
  Command command;
  command.name = name;
  command.usage = name + " MODEL -o OUT";
  return command;
}

absl::Status ParseError(const std::vector<std::string>& args, const StageFlags& flags = {}) {
  return StageRun::Parse(Named("stage"), args, flags).status();
}

TEST(StageRunTest, UsageErrorsComeInOrderFlagsOperandsOutput) {
  absl::Status s = ParseError({"--bogus"});  // also no operand and no -o
  EXPECT_TRUE(IsUsageError(s)) << s;
  EXPECT_EQ(s.message(), "stage: unknown flag '--bogus'");
  s = ParseError({});  // also no -o
  EXPECT_TRUE(IsUsageError(s)) << s;
  EXPECT_EQ(s.message(), "stage: expected 1 operand, got 0; usage: fuselage stage MODEL -o OUT");
  s = ParseError({"m.fsl"});
  EXPECT_TRUE(IsUsageError(s)) << s;
  EXPECT_EQ(s.message(), "stage: needs -o OUT, the file to write the model to");
  s = ParseError({"m.fsl", "-o", ""});
  EXPECT_EQ(s.message(), "stage: needs -o OUT, the file to write the model to");
  StageFlags fused;
  fused.output_noun = "fused model";
  EXPECT_EQ(ParseError({"m.fsl"}, fused).message(),
            "stage: needs -o OUT, the file to write the fused model to");
}

TEST(StageRunTest, TimeIsAFlagOnlyOfTimedCommands) {
  EXPECT_TRUE(ParseError({"m.fsl", "-o", "out.fsl", "--time"}).ok());
  StageFlags untimed;
  untimed.timed = false;
  EXPECT_EQ(ParseError({"m.fsl", "-o", "out.fsl", "--time"}, untimed).message(),
            "stage: unknown flag '--time'");
}

TEST(StageRunTest, KeepsOperandOutputAndTheCommandsOwnFlagsAsTyped) {
  StageFlags flags{{{{"--backend"}, true}, {{"--reference"}, false}}};
  auto stage = StageRun::Parse(
      Named("stage"), {"--backend=qnnpack", "dir/m.fsl", "--output", "out.fsl", "--reference"},
      flags);
  ASSERT_TRUE(stage.ok()) << stage.status();
  EXPECT_EQ(stage->input(), "dir/m.fsl");
  EXPECT_EQ(stage->output(), "out.fsl");
  EXPECT_EQ(stage->parsed().flags.at("--backend"), "qnnpack");
  EXPECT_TRUE(stage->parsed().Has("--reference"));
  EXPECT_FALSE(stage->parsed().Has("--time"));
}

TEST(StageRunTest, LoadsTimesVerifiesAndSavesWhereTheContextSays) {
  // The model operand and -o are both relative to the context's working directory.
  ASSERT_TRUE(WriteFileAtomically(TempPath("in.textproto"), FileContents(kExample)).ok());
  auto stage = StageRun::Parse(Named("stage"), {"in.textproto", "-o", "out.fsl", "--time"}, {});
  ASSERT_TRUE(stage.ok()) << stage.status();
  std::ostringstream out;
  CommandContext context{out, TempDir()};

  auto gm = stage->LoadInput(context);
  ASSERT_TRUE(gm.ok()) << gm.status();
  stage->times().Start();
  stage->times().Stop("pass");
  ASSERT_TRUE(stage->VerifyAndSave(context, **gm, "the graph").ok());

  auto saved = LoadModel(TempPath("out.fsl"));
  ASSERT_TRUE(saved.ok()) << saved.status();
  auto original = LoadModel(kExample);
  ASSERT_TRUE(original.ok()) << original.status();
  EXPECT_EQ(SerializeModel(**saved), SerializeModel(**original));

  std::ostringstream printed;
  stage->PrintTimes(printed);
  const std::string times = printed.str();
  EXPECT_THAT(TimedSteps(times), ElementsAre("load", "pass", "verify", "save"));
  EXPECT_EQ(std::count(times.begin(), times.end(), '\n'), 4);  // nothing else
  EXPECT_EQ(out.str(), "");  // the command prints its report itself
}

TEST(StageRunTest, NoTimeLinesWithoutTime) {
  auto stage = StageRun::Parse(Named("stage"), {kExample, "-o", TempPath("quiet.fsl")}, {});
  ASSERT_TRUE(stage.ok()) << stage.status();
  std::ostringstream out;
  CommandContext context{out, ""};
  auto gm = stage->LoadInput(context);
  ASSERT_TRUE(gm.ok()) << gm.status();
  ASSERT_TRUE(stage->Save(context, **gm).ok());
  EXPECT_TRUE(LoadModel(TempPath("quiet.fsl")).ok());
  stage->PrintTimes(out);
  EXPECT_EQ(out.str(), "");
}

TEST(StageRunTest, MissingInputNamesTheFile) {
  auto stage = StageRun::Parse(Named("stage"), {"no/such.fsl", "-o", TempPath("x.fsl")}, {});
  ASSERT_TRUE(stage.ok()) << stage.status();
  std::ostringstream out;
  CommandContext context{out, ""};
  auto gm = stage->LoadInput(context);
  ASSERT_FALSE(gm.ok());
  EXPECT_FALSE(IsUsageError(gm.status()));
  EXPECT_THAT(std::string(gm.status().message()), HasSubstr("'no/such.fsl'"));
}

TEST(StageRunTest, AGraphThatFailsVerifyIsAnInternalErrorAndIsNotWritten) {
  const std::string path = TempPath("broken.fsl");
  std::remove(path.c_str());
  auto stage = StageRun::Parse(Named("stage"), {kExample, "-o", path}, {});
  ASSERT_TRUE(stage.ok()) << stage.status();
  std::ostringstream out;
  CommandContext context{out, ""};
  auto gm = stage->LoadInput(context);
  ASSERT_TRUE(gm.ok()) << gm.status();
  // Node "conv" still calls the module removed here, from the module tree directly
  // (GraphModule::RemoveModule would refuse): a broken graph, as a buggy pass could leave.
  ASSERT_NE((*gm)->root().RemoveChild("conv"), nullptr);
  ASSERT_FALSE((*gm)->Verify().ok());

  absl::Status s = stage->VerifyAndSave(context, **gm, "fused graph");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(s.message()), StartsWith("fused graph fails Verify (a fuselage bug): "));
  EXPECT_THAT(std::string(s.message()), HasSubstr(std::string((*gm)->Verify().message())));
  EXPECT_FALSE(ReadFileBounded(path, 1 << 20).ok()) << "a graph failing Verify was written";
}

}  // namespace
}  // namespace fuselage
