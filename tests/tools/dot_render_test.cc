// `fuselage dot MODEL -o FILE.svg|.png`: rendered by Graphviz's `dot` (found on PATH) into
// a temporary folder, then written atomically; a missing or failing `dot` is one clear
// error and leaves the old FILE as it was. `-o FILE.dot` still writes DOT text.
#include <stdlib.h>
#include <sys/stat.h>

#include <dirent.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "graph/file_io.h"
#include "gtest/gtest.h"
#include "tests/tools/run_cli.h"

namespace fuselage {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kExample[] = "tools/examples/residual.textproto";

// Sets an environment variable for one scope, then puts the old value back.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    const char* old = getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

// A fresh empty folder under the test's scratch directory.
std::string MakeFolder(const std::string& name) {
  const std::string path = TempPath(name);
  mkdir(path.c_str(), 0755);
  return path;
}

int CountEntries(const std::string& folder) {
  DIR* dir = opendir(folder.c_str());
  if (dir == nullptr) return -1;
  int count = 0;
  while (dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") ++count;
  }
  closedir(dir);
  return count;
}

TEST(DotRenderTest, SvgIsAValidPictureNamingEveryNode) {
  const std::string scratch = MakeFolder("svg_tmp");
  ScopedEnv tmpdir("TMPDIR", scratch);
  const std::string path = TempPath("residual.svg");
  CliResult r = RunFuselage({"dot", kExample, "-o", path});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, absl::StrCat("wrote ", path, " (7 nodes)\n"));
  const std::string svg = FileContents(path);
  EXPECT_THAT(svg, StartsWith("<?xml"));
  EXPECT_THAT(svg, HasSubstr("<svg "));
  EXPECT_THAT(svg, EndsWith("</svg>\n"));
  // Graphviz titles each node's group with the node's name.
  for (const char* node : {"x", "identity", "conv", "bn", "add", "relu", "output"}) {
    EXPECT_THAT(svg, HasSubstr(absl::StrCat("<title>", node, "</title>"))) << node;
  }
  EXPECT_THAT(svg, HasSubstr("<title>bn&#45;&gt;add</title>"));  // the edge bn -> add
  EXPECT_THAT(svg, HasSubstr("type: nn.BatchNorm2d"));
  EXPECT_THAT(svg, HasSubstr("legend"));
  // The scratch folder dot worked in is gone.
  EXPECT_EQ(CountEntries(scratch), 0);
}

TEST(DotRenderTest, PngIsAPngImage) {
  const std::string path = TempPath("residual.png");
  CliResult r = RunFuselage({"dot", kExample, "-o", path});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(FileContents(path), StartsWith("\x89PNG\r\n\x1a\n"));
}

TEST(DotRenderTest, DotExtensionStillWritesDotText) {
  const std::string path = TempPath("residual.gv");
  CliResult r = RunFuselage({"dot", kExample, "-o", path});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(FileContents(path), StartsWith("digraph GraphModule {\n"));
}

TEST(DotRenderTest, MissingDotIsAClearErrorAndLeavesTheOldFile) {
  const std::string path = TempPath("kept.svg");
  ASSERT_TRUE(WriteFileAtomically(path, "old picture").ok());
  ScopedEnv no_dot("PATH", MakeFolder("empty_path"));
  CliResult r = RunFuselage({"dot", kExample, "-o", path});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, StartsWith("fuselage: dot: drawing a .svg needs Graphviz's `dot` program "
                                "on PATH"));
  EXPECT_THAT(r.err, HasSubstr("apt-get install graphviz"));
  EXPECT_EQ(FileContents(path), "old picture");
}

TEST(DotRenderTest, FailingDotIsAnErrorWithItsMessage) {
  const std::string bin = MakeFolder("failing_dot");
  {
    std::ofstream script(bin + "/dot");
    script << "#!/bin/sh\necho 'Error: this dot is broken' >&2\nexit 3\n";
  }
  chmod((bin + "/dot").c_str(), 0755);
  const std::string path = TempPath("failed.svg");
  ASSERT_TRUE(WriteFileAtomically(path, "old picture").ok());
  ScopedEnv fake_dot("PATH", bin);
  CliResult r = RunFuselage({"dot", kExample, "-o", path});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err,
            "fuselage: dot: Graphviz's `dot -Tsvg` failed (exit code 3): Error: this dot is "
            "broken\n");
  EXPECT_EQ(FileContents(path), "old picture");
}

}  // namespace
}  // namespace fuselage
