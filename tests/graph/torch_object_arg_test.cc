// Torch-object args (an opaque aten call's `device=cpu`, `memory_format=torch.channels_last`):
// the Argument kind, its rendering as Python spells it, the model file and its loader checks.
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "graph/argument.h"
#include "graph/graph_module.h"
#include "graph/printer.h"
#include "graph/serialization.h"
#include "gtest/gtest.h"

namespace fuselage {
namespace {

using ::testing::HasSubstr;

// forward(x): arange = aten.arange.default(6, device=<device>); contiguous = ...
std::string WithDevice(const std::string& device_arg) {
  return absl::StrCat(R"pb(
    format_version: 1
    graph {
      nodes { name: "x" op: PLACEHOLDER target: "x" }
      nodes {
        name: "arange" op: CALL_FUNCTION target: "aten.arange.default"
        args { int_value: 6 }
        kwargs { name: "device" value { )pb", device_arg, R"pb( } }
      }
      nodes {
        name: "contiguous" op: CALL_FUNCTION target: "aten.contiguous.default"
        args { node: "x" }
        kwargs { name: "memory_format" value { torch_object: "memory_format:channels_last" } }
      }
      nodes { name: "output" op: OUTPUT target: "output"
              args { tuple { items { node: "arange" } items { node: "contiguous" } } } }
    }
    root { type: "GraphModule" })pb");
}

TEST(TorchObjectArgTest, KindsAndRendering) {
  const Argument cpu = Argument::TorchObject("device:cpu");
  EXPECT_TRUE(cpu.is_torch_object());
  EXPECT_FALSE(cpu.is_string());
  EXPECT_EQ(cpu.as_torch_object(), "device:cpu");
  EXPECT_EQ(cpu, Argument::TorchObject("device:cpu"));
  EXPECT_NE(cpu, Argument::TorchObject("device:cuda:0"));
  EXPECT_NE(cpu, Argument::String("device:cpu"));  // not the string of its text
  EXPECT_EQ(cpu.ToString(), "torch.device('cpu')");
  EXPECT_EQ(PythonRepr(Argument::TorchObject("memory_format:channels_last")),
            "torch.channels_last");
  EXPECT_EQ(Argument::TorchObject("layout:strided").ToString(), "torch.strided");
}

TEST(TorchObjectArgTest, ValidTextsAreATypeAndAName) {
  for (const char* text : {"device:cpu", "device:cuda:0", "layout:strided",
                           "memory_format:channels_last_3d"})
    EXPECT_TRUE(IsTorchObjectText(text)) << text;
  for (const char* text : {"", "cpu", "device:", "tensor:x", "layout:a.b", "layout:cuda:0",
                           "memory_format:torch.channels_last", "device:cpu'); import os #"})
    EXPECT_FALSE(IsTorchObjectText(text)) << text;
}

TEST(TorchObjectArgTest, LoadsPrintsAndRoundTrips) {
  auto gm = ParseModelText(WithDevice("torch_object: \"device:cpu\""));
  ASSERT_TRUE(gm.ok()) << gm.status();
  ASSERT_TRUE((*gm)->graph().Verify().ok());
  // What torch.fx prints for the same calls.
  EXPECT_THAT(PrintCode(**gm), HasSubstr("device = torch.device('cpu')"));
  EXPECT_THAT(PrintCode(**gm), HasSubstr("memory_format = torch.channels_last"));
  auto again = ParseModel(SerializeModel(**gm));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(SerializeModelText(**again), SerializeModelText(**gm));
  const Node* arange = (*again)->graph().FindNode("arange");
  ASSERT_EQ(arange->kwargs().size(), 1u);
  EXPECT_EQ(arange->kwargs()[0].second, Argument::TorchObject("device:cpu"));
}

TEST(TorchObjectArgTest, LoaderRejectsTextsThatNameNoTorchObject) {
  for (const char* text : {"cpu", "device:", "tensor:x", "layout:a.b"}) {
    auto result = ParseModelText(WithDevice(absl::StrCat("torch_object: \"", text, "\"")));
    ASSERT_FALSE(result.ok()) << text;
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(result.status().message()),
                HasSubstr(absl::StrCat("node 'arange' kwargs['device']: field 'torch_object' is '",
                                       text, "'; expected device:<device>, layout:<name> or "
                                       "memory_format:<name>")));
  }
}

}  // namespace
}  // namespace fuselage
