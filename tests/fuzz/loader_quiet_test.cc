// The model loader reports a hostile file through its status only: protobuf must not log
// "[libprotobuf ERROR ...]" lines to stderr on the way (graph/serialization.cc silences it
// around the parse). Each case checks the error first, so the test cannot pass by a file
// that happened to load.
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "graph/argument.h"
#include "graph/graph.h"
#include "graph/graph_module.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"

namespace fuselage {
namespace {

// The bytes of a valid model with one placeholder named `name`, returned as its output.
std::string ModelWithPlaceholder(const std::string& name) {
  GraphModule gm;
  absl::StatusOr<Node*> x = gm.graph().AddPlaceholder(name);
  EXPECT_TRUE(x.ok()) << x.status();
  absl::StatusOr<Node*> out = gm.graph().SetOutput(Argument(*x));
  EXPECT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(gm.Verify().ok());
  return SerializeModel(gm);
}

// `bytes` with every occurrence of `from` replaced by `to` (same length, so every declared
// length in the wire format stays right).
std::string Patch(std::string bytes, const std::string& from, const std::string& to) {
  EXPECT_EQ(from.size(), to.size());
  int replaced = 0;
  for (size_t at = bytes.find(from); at != std::string::npos; at = bytes.find(from, at)) {
    bytes.replace(at, from.size(), to);
    ++replaced;
  }
  EXPECT_GT(replaced, 0) << "'" << from << "' is not in the model bytes";
  return bytes;
}

TEST(LoaderQuietTest, TheProbeModelLoadsUnpatched) {
  // The control: without the patch the same bytes load, so the failures below come from
  // the patched strings alone.
  const std::string bytes = ModelWithPlaceholder("utf8probe");
  absl::StatusOr<std::unique_ptr<GraphModule>> loaded = ParseModel(bytes);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->graph().Placeholders().size(), 1u);
}

TEST(LoaderQuietTest, InvalidUtf8NameIsAnErrorWithoutProtobufLog) {
  // "\xff" never occurs in UTF-8; "\xc3(" is a lead byte without its continuation.
  for (const std::string& bad : {std::string("utf8prob\xff"), std::string("utf8pro\xc3(")}) {
    const std::string bytes = Patch(ModelWithPlaceholder("utf8probe"), "utf8probe", bad);
    testing::internal::CaptureStderr();
    absl::StatusOr<std::unique_ptr<GraphModule>> loaded = ParseModel(bytes);
    const std::string logged = testing::internal::GetCapturedStderr();
    ASSERT_FALSE(loaded.ok());
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(loaded.status().message(), "not valid UTF-8"))
        << loaded.status();
    EXPECT_EQ(logged, "") << "protobuf logged while the loader reported the error itself";
  }
}

TEST(LoaderQuietTest, TooDeeplyNestedArgsAreAnErrorWithoutProtobufLog) {
  // An output arg nested 64 lists deep is within protobuf's recursion limit (derived from
  // ModelLimits' module and arg depths, so every model within the limits parses) and is
  // refused by the loader's own check, naming the node; one nested 200 deep is past that
  // limit and refused by the loader's wire-format walk (LengthsFit) before protobuf parses.
  // Either way protobuf never gets to log.
  for (const int depth : {64, 200}) {
    SCOPED_TRACE(depth);
    GraphModule gm;
    Node* x = *gm.graph().AddPlaceholder("x");
    Argument nested(x);
    for (int i = 0; i < depth; ++i) nested = Argument::List({nested});
    ASSERT_TRUE(gm.graph().SetOutput(nested).ok());
    const std::string bytes = SerializeModel(gm);
    testing::internal::CaptureStderr();
    absl::StatusOr<std::unique_ptr<GraphModule>> loaded = ParseModel(bytes);
    const std::string logged = testing::internal::GetCapturedStderr();
    ASSERT_FALSE(loaded.ok());
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(loaded.status().message(),
                                  depth == 64 ? "node 'output' args[0]" : "protobuf parse failed"))
        << loaded.status();
    EXPECT_EQ(logged, "") << "protobuf logged while the loader reported the error itself";
  }
}

}  // namespace
}  // namespace fuselage
