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
  // An output arg nested 64 lists deep: past the parser's recursion limit
  // (2 * max_arg_depth + 16 = 48 messages). Today the loader's own wire-format walk
  // (LengthsFit) rejects it before protobuf parses, so protobuf never gets to log; the case
  // stays so that a change of that order cannot make the loader noisy again.
  GraphModule gm;
  Node* x = *gm.graph().AddPlaceholder("x");
  Argument nested(x);
  for (int i = 0; i < 64; ++i) nested = Argument::List({nested});
  ASSERT_TRUE(gm.graph().SetOutput(nested).ok());
  const std::string bytes = SerializeModel(gm);
  testing::internal::CaptureStderr();
  absl::StatusOr<std::unique_ptr<GraphModule>> loaded = ParseModel(bytes);
  const std::string logged = testing::internal::GetCapturedStderr();
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(loaded.status().message(), "protobuf parse failed"))
      << loaded.status();
  EXPECT_EQ(logged, "") << "protobuf logged while the loader reported the error itself";
}

}  // namespace
}  // namespace fuselage
